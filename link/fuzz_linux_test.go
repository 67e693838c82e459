//go:build linux

package link

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"

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

func int32cmsg(level, typ int, v uint32) []byte {
	d := make([]byte, 4)
	binary.NativeEndian.PutUint32(d, v)
	return cmsg(level, typ, d)
}

// TestParseControlFields: TTL, hop limit, flow label and the UDP_GRO
// segment size, as the kernel lays them out.
func TestParseControlFields(t *testing.T) {
	flow := make([]byte, 4)
	binary.BigEndian.PutUint32(flow, 0x0b812345) // traffic class bits and label 0x12345
	tests := []struct {
		name string
		b    []byte
		is6  bool
		want rxMeta
	}{
		{"v4 ttl and gro", append(int32cmsg(unix.IPPROTO_IP, unix.IP_TTL, 63), int32cmsg(unix.SOL_UDP, unix.UDP_GRO, 4112)...), false, rxMeta{ttl: 63, gro: 4112}},
		{"v6 hop limit, flow, tclass", append(append(int32cmsg(unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, 5), cmsg(unix.IPPROTO_IPV6, ipv6Flowinfo, flow)...), int32cmsg(unix.IPPROTO_IPV6, unix.IPV6_TCLASS, 0x03)...), true, rxMeta{ttl: 5, flow: 0x12345, tos: 3}},
		{"negative gro ignored", int32cmsg(unix.SOL_UDP, unix.UDP_GRO, 0xffffffff), false, rxMeta{}},
		{"short ttl ignored", cmsg(unix.IPPROTO_IP, unix.IP_TTL, []byte{1, 2}), false, rxMeta{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseControl(tt.b, tt.is6); got != tt.want {
				t.Fatalf("parseControl = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzParseControl: arbitrary control-message and sockaddr bytes never
// panic, and what they yield is in range.
func FuzzParseControl(f *testing.F) {
	v4 := netip.MustParseAddr("127.0.0.2")
	f.Add(pktinfo4(v4), false)                                                           // one valid IPv4 PKTINFO
	f.Add(append(pktinfo4(v4), cmsg(unix.IPPROTO_IP, unix.IP_TOS, []byte{1})...), false) // PKTINFO + TOS
	f.Add(pktinfo6(netip.MustParseAddr("::1")), true)                                    // one valid IPv6 PKTINFO
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, false)                 // huge length, short buffer
	f.Add(make([]byte, 40), true)                                                        // zero length header
	f.Add(append(int32cmsg(unix.IPPROTO_IP, unix.IP_TTL, 64), int32cmsg(unix.SOL_UDP, unix.UDP_GRO, 1000)...), false)
	f.Add(append(int32cmsg(unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, 64), int32cmsg(unix.IPPROTO_IPV6, ipv6Flowinfo, 0xffffffff)...), true)
	f.Fuzz(func(t *testing.T, b []byte, is6 bool) {
		if m := parseControl(b, is6); m.flow > maxFlowLabel || m.gro < 0 {
			t.Fatalf("parseControl = %+v", m)
		}
		u := &UDP{is6: is6}
		u.parseName(b)
	})
}

// packAll packs message m the way writeRun does, batch after batch, and
// returns the bytes of each entry, what kind it is, and its segment count.
func packAll(t *testing.T, u *UDP, m *Message, gso bool) (entries [][]byte, kinds []uint8) {
	s := newMmsgScratch(u.batch)
	g := &s.g
	g.reset(m)
	off := 0
	for {
		k, used, err := u.pack(s, u.main, g, m, 0, 0, 0, &off, gso)
		if err != nil {
			t.Fatal(err)
		}
		for e := 0; e < k; e++ {
			var b []byte
			n := int(s.hs[e].hdr.Iovlen)
			for _, v := range s.iovs[s.iovAt[e] : s.iovAt[e]+n] {
				b = append(b, unsafe.Slice(v.Base, v.Len)...)
			}
			entries = append(entries, b)
			kinds = append(kinds, s.kind[e])
		}
		s.clear(used)
		if off == 0 {
			return entries, kinds
		}
	}
}

// FuzzPackTrain: any gather list and segment size packs into entries that
// carry the message's bytes exactly once, in order: super-datagrams of
// GSOSegments segments with GSO, single segments without (IPv4 segments with
// a re-keyed trailer), never an entry of more than one segment unless it is
// a super-datagram.
func FuzzPackTrain(f *testing.F) {
	f.Add(uint16(4112), []byte{12, 200, 4}, uint16(40), true)
	f.Add(uint16(80), []byte{80}, uint16(130), false)
	f.Add(uint16(0), []byte{5, 0, 7}, uint16(3), true)
	f.Add(uint16(3), []byte{1}, uint16(1000), false)
	f.Fuzz(func(t *testing.T, seg uint16, pieceLens []byte, reps uint16, gso bool) {
		size := 0
		for _, l := range pieceLens {
			size += int(l)
		}
		if int(seg) > MaxDatagram || len(pieceLens) == 0 || size*int(reps%300) > 8<<10 {
			return
		}
		var pieces [][]byte
		var all []byte
		for r := 0; r < int(reps%300); r++ {
			for _, l := range pieceLens {
				p := make([]byte, l)
				for i := range p {
					p[i] = byte(len(all) + i)
				}
				all = append(all, p...)
				pieces = append(pieces, p)
			}
		}
		u := &UDP{batch: 7, local: netip.MustParseAddrPort("192.0.2.1:4791")}
		m := &Message{Pieces: pieces, SegSize: int(seg), Addr: netip.MustParseAddrPort("192.0.2.2:4791")}
		if u.check(m) != nil {
			return
		}
		entries, kinds := packAll(t, u, m, gso)
		var joined []byte
		for i, e := range entries {
			switch kinds[i] {
			case entryGSO:
				if !gso || len(e) <= int(seg) || len(e) > GSOSegments(int(seg))*int(seg) {
					t.Fatalf("entry %d: super-datagram of %d bytes, segment size %d, gso %v", i, len(e), seg, gso)
				}
			case entrySegment:
				if len(e) > int(seg) {
					t.Fatalf("entry %d: %d bytes alone, segment size %d", i, len(e), seg)
				}
			}
			if kinds[i] == entrySegment && len(e) >= 4 {
				// Re-keyed trailers differ; undo the re-keying to compare.
				idx := len(joined) / int(seg)
				if id := TrainIPv4ID(int(seg), idx); id != 0 {
					var d [4]byte
					binary.LittleEndian.PutUint32(d[:], ICRCIDDelta(len(e), id, 0))
					e = append([]byte(nil), e...)
					for j := range d {
						e[len(e)-4+j] ^= d[j]
					}
				}
			}
			joined = append(joined, e...)
		}
		if !bytes.Equal(joined, all) {
			t.Fatalf("entries carry %d bytes, the message %d (or different ones)", len(joined), len(all))
		}
	})
}
