package roce

import "time"

// ShardLoopAges returns, for each engine shard, how long ago it finished its
// last pass of work, and wakes every shard so an idle one finishes a pass at
// once: polled every period P, a healthy shard reports at most P, a wedged one
// a growing age. It is for health checks (roced's /healthz); see
// transport.Engine.ShardLoopAges. A closed device has no shards: nil.
func (d *Device) ShardLoopAges() []time.Duration {
	if d.closed.Load() {
		return nil
	}
	return d.eng.ShardLoopAges()
}
