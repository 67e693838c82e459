package roce

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
)

// TestRunToCompletionKeepsArrivalOrder: in run-to-completion mode a CQ
// poller reads the receive path that the device's reader goroutine also
// reads. Both used to hand their batches to the QP's shard in whatever order
// they got there, so a stream of SENDs arrived with PSN gaps that no wire
// made (perftest's ib_send_bw on the C library saw thousands of sequence
// NAKs and go-back-N resends, at a fifth of the throughput). Over a link
// that loses nothing, the receiver must see no PSN out of sequence and the
// sender resend nothing but on a timeout, while the receiving side polls its
// CQ flat out.
func TestRunToCompletionKeepsArrivalOrder(t *testing.T) {
	la, lb := link.NewPipe(netip.AddrPortFrom(addrA, RoCEv2Port), netip.AddrPortFrom(addrB, RoCEv2Port),
		link.PipeConfig{}, link.PipeConfig{})
	open := func(l link.Link) *Device {
		d, err := OpenLink(l, WithMTU(MTU1024), WithRunToCompletion(true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	da, db := open(la), open(lb)
	const (
		size   = 4096 // four packets at MTU 1024
		msgs   = 2000
		window = 32 // messages outstanding; the receive queue holds twice as many, so no RNR
		every  = 16
		recvs  = 64 // newSide's MaxRecvWR
	)
	a, b := newSide(t, da, QPTypeRC, size, nil, nil), newSide(t, db, QPTypeRC, size, nil, nil)
	// The local ACK timeout (2^22 × 4.096 µs, 17 s) outlasts the test
	// (wcTimeout): a resend here can only come from a NAK, that is from
	// packets out of order. With the usual 67 ms (timeout 14) the receiver's
	// flat-out poller and the sender share two cores, under -race and with
	// other work on the host an ACK could wait that long for a core, and the
	// timer's go-back-N resends counted as duplicates.
	connectRCTimeout(t, a, b, MTU1024,
		AddressVector{DGID: db.Addr(), SGIDIndex: uint8(da.GIDIndex()), HopLimit: 64, IsGlobal: true},
		AddressVector{DGID: da.Addr(), SGIDIndex: uint8(db.GIDIndex()), HopLimit: 64, IsGlobal: true}, 22)

	// The receiver polls its CQ without ever sleeping: every empty poll reads
	// the link itself (Engine.Poll), beside the reader goroutine.
	recvWR := []RecvWR{{SGL: []SGE{{Addr: b.mr.Addr(), Length: size, LKey: b.mr.LKey()}}}}
	for range recvs {
		_ = must[int](t)(b.qp.PostRecv(recvWR))
	}
	var received atomic.Int64
	recvDone := make(chan error, 1)
	go func() {
		wc := make([]WC, 32)
		deadline := time.Now().Add(wcTimeout)
		for received.Load() < msgs {
			n, err := b.rcq.Poll(wc)
			if err != nil {
				recvDone <- err
				return
			}
			for _, c := range wc[:n] {
				if c.Status != WCSuccess {
					recvDone <- fmt.Errorf("receive completion %+v", c)
					return
				}
				if _, err := b.qp.PostRecv(recvWR); err != nil {
					recvDone <- err
					return
				}
				received.Add(1) // the receive it took is posted again
			}
			if n == 0 && time.Now().After(deadline) {
				recvDone <- errors.New("no receive completion within wcTimeout")
				return
			}
		}
		recvDone <- nil
	}()

	sendWR := make([]SendWR, every)
	for i := range sendWR {
		sendWR[i] = SendWR{Opcode: WRSend, SGL: []SGE{{Addr: a.mr.Addr(), Length: size, LKey: a.mr.LKey()}}}
	}
	sendWR[every-1].Flags = SendSignaled
	ctx, cancel := context.WithTimeout(context.Background(), wcTimeout)
	defer cancel()
	swc := make([]WC, window/every)
	for posted, done := 0, 0; done < msgs; {
		for posted < msgs && posted-done+every <= window {
			// A SEND only when a receive is posted for it (credits, as an
			// application keeps them): an RNR NAK would put the rest of the
			// window out of sequence too.
			for int(received.Load())+recvs < posted+every {
				if ctx.Err() != nil {
					t.Fatalf("the receiver took %d of %d", received.Load(), msgs)
				}
				runtime.Gosched()
			}
			_ = must[int](t)(a.qp.PostSend(sendWR))
			posted += every
		}
		n, err := a.scq.Wait(ctx, swc)
		if err != nil {
			t.Fatalf("send completions after %d of %d: %v", done, msgs, err)
		}
		for _, c := range swc[:n] {
			if c.Status != WCSuccess {
				t.Fatalf("send completion %+v", c)
			}
		}
		done += n * every
	}
	if err := <-recvDone; err != nil {
		t.Fatalf("receiver after %d of %d: %v", received.Load(), msgs, err)
	}
	if d := la.Dropped() + lb.Dropped(); d != 0 {
		t.Fatalf("the pipe dropped %d datagrams (queue full): the test's window is too large", d)
	}
	sa, sb := da.Stats(), db.Stats()
	// A loaded host may let the retransmission timer fire (duplicates at the
	// receiver, counted as timeouts); only a reorder puts a PSN ahead.
	if sb.OutOfSequence != 0 || (sa.Retransmits != 0 && sa.Timeouts == 0) {
		t.Errorf("over a lossless link: receiver %d out of sequence, %d duplicates; sender %d retransmits after %d timeouts",
			sb.OutOfSequence, sb.DuplicateRequests, sa.Retransmits, sa.Timeouts)
	}
}
