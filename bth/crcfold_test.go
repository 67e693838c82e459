package bth

import (
	"hash/crc32"
	"math/rand"
	"testing"
)

// TestCRCIEEEMatchesHashCRC32 checks crcIEEE and crcShort against
// hash/crc32 over every length up to a few folding steps past 1 KiB and the
// MTU-sized ones, each at a random alignment within a cache line and from a
// random register.
func TestCRCIEEEMatchesHashCRC32(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	buf := make([]byte, 9000+64)
	r.Read(buf)
	lens := []int{4096, 4112, 4124, 4140, 8192, 9000}
	for n := range 1300 {
		lens = append(lens, n)
	}
	for _, n := range lens {
		off := r.Intn(64)
		p := buf[off : off+n]
		c := r.Uint32()
		want := crc32.Update(c, crc32.IEEETable, p)
		if got := crcIEEE(c, p); got != want {
			t.Fatalf("crcIEEE: len %d at offset %d from %#x: %#x, want %#x", n, off, c, got, want)
		}
		if got := crcShort(c, p); got != want {
			t.Fatalf("crcShort: len %d at offset %d from %#x: %#x, want %#x", n, off, c, got, want)
		}
	}
}

func FuzzCRCIEEE(f *testing.F) {
	f.Add(make([]byte, 300), uint32(0))
	f.Add(make([]byte, 4112), uint32(0xFFFFFFFF))
	f.Fuzz(func(t *testing.T, p []byte, c uint32) {
		if got, want := crcIEEE(c, p), crc32.Update(c, crc32.IEEETable, p); got != want {
			t.Fatalf("len %d from %#x: %#x, want %#x", len(p), c, got, want)
		}
	})
}

// BenchmarkCRCIEEE4K puts crcIEEE beside hash/crc32 over a 4 KiB payload.
func BenchmarkCRCIEEE4K(b *testing.B) {
	p := make([]byte, 4096)
	b.Run("crcIEEE", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		var c uint32
		for b.Loop() {
			c = crcIEEE(c, p)
		}
	})
	b.Run("hash-crc32", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		var c uint32
		for b.Loop() {
			c = crc32.Update(c, crc32.IEEETable, p)
		}
	})
}
