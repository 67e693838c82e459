package dcqcn

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// field is one parameter by its mlx5 name.
type field struct {
	get func(*Params) uint64
	set func(*Params, uint64)
}

func u32(f func(*Params) *uint32) field {
	return field{func(p *Params) uint64 { return uint64(*f(p)) }, func(p *Params, v uint64) { *f(p) = uint32(v) }}
}

func u8(f func(*Params) *uint8) field {
	return field{func(p *Params) uint64 { return uint64(*f(p)) }, func(p *Params, v uint64) { *f(p) = uint8(v) }}
}

func flag(f func(*Params) *bool) field {
	return field{func(p *Params) uint64 {
		if *f(p) {
			return 1
		}
		return 0
	}, func(p *Params, v uint64) { *f(p) = v != 0 }}
}

// fields maps each mlx5 ECN setting's name to its Params field.
var fields = map[string]field{
	"clamp_tgt_rate":                flag(func(p *Params) *bool { return &p.ClampTgtRate }),
	"clamp_tgt_rate_after_time_inc": flag(func(p *Params) *bool { return &p.ClampTgtRateAfterTimeInc }),
	"rpg_time_reset":                u32(func(p *Params) *uint32 { return &p.RPGTimeReset }),
	"rpg_byte_reset":                u32(func(p *Params) *uint32 { return &p.RPGByteReset }),
	"rpg_threshold":                 u32(func(p *Params) *uint32 { return &p.RPGThreshold }),
	"rpg_max_rate":                  u32(func(p *Params) *uint32 { return &p.RPGMaxRate }),
	"rpg_ai_rate":                   u32(func(p *Params) *uint32 { return &p.RPGAIRate }),
	"rpg_hai_rate":                  u32(func(p *Params) *uint32 { return &p.RPGHAIRate }),
	"rpg_gd":                        u32(func(p *Params) *uint32 { return &p.RPGGD }),
	"rpg_min_dec_fac":               u32(func(p *Params) *uint32 { return &p.RPGMinDecFac }),
	"rpg_min_rate":                  u32(func(p *Params) *uint32 { return &p.RPGMinRate }),
	"rate_to_set_on_first_cnp":      u32(func(p *Params) *uint32 { return &p.RateToSetOnFirstCNP }),
	"dce_tcp_g":                     u32(func(p *Params) *uint32 { return &p.DCETCPG }),
	"dce_tcp_rtt":                   u32(func(p *Params) *uint32 { return &p.DCETCPRTT }),
	"rate_reduce_monitor_period":    u32(func(p *Params) *uint32 { return &p.RateReduceMonitorPeriod }),
	"initial_alpha_value":           u32(func(p *Params) *uint32 { return &p.InitialAlphaValue }),
	"min_time_between_cnps":         u32(func(p *Params) *uint32 { return &p.MinTimeBetweenCNPs }),
	"cnp_dscp":                      u8(func(p *Params) *uint8 { return &p.CNPDSCP }),
	"cnp_802p_prio":                 u8(func(p *Params) *uint8 { return &p.CNP802pPrio }),
}

// Names lists the mlx5 names of the parameters, sorted.
func Names() []string {
	out := make([]string, 0, len(fields))
	for n := range fields {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Get returns the parameter with mlx5 name (clamp_tgt_rate: 0 or 1).
func (p *Params) Get(name string) (uint64, bool) {
	f, ok := fields[name]
	if !ok {
		return 0, false
	}
	return f.get(p), true
}

// Set parses "name=value" with an mlx5 parameter name (roce_rp/roce_np
// sysfs, "rp_"/"np_" debugfs prefixes accepted) and sets it. It does not
// validate the combination: call Validate after the last Set. Errors wrap
// syscall.EINVAL.
func (p *Params) Set(nameValue string) error {
	name, val, ok := strings.Cut(nameValue, "=")
	if !ok {
		return fmt.Errorf("dcqcn: %q is not name=value: %w", nameValue, syscall.EINVAL)
	}
	name = strings.TrimSpace(name)
	f, ok := fields[name]
	if !ok {
		f, ok = fields[strings.TrimPrefix(strings.TrimPrefix(name, "rp_"), "np_")]
	}
	if !ok {
		return fmt.Errorf("dcqcn: unknown parameter %q (have %s): %w", name, strings.Join(Names(), ", "), syscall.EINVAL)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(val), 0, 32)
	if err != nil {
		return fmt.Errorf("dcqcn: %s=%s: %w", name, val, syscall.EINVAL)
	}
	f.set(p, v)
	return nil
}
