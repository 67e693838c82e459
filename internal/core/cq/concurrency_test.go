package cq

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
)

// TestConcurrentPushPollResizeNotify pushes from several producers while the
// consumer drains through the completion channel and another goroutine
// resizes and arms. Producers hold a credit per completion in flight, as the
// engine does by sizing CQs to the WRs they serve, so the CQ never overruns.
// Every completion is counted: none lost, none duplicated, each producer's
// completions arrive in its order.
func TestConcurrentPushPollResizeNotify(t *testing.T) {
	const (
		producers = 4
		perProd   = 5000
		credits   = 16
	)
	q := newCQ(t, credits)
	credit := make(chan struct{}, credits)
	for i := 0; i < credits; i++ {
		credit <- struct{}{}
	}
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < perProd; i++ {
				<-credit
				wc := verbs.WC{WRID: uint64(p)<<32 | uint64(i), QPNum: uint32(p), ByteLen: uint32(i)}
				if err := q.Push(&wc, i%7 == 0); err != nil {
					t.Errorf("Push: %v", err)
					return
				}
			}
		}(p)
	}
	stop := make(chan struct{})
	var side sync.WaitGroup
	side.Add(1)
	go func() { // resizer: never below credits, so never below the count held
		defer side.Done()
		sizes := []int{credits, 64, credits + 1, 200, 32}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if n, err := q.Resize(sizes[i%len(sizes)], testMaxCQE); err != nil || n < credits {
				t.Errorf("Resize = %d, %v", n, err)
				return
			}
			q.ReqNotify(i%2 == 0)
			time.Sleep(20 * time.Microsecond)
		}
	}()

	next := make([]uint32, producers)
	var got atomic.Int64
	wc := make([]verbs.WC, 8)
	deadline := time.After(30 * time.Second)
	for got.Load() < producers*perProd {
		if err := q.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		n, err := q.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range wc[:n] {
			p := c.QPNum
			if uint64(c.ByteLen) != c.WRID&0xffffffff || c.WRID>>32 != uint64(p) {
				t.Fatalf("torn completion %+v", c)
			}
			if c.ByteLen != next[p] {
				t.Fatalf("producer %d: got %d, want %d (lost, duplicated or reordered)", p, c.ByteLen, next[p])
			}
			next[p]++
			got.Add(1)
			credit <- struct{}{}
		}
		if n == 0 {
			select {
			case <-q.Notify():
			case <-time.After(time.Millisecond): // a producer may be between credit and Push
			case <-deadline:
				t.Fatalf("stuck after %d completions", got.Load())
			}
		}
	}
	close(stop)
	wg.Wait()
	side.Wait()
	if n, _ := q.Poll(wc); n != 0 || q.Err() != nil {
		t.Fatalf("extra completions %d or error %v", n, q.Err())
	}
}
