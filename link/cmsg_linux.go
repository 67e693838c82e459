//go:build linux

package link

import (
	"encoding/binary"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// cmsgAlign is the kernel's CMSG_ALIGN unit: the size of a long.
const cmsgAlign = int(unsafe.Sizeof(uintptr(0)))

// cmsgDataOff is where a control message's data starts (CMSG_LEN(0)).
var cmsgDataOff = (unix.SizeofCmsghdr + cmsgAlign - 1) &^ (cmsgAlign - 1)

// rxMeta is what the control messages of one received datagram say.
type rxMeta struct {
	local netip.Addr // PKTINFO destination address
	tos   uint8      // IP_TOS / IPV6_TCLASS
	ttl   uint8      // IP_TTL / IPV6_HOPLIMIT
	flow  uint32     // IPV6_FLOWINFO label (20 bits)
	gro   int        // UDP_GRO segment size, 0 if not coalesced
}

// parseControl walks the control messages of one received datagram.
// Malformed or unknown messages are skipped or end the walk; it never panics.
func parseControl(b []byte, is6 bool) (m rxMeta) {
	hdrLen := unix.SizeofCmsghdr
	for len(b) >= hdrLen {
		var l int
		var level, typ int32
		if hdrLen == 16 {
			l64 := binary.NativeEndian.Uint64(b[0:8])
			if l64 > uint64(len(b)) {
				return
			}
			l = int(l64)
			level = int32(binary.NativeEndian.Uint32(b[8:12]))
			typ = int32(binary.NativeEndian.Uint32(b[12:16]))
		} else {
			l = int(binary.NativeEndian.Uint32(b[0:4]))
			level = int32(binary.NativeEndian.Uint32(b[4:8]))
			typ = int32(binary.NativeEndian.Uint32(b[8:12]))
		}
		if l < cmsgDataOff || l > len(b) {
			return
		}
		m.apply(level, typ, b[cmsgDataOff:l], is6)
		next := (l + cmsgAlign - 1) &^ (cmsgAlign - 1)
		if next >= len(b) {
			return
		}
		b = b[next:]
	}
	return
}

// apply records one control message.
func (m *rxMeta) apply(level, typ int32, data []byte, is6 bool) {
	switch {
	case level == unix.SOL_UDP && typ == unix.UDP_GRO && len(data) >= 4:
		if g := int32(binary.NativeEndian.Uint32(data)); g > 0 {
			m.gro = int(g)
		}
	case !is6 && level == unix.IPPROTO_IP:
		switch {
		case typ == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			m.local = netip.AddrFrom4([4]byte(data[8:12])) // ipi_addr: the header destination
		case typ == unix.IP_TOS && len(data) >= 1:
			m.tos = data[0]
		case typ == unix.IP_TTL && len(data) >= 4:
			m.ttl = uint8(binary.NativeEndian.Uint32(data))
		}
	case is6 && level == unix.IPPROTO_IPV6:
		switch {
		case typ == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			m.local = netip.AddrFrom16([16]byte(data[0:16]))
		case typ == unix.IPV6_TCLASS && len(data) >= 4:
			m.tos = uint8(binary.NativeEndian.Uint32(data))
		case typ == unix.IPV6_HOPLIMIT && len(data) >= 4:
			m.ttl = uint8(binary.NativeEndian.Uint32(data))
		case typ == ipv6Flowinfo && len(data) >= 4:
			m.flow = binary.BigEndian.Uint32(data) & 0xFFFFF
		}
	}
}

// putCmsg writes one control message with a size-byte native-endian value
// (2 or 4 bytes) at b and returns the space it takes. b must have room for
// CMSG_SPACE(size).
func putCmsg(b []byte, level, typ int32, size int, v uint32) int {
	l := cmsgDataOff + size
	if unix.SizeofCmsghdr == 16 {
		binary.NativeEndian.PutUint64(b[0:], uint64(l))
		binary.NativeEndian.PutUint32(b[8:], uint32(level))
		binary.NativeEndian.PutUint32(b[12:], uint32(typ))
	} else {
		binary.NativeEndian.PutUint32(b[0:], uint32(l))
		binary.NativeEndian.PutUint32(b[4:], uint32(level))
		binary.NativeEndian.PutUint32(b[8:], uint32(typ))
	}
	d := b[cmsgDataOff:]
	if size == 2 {
		binary.NativeEndian.PutUint16(d, uint16(v))
	} else {
		binary.NativeEndian.PutUint32(d, v)
	}
	space := (l + cmsgAlign - 1) &^ (cmsgAlign - 1)
	clear(b[l:space])
	return space
}
