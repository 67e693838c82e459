package dcqcn

import (
	"fmt"
	"syscall"
	"time"
)

// Params are the DCQCN settings, one field per mlx5 ECN setting of the same
// name (/sys/class/net/<if>/ecn/roce_rp/<name> and roce_np/<name> under
// MLNX_OFED, the cc_params debugfs files rp_<name> and np_<name> upstream,
// <NAME>_P1 in mlxconfig). Defaults are what ConnectX-4 and later firmware
// reports out of the box; units are the driver's (microseconds, Mb/s,
// bytes, fixed point with 10 fraction bits). Fields are plain values so a
// zero Params is not usable: start from Defaults().
type Params struct {
	// Reaction point (sender), roce_rp.

	// ClampTgtRate (clamp_tgt_rate, default false): when a CNP cuts the
	// rate, always move the target rate down to the current rate. False
	// keeps the target until a rate increase event has happened since the
	// last cut, so a burst of CNPs does not drag the target down with it.
	ClampTgtRate bool
	// ClampTgtRateAfterTimeInc (clamp_tgt_rate_after_time_inc, default
	// true): also move the target to the current rate on a cut when the
	// last increase event was the timer's, not only the byte counter's.
	ClampTgtRateAfterTimeInc bool
	// RPGTimeReset (rpg_time_reset, µs, default 300): the rate increase
	// timer. Every period without a CNP is one increase event.
	RPGTimeReset uint32
	// RPGByteReset (rpg_byte_reset, bytes, default 32767): the byte
	// counter. Every this many bytes sent without a CNP is one increase
	// event. 0 disables the byte counter (and so hyper increase).
	RPGByteReset uint32
	// RPGThreshold (rpg_threshold, events, default 1): how many events of
	// a counter (timer or bytes) are fast recovery before the state
	// machine moves on to additive and then hyper increase.
	RPGThreshold uint32
	// RPGMaxRate (rpg_max_rate, Mb/s, default 0 = the line rate): once the
	// current rate reaches it the rate limiter is released and the QP is
	// not paced until the next CNP.
	RPGMaxRate uint32
	// RPGAIRate (rpg_ai_rate, Mb/s, default 5): the target rate step of
	// additive increase.
	RPGAIRate uint32
	// RPGHAIRate (rpg_hai_rate, Mb/s, default 50): the target rate step of
	// hyper increase, times i = min(T, BC) - rpg_threshold where T and BC
	// count the timer and byte events since the last cut (as QCN's hyper
	// active increase).
	RPGHAIRate uint32
	// RPGGD (rpg_gd, default 11): a cut multiplies the rate by
	// 1 - α/2^rpg_gd with α in units of 1/1024, so 11 halves the rate at
	// α = 1. Range 1..15.
	RPGGD uint32
	// RPGMinDecFac (rpg_min_dec_fac, percent, default 50): one cut leaves
	// at least this share of the rate. 100 disables cuts.
	RPGMinDecFac uint32
	// RPGMinRate (rpg_min_rate, Mb/s, default 1): the rate never goes
	// below this.
	RPGMinRate uint32
	// RateToSetOnFirstCNP (rate_to_set_on_first_cnp, Mb/s, default 0 = the
	// line rate): the current and target rate when the first CNP allocates
	// a rate limiter to the QP, before that CNP's cut.
	RateToSetOnFirstCNP uint32
	// DCETCPG (dce_tcp_g, 1/1024, default 1019): the weight of the old α
	// in its moving average. Every DCETCPRTT,
	// α = α·g/1024 + (1024-g) if a CNP arrived in the period, else α·g/1024.
	DCETCPG uint32
	// DCETCPRTT (dce_tcp_rtt, µs, default 1): the α update period.
	DCETCPRTT uint32
	// RateReduceMonitorPeriod (rate_reduce_monitor_period, µs, default 4):
	// at most one cut per period; a CNP in a period cuts at the start of
	// the next.
	RateReduceMonitorPeriod uint32
	// InitialAlphaValue (initial_alpha_value, 1/1024, default 1023): α when
	// the first CNP allocates the rate limiter.
	InitialAlphaValue uint32

	// Notification point (receiver), roce_np.

	// MinTimeBetweenCNPs (min_time_between_cnps, µs, default 4): a QP sends
	// at most one CNP per this interval, whatever number of CE-marked
	// packets arrive (the first CE after the interval sends one).
	MinTimeBetweenCNPs uint32
	// CNPDSCP (cnp_dscp, default 48): the DSCP of CNPs sent (CS6, so a
	// switch can queue them ahead of data). The ECN field of a CNP is
	// Not-ECT.
	CNPDSCP uint8
	// CNP802pPrio (cnp_802p_prio, default 6): the 802.1p priority of CNPs.
	// Kept for the name's sake: a UDP socket sends untagged frames, so it
	// only matters to a VLAN egress map that derives PCP from skb priority.
	CNP802pPrio uint8
}

// Defaults returns the ConnectX firmware defaults.
func Defaults() Params {
	return Params{
		ClampTgtRate:             false,
		ClampTgtRateAfterTimeInc: true,
		RPGTimeReset:             300,
		RPGByteReset:             32767,
		RPGThreshold:             1,
		RPGMaxRate:               0,
		RPGAIRate:                5,
		RPGHAIRate:               50,
		RPGGD:                    11,
		RPGMinDecFac:             50,
		RPGMinRate:               1,
		RateToSetOnFirstCNP:      0,
		DCETCPG:                  1019,
		DCETCPRTT:                1,
		RateReduceMonitorPeriod:  4,
		InitialAlphaValue:        1023,
		MinTimeBetweenCNPs:       4,
		CNPDSCP:                  48,
		CNP802pPrio:              6,
	}
}

// Validate reports the first setting out of the range the firmware
// accepts, wrapped around syscall.EINVAL.
func (p *Params) Validate() error {
	bad := func(name string, v uint32, rng string) error {
		return fmt.Errorf("dcqcn: %s = %d, want %s: %w", name, v, rng, syscall.EINVAL)
	}
	switch {
	case p.RPGTimeReset == 0:
		return bad("rpg_time_reset", p.RPGTimeReset, "1.. µs")
	case p.RPGThreshold == 0 || p.RPGThreshold > 31:
		return bad("rpg_threshold", p.RPGThreshold, "1..31")
	case p.RPGGD == 0 || p.RPGGD > 15:
		return bad("rpg_gd", p.RPGGD, "1..15")
	case p.RPGMinDecFac > 100:
		return bad("rpg_min_dec_fac", p.RPGMinDecFac, "0..100")
	case p.RPGMinRate == 0:
		return bad("rpg_min_rate", p.RPGMinRate, "1.. Mb/s")
	case p.DCETCPG > 1023:
		return bad("dce_tcp_g", p.DCETCPG, "0..1023")
	case p.DCETCPRTT == 0 || p.DCETCPRTT > 131071:
		return bad("dce_tcp_rtt", p.DCETCPRTT, "1..131071 µs")
	case p.RateReduceMonitorPeriod == 0:
		return bad("rate_reduce_monitor_period", p.RateReduceMonitorPeriod, "1.. µs")
	case p.InitialAlphaValue > 1023:
		return bad("initial_alpha_value", p.InitialAlphaValue, "0..1023")
	case p.CNPDSCP > 63:
		return bad("cnp_dscp", uint32(p.CNPDSCP), "0..63")
	case p.CNP802pPrio > 7:
		return bad("cnp_802p_prio", uint32(p.CNP802pPrio), "0..7")
	}
	return nil
}

// CNPInterval is MinTimeBetweenCNPs as a duration.
func (p *Params) CNPInterval() time.Duration { return us(p.MinTimeBetweenCNPs) }

// CNPTOS is the IPv4 TOS / IPv6 traffic class byte of a CNP: cnp_dscp and
// Not-ECT.
func (p *Params) CNPTOS() uint8 { return p.CNPDSCP << 2 }

func us(v uint32) time.Duration { return time.Duration(v) * time.Microsecond }

// mbps converts a rate in Mb/s to bit/s.
func mbps(v uint32) uint64 { return uint64(v) * 1_000_000 }
