//go:build race

package roce

// raceEnabled: allocation counts are not meaningful under the race detector.
const raceEnabled = true
