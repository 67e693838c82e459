package parked

import (
	"testing"
	"time"
)

func TestAsleep(t *testing.T) {
	for head, want := range map[string]bool{
		"goroutine 7 [select]:":               true,
		"goroutine 7 [IO wait, 2 minutes]:":   true,
		"goroutine 7 [chan receive]:":         true,
		"goroutine 7 [sync.Mutex.Lock]:":      true,
		"goroutine 7 [running]:":              false,
		"goroutine 7 [runnable]:":             false,
		"goroutine 7 [syscall, 3 minutes]:":   false,
		"goroutine 7 [running, locked to th]": false,
		"not a header":                        false,
	} {
		if got := asleep(head); got != want {
			t.Errorf("asleep(%q) = %v, want %v", head, got, want)
		}
	}
}

//go:noinline
func blockOn(ch chan struct{}) { <-ch }

// TestWaitSeesParkedGoroutine: Count finds a goroutine blocked in a named
// function once it blocked, and not after it left.
func TestWaitSeesParkedGoroutine(t *testing.T) {
	const fn = "parked.blockOn"
	if n := Count(fn); n != 0 {
		t.Fatalf("Count before = %d", n)
	}
	ch := make(chan struct{})
	done := make(chan struct{})
	go func() { blockOn(ch); close(done) }()
	Wait(t, fn, 1, 10*time.Second)
	close(ch)
	<-done
	if n := Count(fn); n != 0 {
		t.Fatalf("Count after = %d", n)
	}
}
