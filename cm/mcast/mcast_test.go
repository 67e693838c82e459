package mcast

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/roce"
)

// TestMGIDIsCmaIboeSetMGID: the kernel's cma_iboe_set_mgid for a RoCEv2 port:
// an IPv4 group becomes ::ffff:a.b.c.d, an IPv6 group is its own MGID; the
// zero address and unicast addresses are EINVAL.
func TestMGIDIsCmaIboeSetMGID(t *testing.T) {
	for _, tc := range []struct {
		group string
		want  [16]byte
	}{
		{"239.1.2.3", [16]byte{10: 0xff, 11: 0xff, 12: 239, 13: 1, 14: 2, 15: 3}},
		{"::ffff:224.0.0.251", [16]byte{10: 0xff, 11: 0xff, 12: 224, 15: 251}},
		{"ff05::1:2", [16]byte{0: 0xff, 1: 0x05, 13: 1, 15: 2}},
	} {
		got, err := MGID(netip.MustParseAddr(tc.group))
		if err != nil || [16]byte(got) != tc.want {
			t.Errorf("MGID(%s) = % x, %v; want % x", tc.group, got, err, tc.want)
		}
	}
	for _, g := range []netip.Addr{{}, netip.IPv4Unspecified(), netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")} {
		if _, err := MGID(g); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("MGID(%v) = %v, want EINVAL", g, err)
		}
	}
}

type side struct {
	dev *roce.Device
	pd  *roce.PD
	cq  *roce.CQ
	qp  *roce.QP
	buf []byte
	mr  *roce.MR
}

func newUD(t *testing.T, d *roce.Device, qkey uint32) *side {
	t.Helper()
	x := &side{dev: d, buf: make([]byte, 4096)}
	var err error
	if x.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if x.cq, err = d.CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	if x.qp, err = x.pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeUD, SendCQ: x.cq, RecvCQ: x.cq,
		Cap: roce.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}
	if x.mr, err = x.pd.RegMR(x.buf, roce.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		a roce.QPAttr
		m roce.QPAttrMask
	}{
		{roce.QPAttr{State: roce.QPSInit, PortNum: 1, QKey: qkey}, roce.QPAttrState | roce.QPAttrPKeyIndex | roce.QPAttrPort | roce.QPAttrQKey},
		{roce.QPAttr{State: roce.QPSRTR}, roce.QPAttrState},
		{roce.QPAttr{State: roce.QPSRTS, SQPSN: 1}, roce.QPAttrState | roce.QPAttrSQPSN},
	} {
		if err := x.qp.Modify(&step.a, step.m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := x.qp.PostRecv([]roce.RecvWR{{WRID: 1, SGL: []roce.SGE{{Addr: x.mr.Addr(), Length: 4096, LKey: x.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	return x
}

// pipePair opens two devices on a Pipe, each with QP1 diverted to a CM
// (gsi.Wrap) as rdma_cm programs open theirs.
func pipePair(t *testing.T) (*roce.Device, *roce.Device) {
	t.Helper()
	la, lb := link.Pipe(netip.MustParseAddrPort("192.0.2.1:4791"), netip.MustParseAddrPort("192.0.2.2:4791"))
	ga, _ := gsi.Wrap(la)
	gb, _ := gsi.Wrap(lb)
	a, err := roce.OpenLink(ga)
	if err != nil {
		t.Fatal(err)
	}
	b, err := roce.OpenLink(gb)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// poll waits up to d for one completion on cq; ok is false if none came.
func poll(t *testing.T, cq *roce.CQ, d time.Duration) (roce.WC, bool) {
	t.Helper()
	var wc [1]roce.WC
	for end := time.Now().Add(d); ; {
		n, err := cq.Poll(wc[:])
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return wc[0], true
		}
		if time.Now().After(end) {
			return roce.WC{}, false
		}
		time.Sleep(time.Millisecond)
	}
}

// TestJoinAsRdmaJoinMulticast: a full member's QP is attached and receives
// what is sent to the group through the join's address vector, QPN 0xFFFFFF
// and Q_Key 0x01234567 (hop limit 64, as cma_iboe_join_multicast); a send-only
// member is not attached (librdmacm ucma_process_join: "Don't attach QP to
// multicast if joined as send only full member"), so its own datagram does not
// come back to it; after Leave the receiver gets nothing more, and a second
// Leave is EINVAL.
func TestJoinAsRdmaJoinMulticast(t *testing.T) {
	da, db := pipePair(t)
	group := netip.MustParseAddr("239.10.0.1")
	recv := newUD(t, db, cm.UDPQKey)
	send := newUD(t, da, cm.UDPQKey)
	rm, err := Join(recv.qp, group, FullMember)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := Join(send.qp, group, SendOnlyFullMember)
	if err != nil {
		t.Fatal(err)
	}
	want := roce.AHAttr{DGID: group, SGIDIndex: uint8(da.GIDIndex()), HopLimit: 64, IsGlobal: true}
	if sm.AHAttr() != want || sm.RemoteQPN() != 0xFFFFFF || sm.QKey() != 0x01234567 || sm.MGID() != roce.GIDFromAddr(group) {
		t.Fatalf("join reports %+v qpn %#x qkey %#x mgid %v, want %+v 0xffffff 0x1234567", sm.AHAttr(), sm.RemoteQPN(), sm.QKey(), sm.MGID(), want)
	}
	ah, err := send.pd.CreateAH(sm.AHAttr())
	if err != nil {
		t.Fatal(err)
	}
	sendOne := func(wrid uint64) {
		t.Helper()
		copy(send.buf, "hello group")
		if _, err := send.qp.PostSend([]roce.SendWR{{WRID: wrid, Opcode: roce.WRSend, Flags: roce.SendSignaled,
			SGL: []roce.SGE{{Addr: send.mr.Addr(), Length: 11, LKey: send.mr.LKey()}}, AH: ah.AV(), RemoteQPN: sm.RemoteQPN(), RemoteQKey: sm.QKey()}}); err != nil {
			t.Fatal(err)
		}
		if wc, ok := poll(t, send.cq, 5*time.Second); !ok || wc.Status != roce.WCSuccess || wc.WRID != wrid {
			t.Fatalf("send completion %+v (%v)", wc, ok)
		}
	}
	sendOne(10)
	wc, ok := poll(t, recv.cq, 5*time.Second)
	if !ok || wc.Status != roce.WCSuccess || wc.Opcode != roce.WCRecv || wc.SrcQP != send.qp.QPN() ||
		string(recv.buf[roce.GRHLen:roce.GRHLen+11]) != "hello group" {
		t.Fatalf("member's completion %+v (%v), data %q", wc, ok, recv.buf[roce.GRHLen:roce.GRHLen+11])
	}
	if wc, ok := poll(t, send.cq, 50*time.Millisecond); ok {
		t.Fatalf("the send-only member received %+v", wc)
	}

	if err := rm.Leave(); err != nil {
		t.Fatal(err)
	}
	if err := rm.Leave(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("second Leave = %v, want EINVAL", err)
	}
	if _, err := recv.qp.PostRecv([]roce.RecvWR{{WRID: 2, SGL: []roce.SGE{{Addr: recv.mr.Addr(), Length: 4096, LKey: recv.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	sendOne(11)
	if wc, ok := poll(t, recv.cq, 50*time.Millisecond); ok {
		t.Fatalf("a member that left received %+v", wc)
	}
	if err := sm.Leave(); err != nil {
		t.Fatal(err)
	}
}

// TestJoinRefuses: rdma_join_multicast needs a UD QP (EINVAL otherwise), a
// group of the device's family, and known join flags.
func TestJoinRefuses(t *testing.T) {
	da, _ := pipePair(t)
	ud := newUD(t, da, cm.UDPQKey)
	pd, _ := da.AllocPD()
	cq, _ := da.CreateCQ(4)
	rc, err := pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: roce.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	g := netip.MustParseAddr("239.10.0.2")
	for name, join := range map[string]func() error{
		"RC QP":        func() error { _, err := Join(rc, g, FullMember); return err },
		"IPv6 group":   func() error { _, err := Join(ud.qp, netip.MustParseAddr("ff05::7"), FullMember); return err },
		"unicast":      func() error { _, err := Join(ud.qp, netip.MustParseAddr("192.0.2.9"), FullMember); return err },
		"flags":        func() error { _, err := Join(ud.qp, g, 2); return err },
		"zero address": func() error { _, err := Join(ud.qp, netip.IPv4Unspecified(), FullMember); return err },
	} {
		if err := join(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: Join = %v, want EINVAL", name, err)
		}
	}
}
