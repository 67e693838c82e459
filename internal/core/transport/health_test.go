package transport

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link"
)

// TestShardLoopAges: idle shards report a small age once woken; a shard held
// inside one pass reports the time it has been held, the others stay young.
func TestShardLoopAges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		la, lb := link.Pipe(addrA, addrB)
		defer lb.Close()
		n := newNode(t, la, 3)
		defer n.e.Close()

		time.Sleep(time.Minute) // idle for a minute
		n.e.ShardLoopAges()     // wakes them
		synctest.Wait()
		for i, a := range n.e.ShardLoopAges() {
			if a != 0 {
				t.Errorf("idle shard %d: age %v after a wake-up, want 0", i, a)
			}
		}

		release := make(chan struct{})
		n.e.shards[1].cmds <- func() { <-release } // shard 1 is stuck in this pass
		const held = 7 * time.Second
		for range 7 {
			time.Sleep(held / 7)
			n.e.ShardLoopAges()
			synctest.Wait()
		}
		ages := n.e.ShardLoopAges()
		if ages[1] != held {
			t.Errorf("held shard: age %v, want %v", ages[1], held)
		}
		if ages[0] > held/7 || ages[2] > held/7 {
			t.Errorf("free shards: ages %v, %v; want at most the polling period %v", ages[0], ages[2], held/7)
		}
		close(release)
		synctest.Wait()
		if a := n.e.ShardLoopAges()[1]; a != 0 {
			t.Errorf("released shard: age %v, want 0", a)
		}
	})
}
