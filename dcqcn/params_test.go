package dcqcn

import (
	"errors"
	"syscall"
	"testing"
)

func TestParamsByName(t *testing.T) {
	p := Defaults()
	if len(Names()) != 19 {
		t.Fatalf("%d names", len(Names()))
	}
	for _, n := range Names() {
		if _, ok := p.Get(n); !ok {
			t.Errorf("Get(%q) unknown", n)
		}
	}
	tests := []struct {
		in   string
		name string
		want uint64
	}{
		{"rpg_time_reset=55", "rpg_time_reset", 55},
		{"rp_rpg_ai_rate=10", "rpg_ai_rate", 10},
		{"np_min_time_between_cnps = 0", "min_time_between_cnps", 0},
		{"clamp_tgt_rate=1", "clamp_tgt_rate", 1},
		{"cnp_dscp=0x1a", "cnp_dscp", 26},
	}
	for _, tt := range tests {
		if err := p.Set(tt.in); err != nil {
			t.Fatalf("Set(%q): %v", tt.in, err)
		}
		if v, _ := p.Get(tt.name); v != tt.want {
			t.Errorf("after %q, %s = %d", tt.in, tt.name, v)
		}
	}
	if !p.ClampTgtRate || p.RPGAIRate != 10 {
		t.Errorf("fields not set: %+v", p)
	}
	for _, bad := range []string{"rpg_gd", "nope=1", "rpg_gd=x", "rpg_gd=-1", "rpg_gd=4294967296"} {
		if err := p.Set(bad); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("Set(%q) = %v, want EINVAL", bad, err)
		}
	}
}
