package roce

import (
	"encoding/binary"
	"net/netip"
	"syscall"
)

// GRHLen is the size of the GRH area opening every UD receive buffer (struct ibv_grh):
// the datagram's IPv6 header, or 20 zero bytes and the IPv4 header.
const GRHLen = 40

// InitAHFromWC is ibv_init_ah_from_wc: the address vector that answers the sender of a
// UD receive, from its completion and GRH area. As in libibverbs: without WCGRH the
// result is not global (CreateAH refuses it on RoCE); the header is IPv4 when the IPv6
// version nibble is not 6 or bytes 20..40 are an IPv4 header with a valid checksum; the
// destination gives the source GID index, the source the DGID, and hop limit, traffic
// class and flow label are the received ones.
//
// Errors: EINVAL for a short grh, a datagram sent to a multicast group (answering needs
// an AH of its own) or to an address not this device's; EPROTONOSUPPORT for a header
// that is neither IPv4 nor IPv6 over UDP.
func (d *Device) InitAHFromWC(wc *WC, grh []byte) (AHAttr, error) {
	const op = "ibv_init_ah_from_wc"
	if d.closed.Load() {
		return AHAttr{}, closedErr(op, "")
	}
	var av AHAttr
	if wc.Flags&WCGRH == 0 {
		return av, nil
	}
	if len(grh) < GRHLen {
		return av, newErr(op, "", syscall.EINVAL, "GRH area of %d bytes, need %d", len(grh), GRHLen)
	}
	av.IsGlobal = true
	av.FlowLabel = binary.BigEndian.Uint32(grh[0:4]) & 0xFFFFF
	var dst netip.Addr
	switch grhVersion(grh) {
	case 4:
		h := grh[20:40]
		dst = netip.AddrFrom4([4]byte(h[16:20]))
		av.DGID = netip.AddrFrom4([4]byte(h[12:16]))
		av.HopLimit, av.TrafficClass = h[8], h[1]
	case 6:
		if grh[6] != 17 { // next header: only UDP (RoCEv2); 0x1b would be RoCEv1
			return AHAttr{}, newErr(op, "", syscall.EPROTONOSUPPORT, "GRH next header %d is not UDP", grh[6])
		}
		dst = netip.AddrFrom16([16]byte(grh[24:40])).Unmap()
		av.DGID = netip.AddrFrom16([16]byte(grh[8:24])).Unmap()
		av.HopLimit = grh[7]
		av.TrafficClass = uint8(binary.BigEndian.Uint32(grh[0:4]) >> 20)
	default:
		return AHAttr{}, newErr(op, "", syscall.EPROTONOSUPPORT, "GRH area holds neither an IPv4 nor an IPv6 header")
	}
	if dst.IsMulticast() {
		return AHAttr{}, newErr(op, "", syscall.EINVAL, "the datagram was sent to multicast group %v", dst)
	}
	// The RoCEv2 GID; the link-local default GID is no datagram's destination.
	if d.GID().Addr() != dst {
		return AHAttr{}, newErr(op, "", syscall.EINVAL, "destination %v is not a GID of this device", dst)
	}
	av.SGIDIndex = uint8(d.gidIdx)
	return av, nil
}

// grhVersion is libibverbs' get_grh_header_version: 4, 6, or 0 for neither.
func grhVersion(grh []byte) int {
	ip4 := grh[20:40]
	if grh[0]>>4 != 6 {
		if ip4[0]>>4 == 4 {
			return 4
		}
		return 0
	}
	if ip4[0]&0x0F != 5 { // an IPv4 header of RoCEv2 has no options
		return 6
	}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		if i != 10 {
			sum += uint32(binary.BigEndian.Uint16(ip4[i:]))
		}
	}
	sum = sum&0xFFFF + sum>>16
	sum = sum&0xFFFF + sum>>16
	if ^uint16(sum) == binary.BigEndian.Uint16(ip4[10:]) {
		return 4
	}
	return 6
}

// CreateAHFromWC is ibv_create_ah_from_wc: CreateAH of InitAHFromWC's attributes, so a
// UD server answers each client without parsing the GRH; those two verbs' errors.
func (pd *PD) CreateAHFromWC(wc *WC, grh []byte) (*AH, error) {
	av, err := pd.dev.InitAHFromWC(wc, grh)
	if err != nil {
		return nil, wrapErr("ibv_create_ah_from_wc", pd.dev.obj("pd", pd.id), -1, err)
	}
	ah, err := pd.CreateAH(av)
	if err != nil {
		return nil, wrapErr("ibv_create_ah_from_wc", pd.dev.obj("pd", pd.id), -1, err)
	}
	return ah, nil
}
