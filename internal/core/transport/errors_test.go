package transport

import (
	"bytes"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/impair"
)

func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name  string
		op    WROpcode
		bad   func(r *Region, wr *SendWR)
		regAc Access
	}{
		{"write bad rkey", WRRDMAWrite, func(r *Region, wr *SendWR) { wr.RKey = 0xdead }, AccessRemoteWrite},
		{"write no access", WRRDMAWrite, func(r *Region, wr *SendWR) {}, AccessRemoteRead},
		{"write out of range", WRRDMAWrite, func(r *Region, wr *SendWR) { wr.RemoteAddr = r.Addr + 60 }, AccessRemoteWrite},
		{"read bad rkey", WRRDMARead, func(r *Region, wr *SendWR) { wr.RKey = 0xdead }, AccessRemoteRead},
		{"read no access", WRRDMARead, func(r *Region, wr *SendWR) {}, AccessRemoteWrite},
		{"read out of range", WRRDMARead, func(r *Region, wr *SendWR) { wr.RemoteAddr = r.Addr - 8 }, AccessRemoteRead},
		{"atomic no access", WRAtomicFetchAndAdd, func(r *Region, wr *SendWR) {}, AccessRemoteWrite},
		{"atomic out of range", WRAtomicFetchAndAdd, func(r *Region, wr *SendWR) { wr.RemoteAddr = r.Addr + 64 }, AccessRemoteAtomic},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := pair(t, nil)
				defer a.close(t)
				defer b.close(t)
				qa, _ := rcPair(t, a, b, rcOpts{})
				remote := b.mem.reg(1, pattern(64, 9), tc.regAc)
				before := append([]byte(nil), remote.Buf...)
				local := a.mem.reg(1, make([]byte, 64), AccessLocalWrite)
				wr := SendWR{WRID: 1, Opcode: tc.op, Flags: SendSignaled, RemoteAddr: remote.Addr, RKey: remote.RKey,
					SGL: []srq.SGE{local.sge(0, 64)}}
				if tc.op == WRAtomicFetchAndAdd {
					wr.SGL[0].Length = 8
				}
				tc.bad(remote, &wr)
				follow := SendWR{WRID: 2, Opcode: WRSend, Flags: SendSignaled}
				if _, err := qa.PostSend([]SendWR{wr, follow}); err != nil {
					t.Fatal(err)
				}
				wcs := waitWC(t, a.scq, 2, 10*time.Second)
				if wcs[0].WRID != 1 || wcs[0].Status != cq.RemAccessErr {
					t.Fatalf("first completion %s, want REM_ACCESS_ERR", wcString(wcs[0]))
				}
				if wcs[1].WRID != 2 || wcs[1].Status != cq.WRFlushErr {
					t.Fatalf("second completion %s, want WR_FLUSH_ERR", wcString(wcs[1]))
				}
				if !bytes.Equal(remote.Buf, before) {
					t.Fatal("remote memory changed")
				}
				if a, _ := qa.Query(); a.State != QPSErr {
					t.Fatalf("requester state %v, want ERR", a.State)
				}
				if n := b.e.Stats().Snapshot().NAKsSent[NAKRemoteAccess]; n != 1 {
					t.Fatalf("remote access NAKs sent %d, want 1", n)
				}
			})
		})
	}
}

func TestRNRThenLatePostRecv(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		qa, qb := rcPair(t, a, b, rcOpts{minRNR: 14})
		local := a.mem.reg(1, pattern(3000, 1), AccessLocalWrite)
		if _, err := qa.PostSend([]SendWR{{WRID: 7, Opcode: WRSend, Flags: SendSignaled, SGL: []srq.SGE{local.sge(0, 3000)}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if n := b.e.Stats().Snapshot().NAKsSent[NAKRNR]; n == 0 {
			t.Fatal("no RNR NAK sent while no receive WR was posted")
		}
		dst := b.mem.reg(1, make([]byte, 4000), AccessLocalWrite)
		if _, err := qb.PostRecv([]srq.RecvWR{{WRID: 8, SGL: []srq.SGE{dst.sge(0, 4000)}}}); err != nil {
			t.Fatal(err)
		}
		if w := waitWC(t, a.scq, 1, 10*time.Second)[0]; w.Status != cq.Success {
			t.Fatalf("send %s", wcString(w))
		}
		if w := waitWC(t, b.rcq, 1, time.Second)[0]; w.Status != cq.Success || w.ByteLen != 3000 {
			t.Fatalf("recv %s", wcString(w))
		}
		if !bytes.Equal(dst.Buf[:3000], local.Buf) {
			t.Fatal("data differs")
		}
		if a.e.Stats().Snapshot().NAKsRcvd[NAKRNR] == 0 {
			t.Fatal("requester counted no RNR NAK")
		}
	})
}

func TestRNRRetryExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		o := rcOpts{rnrRetry: 2, minRNR: 1}
		qa, _ := rcPair(t, a, b, o)
		if _, err := qa.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled}, {WRID: 2, Opcode: WRSend}}); err != nil {
			t.Fatal(err)
		}
		wcs := waitWC(t, a.scq, 2, 10*time.Second)
		if wcs[0].Status != cq.RNRRetryExcErr || wcs[1].Status != cq.WRFlushErr {
			t.Fatalf("completions %s %s, want RNR_RETRY_EXC_ERR then WR_FLUSH_ERR", wcString(wcs[0]), wcString(wcs[1]))
		}
		if n := b.e.Stats().Snapshot().NAKsSent[NAKRNR]; n != 3 {
			t.Fatalf("RNR NAKs sent %d, want 3 (first try + 2 retries)", n)
		}
	})
}

func TestPeerGoneRetryExceeded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var drop atomic.Bool
		la, lb := link.Pipe(addrA, addrB)
		la = impair.NewLossy(la, impair.LossConfig{DropFn: func(d impair.Dir, b []byte) bool { return drop.Load() }})
		a, b := newNode(t, la, 1), newNode(t, lb, 1)
		defer a.close(t)
		defer b.close(t)
		qa, qb := rcPair(t, a, b, rcOpts{retry: 3, timeout: 8})
		dst := b.mem.reg(1, make([]byte, 16), AccessLocalWrite)
		qb.PostRecv([]srq.RecvWR{{WRID: 100, SGL: []srq.SGE{dst.sge(0, 16)}}})
		if _, err := qa.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, a.scq, 1, time.Second)
		drop.Store(true) // the peer vanishes
		src := a.mem.reg(1, make([]byte, 5000), AccessLocalWrite)
		qa.PostRecv([]srq.RecvWR{{WRID: 50}})
		start := time.Now()
		qa.PostSend([]SendWR{{WRID: 2, Opcode: WRSend, SGL: []srq.SGE{src.sge(0, 5000)}}, {WRID: 3, Opcode: WRRDMAWrite, Flags: SendSignaled}})
		wcs := waitWC(t, a.scq, 2, time.Minute)
		if wcs[0].WRID != 2 || wcs[0].Status != cq.RetryExcErr || wcs[1].WRID != 3 || wcs[1].Status != cq.WRFlushErr {
			t.Fatalf("completions %s %s, want RETRY_EXC_ERR then WR_FLUSH_ERR", wcString(wcs[0]), wcString(wcs[1]))
		}
		// 4 timeouts (retry_cnt 3) of a timer of 4.096 µs × 2^8 ≈ 1.05 ms
		// that doubles per consecutive timeout: 1+2+4+8 = 15 of them.
		if el, want := time.Since(start), 15*time.Duration(4096<<8); el < want || el > want+time.Millisecond {
			t.Fatalf("gave up after %v, want %v", el, want)
		}
		if w := waitWC(t, a.rcq, 1, time.Second)[0]; w.WRID != 50 || w.Status != cq.WRFlushErr {
			t.Fatalf("receive WR %s, want flushed", wcString(w))
		}
		if st := a.e.Stats().Snapshot(); st.RetryExceeded != 1 || st.Timeouts != 4 {
			t.Fatalf("retry exceeded %d timeouts %d", st.RetryExceeded, st.Timeouts)
		}
		if at, _ := qa.Query(); at.State != QPSErr {
			t.Fatalf("state %v", at.State)
		}
	})
}

func TestCQTooSmallRaisesCQErr(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		small, err := cq.New(2, 16)
		if err != nil {
			t.Fatal(err)
		}
		o := rcOpts{}
		qa := a.createQP(t, QPTypeRC, o)
		qb := b.createQP(t, QPTypeRC, rcOpts{recvCQ: small})
		connect(t, qa, b.addr, qb.QPN(), o)
		connect(t, qb, a.addr, qa.QPN(), o)
		for i := 0; i < 4; i++ {
			qb.PostRecv([]srq.RecvWR{{WRID: uint64(i)}})
		}
		for i := 0; i < 3; i++ {
			qa.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRSend}})
		}
		time.Sleep(100 * time.Millisecond)
		if !b.hasEvent(EventCQErr) {
			t.Fatal("no CQ_ERR event")
		}
		if at, _ := qb.Query(); at.State != QPSErr {
			t.Fatalf("QP feeding the overrun CQ is %v, want ERR", at.State)
		}
		if n := b.countEvents(EventQPFatal, qb.QPN()); n != 1 {
			t.Fatalf("%d QP_FATAL events for the QP feeding the overrun CQ, want 1", n)
		}
		if n := a.countEvents(EventQPFatal, qa.QPN()); n != 0 {
			t.Fatalf("%d QP_FATAL events on the requester, whose CQ did not overrun", n)
		}
		if b.e.Stats().Snapshot().CQOverruns == 0 {
			t.Fatal("CQ overrun not counted")
		}
	})
}

func TestMessageTooLongForReceiveWR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		qa, qb := rcPair(t, a, b, rcOpts{})
		src := a.mem.reg(1, make([]byte, 3000), AccessLocalWrite)
		dst := b.mem.reg(1, make([]byte, 100), AccessLocalWrite)
		qb.PostRecv([]srq.RecvWR{{WRID: 9, SGL: []srq.SGE{dst.sge(0, 100)}}})
		qa.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []srq.SGE{src.sge(0, 3000)}}})
		if w := waitWC(t, a.scq, 1, 10*time.Second)[0]; w.Status != cq.RemInvReqErr {
			t.Fatalf("requester %s, want REM_INV_REQ_ERR", wcString(w))
		}
		if w := waitWC(t, b.rcq, 1, time.Second)[0]; w.WRID != 9 || w.Status != cq.LocLenErr {
			t.Fatalf("responder %s, want LOC_LEN_ERR", wcString(w))
		}
	})
}
