package main

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// healthPoll is how often the health monitor wakes the engine shards. A shard
// that is idle or serving normally finishes a pass right after each wake-up,
// so its reported age stays below about this much.
const healthPoll = 250 * time.Millisecond

// shardAger is a device as the health monitor sees it (*roce.Device).
type shardAger interface {
	Addr() netip.Addr
	ShardLoopAges() []time.Duration
}

// health watches every device's engine shards: /healthz fails, with the reason,
// when a shard has not finished a pass of its loop within deadline (it is
// wedged: commands such as Modify, Query, Destroy and the /debug/qps snapshot
// would wait behind it), and roce_shard_loop_age_seconds exports the ages.
type health struct {
	devs     []shardAger
	deadline time.Duration

	// mu guards: ages.
	mu   sync.Mutex
	ages [][]time.Duration // per device, per shard, as of the last poll

	ageDesc *prometheus.Desc
}

func newHealth(devs []shardAger, deadline time.Duration) *health {
	h := &health{devs: devs, deadline: deadline,
		ageDesc: prometheus.NewDesc("roce_shard_loop_age_seconds",
			"How long ago each engine shard finished its last pass (woken every 0.25 s: larger values mean a wedged shard).",
			[]string{"address", "shard"}, nil)}
	h.poll()
	return h
}

// run polls until stop is closed.
func (h *health) run(stop <-chan struct{}) {
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			h.poll()
		case <-stop:
			return
		}
	}
}

// poll reads (and so wakes) every shard.
func (h *health) poll() {
	ages := make([][]time.Duration, len(h.devs))
	for i, d := range h.devs {
		ages[i] = d.ShardLoopAges()
	}
	h.mu.Lock()
	h.ages = ages
	h.mu.Unlock()
}

// check polls, and returns "" when every shard finished a pass within the
// deadline, else why not.
func (h *health) check() string {
	h.poll()
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, dev := range h.ages {
		for s, a := range dev {
			if a > h.deadline {
				return fmt.Sprintf("engine shard %d of %s has not finished a pass for %v (deadline %v)",
					s, h.devs[i].Addr(), a.Round(time.Millisecond), h.deadline)
			}
		}
	}
	return ""
}

// Describe implements prometheus.Collector.
func (h *health) Describe(ch chan<- *prometheus.Desc) { ch <- h.ageDesc }

// Collect implements prometheus.Collector.
func (h *health) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, dev := range h.ages {
		for s, a := range dev {
			ch <- prometheus.MustNewConstMetric(h.ageDesc, prometheus.GaugeValue, a.Seconds(), h.devs[i].Addr().String(), fmt.Sprint(s))
		}
	}
}
