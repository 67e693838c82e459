package transport

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// ackWatch is a Link that records the newest PSN acknowledged by an ACK that
// has been handed to the link below.
type ackWatch struct {
	link.Link
	acked atomic.Int64 // newest ACK PSN written, -1 before the first
}

func (w *ackWatch) WriteBatch(msgs []link.Message) (int, error) {
	n, err := w.Link.WriteBatch(msgs)
	for i := range msgs[:n] {
		for _, b := range datagrams(&msgs[i]) {
			if len(b) >= bth.BTHLen && bth.Opcode(b[0]) == bth.RCAck {
				w.acked.Store(int64(uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])))
			}
		}
	}
	return n, err
}

// TestRecvCompletionAfterAck: a receive completion becomes visible only
// after the ACK covering it has been written. A peer that learns of
// delivery through a side channel (rping's DREQ, pingpong's TCP "done") and
// destroys its QP must never make the ACK arrive late.
func TestRecvCompletionAfterAck(t *testing.T) {
	la, lb := link.Pipe(addrA, addrB)
	w := &ackWatch{Link: lb}
	w.acked.Store(-1)
	a, b := newNode(t, la, 2), newNode(t, w, 2)
	defer a.close(t)
	defer b.close(t)
	qa, qb := rcPair(t, a, b, rcOpts{})
	const n = 200
	src := a.mem.reg(1, pattern(8, 1), verbs.AccessLocalWrite)
	dst := b.mem.reg(1, make([]byte, 8*n), verbs.AccessLocalWrite)
	for i := 0; i < n; i++ {
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{dst.sge(8*i, 8)}}}); err != nil {
			t.Fatal(err)
		}
	}
	first := bth.PSN(0x123400 + qa.QPN())
	go func() {
		for i := 0; i < n; i++ {
			if _, err := qa.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 8)}}}); err != nil {
				t.Error(err)
				return
			}
			if i%8 == 7 {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()
	buf := make([]verbs.WC, 16)
	got := 0
	deadline := time.Now().Add(10 * time.Second)
	for got < n {
		k, _ := b.rcq.Poll(buf)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d receive completions", got, n)
			}
			continue
		}
		acked := w.acked.Load() // read right after the completions became visible
		got += k
		if acked < 0 || int(bth.PSN(acked).Diff(first))+1 < got {
			t.Fatalf("%d receive completions visible, but the newest ACK written is for PSN %#x (first %#x)", got, acked, first)
		}
	}
	waitWC(t, a.scq, n, 5*time.Second)
}

// batchLink is a Link whose ReadBatch returns only once it has gathered
// want datagrams (a GRO train counts its segments), so the engine above sees
// them as one receive batch.
type batchLink struct {
	link.Link
	want int
}

func (b *batchLink) ReadBatch(msgs []link.Message) (int, error) {
	if len(msgs) < b.want {
		return b.Link.ReadBatch(msgs)
	}
	n, segs := 0, 0
	for segs < b.want && n < len(msgs) {
		k, err := b.Link.ReadBatch(msgs[n:min(n+b.want-segs, len(msgs))])
		if err != nil {
			return n, err
		}
		for _, m := range msgs[n : n+k] {
			segs += m.NumSegments()
		}
		n += k
	}
	return n, nil
}

// TestAckCoalescing: SENDs that arrive in one receive batch are answered by
// one cumulative ACK for the newest PSN, not one ACK each, and every WR
// completes once. Virtual time: no retransmission is allowed, and on a
// loaded host the requester's 67 ms timer could fire before the ACK.
func TestAckCoalescing(t *testing.T) {
	synctest.Test(t, ackCoalescing)
}

func ackCoalescing(t *testing.T) {
	const n = 32
	la, lb := link.Pipe(addrA, addrB)
	w := &ackWatch{Link: lb}
	w.acked.Store(-1)
	a, b := newNode(t, la, 2), newNode(t, &batchLink{Link: w, want: n}, 2)
	defer a.close(t)
	defer b.close(t)
	qa, qb := rcPair(t, a, b, rcOpts{})
	src := a.mem.reg(1, pattern(8, 1), verbs.AccessLocalWrite)
	dst := b.mem.reg(1, make([]byte, 8*n), verbs.AccessLocalWrite)
	var rwr []verbs.RecvWR
	var swr []verbs.SendWR
	for i := 0; i < n; i++ {
		rwr = append(rwr, verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{dst.sge(8*i, 8)}})
		swr = append(swr, verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 8)}})
	}
	if _, err := qb.PostRecv(rwr); err != nil {
		t.Fatal(err)
	}
	if _, err := qa.PostSend(swr); err != nil {
		t.Fatal(err)
	}
	for i, wc := range waitWC(t, a.scq, n, 5*time.Second) {
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(i) {
			t.Fatalf("send completion %d: %s", i, wcString(wc))
		}
	}
	waitWC(t, b.rcq, n, 10*time.Second)
	acks := b.e.Stats().SentPackets[ClassAck].Load()
	// The shard may split the batch if it was already awake; a handful of
	// ACKs is coalescing, one per SEND is not.
	if acks == 0 || acks > n/4 {
		t.Errorf("%d ACKs for %d SENDs received in one batch", acks, n)
	}
	if last := bth.PSN(0x123400 + qa.QPN()).Add(n - 1); w.acked.Load() != int64(last) {
		t.Errorf("newest ACK PSN %#x, want %#x", w.acked.Load(), last)
	}
	if s := a.e.Stats(); s.Retransmits.Load() != 0 {
		t.Errorf("%d retransmissions", s.Retransmits.Load())
	}
}
