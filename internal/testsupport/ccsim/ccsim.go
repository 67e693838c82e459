// Package ccsim runs goroce RC flows through a simulated bottleneck in
// virtual time: N sender devices, each with one RC QP streaming RDMA
// WRITEs, into one receiver device behind a switch port whose egress queue
// has a rate, a buffer and ECN marking (internal/testsupport/bottleneck). It
// samples the queue depth and each flow's completed bytes over time, for
// the congestion-control acceptance tests and the plots in docs/.
//
// Run must be called inside a testing/synctest bubble: the switch and the
// engines' timers then run on virtual time, and a 100 ms run costs only the
// CPU of its packets.
package ccsim

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/testsupport/bottleneck"
	"github.com/goroce/goroce/roce"
)

// Config is one scenario.
type Config struct {
	Flows    int                // senders, one RC QP each
	LinkRate uint64             // bit/s of every port and NIC
	Delay    time.Duration      // propagation delay of each cable
	Buffer   int                // bytes of the bottleneck egress queue (tail drop)
	Mark     bottleneck.Marking // ECN marking of the bottleneck queue
	MTU      roce.MTU           // path MTU
	MsgSize  int                // bytes per RDMA WRITE
	Depth    int                // WRITEs each flow keeps outstanding
	Stagger  time.Duration      // flow i starts at i·Stagger
	Duration time.Duration      // how long the run lasts, from the first flow's start
	Sample   time.Duration      // sampling period
	Seed     uint64             // RED's draws
	// CC is every device's congestion control; its LineRate is taken as
	// LinkRate when zero. Enabled false runs without it.
	CC dcqcn.Config
}

// Scenario is the acceptance scenario for n flows: 40 Gb/s ports with 1 µs
// cables, path MTU 2048, a 1 MiB bottleneck buffer (a shallow-buffer
// switch port) marking from 5 KB to 150 KB (RED, PMax 20%), each flow
// keeping 16 WRITEs of 64 KB outstanding, DCQCN with the ConnectX defaults
// when cc, its pacing bucket 2 µs deep (virtual time has no timer slack).
// Without congestion control each flow keeps its whole window queued: the
// 128 PSNs an RC QP may have unacknowledged, 256 KB at MTU 2048.
func Scenario(n int, cc bool) Config {
	c := Config{
		Flows: n, LinkRate: 40_000_000_000, Delay: time.Microsecond,
		Buffer: 1 << 20, Mark: bottleneck.Marking{MinBytes: 5_000, MaxBytes: 150_000, PMax: 0.2},
		MTU: roce.MTU2048, MsgSize: 64 << 10, Depth: 16,
		Duration: 20 * time.Millisecond, Sample: 50 * time.Microsecond, Seed: 1,
	}
	if cc {
		c.CC = dcqcn.DefaultConfig()
		c.CC.PacingBurst = 2 * time.Microsecond
	}
	return c
}

// Sample is the state at one instant.
type Sample struct {
	At    time.Duration // since the start
	Queue int           // bottleneck queue depth, bytes
	Done  []uint64      // bytes of WRITEs completed per flow, cumulative
	Wire  []uint64      // bytes each flow got through the bottleneck, cumulative (retransmissions included)
}

// Result is what a run measured.
type Result struct {
	Config   Config
	Samples  []Sample
	Egress   bottleneck.Stats // the bottleneck queue's counters
	Sent     []roce.Stats     // per sender device, at the end
	Receiver roce.Stats
	Errors   []error // per flow: the first failed completion, if any
}

var (
	recvAddr = netip.MustParseAddr("10.0.0.100")
)

func senderAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 1, byte(1 + i)}) }

// sleepUntil sleeps until t and reports whether stop closed first.
func sleepUntil(t time.Time, stop <-chan struct{}) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return false
	case <-stop:
		return true
	}
}

// Run runs cfg and returns the samples. Call it inside a synctest bubble.
func Run(cfg Config) (*Result, error) {
	sw := bottleneck.New(cfg.Seed)
	port := bottleneck.PortConfig{Rate: cfg.LinkRate, Delay: cfg.Delay, Uplink: cfg.LinkRate, UplinkDelay: cfg.Delay}
	rport := port
	rport.Buffer, rport.Mark = cfg.Buffer, cfg.Mark
	rl, err := sw.Attach(netip.AddrPortFrom(recvAddr, roce.RoCEv2Port), rport)
	if err != nil {
		return nil, err
	}
	cc := cfg.CC
	if cc.Enabled && cc.LineRate == 0 {
		cc.LineRate = cfg.LinkRate
	}
	opts := []roce.Option{roce.WithMTU(cfg.MTU), roce.WithCongestionControl(cc)}
	rdev, err := roce.OpenLink(rl, opts...)
	if err != nil {
		return nil, err
	}
	defer rdev.Close()
	flows := make([]*Flow, cfg.Flows)
	for i := range flows {
		l, err := sw.Attach(netip.AddrPortFrom(senderAddr(i), roce.RoCEv2Port), port)
		if err != nil {
			return nil, err
		}
		dev, err := roce.OpenLink(l, opts...)
		if err != nil {
			return nil, err
		}
		defer dev.Close()
		if flows[i], err = Connect(dev, rdev, cfg.MTU, cfg.MsgSize, cfg.Depth, 14); err != nil {
			return nil, fmt.Errorf("flow %d: %w", i, err)
		}
		defer flows[i].Close()
	}
	res := &Result{Config: cfg}
	start := time.Now()
	stop := make(chan struct{})
	done := make(chan struct{}, len(flows))
	for i, f := range flows {
		go func() {
			if !sleepUntil(start.Add(time.Duration(i)*cfg.Stagger), stop) {
				f.Run(stop)
			}
			done <- struct{}{}
		}()
	}
	for t := time.Duration(0); t <= cfg.Duration; t += cfg.Sample {
		time.Sleep(start.Add(t).Sub(time.Now()))
		s := Sample{At: time.Since(start), Queue: rl.QueueBytes(), Done: make([]uint64, len(flows)), Wire: make([]uint64, len(flows))}
		for i, f := range flows {
			s.Done[i] = f.Done()
			s.Wire[i] = rl.DeliveredFromAddr(senderAddr(i))
		}
		res.Samples = append(res.Samples, s)
	}
	close(stop)
	for range flows {
		<-done
	}
	res.Egress = rl.Egress()
	for _, f := range flows {
		res.Sent = append(res.Sent, f.dev.Stats())
		res.Errors = append(res.Errors, f.err)
	}
	res.Receiver = rdev.Stats()
	return res, nil
}
