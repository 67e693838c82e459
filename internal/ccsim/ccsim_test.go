package ccsim

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/roce"
	"github.com/goroce/goroce/transport/link/bottleneck"
)

func baseConfig(flows int) Config {
	return Config{
		Flows:    flows,
		LinkRate: 1_000_000_000,
		Delay:    2 * time.Microsecond,
		Buffer:   256 * 1024,
		Mark:     bottleneck.Marking{MinBytes: 20_000, MaxBytes: 200_000, PMax: 0.1},
		MTU:      roce.MTU4096,
		MsgSize:  64 * 1024,
		Depth:    16,
		Duration: 50 * time.Millisecond,
		Sample:   500 * time.Microsecond,
		Seed:     1,
	}
}

func TestCCOffQueueGrowsAndDrops(t *testing.T) {
	for _, n := range []int{2, 8} {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			res, err := Run(baseConfig(n))
			if err != nil {
				t.Fatal(err)
			}
			rates := res.Rates(10*time.Millisecond, 50*time.Millisecond)
			t.Logf("%d flows: rates %.0f Mb/s, Jain %.3f, util %.3f, max queue %d, egress %+v, virtual %v",
				n, scale(rates, 1e-6), Jain(rates), res.Utilisation(10*time.Millisecond, 50*time.Millisecond),
				res.MaxQueue(0, 50*time.Millisecond), res.Egress, time.Since(start))
			for i, e := range res.Errors {
				if e != nil {
					t.Errorf("flow %d: %v", i, e)
				}
			}
			// Without congestion control the senders fill the buffer and
			// the queue tail-drops.
			if q := res.MaxQueue(0, 50*time.Millisecond); q < res.Config.Buffer*9/10 {
				t.Errorf("queue peaked at %d bytes, want the buffer (%d) nearly full", q, res.Config.Buffer)
			}
			if res.Egress.Dropped == 0 || res.Egress.Marked != 0 {
				t.Errorf("egress %+v: want drops and no marks (nothing is ECN-capable)", res.Egress)
			}
		})
	}
}

func scale(xs []float64, k float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x * k
	}
	return out
}
