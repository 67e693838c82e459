package bth

import (
	"bytes"
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

// TestCRCCopyPlacesAndHashes checks crcCopy over the lengths
// TestCRCIEEEMatchesHashCRC32 uses, source and destination at independent
// alignments: the CRC is hash/crc32's, the destination holds the source, and
// not a byte around it changes.
func TestCRCCopyPlacesAndHashes(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	src := make([]byte, 9000+64)
	r.Read(src)
	dst := make([]byte, 9000+192)
	lens := []int{4096, 4112, 4124, 8192, 9000}
	for n := range 1300 {
		lens = append(lens, n)
	}
	for _, n := range lens {
		so, do := r.Intn(64), 64+r.Intn(64)
		p := src[so : so+n]
		for i := range dst {
			dst[i] = 0xA5
		}
		c := r.Uint32()
		want := crc32.Update(c, crc32.IEEETable, p)
		if got := crcCopy(c, dst[do:do+n], p); got != want {
			t.Fatalf("len %d (src +%d, dst +%d) from %#x: %#x, want %#x", n, so, do, c, got, want)
		}
		if !bytes.Equal(dst[do:do+n], p) {
			t.Fatalf("len %d (src +%d, dst +%d): destination differs from the source", n, so, do)
		}
		for i, b := range dst {
			if (i < do || i >= do+n) && b != 0xA5 {
				t.Fatalf("len %d (src +%d, dst +%d): byte %d outside the destination changed", n, so, do, i)
			}
		}
	}
}

func FuzzCRCIEEE(f *testing.F) {
	f.Add(make([]byte, 300), uint32(0))
	f.Add(make([]byte, 4112), uint32(0xFFFFFFFF))
	f.Fuzz(func(t *testing.T, p []byte, c uint32) {
		want := crc32.Update(c, crc32.IEEETable, p)
		if got := crcIEEE(c, p); got != want {
			t.Fatalf("len %d from %#x: %#x, want %#x", len(p), c, got, want)
		}
		dst := make([]byte, len(p))
		if got := crcCopy(c, dst, p); got != want || !bytes.Equal(dst, p) {
			t.Fatalf("crcCopy: len %d from %#x: %#x, want %#x, copy equal %v", len(p), c, got, want, bytes.Equal(dst, p))
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

// BenchmarkCRCCopy4K puts crcCopy beside a copy followed by crcIEEE, as a
// receiver places a 4 KiB payload: the packets come from a 64 KiB train
// buffer and land one after another across a 1 MiB region.
func BenchmarkCRCCopy4K(b *testing.B) {
	src := make([]byte, 64<<10)
	dst := make([]byte, 1<<20)
	const n = 4096
	run := func(b *testing.B, place func(d, s []byte) uint32) {
		b.SetBytes(n)
		i := 0
		for b.Loop() {
			so := (i * (n + 16)) % (len(src) - n)
			do := (i * n) % len(dst)
			place(dst[do:do+n], src[so:so+n])
			i++
		}
	}
	b.Run("fused", func(b *testing.B) {
		run(b, func(d, s []byte) uint32 { return crcCopy(0, d, s) })
	})
	b.Run("copy-then-crc", func(b *testing.B) {
		run(b, func(d, s []byte) uint32 { copy(d, s); return crcIEEE(0, s) })
	})
}
