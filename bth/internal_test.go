package bth

import (
	"hash/crc32"
	"testing"
)

func TestCRCUpdateMatchesStdlib(t *testing.T) {
	b := make([]byte, 200)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	for n := range len(b) {
		for _, seed := range []uint32{0, 0xDEADBEEF} {
			if got, want := crcUpdate(seed, b[:n]), crc32.Update(seed, crc32.IEEETable, b[:n]); got != want {
				t.Fatalf("n=%d seed=%#x: %#x, want %#x", n, seed, got, want)
			}
		}
	}
}

func TestMultmodp(t *testing.T) {
	// Appending n zero bytes to a bare CRC register is multiplication by x^(8n).
	for _, n := range []int{0, 1, 2, 7, 100, 4133} {
		reg := uint32(0x12345678)
		want := ^crc32.Update(^reg, crc32.IEEETable, make([]byte, n))
		if got := multmodp(x8nmodp(n), reg); got != want {
			t.Errorf("n=%d: %#x, want %#x", n, got, want)
		}
	}
}

func TestUnshift(t *testing.T) {
	if multmodp(x2n[31], x2n[31]) != x2n[0] {
		t.Fatal("x^(2^32) != x mod P")
	}
	for _, n := range []int{0, 1, 14, 4133, 1 << 14, 100000} {
		for range 2 { // cold, then cached
			if got := multmodp(unshift(n), x8nmodp(n)); got != 1<<31 {
				t.Errorf("n=%d: x^(-8n) * x^(8n) = %#x", n, got)
			}
		}
	}
}

// x8nmodp returns x^(8n) mod P: the operator for appending n zero bytes
// (the forward operation unshift inverts; only the tests need it).
func x8nmodp(n int) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n != 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = multmodp(x2n[k&31], p)
		}
	}
	return p
}
