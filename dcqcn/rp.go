package dcqcn

import (
	"math/bits"
	"time"
)

// α is kept in units of 2^-20 (alphaOne is 1): the interface is the
// firmware's 10-bit fixed point, but truncating every update to 10 bits
// loses up to 1/1024 per dce_tcp_rtt, which at the default g = 1019 (a
// decay of 5/1024 per period) drives α to 0 whenever CNPs are more than a
// few periods apart, and then cuts do nothing. Ten more fraction bits keep
// the moving average what the formula says.
const (
	alphaFrac = 10 // fraction bits below the firmware's 1/1024
	alphaOne  = 1 << (10 + alphaFrac)
	alphaMax  = alphaOne - 1
)

// Stage is the rate increase stage of a reaction point.
type Stage uint8

// Stages, in the order a QP goes through them after a cut.
const (
	Unlimited    Stage = iota // no rate limiter: no CNP since the rate last recovered
	FastRecovery              // Rc moves halfway to Rt per event, Rt fixed
	AdditiveIncr              // Rt += rpg_ai_rate per event
	HyperIncr                 // Rt += i·rpg_hai_rate per event, i = min(T, BC) - rpg_threshold
)

var stageNames = [...]string{"unlimited", "fast_recovery", "additive_increase", "hyper_increase"}

// String returns the stage's name.
func (s Stage) String() string {
	if int(s) < len(stageNames) {
		return stageNames[s]
	}
	return "unknown"
}

type incKind uint8

const (
	incNone incKind = iota
	incTimer
	incBytes
)

// RP is the DCQCN reaction point of one QP: a pure state machine that takes
// the time, the bytes the QP sent and the CNPs it received, and gives the
// rate the QP may send at. It starts and returns Unlimited (no pacing): the
// first CNP allocates a rate limiter at RateToSetOnFirstCNP (the line rate)
// and cuts it; timer and byte counter events raise it again until it
// reaches RPGMaxRate (the line rate), which releases the limiter.
//
// Time only moves forward: every method takes now and first runs the
// events due by then (α updates, a pending cut, timer increases). α is
// updated lazily from its period grid, so nothing needs a wake-up every
// dce_tcp_rtt; NextEvent says when a cut or timer increase is due, for the
// caller's timer. The zero RP is not usable; call Init.
type RP struct {
	p        *Params
	maxRate  uint64 // bit/s: rpg_max_rate or the line rate
	minRate  uint64 // bit/s
	limited  bool
	rc, rt   uint64 // current and target rate, bit/s
	alpha    uint32 // 2^-20 (alphaOne is 1)
	cnpAlpha bool   // a CNP arrived in the current α period
	cnpCut   bool   // a CNP arrived since the last cut: cut at cutAt
	start    time.Time
	alphaAt  time.Time // end of the current α period
	cutAt    time.Time // start of the next monitor period (valid with cnpCut)
	incAt    time.Time // next timer increase event
	timeCnt  uint32    // T: timer events since the last cut
	byteCnt  uint32    // BC: byte counter events since the last cut
	bytes    uint64    // bytes sent since the last byte event
	last     incKind   // the last increase event since the last cut
	lastCut  time.Time
	cuts     uint64
}

// Init readies r for a QP on a port of lineRate bit/s. p must have passed
// Validate and must not change while r uses it.
func (r *RP) Init(p *Params, lineRate uint64) {
	*r = RP{p: p, maxRate: lineRate, minRate: mbps(p.RPGMinRate)}
	if p.RPGMaxRate != 0 {
		r.maxRate = min(mbps(p.RPGMaxRate), lineRate)
	}
	if r.minRate > r.maxRate {
		r.minRate = r.maxRate
	}
}

// Limited reports whether a rate limiter is allocated: a CNP arrived and the
// rate has not yet recovered to the maximum.
func (r *RP) Limited() bool { return r.limited }

// Rate is the current rate in bit/s: the rate limiter's, or the maximum rate
// when Unlimited.
func (r *RP) Rate() uint64 {
	if !r.limited {
		return r.maxRate
	}
	return r.rc
}

// TargetRate is the rate in bit/s that recovery heads for (the maximum when
// Unlimited).
func (r *RP) TargetRate() uint64 {
	if !r.limited {
		return r.maxRate
	}
	return r.rt
}

// Alpha is α in units of 1/1024 (as initial_alpha_value), as of the last
// call that took the time.
func (r *RP) Alpha() uint32 { return r.alpha >> alphaFrac }

// Cuts counts the rate cuts so far.
func (r *RP) Cuts() uint64 { return r.cuts }

// Stage is the current increase stage.
func (r *RP) Stage() Stage {
	if !r.limited {
		return Unlimited
	}
	return r.stage()
}

func (r *RP) stage() Stage {
	f := r.p.RPGThreshold
	switch {
	case max(r.timeCnt, r.byteCnt) <= f:
		return FastRecovery
	case min(r.timeCnt, r.byteCnt) > f:
		return HyperIncr
	}
	return AdditiveIncr
}

// NextEvent is when the next cut or timer increase is due, or the zero time
// when none is (Unlimited).
func (r *RP) NextEvent() time.Time {
	if !r.limited {
		return time.Time{}
	}
	if r.cnpCut && r.cutAt.Before(r.incAt) {
		return r.cutAt
	}
	return r.incAt
}

// OnCNP takes a CNP that arrived for the QP at now.
func (r *RP) OnCNP(now time.Time) {
	if !r.limited {
		r.activate(now)
		r.cut(now)
		return
	}
	r.Advance(now)
	if !r.limited { // recovered to the maximum during Advance
		r.activate(now)
		r.cut(now)
		return
	}
	r.cnpAlpha = true
	if !r.cnpCut {
		period := us(r.p.RateReduceMonitorPeriod)
		r.cnpCut = true
		r.cutAt = r.grid(now, period)
		if next := r.lastCut.Add(period); r.cutAt.Before(next) {
			r.cutAt = next // one cut per monitor period
		}
	}
	r.Advance(now) // a cut due at now happens now
}

// OnSent counts n bytes the QP sent at now toward the byte counter.
func (r *RP) OnSent(now time.Time, n int) {
	r.Advance(now)
	if !r.limited || r.p.RPGByteReset == 0 || n <= 0 {
		return
	}
	r.bytes += uint64(n)
	for r.limited && r.bytes >= uint64(r.p.RPGByteReset) {
		r.bytes -= uint64(r.p.RPGByteReset)
		r.byteCnt++
		r.increase(incBytes)
	}
}

// Advance runs every event due by now, in time order: α updates, the
// pending cut, timer increases.
func (r *RP) Advance(now time.Time) {
	for r.limited {
		at := r.incAt
		isCut := r.cnpCut && !r.cutAt.After(r.incAt)
		if isCut {
			at = r.cutAt
		}
		if at.After(now) {
			break
		}
		r.updateAlpha(at)
		if isCut {
			r.cut(at)
			continue
		}
		r.incAt = r.incAt.Add(us(r.p.RPGTimeReset))
		r.timeCnt++
		r.increase(incTimer)
	}
	if r.limited {
		r.updateAlpha(now)
	}
}

// activate allocates the rate limiter at now (the first CNP).
func (r *RP) activate(now time.Time) {
	rate := r.maxRate
	if r.p.RateToSetOnFirstCNP != 0 {
		rate = min(max(mbps(r.p.RateToSetOnFirstCNP), r.minRate), r.maxRate)
	}
	r.limited = true
	r.rc, r.rt = rate, rate
	r.alpha = r.p.InitialAlphaValue << alphaFrac
	r.cnpAlpha, r.cnpCut = false, false
	r.start = now
	r.alphaAt = now.Add(us(r.p.DCETCPRTT))
	r.last = incNone
}

// grid returns the first boundary of the period grid anchored at r.start
// that is at or after t.
func (r *RP) grid(t time.Time, period time.Duration) time.Time {
	d := t.Sub(r.start)
	k := (d + period - 1) / period
	return r.start.Add(k * period)
}

// updateAlpha runs the α updates of every α period that ended by t.
func (r *RP) updateAlpha(t time.Time) {
	period := us(r.p.DCETCPRTT)
	g := r.p.DCETCPG
	for !r.alphaAt.After(t) {
		if r.cnpAlpha {
			r.alpha = min(uint32(uint64(r.alpha)*uint64(g)>>10)+(1024-g)<<alphaFrac, alphaMax)
			r.cnpAlpha = false
		} else if r.alpha == 0 {
			// Nothing changes until a CNP: skip to the last boundary.
			k := t.Sub(r.alphaAt) / period
			r.alphaAt = r.alphaAt.Add((k + 1) * period)
			return
		} else {
			r.alpha = uint32(uint64(r.alpha) * uint64(g) >> 10)
		}
		r.alphaAt = r.alphaAt.Add(period)
	}
}

// cut is a rate decrease at now: Rc ← Rc·(1 - α/2^gd), bounded by
// rpg_min_dec_fac and rpg_min_rate; the increase counters restart.
func (r *RP) cut(now time.Time) {
	p := r.p
	if p.ClampTgtRate || r.last == incBytes || (r.last == incTimer && p.ClampTgtRateAfterTimeInc) {
		r.rt = r.rc
	}
	// α/2^gd with α in 2^-20 units is alpha/2^(gd+20-10).
	scale := uint64(1) << (p.RPGGD + alphaFrac)
	a := min(uint64(r.alpha), scale)
	hi, lo := bits.Mul64(r.rc, scale-a)
	rc, _ := bits.Div64(hi, lo, scale) // hi < scale: rc·(scale-a)/scale <= rc
	floor := r.rc / 100 * uint64(p.RPGMinDecFac)
	r.rc = max(rc, floor, r.minRate)
	r.cnpCut = false
	r.timeCnt, r.byteCnt, r.bytes = 0, 0, 0
	r.last = incNone
	r.lastCut = now
	r.incAt = now.Add(us(p.RPGTimeReset))
	r.cuts++
}

// increase is one rate increase event of kind k (its counter already
// counted): fast recovery, additive or hyper increase of the target, then
// the current rate moves halfway to it. Reaching the maximum releases the
// limiter.
func (r *RP) increase(k incKind) {
	r.last = k
	switch r.stage() {
	case AdditiveIncr:
		r.rt += mbps(r.p.RPGAIRate)
	case HyperIncr:
		i := min(r.timeCnt, r.byteCnt) - r.p.RPGThreshold
		r.rt += uint64(i) * mbps(r.p.RPGHAIRate)
	}
	r.rt = min(r.rt, r.maxRate)
	r.rc = (r.rc + r.rt + 1) / 2
	if r.rc >= r.maxRate {
		r.limited = false
		r.cnpAlpha, r.cnpCut = false, false
	}
}
