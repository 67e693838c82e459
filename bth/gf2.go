package bth

import (
	"hash/crc32"
	"math/bits"
)

// GF(2) polynomial arithmetic modulo the reflected CRC-32 polynomial, the
// same technique zlib's crc32_combine uses: multiplying a bare CRC register
// by x^(8n) mod P is the effect of n more zero bytes.

const crcPoly = 0xEDB88320

func leadingZeros32(v uint32) int { return bits.LeadingZeros32(v) }

// multmodp returns a*b mod P (reflected bit order: bit 31 is x^0).
func multmodp(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
	return p
}

// x2n[k] = x^(2^k) mod P.
var x2n [32]uint32

// idBitCRC[i] is the bare CRC register (init 0, no final xor) of the 2-byte
// big-endian value 1<<i: the contribution of IPv4 ID bit i, before the
// bytes that follow it.
var idBitCRC [16]uint32

func init() {
	p := uint32(1) << 30 // x^1
	x2n[0] = p
	for k := 1; k < 32; k++ {
		p = multmodp(p, p)
		x2n[k] = p
	}
	for i := range 16 {
		v := uint16(1) << i
		b := [2]byte{byte(v >> 8), byte(v)}
		// crc32.Update complements the register on entry and exit; starting
		// from all ones gives a zero register, and the result is complemented
		// back to the bare value.
		idBitCRC[i] = ^crc32.Update(0xFFFFFFFF, crc32.IEEETable, b[:])
	}
}

// x8nmodp returns x^(8n) mod P: the operator for appending n zero bytes.
func x8nmodp(n int) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = multmodp(x2n[k&31], p)
		}
	}
	return p
}
