package bth

import (
	"encoding/binary"
	"net/netip"
)

// GRHLen is the size of the GRH area at the start of every UD receive
// buffer (libibverbs: 40 bytes, whatever the IP version).
const GRHLen = 40

// IPv4 header fields a UDP socket does not report; RoCEv2 senders (rxe and
// a Link) send with Don't Fragment, and the TTL is taken as rxe's default.
const (
	grhIPv4Flags = 0x4000 // DF, fragment offset 0
	grhHopLimit  = 64
)

// PutGRH fills g, the GRH area of a UD receive, for a datagram of
// udpPayloadLen bytes from src to dst with traffic class tc, as libibverbs
// presents it: for IPv4, 20 zero bytes, then the IPv4 header (ID 0, DF, TTL
// 64 and a valid checksum, since the socket hides the real ones); for IPv6,
// the IPv6 header (hop limit 64, flow label 0).
func PutGRH(g *[GRHLen]byte, src, dst netip.Addr, tc uint8, udpPayloadLen int) {
	src, dst = src.Unmap(), dst.Unmap()
	*g = [GRHLen]byte{}
	if src.Is4() && dst.Is4() {
		h := g[20:]
		h[0] = 0x45
		h[1] = tc
		binary.BigEndian.PutUint16(h[2:], uint16(ipv4HdrLen+udpHdrLen+udpPayloadLen))
		binary.BigEndian.PutUint16(h[6:], grhIPv4Flags)
		h[8] = grhHopLimit
		h[9] = 17
		s4, d4 := src.As4(), dst.As4()
		copy(h[12:16], s4[:])
		copy(h[16:20], d4[:])
		var sum uint32
		for i := 0; i < ipv4HdrLen; i += 2 {
			sum += uint32(binary.BigEndian.Uint16(h[i:]))
		}
		for sum > 0xFFFF {
			sum = sum&0xFFFF + sum>>16
		}
		binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
		return
	}
	binary.BigEndian.PutUint32(g[0:], 6<<28|uint32(tc)<<20)
	binary.BigEndian.PutUint16(g[4:], uint16(udpHdrLen+udpPayloadLen))
	g[6] = 17
	g[7] = grhHopLimit
	s16, d16 := src.As16(), dst.As16()
	copy(g[8:24], s16[:])
	copy(g[24:40], d16[:])
}
