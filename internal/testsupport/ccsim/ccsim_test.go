package ccsim

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// -ccsim.csv DIR writes each scenario's samples (queue depth and per-flow
// throughput over time) to DIR/NAME.csv; scripts/cc-figures.sh plots them.
var csvDir = flag.String("ccsim.csv", "", "write each scenario's samples to this directory as CSV")

// scenario is one acceptance run: n flows, congestion control on or off,
// flows starting stagger apart, for dur.
type scenario struct {
	name    string
	n       int
	cc      bool
	stagger time.Duration
	dur     time.Duration
}

func (sc scenario) run(t *testing.T) *Result {
	t.Helper()
	cfg := Scenario(sc.n, sc.cc)
	cfg.Stagger, cfg.Duration = sc.stagger, sc.dur
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res.Errors {
		if e != nil {
			t.Errorf("flow %d: %v", i, e)
		}
	}
	if *csvDir != "" {
		f, err := os.Create(filepath.Join(*csvDir, sc.name+".csv"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := res.WriteCSV(f, 250*time.Microsecond); err != nil {
			t.Fatal(err)
		}
	}
	return res
}

// convergeBound is how soon after the last flow starts the flows must share
// fairly (8 flows took 15-29 ms in 30 runs; the engines' goroutines make each run
// differ), and queueBound what the queue may reach from then on: twice the
// top of the marking range.
const convergeBound = 50 * time.Millisecond

func queueBound(c Config) int { return c.Mark.MaxBytes * 2 }

// TestCongestionControlOn: with DCQCN, 2 flows started together and 8
// flows joining 2 ms apart converge to a fair share (Jain's index ≥ 0.95
// over every 2 ms window) within convergeBound of the last start; from
// then on the queue stays below queueBound, goodput uses at least 90% of
// the link, and nothing is dropped.
func TestCongestionControlOn(t *testing.T) {
	for _, sc := range []scenario{
		{"cc-on-2flows", 2, true, 0, 20 * time.Millisecond},
		{"cc-on-8flows", 8, true, 2 * time.Millisecond, 80 * time.Millisecond},
	} {
		t.Run(sc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				res := sc.run(t)
				last := time.Duration(sc.n-1) * sc.stagger
				conv, ok := res.Converged(last, 2*time.Millisecond, 500*time.Microsecond, 0.95)
				if !ok || conv-last > convergeBound {
					t.Fatalf("no convergence to Jain ≥ 0.95 within %v of the last start (%v, %v)", convergeBound, conv-last, ok)
				}
				from, to := conv, sc.dur
				rates := res.Rates(from, to)
				util, q := res.Utilisation(from, to), res.MaxQueue(from, to)
				bound := queueBound(res.Config)
				t.Logf("converged %v after the last start; then Jain %.3f, utilisation %.3f, queue max %d B (bound %d), rates %.2f Gb/s; egress %+v",
					conv-last, Jain(rates), util, q, bound, scale(rates, 1e-9), res.Egress)
				if util < 0.90 {
					t.Errorf("utilisation %.3f, want ≥ 0.90", util)
				}
				if q > bound {
					t.Errorf("queue reached %d bytes after convergence, want ≤ %d", q, bound)
				}
				if res.Egress.Dropped != 0 || res.Egress.Marked == 0 {
					t.Errorf("egress %+v: want marks and no drops", res.Egress)
				}
				var cnps, cuts uint64
				for _, s := range res.Sent {
					cnps += s.CNPsRcvd
					cuts += s.RateCuts
				}
				// A CNP or two may still be on the wire when the run stops.
				if r := res.Receiver; r.CNPsSent == 0 || r.ECNMarked < r.CNPsSent || cnps > r.CNPsSent || cnps+uint64(sc.n) < r.CNPsSent || cuts == 0 || cuts > cnps {
					t.Errorf("receiver: %d CE, %d CNPs sent; senders: %d CNPs received, %d cuts", r.ECNMarked, r.CNPsSent, cnps, cuts)
				}
			})
		})
	}
}

// TestCongestionControlOff: without congestion control every sender keeps
// its whole window queued at the bottleneck: 2 flows hold the queue above
// queueBound, and 8 flows (2 MiB of windows) fill the
// 1 MiB buffer and tail-drop. Nothing is marked (nothing is ECN-capable)
// and no CNP is sent.
//
// Once the 8 flows drop, how many keep sending is up to which packets the
// tail drop took: a flow whose go-back-N retransmission is dropped again gets
// no second NAK and waits for its local ACK timeout (67 ms, longer than the
// run), and which flows that hits depends on the order of the engines'
// goroutines within an instant of virtual time: in 60 runs, 3 to 5 of the 8
// kept sending, and a CI run beside other load once left 1, holding the queue
// at its one window (180 KB). So the standing queue is asserted only for the
// runs without drops.
func TestCongestionControlOff(t *testing.T) {
	for _, sc := range []scenario{
		{"cc-off-2flows", 2, false, 0, 20 * time.Millisecond},
		{"cc-off-8flows", 8, false, 2 * time.Millisecond, 50 * time.Millisecond},
	} {
		t.Run(sc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				res := sc.run(t)
				rates := res.Rates(time.Duration(sc.n)*sc.stagger, sc.dur)
				t.Logf("Jain %.3f, utilisation %.3f, queue max %d B, rates %.2f Gb/s; egress %+v",
					Jain(rates), res.Utilisation(0, sc.dur), res.Egress.MaxBytes, scale(rates, 1e-9), res.Egress)
				last := time.Duration(sc.n-1) * sc.stagger
				if q := res.MaxQueue(last+5*time.Millisecond, sc.dur); res.Egress.Dropped == 0 && q <= queueBound(res.Config) {
					t.Errorf("queue at most %d bytes once every flow runs, want more than %d", q, queueBound(res.Config))
				}
				if sc.n == 2 && res.Egress.Dropped != 0 {
					t.Errorf("egress %+v: 2 windows fit the %d-byte buffer, want no drops", res.Egress, res.Config.Buffer)
				}
				if sc.n == 8 && (res.Egress.MaxBytes < res.Config.Buffer*9/10 || res.Egress.Dropped == 0) {
					t.Errorf("egress %+v: want the %d-byte buffer full and drops", res.Egress, res.Config.Buffer)
				}
				if res.Egress.Marked != 0 || res.Receiver.CNPsSent != 0 {
					t.Errorf("%d marked, %d CNPs: want none", res.Egress.Marked, res.Receiver.CNPsSent)
				}
			})
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

func TestJain(t *testing.T) {
	for _, tt := range []struct {
		xs   []float64
		want float64
	}{{[]float64{1, 1, 1, 1}, 1}, {[]float64{1, 0, 0, 0}, 0.25}, {[]float64{3, 1}, 0.8}, {[]float64{0, 0}, 0}} {
		if got := Jain(tt.xs); fmt.Sprintf("%.6f", got) != fmt.Sprintf("%.6f", tt.want) {
			t.Errorf("Jain(%v) = %v, want %v", tt.xs, got, tt.want)
		}
	}
}
