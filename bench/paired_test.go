//go:build linux

package bench

import (
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/roce"
)

// BenchmarkAttachedVsOwned measures an attached device against an owned one in
// alternating blocks of the same process, both pairs open at once: each round
// runs a block on one pair, then on the other (the order swapped every round),
// and the metrics are the medians of the rounds. Drift, another process's burst
// and the scheduler's moods then hit both variants of a round alike, where
// separate benchmark runs (BenchmarkRCPingPong/owned against /attached) move by
// more than the difference they are meant to show. With both pairs open, roced's
// own block-0 devices and its attach server run under both variants: what is left
// is each device's own data path (the steered socket and the block filter).
//
//	pingpong          64 B SEND round trips, busy-polling, run to completion
//	                  (BenchmarkRCPingPong): µs per round trip
//	pingpong-control  the same with both pairs owned (roced still in the
//	                  process): the difference the method reads where there is none
//	write-1MiB        RDMA WRITE of 1 MiB at BenchmarkRCWrite's window: MB/s
//	send-4KiB         SEND of 4 KiB at BenchmarkRCSend's window: MB/s
//
// Each variant reports its median, and the pair the median of the per-round
// differences (attached - owned, µs per round trip) or ratios (attached / owned
// throughput), with the middle half of the rounds around it, and the CPU (user +
// system) per data packet of each variant's blocks.
func BenchmarkAttachedVsOwned(b *testing.B) {
	pingpong := func(control bool) func(b *testing.B) {
		return func(b *testing.B) { pairedPingPong(b, control) }
	}
	b.Run("pingpong", pingpong(false))
	b.Run("pingpong-control", pingpong(true))
	for _, c := range []struct {
		name string
		op   roce.WROpcode
		size int
	}{
		{"write-1MiB", roce.WRRDMAWrite, 1 << 20},
		{"send-4KiB", roce.WRSend, 4096},
	} {
		b.Run(c.name, func(b *testing.B) {
			depth, rq := streamQueues(c.op, c.size)
			block := max(1, (128<<20)/c.size) // 128 MiB a block
			warm := block / 4
			var ss [2]*stream
			var done [2]chan error
			for i := range ss {
				attached = i == 1
				x, y := rcPair(b, c.size, depth, max(rq, 1))
				attached = false
				ss[i] = newStream(x, y, c.op, c.size)
				if c.op == roce.WRSend {
					done[i] = make(chan error, 1)
					// Every message either variant sends: the warm-up and the rounds.
					rounds, blk := pairedPlan(b.N, block)
					go receive(y, c.size, rq, warm+rounds*blk, done[i])
				}
			}
			run := func(i, n int) error { return ss[i].run(n) }
			pr := alternate(b, block, warm, run)
			for _, d := range done {
				if d != nil {
					if err := <-d; err != nil {
						b.Fatal(err)
					}
				}
			}
			pkts := float64((c.size + 4095) / 4096) // data packets per message at MTU 4096
			mbps := func(d time.Duration) float64 { return float64(c.size) / d.Seconds() / 1e6 }
			pr.report(b, pkts, mbps, "MB/s", false)
		})
	}
}

// pairedPingPong is the ping-pong of BenchmarkAttachedVsOwned; control makes
// both pairs owned, which shows what the method reads as a difference where
// there is none.
func pairedPingPong(b *testing.B, control bool) {
	devOpts, spinFor = []roce.Option{roce.WithRunToCompletion(true)}, pollSpin
	defer func() { devOpts, spinFor = nil, 0 }()
	if control {
		// roced and its devices run in the process as in the comparison.
		shareBoth(b, sharedPort(b))
	}
	var ps [2]*pinger
	for i := range ps {
		attached = i == 1 && !control
		cli, srv := rcPair(b, pingSize, pingDepth, pingDepth)
		attached = false
		p, err := startPinger(cli, srv, false)
		if err != nil {
			b.Fatal(err)
		}
		ps[i] = p
		b.Cleanup(func() { p.close() })
	}
	run := func(i, n int) error {
		for range n {
			if err := ps[i].roundTrip(); err != nil {
				return err
			}
		}
		return nil
	}
	pr := alternate(b, 2000, 100, run)
	pr.report(b, 2, func(d time.Duration) float64 { return us(d) }, "µs/rt", true)
}

// pairedPlan is how alternate divides n operations a variant: rounds of blk.
func pairedPlan(n, block int) (rounds, blk int) { return max(1, n/block), min(block, n) }

// paired is what alternate measured: per round and variant (0 owned, 1
// attached), the time and the CPU (user + system) of one operation.
type paired struct {
	per [2][]time.Duration
	cpu [2][]time.Duration
	ops int // operations a block
}

// alternate warms both variants with warm operations, then runs rounds of a
// block of operations on each, in alternating order. run(i, n) does n
// operations on variant i.
func alternate(b *testing.B, block, warm int, run func(i, n int) error) paired {
	for i := range 2 {
		if err := run(i, warm); err != nil {
			b.Fatalf("warm-up of %s: %v", variantName(i), err)
		}
	}
	rounds, block := pairedPlan(b.N, block)
	pr := paired{ops: block}
	b.ResetTimer()
	for r := range rounds {
		for k := range 2 {
			i := (r + k) % 2
			c0, t0 := cpuTime(), time.Now()
			if err := run(i, block); err != nil {
				b.Fatalf("round %d of %s: %v", r, variantName(i), err)
			}
			pr.per[i] = append(pr.per[i], time.Since(t0)/time.Duration(block))
			pr.cpu[i] = append(pr.cpu[i], (cpuTime()-c0)/time.Duration(block))
		}
	}
	b.StopTimer()
	return pr
}

func variantName(i int) string { return [2]string{"owned", "attached"}[i] }

// cpuTime is the process's CPU time, user and system, every thread.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// report adds the medians as metrics: value converts a time per operation into
// the unit; diff reports attached - owned (a latency), else attached / owned (a
// rate). pkts is the data packets of one operation.
func (pr paired) report(b *testing.B, pkts float64, value func(time.Duration) float64, unit string, diff bool) {
	var v [2][]float64
	for i := range 2 {
		for _, d := range pr.per[i] {
			v[i] = append(v[i], value(d))
		}
		b.ReportMetric(median(v[i]), variantName(i)+"-"+unit)
		var cpu []float64
		for _, d := range pr.cpu[i] {
			cpu = append(cpu, us(d)/pkts)
		}
		b.ReportMetric(median(cpu), variantName(i)+"-cpu-µs/pkt")
	}
	var rel []float64
	for r := range v[0] {
		if diff {
			rel = append(rel, v[1][r]-v[0][r])
		} else {
			rel = append(rel, v[1][r]/v[0][r])
		}
	}
	lo, mid, hi := quartiles(rel)
	name, format := "attached-ratio", "%.3f"
	if diff {
		name, format = "attached-minus-owned-"+unit, "%+.2f"
	}
	b.ReportMetric(mid, name)
	b.ReportMetric(float64(len(rel)), "rounds")
	b.Logf("%d rounds of %d operations: owned %.2f %s, attached %.2f %s; attached against owned "+format+" (middle half "+format+" to "+format+")",
		len(rel), pr.ops, median(v[0]), unit, median(v[1]), unit, mid, lo, hi)
}

// median of v (v is not changed).
func median(v []float64) float64 {
	_, m, _ := quartiles(v)
	return m
}

// quartiles returns the 25th, 50th and 75th percentiles of v, by the nearest
// rank, without changing v.
func quartiles(v []float64) (lo, mid, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	at := func(q float64) float64 { return s[int(q*float64(len(s)-1)+0.5)] }
	return at(0.25), at(0.5), at(0.75)
}
