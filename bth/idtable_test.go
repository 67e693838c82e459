package bth

import (
	"math/rand/v2"
	"testing"
)

// solveRef is the solve without tables, as a receiver first did it: undo
// the shift, then reduce against idBasis, failing at the first leading bit
// no basis vector has.
func solveRef(n int, s uint32) (uint16, bool) {
	s = multmodp(unshift(n), s)
	var x uint16
	for s != 0 {
		p := 31 - leadingZeros32(s)
		if idBasis[p] == 0 {
			return 0, false
		}
		s ^= idBasis[p]
		x ^= idCombo[p]
	}
	return x, true
}

// syndromeOf is s for ID x and n bytes after the ID field: the bare CRC of
// x's bits, shifted by n zero bytes.
func syndromeOf(x uint16, n int) uint32 {
	var pure uint32
	for i := range 16 {
		if x&(1<<i) != 0 {
			pure ^= idBitCRC[i]
		}
	}
	return multmodp(x8nmodp(n), pure)
}

// TestIDTableMatchesReduction: for every length tried, the table solves
// every syndrome as the reduction does: each ID's own syndrome to that ID,
// and random ones (almost all of which match no ID) to the same verdict.
func TestIDTableMatchesReduction(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 37, 100, 4133, 1<<14 - 1, 1 << 14, 70000} {
		look := buildIDTable(n).solve
		for x := range 1 << 16 {
			s := syndromeOf(uint16(x), n)
			if got, ok := look(s); !ok || got != uint16(x) {
				t.Fatalf("n=%d: ID %#x solved as %#x %v", n, x, got, ok)
			}
		}
		accepted := 0
		for i := range 200000 {
			s := rng.Uint32()
			if i < 32 {
				s = 1 << i
			}
			gx, gok := look(s)
			wx, wok := solveRef(n, s)
			if gok != wok || gok && gx != wx {
				t.Fatalf("n=%d s=%#x: table %#x %v, reduction %#x %v", n, s, gx, gok, wx, wok)
			}
			if gok {
				accepted++
			}
		}
		// 2^16 of the 2^32 syndromes match an ID.
		if accepted > 20 {
			t.Errorf("n=%d: %d of 200000 random syndromes matched an ID, want about 3", n, accepted)
		}
	}
}

// TestSolveAfterBuildsOnRepeats: a slot builds its table only once one
// length missed it idBuildAfter times in a row; another length in the same
// slot starts the count again; every answer, table or not, is the
// reduction's.
func TestSolveAfterBuildsOnRepeats(t *testing.T) {
	const n, other = 4133 + 7*idSlots, 4133 + 9*idSlots // both in one slot
	sl := &idCache[uint(n)%idSlots]
	sl.table.Store(nil)
	sl.missN.Store(-1)
	check := func(n int, x uint16) {
		t.Helper()
		if got, ok := solveAfter(n, syndromeOf(x, n)); !ok || got != x {
			t.Fatalf("n=%d: ID %#x solved as %#x %v", n, x, got, ok)
		}
	}
	for i := range idBuildAfter/2 - 1 {
		check(n, uint16(i))
	}
	check(other, 1) // resets the count
	check(other, 2)
	for i := range idBuildAfter - 1 {
		check(n, uint16(i+100))
		if sl.table.Load() != nil {
			t.Fatalf("built after %d misses of one length, want %d", i+1, idBuildAfter)
		}
	}
	check(n, 0xBEEF)
	if tab := sl.table.Load(); tab == nil || tab.n != n {
		t.Fatalf("no table for n=%d after %d misses in a row", n, idBuildAfter)
	}
	check(n, 0xFFFF)
	check(other, 3) // a miss: the reduction still answers
}
