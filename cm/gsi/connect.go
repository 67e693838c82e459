package gsi

import (
	"encoding/binary"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/roce"
)

// minRNRTimer is the RNR NAK timer code a CM-connected RC QP asks for.
const minRNRTimer = 12

// ConnectAttr turns what the CM negotiated for a connection over a goroce
// device into the attributes of (*roce.QP).Connect, as librdmacm's
// rdma_init_qp_attr fills them for RTR and RTS: the path from the REQ (hop
// limit, traffic class, flow label and the UDP source port rxe derives from
// it), the PSNs and READ/atomic depths of the REQ/REP, the retry counts and
// the local ACK timeout. access is the QP's remote access (INIT) and sgidIndex
// the local GID the device sends from.
func ConnectAttr(q cm.QPParams, sgidIndex int, access roce.Access) roce.ConnectAttr {
	return roce.ConnectAttr{AccessFlags: access,
		AV: roce.AddressVector{DGID: q.RemoteAddr, SGIDIndex: uint8(sgidIndex), HopLimit: q.HopLimit,
			TrafficClass: q.TrafficClass, FlowLabel: q.FlowLabel, SrcPort: q.UDPSourcePort, IsGlobal: true},
		PathMTU: roce.MTU(q.PathMTU), DestQPN: q.RemoteQPN, RQPSN: q.RQPSN,
		MaxDestRDAtomic: q.MaxDestRdAtomic, MinRNRTimer: minRNRTimer,
		SQPSN: q.SQPSN, Timeout: q.Timeout, RetryCnt: q.RetryCount, RNRRetry: q.RNRRetry, MaxRDAtomic: q.MaxRdAtomic}
}

// CAGUID is the CA GUID a CM on dev puts in REQ and REP: the EUI-64 of its
// link-local GID (index 0), as rxe's node GUID, or 0 without one.
func CAGUID(dev *roce.Device) uint64 {
	g, err := dev.QueryGID(0)
	if err != nil {
		return 0
	}
	b := [16]byte(g)
	if b[0] != 0xfe || b[1] != 0x80 {
		return 0
	}
	return binary.BigEndian.Uint64(b[8:])
}
