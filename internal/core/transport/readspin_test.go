package transport

import (
	"testing"
	"time"

	"github.com/goroce/goroce/link"
)

// tickClock is a clock that moves by step at every reading.
type tickClock struct {
	stepClock
	step time.Duration
}

func (c *tickClock) Now() time.Time {
	c.now = c.now.Add(c.step)
	return c.now
}

// TestReaderSpinsOnlyOnStreams: a receive path's goroutine polls its socket
// before it parks only while the engine carries a stream, for at most
// readSpin (or readSpinPolls polls under a clock that stands still), and a
// poll that finds a batch is that read's result.
func TestReaderSpinsOnlyOnStreams(t *testing.T) {
	tests := []struct {
		name      string
		stream    bool          // a stream marked just before the read
		after     time.Duration // clock moved after the mark
		step      time.Duration // clock moved at every reading
		dataAt    int           // the poll (from 1) that finds a batch, 0: none
		wantPolls int
		wantWaits int
	}{
		{"no stream: park at once", false, 0, 0, 0, 0, 1},
		{"stream over: park at once", true, streamFor, 0, 0, 0, 1},
		{"stream, still clock: the poll bound", true, 0, 0, 0, readSpinPolls, 1},
		// The clock is read at the first poll, then every readSpinClock: the
		// tenth reading after the first ends the spin.
		{"stream: the time bound", true, 0, readSpin / 10, 0, 10*readSpinClock + 1, 1},
		{"stream: a poll finds a batch", true, 0, 0, 3, 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &tickClock{stepClock: stepClock{now: time.Unix(1000, 0)}}
			e := idleEngine(t, noLink{t}, func(c *Config) { c.Clock = clk })
			polls, waits := 0, 0
			r := newReader(e, func(msgs []link.Message) (int, error) { waits++; return 1, nil }, 4)
			r.spin = func(msgs []link.Message) (int, error) {
				polls++
				if polls == tt.dataAt {
					return 2, nil
				}
				return 0, nil
			}
			if tt.stream {
				e.markStream()
			}
			clk.now = clk.now.Add(tt.after)
			clk.step = tt.step
			n, err := r.read()
			if err != nil {
				t.Fatal(err)
			}
			if polls != tt.wantPolls || waits != tt.wantWaits {
				t.Errorf("%d polls and %d waits, want %d and %d", polls, waits, tt.wantPolls, tt.wantWaits)
			}
			if want := map[bool]int{true: 2, false: 1}[tt.dataAt > 0]; n != want {
				t.Errorf("read %d messages, want %d", n, want)
			}
		})
	}
}
