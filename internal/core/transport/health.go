package transport

import "time"

// ShardLoopAges returns, for each shard, how long ago it finished its last
// pass (one wake-up's worth of commands, packets and timers), and wakes every
// shard so that an idle one finishes an empty pass at once. Called
// periodically, an idle or healthy shard reports at most the period; a shard
// stuck in one pass reports an age that keeps growing. roced fails /healthz
// when the oldest age passes a deadline.
func (e *Engine) ShardLoopAges() []time.Duration {
	now := e.cfg.Clock.Now().UnixNano()
	ages := make([]time.Duration, len(e.shards))
	for i, s := range e.shards {
		ages[i] = max(time.Duration(now-s.passDone.Load()), 0)
		s.wake()
	}
	return ages
}
