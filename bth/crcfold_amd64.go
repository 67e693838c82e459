//go:build amd64 && !purego

package bth

import (
	"hash/crc32"

	"golang.org/x/sys/cpu"
)

// hash/crc32's AVX-512 path folds one 512-bit lane per step, so each step
// waits for the carry-less multiply before it (one chain, about 28 GB/s on
// the bench host). crcIEEE folds four lanes at once, 256 bytes per step,
// which keeps the multipliers busy: twice the rate over a 4 KiB payload, the
// size of every RC WRITE and SEND packet at MTU 4096, and the ICRC is checked
// once where it is sent and once where it is received.

// foldMin is the shortest input worth the fold's fixed cost (the reduction
// and the 16 bytes it leaves, hashed with slicing-by-8).
const foldMin = 256

// canFold reports the instructions fold256 needs: 512-bit carry-less
// multiply, and AVX-512VL for its 128-bit tail. cpu checks that the OS
// saves the 512-bit state.
var canFold = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ

// crcKeys are the folding constants of fold256, each pair for one folding
// distance of d bytes: {x^(8d+32), x^(8d-32)} mod P, bit-reflected and
// shifted left by one as the carry-less multiply of the reflected CRC wants
// them (the construction of Intel's "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ").
type crcKeys struct {
	k256  [2]uint64 // four lanes, 256 bytes ahead
	k64   [2]uint64 // one 512-bit lane, 64 bytes ahead
	lanes [8]uint64 // the 128-bit parts of a 512-bit lane: 48, 32, 16 bytes ahead, and the last stays
}

var foldKeys = newCRCKeys()

func foldKey(e uint64) uint64 { return uint64(xpow(e)) << 1 }

func foldPair(d uint64) [2]uint64 { return [2]uint64{foldKey(8*d + 32), foldKey(8*d - 32)} }

func newCRCKeys() (k crcKeys) {
	k.k256, k.k64 = foldPair(256), foldPair(64)
	p48, p32, p16 := foldPair(48), foldPair(32), foldPair(16)
	k.lanes = [8]uint64{p48[0], p48[1], p32[0], p32[1], p16[0], p16[1], 0, 0}
	return k
}

// fold256 folds the first n bytes of p (n a multiple of 16, at least 256)
// with the bare register crc xored into their first four bytes, and returns
// the 16 bytes whose bare CRC (init 0) is the bare CRC of those n bytes.
//
//go:noescape
func fold256(crc uint32, p *byte, n int, k *crcKeys) (lo, hi uint64)

// crcIEEE is crc32.Update(c, crc32.IEEETable, p).
func crcIEEE(c uint32, p []byte) uint32 {
	if !canFold || len(p) < foldMin {
		return crc32.Update(c, crc32.IEEETable, p)
	}
	return crcFold(c, p)
}

// crcFold is crcIEEE's folding path, for inputs of at least foldMin bytes.
func crcFold(c uint32, p []byte) uint32 {
	n := len(p) &^ 15
	lo, hi := fold256(^c, &p[0], n, &foldKeys)
	var r [16]byte
	for i := range 8 {
		r[i], r[8+i] = byte(lo>>(8*i)), byte(hi>>(8*i))
	}
	// The folded bytes stand for the first n of p: their CRC from a zero
	// bare register (crcUpdate from all ones) continues over the rest.
	return crcUpdate(crcUpdate(0xFFFFFFFF, r[:]), p[n:])
}
