//go:build amd64 && !purego

package bth

import (
	"hash/crc32"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// hash/crc32's AVX-512 path folds one 512-bit lane per step, so each step
// waits for the carry-less multiply before it (one chain, about 28 GB/s on
// the bench host). crcIEEE folds four lanes at once, 256 bytes per step,
// which keeps the multipliers busy: twice the rate over a 4 KiB payload, the
// size of every RC WRITE and SEND packet at MTU 4096, and the ICRC is
// computed once where it is sent and once where it is received. Short inputs
// (the ICRC's 48-byte pseudo-header) fold 16 bytes a step and end in the
// same carry-less reduction instead of table lookups.

// clmulMin is the shortest input crcIEEE gives crcClmul (which takes 16
// bytes up): below it slicing-by-8 is as fast here (5.8 ns for 16 bytes
// against 11; 14.6 against 16.7 at 48), and faster than hash/crc32, which
// reaches its own slicing-by-8 through a function value.
const clmulMin = 48

// canFold reports the instructions crcClmul needs: 512-bit carry-less
// multiply, and AVX-512VL for its 128-bit steps. cpu checks that the OS
// saves the 512-bit state.
var canFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ

// crcKeys are the constants of crcClmul. Each folding pair is for one
// distance of d bytes: {x^(8d+32), x^(8d-32)} mod P, bit-reflected and
// shifted left by one as the carry-less multiply of the reflected CRC wants
// them (the construction of Intel's "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ"); the reduction to 32 bits ends in a Barrett
// step. The assembly reads the fields by offset.
type crcKeys struct {
	k256    [2]uint64 // 0: four lanes, 256 bytes ahead
	k64     [2]uint64 // 16: one 512-bit lane, 64 bytes ahead
	lanes   [8]uint64 // 32: a 512-bit lane's 128-bit parts moved 48, 32 and 16 bytes ahead; the last stays
	k32     [2]uint64 // 96: {x^64}: 32 bits ahead, from 96 bits to 64
	barrett [2]uint64 // 112: {P, floor(x^64 / P)}, reflected over 33 bits
}

var foldKeys = newCRCKeys()

func foldKey(e uint64) uint64 { return uint64(xpow(e)) << 1 }

func foldPair(d uint64) [2]uint64 { return [2]uint64{foldKey(8*d + 32), foldKey(8*d - 32)} }

// crcPolyFull is P (crcPoly) with its x^32 term, in normal bit order (bit i
// is x^i).
var crcPolyFull = 1<<32 | uint64(bits.Reverse32(crcPoly))

// reflect33 reverses the low 33 bits of v.
func reflect33(v uint64) uint64 { return bits.Reverse64(v) >> 31 }

// barrettMu is floor(x^64 / P), by long division (normal bit order).
func barrettMu() uint64 {
	// The first quotient bit is x^32; what remains fits in 64 bits.
	q, r := uint64(1)<<32, uint64(crcPolyFull&0xFFFFFFFF)<<32
	for i := 31; i >= 0; i-- {
		if r>>(32+i)&1 != 0 {
			q |= 1 << i
			r ^= crcPolyFull << i
		}
	}
	return q
}

func newCRCKeys() (k crcKeys) {
	k.k256, k.k64 = foldPair(256), foldPair(64)
	p48, p32, p16 := foldPair(48), foldPair(32), foldPair(16)
	k.lanes = [8]uint64{p48[0], p48[1], p32[0], p32[1], p16[0], p16[1], 0, 0}
	k.k32 = [2]uint64{foldKey(64), 0}
	k.barrett = [2]uint64{reflect33(crcPolyFull), reflect33(barrettMu())}
	return k
}

// crcCopyClmul returns the bare CRC register (no inversions) after the
// first n bytes of p, n a multiple of 16 and at least 16, from register crc.
// With dst not nil it also copies those bytes to dst in the same pass
// (crcCopy); dst and p must not overlap.
//
//go:noescape
func crcCopyClmul(crc uint32, dst, p *byte, n int, k *crcKeys) uint32

// crcClmul is crcCopyClmul without a copy.
func crcClmul(crc uint32, p *byte, n int, k *crcKeys) uint32 {
	return crcCopyClmul(crc, nil, p, n, k)
}

// crcIEEE is crc32.Update(c, crc32.IEEETable, p).
func crcIEEE(c uint32, p []byte) uint32 {
	switch {
	case len(p) < clmulMin:
		return crcUpdate(c, p)
	case canFold:
		return crcFold(c, p)
	}
	return crc32.Update(c, crc32.IEEETable, p)
}

// crcShort is crcIEEE for short inputs that live on the stack: it never
// lets p escape, as hash/crc32 does.
func crcShort(c uint32, p []byte) uint32 {
	if canFold && len(p) >= clmulMin {
		return crcFold(c, p)
	}
	return crcUpdate(c, p)
}

// crcFold is crcIEEE's carry-less path, for inputs of at least 16 bytes;
// the last len(p)%16 go through slicing-by-8.
func crcFold(c uint32, p []byte) uint32 {
	n := len(p) &^ 15
	return crcUpdate(^crcClmul(^c, &p[0], n, &foldKeys), p[n:])
}

// crcCopy copies src into dst (as long as src) and returns crcIEEE(c, src),
// reading src once: a packet's payload placed in memory while its ICRC is
// checked costs one pass over the bytes instead of two. dst and src must not
// overlap.
func crcCopy(c uint32, dst, src []byte) uint32 {
	dst = dst[:len(src)]
	if !canFold || len(src) < clmulMin {
		copy(dst, src)
		return crcIEEE(c, src)
	}
	n := len(src) &^ 15
	c = ^crcCopyClmul(^c, &dst[0], &src[0], n, &foldKeys)
	copy(dst[n:], src[n:])
	return crcUpdate(c, src[n:])
}
