// Package parked lets a test wait until a goroutine is asleep inside a given
// function (blocked in a select, on a channel, in the netpoller), instead of
// sleeping and hoping it got there: a test of "X wakes a blocked Y" must
// know Y blocked before it does X. It reads the runtime's goroutine dump, so
// it works for any function without hooks in the code under test. Tests only.
package parked

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// running are the goroutine states of one that is not parked.
var running = []string{"running", "runnable", "syscall"}

// Count returns how many goroutines are parked with fn on their stack. fn is
// a function as the dump names it, package path's last element first:
// "roce.(*CQ).Wait", "link.(*UDP).ReadBatch".
func Count(fn string) int {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	n := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		head, stack, _ := strings.Cut(string(g), "\n")
		if asleep(head) && strings.Contains(stack, "/"+fn+"(") {
			n++
		}
	}
	return n
}

// asleep reports whether a dump's header line, "goroutine 7 [select]:" or
// "goroutine 7 [IO wait, 2 minutes]:", is a parked goroutine's.
func asleep(head string) bool {
	_, state, ok := strings.Cut(head, "[")
	if !ok {
		return false
	}
	state, _, _ = strings.Cut(state, "]")
	state, _, _ = strings.Cut(state, ",")
	for _, r := range running {
		if state == r {
			return false
		}
	}
	return true
}

// Wait waits until at least n goroutines are parked in fn, for up to within;
// it fails the test if they never are.
func Wait(t testing.TB, fn string, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for Count(fn) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutine(s) parked in %s after %v, want %d", Count(fn), fn, within, n)
		}
		time.Sleep(time.Millisecond)
	}
}
