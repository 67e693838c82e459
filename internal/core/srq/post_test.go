package srq

import (
	"errors"
	"math"
	"sync"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/internal/core/verbserr"
)

// Tests named after the rules of ibv_post_srq_recv() (Dotan Barak's page).

func TestPostSRQRecv_AppendsToTailInOrder(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, 1, 2)
	if n, err := q.PostRecv([]verbs.RecvWR{wr(3, 1), wr(4, 1), wr(5, 1)}); n != 3 || err != nil {
		t.Fatalf("PostRecv = %d, %v", n, err)
	}
	if got := drainIDs(q); !equalIDs(got, []uint64{1, 2, 3, 4, 5}) {
		t.Fatalf("order %v", got)
	}
}

func TestPostSRQRecv_StopsAtFirstBadWRAndNamesIt(t *testing.T) {
	q := newQueue(t, 8, 2, testCaps)
	wrs := []verbs.RecvWR{wr(1, 1), wr(2, 2), wr(3, 3), wr(4, 1)} // wr 2 has 3 SGEs > max_sge 2
	n, err := q.PostRecv(wrs)
	if n != 2 {
		t.Fatalf("posted %d, want 2", n)
	}
	var e *verbserr.Error
	if !errors.As(err, &e) || e.Index != 2 {
		t.Fatalf("err = %v, want *verbserr.Error with Index 2", err)
	}
	wantErrno(t, err, syscall.EINVAL)
	if got := drainIDs(q); !equalIDs(got, []uint64{1, 2}) {
		t.Fatalf("queue holds %v: WRs before the bad one stay, none after", got)
	}
}

func TestPostSRQRecv_FullQueueIsENOMEM(t *testing.T) {
	q := newQueue(t, 3, 1, testCaps)
	n, err := q.PostRecv([]verbs.RecvWR{wr(1, 1), wr(2, 1), wr(3, 1), wr(4, 1), wr(5, 1)})
	if n != 3 {
		t.Fatalf("posted %d, want 3", n)
	}
	wantErrno(t, err, syscall.ENOMEM)
	var e *verbserr.Error
	if !errors.As(err, &e) || e.Index != 3 {
		t.Fatalf("err = %v, want Index 3", err)
	}
	if q.Len() != 3 {
		t.Fatalf("Len = %d", q.Len())
	}
}

func TestPostSRQRecv_MaxOutstandingIsTheMaxWRGivenAtCreation(t *testing.T) {
	a := verbs.SRQAttr{MaxWR: 5, MaxSGE: 1}
	q, err := New(&a, testCaps)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint32(0); i < a.MaxWR; i++ {
		post(t, q, uint64(i))
	}
	_, err = q.PostRecv([]verbs.RecvWR{wr(9, 1)})
	wantErrno(t, err, syscall.ENOMEM)
	popIDs(t, q, 1)
	post(t, q, 9) // a take frees room for one
}

func TestPostSRQRecv_TooManySGEsIsEINVAL(t *testing.T) {
	q := newQueue(t, 8, 2, testCaps)
	n, err := q.PostRecv([]verbs.RecvWR{wr(1, 3)})
	if n != 0 {
		t.Fatalf("posted %d", n)
	}
	wantErrno(t, err, syscall.EINVAL)
	if q.Len() != 0 {
		t.Fatal("bad WR was posted")
	}
}

func TestPostSRQRecv_NumSGEUpToMaxSGEIsAccepted(t *testing.T) {
	q := newQueue(t, 8, 4, testCaps)
	for n := 0; n <= 4; n++ {
		if _, err := q.PostRecv([]verbs.RecvWR{wr(uint64(n), n)}); err != nil {
			t.Fatalf("num_sge %d with max_sge 4: %v", n, err)
		}
	}
	var dst verbs.RecvWR
	for n := 0; n <= 4; n++ {
		if !q.Pop(&dst) || len(dst.SGL) != n {
			t.Fatalf("WR %d came back with %d SGEs", n, len(dst.SGL))
		}
		for i, s := range dst.SGL {
			if s != wr(uint64(n), n).SGL[i] {
				t.Fatalf("WR %d SGE %d = %+v", n, i, s)
			}
		}
	}
}

func TestPostSRQRecv_EmptyListPostsNothing(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	if n, err := q.PostRecv(nil); n != 0 || err != nil {
		t.Fatalf("PostRecv(nil) = %d, %v", n, err)
	}
}

func TestPostSRQRecv_WorksWithAndWithoutAttachedQPs(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	post(t, q, 1)
	q.Attach()
	post(t, q, 2)
	q.Detach()
	post(t, q, 3)
	if got := drainIDs(q); !equalIDs(got, []uint64{1, 2, 3}) {
		t.Fatalf("ids %v", got)
	}
}

func TestPostSRQRecv_CallerMayReuseWRAndSGL(t *testing.T) {
	q := newQueue(t, 8, 2, testCaps)
	sgl := []verbs.SGE{{Addr: 0x1000, Length: 10, LKey: 7}, {Addr: 0x2000, Length: 20, LKey: 7}}
	wrs := []verbs.RecvWR{{WRID: 1, SGL: sgl}}
	post1 := func() {
		if _, err := q.PostRecv(wrs); err != nil {
			t.Fatal(err)
		}
	}
	post1()
	wrs[0].WRID = 2
	sgl[0].Addr, sgl[1].Length = 0xdead, 99
	post1()
	var dst verbs.RecvWR
	q.Pop(&dst)
	if dst.WRID != 1 || dst.SGL[0].Addr != 0x1000 || dst.SGL[1].Length != 20 {
		t.Fatalf("first WR changed by caller reuse: %+v", dst)
	}
	q.Pop(&dst)
	if dst.WRID != 2 || dst.SGL[0].Addr != 0xdead || dst.SGL[1].Length != 99 {
		t.Fatalf("second WR = %+v", dst)
	}
}

func TestPostSRQRecv_WRIDIsOpaque(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	ids := []uint64{0, math.MaxUint64, 7, 7, 1 << 63}
	post(t, q, ids...)
	if got := drainIDs(q); !equalIDs(got, ids) {
		t.Fatalf("ids %v, want %v (any value, duplicates allowed)", got, ids)
	}
}

func TestSGE_LengthZeroMeans2Pow31Bytes(t *testing.T) {
	if got := (verbs.SGE{Length: 0}).Size(); got != 1<<31 {
		t.Fatalf("Size of length 0 = %d, want 2^31", got)
	}
	if got := (verbs.SGE{Length: 1}).Size(); got != 1 {
		t.Fatalf("Size of length 1 = %d", got)
	}
	if got := (verbs.SGE{Length: math.MaxUint32}).Size(); got != math.MaxUint32 {
		t.Fatalf("Size of length max = %d", got)
	}
}

func TestRecvWR_NoSGEMeansZeroByteMessage(t *testing.T) {
	if got := (&verbs.RecvWR{WRID: 1}).Size(); got != 0 {
		t.Fatalf("Size = %d, want 0", got)
	}
}

func TestRecvWR_MaxMessageIsSumOfSGELengths(t *testing.T) {
	w := verbs.RecvWR{SGL: []verbs.SGE{{Length: 100}, {Length: 0}, {Length: 28}}}
	if got, want := w.Size(), uint64(128+1<<31); got != want {
		t.Fatalf("Size = %d, want %d", got, want)
	}
}

func TestPostSRQRecv_ZeroLengthSGEIsPostedUnchanged(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	if _, err := q.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{{Addr: 5, Length: 0, LKey: 3}}}}); err != nil {
		t.Fatal(err)
	}
	var dst verbs.RecvWR
	q.Pop(&dst)
	if dst.SGL[0].Length != 0 || dst.SGL[0].Size() != 1<<31 {
		t.Fatalf("SGE = %+v", dst.SGL[0])
	}
}

func TestPop_TakesFromHeadAtomically(t *testing.T) {
	// Several consumers take concurrently: every WR is taken exactly once,
	// and each consumer sees its WRs in posting order.
	const n = 2000
	q := newQueue(t, n, 1, Caps{MaxWR: n, MaxSGE: 1})
	post(t, q, seq(0, n)...)
	var mu sync.Mutex
	seen := make(map[uint64]int)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst verbs.RecvWR
			last := int64(-1)
			for q.Pop(&dst) {
				if int64(dst.WRID) <= last || dst.SGL[0].Addr != dst.WRID<<8 {
					t.Errorf("consumer got %d after %d (or a torn WR)", dst.WRID, last)
				}
				last = int64(dst.WRID)
				mu.Lock()
				seen[dst.WRID]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("took %d distinct WRs, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("WR %d taken %d times", id, c)
		}
	}
}

func TestPop_EmptyQueueReturnsFalse(t *testing.T) {
	q := newQueue(t, 8, 1, testCaps)
	var dst verbs.RecvWR
	if q.Pop(&dst) {
		t.Fatal("Pop on empty queue returned true")
	}
}

func TestPop_ReusesDestinationSGL(t *testing.T) {
	q := newQueue(t, 8, 2, testCaps)
	post(t, q, 1, 2)
	dst := verbs.RecvWR{SGL: make([]verbs.SGE, 0, 2)}
	q.Pop(&dst)
	p := &dst.SGL[:1][0]
	q.Pop(&dst)
	if &dst.SGL[0] != p {
		t.Fatal("Pop allocated a new SGL instead of reusing dst.SGL")
	}
}

func TestPostSRQRecv_SGEsMayComeFromDifferentMRs(t *testing.T) {
	q := newQueue(t, 8, 3, testCaps)
	in := verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{{Addr: 0x10, Length: 8, LKey: 0xaaaa}, {Addr: 0x9000, Length: 16, LKey: 0xbbbb}, {Addr: 0x10, Length: 8, LKey: 0xcccc}}}
	if _, err := q.PostRecv([]verbs.RecvWR{in}); err != nil {
		t.Fatal(err)
	}
	var dst verbs.RecvWR
	q.Pop(&dst)
	for i := range in.SGL {
		if dst.SGL[i] != in.SGL[i] {
			t.Fatalf("SGE %d = %+v, want %+v", i, dst.SGL[i], in.SGL[i])
		}
	}
}
