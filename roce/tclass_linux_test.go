//go:build linux

package roce

import (
	"net"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/testsupport/nettest"
)

// TestAddressVectorFieldsOnTheWire captures on lo, with an AF_PACKET socket, the
// datagrams of an RC connection (a multi-packet WRITE, a READ and the ACKs and
// READ responses that answer them) and of a UD send, over IPv4 and IPv6, and
// checks that each carries the traffic class, hop limit and (IPv6) flow label of
// the address vector its sender used: the RC requester's path for its requests,
// the responder's path for its ACKs and READ responses, the AH for the UD
// datagram. The UD receiver's GRH area reports what the kernel delivered.
func TestAddressVectorFieldsOnTheWire(t *testing.T) {
	nettest.NeedRoot(t, "an AF_PACKET capture")
	for _, fam := range []struct {
		name   string
		a, b   netip.Addr
		v6     bool
		listen string
	}{
		{"IPv4", addrA, addrB, false, "udp4"},
		// lo has one IPv6 address: both devices use ::1, on two ports.
		{"IPv6", netip.MustParseAddr("::1"), netip.MustParseAddr("::1"), true, "udp6"},
	} {
		t.Run(fam.name, func(t *testing.T) {
			port := freePort(t, fam.listen, fam.a)
			// Congestion control off: every packet carries the traffic class
			// exactly as given (on, data carries ECT(0): cc_test.go).
			da := must[*Device](t)(Open(fam.a, WithPort(port), WithMTU(MTU1024), WithCongestionControl(dcqcn.Config{})))
			t.Cleanup(func() { da.Close() })
			db := da // on ::1 one device talks to itself
			if !fam.v6 {
				db = must[*Device](t)(Open(fam.b, WithPort(port), WithMTU(MTU1024), WithCongestionControl(dcqcn.Config{})))
				t.Cleanup(func() { db.Close() })
			}
			avAB := AddressVector{DGID: db.Addr(), SGIDIndex: uint8(da.GIDIndex()), IsGlobal: true,
				TrafficClass: 0x68, HopLimit: 7, FlowLabel: 0x12345}
			avBA := AddressVector{DGID: da.Addr(), SGIDIndex: uint8(db.GIDIndex()), IsGlobal: true,
				TrafficClass: 0xb8 | 2, HopLimit: 9, FlowLabel: 0xabcde}
			avUD := AddressVector{DGID: db.Addr(), SGIDIndex: uint8(da.GIDIndex()), IsGlobal: true,
				TrafficClass: 0x2e << 2, HopLimit: 3, FlowLabel: 0x55555}

			sn := nettest.Sniff(t, "lo", port)
			a := newSide(t, da, QPTypeRC, 8192, nil, nil)
			b := newSide(t, db, QPTypeRC, 8192, nil, nil)
			connectRCWith(t, a, b, MTU1024, avAB, avBA)
			fill(a.buf, 7)
			_ = must[int](t)(a.qp.PostSend([]SendWR{
				{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{{Addr: a.mr.Addr(), Length: 3000, LKey: a.mr.LKey()}},
					RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
				{WRID: 2, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{{Addr: a.mr.Addr() + 4096, Length: 2500, LKey: a.mr.LKey()}},
					RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
			}))
			pollN(t, a.scq, 2, wcTimeout)

			ua := newSide(t, da, QPTypeUD, 4096, nil, nil)
			ub := newSide(t, db, QPTypeUD, 4096, nil, nil)
			readyUD(t, ua, ub, 0x77)
			ah := must[*AH](t)(ua.pd.CreateAH(avUD))
			_ = must[int](t)(ub.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{{Addr: ub.mr.Addr(), Length: 4096, LKey: ub.mr.LKey()}}}}))
			_ = must[int](t)(ua.qp.PostSend([]SendWR{{WRID: 3, Opcode: WRSend, Flags: SendSignaled,
				SGL: []SGE{{Addr: ua.mr.Addr(), Length: 100, LKey: ua.mr.LKey()}}, AH: ah.AV(), RemoteQPN: ub.qp.QPN(), RemoteQKey: 0x77}}))
			wc := pollN(t, ub.rcq, 1, wcTimeout)[0]
			// No wait: every packet counted below was taken in by its
			// receiver before the completions above, and the capture's tap
			// sees a datagram before its receiver's socket does.
			pkts := sn.Stop()

			// A packet is told by its destination QP at its destination address
			// (the two IPv4 devices hand out the same QPNs).
			type to struct {
				addr netip.Addr
				qpn  uint32
			}
			bq, aq, uq := to{db.Addr(), b.qp.QPN()}, to{da.Addr(), a.qp.QPN()}, to{db.Addr(), ub.qp.QPN()}
			want := map[to]AddressVector{bq: avAB, aq: avBA, uq: avUD}
			seen := map[to]int{}
			for _, p := range pkts {
				k := to{p.Dst, p.DestQP}
				av, ok := want[k]
				if !ok {
					continue
				}
				seen[k]++
				flow := uint32(0)
				if fam.v6 {
					flow = p.Flow
				} else {
					av.FlowLabel = 0
				}
				if p.TOS != av.TrafficClass || p.TTL != av.HopLimit || flow != av.FlowLabel {
					t.Errorf("%v to QP %#x: traffic class %#x hop limit %d flow label %#x, want %#x %d %#x",
						p.Opcode, p.DestQP, p.TOS, p.TTL, flow, av.TrafficClass, av.HopLimit, av.FlowLabel)
				}
			}
			// WRITE FIRST, MIDDLE, LAST and READ request; READ responses and ACKs; the datagram.
			if seen[bq] < 4 || seen[aq] < 3 || seen[uq] != 1 {
				t.Fatalf("captured %v packets per QP (%d in all)", seen, len(pkts))
			}
			t.Logf("%d packets captured, each with its sender's address vector fields", len(pkts))

			got := must[AHAttr](t)(db.InitAHFromWC(&wc, ub.buf[:GRHLen]))
			if got.TrafficClass != avUD.TrafficClass || got.HopLimit != avUD.HopLimit || (fam.v6 && got.FlowLabel != avUD.FlowLabel) {
				t.Fatalf("the GRH area reports %+v, sent with %+v", got, avUD)
			}
		})
	}
}

// freePort returns a UDP port free on the test addresses of the family.
func freePort(t *testing.T, network string, addr netip.Addr) uint16 {
	t.Helper()
	if addr.Is4() {
		return udpPort(t)
	}
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		t.Skipf("no UDP port on %v: %v", addr, err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}
