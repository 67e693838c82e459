package dcqcn

import (
	"math"
	"time"
)

// Pacer is a token bucket that spaces one QP's packets to a rate. It never
// sleeps and starts no goroutine: the caller asks Ready before each packet,
// reports what it sent with Sent, and when Ready says no, arms its own timer
// for the time Ready returns. A packet may overdraw the bucket (a packet
// larger than the tokens left is still sent once any are left), and the
// debt delays the next one, so the long-run rate is exact for any packet
// size. The zero Pacer is unpaced.
type Pacer struct {
	rate   uint64 // bit/s; 0: unpaced
	burst  int64  // bucket depth, bits·1e9
	credit int64  // bits·1e9 (bits times nanoseconds per second); may be negative
	last   time.Time
}

// scale is the credit unit: a rate in bit/s times a duration in ns.
const scale = int64(time.Second)

// SetRate paces to rate bit/s from now on, with a bucket of burst bytes
// (at least one byte). A rate of 0 removes pacing. Credit already earned is
// kept up to the new burst; a debt is kept and paid at the new rate. An
// unpaced Pacer starts with a full bucket: it had sent nothing it owed.
func (p *Pacer) SetRate(now time.Time, rate uint64, burst int) {
	if rate == 0 {
		*p = Pacer{}
		return
	}
	if p.rate != 0 {
		p.refill(now)
	}
	wasPaced := p.rate != 0
	p.rate = rate
	p.burst = int64(max(burst, 1)) * 8 * scale
	if !wasPaced {
		p.last, p.credit = now, p.burst
	}
	p.credit = min(p.credit, p.burst)
}

// Rate is the pacing rate in bit/s, 0 when unpaced.
func (p *Pacer) Rate() uint64 { return p.rate }

// Ready reports whether a packet may be sent at now; if not, it returns the
// earliest time one may.
func (p *Pacer) Ready(now time.Time) (bool, time.Time) {
	if p.rate == 0 {
		return true, now
	}
	p.refill(now)
	if p.credit > 0 {
		return true, now
	}
	// Credit grows by rate per ns; the first ns with credit > 0.
	wait := (-p.credit)/int64(p.rate) + 1
	return false, p.last.Add(time.Duration(wait))
}

// Credit is how many bytes may be sent at now, as a bound for a batch: a
// sender that sends packets while it has credit left (the last one may
// overdraw) sends at most Credit plus one packet. 0 means none may go
// before next. Unpaced, it is unbounded (math.MaxInt).
func (p *Pacer) Credit(now time.Time) (int, time.Time) {
	if ok, next := p.Ready(now); !ok {
		return 0, next
	}
	if p.rate == 0 {
		return math.MaxInt, now
	}
	bits := (p.credit + scale - 1) / scale
	return int((bits + 7) / 8), now
}

// Sent takes n bytes sent at the last Ready from the bucket.
func (p *Pacer) Sent(n int) {
	if p.rate == 0 {
		return
	}
	p.credit -= int64(n) * 8 * scale
}

func (p *Pacer) refill(now time.Time) {
	d := now.Sub(p.last)
	if d <= 0 {
		return
	}
	p.last = now
	// Cap the interval before multiplying: past the time to fill the
	// bucket from empty, more time adds nothing, and the product could
	// overflow.
	if full := (p.burst-min(p.credit, 0))/int64(p.rate) + 1; int64(d) > full {
		d = time.Duration(full)
	}
	p.credit = min(p.credit+int64(d)*int64(p.rate), p.burst)
}
