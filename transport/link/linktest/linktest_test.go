package linktest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/transport/link"
)

var (
	addrA = netip.MustParseAddrPort("10.0.0.1:4791")
	addrB = netip.MustParseAddrPort("10.0.0.2:4791")
)

func msgs(n int) []link.Message {
	m := make([]link.Message, n)
	for i := range m {
		m[i].Buf = link.GetBuffer()[:]
	}
	return m
}

// numbered returns n datagrams carrying their index in the first 4 bytes.
func numbered(n int, dst netip.AddrPort) []link.Message {
	out := make([]link.Message, n)
	for i := range out {
		b := make([]byte, 16)
		binary.BigEndian.PutUint32(b, uint32(i))
		out[i] = link.Message{Buf: b, Addr: dst}
	}
	return out
}

// drain reads everything that is queued at l without blocking for more,
// returning the datagrams' first 4 bytes as numbers. Use inside synctest
// after synctest.Wait, or with datagrams known to be queued.
func drain(t *testing.T, l link.Link) []uint32 {
	t.Helper()
	var got []uint32
	in := msgs(l.BatchSize())
	for {
		done := make(chan int, 1)
		go func() {
			n, _ := l.ReadBatch(in)
			done <- n
		}()
		synctest.Wait()
		select {
		case n := <-done:
			for _, m := range in[:n] {
				got = append(got, binary.BigEndian.Uint32(m.Buf))
			}
		default:
			// Nothing queued: unblock the reader by closing and finish.
			l.Close()
			<-done
			return got
		}
	}
}

func TestPipe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe(addrA, addrB)
		defer a.Close()
		defer b.Close()
		if n, err := a.WriteBatch(numbered(100, addrB)); n != 100 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		in := msgs(8)
		n, err := b.ReadBatch(in)
		if err != nil || n != 8 {
			t.Fatalf("ReadBatch = %d, %v; want a full batch of 8", n, err)
		}
		for i, m := range in[:n] {
			if m.Addr != addrA || m.Local != addrB.Addr() || binary.BigEndian.Uint32(m.Buf) != uint32(i) || len(m.Buf) != 16 {
				t.Fatalf("datagram %d: %+v", i, m)
			}
		}
		// And the other direction.
		if _, err := b.WriteBatch([]link.Message{{Buf: []byte("pong"), Addr: addrA}}); err != nil {
			t.Fatal(err)
		}
		if n, err := a.ReadBatch(in[:1]); n != 1 || err != nil || string(in[0].Buf) != "pong" || in[0].Addr != addrB {
			t.Fatalf("reverse ReadBatch = %d, %v, %+v", n, err, in[0])
		}
	})
}

func TestPipeCloseUnblocksRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe(addrA, addrB)
		defer a.Close()
		errc := make(chan error, 1)
		go func() {
			_, err := b.ReadBatch(msgs(1))
			errc <- err
		}()
		synctest.Wait() // the reader is durably blocked
		select {
		case err := <-errc:
			t.Fatalf("ReadBatch returned early: %v", err)
		default:
		}
		b.Close()
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close = %v, want net.ErrClosed", err)
		}
		// Writes to a closed peer vanish; writes on a closed end fail.
		if n, err := a.WriteBatch(numbered(1, addrB)); n != 1 || err != nil {
			t.Fatalf("write to closed peer = %d, %v", n, err)
		}
		if _, err := b.WriteBatch(numbered(1, addrA)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write on closed end = %v", err)
		}
	})
}

func TestPipeFullQueueDrops(t *testing.T) {
	a, b := Pipe(addrA, addrB)
	defer a.Close()
	defer b.Close()
	a.WriteBatch(numbered(PipeQueueLen+10, addrB))
	if got := b.(*PipeEnd).Dropped(); got != 10 {
		t.Fatalf("Dropped = %d, want 10", got)
	}
}

// run sends n numbered datagrams through a Lossy A->B and returns what B got
// and the Lossy's counters.
func run(t *testing.T, cfg LossConfig, n int) ([]uint32, *Lossy) {
	t.Helper()
	var got []uint32
	var lossy *Lossy
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe(addrA, addrB)
		lossy = NewLossy(a, cfg)
		defer lossy.Close()
		// Several batches, so decisions span WriteBatch calls.
		all := numbered(n, addrB)
		for i := 0; i < n; i += 10 {
			batch := all[i:min(i+10, n)]
			if _, err := lossy.WriteBatch(batch); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(cfg.Delay + 2*ReorderHold) // virtual: let the delay line empty
		synctest.Wait()
		got = drain(t, b)
	})
	return got, lossy
}

func TestLossyDeterministic(t *testing.T) {
	cfg := LossConfig{Seed: 42, Drop: 0.1, Dup: 0.05, Reorder: 0.05, Corrupt: 0.02, Delay: time.Millisecond}
	first, l1 := run(t, cfg, 2000)
	second, l2 := run(t, cfg, 2000)
	if !slices.Equal(first, second) {
		t.Fatalf("same seed, different deliveries (%d vs %d datagrams)", len(first), len(second))
	}
	if l1.Dropped.Load() != l2.Dropped.Load() || l1.Duplicated.Load() != l2.Duplicated.Load() {
		t.Fatal("same seed, different counters")
	}
	cfg.Seed = 43
	third, _ := run(t, cfg, 2000)
	if slices.Equal(first, third) {
		t.Fatal("different seeds gave identical deliveries")
	}
	t.Logf("seed 42: %d delivered of 2000; dropped %d dup %d reordered %d corrupted %d",
		len(first), l1.Dropped.Load(), l1.Duplicated.Load(), l1.Reordered.Load(), l1.Corrupted.Load())
}

func TestLossyRates(t *testing.T) {
	const n = 3000 // with duplicates, below PipeQueueLen
	tests := []struct {
		name    string
		cfg     LossConfig
		counter func(*Lossy) uint64
		p       float64
	}{
		{"drop 1%", LossConfig{Seed: 1, Drop: 0.01}, func(l *Lossy) uint64 { return l.Dropped.Load() }, 0.01},
		{"drop 20%", LossConfig{Seed: 2, Drop: 0.2}, func(l *Lossy) uint64 { return l.Dropped.Load() }, 0.2},
		{"dup 5%", LossConfig{Seed: 3, Dup: 0.05}, func(l *Lossy) uint64 { return l.Duplicated.Load() }, 0.05},
		{"reorder 10%", LossConfig{Seed: 4, Reorder: 0.1}, func(l *Lossy) uint64 { return l.Reordered.Load() }, 0.1},
		{"corrupt 5%", LossConfig{Seed: 5, Corrupt: 0.05}, func(l *Lossy) uint64 { return l.Corrupted.Load() }, 0.05},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, l := run(t, tt.cfg, n)
			c := float64(tt.counter(l)) / n
			// 5 standard deviations of a binomial: fails only if the wiring is wrong.
			tol := 5 * sqrt(tt.p*(1-tt.p)/n)
			if c < tt.p-tol || c > tt.p+tol {
				t.Errorf("rate %.4f, want %.3f ± %.4f", c, tt.p, tol)
			}
			want := n - int(l.Dropped.Load()) + int(l.Duplicated.Load())
			if len(got) != want || int(l.Sent.Load()) != want {
				t.Errorf("delivered %d, Sent %d, want %d", len(got), l.Sent.Load(), want)
			}
		})
	}
}

func sqrt(x float64) float64 {
	z := x
	for i := 0; i < 50; i++ {
		z -= (z*z - x) / (2 * z)
	}
	return z
}

func TestLossyReorderSwapsPairs(t *testing.T) {
	got, l := run(t, LossConfig{Reorder: 1}, 6)
	// Every datagram wants to be held; one is held at a time, so the next
	// overtakes it: 1 0 3 2 5 4.
	if want := []uint32{1, 0, 3, 2, 5, 4}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if l.Reordered.Load() != 3 {
		t.Fatalf("Reordered = %d, want 3", l.Reordered.Load())
	}
}

func TestLossyHeldAloneIsFlushed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe(addrA, addrB)
		l := NewLossy(a, LossConfig{Reorder: 1})
		defer l.Close()
		start := time.Now()
		l.WriteBatch(numbered(1, addrB))
		n, err := b.ReadBatch(msgs(1))
		if n != 1 || err != nil {
			t.Fatalf("ReadBatch = %d, %v", n, err)
		}
		if d := time.Since(start); d != ReorderHold {
			t.Fatalf("held datagram arrived after %v, want %v", d, ReorderHold)
		}
	})
}

func TestLossyDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe(addrA, addrB)
		const delay = 30 * time.Millisecond
		l := NewLossy(a, LossConfig{Delay: delay})
		defer l.Close()
		start := time.Now()
		l.WriteBatch(numbered(3, addrB))
		time.Sleep(delay / 2)
		l.WriteBatch(numbered(1, addrB))
		in := msgs(8)
		n, _ := b.ReadBatch(in)
		if d := time.Since(start); n != 3 || d != delay {
			t.Fatalf("first batch: %d datagrams after %v, want 3 after %v", n, d, delay)
		}
		n, _ = b.ReadBatch(in)
		if d := time.Since(start); n != 1 || d != delay+delay/2 {
			t.Fatalf("second batch: %d datagrams after %v", n, d)
		}
		if l.Delayed.Load() != 4 {
			t.Fatalf("Delayed = %d", l.Delayed.Load())
		}
	})
}

func TestLossyCorruptFlipsOneBit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe(addrA, addrB)
		l := NewLossy(a, LossConfig{Seed: 7, Corrupt: 1})
		defer l.Close()
		orig := bytes.Repeat([]byte{0x5a}, 64)
		l.WriteBatch([]link.Message{{Buf: slices.Clone(orig), Addr: addrB}})
		in := msgs(1)
		if _, err := b.ReadBatch(in); err != nil {
			t.Fatal(err)
		}
		diff := 0
		for i := range orig {
			for x := orig[i] ^ in[0].Buf[i]; x != 0; x &= x - 1 {
				diff++
			}
		}
		if diff != 1 || l.Corrupted.Load() != 1 {
			t.Fatalf("%d bits differ, Corrupted %d; want 1, 1", diff, l.Corrupted.Load())
		}
	})
}

func TestLossyDropFn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := Pipe(addrA, addrB)
		// Drop outgoing datagram 1 and incoming "ack 0".
		l := NewLossy(a, LossConfig{DropFn: func(d Dir, p []byte) bool {
			return (d == Send && binary.BigEndian.Uint32(p) == 1) || (d == Recv && string(p) == "ack 0")
		}})
		defer l.Close()
		l.WriteBatch(numbered(3, addrB))
		in := msgs(8)
		n, _ := b.ReadBatch(in)
		if n != 2 || binary.BigEndian.Uint32(in[0].Buf) != 0 || binary.BigEndian.Uint32(in[1].Buf) != 2 {
			t.Fatalf("peer got %d datagrams", n)
		}
		for i := 0; i < 2; i++ {
			b.WriteBatch([]link.Message{{Buf: fmt.Appendf(nil, "ack %d", i), Addr: addrA}})
		}
		first := &in[0].Buf[:1][0]
		n, _ = l.ReadBatch(in)
		if n != 1 || string(in[0].Buf) != "ack 1" {
			t.Fatalf("read %d datagrams, first %q; want only ack 1", n, in[0].Buf)
		}
		if &in[0].Buf[:1][0] != first {
			t.Fatal("the kept datagram moved slot 0 to another buffer (copy, never swap)")
		}
		if l.DroppedFn.Load() != 2 {
			t.Fatalf("DroppedFn = %d, want 2", l.DroppedFn.Load())
		}
	})
}
