package roce

import (
	"bytes"
	"syscall"
	"testing"
)

// mwPair is an RC connection a→b where b's buffer is registered for windows.
type mwPair struct {
	a, b *side
	mr   *MR // b's MR, with MW_BIND
}

func newMWPair(t *testing.T) *mwPair {
	da, db := pipePair(t)
	p := &mwPair{a: newSide(t, da, QPTypeRC, 8192, nil, nil), b: newSide(t, db, QPTypeRC, 8192, nil, nil)}
	p.mr = must[*MR](t)(p.b.pd.RegMR(p.b.buf, AccessLocalWrite|AccessMWBind))
	connectRC(t, p.a, p.b, MTU1024)
	fill(p.a.buf, 11)
	return p
}

// remote posts a signaled WRITE or READ of n bytes from a through rkey at
// remote address addr and returns its completion status.
func (p *mwPair) remote(t *testing.T, op WROpcode, rkey uint32, addr uint64, n uint32) WCStatus {
	t.Helper()
	_ = must[int](t)(p.a.qp.PostSend([]SendWR{{WRID: 77, Opcode: op, Flags: SendSignaled,
		SGL: []SGE{{Addr: p.a.mr.Addr(), Length: n, LKey: p.a.mr.LKey()}}, RemoteAddr: addr, RKey: rkey}}))
	return pollN(t, p.a.scq, 1, wcTimeout)[0].Status
}

// bindWC waits for b's bind completion and checks its opcode and status.
func (p *mwPair) bindWC(t *testing.T, op WCOpcode, st WCStatus) {
	t.Helper()
	wc := pollN(t, p.b.scq, 1, wcTimeout)[0]
	if wc.Status != st || (st == WCSuccess && wc.Opcode != op) {
		t.Fatalf("completion %v %v, want %v %v", wc.Opcode, wc.Status, op, st)
	}
}

// TestMWType1BindEndToEnd: ibv_bind_mw opens a window onto part of an MR that
// has no remote rights of its own; a peer reads and writes exactly the window's
// bytes through its rkey; outside the window is a remote access error (IBA
// 10.6.7.2: an access through a window stays within it; rxe checks only the
// MR's bounds here); a rebind rolls the key byte and the previous rkey is
// refused; a zero-length bind revokes the window.
func TestMWType1BindEndToEnd(t *testing.T) {
	window := func(t *testing.T) (*mwPair, *MW, uint32) {
		p := newMWPair(t)
		mw := must[*MW](t)(p.b.pd.AllocMW(MWType1))
		old := mw.RKey()
		rkey := must[uint32](t)(p.b.qp.BindMW(mw, MWBind{WRID: 9, Flags: SendSignaled,
			Info: MWBindInfo{MR: p.mr, Addr: p.mr.Addr() + 1024, Length: 512, Access: AccessRemoteWrite | AccessRemoteRead}}))
		p.bindWC(t, WCBindMW, WCSuccess)
		if rkey != IncRKey(old) || mw.RKey() != rkey {
			t.Fatalf("rkey %#x after the bind (window says %#x), was %#x", rkey, mw.RKey(), old)
		}
		return p, mw, rkey
	}
	t.Run("write and read inside the window", func(t *testing.T) {
		p, _, rkey := window(t)
		before := bytes.Clone(p.b.buf)
		if st := p.remote(t, WRRDMAWrite, rkey, p.mr.Addr()+1024, 512); st != WCSuccess {
			t.Fatalf("WRITE through the window: %v", st)
		}
		p.b.dev.barrier()
		if !bytes.Equal(p.b.buf[1024:1536], p.a.buf[:512]) || !bytes.Equal(p.b.buf[:1024], before[:1024]) ||
			!bytes.Equal(p.b.buf[1536:], before[1536:]) {
			t.Fatal("the WRITE did not land exactly in the window")
		}
		if st := p.remote(t, WRRDMARead, rkey, p.mr.Addr()+1024+256, 256); st != WCSuccess {
			t.Fatalf("READ through the window: %v", st)
		}
	})
	t.Run("one byte outside the window is refused", func(t *testing.T) {
		p, _, rkey := window(t)
		before := bytes.Clone(p.b.buf)
		if st := p.remote(t, WRRDMAWrite, rkey, p.mr.Addr()+1024+1, 512); st != WCRemAccessErr {
			t.Fatalf("WRITE past the window's end: %v, want REM_ACCESS_ERR", st)
		}
		if !bytes.Equal(p.b.buf, before) {
			t.Fatal("a refused WRITE changed the MR")
		}
	})
	t.Run("an atomic the window does not grant is refused", func(t *testing.T) {
		p, _, rkey := window(t)
		if st := p.remote(t, WRAtomicFetchAndAdd, rkey, p.mr.Addr()+1024, 8); st != WCRemAccessErr {
			t.Fatalf("FETCH_ADD through a read/write window: %v, want REM_ACCESS_ERR", st)
		}
	})
	t.Run("a rebind rolls the key byte and refuses the previous rkey", func(t *testing.T) {
		p, mw, rkey := window(t)
		rkey2 := must[uint32](t)(p.b.qp.BindMW(mw, MWBind{WRID: 10, Flags: SendSignaled,
			Info: MWBindInfo{MR: p.mr, Addr: p.mr.Addr(), Length: 64, Access: AccessRemoteWrite}}))
		p.bindWC(t, WCBindMW, WCSuccess)
		if rkey2 != IncRKey(rkey) || rkey2>>8 != rkey>>8 {
			t.Fatalf("rebind gave %#x after %#x", rkey2, rkey)
		}
		if st := p.remote(t, WRRDMAWrite, rkey2, p.mr.Addr(), 64); st != WCSuccess {
			t.Fatalf("WRITE through the new rkey: %v", st)
		}
		if st := p.remote(t, WRRDMAWrite, rkey, p.mr.Addr()+1024, 8); st != WCRemAccessErr {
			t.Fatalf("WRITE through the previous rkey: %v, want REM_ACCESS_ERR", st)
		}
	})
	t.Run("a zero-length bind revokes the window", func(t *testing.T) {
		p, mw, _ := window(t)
		rkey2 := must[uint32](t)(p.b.qp.BindMW(mw, MWBind{WRID: 10, Flags: SendSignaled}))
		p.bindWC(t, WCBindMW, WCSuccess)
		if st := p.remote(t, WRRDMAWrite, rkey2, p.mr.Addr()+1024, 8); st != WCRemAccessErr {
			t.Fatalf("WRITE through an unbound window: %v, want REM_ACCESS_ERR", st)
		}
	})
	t.Run("ibv_dealloc_mw revokes the window", func(t *testing.T) {
		p, mw, rkey := window(t)
		noErr(t, mw.Close())
		if st := p.remote(t, WRRDMAWrite, rkey, p.mr.Addr()+1024, 8); st != WCRemAccessErr {
			t.Fatalf("WRITE through a deallocated window: %v, want REM_ACCESS_ERR", st)
		}
		noErr(t, p.mr.Close()) // no window holds it any more
	})
}

// TestMWType2SendWithInvEndToEnd is the SEND_WITH_INV sequence a server runs with
// a type 2 window: bind it with a BIND_MW work request, let the peer WRITE
// through it, and let the peer's SEND_WITH_INV revoke it; a WRITE through the
// invalidated rkey is then a remote access error and changes nothing.
func TestMWType2SendWithInvEndToEnd(t *testing.T) {
	p := newMWPair(t)
	mw := must[*MW](t)(p.b.pd.AllocMW(MWType2))
	bind := mw.Bind(MWBindInfo{MR: p.mr, Addr: p.mr.Addr(), Length: 4096, Access: AccessRemoteWrite})
	_ = must[int](t)(p.b.qp.PostSend([]SendWR{{WRID: 3, Opcode: WRBindMW, Flags: SendSignaled, BindMW: bind}}))
	p.bindWC(t, WCBindMW, WCSuccess)
	if mw.RKey() != bind.RKey {
		t.Fatalf("window rkey %#x, the WR asked %#x", mw.RKey(), bind.RKey)
	}
	if st := p.remote(t, WRRDMAWrite, bind.RKey, p.mr.Addr(), 100); st != WCSuccess {
		t.Fatalf("WRITE through the window: %v", st)
	}
	_ = must[int](t)(p.b.qp.PostRecv([]RecvWR{{WRID: 4, SGL: []SGE{{Addr: p.b.mr.Addr() + 4096, Length: 64, LKey: p.b.mr.LKey()}}}}))
	_ = must[int](t)(p.a.qp.PostSend([]SendWR{{WRID: 5, Opcode: WRSendWithInv, Flags: SendSignaled, InvRKey: bind.RKey,
		SGL: []SGE{{Addr: p.a.mr.Addr(), Length: 16, LKey: p.a.mr.LKey()}}}}))
	checkWC(t, pollN(t, p.a.scq, 1, wcTimeout)[0], 5, WCSend, 16)
	wc := pollN(t, p.b.rcq, 1, wcTimeout)[0]
	checkWC(t, wc, 4, WCRecv, 16)
	if wc.Flags&WCWithInv == 0 || wc.InvalidatedRKey != bind.RKey {
		t.Fatalf("receive flags %v invalidated rkey %#x, want WITH_INV %#x", wc.Flags, wc.InvalidatedRKey, bind.RKey)
	}
	before := bytes.Clone(p.b.buf)
	if st := p.remote(t, WRRDMAWrite, bind.RKey, p.mr.Addr(), 100); st != WCRemAccessErr {
		t.Fatalf("WRITE through the invalidated rkey: %v, want REM_ACCESS_ERR", st)
	}
	if !bytes.Equal(p.b.buf, before) {
		t.Fatal("the refused WRITE changed the MR")
	}
}

// TestMWType2Rules end to end: a type 2B window serves only the QP that bound
// it; LOCAL_INV revokes it (IBV_WC_LOCAL_INV) and it can be bound again; a
// zero-based window is addressed from 0; binding onto an MR without MW_BIND
// completes MW_BIND_ERR (C10-73) and fails the QP; LOCAL_INV of a type 1
// window completes LOC_QP_OP_ERR (o10-37.2.26).
func TestMWType2Rules(t *testing.T) {
	t.Run("IBA 10.6.7.2.4: only the QP the window is bound to may use it", func(t *testing.T) {
		p := newMWPair(t)
		// A second connection between the same two PDs.
		a2 := newSide(t, p.a.dev, QPTypeRC, 64, nil, p.a.pd)
		b2 := newSide(t, p.b.dev, QPTypeRC, 64, nil, p.b.pd)
		connectRC(t, a2, b2, MTU1024)
		mw := must[*MW](t)(p.b.pd.AllocMW(MWType2))
		bind := mw.Bind(MWBindInfo{MR: p.mr, Addr: p.mr.Addr(), Length: 64, Access: AccessRemoteWrite})
		_ = must[int](t)(p.b.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRBindMW, Flags: SendSignaled, BindMW: bind}}))
		p.bindWC(t, WCBindMW, WCSuccess)
		_ = must[int](t)(a2.qp.PostSend([]SendWR{{WRID: 2, Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGL: []SGE{{Addr: a2.mr.Addr(), Length: 8, LKey: a2.mr.LKey()}}, RemoteAddr: p.mr.Addr(), RKey: bind.RKey}}))
		if wc := pollN(t, a2.scq, 1, wcTimeout)[0]; wc.Status != WCRemAccessErr {
			t.Fatalf("WRITE through another QP of the PD: %v, want REM_ACCESS_ERR", wc.Status)
		}
		if st := p.remote(t, WRRDMAWrite, bind.RKey, p.mr.Addr(), 8); st != WCSuccess {
			t.Fatalf("WRITE through the bound QP: %v", st)
		}
	})
	t.Run("LOCAL_INV revokes the window, which can be bound again", func(t *testing.T) {
		p := newMWPair(t)
		mw := must[*MW](t)(p.b.pd.AllocMW(MWType2))
		bind := mw.Bind(MWBindInfo{MR: p.mr, Addr: p.mr.Addr(), Length: 64, Access: AccessRemoteWrite})
		_ = must[int](t)(p.b.qp.PostSend([]SendWR{
			{WRID: 1, Opcode: WRBindMW, Flags: SendSignaled, BindMW: bind},
			{WRID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: bind.RKey}}))
		wcs := pollN(t, p.b.scq, 2, wcTimeout)
		checkWC(t, wcs[0], 1, WCBindMW, 0)
		checkWC(t, wcs[1], 2, WCLocalInv, 0)
		again := mw.Bind(MWBindInfo{MR: p.mr, Addr: p.mr.Addr(), Length: 64, Access: AccessRemoteWrite})
		_ = must[int](t)(p.b.qp.PostSend([]SendWR{{WRID: 3, Opcode: WRBindMW, Flags: SendSignaled, BindMW: again}}))
		p.bindWC(t, WCBindMW, WCSuccess)
		if again.RKey == bind.RKey {
			t.Fatalf("the rebind kept rkey %#x", again.RKey)
		}
		if st := p.remote(t, WRRDMAWrite, again.RKey, p.mr.Addr(), 8); st != WCSuccess {
			t.Fatalf("WRITE through the rebound window: %v", st)
		}
		if st := p.remote(t, WRRDMAWrite, bind.RKey, p.mr.Addr(), 8); st != WCRemAccessErr {
			t.Fatalf("WRITE through the invalidated rkey: %v, want REM_ACCESS_ERR", st)
		}
	})
	t.Run("a zero-based window is addressed by offset", func(t *testing.T) {
		p := newMWPair(t)
		mw := must[*MW](t)(p.b.pd.AllocMW(MWType2))
		bind := mw.Bind(MWBindInfo{MR: p.mr, Addr: p.mr.Addr() + 2048, Length: 128, Access: AccessRemoteWrite | AccessZeroBased})
		_ = must[int](t)(p.b.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRBindMW, Flags: SendSignaled, BindMW: bind}}))
		p.bindWC(t, WCBindMW, WCSuccess)
		if st := p.remote(t, WRRDMAWrite, bind.RKey, 64, 64); st != WCSuccess {
			t.Fatalf("WRITE at offset 64: %v", st)
		}
		p.b.dev.barrier()
		if !bytes.Equal(p.b.buf[2048+64:2048+128], p.a.buf[:64]) {
			t.Fatal("the WRITE did not land at the window's offset 64")
		}
	})
	t.Run("C10-73: a bind onto an MR without MW_BIND completes MW_BIND_ERR", func(t *testing.T) {
		p := newMWPair(t)
		mw := must[*MW](t)(p.b.pd.AllocMW(MWType2))
		bind := mw.Bind(MWBindInfo{MR: p.b.mr, Addr: p.b.mr.Addr(), Length: 64, Access: AccessRemoteWrite})
		_ = must[int](t)(p.b.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRBindMW, Flags: SendSignaled, BindMW: bind}}))
		p.bindWC(t, WCBindMW, WCMWBindErr)
		if st := must[QPState](t)(p.b.qp.State()); st != QPSErr {
			t.Fatalf("QP state %v after a failed bind, want ERR", st)
		}
	})
	t.Run("o10-37.2.26: LOCAL_INV of a type 1 window completes LOC_QP_OP_ERR", func(t *testing.T) {
		p := newMWPair(t)
		mw := must[*MW](t)(p.b.pd.AllocMW(MWType1))
		_ = must[uint32](t)(p.b.qp.BindMW(mw, MWBind{WRID: 1, Flags: SendSignaled,
			Info: MWBindInfo{MR: p.mr, Addr: p.mr.Addr(), Length: 8, Access: AccessRemoteRead}}))
		p.bindWC(t, WCBindMW, WCSuccess)
		_ = must[int](t)(p.b.qp.PostSend([]SendWR{{WRID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: mw.RKey()}}))
		p.bindWC(t, WCLocalInv, WCLocQPOpErr)
	})
}

// TestBindMWVerbErrnos: what ibv_bind_mw (libibverbs and rxe's provider)
// refuses before posting anything.
func TestBindMWVerbErrnos(t *testing.T) {
	p := newMWPair(t)
	w1 := must[*MW](t)(p.b.pd.AllocMW(MWType1))
	w2 := must[*MW](t)(p.b.pd.AllocMW(MWType2))
	otherPD := must[*PD](t)(p.b.dev.AllocPD())
	otherMR := must[*MR](t)(otherPD.RegMR(make([]byte, 64), AccessLocalWrite|AccessMWBind))
	ud := newSide(t, p.b.dev, QPTypeUD, 64, nil, p.b.pd)
	for _, tc := range []struct {
		name string
		qp   *QP
		mw   *MW
		info MWBindInfo
		want syscall.Errno
	}{
		{"a type 2 window is bound by a work request", p.b.qp, w2, MWBindInfo{MR: p.mr, Addr: p.mr.Addr(), Length: 8}, syscall.EINVAL},
		{"a length without an MR", p.b.qp, w1, MWBindInfo{Length: 8}, syscall.EINVAL},
		{"an MR of another PD", p.b.qp, w1, MWBindInfo{MR: otherMR, Addr: otherMR.Addr(), Length: 8}, syscall.EPERM},
		{"a zero-based type 1 window", p.b.qp, w1, MWBindInfo{MR: p.mr, Addr: p.mr.Addr(), Length: 8, Access: AccessZeroBased}, syscall.EINVAL},
		{"a UD QP", ud.qp, w1, MWBindInfo{MR: p.mr, Addr: p.mr.Addr(), Length: 8}, syscall.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.qp.BindMW(tc.mw, MWBind{Info: tc.info})
			wantErrno(t, err, tc.want)
		})
	}
}
