package transport

import (
	"bytes"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/impair"
)

func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name  string
		op    verbs.WROpcode
		bad   func(r *Region, wr *verbs.SendWR)
		regAc verbs.Access
	}{
		{"write bad rkey", verbs.WRRDMAWrite, func(r *Region, wr *verbs.SendWR) { wr.RKey = 0xdead }, verbs.AccessRemoteWrite},
		{"write no access", verbs.WRRDMAWrite, func(r *Region, wr *verbs.SendWR) {}, verbs.AccessRemoteRead},
		{"write out of range", verbs.WRRDMAWrite, func(r *Region, wr *verbs.SendWR) { wr.RemoteAddr = r.Addr + 60 }, verbs.AccessRemoteWrite},
		{"read bad rkey", verbs.WRRDMARead, func(r *Region, wr *verbs.SendWR) { wr.RKey = 0xdead }, verbs.AccessRemoteRead},
		{"read no access", verbs.WRRDMARead, func(r *Region, wr *verbs.SendWR) {}, verbs.AccessRemoteWrite},
		{"read out of range", verbs.WRRDMARead, func(r *Region, wr *verbs.SendWR) { wr.RemoteAddr = r.Addr - 8 }, verbs.AccessRemoteRead},
		{"atomic no access", verbs.WRAtomicFetchAndAdd, func(r *Region, wr *verbs.SendWR) {}, verbs.AccessRemoteWrite},
		{"atomic out of range", verbs.WRAtomicFetchAndAdd, func(r *Region, wr *verbs.SendWR) { wr.RemoteAddr = r.Addr + 64 }, verbs.AccessRemoteAtomic},
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
				local := a.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite)
				wr := verbs.SendWR{WRID: 1, Opcode: tc.op, Flags: verbs.SendSignaled, RemoteAddr: remote.Addr, RKey: remote.RKey,
					SGL: []verbs.SGE{local.sge(0, 64)}}
				if tc.op == verbs.WRAtomicFetchAndAdd {
					wr.SGL[0].Length = 8
				}
				tc.bad(remote, &wr)
				follow := verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}
				if _, err := qa.PostSend([]verbs.SendWR{wr, follow}); err != nil {
					t.Fatal(err)
				}
				wcs := waitWC(t, a.scq, 2, 10*time.Second)
				if wcs[0].WRID != 1 || wcs[0].Status != verbs.WCRemAccessErr {
					t.Fatalf("first completion %s, want REM_ACCESS_ERR", wcString(wcs[0]))
				}
				if wcs[1].WRID != 2 || wcs[1].Status != verbs.WCWRFlushErr {
					t.Fatalf("second completion %s, want WR_FLUSH_ERR", wcString(wcs[1]))
				}
				if !bytes.Equal(remote.Buf, before) {
					t.Fatal("remote memory changed")
				}
				if a, _ := qa.Query(); a.State != verbs.QPSErr {
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
		local := a.mem.reg(1, pattern(3000, 1), verbs.AccessLocalWrite)
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: 7, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{local.sge(0, 3000)}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if n := b.e.Stats().Snapshot().NAKsSent[NAKRNR]; n == 0 {
			t.Fatal("no RNR NAK sent while no receive WR was posted")
		}
		dst := b.mem.reg(1, make([]byte, 4000), verbs.AccessLocalWrite)
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 8, SGL: []verbs.SGE{dst.sge(0, 4000)}}}); err != nil {
			t.Fatal(err)
		}
		if w := waitWC(t, a.scq, 1, 10*time.Second)[0]; w.Status != verbs.WCSuccess {
			t.Fatalf("send %s", wcString(w))
		}
		if w := waitWC(t, b.rcq, 1, time.Second)[0]; w.Status != verbs.WCSuccess || w.ByteLen != 3000 {
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
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}, {WRID: 2, Opcode: verbs.WRSend}}); err != nil {
			t.Fatal(err)
		}
		wcs := waitWC(t, a.scq, 2, 10*time.Second)
		if wcs[0].Status != verbs.WCRNRRetryExcErr || wcs[1].Status != verbs.WCWRFlushErr {
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
		dst := b.mem.reg(1, make([]byte, 16), verbs.AccessLocalWrite)
		qb.PostRecv([]verbs.RecvWR{{WRID: 100, SGL: []verbs.SGE{dst.sge(0, 16)}}})
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled}}); err != nil {
			t.Fatal(err)
		}
		waitWC(t, a.scq, 1, time.Second)
		drop.Store(true) // the peer vanishes
		src := a.mem.reg(1, make([]byte, 5000), verbs.AccessLocalWrite)
		qa.PostRecv([]verbs.RecvWR{{WRID: 50}})
		start := time.Now()
		qa.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{src.sge(0, 5000)}}, {WRID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled}})
		wcs := waitWC(t, a.scq, 2, time.Minute)
		if wcs[0].WRID != 2 || wcs[0].Status != verbs.WCRetryExcErr || wcs[1].WRID != 3 || wcs[1].Status != verbs.WCWRFlushErr {
			t.Fatalf("completions %s %s, want RETRY_EXC_ERR then WR_FLUSH_ERR", wcString(wcs[0]), wcString(wcs[1]))
		}
		// 4 timeouts (retry_cnt 3) of a timer of 4.096 µs × 2^8 ≈ 1.05 ms
		// that doubles per consecutive timeout: 1+2+4+8 = 15 of them.
		if el, want := time.Since(start), 15*time.Duration(4096<<8); el < want || el > want+time.Millisecond {
			t.Fatalf("gave up after %v, want %v", el, want)
		}
		if w := waitWC(t, a.rcq, 1, time.Second)[0]; w.WRID != 50 || w.Status != verbs.WCWRFlushErr {
			t.Fatalf("receive WR %s, want flushed", wcString(w))
		}
		if st := a.e.Stats().Snapshot(); st.RetryExceeded != 1 || st.Timeouts != 4 {
			t.Fatalf("retry exceeded %d timeouts %d", st.RetryExceeded, st.Timeouts)
		}
		if at, _ := qa.Query(); at.State != verbs.QPSErr {
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
		qa := a.createQP(t, verbs.QPTypeRC, o)
		qb := b.createQP(t, verbs.QPTypeRC, rcOpts{recvCQ: small})
		connect(t, qa, b.addr, qb.QPN(), o)
		connect(t, qb, a.addr, qa.QPN(), o)
		for i := 0; i < 4; i++ {
			qb.PostRecv([]verbs.RecvWR{{WRID: uint64(i)}})
		}
		for i := 0; i < 3; i++ {
			qa.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend}})
		}
		time.Sleep(100 * time.Millisecond)
		if !b.hasEvent(verbs.EventCQErr) {
			t.Fatal("no CQ_ERR event")
		}
		if at, _ := qb.Query(); at.State != verbs.QPSErr {
			t.Fatalf("QP feeding the overrun CQ is %v, want ERR", at.State)
		}
		if n := b.countEvents(verbs.EventQPFatal, qb.QPN()); n != 1 {
			t.Fatalf("%d QP_FATAL events for the QP feeding the overrun CQ, want 1", n)
		}
		if n := a.countEvents(verbs.EventQPFatal, qa.QPN()); n != 0 {
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
		src := a.mem.reg(1, make([]byte, 3000), verbs.AccessLocalWrite)
		dst := b.mem.reg(1, make([]byte, 100), verbs.AccessLocalWrite)
		qb.PostRecv([]verbs.RecvWR{{WRID: 9, SGL: []verbs.SGE{dst.sge(0, 100)}}})
		qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 3000)}}})
		if w := waitWC(t, a.scq, 1, 10*time.Second)[0]; w.Status != verbs.WCRemInvReqErr {
			t.Fatalf("requester %s, want REM_INV_REQ_ERR", wcString(w))
		}
		if w := waitWC(t, b.rcq, 1, time.Second)[0]; w.WRID != 9 || w.Status != verbs.WCLocLenErr {
			t.Fatalf("responder %s, want LOC_LEN_ERR", wcString(w))
		}
	})
}
