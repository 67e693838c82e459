package roce

import "time"

// ShardLoopAges returns how long ago each engine shard finished a pass, waking every
// shard so an idle one passes at once: polled every period P, a healthy shard reports
// at most P, a wedged one a growing age (roced's /healthz). nil once closed.
func (d *Device) ShardLoopAges() []time.Duration {
	if d.closed.Load() {
		return nil
	}
	return d.eng.ShardLoopAges()
}
