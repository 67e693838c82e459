package roce

import (
	"net/netip"
	"syscall"
	"testing"
	"time"
)

var testGroup = netip.MustParseAddr("239.1.2.3")

// readyUDQKey moves a UD QP to RTS with Q_Key qkey.
func readyUDQKey(t testing.TB, x *side, qkey uint32) {
	t.Helper()
	noErr(t, x.qp.Modify(&QPAttr{State: QPSInit, PortNum: 1, QKey: qkey}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrQKey))
	noErr(t, x.qp.Modify(&QPAttr{State: QPSRTR}, QPAttrState))
	noErr(t, x.qp.Modify(&QPAttr{State: QPSRTS, SQPSN: 1}, QPAttrState|QPAttrSQPSN))
}

// groupAH is an AH to the multicast group g, as rdma_join_multicast's ah_attr.
func groupAH(t testing.TB, x *side, g netip.Addr) *AH {
	t.Helper()
	return must[*AH](t)(x.pd.CreateAH(AHAttr{DGID: g, SGIDIndex: uint8(x.dev.GIDIndex()), HopLimit: 64, IsGlobal: true}))
}

// postGRHRecv posts a receive WR with room for the GRH area and n bytes.
func postGRHRecv(t testing.TB, x *side, wrid uint64, n int) {
	t.Helper()
	_ = must[int](t)(x.qp.PostRecv([]RecvWR{{WRID: wrid, SGL: []SGE{{Addr: x.mr.Addr(), Length: uint32(GRHLen + n), LKey: x.mr.LKey()}}}}))
}

// sendToGroup sends n bytes of x's buffer to the group through ah, Q_Key qkey,
// DestQP McastQPN, and waits for its completion.
func sendToGroup(t testing.TB, x *side, ah *AH, wrid uint64, n int, qkey uint32) {
	t.Helper()
	fill(x.buf[:n], wrid)
	_ = must[int](t)(x.qp.PostSend([]SendWR{{WRID: wrid, Opcode: WRSend, Flags: SendSignaled,
		SGL: []SGE{{Addr: x.mr.Addr(), Length: uint32(n), LKey: x.mr.LKey()}}, AH: ah.AV(), RemoteQPN: McastQPN, RemoteQKey: qkey}}))
	checkWC(t, pollN(t, x.scq, 1, wcTimeout)[0], wrid, WCSend, -1)
}

// TestIbvAttachMcastRules: ibv_attach_mcast(3) and the kernel's ib_attach_mcast
// and rxe_mcast.c. Only a UD QP attaches, only to a multicast GID (of the
// device's IP family here: the group is joined on its socket); attaching a QP
// twice succeeds (rxe: "check to see if the qp is already a member of the
// group"); detaching a QP that is not attached is EINVAL; max_mcast_grp,
// max_mcast_qp_attach and max_total_mcast_qp_attach are ENOMEM; a destroyed
// QP's attachments are released.
func TestIbvAttachMcastRules(t *testing.T) {
	lim := Limits{MaxMcastGrp: 2, MaxMcastQPAttach: 2, MaxTotalMcastQPAttach: 3}
	d := pipeDevice(t, WithLimits(lim))
	a := must[DeviceAttr](t)(d.Query())
	if a.MaxMcastGrp != 2 || a.MaxMcastQPAttch != 2 || a.MaxTotalMcastQP != 3 {
		t.Fatalf("device attr mcast limits %d/%d/%d, want 2/2/3", a.MaxMcastGrp, a.MaxMcastQPAttch, a.MaxTotalMcastQP)
	}
	g := GIDFromAddr(testGroup)
	rc := newSide(t, d, QPTypeRC, 64, nil, nil)
	wantErrno(t, rc.qp.AttachMcast(g, 0), syscall.EINVAL)
	ud := []*side{newSide(t, d, QPTypeUD, 64, nil, nil)}
	for i := 0; i < 3; i++ {
		ud = append(ud, newSide(t, d, QPTypeUD, 64, nil, ud[0].pd))
	}
	wantErrno(t, ud[0].qp.AttachMcast(GIDFromAddr(addrB), 0), syscall.EINVAL)
	wantErrno(t, ud[0].qp.AttachMcast(GIDFromAddr(netip.MustParseAddr("ff0e::1")), 0), syscall.EINVAL)
	wantErrno(t, ud[0].qp.DetachMcast(g, 0), syscall.EINVAL)

	noErr(t, ud[0].qp.AttachMcast(g, 0))
	noErr(t, ud[0].qp.AttachMcast(g, 0)) // already a member
	noErr(t, ud[1].qp.AttachMcast(g, 0))
	wantErrno(t, ud[2].qp.AttachMcast(g, 0), syscall.ENOMEM) // max_mcast_qp_attach
	g2 := GIDFromAddr(netip.MustParseAddr("239.1.2.4"))
	noErr(t, ud[2].qp.AttachMcast(g2, 0))
	wantErrno(t, ud[3].qp.AttachMcast(g2, 0), syscall.ENOMEM) // max_total_mcast_qp_attach
	noErr(t, ud[1].qp.DetachMcast(g, 0))
	wantErrno(t, ud[1].qp.DetachMcast(g, 0), syscall.EINVAL)
	wantErrno(t, ud[3].qp.AttachMcast(GIDFromAddr(netip.MustParseAddr("239.1.2.5")), 0), syscall.ENOMEM) // max_mcast_grp
	noErr(t, ud[3].qp.AttachMcast(g2, 0))

	// Destroying a QP detaches it: its places are free again.
	noErr(t, ud[0].qp.Close())
	noErr(t, ud[2].qp.Close())
	noErr(t, ud[1].qp.AttachMcast(GIDFromAddr(netip.MustParseAddr("239.1.2.5")), 0))
	noErr(t, ud[1].qp.AttachMcast(g2, 0))
}

// TestMulticastDatagramReachesEveryAttachedQP: IBA 10.5.2.4 / rxe
// rxe_rcv_mcast_pkt. A UD send through an AH to a multicast group with DestQP
// 0xFFFFFF is delivered to every QP attached to the group, on the sender's
// device and on the peer's, each with its own copy and a GRH area naming the
// group as destination; a QP not attached, or attached with another Q_Key
// (C10-15), gets nothing. After a detach (and after the peer's last QP leaves,
// which leaves the IP group) datagrams no longer arrive there. DestQP
// 0xFFFFFF to a unicast address reaches nobody.
func TestMulticastDatagramReachesEveryAttachedQP(t *testing.T) {
	da, db := pipePair(t)
	const qkey, n = 0x11111111, 200
	g := GIDFromAddr(testGroup)
	sender := newSide(t, da, QPTypeUD, 4096, nil, nil)
	readyUDQKey(t, sender, qkey)
	var members []*side
	for _, d := range []*Device{da, da, db, db, db} {
		x := newSide(t, d, QPTypeUD, 4096, nil, nil)
		readyUDQKey(t, x, qkey)
		noErr(t, x.qp.AttachMcast(g, 0))
		members = append(members, x)
	}
	outsider := newSide(t, db, QPTypeUD, 4096, nil, nil)
	readyUDQKey(t, outsider, qkey)
	wrongKey := newSide(t, db, QPTypeUD, 4096, nil, nil)
	readyUDQKey(t, wrongKey, qkey+1)
	noErr(t, wrongKey.qp.AttachMcast(g, 0))
	for _, x := range append([]*side{outsider, wrongKey}, members...) {
		for i := 0; i < 4; i++ {
			postGRHRecv(t, x, uint64(100+i), n)
		}
	}
	ah := groupAH(t, sender, testGroup)

	sendToGroup(t, sender, ah, 1, n, qkey)
	for i, x := range members {
		wc := pollN(t, x.rcq, 1, wcTimeout)[0]
		checkWC(t, wc, 100, WCRecv, GRHLen+n)
		if wc.SrcQP != sender.qp.QPN() || wc.Flags&WCGRH == 0 {
			t.Fatalf("member %d: completion %+v, want src_qp %#x with a GRH", i, wc, sender.qp.QPN())
		}
		ip4 := x.buf[20:GRHLen] // an IPv4 datagram's header
		src, dst := netip.AddrFrom4([4]byte(ip4[12:16])), netip.AddrFrom4([4]byte(ip4[16:20]))
		if dst != testGroup || src != addrA {
			t.Fatalf("member %d: GRH area %v → %v, want %v → %v", i, src, dst, addrA, testGroup)
		}
		// "no point searching multicast GIDs in GID table": the answer to a
		// multicast sender needs an AH of its own.
		_, err := x.dev.InitAHFromWC(&wc, x.buf[:GRHLen])
		wantErrno(t, err, syscall.EINVAL)
		if got, want := x.buf[GRHLen:GRHLen+n], sender.buf[:n]; string(got) != string(want) {
			t.Fatalf("member %d: payload differs", i)
		}
	}
	noMoreWC(t, outsider.rcq, 50*time.Millisecond)
	noMoreWC(t, wrongKey.rcq, 0)

	// A detached QP no longer receives; the others still do.
	noErr(t, members[0].qp.DetachMcast(g, 0))
	noErr(t, members[3].qp.Close())
	sendToGroup(t, sender, ah, 2, n, qkey)
	for _, i := range []int{1, 2, 4} {
		checkWC(t, pollN(t, members[i].rcq, 1, wcTimeout)[0], 101, WCRecv, GRHLen+n)
	}
	noMoreWC(t, members[0].rcq, 50*time.Millisecond)

	// The peer's last members leave: it leaves the IP group.
	noErr(t, members[2].qp.DetachMcast(g, 0))
	noErr(t, members[4].qp.DetachMcast(g, 0))
	noErr(t, wrongKey.qp.DetachMcast(g, 0))
	sendToGroup(t, sender, ah, 3, n, qkey)
	checkWC(t, pollN(t, members[1].rcq, 1, wcTimeout)[0], 102, WCRecv, GRHLen+n)
	noMoreWC(t, members[2].rcq, 50*time.Millisecond)
	noMoreWC(t, members[4].rcq, 0)

	// DestQP 0xFFFFFF to an address that is not a group the device joined
	// (here its unicast address) reaches nobody (rxe: no mcg for the DGID).
	unicast := must[*AH](t)(sender.pd.CreateAH(AHAttr{DGID: db.Addr(), SGIDIndex: uint8(da.GIDIndex()), HopLimit: 64, IsGlobal: true}))
	before := db.Stats().UnknownQP
	sendToGroup(t, sender, unicast, 4, n, qkey)
	deadline := time.Now().Add(wcTimeout)
	for db.Stats().UnknownQP == before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if db.Stats().UnknownQP == before {
		t.Fatal("a datagram to DestQP 0xFFFFFF at a unicast address was not dropped as for an unknown QP")
	}
	noMoreWC(t, members[1].rcq, 0)
	noMoreWC(t, outsider.rcq, 0)
}

// TestMulticastGroupIsNotAConnectedPath: a connected QP's address vector
// cannot lead to a multicast group (EINVAL), while an AH can.
func TestMulticastGroupIsNotAConnectedPath(t *testing.T) {
	d := pipeDevice(t)
	x := newSide(t, d, QPTypeRC, 64, nil, nil)
	noErr(t, x.qp.Modify(&QPAttr{State: QPSInit, PortNum: 1, AccessFlags: testAccess}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags))
	err := x.qp.Modify(&QPAttr{State: QPSRTR, PathMTU: MTU1024, DestQPN: 2, RQPSN: 1, MaxDestRDAtomic: 1, MinRNRTimer: 1,
		AV: AddressVector{DGID: testGroup, SGIDIndex: uint8(d.GIDIndex()), HopLimit: 64, IsGlobal: true}},
		QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRDAtomic|QPAttrMinRNRTimer)
	wantErrno(t, err, syscall.EINVAL)
	_ = groupAH(t, x, testGroup)
}
