//go:build linux

package roce

import (
	"net/netip"
	"os"
	"testing"

	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/testsupport/nettest"
)

// TestMulticastOverUDP: a UD send to a multicast group over real sockets
// reaches every QP attached to the group on both devices (the peer's over the
// wire or lo, the sender's own through the kernel's multicast loopback), with
// DestQP 0xFFFFFF, and the datagram carries the traffic class, hop limit and
// (IPv6) flow label of the AH: the AH's hop limit, not the link's default
// multicast TTL of 1 (rdma_cm's multicast AH asks 64); congestion control
// being on, the traffic class's ECN bits are ECT(0). The capture and each
// member's GRH area show them. IPv4 on lo (two devices, one host); IPv6
// across a veth pair between two test namespaces, captured on the receiver's
// veth, with a site-local and a link-local scope group.
func TestMulticastOverUDP(t *testing.T) {
	av := func(d *Device, g netip.Addr) AHAttr {
		return AHAttr{DGID: g, SGIDIndex: uint8(d.GIDIndex()), IsGlobal: true, TrafficClass: 0x68, HopLimit: 5, FlowLabel: 0x2468a}
	}
	t.Run("IPv4-lo", func(t *testing.T) {
		port := udpPort(t)
		da := must[*Device](t)(Open(addrA, WithPort(port), WithMTU(MTU1024)))
		t.Cleanup(func() { da.Close() })
		db := must[*Device](t)(Open(addrB, WithPort(port), WithMTU(MTU1024)))
		t.Cleanup(func() { db.Close() })
		var sn *nettest.Sniffer // the delivery is tested without root too
		if os.Geteuid() == 0 {
			sn = nettest.Sniff(t, "lo", port)
		}
		multicastRound(t, da, db, netip.MustParseAddr("239.9.8.7"), av, sn, false)
	})
	for _, group := range []string{"ff05::9:8", "ff02::9:8"} {
		t.Run("IPv6-veth-"+group, func(t *testing.T) {
			nettest.NeedRoot(t, "network namespaces")
			nsA, nsB := nettest.NewNetns(t), nettest.NewNetns(t)
			nettest.VethPair(nsA, nsB, "rma", "rmb", []string{"fd00:203::1/64"}, []string{"fd00:203::2/64"})
			nsA.WaitUp("rma")
			nsB.WaitUp("rmb")
			var da, db *Device
			nsA.In(t, func() (err error) {
				da, err = Open(netip.MustParseAddr("fd00:203::1"), WithMTU(MTU1024))
				return err
			})
			t.Cleanup(func() { da.Close() })
			nsB.In(t, func() (err error) {
				db, err = Open(netip.MustParseAddr("fd00:203::2"), WithMTU(MTU1024))
				return err
			})
			t.Cleanup(func() { db.Close() })
			var sn *nettest.Sniffer
			nsB.In(t, func() error {
				sn = nettest.Sniff(t, "rmb", RoCEv2Port)
				return nil
			})
			multicastRound(t, da, db, netip.MustParseAddr(group), av, sn, true)
		})
	}
}

// multicastRound attaches two QPs of each device to group, sends one datagram
// from a third QP of da through an AH of fields av, and checks every member's
// receive and the captured datagrams.
func multicastRound(t *testing.T, da, db *Device, group netip.Addr, av func(*Device, netip.Addr) AHAttr, sn *nettest.Sniffer, v6 bool) {
	const qkey, n = 0x2222, 300
	sender := newSide(t, da, QPTypeUD, 4096, nil, nil)
	readyUDQKey(t, sender, qkey)
	var members []*side
	for _, d := range []*Device{da, da, db, db} {
		x := newSide(t, d, QPTypeUD, 4096, nil, nil)
		readyUDQKey(t, x, qkey)
		noErr(t, x.qp.AttachMcast(GIDFromAddr(group), 0))
		postGRHRecv(t, x, 1, n)
		members = append(members, x)
	}
	attr := av(da, group)
	ah := must[*AH](t)(sender.pd.CreateAH(attr))
	wantTC := dcqcn.DataTOS(attr.TrafficClass, true) // the DSCP with ECT(0)
	sendToGroup(t, sender, ah, 7, n, qkey)
	for i, x := range members {
		wc := pollN(t, x.rcq, 1, wcTimeout)[0]
		checkWC(t, wc, 1, WCRecv, GRHLen+n)
		if wc.SrcQP != sender.qp.QPN() || string(x.buf[GRHLen:GRHLen+n]) != string(sender.buf[:n]) {
			t.Fatalf("member %d: completion %+v or payload differs", i, wc)
		}
		tc, hop, flow := grhFields(x.buf[:GRHLen])
		if tc != wantTC || hop != attr.HopLimit || (v6 && flow != attr.FlowLabel) {
			t.Fatalf("member %d: GRH area traffic class %#x hop limit %d flow label %#x, sent with %+v", i, tc, hop, flow, attr)
		}
	}
	if sn == nil {
		return
	}
	// No wait: the members received the datagram above, and the capture's
	// tap sees it before their sockets do.
	seen := 0
	for _, p := range sn.Stop() {
		if p.Dst != group || p.DestQP != McastQPN {
			continue
		}
		seen++
		want := attr.FlowLabel
		if !v6 {
			want = 0
		}
		if p.TOS != wantTC || p.TTL != attr.HopLimit || p.Flow != want {
			t.Errorf("captured datagram to %v: traffic class %#x hop limit %d flow label %#x, want %#x %d %#x",
				p.Dst, p.TOS, p.TTL, p.Flow, wantTC, attr.HopLimit, want)
		}
	}
	if seen == 0 {
		t.Fatalf("no datagram to %v with DestQP 0xFFFFFF captured", group)
	}
	t.Logf("%d datagram(s) to %v captured with traffic class %#x hop limit %d flow label %#x", seen, group, wantTC, attr.HopLimit, attr.FlowLabel)
}

// grhFields reads the traffic class, hop limit and flow label from a GRH
// area (an IPv6 header, or an IPv4 one in its last 20 bytes).
func grhFields(grh []byte) (tc, hop uint8, flow uint32) {
	if grh[0]>>4 == 6 {
		return grh[0]<<4 | grh[1]>>4, grh[7], uint32(grh[1]&0x0F)<<16 | uint32(grh[2])<<8 | uint32(grh[3])
	}
	return grh[21], grh[28], 0
}
