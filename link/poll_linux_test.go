//go:build linux

package link

import (
	"encoding/binary"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testsupport/parked"
)

// TestPollFuncs: a receive path polled while its reader goroutine is parked
// in ReadBatch returns at once, with nothing when nothing is queued, and the
// two together receive every datagram exactly once.
func TestPollFuncs(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Config{})
	b := listen(t, "127.0.0.2:0", Config{})
	poll := PollFuncs(b)
	if len(poll) != 1 {
		t.Fatalf("%d poll functions, want 1", len(poll))
	}
	got := make(chan uint32, 1000)
	go func() { // the reader goroutine, parked in the netpoller between batches
		msgs := []Message{{Buf: make([]byte, MaxDatagram)}}
		for {
			msgs[0].Buf = msgs[0].Buf[:MaxDatagram]
			if _, err := b.ReadBatch(msgs); err != nil {
				return
			}
			got <- binary.BigEndian.Uint32(msgs[0].Buf)
		}
	}()
	parked.Wait(t, "link.(*UDP).ReadBatch", 1, 10*time.Second) // it sleeps in the netpoller
	msgs := make([]Message, 4)
	for i := range msgs {
		msgs[i].Buf = make([]byte, MaxDatagram)
	}
	start := time.Now()
	if n, err := poll[0](msgs); n != 0 || err != nil {
		t.Fatalf("poll of an empty socket: %d, %v", n, err)
	}
	// A poll that waited for the parked reader would wait for a datagram that
	// never comes (the test would hang); one second is far above one
	// non-blocking recvmmsg on a loaded host and flags any wait on a timer.
	if d := time.Since(start); d > time.Second {
		t.Fatalf("poll waited %v beside a parked reader", d)
	}
	if !raceEnabled {
		if n := testing.AllocsPerRun(100, func() { poll[0](msgs) }); n != 0 {
			t.Fatalf("an empty poll allocates %.1f times", n)
		}
	}
	const total = 200
	for i := range total {
		var d [8]byte
		binary.BigEndian.PutUint32(d[:], uint32(i))
		if _, err := a.WriteBatch([]Message{{Buf: d[:], Addr: b.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		n, err := poll[0](msgs)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs[:n] {
			got <- binary.BigEndian.Uint32(m.Buf)
		}
		for j := range msgs {
			msgs[j].Buf = msgs[j].Buf[:MaxDatagram]
		}
	}
	seen := map[uint32]bool{}
	deadline := time.After(5 * time.Second)
	for len(seen) < total {
		select {
		case v := <-got:
			if seen[v] {
				t.Fatalf("datagram %d received twice", v)
			}
			seen[v] = true
		case <-deadline:
			t.Fatalf("%d of %d datagrams received", len(seen), total)
		}
	}
	b.Close()
	if _, err := poll[0](msgs); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("poll after Close: %v, want net.ErrClosed", err)
	}
}
