package srq

import "github.com/goroce/goroce/internal/core/verbs"
import "testing"

func TestPostRecvPopDoNotAllocate(t *testing.T) {
	q := newQueue(t, 16, 2, testCaps)
	wrs := []verbs.RecvWR{wr(1, 2)}
	dst := verbs.RecvWR{SGL: make([]verbs.SGE, 0, 2)}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := q.PostRecv(wrs); err != nil {
			t.Fatal(err)
		}
		if !q.Pop(&dst) {
			t.Fatal("empty")
		}
	})
	if allocs != 0 {
		t.Fatalf("PostRecv+Pop: %v allocs/op, want 0", allocs)
	}
}

// BenchmarkSRQPostRecvPop posts one 2-SGE WR and takes it back.
func BenchmarkSRQPostRecvPop(b *testing.B) {
	q := newQueue(b, 256, 2, Caps{MaxWR: 256, MaxSGE: 2})
	wrs := []verbs.RecvWR{wr(1, 2)}
	dst := verbs.RecvWR{SGL: make([]verbs.SGE, 0, 2)}
	b.ReportAllocs()
	for b.Loop() {
		q.PostRecv(wrs)
		q.Pop(&dst)
	}
}

// BenchmarkSRQPostRecvPopBatch16 posts 16 WRs in one call, then takes them.
func BenchmarkSRQPostRecvPopBatch16(b *testing.B) {
	q := newQueue(b, 256, 1, Caps{MaxWR: 256, MaxSGE: 1})
	wrs := make([]verbs.RecvWR, 16)
	for i := range wrs {
		wrs[i] = wr(uint64(i), 1)
	}
	dst := verbs.RecvWR{SGL: make([]verbs.SGE, 0, 1)}
	b.ReportAllocs()
	for b.Loop() {
		q.PostRecv(wrs)
		for range wrs {
			q.Pop(&dst)
		}
	}
}
