package ccsim

import "time"

// Window returns the index range of the samples taken in [from, to].
func (r *Result) window(from, to time.Duration) (int, int) {
	i, j := -1, -1
	for k, s := range r.Samples {
		if i < 0 && s.At >= from {
			i = k
		}
		if s.At <= to {
			j = k
		}
	}
	return i, j
}

// Rates returns each flow's goodput in bit/s over [from, to] (completed
// WRITE bytes, so retransmissions do not count; it moves in steps of one
// message).
func (r *Result) Rates(from, to time.Duration) []float64 {
	return r.rates(from, to, func(s *Sample) []uint64 { return s.Done })
}

// WireRates returns each flow's throughput through the bottleneck in bit/s
// over [from, to] (every packet, retransmissions included): finer grained
// than Rates, for fairness over short windows.
func (r *Result) WireRates(from, to time.Duration) []float64 {
	return r.rates(from, to, func(s *Sample) []uint64 { return s.Wire })
}

func (r *Result) rates(from, to time.Duration, bytes func(*Sample) []uint64) []float64 {
	i, j := r.window(from, to)
	out := make([]float64, r.Config.Flows)
	if i < 0 || j <= i {
		return out
	}
	a, b := &r.Samples[i], &r.Samples[j]
	secs := (b.At - a.At).Seconds()
	for f := range out {
		out[f] = float64(bytes(b)[f]-bytes(a)[f]) * 8 / secs
	}
	return out
}

// Converged returns the first instant t, on a grid of step from start,
// after which Jain's index of the flows' WireRates over every window of
// width win that begins at t or later (and ends by the last sample) is at
// least jain; ok is false when there is none.
func (r *Result) Converged(start, win, step time.Duration, jain float64) (time.Duration, bool) {
	end := r.Samples[len(r.Samples)-1].At
	var t time.Duration
	found := false
	for w := start; w+win <= end; w += step {
		if Jain(r.WireRates(w, w+win)) < jain {
			found = false
			continue
		}
		if !found {
			t, found = w, true
		}
	}
	return t, found
}

// Jain is Jain's fairness index of xs: (Σx)² / (n·Σx²), 1 when all are
// equal, 1/n when one takes everything.
func Jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// Utilisation is the flows' total goodput over [from, to] as a share of the
// bottleneck rate. Headers are not counted, so 100% is out of reach: a
// WRITE of MTU-sized packets carries about MTU/(MTU+74) of the wire bytes
// as payload (BTH, RETH once, ICRC, IP, UDP, Ethernet).
func (r *Result) Utilisation(from, to time.Duration) float64 {
	var sum float64
	for _, x := range r.Rates(from, to) {
		sum += x
	}
	return sum / float64(r.Config.LinkRate)
}

// MaxQueue is the deepest bottleneck queue sampled in [from, to], bytes.
func (r *Result) MaxQueue(from, to time.Duration) int {
	i, j := r.window(from, to)
	m := 0
	for k := i; k >= 0 && k <= j; k++ {
		m = max(m, r.Samples[k].Queue)
	}
	return m
}
