package srq

import (
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/internal/core/verbserr"
)

// Tests named after ibv_query_srq(3) / ibv_create_srq / ibv_destroy_srq and
// the SRQ error state (IBV_EVENT_SRQ_ERR).

func TestQuerySRQ_ReturnsMaxWRMaxSGEAndLimit(t *testing.T) {
	q := newQueue(t, 12, 3, testCaps)
	post(t, q, seq(1, 10)...)
	if err := q.Modify(&verbs.SRQAttr{Limit: 5}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	if got, want := mustQuery(t, q), (verbs.SRQAttr{MaxWR: 12, MaxSGE: 3, Limit: 5}); got != want {
		t.Fatalf("Query = %+v, want %+v", got, want)
	}
}

func TestCreateSRQ_AttributeRanges(t *testing.T) {
	for _, tc := range []struct {
		name          string
		maxWR, maxSGE uint32
		ok            bool
	}{
		{"minimum", 1, 1, true},
		{"device maximum", testCaps.MaxWR, testCaps.MaxSGE, true},
		{"max_wr zero", 0, 1, false},
		{"max_wr above device", testCaps.MaxWR + 1, 1, false},
		{"max_sge zero", 4, 0, false},
		{"max_sge above device", 4, testCaps.MaxSGE + 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := verbs.SRQAttr{MaxWR: tc.maxWR, MaxSGE: tc.maxSGE}
			q, err := New(&a, testCaps)
			if !tc.ok {
				wantErrno(t, err, syscall.EINVAL)
				if q != nil {
					t.Fatal("queue returned with error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.MaxWR < tc.maxWR || a.MaxSGE < tc.maxSGE {
				t.Fatalf("actual %+v below requested", a)
			}
			if got := mustQuery(t, q); got.MaxWR != a.MaxWR || got.MaxSGE != a.MaxSGE {
				t.Fatalf("written back %+v, Query %+v", a, got)
			}
		})
	}
}

func TestCreateSRQ_NilAttrIsEINVAL(t *testing.T) {
	_, err := New(nil, testCaps)
	wantErrno(t, err, syscall.EINVAL)
}

func TestCreateSRQ_LimitIsIgnoredAndStartsDisarmed(t *testing.T) {
	a := verbs.SRQAttr{MaxWR: 8, MaxSGE: 1, Limit: 5}
	q, err := New(&a, testCaps)
	if err != nil {
		t.Fatal(err)
	}
	fired := limitCounter(q)
	post(t, q, 1)
	drainIDs(q)
	if mustQuery(t, q).Limit != 0 || *fired != 0 {
		t.Fatal("create armed the limit")
	}
}

func TestSRQError_EveryVerbButDestroyFails(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, 1, 2)
	q.SetError()
	_, err := q.PostRecv([]verbs.RecvWR{wr(3, 1)})
	wantErrno(t, err, syscall.EIO)
	var e *verbserr.Error
	if !errors.As(err, &e) || e.Index != 0 {
		t.Fatalf("post error %v does not name WR 0", err)
	}
	_, err = q.Query()
	wantErrno(t, err, syscall.EIO)
	wantErrno(t, q.Modify(&verbs.SRQAttr{Limit: 1}, verbs.SRQLimit), syscall.EIO)
	wantErrno(t, q.Modify(&verbs.SRQAttr{MaxWR: 16}, verbs.SRQMaxWR), syscall.EIO)
	if err := q.Close(); err != nil {
		t.Fatalf("destroy in error state: %v", err)
	}
}

func TestSRQError_NoWRIsFetched(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, 1, 2)
	q.SetError()
	var dst verbs.RecvWR
	if q.Pop(&dst) {
		t.Fatal("Pop fetched a WR from an SRQ in the error state")
	}
}

func TestSRQError_ArmedLimitNoLongerFires(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, 1, 2, 3)
	fired := limitCounter(q)
	if err := q.Modify(&verbs.SRQAttr{Limit: 2}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	q.SetError()
	q.Flush(nil)
	var dst verbs.RecvWR
	q.Pop(&dst)
	if *fired != 0 {
		t.Fatal("limit event from an SRQ in the error state")
	}
}

func TestDestroySRQ_WhileQPsAttachedIsEBUSY(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, 1)
	q.Attach()
	q.Attach()
	wantErrno(t, q.Close(), syscall.EBUSY)
	q.Detach()
	wantErrno(t, q.Close(), syscall.EBUSY)
	if got := drainIDs(q); !equalIDs(got, []uint64{1}) {
		t.Fatalf("failed destroy changed the queue: %v", got)
	}
	q.Detach()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDestroySRQ_ThenEveryVerbFailsWithErrClosed(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, 1)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	_, perr := q.PostRecv([]verbs.RecvWR{wr(1, 1)})
	_, qerr := q.Query()
	for name, err := range map[string]error{
		"PostRecv": perr,
		"Query":    qerr,
		"Modify":   q.Modify(&verbs.SRQAttr{Limit: 1}, verbs.SRQLimit),
		"Close":    q.Close(),
	} {
		if !errors.Is(err, net.ErrClosed) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s after destroy: %v, want EINVAL and net.ErrClosed", name, err)
		}
	}
	var dst verbs.RecvWR
	if q.Pop(&dst) || q.Len() != 0 || q.Flush(nil) != 0 {
		t.Fatal("destroyed queue still hands out WRs")
	}
}

func TestDetach_WithoutAttachPanics(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	q.Detach()
}

func TestFlush_RemovesEveryWRInOrder(t *testing.T) {
	q := newQueue(t, 4, 2, testCaps)
	post(t, q, 1, 2, 3)
	popIDs(t, q, 2)
	if _, err := q.PostRecv([]verbs.RecvWR{wr(4, 2), wr(5, 0), wr(6, 1)}); err != nil {
		t.Fatal(err)
	}
	var got []uint64
	n := q.Flush(func(w *verbs.RecvWR) {
		if len(w.SGL) > 0 && w.SGL[0].Addr != w.WRID<<8 {
			t.Errorf("WR %d has SGE %+v", w.WRID, w.SGL[0])
		}
		got = append(got, w.WRID)
	})
	if n != 4 || !equalIDs(got, []uint64{3, 4, 5, 6}) || q.Len() != 0 {
		t.Fatalf("Flush = %d, %v, Len %d", n, got, q.Len())
	}
	post(t, q, seq(10, 4)...) // the queue is usable, full capacity, after a flush
}

func TestError_MessageNamesVerbObjectAndIndex(t *testing.T) {
	q := newQueue(t, 1, 1, testCaps)
	_, err := q.PostRecv([]verbs.RecvWR{wr(1, 1), wr(2, 1)})
	want := "srq: ibv_post_srq_recv srq wr[1]: cannot allocate memory: queue full (max_wr 1)"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}
	err = q.Modify(&verbs.SRQAttr{Limit: 2}, verbs.SRQLimit)
	if err == nil || !strings.HasPrefix(err.Error(), "srq: ibv_modify_srq srq: invalid argument: srq_limit 2 above max_wr 1") {
		t.Fatalf("err = %v", err)
	}
}

func TestFlush_CallbackMayCallBackIntoTheQueue(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, 1, 2, 3)
	var got []uint64
	n := q.Flush(func(w *verbs.RecvWR) {
		got = append(got, w.WRID)
		if w.WRID == 1 {
			post(t, q, 4) // posted during the flush: stays queued
		}
		_ = q.Len()
	})
	if n != 3 || !equalIDs(got, []uint64{1, 2, 3}) {
		t.Fatalf("Flush = %d, %v", n, got)
	}
	if left := drainIDs(q); !equalIDs(left, []uint64{4}) {
		t.Fatalf("left %v, want [4]", left)
	}
}
