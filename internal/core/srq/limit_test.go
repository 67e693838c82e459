package srq

import (
	"sync"
	"testing"

	"github.com/goroce/goroce/internal/core/verbs"
)

// Tests named after the SRQ limit rules: ibv_modify_srq(3) ("drops below
// srq_limit", the suggested procedure) and ibv_query_srq(3) (one-shot event).

func TestSRQLimit_EventWhenOutstandingDropsBelowLimit(t *testing.T) {
	q := newQueue(t, 16, 1, testCaps)
	post(t, q, seq(1, 6)...)
	fired := limitCounter(q)
	if err := q.Modify(&verbs.SRQAttr{Limit: 4}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	popIDs(t, q, 2) // 4 outstanding: not below 4
	if *fired != 0 {
		t.Fatalf("fired at 4 outstanding with limit 4")
	}
	popIDs(t, q, 1) // 3 < 4
	if *fired != 1 {
		t.Fatalf("fired %d times at 3 outstanding, want 1", *fired)
	}
}

func TestSRQLimit_EventIsOneShotThenDisarmed(t *testing.T) {
	q := newQueue(t, 16, 1, testCaps)
	post(t, q, seq(1, 8)...)
	fired := limitCounter(q)
	if err := q.Modify(&verbs.SRQAttr{Limit: 6}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	drainIDs(q)
	post(t, q, seq(20, 8)...)
	drainIDs(q)
	if *fired != 1 {
		t.Fatalf("fired %d times, want exactly 1", *fired)
	}
	if got := mustQuery(t, q).Limit; got != 0 {
		t.Fatalf("Query limit after event = %d, want 0 (disarmed)", got)
	}
}

func TestSRQLimit_RearmingRaisesTheEventAgain(t *testing.T) {
	q := newQueue(t, 16, 1, testCaps)
	fired := limitCounter(q)
	for round := 1; round <= 3; round++ {
		post(t, q, seq(uint64(round*100), 5)...)
		if err := q.Modify(&verbs.SRQAttr{Limit: 2}, verbs.SRQLimit); err != nil {
			t.Fatal(err)
		}
		drainIDs(q)
		if *fired != round {
			t.Fatalf("round %d: fired %d times", round, *fired)
		}
	}
}

func TestSRQLimit_SuggestedProcedure(t *testing.T) {
	// 1) create, 2) post, 3) arm below the posted count, 4) on the event
	// post more and arm again: every WR is still delivered, one event per arm.
	q := newQueue(t, 32, 1, testCaps)
	var events int
	next := uint64(1)
	postMore := func() {
		for q.Len() < 10 {
			post(t, q, next)
			next++
		}
		if err := q.Modify(&verbs.SRQAttr{Limit: 3}, verbs.SRQLimit); err != nil {
			t.Fatal(err)
		}
	}
	q.SetLimitHandler(func() { events++ })
	postMore()
	var got []uint64
	var dst verbs.RecvWR
	for len(got) < 50 {
		seen := events
		if !q.Pop(&dst) {
			t.Fatal("ran dry: the limit event did not refill the SRQ")
		}
		got = append(got, dst.WRID)
		if events != seen {
			postMore() // the handler acknowledged; refill outside it
		}
	}
	if !equalIDs(got, seq(1, 50)) {
		t.Fatalf("WRs out of order or lost: %v", got)
	}
	if events < 6 {
		t.Fatalf("only %d events for 50 takes with refills of 8", events)
	}
}

func TestSRQLimit_ArmWithOrWithoutAttachedQPs(t *testing.T) {
	for _, attached := range []int{0, 3} {
		q := newQueue(t, 16, 1, testCaps)
		for i := 0; i < attached; i++ {
			q.Attach()
		}
		post(t, q, seq(1, 4)...)
		fired := limitCounter(q)
		if err := q.Modify(&verbs.SRQAttr{Limit: 2}, verbs.SRQLimit); err != nil {
			t.Fatalf("%d QPs attached: %v", attached, err)
		}
		popIDs(t, q, 3)
		if *fired != 1 {
			t.Fatalf("%d QPs attached: fired %d", attached, *fired)
		}
	}
}

func TestSRQLimit_HandlerRunsOutsideTheLock(t *testing.T) {
	q := newQueue(t, 16, 1, testCaps)
	post(t, q, seq(1, 4)...)
	var reentered bool
	q.SetLimitHandler(func() {
		// Calling back into the queue would deadlock if the lock were held.
		post(t, q, 99)
		_ = q.Modify(&verbs.SRQAttr{Limit: 1}, verbs.SRQLimit)
		reentered = true
	})
	if err := q.Modify(&verbs.SRQAttr{Limit: 3}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	popIDs(t, q, 2)
	if !reentered {
		t.Fatal("handler not called")
	}
}

func TestSRQLimit_ConcurrentTakesRaiseTheEventOnce(t *testing.T) {
	q := newQueue(t, 64, 1, testCaps)
	post(t, q, seq(1, 64)...)
	var mu sync.Mutex
	var events int
	q.SetLimitHandler(func() { mu.Lock(); events++; mu.Unlock() })
	if err := q.Modify(&verbs.SRQAttr{Limit: 40}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var dst verbs.RecvWR
			for q.Pop(&dst) {
			}
		}()
	}
	wg.Wait()
	if events != 1 {
		t.Fatalf("events = %d, want 1", events)
	}
}

func TestSRQLimit_CrossingWithoutHandlerStillDisarms(t *testing.T) {
	q := newQueue(t, 16, 1, testCaps)
	post(t, q, seq(1, 4)...)
	if err := q.Modify(&verbs.SRQAttr{Limit: 2}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	popIDs(t, q, 3)
	if got := mustQuery(t, q).Limit; got != 0 {
		t.Fatalf("limit = %d after crossing, want 0", got)
	}
}
