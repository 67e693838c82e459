package impair

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/link"
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

// run sends n numbered datagrams through a Lossy A->B and returns what B got
// and the Lossy's counters.
func run(t *testing.T, cfg LossConfig, n int) ([]uint32, *Lossy) {
	t.Helper()
	var got []uint32
	var lossy *Lossy
	synctest.Test(t, func(t *testing.T) {
		a, b := link.Pipe(addrA, addrB)
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
		a, b := link.Pipe(addrA, addrB)
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
		a, b := link.Pipe(addrA, addrB)
		const delay = 30 * time.Millisecond
		l := NewLossy(a, LossConfig{Delay: delay})
		defer l.Close()
		start := time.Now()
		l.WriteBatch(numbered(3, addrB))
		time.Sleep(delay / 2)
		l.WriteBatch(numbered(1, addrB))
		in := msgs(8)
		// The pipe queues a batch datagram by datagram, so the reader may wake
		// between them; all three must still arrive at the same instant.
		for got := 0; got < 3; {
			n, _ := b.ReadBatch(in[got:3])
			if d := time.Since(start); d != delay {
				t.Fatalf("first batch: datagram %d after %v, want all 3 after %v", got, d, delay)
			}
			got += n
		}
		n, _ := b.ReadBatch(in)
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
		a, b := link.Pipe(addrA, addrB)
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
		a, b := link.Pipe(addrA, addrB)
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

// TestLossyTrainSegments: a train is impaired segment by segment (DropFn
// drops the second), the survivors arrive as single datagrams with the
// message's header fields, and each IPv4 segment's ICRC, computed for the ID
// it would have had in a GSO super-datagram, was re-keyed for the ID 0 it
// has alone.
func TestLossyTrainSegments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := link.Pipe(addrA, addrB)
		l := NewLossy(a, LossConfig{DropFn: func(d Dir, p []byte) bool { return d == Send && p[12] == 1 }})
		defer l.Close()
		const seg, n = 200, 4
		var pieces [][]byte
		for i := range n {
			p := make([]byte, seg)
			p[0] = 0x64 // UD SEND ONLY
			p[12] = byte(i)
			env := bth.Envelope{Src: addrA.Addr(), Dst: addrB.Addr(), DF: true, SrcPort: addrA.Port(), DstPort: addrB.Port(), IPID: link.TrainIPv4ID(seg, i)}
			bth.PutICRC(&env, p)
			pieces = append(pieces, p[:12], p[12:])
		}
		if _, err := l.WriteBatch([]link.Message{{Pieces: pieces, SegSize: seg, Addr: addrB, TOS: 0xb8, TTL: 3}}); err != nil {
			t.Fatal(err)
		}
		in := msgs(8)
		k, err := b.ReadBatch(in)
		if k != n-1 || err != nil {
			t.Fatalf("ReadBatch = %d, %v; want %d segments", k, err, n-1)
		}
		env := bth.Envelope{Src: addrA.Addr(), Dst: addrB.Addr(), DF: true, SrcPort: addrA.Port(), DstPort: addrB.Port()}
		for j, m := range in[:k] {
			if len(m.Buf) != seg || m.TOS != 0xb8 || m.TTL != 3 || !bth.CheckICRC(&env, m.Buf) {
				t.Fatalf("datagram %d (segment %d): %d bytes TOS %#x TTL %d, ICRC for ID 0 ok %v", j, m.Buf[12], len(m.Buf), m.TOS, m.TTL, bth.CheckICRC(&env, m.Buf))
			}
		}
		if l.DroppedFn.Load() != 1 || l.Sent.Load() != n-1 {
			t.Fatalf("DroppedFn %d Sent %d", l.DroppedFn.Load(), l.Sent.Load())
		}
	})
}

// TestLossyReceiveFuncs: every receive path of the wrapped link passes
// DropFn.
func TestLossyReceiveFuncs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := link.NewPipe(addrA, addrB, link.PipeConfig{}, link.PipeConfig{Readers: 2})
		l := NewLossy(b, LossConfig{DropFn: func(d Dir, p []byte) bool { return d == Recv && p[0] == 'x' }})
		defer l.Close()
		fns := link.ReceiveFuncs(l)
		if len(fns) != 2 {
			t.Fatalf("%d receive functions", len(fns))
		}
		var out []link.Message
		for port := uint16(1); port <= 64; port++ {
			out = append(out, link.Message{Buf: []byte{'x'}, Addr: addrB, SrcPort: port}, link.Message{Buf: []byte{'k'}, Addr: addrB, SrcPort: port})
		}
		a.WriteBatch(out)
		kept := 0
		for _, fn := range fns {
			done := make(chan int, 1)
			go func() { n, _ := fn(msgs(128)); done <- n }()
			synctest.Wait()
			kept += <-done
		}
		if kept != 64 || l.DroppedFn.Load() != 64 {
			t.Fatalf("kept %d, DroppedFn %d", kept, l.DroppedFn.Load())
		}
	})
}
