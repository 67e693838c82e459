//go:build linux

package bench

import "testing"

// TestRawRunsKeepsFinalRuns: of each benchmark sequence (b.N 1, then growing)
// only its last run counts, and the summary divides by the median of those.
func TestRawRunsKeepsFinalRuns(t *testing.T) {
	var rs rawRuns
	resultsMu.Lock()
	_, _, _, ok := rs.median()
	resultsMu.Unlock()
	if ok {
		t.Fatal("no runs: want no median")
	}
	for _, seq := range [][]float64{{10, 500, 1.8e6}, {12, 600, 1.7e6}, {9, 1.9e6}, {11, 400, 1.6e6}} {
		for i, pps := range seq {
			n := 1
			if i > 0 {
				n = 1000 * i
			}
			rs.add(n, rawRun{pps: pps})
		}
	}
	resultsMu.Lock()
	defer resultsMu.Unlock()
	mid, lo, hi, ok := rs.median()
	if !ok || len(rs.final) != 4 {
		t.Fatalf("final runs %d, ok %v: want the 4 sequences' last runs", len(rs.final), ok)
	}
	if lo != 1.6e6 || hi != 1.9e6 || mid.pps != 1.8e6 {
		t.Fatalf("median %.0f in %.0f-%.0f: want 1800000 (the upper middle of four) in 1600000-1900000", mid.pps, lo, hi)
	}
	rs.median()
	if len(rs.final) != 4 {
		t.Fatalf("a second median added runs: %d", len(rs.final))
	}
}
