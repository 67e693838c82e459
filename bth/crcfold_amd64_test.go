//go:build amd64 && !purego

package bth

import (
	"hash/crc32"
	"testing"
)

// TestFoldKeysArePublished checks the key construction against the
// constants Intel's PCLMULQDQ paper lists for the reflected IEEE CRC
// (folding by 64 and by 16 bytes, 96 to 64 bits, and Barrett's P and mu).
func TestFoldKeysArePublished(t *testing.T) {
	for _, c := range []struct {
		d    uint64
		want [2]uint64
	}{
		{64, [2]uint64{0x154442bd4, 0x1c6e41596}},
		{16, [2]uint64{0x1751997d0, 0x0ccaa009e}},
	} {
		if got := foldPair(c.d); got != c.want {
			t.Errorf("foldPair(%d) = %#x, want %#x", c.d, got, c.want)
		}
	}
	if got := foldKeys.k32[0]; got != 0x163cd6124 {
		t.Errorf("x^64 key = %#x, want 0x163cd6124", got)
	}
	if got, want := foldKeys.barrett, [2]uint64{0x1db710641, 0x1f7011641}; got != want {
		t.Errorf("Barrett constants = %#x, want %#x", got, want)
	}
}

// TestCRCFoldPath runs the folding path itself, whatever crcIEEE chooses on
// this CPU, when the CPU has it.
func TestCRCFoldPath(t *testing.T) {
	if !canFold {
		t.Skip("no AVX-512 carry-less multiply on this CPU")
	}
	p := make([]byte, 5000)
	for i := range p {
		p[i] = byte(i*7 + i>>8)
	}
	for n := 16; n <= len(p); n += 1 + n/300 { // crcClmul takes 16 bytes up
		for _, c := range []uint32{0, 0xFFFFFFFF, 0x12345678} {
			if got, want := crcFold(c, p[:n]), crc32.Update(c, crc32.IEEETable, p[:n]); got != want {
				t.Fatalf("len %d from %#x: %#x, want %#x", n, c, got, want)
			}
		}
	}
	if a := testing.AllocsPerRun(100, func() { crcFold(0, p) }); a != 0 {
		t.Fatalf("%v allocations per fold", a)
	}
}
