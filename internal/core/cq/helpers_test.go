package cq

import (
	"errors"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/core/verbs"
)

const testMaxCQE = 1024

func newCQ(t testing.TB, cqe int) *Queue {
	t.Helper()
	q, err := New(cqe, testMaxCQE)
	if err != nil {
		t.Fatalf("New(%d): %v", cqe, err)
	}
	return q
}

func push(t testing.TB, q *Queue, ids ...uint64) {
	t.Helper()
	for _, id := range ids {
		if err := q.Push(&verbs.WC{WRID: id, Opcode: verbs.WCRecv, ByteLen: uint32(id)}, false); err != nil {
			t.Fatalf("Push(%d): %v", id, err)
		}
	}
}

func pollIDs(t testing.TB, q *Queue) []uint64 {
	t.Helper()
	var ids []uint64
	wc := make([]verbs.WC, 3)
	for {
		n, err := q.Poll(wc)
		if n == 0 && errors.Is(err, ErrOverrun) {
			return ids // an overrun CQ, drained
		}
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		if n == 0 {
			return ids
		}
		for _, c := range wc[:n] {
			if c.ByteLen != uint32(c.WRID) {
				t.Fatalf("torn completion %+v", c)
			}
			ids = append(ids, c.WRID)
		}
	}
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

func notified(q *Queue) bool {
	select {
	case <-q.Notify():
		return true
	default:
		return false
	}
}

func seq(from, n uint64) []uint64 {
	var s []uint64
	for i := uint64(0); i < n; i++ {
		s = append(s, from+i)
	}
	return s
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
