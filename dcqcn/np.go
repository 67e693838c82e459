package dcqcn

import "time"

// NP is the notification point of one QP: it decides which CE-marked
// packets are answered with a CNP. A QP sends at most one CNP per interval
// (min_time_between_cnps); the first CE-marked packet after the interval
// sends one. The zero NP has sent none.
type NP struct {
	sent bool
	last time.Time
}

// OnCE takes a CE-marked packet that arrived at now and reports whether to
// send a CNP for it.
func (n *NP) OnCE(now time.Time, interval time.Duration) bool {
	if n.sent && now.Sub(n.last) < interval {
		return false
	}
	n.sent, n.last = true, now
	return true
}

// ECN codepoints: the low two bits of the IPv4 TOS byte and the IPv6
// traffic class (RFC 3168).
const (
	NotECT  = 0b00
	ECT1    = 0b01
	ECT0    = 0b10
	CE      = 0b11
	ecnMask = 0b11
)

// IsCE reports whether a TOS / traffic class byte carries CE.
func IsCE(tos uint8) bool { return tos&ecnMask == CE }

// DataTOS returns the TOS byte (IPv6: traffic class) of a data packet from
// the QP's or AH's traffic class: with congestion control on, its DSCP with
// ECT(0); off, the traffic class as it is, as rxe sends it.
func DataTOS(tclass uint8, on bool) uint8 {
	if !on {
		return tclass
	}
	return tclass&^ecnMask | ECT0
}
