package bth

import (
	"encoding/binary"
	"net/netip"
)

// GRHLen is the size of the GRH area at the start of every UD receive
// buffer (libibverbs: 40 bytes, whatever the IP version).
const GRHLen = 40

// IPv4 header fields a UDP socket does not report: RoCEv2 senders (rxe and
// a Link) send with Don't Fragment and IPv4 ID 0. A hop limit the socket
// could not report is taken as rxe's default.
const (
	grhIPv4Flags = 0x4000 // DF, fragment offset 0
	grhHopLimit  = 64
)

// GRHFields are the IP header fields of a received datagram that the GRH
// area reports, as the kernel saw them (IP_PKTINFO, IP_RECVTOS, IP_RECVTTL
// and their IPv6 forms).
type GRHFields struct {
	Src, Dst     netip.Addr
	TrafficClass uint8  // IPv4 TOS or IPv6 traffic class, ECN bits included
	HopLimit     uint8  // IPv4 TTL or IPv6 hop limit; 0 (not reported) is taken as 64
	FlowLabel    uint32 // IPv6 only
}

// PutGRH fills g, the GRH area of a UD receive, for a datagram of
// udpPayloadLen bytes with the header fields h, as libibverbs presents it:
// for IPv4, 20 zero bytes, then the IPv4 header (ID 0, DF and a valid
// checksum); for IPv6, the IPv6 header.
func PutGRH(g *[GRHLen]byte, h GRHFields, udpPayloadLen int) {
	src, dst := h.Src.Unmap(), h.Dst.Unmap()
	hop := h.HopLimit
	if hop == 0 {
		hop = grhHopLimit
	}
	*g = [GRHLen]byte{}
	if src.Is4() && dst.Is4() {
		ip := g[20:]
		ip[0] = 0x45
		ip[1] = h.TrafficClass
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4HdrLen+udpHdrLen+udpPayloadLen))
		binary.BigEndian.PutUint16(ip[6:], grhIPv4Flags)
		ip[8] = hop
		ip[9] = 17
		s4, d4 := src.As4(), dst.As4()
		copy(ip[12:16], s4[:])
		copy(ip[16:20], d4[:])
		var sum uint32
		for i := 0; i < ipv4HdrLen; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(ip[i:]))
		}
		for sum > 0xFFFF {
			sum = sum&0xFFFF + sum>>16
		}
		binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
		return
	}
	binary.BigEndian.PutUint32(g[0:], 6<<28|uint32(h.TrafficClass)<<20|h.FlowLabel&0xFFFFF)
	binary.BigEndian.PutUint16(g[4:], uint16(udpHdrLen+udpPayloadLen))
	g[6] = 17
	g[7] = hop
	s16, d16 := src.As16(), dst.As16()
	copy(g[8:24], s16[:])
	copy(g[24:40], d16[:])
}
