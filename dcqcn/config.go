package dcqcn

import (
	"fmt"
	"syscall"
	"time"
)

// Config switches congestion control on for a device and says how it paces.
type Config struct {
	// Enabled turns on ECT(0) marking of data packets, CNPs for CE-marked
	// packets received, and the reaction point with pacing. Off, the device
	// behaves as rxe: traffic class as given, no CNPs, no pacing.
	Enabled bool
	// Params are the DCQCN settings (Defaults: the ConnectX firmware's).
	Params Params
	// LineRate is the port speed in bit/s: the rate a QP is paced at while
	// no CNP limits it, the rate the first CNP cuts from (with
	// rate_to_set_on_first_cnp 0) and the rate recovery ends at (with
	// rpg_max_rate 0). 0 means DefaultLineRate.
	LineRate uint64
	// PacingBurst is the depth of each QP's token bucket as time at its
	// current rate (at least two packets). A shard's timer wakes it late by
	// some tens of microseconds on a busy host; a bucket shallower than
	// that lowers the rate achieved below the rate set. 0 means
	// DefaultPacingBurst.
	PacingBurst time.Duration
}

// Defaults for Config fields left zero.
const (
	// DefaultLineRate is used when the port speed is unknown (loopback,
	// virtual links): fast enough that pacing at it never holds back a
	// software sender, so until a CNP arrives nothing is paced in effect.
	DefaultLineRate = 100_000_000_000
	// DefaultPacingBurst covers a shard timer's usual lateness.
	DefaultPacingBurst = 100 * time.Microsecond
)

// DefaultConfig is congestion control on with the ConnectX defaults.
func DefaultConfig() Config {
	return Config{Enabled: true, Params: Defaults()}
}

// Normalize fills the zero fields with their defaults and validates the
// parameters (errors wrap syscall.EINVAL). A disabled Config is always
// valid.
func (c *Config) Normalize() error {
	if !c.Enabled {
		return nil
	}
	if c.LineRate == 0 {
		c.LineRate = DefaultLineRate
	}
	if c.PacingBurst == 0 {
		c.PacingBurst = DefaultPacingBurst
	}
	if c.PacingBurst < 0 {
		return fmt.Errorf("dcqcn: pacing burst %v: %w", c.PacingBurst, syscall.EINVAL)
	}
	return c.Params.Validate()
}

// Burst is the token bucket depth in bytes for a QP paced at rate bit/s
// whose largest packet is maxPacket bytes: PacingBurst worth of the rate,
// and never less than two packets.
func (c *Config) Burst(rate uint64, maxPacket int) int {
	b := uint64(c.PacingBurst) * (rate / 8) / uint64(time.Second)
	return max(int(min(b, 1<<30)), 2*maxPacket)
}
