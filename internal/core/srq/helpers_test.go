package srq

import (
	"errors"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/core/verbs"
)

// testCaps are the device limits most tests run against.
var testCaps = Caps{MaxWR: 64, MaxSGE: 4, Resize: true}

func newQueue(t testing.TB, maxWR, maxSGE uint32, caps Caps) *Queue {
	t.Helper()
	q, err := New(&verbs.SRQAttr{MaxWR: maxWR, MaxSGE: maxSGE}, caps)
	if err != nil {
		t.Fatalf("New(%d, %d): %v", maxWR, maxSGE, err)
	}
	return q
}

// wr builds a receive WR with nsge SGEs whose addresses encode its id.
func wr(id uint64, nsge int) verbs.RecvWR {
	w := verbs.RecvWR{WRID: id}
	for i := 0; i < nsge; i++ {
		w.SGL = append(w.SGL, verbs.SGE{Addr: id<<8 | uint64(i), Length: 64, LKey: uint32(id)})
	}
	return w
}

// post posts one single-SGE WR per id and fails the test on error.
func post(t testing.TB, q *Queue, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		if _, err := q.PostRecv([]verbs.RecvWR{wr(id, 1)}); err != nil {
			t.Fatalf("PostRecv(%d): %v", id, err)
		}
	}
}

// popIDs pops n WRs and returns their ids; it fails if fewer are available.
func popIDs(t testing.TB, q *Queue, n int) []uint64 {
	t.Helper()
	var ids []uint64
	var dst verbs.RecvWR
	for i := 0; i < n; i++ {
		if !q.Pop(&dst) {
			t.Fatalf("Pop %d of %d: queue empty", i, n)
		}
		ids = append(ids, dst.WRID)
	}
	return ids
}

// drainIDs pops everything and returns the ids in order.
func drainIDs(q *Queue) []uint64 {
	var ids []uint64
	var dst verbs.RecvWR
	for q.Pop(&dst) {
		ids = append(ids, dst.WRID)
	}
	return ids
}

// limitCounter installs a limit handler and returns a pointer to its call count.
func limitCounter(q *Queue) *int {
	n := new(int)
	q.SetLimitHandler(func() { *n++ })
	return n
}

func wantErrno(t testing.TB, err error, want syscall.Errno) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %v", want)
	}
	if !errors.Is(err, want) {
		t.Fatalf("err = %v, want errno %v", err, want)
	}
}

func mustQuery(t testing.TB, q *Queue) verbs.SRQAttr {
	t.Helper()
	a, err := q.Query()
	if err != nil {
		t.Fatalf("Query: %v", err)
	}
	return a
}

func equalIDs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func seq(from, n uint64) []uint64 {
	var s []uint64
	for i := uint64(0); i < n; i++ {
		s = append(s, from+i)
	}
	return s
}
