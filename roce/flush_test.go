package roce

import (
	"bytes"
	"encoding/binary"
	"syscall"
	"testing"
)

// flushPair is an RC connection a→b whose QPs allow FLUSH of both placement
// types, with b's buffer registered for global-visibility FLUSH.
func flushPair(t *testing.T) (a, b *side, mr *MR) {
	da, db := pipePair(t)
	a, b = newSide(t, da, QPTypeRC, 4096, nil, nil), newSide(t, db, QPTypeRC, 4096, nil, nil)
	access := testAccess | AccessFlushGlobal | AccessFlushPersistent
	avAB := AddressVector{DGID: db.Addr(), SGIDIndex: uint8(da.GIDIndex()), HopLimit: 64, IsGlobal: true}
	avBA := AddressVector{DGID: da.Addr(), SGIDIndex: uint8(db.GIDIndex()), HopLimit: 64, IsGlobal: true}
	connectRCWith(t, a, b, MTU1024, avAB, avBA)
	for _, s := range []*side{a, b} {
		noErr(t, s.qp.Modify(&QPAttr{AccessFlags: access}, QPAttrAccessFlags))
	}
	mr = must[*MR](t)(b.pd.RegMR(b.buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessFlushGlobal))
	return a, b, mr
}

// TestAtomicWriteEndToEnd: ATOMIC_WRITE stores 8 bytes at once (A19), read back
// by the peer and by an RDMA READ; to memory without REMOTE_WRITE it is a
// remote access error that changes nothing.
func TestAtomicWriteEndToEnd(t *testing.T) {
	a, b, mr := flushPair(t)
	for i, v := range []uint64{0x0123456789abcdef, 42} {
		_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRAtomicWrite, Flags: SendSignaled,
			RemoteAddr: mr.Addr() + 64, RKey: mr.RKey(), Swap: v}}))
		checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], uint64(i), WCAtomicWrite, 8)
		_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: 9, Opcode: WRRDMARead, Flags: SendSignaled,
			SGL: []SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}}, RemoteAddr: mr.Addr() + 64, RKey: mr.RKey()}}))
		checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], 9, WCRDMARead, 8)
		if got := binary.NativeEndian.Uint64(a.buf); got != v {
			t.Fatalf("READ back %#x after ATOMIC_WRITE %#x", got, v)
		}
		b.dev.barrier()
		if got := binary.NativeEndian.Uint64(b.buf[64:]); got != v {
			t.Fatalf("the responder holds %#x after ATOMIC_WRITE %#x", got, v)
		}
	}
	ro := must[*MR](t)(b.pd.RegMR(make([]byte, 64), AccessRemoteRead))
	_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: 3, Opcode: WRAtomicWrite, Flags: SendSignaled,
		RemoteAddr: ro.Addr(), RKey: ro.RKey(), Swap: 7}}))
	if wc := pollN(t, a.scq, 1, wcTimeout)[0]; wc.Status != WCRemAccessErr {
		t.Fatalf("ATOMIC_WRITE to a read-only MR: %v, want REM_ACCESS_ERR", wc.Status)
	}
	if !bytes.Equal(ro.Buf(), make([]byte, 64)) {
		t.Fatal("the refused ATOMIC_WRITE changed the MR")
	}
}

// TestFlushEndToEnd: a WRITE then FLUSH of its range and of the whole MR
// (global visibility) complete with IBV_WC_FLUSH; a FLUSH for persistence of
// memory registered without FLUSH_PERSISTENT is a remote access error.
func TestFlushEndToEnd(t *testing.T) {
	a, b, mr := flushPair(t)
	fill(a.buf[:512], 3)
	_ = must[int](t)(a.qp.PostSend([]SendWR{
		{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{{Addr: a.mr.Addr(), Length: 512, LKey: a.mr.LKey()}},
			RemoteAddr: mr.Addr(), RKey: mr.RKey()},
		{WRID: 2, Opcode: WRFlush, Flags: SendSignaled, RemoteAddr: mr.Addr(), RKey: mr.RKey(),
			Flush: FlushWR{Type: FlushGlobal, Level: FlushRange, Length: 512}},
		{WRID: 3, Opcode: WRFlush, Flags: SendSignaled, RKey: mr.RKey(), Flush: FlushWR{Type: FlushGlobal, Level: FlushMR}},
	}))
	wcs := pollN(t, a.scq, 3, wcTimeout)
	checkWC(t, wcs[0], 1, WCRDMAWrite, 512)
	checkWC(t, wcs[1], 2, WCFlush, 512)
	checkWC(t, wcs[2], 3, WCFlush, 0)
	b.dev.barrier()
	if !bytes.Equal(b.buf[:512], a.buf[:512]) {
		t.Fatal("the WRITE before the FLUSH is not in place")
	}
	_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: 4, Opcode: WRFlush, Flags: SendSignaled, RemoteAddr: mr.Addr(), RKey: mr.RKey(),
		Flush: FlushWR{Type: FlushPersistent, Level: FlushRange, Length: 64}}}))
	if wc := pollN(t, a.scq, 1, wcTimeout)[0]; wc.Status != WCRemAccessErr {
		t.Fatalf("persistent FLUSH of memory without FLUSH_PERSISTENT: %v, want REM_ACCESS_ERR", wc.Status)
	}
}

func TestFlushAndAtomicWritePostErrnos(t *testing.T) {
	da, _ := pipePair(t)
	uc := newSide(t, da, QPTypeUC, 64, nil, nil)
	rc := newSide(t, da, QPTypeRC, 64, nil, nil)
	for _, s := range []*side{uc, rc} {
		a := ConnectAttr{AV: AddressVector{DGID: addrB, SGIDIndex: uint8(da.GIDIndex()), IsGlobal: true},
			PathMTU: MTU1024, DestQPN: 1}
		noErr(t, s.qp.Init(&a))
		noErr(t, s.qp.Connect(&a))
	}
	for _, tc := range []struct {
		name string
		qp   *QP
		wr   SendWR
	}{
		{"FLUSH on a UC QP", uc.qp, SendWR{Opcode: WRFlush, Flush: FlushWR{Type: FlushGlobal}}},
		{"ATOMIC_WRITE on a UC QP", uc.qp, SendWR{Opcode: WRAtomicWrite}},
		{"FLUSH without a placement type", rc.qp, SendWR{Opcode: WRFlush}},
		{"FLUSH with an unknown selectivity level", rc.qp, SendWR{Opcode: WRFlush, Flush: FlushWR{Type: FlushGlobal, Level: 2}}},
		{"ATOMIC_WRITE with an SGE", rc.qp, SendWR{Opcode: WRAtomicWrite, SGL: []SGE{{Addr: rc.mr.Addr(), Length: 8, LKey: rc.mr.LKey()}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.qp.PostSend([]SendWR{tc.wr})
			wantErrno(t, err, syscall.EINVAL)
		})
	}
}
