package roce

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testsupport/parked"
)

// TestCQWait: Wait returns a completion that arrives while it sleeps, returns
// at once when one is already held, and gives up with ctx's error.
func TestCQWait(t *testing.T) {
	for _, m := range []struct {
		name string
		wait waitFunc
		opts []Option
	}{
		{"default", (*CQ).Wait, nil},
		{"run-to-completion", (*CQ).Wait, []Option{WithRunToCompletion(true)}},
		// Spin spins SpinFor, then sleeps on the channel as Wait (the parked check).
		{"spin", (*CQ).Spin, []Option{WithRunToCompletion(true)}},
	} {
		t.Run(m.name, func(t *testing.T) { cqWait(t, m.wait, m.opts...) })
	}
}

// waitFunc is CQ.Wait or CQ.Spin.
type waitFunc func(c *CQ, ctx context.Context, wc []WC) (int, error)

func cqWait(t *testing.T, wait waitFunc, opts ...Option) {
	da, db := pipePair(t, opts...)
	pdB := must[*PD](t)(db.AllocPD())
	b := newSide(t, db, QPTypeRC, 64, nil, pdB)
	a := newSide(t, da, QPTypeRC, 64, nil, nil)
	connectRC(t, a, b, MTU1024)
	wc := make([]WC, 4)

	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if n, err := wait(b.rcq, short, wc); n != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("empty CQ: %d, %v", n, err)
	}

	ctx, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	_ = must[int](t)(b.qp.PostRecv([]RecvWR{{WRID: 7, SGL: []SGE{{Addr: b.mr.Addr(), Length: 64, LKey: b.mr.LKey()}}}}))
	got := make(chan error, 1)
	go func() {
		n, err := wait(b.rcq, ctx, wc)
		if err == nil && (n != 1 || wc[0].WRID != 7 || wc[0].Status != WCSuccess) {
			err = errors.New("wrong completion")
		}
		got <- err
	}()
	parked.Wait(t, "roce.(*CQ).Wait", 1, wcTimeout) // Wait armed and sleeps on Notify
	_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled,
		SGL: []SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}}}}))
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// A completion already held comes back without sleeping.
	if n, err := wait(a.scq, ctx, wc); n != 1 || err != nil || wc[0].WRID != 1 {
		t.Fatalf("held completion: %d, %v, %+v", n, err, wc[0])
	}
}

// TestRunToCompletionPingPong: devices in run-to-completion mode, each side
// waiting by polling its CQ only (ib_send_lat's busy poll): the polling
// goroutine receives, so every round trip completes without waiting for the
// engine's goroutines, and the ACKs held behind replies all go out.
func TestRunToCompletionPingPong(t *testing.T) {
	da, db := pipePair(t, WithRunToCompletion(true))
	a := newSide(t, da, QPTypeRC, 64, nil, nil)
	b := newSide(t, db, QPTypeRC, 64, nil, nil)
	connectRC(t, a, b, MTU1024)
	const rounds = 200
	for _, s := range []*side{a, b} {
		for range 4 {
			_ = must[int](t)(s.qp.PostRecv([]RecvWR{{SGL: []SGE{{Addr: s.mr.Addr(), Length: 64, LKey: s.mr.LKey()}}}}))
		}
	}
	send := func(s *side, id uint64) {
		_ = must[int](t)(s.qp.PostSend([]SendWR{{WRID: id, Opcode: WRSend, Flags: SendSignaled,
			SGL: []SGE{{Addr: s.mr.Addr(), Length: 64, LKey: s.mr.LKey()}}}}))
	}
	echo := make(chan error, 1)
	go func() {
		for i := range rounds {
			pollN(t, b.rcq, 1, wcTimeout)
			_ = must[int](t)(b.qp.PostRecv([]RecvWR{{SGL: []SGE{{Addr: b.mr.Addr(), Length: 64, LKey: b.mr.LKey()}}}}))
			send(b, uint64(i))
		}
		echo <- nil
	}()
	for i := range rounds {
		send(a, uint64(i))
		pollN(t, a.rcq, 1, wcTimeout)
		_ = must[int](t)(a.qp.PostRecv([]RecvWR{{SGL: []SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}}}))
	}
	<-echo
	for _, s := range []*side{a, b} {
		for _, wc := range pollN(t, s.scq, rounds, wcTimeout) {
			if wc.Status != WCSuccess {
				t.Fatalf("send completion %+v", wc)
			}
		}
	}
}

func TestMTUFromBytes(t *testing.T) {
	for n, want := range map[int]MTU{256: MTU256, 512: MTU512, 1024: MTU1024, 2048: MTU2048, 4096: MTU4096,
		0: 0, 128: 0, 1000: 0, 1500: 0, 8192: 0, -1024: 0} {
		if got := MTUFromBytes(n); got != want {
			t.Errorf("MTUFromBytes(%d) = %v, want %v", n, got, want)
		}
	}
}

// TestCQShouldYield: an idle device's poller spins for SpinFor, then yields.
func TestCQShouldYield(t *testing.T) {
	c := must[*CQ](t)(pipeDevice(t).CreateCQ(4))
	for _, tt := range []struct {
		empty time.Duration
		want  bool
	}{{0, false}, {SpinFor / 2, false}, {SpinFor, true}, {time.Second, true}} {
		if got := c.ShouldYield(tt.empty); got != tt.want {
			t.Errorf("ShouldYield(%v) = %v, want %v", tt.empty, got, tt.want)
		}
	}
}
