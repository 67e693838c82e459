package main

import (
	"encoding/binary"

	"github.com/goroce/goroce/bth"
)

// A sender using UDP GSO hands the kernel one super-datagram for a run of
// equal-size packets (the last may be shorter), and a capture taken before
// the kernel or the NIC splits it (on the sending host, or on a bridge the
// super-datagram crosses whole) holds one frame whose UDP payload is every
// packet end to end. The receiver splits it by the segment size it gets from
// the kernel; a capture does not record that size, so rocedump finds it:
// the size s at which a second BTH of the same QP and P_Key starts and the
// first s bytes carry a valid ICRC. Segment k then gets the IPv4 ID the
// kernel gives it (the super-datagram's ID plus k) and its own lengths.

// segments returns the packets d carries: d itself, or the segments of a
// super-datagram when d's ICRC fails as a whole and a segment size is found
// at which the first segment's ICRC holds.
func segments(d *datagram) []datagram {
	p := d.payload
	if d.err != nil || d.extra || len(p) < 2*(bth.BTHLen+bth.ICRCLen) || icrcOK(d) {
		return []datagram{*d}
	}
	for s := bth.BTHLen + bth.ICRCLen; s+bth.BTHLen <= len(p); s += 4 {
		if !sameFlow(p, p[s:]) {
			continue
		}
		first := *d
		first.payload = p[:s]
		if !icrcOK(&first) {
			continue
		}
		var out []datagram
		for k, lo := 0, 0; lo < len(p); k, lo = k+1, lo+s {
			seg := *d
			seg.payload = p[lo:min(lo+s, len(p))]
			seg.env.IPID = d.env.IPID + uint16(k)
			out = append(out, seg)
		}
		return out
	}
	return []datagram{*d}
}

// sameFlow reports whether b starts with a plausible BTH of the QP and
// P_Key a's does: a segment boundary candidate.
func sameFlow(a, b []byte) bool {
	return bth.Opcode(b[0]).Valid() && binary.BigEndian.Uint16(a[2:]) == binary.BigEndian.Uint16(b[2:]) &&
		a[5] == b[5] && a[6] == b[6] && a[7] == b[7]
}
