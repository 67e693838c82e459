package srq

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
)

// TestConcurrentPostPopModify posts, takes, resizes, arms and queries from
// several goroutines at once and counts every WR: each posted WR is taken
// exactly once (none lost, none duplicated).
func TestConcurrentPostPopModify(t *testing.T) {
	const (
		posters = 3
		perPost = 3000
		total   = posters * perPost
	)
	q := newQueue(t, 32, 2, Caps{MaxWR: 256, MaxSGE: 2, Resize: true})
	var events atomic.Int64
	q.SetLimitHandler(func() { events.Add(1) })

	seen := make([]atomic.Int32, total)
	var taken, resizes, arms atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup

	// The posters start once the modifier has run, so it runs beside them
	// even when a loaded host would schedule it last.
	modifying := make(chan struct{})
	var postWG sync.WaitGroup
	for p := 0; p < posters; p++ {
		postWG.Add(1)
		go func(p int) {
			defer postWG.Done()
			<-modifying
			batch := make([]verbs.RecvWR, 0, 4)
			for i := 0; i < perPost; {
				batch = batch[:0]
				for k := 0; k < 4 && i+k < perPost; k++ {
					id := uint64(p*perPost + i + k)
					batch = append(batch, verbs.RecvWR{WRID: id, SGL: []verbs.SGE{{Addr: id, Length: 1}}})
				}
				n, _ := q.PostRecv(batch) // ENOMEM when full: retry the rest
				i += n
				if n == 0 {
					time.Sleep(time.Microsecond)
				}
			}
		}(p)
	}
	consume := func() {
		defer wg.Done()
		var dst verbs.RecvWR
		for {
			if q.Pop(&dst) {
				if len(dst.SGL) != 1 || dst.SGL[0].Addr != dst.WRID {
					t.Errorf("torn WR %+v", dst)
				}
				seen[dst.WRID].Add(1)
				taken.Add(1)
				continue
			}
			select {
			case <-stop:
				return
			default:
				time.Sleep(time.Microsecond)
			}
		}
	}
	for c := 0; c < 3; c++ {
		wg.Add(1)
		go consume()
	}
	wg.Add(1)
	go func() { // resizer and armer
		defer wg.Done()
		sizes := []uint32{16, 64, 32, 200, 8, 128}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			a := verbs.SRQAttr{MaxWR: sizes[i%len(sizes)], Limit: uint32(i % 8)}
			if q.Modify(&a, verbs.SRQMaxWR|verbs.SRQLimit) == nil { // EINVAL below outstanding is fine
				resizes.Add(1)
			}
			if q.Modify(&verbs.SRQAttr{Limit: uint32(i % 5)}, verbs.SRQLimit) == nil {
				arms.Add(1)
			}
			if a, err := q.Query(); err != nil || a.MaxSGE != 2 {
				t.Errorf("Query = %+v, %v", a, err)
			}
			if i == 0 {
				close(modifying)
			}
			time.Sleep(10 * time.Microsecond)
		}
	}()
	postWG.Wait()
	deadline := time.Now().Add(20 * time.Second)
	for taken.Load() < total && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for id := range seen {
		if c := seen[id].Load(); c != 1 {
			t.Fatalf("WR %d taken %d times", id, c)
		}
	}
	if q.Len() != 0 {
		t.Fatalf("%d WRs left", q.Len())
	}
	if resizes.Load() == 0 || arms.Load() == 0 {
		t.Fatalf("resizes %d, arms %d: the modifier never ran concurrently", resizes.Load(), arms.Load())
	}
	t.Logf("%d WRs, %d resizes, %d arms, %d limit events", total, resizes.Load(), arms.Load(), events.Load())
}
