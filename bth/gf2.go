package bth

import (
	"hash/crc32"
	"math/bits"
	"sync/atomic"
)

// GF(2) polynomial arithmetic modulo the reflected CRC-32 polynomial, the
// same technique zlib's crc32_combine uses: multiplying a bare CRC register
// by x^(8n) mod P is the effect of n more zero bytes.

const crcPoly = 0xEDB88320

func leadingZeros32(v uint32) int { return bits.LeadingZeros32(v) }

// multmodp returns a*b mod P (reflected bit order: bit 31 is x^0). A
// receiver runs it per IPv4 packet whose ID is not 0 (solveID), with a
// constant per packet length: it branches on a's bits, which repeat from one
// call to the next, and updates b without branches, whose bits need not
// (22 ns per call here, 29 for random b; a branch on b's bits cost 110 ns
// for random b, as from rxe's random IDs).
func multmodp(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		b = b>>1 ^ crcPoly&-(b&1)
	}
	return p
}

// x2n[k] = x^(2^k) mod P. It is a variable initializer, not part of init,
// so that other initializers (the folding keys of crcIEEE) can use xpow.
var x2n = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for k := 1; k < 32; k++ {
		p = multmodp(p, p)
		t[k] = p
	}
	return t
}()

// idBitCRC[i] is the bare CRC register (init 0, no final xor) of the 2-byte
// big-endian value 1<<i: the contribution of IPv4 ID bit i, before the
// bytes that follow it.
var idBitCRC [16]uint32

func init() {
	for i := range 16 {
		v := uint16(1) << i
		b := [2]byte{byte(v >> 8), byte(v)}
		// crc32.Update complements the register on entry and exit; starting
		// from all ones gives a zero register, and the result is complemented
		// back to the bare value.
		idBitCRC[i] = ^crc32.Update(0xFFFFFFFF, crc32.IEEETable, b[:])
	}
	// Row-reduce the 16 contributions once: idBasis[p] has its highest set
	// bit at p, and idCombo[p] records which ID bits it is made of.
	for i := range 16 {
		v, c := idBitCRC[i], uint16(1)<<i
		for v != 0 {
			p := 31 - leadingZeros32(v)
			if idBasis[p] == 0 {
				idBasis[p], idCombo[p] = v, c
				break
			}
			v ^= idBasis[p]
			c ^= idCombo[p]
		}
	}
}

// idBasis and idCombo invert the bare CRC of a 16-bit value (see init).
var (
	idBasis [32]uint32
	idCombo [32]uint16
)

// xOrder is the multiplicative order bound of x modulo P: x^(2^32-1) = 1,
// because x^(2^32) = x (zlib relies on the same fact for its x2n table).
const xOrder = 1<<32 - 1

// xpow returns x^e mod P.
func xpow(e uint64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 0; e != 0; e, k = e>>1, k+1 {
		if e&1 != 0 {
			p = multmodp(x2n[k&31], p)
		}
	}
	return p
}

// unshiftCache[n] caches x^(-8n) mod P for packet-sized n (0 = not yet
// computed; the value itself is never 0 because x is invertible).
var unshiftCache [1 << 14]atomic.Uint32

// unshift returns x^(-8n) mod P: the inverse of appending n zero bytes.
func unshift(n int) uint32 {
	if n < len(unshiftCache) {
		if v := unshiftCache[n].Load(); v != 0 {
			return v
		}
	}
	v := xpow(xOrder - uint64(8*n)%xOrder)
	if n < len(unshiftCache) {
		unshiftCache[n].Store(v)
	}
	return v
}

// slicing8 holds slicing-by-8 tables for the IEEE polynomial. The ICRC's
// masked pseudo-header lives on the stack, and hash/crc32 makes any slice it
// is given escape to the heap (it dispatches through a function value), so
// without crcClmul (crcShort) the pseudo-header is hashed here and only the
// caller's packet bytes go to hash/crc32's PCLMUL path.
var slicing8 [8][256]uint32

func init() {
	slicing8[0] = *crc32.IEEETable
	for i := range 256 {
		c := slicing8[0][i]
		for k := 1; k < 8; k++ {
			c = slicing8[0][c&0xFF] ^ c>>8
			slicing8[k][i] = c
		}
	}
}

// crcUpdate is crc32.Update(crc, crc32.IEEETable, p) without escaping p.
func crcUpdate(crc uint32, p []byte) uint32 {
	t := &slicing8
	crc = ^crc
	for len(p) >= 8 {
		crc ^= uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xFF] ^ t[6][crc>>8&0xFF] ^ t[7][crc&0xFF]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}
