package roce

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
)

var (
	addrA = netip.MustParseAddr("127.0.0.1")
	addrB = netip.MustParseAddr("127.0.0.2")
)

// pipePair opens two devices joined by an in-memory link.Pipe.
func pipePair(t testing.TB, opts ...Option) (*Device, *Device) {
	t.Helper()
	la, lb := link.Pipe(netip.AddrPortFrom(addrA, RoCEv2Port), netip.AddrPortFrom(addrB, RoCEv2Port))
	a, err := OpenLink(la, append([]Option{WithMTU(MTU4096)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenLink(lb, append([]Option{WithMTU(MTU4096)}, opts...)...)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// pipeDevice opens one device on a Pipe whose other end nobody reads.
func pipeDevice(t testing.TB, opts ...Option) *Device {
	t.Helper()
	la, lb := link.Pipe(netip.AddrPortFrom(addrA, RoCEv2Port), netip.AddrPortFrom(addrB, RoCEv2Port))
	d, err := OpenLink(la, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close(); lb.Close() })
	return d
}

func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErrno fails unless err is an *Error whose errno is want.
func wantErrno(t testing.TB, err error, want syscall.Errno) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want %v", want)
	}
	var re *Error
	if !errors.As(err, &re) {
		t.Fatalf("error %v (%T) is not a *roce.Error", err, err)
	}
	if !errors.Is(err, want) {
		t.Fatalf("got %v, want errno %v (%d)", err, want, int(want))
	}
}

func wantClosed(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, net.ErrClosed) {
		t.Fatalf("got %v, want an error matching net.ErrClosed", err)
	}
}

// pollN polls cq until n completions arrived or timeout passes; it then checks for
// a short while that no further completion arrives (exactly n).
func pollN(t testing.TB, cq *CQ, n int, timeout time.Duration) []WC {
	t.Helper()
	out := make([]WC, 0, n)
	buf := make([]WC, 64)
	deadline := time.Now().Add(timeout)
	for len(out) < n {
		k, err := cq.Poll(buf)
		if err != nil {
			t.Fatalf("poll: %v (after %d of %d completions)", err, len(out), n)
		}
		out = append(out, buf[:k]...)
		if k > 0 {
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("timeout: %d of %d completions", len(out), n)
		}
		noErr(t, cq.ReqNotify(false))
		if k, _ = cq.Poll(buf); k > 0 {
			out = append(out, buf[:k]...)
			continue
		}
		select {
		case <-cq.Notify():
		case <-time.After(20 * time.Millisecond):
		}
	}
	if len(out) > n {
		t.Fatalf("got %d completions, want exactly %d: extra %+v", len(out), n, out[n:])
	}
	return out
}

// noMoreWC checks that cq stays empty for d.
// It is a negative window: a loaded host shortens the stretch of the
// engine's work it covers but never fails a correct engine. Where a counter
// or an ordered completion proves the exchange was processed, wait for that
// first and pass 0: the check is then exact.
func noMoreWC(t testing.TB, cq *CQ, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	var wc [4]WC
	if k, err := cq.Poll(wc[:]); err != nil || k != 0 {
		t.Fatalf("unexpected completions: %d %+v err %v", k, wc[:k], err)
	}
}
