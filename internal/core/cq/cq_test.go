package cq

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/core/verbs"
)

func TestCreateCQ_CQERangeIsOneToMaxCQE(t *testing.T) {
	for _, tc := range []struct {
		cqe int
		ok  bool
	}{{-5, false}, {0, false}, {1, true}, {testMaxCQE, true}, {testMaxCQE + 1, false}} {
		q, err := New(tc.cqe, testMaxCQE)
		if !tc.ok {
			wantErrno(t, err, syscall.EINVAL)
			if q != nil {
				t.Errorf("cqe %d: queue returned with error", tc.cqe)
			}
			continue
		}
		if err != nil || q.Cap() < tc.cqe {
			t.Errorf("cqe %d: %v, Cap %d", tc.cqe, err, q.Cap())
		}
	}
}

func TestCreateCQ_HoldsAtLeastCQECompletions(t *testing.T) {
	q := newCQ(t, 5)
	push(t, q, seq(1, uint64(q.Cap()))...)
	if q.Len() != q.Cap() || q.Cap() < 5 {
		t.Fatalf("Len %d Cap %d", q.Len(), q.Cap())
	}
}

func TestPollCQ_NeverBlocksOnEmptyCQ(t *testing.T) {
	q := newCQ(t, 4)
	n, err := q.Poll(make([]verbs.WC, 4))
	if n != 0 || err != nil {
		t.Fatalf("Poll = %d, %v", n, err)
	}
}

func TestPollCQ_ReturnsOldestFirstUpToLen(t *testing.T) {
	q := newCQ(t, 8)
	push(t, q, 1, 2, 3, 4, 5)
	wc := make([]verbs.WC, 2)
	if n, _ := q.Poll(wc); n != 2 || wc[0].WRID != 1 || wc[1].WRID != 2 {
		t.Fatalf("first Poll = %d %+v", n, wc)
	}
	if n, _ := q.Poll(nil); n != 0 || q.Len() != 3 {
		t.Fatalf("Poll(nil) = %d, Len %d", n, q.Len())
	}
	if got := pollIDs(t, q); !equalIDs(got, []uint64{3, 4, 5}) {
		t.Fatalf("ids %v", got)
	}
}

func TestPollCQ_CopiesEveryField(t *testing.T) {
	q := newCQ(t, 2)
	in := verbs.WC{WRID: 0xfeedface, Status: verbs.WCRemAccessErr, Opcode: verbs.WCRecvRDMAWithImm, VendorErr: 7,
		ByteLen: 4096, ImmData: 0x01020304, InvalidatedRKey: 0xabc, QPNum: 0x11, SrcQP: 0x22,
		Flags: verbs.WCGRH | verbs.WCWithImm, PKeyIndex: 3, SLID: 4, SL: 5, DLIDPathBits: 6}
	if err := q.Push(&in, false); err != nil {
		t.Fatal(err)
	}
	in.WRID = 0 // Push copied it
	out := make([]verbs.WC, 1)
	q.Poll(out)
	in.WRID = 0xfeedface
	if out[0] != in {
		t.Fatalf("got %+v, want %+v", out[0], in)
	}
}

func TestOverrun_LosesOnlyTheCompletionThatDoesNotFit(t *testing.T) {
	q := newCQ(t, 3)
	push(t, q, 1, 2, 3)
	err := q.Push(&verbs.WC{WRID: 4}, false)
	if !errors.Is(err, ErrOverrun) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("overrun Push = %v, want ErrOverrun/ENOSPC", err)
	}
	if got := pollIDs(t, q); !equalIDs(got, []uint64{1, 2, 3}) {
		t.Fatalf("held completions after overrun: %v", got)
	}
}

func TestOverrun_PutsCQInErrorStateOnce(t *testing.T) {
	q := newCQ(t, 1)
	push(t, q, 1)
	if q.Err() != nil {
		t.Fatal("Err before overrun")
	}
	first := q.Push(&verbs.WC{WRID: 2}, false)
	if !errors.Is(q.Err(), ErrOverrun) || q.Err() != first {
		t.Fatalf("Err() = %v after overrun %v", q.Err(), first)
	}
	// Later pushes fail too, but without ErrOverrun: CQ_ERR is raised once.
	pollIDs(t, q)
	later := q.Push(&verbs.WC{WRID: 3}, false)
	wantErrno(t, later, syscall.EIO)
	if errors.Is(later, ErrOverrun) {
		t.Fatal("second failing Push reported a new overrun")
	}
	n, err := q.Poll(make([]verbs.WC, 1))
	if n != 0 || !errors.Is(err, ErrOverrun) {
		t.Fatalf("Poll of drained errored CQ = %d, %v", n, err)
	}
	wantErrno(t, q.ReqNotify(false), syscall.EIO)
	_, err = q.Resize(8, testMaxCQE)
	wantErrno(t, err, syscall.EIO)
	if err := q.Close(); err != nil {
		t.Fatalf("Close of errored CQ: %v", err)
	}
}

func TestOverrun_WakesTheCompletionChannel(t *testing.T) {
	q := newCQ(t, 1)
	push(t, q, 1)
	q.Push(&verbs.WC{WRID: 2}, false)
	if !notified(q) {
		t.Fatal("overrun did not wake a consumer waiting on Notify")
	}
}

func TestReqNotifyCQ_NextCompletionFiresOnce(t *testing.T) {
	q := newCQ(t, 8)
	push(t, q, 1)
	if notified(q) {
		t.Fatal("event without ReqNotify")
	}
	if err := q.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if notified(q) {
		t.Fatal("arming fired on completions already held")
	}
	push(t, q, 2)
	if !notified(q) {
		t.Fatal("no event for next completion")
	}
	push(t, q, 3)
	if notified(q) {
		t.Fatal("second event without re-arming")
	}
}

func TestReqNotifyCQ_SolicitedOnlyIgnoresUnsolicitedSuccess(t *testing.T) {
	q := newCQ(t, 8)
	if err := q.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	q.Push(&verbs.WC{WRID: 1}, false)
	if notified(q) {
		t.Fatal("event for an unsolicited successful completion")
	}
	q.Push(&verbs.WC{WRID: 2}, true)
	if !notified(q) {
		t.Fatal("no event for a solicited completion")
	}
}

func TestReqNotifyCQ_SolicitedOnlyFiresOnErrorCompletion(t *testing.T) {
	q := newCQ(t, 8)
	if err := q.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	q.Push(&verbs.WC{WRID: 1, Status: verbs.WCWRFlushErr}, false)
	if !notified(q) {
		t.Fatal("no event for an unsuccessful completion")
	}
}

func TestReqNotifyCQ_SolicitedOnlyDoesNotNarrowNextArm(t *testing.T) {
	q := newCQ(t, 8)
	q.ReqNotify(false)
	q.ReqNotify(true)
	q.Push(&verbs.WC{WRID: 1}, false)
	if !notified(q) {
		t.Fatal("solicited-only request narrowed an armed next-completion request")
	}
}

func TestReqNotifyCQ_EventsCoalesce(t *testing.T) {
	q := newCQ(t, 8)
	for i := uint64(1); i <= 3; i++ {
		q.ReqNotify(false)
		push(t, q, i) // nobody reads: the producer must not block
	}
	if !notified(q) || notified(q) {
		t.Fatal("want exactly one pending event")
	}
}

func TestDestroyCQ_WhileQPsAttachedIsEBUSY(t *testing.T) {
	q := newCQ(t, 4)
	push(t, q, 1)
	q.Attach()
	wantErrno(t, q.Close(), syscall.EBUSY)
	if q.Len() != 1 {
		t.Fatal("failed Close changed the CQ")
	}
	q.Detach()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDestroyCQ_ThenEveryVerbFailsWithErrClosed(t *testing.T) {
	q := newCQ(t, 4)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	_, perr := q.Poll(make([]verbs.WC, 1))
	_, rerr := q.Resize(8, testMaxCQE)
	for name, err := range map[string]error{
		"Poll":      perr,
		"Resize":    rerr,
		"Push":      q.Push(&verbs.WC{}, false),
		"ReqNotify": q.ReqNotify(false),
		"Close":     q.Close(),
	} {
		if !errors.Is(err, net.ErrClosed) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s after destroy: %v", name, err)
		}
	}
}

func TestDetach_WithoutAttachPanics(t *testing.T) {
	q := newCQ(t, 4)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	q.Detach()
}

// TestErrno is the table of every errno each verb returns.
func TestErrno(t *testing.T) {
	full := func(q *Queue) { q.Push(&verbs.WC{}, false); q.Push(&verbs.WC{}, false) }
	overrun := func(q *Queue) { full(q); q.Push(&verbs.WC{}, false) }
	closed := func(q *Queue) { q.Close() }
	for _, tc := range []struct {
		name  string
		setup func(q *Queue)
		verb  func(q *Queue) error
		want  syscall.Errno
	}{
		{"ibv_create_cq/cqe zero", nil, func(*Queue) error { _, err := New(0, 8); return err }, syscall.EINVAL},
		{"ibv_create_cq/cqe above max", nil, func(*Queue) error { _, err := New(9, 8); return err }, syscall.EINVAL},
		{"ibv_resize_cq/cqe zero", nil, func(q *Queue) error { _, err := q.Resize(0, 8); return err }, syscall.EINVAL},
		{"ibv_resize_cq/cqe above max", nil, func(q *Queue) error { _, err := q.Resize(9, 8); return err }, syscall.EINVAL},
		{"ibv_resize_cq/below held", full, func(q *Queue) error { _, err := q.Resize(1, 8); return err }, syscall.EINVAL},
		{"ibv_resize_cq/error state", overrun, func(q *Queue) error { _, err := q.Resize(8, 8); return err }, syscall.EIO},
		{"ibv_resize_cq/destroyed", closed, func(q *Queue) error { _, err := q.Resize(8, 8); return err }, syscall.EINVAL},
		{"ibv_resize_cq/ok", full, func(q *Queue) error { _, err := q.Resize(2, 8); return err }, 0},
		{"ibv_poll_cq/error state drained", overrun, func(q *Queue) error {
			q.Poll(make([]verbs.WC, 2))
			_, err := q.Poll(make([]verbs.WC, 2))
			return err
		}, syscall.ENOSPC},
		{"ibv_poll_cq/destroyed", closed, func(q *Queue) error { _, err := q.Poll(make([]verbs.WC, 1)); return err }, syscall.EINVAL},
		{"ibv_poll_cq/ok", full, func(q *Queue) error { _, err := q.Poll(make([]verbs.WC, 1)); return err }, 0},
		{"ibv_req_notify_cq/error state", overrun, func(q *Queue) error { return q.ReqNotify(true) }, syscall.EIO},
		{"ibv_req_notify_cq/destroyed", closed, func(q *Queue) error { return q.ReqNotify(true) }, syscall.EINVAL},
		{"ibv_req_notify_cq/ok", nil, func(q *Queue) error { return q.ReqNotify(true) }, 0},
		{"ibv_destroy_cq/attached", func(q *Queue) { q.Attach() }, (*Queue).Close, syscall.EBUSY},
		{"ibv_destroy_cq/twice", closed, (*Queue).Close, syscall.EINVAL},
		{"ibv_destroy_cq/error state", overrun, (*Queue).Close, 0},
		{"push/full", full, func(q *Queue) error { return q.Push(&verbs.WC{}, false) }, syscall.ENOSPC},
		{"push/error state", overrun, func(q *Queue) error { return q.Push(&verbs.WC{}, false) }, syscall.EIO},
		{"push/nil", nil, func(q *Queue) error { return q.Push(nil, false) }, syscall.EINVAL},
		{"push/destroyed", closed, func(q *Queue) error { return q.Push(&verbs.WC{}, false) }, syscall.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := New(2, 8)
			if err != nil {
				t.Fatal(err)
			}
			if tc.setup != nil {
				tc.setup(q)
			}
			err = tc.verb(q)
			if tc.want == 0 {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				return
			}
			wantErrno(t, err, tc.want)
		})
	}
}
