package transport

import "time"

// ShardLoopAges returns how long ago each shard finished its last pass and
// wakes every shard, so that an idle one passes at once: polled every period,
// a healthy shard reports at most the period, a stuck one a growing age
// (roced's /healthz).
func (e *Engine) ShardLoopAges() []time.Duration {
	now := e.cfg.Clock.Now().UnixNano()
	ages := make([]time.Duration, len(e.shards))
	for i, s := range e.shards {
		ages[i] = max(time.Duration(now-s.passDone.Load()), 0)
		s.wake()
	}
	return ages
}
