package labtest

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Gen is a kernel generation, major.minor of the guests' kernel release: the lab's lanes
// are one generation each, and a row of the suite names the generations it runs on.
type Gen string

// The generations the lab boots: Debian 12 (bookworm) and Debian 13 (trixie).
const (
	Gen61  Gen = "6.1"
	Gen612 Gen = "6.12"
)

var releaseGen = regexp.MustCompile(`^(\d+)\.(\d+)`)

// GenOf returns the generation of a kernel release ("6.12.57+deb13-amd64" is 6.12), or ""
// when release does not start with major.minor.
func GenOf(release string) Gen {
	m := releaseGen.FindStringSubmatch(release)
	if m == nil {
		return ""
	}
	return Gen(m[1] + "." + m[2])
}

// AtLeast reports whether g is generation o or newer.
func (g Gen) AtLeast(o Gen) bool {
	a, b := g.parts(), o.parts()
	return a[0] > b[0] || a[0] == b[0] && a[1] >= b[1]
}

func (g Gen) parts() [2]int {
	maj, min, _ := strings.Cut(string(g), ".")
	x, _ := strconv.Atoi(maj)
	y, _ := strconv.Atoi(min)
	return [2]int{x, y}
}

// Gens is the set of generations a row runs on; empty means every generation.
type Gens []Gen

// Has reports whether the set includes g.
func (s Gens) Has(g Gen) bool { return len(s) == 0 || slices.Contains(s, g) }

// RunsOn skips the test unless the lane's generation is in gens (empty: every one).
func (l *Lab) RunsOn(tb testing.TB, gens Gens) {
	tb.Helper()
	if !gens.Has(l.Gen) {
		tb.Skipf("runs on kernel %v only; this lane is %s (%s)", []Gen(gens), l.Gen, l.Dist)
	}
}
