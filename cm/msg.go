package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// Private data capacity of each message (ib_cm.h enum ib_cm_data_size). The
// wire carries no length: a message always holds exactly this many bytes, and
// a shorter PrivateData is sent zero-padded.
const (
	REQPrivateDataLen     = 92
	MRAPrivateDataLen     = 222
	REJPrivateDataLen     = 148
	REPPrivateDataLen     = 196
	RTUPrivateDataLen     = 224
	DREQPrivateDataLen    = 220
	DREPPrivateDataLen    = 224
	SIDRREQPrivateDataLen = 216
	SIDRREPPrivateDataLen = 136
	REJARILen             = 72 // additional reject information
	SIDRREPInfoLen        = 72 // SIDR_REP additional information
)

// ErrPrivateDataTooLong is returned by Marshal when private data exceeds the
// message's capacity.
var ErrPrivateDataTooLong = errors.New("cm: private data too long")

// GID is a 128-bit InfiniBand global identifier. On RoCEv2 it is the IP
// address: an IPv6 address, or an IPv4 address in IPv4-mapped form
// (::ffff:a.b.c.d).
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID {
	return GID(netip.AddrFrom16(a.As16()).As16())
}

// Addr returns the IP address of a RoCEv2 GID, unmapping IPv4.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// String formats g as its IP address.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

func get24(b []byte) uint32 { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }

func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

func b2u(v bool) uint8 {
	if v {
		return 1
	}
	return 0
}

func putPrivate(name string, dst, p []byte) error {
	if len(p) > len(dst) {
		return fmt.Errorf("%w: %s carries at most %d bytes, got %d", ErrPrivateDataTooLong, name, len(dst), len(p))
	}
	copy(dst, p)
	return nil
}

func getPrivate(src []byte) []byte { return append([]byte(nil), src...) }

// Path is one path of a REQ (primary at body offset 52, alternate at 96;
// IBA Table 106). On RoCE the LIDs are 0xFFFF (permissive) and the GIDs are
// the IP addresses.
//
//	 0 LocalLID (16)          | 2 RemoteLID (16)
//	 4 LocalGID (128)
//	20 RemoteGID (128)
//	36 FlowLabel (20) | resv (6) | PacketRate (6)
//	40 TrafficClass | 41 HopLimit | 42 SL(4) SubnetLocal(1) resv(3) | 43 LocalACKTimeout(5) resv(3)
type Path struct {
	LocalLID, RemoteLID uint16
	LocalGID, RemoteGID GID
	FlowLabel           uint32 // 20 bits
	PacketRate          uint8  // 6 bits
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8 // 4 bits
	SubnetLocal         bool
	LocalACKTimeout     uint8 // 5 bits; 4.096 µs × 2^t
}

const pathLen = 44

func (p *Path) put(b []byte) {
	binary.BigEndian.PutUint16(b[0:], p.LocalLID)
	binary.BigEndian.PutUint16(b[2:], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	binary.BigEndian.PutUint32(b[36:], (p.FlowLabel&0xFFFFF)<<12|uint32(p.PacketRate&0x3F))
	b[40] = p.TrafficClass
	b[41] = p.HopLimit
	b[42] = p.SL<<4 | b2u(p.SubnetLocal)<<3
	b[43] = p.LocalACKTimeout << 3
}

func (p *Path) get(b []byte) {
	p.LocalLID = binary.BigEndian.Uint16(b[0:])
	p.RemoteLID = binary.BigEndian.Uint16(b[2:])
	copy(p.LocalGID[:], b[4:20])
	copy(p.RemoteGID[:], b[20:36])
	w := binary.BigEndian.Uint32(b[36:])
	p.FlowLabel = w >> 12
	p.PacketRate = uint8(w & 0x3F)
	p.TrafficClass = b[40]
	p.HopLimit = b[41]
	p.SL = b[42] >> 4
	p.SubnetLocal = b[42]&0x08 != 0
	p.LocalACKTimeout = b[43] >> 3
}

// Transport service types carried in REQ (2 bits).
const (
	TransportRC = 0
	TransportUC = 1
	TransportRD = 2
)

// REQ is the connection request (IBA 12.6.5, Table 106). Body layout (byte
// offsets after the MAD header; bit fields MSB first):
//
//	  0 LocalCommID (32)
//	  4 resv (8) | 5 VendorID (24)
//	  8 ServiceID (64)
//	 16 LocalCAGUID (64)
//	 24 resv (32) | 28 LocalQKey (32)
//	 32 LocalQPN (24) | 35 ResponderResources (8)
//	 36 LocalEECN (24) | 39 InitiatorDepth (8)
//	 40 RemoteEECN (24) | 43 RemoteCMResponseTimeout (5) TransportServiceType (2) EndToEndFlowControl (1)
//	 44 StartingPSN (24) | 47 LocalCMResponseTimeout (5) RetryCount (3)
//	 48 PKey (16) | 50 PathMTU (4) RDCExists (1) RNRRetryCount (3) | 51 MaxCMRetries (4) SRQ (1) ExtendedTransportType (3)
//	 52 Primary path (44)
//	 96 Alternate path (44; its last byte also holds SAPSupported, bit 5)
//	140 PrivateData (92)
type REQ struct {
	LocalCommID             uint32
	VendorID                uint32 // 24 bits
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	TransportServiceType    uint8  // 2 bits: TransportRC, TransportUC
	EndToEndFlowControl     bool
	StartingPSN             uint32 // 24 bits
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PKey                    uint16
	PathMTU                 uint8 // 4 bits: 1=256 .. 5=4096
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtendedTransportType   uint8 // 3 bits
	Primary, Alternate      Path
	SAPSupported            bool
	PrivateData             []byte // at most REQPrivateDataLen
}

// AttrID returns AttrREQ.
func (*REQ) AttrID() AttrID { return AttrREQ }

func (m *REQ) marshal(b []byte) error {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	put24(b[5:], m.VendorID)
	binary.BigEndian.PutUint64(b[8:], m.ServiceID)
	binary.BigEndian.PutUint64(b[16:], m.LocalCAGUID)
	binary.BigEndian.PutUint32(b[28:], m.LocalQKey)
	put24(b[32:], m.LocalQPN)
	b[35] = m.ResponderResources
	put24(b[36:], m.LocalEECN)
	b[39] = m.InitiatorDepth
	put24(b[40:], m.RemoteEECN)
	b[43] = m.RemoteCMResponseTimeout<<3 | (m.TransportServiceType&3)<<1 | b2u(m.EndToEndFlowControl)
	put24(b[44:], m.StartingPSN)
	b[47] = m.LocalCMResponseTimeout<<3 | m.RetryCount&7
	binary.BigEndian.PutUint16(b[48:], m.PKey)
	b[50] = m.PathMTU<<4 | b2u(m.RDCExists)<<3 | m.RNRRetryCount&7
	b[51] = m.MaxCMRetries<<4 | b2u(m.SRQ)<<3 | m.ExtendedTransportType&7
	m.Primary.put(b[52:])
	m.Alternate.put(b[96:])
	b[139] |= b2u(m.SAPSupported) << 2
	return putPrivate("REQ", b[140:], m.PrivateData)
}

func (m *REQ) unmarshal(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.VendorID = get24(b[5:])
	m.ServiceID = binary.BigEndian.Uint64(b[8:])
	m.LocalCAGUID = binary.BigEndian.Uint64(b[16:])
	m.LocalQKey = binary.BigEndian.Uint32(b[28:])
	m.LocalQPN = get24(b[32:])
	m.ResponderResources = b[35]
	m.LocalEECN = get24(b[36:])
	m.InitiatorDepth = b[39]
	m.RemoteEECN = get24(b[40:])
	m.RemoteCMResponseTimeout = b[43] >> 3
	m.TransportServiceType = b[43] >> 1 & 3
	m.EndToEndFlowControl = b[43]&1 != 0
	m.StartingPSN = get24(b[44:])
	m.LocalCMResponseTimeout = b[47] >> 3
	m.RetryCount = b[47] & 7
	m.PKey = binary.BigEndian.Uint16(b[48:])
	m.PathMTU = b[50] >> 4
	m.RDCExists = b[50]&0x08 != 0
	m.RNRRetryCount = b[50] & 7
	m.MaxCMRetries = b[51] >> 4
	m.SRQ = b[51]&0x08 != 0
	m.ExtendedTransportType = b[51] & 7
	m.Primary.get(b[52:])
	m.Alternate.get(b[96:])
	m.SAPSupported = b[139]&0x04 != 0
	m.PrivateData = getPrivate(b[140:])
}

// Messages named by MRA and REJ (2 bits).
const (
	MsgREQ   = 0
	MsgREP   = 1
	MsgOther = 2 // LAP for MRA; anything else for REJ
)

// MRA is the message receipt acknowledgement (IBA Table 107): the peer got a
// REQ/REP/LAP and needs up to ServiceTimeout to answer, so the sender should
// stop retransmitting and wait longer.
//
//	0 LocalCommID | 4 RemoteCommID | 8 MessageMRAed (2) resv (6) | 9 ServiceTimeout (5) resv (3) | 10 PrivateData (222)
type MRA struct {
	LocalCommID, RemoteCommID uint32
	MessageMRAed              uint8 // MsgREQ, MsgREP, MsgOther
	ServiceTimeout            uint8 // 5 bits
	PrivateData               []byte
}

// AttrID returns AttrMRA.
func (*MRA) AttrID() AttrID { return AttrMRA }

func (m *MRA) marshal(b []byte) error {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	b[8] = m.MessageMRAed << 6
	b[9] = m.ServiceTimeout << 3
	return putPrivate("MRA", b[10:], m.PrivateData)
}

func (m *MRA) unmarshal(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	m.MessageMRAed = b[8] >> 6
	m.ServiceTimeout = b[9] >> 3
	m.PrivateData = getPrivate(b[10:])
}

// RejectReason is the REJ reason code (IBA Table 109; ib_cm.h enum
// ib_cm_rej_reason).
type RejectReason uint16

// Reject reasons.
const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4
	RejUnsupported               RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8
	RejInvalidTransportType      RejectReason = 9
	RejStaleConn                 RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejPortCMRedirect            RejectReason = 24
	RejPortRedirect              RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumerDefined           RejectReason = 28
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
)

var rejectNames = map[RejectReason]string{
	RejNoQP: "no QP", RejNoEEC: "no EEC", RejNoResources: "no resources", RejTimeout: "timeout",
	RejUnsupported: "unsupported request", RejInvalidCommID: "invalid communication ID",
	RejInvalidCommInstance: "invalid communication instance", RejInvalidServiceID: "invalid service ID",
	RejInvalidTransportType: "invalid transport type", RejStaleConn: "stale connection",
	RejRDCNotExist: "RDC does not exist", RejInvalidGID: "invalid GID", RejInvalidLID: "invalid LID",
	RejInvalidSL: "invalid SL", RejInvalidTrafficClass: "invalid traffic class",
	RejInvalidHopLimit: "invalid hop limit", RejInvalidPacketRate: "invalid packet rate",
	RejPortCMRedirect: "port and CM redirection", RejPortRedirect: "port redirection",
	RejInvalidMTU: "invalid path MTU", RejInsufficientRespResources: "insufficient responder resources",
	RejConsumerDefined: "consumer defined", RejInvalidRNRRetry: "invalid RNR retry count",
	RejDuplicateLocalCommID: "duplicate local communication ID", RejInvalidClassVersion: "invalid class version",
	RejInvalidFlowLabel: "invalid flow label",
}

// String names the reason, e.g. "invalid service ID (8)".
func (r RejectReason) String() string {
	if s, ok := rejectNames[r]; ok {
		return fmt.Sprintf("%s (%d)", s, uint16(r))
	}
	return fmt.Sprintf("reason %d", uint16(r))
}

// REJ rejects a REQ or REP (IBA Table 108).
//
//	 0 LocalCommID | 4 RemoteCommID
//	 8 MessageRejected (2) resv (6) | 9 RejectInfoLength (7) resv (1) | 10 Reason (16)
//	12 ARI (72) | 84 PrivateData (148)
type REJ struct {
	LocalCommID, RemoteCommID uint32
	MessageRejected           uint8 // MsgREQ, MsgREP, MsgOther
	RejectInfoLength          uint8 // 7 bits: valid bytes of ARI
	Reason                    RejectReason
	ARI                       [REJARILen]byte
	PrivateData               []byte
}

// AttrID returns AttrREJ.
func (*REJ) AttrID() AttrID { return AttrREJ }

func (m *REJ) marshal(b []byte) error {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	b[8] = m.MessageRejected << 6
	b[9] = m.RejectInfoLength << 1
	binary.BigEndian.PutUint16(b[10:], uint16(m.Reason))
	copy(b[12:84], m.ARI[:])
	return putPrivate("REJ", b[84:], m.PrivateData)
}

func (m *REJ) unmarshal(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	m.MessageRejected = b[8] >> 6
	m.RejectInfoLength = b[9] >> 1
	m.Reason = RejectReason(binary.BigEndian.Uint16(b[10:]))
	copy(m.ARI[:], b[12:84])
	m.PrivateData = getPrivate(b[84:])
}

// REP is the connection reply (IBA Table 110).
//
//	 0 LocalCommID | 4 RemoteCommID | 8 LocalQKey
//	12 LocalQPN (24) resv | 16 LocalEECN (24) resv | 20 StartingPSN (24) resv
//	24 ResponderResources | 25 InitiatorDepth
//	26 TargetACKDelay (5) FailoverAccepted (2) EndToEndFlowControl (1)
//	27 RNRRetryCount (3) SRQ (1) resv (4)
//	28 LocalCAGUID (64) | 36 PrivateData (196)
type REP struct {
	LocalCommID, RemoteCommID uint32
	LocalQKey                 uint32
	LocalQPN                  uint32 // 24 bits
	LocalEECN                 uint32 // 24 bits
	StartingPSN               uint32 // 24 bits
	ResponderResources        uint8
	InitiatorDepth            uint8
	TargetACKDelay            uint8 // 5 bits
	FailoverAccepted          uint8 // 2 bits
	EndToEndFlowControl       bool
	RNRRetryCount             uint8 // 3 bits
	SRQ                       bool
	LocalCAGUID               uint64
	PrivateData               []byte
}

// AttrID returns AttrREP.
func (*REP) AttrID() AttrID { return AttrREP }

func (m *REP) marshal(b []byte) error {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	binary.BigEndian.PutUint32(b[8:], m.LocalQKey)
	put24(b[12:], m.LocalQPN)
	put24(b[16:], m.LocalEECN)
	put24(b[20:], m.StartingPSN)
	b[24] = m.ResponderResources
	b[25] = m.InitiatorDepth
	b[26] = m.TargetACKDelay<<3 | (m.FailoverAccepted&3)<<1 | b2u(m.EndToEndFlowControl)
	b[27] = (m.RNRRetryCount&7)<<5 | b2u(m.SRQ)<<4
	binary.BigEndian.PutUint64(b[28:], m.LocalCAGUID)
	return putPrivate("REP", b[36:], m.PrivateData)
}

func (m *REP) unmarshal(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	m.LocalQKey = binary.BigEndian.Uint32(b[8:])
	m.LocalQPN = get24(b[12:])
	m.LocalEECN = get24(b[16:])
	m.StartingPSN = get24(b[20:])
	m.ResponderResources = b[24]
	m.InitiatorDepth = b[25]
	m.TargetACKDelay = b[26] >> 3
	m.FailoverAccepted = b[26] >> 1 & 3
	m.EndToEndFlowControl = b[26]&1 != 0
	m.RNRRetryCount = b[27] >> 5
	m.SRQ = b[27]&0x10 != 0
	m.LocalCAGUID = binary.BigEndian.Uint64(b[28:])
	m.PrivateData = getPrivate(b[36:])
}

// RTU is ready-to-use, the active side's answer to REP (IBA Table 111).
//
//	0 LocalCommID | 4 RemoteCommID | 8 PrivateData (224)
type RTU struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               []byte
}

// AttrID returns AttrRTU.
func (*RTU) AttrID() AttrID { return AttrRTU }

func (m *RTU) marshal(b []byte) error {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	return putPrivate("RTU", b[8:], m.PrivateData)
}

func (m *RTU) unmarshal(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	m.PrivateData = getPrivate(b[8:])
}

// DREQ is the disconnect request (IBA Table 112). The kernel drops a DREQ
// whose RemoteQPN is not the receiver's QPN (cm.c cm_dreq_handler).
//
//	0 LocalCommID | 4 RemoteCommID | 8 RemoteQPN (24) resv | 12 PrivateData (220)
type DREQ struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // 24 bits: the receiver's QPN (or EECN)
	PrivateData               []byte
}

// AttrID returns AttrDREQ.
func (*DREQ) AttrID() AttrID { return AttrDREQ }

func (m *DREQ) marshal(b []byte) error {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	put24(b[8:], m.RemoteQPN)
	return putPrivate("DREQ", b[12:], m.PrivateData)
}

func (m *DREQ) unmarshal(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	m.RemoteQPN = get24(b[8:])
	m.PrivateData = getPrivate(b[12:])
}

// DREP is the disconnect reply (IBA Table 113).
//
//	0 LocalCommID | 4 RemoteCommID | 8 PrivateData (224)
type DREP struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               []byte
}

// AttrID returns AttrDREP.
func (*DREP) AttrID() AttrID { return AttrDREP }

func (m *DREP) marshal(b []byte) error {
	binary.BigEndian.PutUint32(b[0:], m.LocalCommID)
	binary.BigEndian.PutUint32(b[4:], m.RemoteCommID)
	return putPrivate("DREP", b[8:], m.PrivateData)
}

func (m *DREP) unmarshal(b []byte) {
	m.LocalCommID = binary.BigEndian.Uint32(b[0:])
	m.RemoteCommID = binary.BigEndian.Uint32(b[4:])
	m.PrivateData = getPrivate(b[8:])
}

// SIDRREQ is the service ID resolution request used to find a UD service's
// QPN and Q_Key (IBA Table 119).
//
//	0 RequestID | 4 PKey (16) resv (16) | 8 ServiceID (64) | 16 PrivateData (216)
type SIDRREQ struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData []byte
}

// AttrID returns AttrSIDRREQ.
func (*SIDRREQ) AttrID() AttrID { return AttrSIDRREQ }

func (m *SIDRREQ) marshal(b []byte) error {
	binary.BigEndian.PutUint32(b[0:], m.RequestID)
	binary.BigEndian.PutUint16(b[4:], m.PKey)
	binary.BigEndian.PutUint64(b[8:], m.ServiceID)
	return putPrivate("SIDR_REQ", b[16:], m.PrivateData)
}

func (m *SIDRREQ) unmarshal(b []byte) {
	m.RequestID = binary.BigEndian.Uint32(b[0:])
	m.PKey = binary.BigEndian.Uint16(b[4:])
	m.ServiceID = binary.BigEndian.Uint64(b[8:])
	m.PrivateData = getPrivate(b[16:])
}

// SIDRStatus is the SIDR_REP status (IBA Table 120; ib_cm.h ib_cm_sidr_status).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRSuccess            SIDRStatus = 0
	SIDRUnsupported        SIDRStatus = 1 // service ID not supported
	SIDRReject             SIDRStatus = 2
	SIDRNoQP               SIDRStatus = 3
	SIDRRedirect           SIDRStatus = 4
	SIDRUnsupportedVersion SIDRStatus = 5
)

// SIDRREP answers a SIDRREQ (IBA Table 120).
//
//	 0 RequestID | 4 Status | 5 AddInfoLength | 6 resv (16)
//	 8 QPN (24) resv | 12 ServiceID (64) | 20 QKey (32)
//	24 AddInfo (72) | 96 PrivateData (136)
type SIDRREP struct {
	RequestID     uint32
	Status        SIDRStatus
	AddInfoLength uint8
	QPN           uint32 // 24 bits
	ServiceID     uint64
	QKey          uint32
	AddInfo       [SIDRREPInfoLen]byte
	PrivateData   []byte
}

// AttrID returns AttrSIDRREP.
func (*SIDRREP) AttrID() AttrID { return AttrSIDRREP }

func (m *SIDRREP) marshal(b []byte) error {
	binary.BigEndian.PutUint32(b[0:], m.RequestID)
	b[4] = uint8(m.Status)
	b[5] = m.AddInfoLength
	put24(b[8:], m.QPN)
	binary.BigEndian.PutUint64(b[12:], m.ServiceID)
	binary.BigEndian.PutUint32(b[20:], m.QKey)
	copy(b[24:96], m.AddInfo[:])
	return putPrivate("SIDR_REP", b[96:], m.PrivateData)
}

func (m *SIDRREP) unmarshal(b []byte) {
	m.RequestID = binary.BigEndian.Uint32(b[0:])
	m.Status = SIDRStatus(b[4])
	m.AddInfoLength = b[5]
	m.QPN = get24(b[8:])
	m.ServiceID = binary.BigEndian.Uint64(b[12:])
	m.QKey = binary.BigEndian.Uint32(b[20:])
	copy(m.AddInfo[:], b[24:96])
	m.PrivateData = getPrivate(b[96:])
}
