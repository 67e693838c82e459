package dcqcn

import (
	"errors"
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

func TestPacerUnpaced(t *testing.T) {
	var p Pacer
	for i := 0; i < 10; i++ {
		ok, next := p.Ready(at(0))
		if c, _ := p.Credit(at(0)); !ok || !next.Equal(at(0)) || c != math.MaxInt {
			t.Fatal("the zero Pacer held a packet")
		}
		p.Sent(1 << 20)
	}
	p.SetRate(at(0), gbps, 4096)
	p.SetRate(at(0), 0, 0)
	if ok, _ := p.Ready(at(0)); !ok || p.Rate() != 0 {
		t.Fatal("rate 0 did not remove pacing")
	}
}

func TestPacerSpacing(t *testing.T) {
	var p Pacer
	p.SetRate(at(0), 8_000_000, 1000) // 1 byte per µs, 1000-byte bucket (starts full)
	if c, _ := p.Credit(at(0)); c != 1000 {
		t.Fatalf("a new bucket holds %d bytes, want its 1000", c)
	}
	p.Sent(1000)
	if ok, next := p.Ready(at(0)); ok || !next.Equal(at(1)) {
		t.Fatalf("empty bucket: ok %v next %v", ok, next.Sub(t0))
	}
	if ok, _ := p.Ready(at(1)); !ok {
		t.Fatal("not ready once credit is positive")
	}
	if c, _ := p.Credit(at(1)); c != 1 {
		t.Fatalf("credit after 1ns at 1 byte/µs = %d, want 1 (rounded up)", c)
	}
	p.Sent(1000) // overdraws to about -1000 bytes
	if c, next := p.Credit(at(1)); c != 0 || next.Sub(t0) != 1000*µs+1 {
		t.Fatalf("credit in debt = %d, next %v", c, next.Sub(t0))
	}
	ok, next := p.Ready(at(1))
	if ok || next.Sub(t0) != 1000*µs+1 {
		t.Fatalf("after 1000 bytes: ok %v next %v, want 1ms+1ns", ok, next.Sub(t0))
	}
	// A long idle fills the bucket to its depth, no more.
	if c, _ := p.Credit(at(time.Hour)); c != 1000 {
		t.Fatalf("credit after an hour = %d, want the 1000-byte burst", c)
	}
	p.Sent(1000)
	p.Sent(1)
	if ok, _ := p.Ready(at(time.Hour)); ok {
		t.Fatal("the bucket held more than its burst")
	}
}

// TestPacerRate drives a backlogged sender exactly at the times Ready gives
// and checks the bytes sent by each instant stay within one packet plus the
// burst of rate·t, across rate changes.
func TestPacerRate(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		var p Pacer
		rate := uint64(1+rng.IntN(100)) * 100_000_000 // 0.1..10 Gb/s
		burst := 1 + rng.IntN(64*1024)
		now := t0
		p.SetRate(now, rate, burst)
		var sent, allowed float64 // bytes, and rate·t so far
		last := now
		for i := 0; i < 5000; i++ {
			if rng.IntN(500) == 0 { // change the rate now and then
				allowed += float64(rate) / 8 * now.Sub(last).Seconds()
				last = now
				rate = uint64(1+rng.IntN(100)) * 100_000_000
				p.SetRate(now, rate, burst)
			}
			ok, next := p.Ready(now)
			if !ok {
				if !next.After(now) {
					t.Fatalf("seed %d: not ready and next %v not after now", seed, next.Sub(now))
				}
				now = next
				continue
			}
			n := 64 + rng.IntN(4096)
			p.Sent(n)
			sent += float64(n)
			exp := allowed + float64(rate)/8*now.Sub(last).Seconds()
			if sent > exp+float64(burst)+4160+1 {
				t.Fatalf("seed %d step %d: sent %.0f bytes, allowed %.0f + burst %d + a packet", seed, i, sent, exp, burst)
			}
			if sent < exp-float64(burst)-4160-1 {
				t.Fatalf("seed %d step %d: sent %.0f bytes, far below %.0f", seed, i, sent, exp)
			}
		}
	}
}

func TestNPInterval(t *testing.T) {
	var n NP
	const iv = 4 * µs
	tests := []struct {
		at   time.Duration
		want bool
	}{
		{0, true}, {1 * µs, false}, {3999, false}, {4 * µs, true}, {5 * µs, false}, {100 * µs, true},
	}
	for _, tt := range tests {
		if got := n.OnCE(at(tt.at), iv); got != tt.want {
			t.Errorf("CE at %v: send %v, want %v", tt.at, got, tt.want)
		}
	}
	var zero NP
	if !zero.OnCE(at(0), 0) || !zero.OnCE(at(0), 0) {
		t.Error("interval 0 must answer every CE")
	}
}

func TestTOS(t *testing.T) {
	tests := []struct {
		tclass uint8
		on     bool
		want   uint8
	}{
		{0, false, 0},
		{0, true, 0x02},
		{0x68, true, 0x6A},  // DSCP 26 (AF31) + ECT(0)
		{0x6B, true, 0x6A},  // the user's ECN bits are replaced
		{0x6B, false, 0x6B}, // off: the traffic class as it is (rxe)
	}
	for _, tt := range tests {
		if got := DataTOS(tt.tclass, tt.on); got != tt.want {
			t.Errorf("DataTOS(%#x, %v) = %#x, want %#x", tt.tclass, tt.on, got, tt.want)
		}
	}
	for tos, want := range map[uint8]bool{0x00: false, 0x01: false, 0x02: false, 0x03: true, 0xC3: true, 0xC2: false} {
		if IsCE(tos) != want {
			t.Errorf("IsCE(%#x) = %v", tos, !want)
		}
	}
}

func TestConfig(t *testing.T) {
	var off Config
	if err := off.Normalize(); err != nil || off.LineRate != 0 {
		t.Fatalf("disabled config: %v %+v", err, off)
	}
	c := DefaultConfig()
	if err := c.Normalize(); err != nil || !c.Enabled || c.LineRate != DefaultLineRate || c.PacingBurst != DefaultPacingBurst {
		t.Fatalf("default config: %v %+v", err, c)
	}
	if b := c.Burst(8_000_000_000, 4160); b != 100_000 {
		t.Errorf("burst at 8 Gb/s for 100µs = %d bytes, want 100000", b)
	}
	if b := c.Burst(1_000_000, 4160); b != 2*4160 {
		t.Errorf("burst at 1 Mb/s = %d, want two packets", b)
	}
	bad := DefaultConfig()
	bad.Params.RPGGD = 0
	if err := bad.Normalize(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("bad params: %v", err)
	}
	bad = DefaultConfig()
	bad.PacingBurst = -1
	if err := bad.Normalize(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("negative burst: %v", err)
	}
}
