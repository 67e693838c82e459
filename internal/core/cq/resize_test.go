package cq

import (
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/core/verbs"
)

// Tests named after the rules of ibv_resize_cq() (Dotan Barak's page).

func TestResizeCQ_WorksWhenEmpty(t *testing.T) {
	q := newCQ(t, 4)
	n, err := q.Resize(10, testMaxCQE)
	if err != nil || n < 10 || q.Cap() != n {
		t.Fatalf("Resize = %d, %v; Cap %d", n, err, q.Cap())
	}
	push(t, q, seq(1, 10)...)
	if got := pollIDs(t, q); !equalIDs(got, seq(1, 10)) {
		t.Fatalf("ids %v", got)
	}
}

func TestResizeCQ_KeepsUnpolledCompletionsInOrder(t *testing.T) {
	q := newCQ(t, 4)
	push(t, q, 1, 2, 3)
	wc := make([]verbs.WC, 2)
	q.Poll(wc) // head moves so the ring wraps below
	push(t, q, 4, 5, 6)
	for _, size := range []int{16, 4, 5} { // grow, shrink, grow
		if _, err := q.Resize(size, testMaxCQE); err != nil {
			t.Fatalf("Resize(%d): %v", size, err)
		}
	}
	if got := pollIDs(t, q); !equalIDs(got, []uint64{3, 4, 5, 6}) {
		t.Fatalf("ids %v", got)
	}
}

func TestResizeCQ_KeepsNotificationArmedBeforeAnyEvent(t *testing.T) {
	q := newCQ(t, 4)
	if err := q.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Resize(8, testMaxCQE); err != nil {
		t.Fatal(err)
	}
	push(t, q, 1)
	if !notified(q) {
		t.Fatal("no completion event after resizing an armed CQ")
	}
}

func TestResizeCQ_WorksWithQPsAttached(t *testing.T) {
	q := newCQ(t, 4)
	q.Attach()
	q.Attach()
	push(t, q, 1, 2)
	if _, err := q.Resize(64, testMaxCQE); err != nil {
		t.Fatalf("Resize with QPs attached: %v", err)
	}
	push(t, q, seq(3, 62)...)
	if got := pollIDs(t, q); !equalIDs(got, seq(1, 64)) {
		t.Fatalf("ids %v", got)
	}
}

func TestResizeCQ_BelowCompletionsHeldIsEINVAL_NothingChanges(t *testing.T) {
	q := newCQ(t, 8)
	push(t, q, seq(1, 7)...)
	if err := q.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	n, err := q.Resize(5, testMaxCQE)
	wantErrno(t, err, syscall.EINVAL)
	if n != 0 || q.Cap() != 8 || q.Len() != 7 {
		t.Fatalf("failed Resize returned %d, Cap %d, Len %d", n, q.Cap(), q.Len())
	}
	if !strings.Contains(err.Error(), "ibv_resize_cq cq: invalid argument: cqe 5 below 7 completions held") {
		t.Fatalf("message %q", err)
	}
	push(t, q, 8) // still armed, still room for one more
	if !notified(q) {
		t.Fatal("failed Resize disarmed the CQ")
	}
	if got := pollIDs(t, q); !equalIDs(got, seq(1, 8)) {
		t.Fatalf("ids %v", got)
	}
}

func TestResizeCQ_ToExactlyTheCompletionsHeldIsAllowed(t *testing.T) {
	q := newCQ(t, 8)
	push(t, q, 1, 2, 3)
	if n, err := q.Resize(3, testMaxCQE); err != nil || n != 3 {
		t.Fatalf("Resize(3) with 3 held = %d, %v", n, err)
	}
	if got := pollIDs(t, q); !equalIDs(got, []uint64{1, 2, 3}) {
		t.Fatalf("ids %v", got)
	}
}

func TestResizeCQ_TooSmallForWhatMayEnterLeadsToOverrun(t *testing.T) {
	q := newCQ(t, 8)
	push(t, q, 1)
	if _, err := q.Resize(2, testMaxCQE); err != nil {
		t.Fatal(err)
	}
	push(t, q, 2)
	wantErrno(t, q.Push(&verbs.WC{WRID: 3}, false), syscall.ENOSPC)
	if q.Err() == nil {
		t.Fatal("no overrun after resizing too small")
	}
}

func TestResizeCQ_ReturnsActualSizeAtLeastRequested(t *testing.T) {
	q := newCQ(t, 4)
	for _, want := range []int{1, 7, 100, testMaxCQE} {
		n, err := q.Resize(want, testMaxCQE)
		if err != nil || n < want || q.Cap() != n {
			t.Fatalf("Resize(%d) = %d, %v; Cap %d", want, n, err, q.Cap())
		}
	}
}

func TestResizeCQ_CQERangeIsOneToMaxCQE(t *testing.T) {
	for _, tc := range []struct {
		cqe int
		ok  bool
	}{{-1, false}, {0, false}, {1, true}, {testMaxCQE, true}, {testMaxCQE + 1, false}} {
		q := newCQ(t, 4)
		push(t, q, 1)
		_, err := q.Resize(tc.cqe, testMaxCQE)
		if tc.ok && err != nil {
			t.Errorf("cqe %d: %v", tc.cqe, err)
		}
		if !tc.ok {
			wantErrno(t, err, syscall.EINVAL)
			if q.Cap() != 4 || q.Len() != 1 {
				t.Errorf("cqe %d: failed Resize changed Cap %d Len %d", tc.cqe, q.Cap(), q.Len())
			}
		}
	}
}

func TestResizeCQ_FailureLeavesQPsAndCQWorking(t *testing.T) {
	q := newCQ(t, 4)
	q.Attach()
	push(t, q, 1, 2)
	if _, err := q.Resize(testMaxCQE+1, testMaxCQE); err == nil {
		t.Fatal("Resize above max_cqe succeeded")
	}
	push(t, q, 3, 4) // the QP keeps completing into the CQ
	if got := pollIDs(t, q); !equalIDs(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("ids %v", got)
	}
	wantErrno(t, q.Close(), syscall.EBUSY) // still attached
}

func TestResizeCQ_ToTheSameSizeIsANoOp(t *testing.T) {
	q := newCQ(t, 4)
	push(t, q, 1, 2)
	if n, err := q.Resize(4, testMaxCQE); err != nil || n != 4 {
		t.Fatalf("Resize = %d, %v", n, err)
	}
	if got := pollIDs(t, q); !equalIDs(got, []uint64{1, 2}) {
		t.Fatalf("ids %v", got)
	}
}
