//go:build linux

package link

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// cmsg builds one control message the way the kernel lays it out.
func cmsg(level, typ int, data []byte) []byte {
	b := make([]byte, unix.CmsgSpace(len(data)))
	if unix.SizeofCmsghdr == 16 {
		binary.NativeEndian.PutUint64(b[0:], uint64(unix.CmsgLen(len(data))))
		binary.NativeEndian.PutUint32(b[8:], uint32(level))
		binary.NativeEndian.PutUint32(b[12:], uint32(typ))
	} else {
		binary.NativeEndian.PutUint32(b[0:], uint32(unix.CmsgLen(len(data))))
		binary.NativeEndian.PutUint32(b[4:], uint32(level))
		binary.NativeEndian.PutUint32(b[8:], uint32(typ))
	}
	copy(b[unix.CmsgLen(0):], data)
	return b
}

func pktinfo4(a netip.Addr) []byte {
	d := make([]byte, unix.SizeofInet4Pktinfo)
	a4 := a.As4()
	copy(d[8:], a4[:])
	return cmsg(unix.IPPROTO_IP, unix.IP_PKTINFO, d)
}

func pktinfo6(a netip.Addr) []byte {
	d := make([]byte, unix.SizeofInet6Pktinfo)
	a16 := a.As16()
	copy(d, a16[:])
	return cmsg(unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, d)
}

func TestParseControl(t *testing.T) {
	v4, v6 := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("2001:db8::7")
	tclass := make([]byte, 4)
	binary.NativeEndian.PutUint32(tclass, 0x2a)
	tests := []struct {
		name      string
		b         []byte
		is6       bool
		wantLocal netip.Addr
		wantTOS   uint8
	}{
		{"v4 pktinfo then tos", append(pktinfo4(v4), cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0x03})...), false, v4, 3},
		{"v4 tos then pktinfo", append(cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{0xb8}), pktinfo4(v4)...), false, v4, 0xb8},
		{"v6 pktinfo and tclass", append(pktinfo6(v6), cmsg(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, tclass)...), true, v6, 0x2a},
		{"v6 cmsg on a v4 socket is ignored", pktinfo6(v6), false, netip.Addr{}, 0},
		{"empty", nil, false, netip.Addr{}, 0},
		{"truncated pktinfo", pktinfo4(v4)[:unix.CmsgLen(4)], false, netip.Addr{}, 0},
		{"length beyond buffer", func() []byte { b := pktinfo4(v4); b[0] = 0xff; return b }(), false, netip.Addr{}, 0},
		{"length below header", func() []byte { b := pktinfo4(v4); b[0] = 1; return b }(), false, netip.Addr{}, 0},
		{"unknown then pktinfo", append(cmsg(unix.SOL_SOCKET, unix.SO_TIMESTAMP, make([]byte, 16)), pktinfo4(v4)...), false, v4, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := parseControl(tt.b, tt.is6)
			if m.local != tt.wantLocal || m.tos != tt.wantTOS {
				t.Fatalf("parseControl = %v, %#x; want %v, %#x", m.local, m.tos, tt.wantLocal, tt.wantTOS)
			}
		})
	}
}

// FuzzParseControl: arbitrary control-message and sockaddr bytes never
// panic.
func FuzzParseControl(f *testing.F) {
	v4 := netip.MustParseAddr("127.0.0.2")
	f.Add(pktinfo4(v4), false)                                                           // one valid IPv4 PKTINFO
	f.Add(append(pktinfo4(v4), cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{1})...), false) // PKTINFO + TOS
	f.Add(pktinfo6(netip.MustParseAddr("::1")), true)                                    // one valid IPv6 PKTINFO
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false)                 // huge length, short buffer
	f.Add(make([]byte, 40), true)                                                        // zero length header
	f.Fuzz(func(t *testing.T, b []byte, is6 bool) {
		parseControl(b, is6)
		u := &UDP{is6: is6}
		u.parseName(b)
	})
}
