package bth

// PSN is a 24-bit packet sequence number (IBA 9.7.1). All arithmetic is
// modulo 2^24; ordering is defined over half the sequence space, as
// serial-number arithmetic (RFC 1982) does.
type PSN uint32

// PSNMask keeps the low 24 bits of a PSN.
const PSNMask = 0xFFFFFF

// psnHalf is half the PSN space: the largest forward distance.
const psnHalf = 1 << 23

// Add returns p+n modulo 2^24; n may be negative.
func (p PSN) Add(n int) PSN { return PSN((int(p) + n) & PSNMask) }

// Diff returns the signed distance p-q in (-2^23, 2^23]: positive when p is
// after q. A distance of exactly 2^23 is reported as +2^23 both ways.
func (p PSN) Diff(q PSN) int32 {
	d := int32((uint32(p) - uint32(q)) & PSNMask)
	if d > psnHalf {
		d -= 1 << 24
	}
	return d
}

// Before reports whether p precedes q (p.Diff(q) < 0).
func (p PSN) Before(q PSN) bool { return p.Diff(q) < 0 }

// After reports whether p follows q (p.Diff(q) > 0).
func (p PSN) After(q PSN) bool { return p.Diff(q) > 0 }

// InWindow reports whether p lies in the n PSNs starting at start,
// i.e. start <= p < start+n modulo 2^24. n <= 0 is an empty window;
// n >= 2^24 covers every PSN.
func (p PSN) InWindow(start PSN, n int) bool {
	if n <= 0 {
		return false
	}
	return int((uint32(p)-uint32(start))&PSNMask) < n
}
