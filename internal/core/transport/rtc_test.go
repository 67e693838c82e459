package transport

import (
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// rtcWire is a wire in run-to-completion mode whose engine writes to a
// recording link and polls the given datagrams, one batch per Poll.
func rtcWire(t *testing.T, reads *[]link.Message) (*wire, *recLink) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{recvWR: 4, sendWR: 4})
	l := &recLink{noLink: noLink{t}}
	w.e.cfg.Link, w.e.cfg.RunToCompletion = l, true
	r := newReader(w.e, func(msgs []link.Message) (int, error) {
		if len(*reads) == 0 {
			return 0, nil
		}
		m := (*reads)[0]
		*reads = (*reads)[1:]
		b := append(msgs[0].Buf[:0], m.Buf...)
		msgs[0] = m
		msgs[0].Buf = b
		return 1, nil
	}, 4)
	r.poll = true
	w.e.pollers = append(w.e.pollers, &poller{r: r})
	return w, l
}

// TestRunToCompletionPostSends: in run-to-completion mode a post on an idle
// shard sends its packet before it returns, with no shard goroutine.
func TestRunToCompletionPostSends(t *testing.T) {
	var none []link.Message
	w, l := rtcWire(t, &none)
	sb := w.mem.reg(1, pattern(64, 2), verbs.AccessLocalWrite)
	w.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}})
	if len(l.msgs) != 1 || bth.Opcode(l.msgs[0].Buf[0]) != bth.RCSendOnly {
		t.Fatalf("%d messages written by the post, want the SEND", len(l.msgs))
	}
}

// TestRunToCompletionPollHoldsACK: a CQ poller that receives a SEND sees its
// completion at once, while the SEND's ACK waits; the poller's reply then
// leaves before the ACK, and a poll that finds nothing sends what is held.
func TestRunToCompletionPollHoldsACK(t *testing.T) {
	var reads []link.Message
	w, l := rtcWire(t, &reads)
	rb := w.mem.reg(1, make([]byte, 256), verbs.AccessLocalWrite)
	sb := w.mem.reg(1, pattern(64, 2), verbs.AccessLocalWrite)
	w.recv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{rb.sge(0, 256)}}, verbs.RecvWR{WRID: 8, SGL: []verbs.SGE{rb.sge(0, 256)}})
	send := func(psn bth.PSN) {
		it := w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: psn, AckReq: true}, pattern(64, 1))
		reads = append(reads, link.Message{Buf: append([]byte(nil), it.bytes()...), Addr: w.peer, Local: addrA.Addr()})
		it.release()
	}
	send(wireRQPSN)
	if n := w.e.Poll(); n != 1 {
		t.Fatalf("Poll read %d messages, want 1", n)
	}
	if wcs := w.wcs(w.rcq); len(wcs) != 1 || wcs[0].WRID != 7 || wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("receive completions %v, want WR 7", wcs)
	}
	if len(l.msgs) != 0 {
		t.Fatalf("%d messages written before the reply, want the ACK held", len(l.msgs))
	}
	w.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}})
	if len(l.msgs) != 2 || bth.Opcode(l.msgs[0].Buf[0]) != bth.RCSendOnly || bth.Opcode(l.msgs[1].Buf[0]) != bth.RCAck {
		t.Fatalf("written %d messages, want the reply, then the ACK", len(l.msgs))
	}
	send(wireRQPSN.Add(1))
	w.e.Poll()
	if len(l.msgs) != 2 {
		t.Fatal("the second ACK was not held")
	}
	if n := w.e.Poll(); n != 0 || len(l.msgs) != 3 || bth.Opcode(l.msgs[2].Buf[0]) != bth.RCAck {
		t.Fatalf("an empty poll wrote %d messages in all, want the held ACK sent", len(l.msgs))
	}
}

// TestRunToCompletionCloseSendsHeldACK: the ACK a poller's slice holds leaves
// when the engine closes; a program that polled its last receive and exited
// would otherwise leave its peer retrying a message already completed.
func TestRunToCompletionCloseSendsHeldACK(t *testing.T) {
	var reads []link.Message
	w, l := rtcWire(t, &reads)
	rb := w.mem.reg(1, make([]byte, 256), verbs.AccessLocalWrite)
	w.recv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{rb.sge(0, 256)}})
	it := w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: wireRQPSN, AckReq: true}, pattern(64, 1))
	reads = append(reads, link.Message{Buf: append([]byte(nil), it.bytes()...), Addr: w.peer, Local: addrA.Addr()})
	it.release()
	if n := w.e.Poll(); n != 1 || len(l.msgs) != 0 {
		t.Fatalf("Poll read %d messages and wrote %d, want 1 read and the ACK held", n, len(l.msgs))
	}
	w.e.Close()
	if len(l.msgs) != 1 || bth.Opcode(l.msgs[0].Buf[0]) != bth.RCAck {
		t.Fatalf("Close wrote %d messages, want the held ACK", len(l.msgs))
	}
}

// TestRunToCompletionPollKeepsRequestOrder: a poll-driven slice that serves a
// QP's requester (its post found the token taken) sends those requests at
// once; held, they would leave after the next post's requests and the peer
// would see a PSN gap, then a duplicate.
func TestRunToCompletionPollKeepsRequestOrder(t *testing.T) {
	var reads []link.Message
	w, l := rtcWire(t, &reads)
	rb := w.mem.reg(1, make([]byte, 256), verbs.AccessLocalWrite)
	sb := w.mem.reg(1, pattern(64, 2), verbs.AccessLocalWrite)
	w.recv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{rb.sge(0, 256)}})
	it := w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: wireRQPSN, AckReq: true}, pattern(64, 1))
	reads = append(reads, link.Message{Buf: append([]byte(nil), it.bytes()...), Addr: w.peer, Local: addrA.Addr()})
	it.release()

	// Another goroutine holds the token: the post only queues the QP.
	w.q.sh.mu.Lock()
	w.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}})
	w.q.sh.mu.Unlock()
	if len(l.msgs) != 0 {
		t.Fatalf("%d messages written while the token was taken", len(l.msgs))
	}
	// The poller's slice receives the SEND and serves the queued post.
	if n := w.e.Poll(); n != 1 {
		t.Fatalf("Poll read %d messages, want 1", n)
	}
	w.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}})
	var psns []bth.PSN
	for _, m := range l.msgs {
		if bth.Opcode(m.Buf[0]) == bth.RCSendOnly {
			pkt, err := bth.Parse(m.Buf)
			if err != nil {
				t.Fatal(err)
			}
			psns = append(psns, pkt.PSN())
		}
	}
	if len(psns) != 2 || psns[0] != wireSQPSN || psns[1] != wireSQPSN.Add(1) {
		t.Fatalf("SEND PSNs on the wire %v, want %v then %v", psns, wireSQPSN, wireSQPSN.Add(1))
	}
}
