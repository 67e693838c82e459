//go:build linux

package link

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestWaitFuncs: a path's wait returns once a datagram is queued, without
// taking it (the poll after it gets it), returns at once for one queued
// before the wait began, and fails once the link is closed. For the UDP
// link and the in-memory pipe alike.
func TestWaitFuncs(t *testing.T) {
	type pair struct{ tx, rx Link }
	for _, c := range []struct {
		name string
		open func(t *testing.T) pair
	}{
		{"udp", func(t *testing.T) pair {
			return pair{listen(t, "127.0.0.1:0", Config{}), listen(t, "127.0.0.2:0", Config{})}
		}},
		{"pipe", func(t *testing.T) pair {
			a, b := Pipe(netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791"))
			t.Cleanup(func() { a.Close(); b.Close() })
			return pair{a, b}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := c.open(t)
			wait, poll := WaitFuncs(p.rx), PollFuncs(p.rx)
			if len(wait) != 1 || len(poll) != 1 {
				t.Fatalf("%d wait and %d poll functions, want 1 each", len(wait), len(poll))
			}
			msgs := []Message{{Buf: make([]byte, MaxDatagram)}}
			send := func(b byte) {
				t.Helper()
				if _, err := p.tx.WriteBatch([]Message{{Buf: []byte{b, 0, 0, 0}, Addr: p.rx.LocalAddr()}}); err != nil {
					t.Fatal(err)
				}
			}
			take := func(want byte) {
				t.Helper()
				msgs[0].Buf = msgs[0].Buf[:MaxDatagram]
				n, err := poll[0](msgs)
				if err != nil || n != 1 || msgs[0].Buf[0] != want {
					t.Fatalf("poll after the wait: %d, %v, want datagram %d", n, err, want)
				}
			}

			// Queued before the wait: the wait returns and leaves it queued.
			send(1)
			if err := wait[0](); err != nil {
				t.Fatal(err)
			}
			take(1)

			// Queued while waiting: the wait returns on it.
			done := make(chan error, 1)
			go func() { done <- wait[0]() }()
			send(2)
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the wait did not return on a queued datagram")
			}
			take(2)

			// Closed while waiting: the wait fails.
			go func() { done <- wait[0]() }()
			p.rx.Close()
			select {
			case err := <-done:
				if err == nil || !errors.Is(err, net.ErrClosed) {
					t.Fatalf("wait on a closed link: %v, want net.ErrClosed", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the wait did not end when the link closed")
			}
		})
	}
}
