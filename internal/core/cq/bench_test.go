package cq

import "github.com/goroce/goroce/internal/core/verbs"
import "testing"

func TestPushPollDoNotAllocate(t *testing.T) {
	q := newCQ(t, 16)
	in := verbs.WC{WRID: 1, Opcode: verbs.WCRecv, ByteLen: 64}
	out := make([]verbs.WC, 4)
	q.ReqNotify(false)
	allocs := testing.AllocsPerRun(1000, func() {
		if err := q.Push(&in, true); err != nil {
			t.Fatal(err)
		}
		if n, _ := q.Poll(out); n != 1 {
			t.Fatal("lost completion")
		}
		q.ReqNotify(false)
		select {
		case <-q.Notify():
		default:
		}
	})
	if allocs != 0 {
		t.Fatalf("Push+Poll: %v allocs/op, want 0", allocs)
	}
}

// BenchmarkCQPushPoll pushes one completion and polls it back.
func BenchmarkCQPushPoll(b *testing.B) {
	q := newCQ(b, 256)
	in := verbs.WC{WRID: 1, Opcode: verbs.WCRecv, ByteLen: 64}
	out := make([]verbs.WC, 16)
	b.ReportAllocs()
	for b.Loop() {
		q.Push(&in, false)
		q.Poll(out)
	}
}

// BenchmarkCQPushPollBatch16 pushes 16 completions, then polls them in one call.
func BenchmarkCQPushPollBatch16(b *testing.B) {
	q := newCQ(b, 256)
	in := verbs.WC{WRID: 1, Opcode: verbs.WCRecv, ByteLen: 64}
	out := make([]verbs.WC, 16)
	b.ReportAllocs()
	for b.Loop() {
		for range 16 {
			q.Push(&in, false)
		}
		q.Poll(out)
	}
}
