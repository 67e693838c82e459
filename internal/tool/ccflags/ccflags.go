// Package ccflags is the command-line form of congestion control that roced
// (Go flags: -cc, -cc-param, ...) and the goroce tools (getopt long options:
// --cc, --cc-param, ...) share: on or off, DCQCN parameters by their mlx5
// names, the line rate and the pacing burst.
package ccflags

import (
	"flag"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/goroce/goroce/dcqcn"
	"github.com/pborman/getopt/v2"
)

// Flags holds the parsed flags.
type Flags struct {
	on       bool
	params   []string
	lineRate uint64 // Mb/s
	burst    time.Duration
}

// paramList collects -cc-param name=value settings in order.
type paramList struct{ l *[]string }

func (p paramList) String() string {
	if p.l == nil {
		return ""
	}
	return strings.Join(*p.l, ",")
}
func (p paramList) Set(v string) error { *p.l = append(*p.l, v); return nil }

// The flags' help texts.
var (
	helpCC = "congestion control (DCQCN): ECT(0) on data packets, a CNP for each CE-marked packet (rate-limited), " +
		"and a QP's sending rate cut on CNPs and paced; false sends as rxe does (no ECT, no CNPs, no pacing)"
	helpParam = "set a DCQCN parameter by its mlx5 name, name=value (e.g. rpg_time_reset=300, min_time_between_cnps=4); " +
		"repeat for several; names: " + strings.Join(dcqcn.Names(), ", ")
	helpLineRate = "line rate in Mb/s DCQCN starts from and recovers to (0: the interface speed when it is a NIC, else 100000)"
	helpBurst    = "depth of a QP's pacing bucket as time at its rate (0: 100µs)"
)

// Register adds the flags to fs (Go flags: -cc=false, -cc-param ...).
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.BoolVar(&f.on, "cc", true, helpCC)
	fs.Var(paramList{&f.params}, "cc-param", helpParam)
	fs.Uint64Var(&f.lineRate, "cc-line-rate", 0, helpLineRate)
	fs.DurationVar(&f.burst, "cc-pacing-burst", 0, helpBurst)
}

// RegisterGetopt adds the flags to s as long options (--cc=false,
// --cc-param ...), as the goroce tools take theirs.
func (f *Flags) RegisterGetopt(s *getopt.Set) {
	f.on = true
	s.FlagLong(&f.on, "cc", 0, helpCC)
	s.FlagLong(&f.params, "cc-param", 0, helpParam, "NAME=VALUE")
	s.FlagLong(&f.lineRate, "cc-line-rate", 0, helpLineRate, "MBPS")
	s.FlagLong(&f.burst, "cc-pacing-burst", 0, helpBurst, "DURATION")
}

// Config returns the congestion control the flags ask for, validated
// (errors wrap syscall.EINVAL). Its LineRate is 0 unless -cc-line-rate
// was given, which a device takes as its interface's speed.
func (f *Flags) Config() (dcqcn.Config, error) {
	c := dcqcn.DefaultConfig()
	c.Enabled = f.on
	c.LineRate = f.lineRate * 1_000_000
	c.PacingBurst = f.burst
	for _, s := range f.params {
		if err := c.Params.Set(s); err != nil {
			return c, err
		}
	}
	if err := c.Params.Validate(); err != nil {
		return c, err
	}
	if c.PacingBurst < 0 {
		return c, fmt.Errorf("-cc-pacing-burst %v: %w", c.PacingBurst, syscall.EINVAL)
	}
	return c, nil
}
