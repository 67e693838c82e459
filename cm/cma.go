package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// PortSpace is an rdma_cm port space (librdmacm enum rdma_port_space). The
// port space and the "TCP-like" port form the IB service ID.
type PortSpace uint16

// rdma_cm port spaces.
const (
	PortSpaceIPoIB PortSpace = 0x0002
	PortSpaceTCP   PortSpace = 0x0106 // RC connections (rping, ucmatose)
	PortSpaceUDP   PortSpace = 0x0111 // UD via SIDR (udaddy)
	PortSpaceIB    PortSpace = 0x013F
)

// UDPQKey is the Q_Key rdma_cm assigns to RDMA_PS_UDP QPs (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// ServiceID returns the IB service ID rdma_cm uses for a port in a port space:
// 0x0000000001060000|port for TCP (cma.c cma_get_service_id).
func ServiceID(ps PortSpace, port uint16) uint64 {
	return uint64(ps)<<16 | uint64(port)
}

// SplitServiceID is the inverse of ServiceID. ok is false when id is not in
// the rdma_cm IP range (0x00000000_01xx_xxxx).
func SplitServiceID(id uint64) (ps PortSpace, port uint16, ok bool) {
	if id>>24 != 0x01 {
		return 0, 0, false
	}
	return PortSpace(id >> 16), uint16(id), true
}

// CMAHeaderLen is the size of the rdma_cm header at the start of REQ and
// SIDR_REQ private data, which leaves 56 (REQ) or 180 (SIDR_REQ) bytes for
// the application.
const CMAHeaderLen = 36

// CMA header versions (cma.c CMA_VERSION).
const CMAVersion = 0x00

// ErrCMAHeader reports REQ/SIDR_REQ private data without a usable rdma_cm
// header.
var ErrCMAHeader = errors.New("cm: bad rdma_cm private data header")

// CMAHeader is rdma_cm's struct cma_hdr, the first 36 bytes of the private
// data of REQ and SIDR_REQ:
//
//	0 Version | 1 IPVersion (4, high nibble) resv (4) | 2 SrcPort (16)
//	4 Src (128; IPv4 as 12 zero bytes + address) | 20 Dst (128)
type CMAHeader struct {
	Version uint8
	SrcPort uint16     // the active side's port
	Src     netip.Addr // the active side's address
	Dst     netip.Addr // the passive side's address (its port is in the service ID)
}

// AppendCMA appends h followed by user private data: the REQ/SIDR_REQ private
// data an rdma_cm active side sends. Two IPv4 (or IPv4-mapped) addresses
// give an IPv4 header; anything else an IPv6 one, IPv4 addresses mapped.
func AppendCMA(dst []byte, h CMAHeader, user []byte) ([]byte, error) {
	src, dstA := h.Src.Unmap(), h.Dst.Unmap()
	if !src.IsValid() || !dstA.IsValid() {
		return dst, fmt.Errorf("%w: addresses %v and %v", ErrCMAHeader, h.Src, h.Dst)
	}
	var b [CMAHeaderLen]byte
	b[0] = h.Version
	binary.BigEndian.PutUint16(b[2:], h.SrcPort)
	if src.Is4() && dstA.Is4() {
		b[1] = 4 << 4
		s, d := src.As4(), dstA.As4()
		copy(b[16:20], s[:])
		copy(b[32:36], d[:])
	} else {
		b[1] = 6 << 4
		s, d := src.As16(), dstA.As16()
		copy(b[4:20], s[:])
		copy(b[20:36], d[:])
	}
	dst = append(dst, b[:]...)
	return append(dst, user...), nil
}

// ParseCMA splits REQ/SIDR_REQ private data into the rdma_cm header and the
// application's private data (which aliases p). Addresses are returned
// unmapped: an IPv4-mapped address in an IPv6 header reads as IPv4.
func ParseCMA(p []byte) (CMAHeader, []byte, error) {
	var h CMAHeader
	if len(p) < CMAHeaderLen {
		return h, nil, fmt.Errorf("%w: %d bytes", ErrCMAHeader, len(p))
	}
	h.Version = p[0]
	h.SrcPort = binary.BigEndian.Uint16(p[2:])
	switch p[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(p[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(p[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(p[4:20])).Unmap()
		h.Dst = netip.AddrFrom16([16]byte(p[20:36])).Unmap()
	default:
		return h, nil, fmt.Errorf("%w: IP version %d", ErrCMAHeader, p[1]>>4)
	}
	if h.Version != CMAVersion {
		return h, nil, fmt.Errorf("%w: version %d", ErrCMAHeader, h.Version)
	}
	return h, p[CMAHeaderLen:], nil
}

// FlowLabel is the RoCE flow label rdma_cm puts in the REQ's primary path for
// a connection between two ports (cma.c cma_get_roce_udp_flow_label).
func FlowLabel(srcPort, dstPort uint16) uint32 {
	return (uint32(srcPort)*31 + uint32(dstPort)) & 0xFFFFF
}

// TimeoutDuration converts a 5-bit IBA time code (CM response timeout, local
// ACK timeout, packet lifetime) to 4.096 µs × 2^code.
func TimeoutDuration(code uint8) time.Duration {
	return time.Duration(4096) << (code & 0x1F) * time.Nanosecond
}
