package transport

import (
	"runtime"
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
// readSpin (or readSpinPolls polls under a clock that stands still), or
// readHold (readHoldPolls) for the engine's only path at one P per core, and
// a poll that finds a batch is that read's result.
func TestReaderSpinsOnlyOnStreams(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	tests := []struct {
		name      string
		hold      bool          // the engine's only path
		over      bool          // GOMAXPROCS above the cores
		stream    bool          // a stream marked just before the read
		after     time.Duration // clock moved after the mark
		step      time.Duration // clock moved at every reading
		dataAt    int           // the poll (from 1) that finds a batch, 0: none
		wantPolls int
		wantWaits int
	}{
		{"no stream: park at once", false, false, false, 0, 0, 0, 0, 1},
		{"stream over: park at once", false, false, true, streamFor, 0, 0, 0, 1},
		{"stream, still clock: the poll bound", false, false, true, 0, 0, 0, readSpinPolls, 1},
		// The clock is read at the first poll, then every readSpinClock: the
		// tenth reading after the first ends the spin.
		{"stream: the time bound", false, false, true, 0, readSpin / 10, 0, 10*readSpinClock + 1, 1},
		{"stream: a poll finds a batch", false, false, true, 0, 0, 3, 3, 0},
		{"only path, no stream: park at once", true, false, false, 0, 0, 0, 0, 1},
		{"only path, still clock: the hold's poll bound", true, false, true, 0, 0, 0, readHoldPolls, 1},
		{"only path: the hold's time bound", true, false, true, 0, readHold / 10, 0, 10*readSpinClock + 1, 1},
		{"only path: polls on past readSpin", true, false, true, 0, readSpin, 0, int(readHold/readSpin)*readSpinClock + 1, 1},
		{"only path, oversubscribed: the spin's poll bound", true, true, true, 0, 0, 0, readSpinPolls, 1},
		{"only path, oversubscribed: the spin's time bound", true, true, true, 0, readSpin / 10, 0, 10*readSpinClock + 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procs := runtime.NumCPU()
			if tt.over {
				procs++
			}
			runtime.GOMAXPROCS(procs)
			clk := &tickClock{stepClock: stepClock{now: time.Unix(1000, 0)}}
			e := idleEngine(t, noLink{t}, func(c *Config) { c.Clock = clk })
			polls, waits := 0, 0
			r := newReader(e, func(msgs []link.Message) (int, error) { waits++; return 1, nil }, 4)
			r.hold = tt.hold
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

// TestProcsCheckAsksAgain: the oversubscription check follows GOMAXPROCS,
// asked again every procsEvery calls.
func TestProcsCheckAsksAgain(t *testing.T) {
	prev := runtime.GOMAXPROCS(runtime.NumCPU() + 2)
	defer runtime.GOMAXPROCS(prev)
	var p procsCheck
	if !p.oversubscribed() {
		t.Fatal("GOMAXPROCS above the cores: want oversubscribed")
	}
	runtime.GOMAXPROCS(runtime.NumCPU())
	for i := 1; i < procsEvery; i++ {
		if !p.oversubscribed() {
			t.Fatalf("asked again after %d calls, want %d", i, procsEvery)
		}
	}
	if p.oversubscribed() {
		t.Fatal("GOMAXPROCS back at the cores: want not oversubscribed")
	}
}

// TestOrderedReaderPollsOnStreams: the goroutine of a path CQ pollers share
// polls it again, the lock let go between polls, within the same bounds as a
// path of its own, before it waits outside the lock.
func TestOrderedReaderPollsOnStreams(t *testing.T) {
	prev := runtime.GOMAXPROCS(runtime.NumCPU())
	defer runtime.GOMAXPROCS(prev)
	tests := []struct {
		name      string
		hold      bool
		stream    bool
		step      time.Duration
		wantTakes int
	}{
		{"no stream: wait at once", true, false, 0, 1},
		{"stream, still clock: the poll bound", false, true, 0, readSpinPolls},
		{"only path, still clock: the hold's poll bound", true, true, 0, readHoldPolls},
		{"only path: the hold's time bound", true, true, readHold / 10, 10*readSpinClock + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &tickClock{stepClock: stepClock{now: time.Unix(1000, 0)}}
			e := idleEngine(t, noLink{t}, func(c *Config) { c.Clock = clk; c.RunToCompletion = true })
			takes, waits := 0, 0
			p := &poller{}
			r := newReader(e, func(msgs []link.Message) (int, error) {
				if !p.mu.TryLock() {
					takes++ // under the path's lock, as it should be
				} else {
					p.mu.Unlock()
					t.Error("a poll outside the path's lock")
				}
				return 0, nil
			}, 4)
			r.ordered, r.hold = p, tt.hold
			r.wait = func() error {
				if !p.mu.TryLock() {
					t.Error("a wait under the path's lock")
				} else {
					p.mu.Unlock()
				}
				waits++
				return nil
			}
			if tt.stream {
				e.markStream()
			}
			clk.step = tt.step
			if err := r.orderedOnce(); err != nil {
				t.Fatal(err)
			}
			if takes != tt.wantTakes || waits != 1 {
				t.Errorf("%d polls and %d waits, want %d and 1", takes, waits, tt.wantTakes)
			}
		})
	}
}
