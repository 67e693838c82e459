package roce

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"syscall"
	"testing"

	"github.com/goroce/goroce/link"
)

// grh4 is the GRH area of a UD receive over IPv4: 20 zero bytes, then the IPv4
// header with a valid checksum.
func grh4(src, dst netip.Addr, tos, ttl uint8) []byte {
	g := make([]byte, GRHLen)
	h := g[20:]
	h[0], h[1], h[8], h[9] = 0x45, tos, ttl, 17
	binary.BigEndian.PutUint16(h[2:], 60)
	s, d := src.As4(), dst.As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	sum = sum&0xFFFF + sum>>16
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
	return g
}

// grh6 is the GRH area of a UD receive over IPv6: the IPv6 header.
func grh6(src, dst netip.Addr, tclass, hop uint8, flow uint32, next uint8) []byte {
	g := make([]byte, GRHLen)
	binary.BigEndian.PutUint32(g, 6<<28|uint32(tclass)<<20|flow)
	g[6], g[7] = next, hop
	s, d := src.As16(), dst.As16()
	copy(g[8:], s[:])
	copy(g[24:], d[:])
	return g
}

func TestInitAHFromWCFollowsLibibverbs(t *testing.T) {
	d4 := pipeDevice(t)
	peer4 := netip.MustParseAddr("127.0.0.9")
	la6 := netip.MustParseAddr("::1")
	peer6 := netip.MustParseAddr("2001:db8::9")
	withGRH := &WC{Flags: WCGRH}
	tests := []struct {
		name string
		d    func(t *testing.T) *Device
		wc   *WC
		grh  []byte
		want AHAttr
		err  syscall.Errno
	}{
		{"IPv4: the sender becomes the DGID, TTL the hop limit, TOS the traffic class",
			nil, withGRH, grh4(peer4, addrA, 0x68|1, 63),
			AHAttr{DGID: peer4, SGIDIndex: GIDIndexRoCEv2, HopLimit: 63, TrafficClass: 0x69, IsGlobal: true}, 0},
		{"IPv6: hop limit, traffic class and flow label from the header",
			func(t *testing.T) *Device { return openLinkAt(t, la6) }, withGRH, grh6(peer6, la6, 0xb8, 5, 0xabcde, 17),
			AHAttr{DGID: peer6, SGIDIndex: GIDIndexRoCEv2, HopLimit: 5, TrafficClass: 0xb8, FlowLabel: 0xabcde, IsGlobal: true}, 0},
		{"version nibble 6 but a valid IPv4 header behind it: IPv4, by its checksum",
			nil, withGRH, func() []byte { g := grh4(peer4, addrA, 0, 64); g[0] = 0x60; return g }(),
			AHAttr{DGID: peer4, SGIDIndex: GIDIndexRoCEv2, HopLimit: 64, IsGlobal: true}, 0},
		{"no IBV_WC_GRH: not global", nil, &WC{}, nil, AHAttr{}, 0},
		{"sent to a multicast group", nil, withGRH, grh4(peer4, netip.MustParseAddr("239.1.2.3"), 0, 1), AHAttr{}, syscall.EINVAL},
		{"sent to another address", nil, withGRH, grh4(peer4, addrB, 0, 64), AHAttr{}, syscall.EINVAL},
		{"short GRH area", nil, withGRH, make([]byte, 39), AHAttr{}, syscall.EINVAL},
		{"neither IPv4 nor IPv6", nil, withGRH, make([]byte, 40), AHAttr{}, syscall.EPROTONOSUPPORT},
		{"IPv6 next header RoCEv1", func(t *testing.T) *Device { return openLinkAt(t, la6) }, withGRH,
			grh6(peer6, la6, 0, 64, 0, 0x1b), AHAttr{}, syscall.EPROTONOSUPPORT},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := d4
			if tc.d != nil {
				d = tc.d(t)
			}
			got, err := d.InitAHFromWC(tc.wc, tc.grh)
			if tc.err != 0 {
				wantErrno(t, err, tc.err)
				return
			}
			noErr(t, err)
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	pd := must[*PD](t)(d4.AllocPD())
	_, err := pd.CreateAHFromWC(&WC{}, nil)
	wantErrno(t, err, syscall.EINVAL) // RoCE requires a GRH
}

// openLinkAt opens a device on a Pipe at addr.
func openLinkAt(t *testing.T, addr netip.Addr) *Device {
	la, lb := link.Pipe(netip.AddrPortFrom(addr, RoCEv2Port), netip.AddrPortFrom(addr, RoCEv2Port+1))
	d, err := OpenLink(la)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); lb.Close() })
	return d
}

// TestCreateAHFromWCAnswersTheSender is the point of ibv_create_ah_from_wc: a UD
// server answers a client it knows only from a receive completion.
func TestCreateAHFromWCAnswersTheSender(t *testing.T) {
	da, db := udpPair(t, MTU1024)
	const qkey = 0x2222
	a := newSide(t, da, QPTypeUD, 4096, nil, nil)
	b := newSide(t, db, QPTypeUD, 4096, nil, nil)
	ah := readyUD(t, a, b, qkey)
	recv := func(x *side) {
		_ = must[int](t)(x.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{{Addr: x.mr.Addr() + 2048, Length: 2048, LKey: x.mr.LKey()}}}}))
	}
	send := func(x *side, ah *AH, qpn uint32, msg string) {
		copy(x.buf, msg)
		_ = must[int](t)(x.qp.PostSend([]SendWR{{WRID: 2, Opcode: WRSend, Flags: SendSignaled,
			SGL: []SGE{{Addr: x.mr.Addr(), Length: uint32(len(msg)), LKey: x.mr.LKey()}}, AH: ah.AV(), RemoteQPN: qpn, RemoteQKey: qkey}}))
		checkWC(t, pollN(t, x.scq, 1, wcTimeout)[0], 2, WCSend, -1)
	}
	recv(b)
	recv(a)
	send(a, ah, b.qp.QPN(), "ping")
	wc := pollN(t, b.rcq, 1, wcTimeout)[0]
	checkWC(t, wc, 1, WCRecv, GRHLen+4)
	reply := must[*AH](t)(b.pd.CreateAHFromWC(&wc, b.buf[2048:2048+GRHLen]))
	if av := reply.Attr(); av.DGID != da.Addr() || !av.IsGlobal || av.HopLimit != 64 {
		t.Fatalf("AH from the completion %+v", av)
	}
	send(b, reply, wc.SrcQP, "pong")
	checkWC(t, pollN(t, a.rcq, 1, wcTimeout)[0], 1, WCRecv, GRHLen+4)
	if !bytes.Equal(a.buf[2048+GRHLen:2048+GRHLen+4], []byte("pong")) {
		t.Fatal("the answer did not arrive")
	}
}
