package dcqcn

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

const gbps = 1_000_000_000

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const µs = time.Microsecond

func newRP(p Params, line uint64) *RP {
	r := new(RP)
	pp := p
	r.Init(&pp, line)
	return r
}

func TestDefaultsValidate(t *testing.T) {
	p := Defaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.CNPTOS() != 0xC0 || p.CNPInterval() != 4*µs {
		t.Fatalf("CNP TOS %#x interval %v", p.CNPTOS(), p.CNPInterval())
	}
}

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name string
		set  func(*Params)
	}{
		{"rpg_time_reset 0", func(p *Params) { p.RPGTimeReset = 0 }},
		{"rpg_threshold 0", func(p *Params) { p.RPGThreshold = 0 }},
		{"rpg_threshold 32", func(p *Params) { p.RPGThreshold = 32 }},
		{"rpg_gd 0", func(p *Params) { p.RPGGD = 0 }},
		{"rpg_gd 16", func(p *Params) { p.RPGGD = 16 }},
		{"rpg_min_dec_fac 101", func(p *Params) { p.RPGMinDecFac = 101 }},
		{"rpg_min_rate 0", func(p *Params) { p.RPGMinRate = 0 }},
		{"dce_tcp_g 1024", func(p *Params) { p.DCETCPG = 1024 }},
		{"dce_tcp_rtt 0", func(p *Params) { p.DCETCPRTT = 0 }},
		{"rate_reduce_monitor_period 0", func(p *Params) { p.RateReduceMonitorPeriod = 0 }},
		{"initial_alpha_value 1024", func(p *Params) { p.InitialAlphaValue = 1024 }},
		{"cnp_dscp 64", func(p *Params) { p.CNPDSCP = 64 }},
		{"cnp_802p_prio 8", func(p *Params) { p.CNP802pPrio = 8 }},
	}
	for _, tt := range tests {
		p := Defaults()
		tt.set(&p)
		if err := p.Validate(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: Validate = %v, want EINVAL", tt.name, err)
		}
	}
}

// cutOf is the rate a cut leaves at α (in 2^-20 units) with rpg_gd 11 (no
// floor reached): rc·(1 - α/2).
func cutOf(rc uint64, alpha uint32) uint64 {
	return uint64(new(big.Int).Div(new(big.Int).Mul(big.NewInt(int64(rc)), big.NewInt(1<<21-int64(alpha))), big.NewInt(1<<21)).Int64())
}

// decay and bump are one α update without and with a CNP at g = 1019, in
// 2^-20 units.
func decay(a uint32) uint32 { return uint32(uint64(a) * 1019 >> 10) }
func bump(a uint32) uint32  { return min(decay(a)+5<<10, 1<<20-1) }

const a1023 = 1023 << 10 // initial_alpha_value in 2^-20 units

func TestFirstCNPCutsAndIncreases(t *testing.T) {
	r := newRP(Defaults(), 10*gbps)
	if r.Limited() || r.Rate() != 10*gbps || !r.NextEvent().IsZero() || r.Stage() != Unlimited {
		t.Fatalf("fresh RP: limited %v rate %d next %v", r.Limited(), r.Rate(), r.NextEvent())
	}
	r.OnCNP(at(0))
	rc1 := cutOf(10*gbps, a1023)
	if !r.Limited() || r.Rate() != rc1 || r.TargetRate() != 10*gbps || r.Alpha() != 1023 || r.Cuts() != 1 {
		t.Fatalf("after first CNP: rate %d target %d α %d cuts %d", r.Rate(), r.TargetRate(), r.Alpha(), r.Cuts())
	}
	if got := r.NextEvent(); !got.Equal(at(300 * µs)) {
		t.Fatalf("NextEvent = %v, want the timer at 300µs", got.Sub(t0))
	}
	// Event 1 (timer): fast recovery, Rt unchanged.
	r.Advance(at(300 * µs))
	rc2 := (rc1 + 10*gbps + 1) / 2
	if r.Rate() != rc2 || r.TargetRate() != 10*gbps || r.Stage() != FastRecovery {
		t.Fatalf("after FR: rate %d target %d stage %v", r.Rate(), r.TargetRate(), r.Stage())
	}
	// α decayed once per µs with no CNP: 300 updates of ·1019/1024.
	a := uint32(a1023)
	for i := 0; i < 300; i++ {
		a = decay(a)
	}
	if r.alpha != a || r.Alpha() != a>>10 {
		t.Fatalf("α after 300µs = %d, want %d", r.Alpha(), a)
	}
}

func TestMonitorPeriodCoalescesCNPs(t *testing.T) {
	r := newRP(Defaults(), 10*gbps)
	r.OnCNP(at(0))
	rc1 := r.Rate()
	// CNPs at 1, 2, 3 µs: one cut, at the start of the next monitor period (4 µs).
	for _, d := range []time.Duration{1 * µs, 2 * µs, 3 * µs} {
		r.OnCNP(at(d))
		if r.Cuts() != 1 {
			t.Fatalf("cut before the monitor period ended (at %v)", d)
		}
	}
	if got := r.NextEvent(); !got.Equal(at(4 * µs)) {
		t.Fatalf("NextEvent = %v, want the cut at 4µs", got.Sub(t0))
	}
	r.Advance(at(4 * µs))
	// α: 1023 at 0; at 1µs no CNP in [0,1) → decay; CNPs in [1,2), [2,3),
	// [3,4) → increase at 2, 3, 4.
	a := decay(a1023)
	for i := 0; i < 3; i++ {
		a = bump(a)
	}
	if r.alpha != a || r.Cuts() != 2 || r.Rate() != cutOf(rc1, a) {
		t.Fatalf("α %d (want %d) cuts %d rate %d (want %d)", r.alpha, a, r.Cuts(), r.Rate(), cutOf(rc1, a))
	}
	// No increase event happened between the cuts: the target stays.
	if r.TargetRate() != 10*gbps {
		t.Fatalf("target %d moved without an increase event", r.TargetRate())
	}
	// A CNP exactly on a boundary where a cut just happened waits a period.
	r.OnCNP(at(4 * µs))
	if r.Cuts() != 2 || !r.NextEvent().Equal(at(8*µs)) {
		t.Fatalf("second cut in one period: cuts %d next %v", r.Cuts(), r.NextEvent().Sub(t0))
	}
}

// steps runs timer events only (no bytes) and returns the stages seen.
func TestStagesTimerAndBytes(t *testing.T) {
	p := Defaults()
	r := newRP(p, 10*gbps)
	r.OnCNP(at(0))
	rc := r.Rate()
	rt := r.TargetRate()
	type ev struct {
		timer bool
		stage Stage
		drt   uint64 // Rt increase
	}
	// F = 1. T1: FR. B1 (T1,B1): FR. T2 (T2,B1): AI. B2 (T2,B2): HI i=1.
	// T3 (T3,B2): HI i=1. B3 (T3,B3): HI i=2.
	seq := []ev{
		{true, FastRecovery, 0},
		{false, FastRecovery, 0},
		{true, AdditiveIncr, 5_000_000},
		{false, HyperIncr, 50_000_000},
		{true, HyperIncr, 50_000_000},
		{false, HyperIncr, 100_000_000},
	}
	now := time.Duration(0)
	for i, e := range seq {
		if e.timer {
			now += 300 * µs
			r.Advance(at(now))
		} else {
			r.OnSent(at(now), int(p.RPGByteReset))
		}
		rt = min(rt+e.drt, 10*gbps)
		rc = (rc + rt + 1) / 2
		if r.Stage() != e.stage || r.TargetRate() != rt || r.Rate() != rc {
			t.Fatalf("event %d: stage %v rate %d target %d; want %v %d %d", i, r.Stage(), r.Rate(), r.TargetRate(), e.stage, rc, rt)
		}
	}
}

func TestReleaseAtLineRateAndRestart(t *testing.T) {
	r := newRP(Defaults(), 1*gbps)
	r.OnCNP(at(0))
	now := time.Duration(0)
	for i := 0; r.Limited(); i++ {
		if i > 100 {
			t.Fatalf("rate never recovered: %d", r.Rate())
		}
		now += 300 * µs
		r.Advance(at(now))
	}
	if r.Rate() != 1*gbps || !r.NextEvent().IsZero() || r.Stage() != Unlimited {
		t.Fatalf("released: rate %d next %v", r.Rate(), r.NextEvent())
	}
	r.OnCNP(at(now + µs))
	if !r.Limited() || r.Alpha() != 1023 || r.Rate() != cutOf(1*gbps, a1023) {
		t.Fatalf("restart: limited %v α %d rate %d", r.Limited(), r.Alpha(), r.Rate())
	}
}

func TestCutFloors(t *testing.T) {
	tests := []struct {
		name string
		set  func(*Params)
		line uint64
		want uint64 // rate after the first CNP
	}{
		// gd 10: α 1023/1024 would leave 1/1024 of the rate; min_dec_fac keeps 50%.
		{"rpg_min_dec_fac", func(p *Params) { p.RPGGD = 10 }, 1 * gbps, gbps / 2},
		{"rpg_min_dec_fac 100 disables cuts", func(p *Params) { p.RPGMinDecFac = 100 }, 1 * gbps, 1 * gbps},
		{"rpg_min_rate", func(p *Params) { p.RPGGD = 10; p.RPGMinDecFac = 0; p.RPGMinRate = 100 }, 1 * gbps, 100_000_000},
		{"rate_to_set_on_first_cnp", func(p *Params) { p.RateToSetOnFirstCNP = 400 }, 1 * gbps, cutOf(400_000_000, a1023)},
		{"rpg_max_rate", func(p *Params) { p.RPGMaxRate = 200 }, 1 * gbps, cutOf(200_000_000, a1023)},
		{"initial_alpha_value", func(p *Params) { p.InitialAlphaValue = 512 }, 1 * gbps, cutOf(1*gbps, 512<<10)},
	}
	for _, tt := range tests {
		p := Defaults()
		tt.set(&p)
		if err := p.Validate(); err != nil {
			t.Fatal(err)
		}
		r := newRP(p, tt.line)
		r.OnCNP(at(0))
		if r.Rate() != tt.want {
			t.Errorf("%s: rate %d, want %d", tt.name, r.Rate(), tt.want)
		}
	}
}

func TestClampTargetRate(t *testing.T) {
	tests := []struct {
		name   string
		clamp  bool
		afterT bool
		bytes  bool // the increase before the second CNP is a byte event (else timer)
		clamps bool
	}{
		{"default, after a timer event", false, true, false, true},
		{"default, after a byte event", false, true, true, true},
		{"no clamp after time inc, timer event", false, false, false, false},
		{"no clamp after time inc, byte event", false, false, true, true},
		{"clamp_tgt_rate", true, false, false, true},
	}
	for _, tt := range tests {
		p := Defaults()
		p.ClampTgtRate, p.ClampTgtRateAfterTimeInc = tt.clamp, tt.afterT
		r := newRP(p, 10*gbps)
		r.OnCNP(at(0))
		now := 10 * µs
		if tt.bytes {
			r.OnSent(at(now), int(p.RPGByteReset))
		} else {
			now = 300 * µs
			r.Advance(at(now))
		}
		rc := r.Rate()
		r.OnCNP(at(now + µs)) // next monitor boundary
		r.Advance(at(now + 8*µs))
		if got := r.TargetRate() == rc; got != tt.clamps {
			t.Errorf("%s: target %d, rate before the cut %d; clamped %v, want %v", tt.name, r.TargetRate(), rc, got, tt.clamps)
		}
	}
}

func TestAlphaDecaysToZeroCheaply(t *testing.T) {
	p := Defaults()
	p.RPGTimeReset = 1_000_000 // keep the limiter allocated for a while
	r := newRP(p, 10*gbps)
	r.OnCNP(at(0))
	r.Advance(at(900 * time.Millisecond))
	if r.Alpha() != 0 || !r.Limited() {
		t.Fatalf("α %d after 0.9 s without CNP, limited %v", r.Alpha(), r.Limited())
	}
	// One CNP's period raises α by 1024-g.
	r.OnCNP(at(900*time.Millisecond + 500))
	r.Advance(at(900*time.Millisecond + µs))
	if r.Alpha() != 5 {
		t.Fatalf("α after one CNP from 0 = %d, want 5", r.Alpha())
	}
}

// event is one input of a random trace.
type event struct {
	dt    time.Duration
	kind  int // 0 advance, 1 CNP, 2 sent
	bytes int
}

func (e event) apply(r *RP, now time.Time) {
	switch e.kind {
	case 0:
		r.Advance(now)
	case 1:
		r.OnCNP(now)
	case 2:
		r.OnSent(now, e.bytes)
	}
}

func randomTrace(seed uint64, n int) []event {
	rng := rand.New(rand.NewPCG(seed, 1))
	ev := make([]event, n)
	for i := range ev {
		ev[i] = event{dt: time.Duration(rng.IntN(400)) * µs / 4, kind: rng.IntN(3), bytes: 64 + rng.IntN(4096)}
	}
	return ev
}

type snapshot struct {
	limited      bool
	rate, target uint64
	alpha        uint32
	cuts         uint64
	stage        Stage
	next         time.Time
}

func snap(r *RP) snapshot {
	return snapshot{r.Limited(), r.Rate(), r.TargetRate(), r.Alpha(), r.Cuts(), r.Stage(), r.NextEvent()}
}

// TestProperties checks invariants over random traces: rates stay within
// [rpg_min_rate, max], Rc ≤ Rt, α ≤ 1023, a cut never raises the rate and
// an increase never lowers it, at most one cut per monitor period, and
// NextEvent lies ahead.
func TestProperties(t *testing.T) {
	p := Defaults()
	const line = 25 * gbps
	for seed := uint64(1); seed <= 200; seed++ {
		r := newRP(p, line)
		now := t0
		for i, e := range randomTrace(seed, 400) {
			now = now.Add(e.dt)
			before, prevCut := snap(r), r.lastCut
			e.apply(r, now)
			s := snap(r)
			fail := func(msg string) {
				t.Fatalf("seed %d event %d (%+v): %s\nbefore %+v\nafter  %+v", seed, i, e, msg, before, s)
			}
			if s.limited && (s.rate < mbps(p.RPGMinRate) || s.rate > s.target || s.target > line) {
				fail("rate out of [min, target, line]")
			}
			if !s.limited && s.rate != line {
				fail("unlimited below the line rate")
			}
			if s.alpha > 1023 {
				fail("α above 1023")
			}
			if n := s.cuts - before.cuts; n > 0 && before.limited {
				if r.lastCut.After(now) || r.lastCut.Sub(prevCut) < time.Duration(n)*us(p.RateReduceMonitorPeriod) {
					fail("two cuts within a monitor period")
				}
			}
			if s.cuts == before.cuts && before.limited && s.rate < before.rate {
				fail("rate fell without a cut")
			}
			if s.limited && !s.next.After(now) {
				fail("NextEvent not after now")
			}
		}
	}
}

// TestLazyEqualsStepwise: advancing to t in one call gives exactly the
// state of advancing in many small steps (α's lazy grid is exact).
func TestLazyEqualsStepwise(t *testing.T) {
	p := Defaults()
	for seed := uint64(1); seed <= 50; seed++ {
		a, b := newRP(p, 40*gbps), newRP(p, 40*gbps)
		now := t0
		for _, e := range randomTrace(seed, 200) {
			if e.kind == 0 {
				// b takes the same interval in 1µs steps.
				for s := now; s.Before(now.Add(e.dt)); s = s.Add(µs) {
					b.Advance(s)
				}
			}
			now = now.Add(e.dt)
			for _, r := range []*RP{a, b} {
				e.apply(r, now)
			}
			if snap(a) != snap(b) {
				t.Fatalf("seed %d: lazy %+v, stepwise %+v", seed, snap(a), snap(b))
			}
		}
	}
}

func TestDeterministic(t *testing.T) {
	run := func() []snapshot {
		r := newRP(Defaults(), 100*gbps)
		now := t0
		var out []snapshot
		for _, e := range randomTrace(7, 1000) {
			now = now.Add(e.dt)
			e.apply(r, now)
			out = append(out, snap(r))
		}
		return out
	}
	a, b := run(), run()
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("step %d differs: %+v vs %+v", i, a[i], b[i])
		}
	}
}

// TestAlphaEquilibrium: with a CNP every k µs, α settles where one period's
// rise, (1024-g)/1024, equals the decay over the k periods between CNPs:
// α* = (1-g/1024)/(1-(g/1024)^k), just after the CNP's update. Truncating α
// to 10 bits on every update would instead hold it near 0 for k of a few µs
// and more, and then cuts do nothing.
func TestAlphaEquilibrium(t *testing.T) {
	for _, k := range []int{1, 4, 11, 50} {
		p := Defaults()
		p.RPGMinDecFac = 100 // no rate cuts: α only
		r := newRP(p, 10*gbps)
		r.OnCNP(at(0))
		for i := 1; i <= 20000/k; i++ {
			r.OnCNP(at(time.Duration(i*k)*µs + 500))
		}
		r.Advance(at(time.Duration((20000/k)*k+1) * µs)) // the update of the last CNP's period
		g := 1019.0 / 1024
		want := (1 - g) / (1 - math.Pow(g, float64(k))) * 1024
		if got := float64(r.Alpha()); math.Abs(got-want) > 2 {
			t.Errorf("CNP every %dµs: α %v/1024, want %.1f", k, got, want)
		}
	}
}
