package transport

import (
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// A READ reply longer than a turn goes out over several steps, and a request
// that arrives behind it waits: every response leaves in PSN order, then the
// request is executed and acknowledged.
func TestReadReplySpansTurns(t *testing.T) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{})
	mr := w.mem.reg(1, pattern(200*1024, 3), verbs.AccessRemoteRead)
	rb := w.mem.reg(1, make([]byte, 16), verbs.AccessLocalWrite)
	w.recv(verbs.RecvWR{WRID: 9, SGL: []verbs.SGE{rb.sge(0, 16)}})
	read := w.packet(bth.Fields{Opcode: bth.RCReadRequest, PSN: wireRQPSN, RETH: bth.RETH{VA: mr.Addr, RKey: mr.RKey, DMALen: 200 * 1024}}, nil)
	send := w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: wireRQPSN.Add(200), AckReq: true}, filled(16, 4))
	var got []bth.Packet
	got = append(got, w.deliver(read, send)...)
	if len(got) != turnPackets {
		t.Fatalf("first step emitted %d packets, want one turn of %d", len(got), turnPackets)
	}
	if wcs := w.wcs(w.rcq); len(wcs) != 0 {
		t.Fatalf("the SEND behind the READ completed before the READ reply was out: %v", wcs)
	}
	for range 4 {
		got = append(got, w.step()...)
	}
	if len(got) != 201 {
		t.Fatalf("%d packets, want 200 READ responses and 1 ACK", len(got))
	}
	for i, p := range got[:200] {
		want, _ := bth.MessageOpcode(bth.TransportRC, bth.OpReadResponse, i == 0, i == 199)
		if p.Opcode() != want || p.PSN() != wireRQPSN.Add(i) || (p.Opcode().HasAETH() && p.AETH().MSN != 1) {
			t.Fatalf("response %d: %v PSN %#x MSN %d, want %v PSN %#x MSN 1", i, p.Opcode(), p.PSN(), p.AETH().MSN, want, wireRQPSN.Add(i))
		}
		if string(p.Payload()) != string(mr.Buf[i*1024:(i+1)*1024]) {
			t.Fatalf("response %d carries the wrong bytes", i)
		}
	}
	if a := got[200]; a.Opcode() != bth.RCAck || !a.AETH().IsACK() || a.PSN() != wireRQPSN.Add(200) || a.AETH().MSN != 2 {
		t.Fatalf("after the READ: %v PSN %#x AETH %+v, want the SEND's ACK (PSN %#x, MSN 2)", a.Opcode(), a.PSN(), a.AETH(), wireRQPSN.Add(200))
	}
	if wcs := w.wcs(w.rcq); len(wcs) != 1 || wcs[0].WRID != 9 || wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("receive completions %v", wcs)
	}
	if y := w.e.cfg.Stats.TurnsYielded.Load(); y < 3 {
		t.Fatalf("turns yielded %d, want the READ to yield after each of its first 3 turns", y)
	}
}

// The R_Key of a READ is resolved again for each turn of its reply: after
// ibv_dereg_mr the reply stops with a remote access NAK at the first PSN not
// sent, and no further byte is read.
func TestReadReplyStopsAtDeregistration(t *testing.T) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{})
	mr := w.mem.reg(1, pattern(200*1024, 3), verbs.AccessRemoteRead)
	out := w.feed(bth.Fields{Opcode: bth.RCReadRequest, PSN: wireRQPSN, RETH: bth.RETH{VA: mr.Addr, RKey: mr.RKey, DMALen: 200 * 1024}}, nil)
	if len(out) != turnPackets {
		t.Fatalf("first turn: %d packets", len(out))
	}
	w.mem.unreg(mr)
	out = w.step()
	if len(out) != 1 || !out[0].AETH().IsNAK() || out[0].AETH().NAKCode() != bth.NAKRemoteAccess || out[0].PSN() != wireRQPSN.Add(turnPackets) {
		t.Fatalf("after deregistration: %v", out)
	}
	if st := w.q.attr.State; st != verbs.QPSErr {
		t.Fatalf("state %v, want ERR", st)
	}
}

// A timed-out QP resends only its oldest unacknowledged packet, asking for an
// ACK; its timer doubles per timeout without progress; the ACK that answers
// the probe resets the timer and the rest of the window follows.
func TestTimeoutProbeAndBackoff(t *testing.T) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{timeout: 10})
	rto := time.Duration(4096<<10) * time.Nanosecond
	src := w.mem.reg(1, pattern(8*1024, 5), verbs.AccessLocalWrite)
	w.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 8*1024)}})
	if out := w.step(); len(out) != 8 {
		t.Fatalf("first transmission: %d packets", len(out))
	}
	for k, wait := range []time.Duration{rto, 2 * rto, 4 * rto, 8 * rto} {
		if out := w.advance(wait - time.Nanosecond); len(out) != 0 {
			t.Fatalf("timeout %d: %d packets before the timer", k+1, len(out))
		}
		out := w.advance(time.Nanosecond)
		if len(out) != 1 || out[0].PSN() != wireSQPSN || out[0].Opcode() != bth.RCSendFirst || !out[0].AckReq() {
			t.Fatalf("timeout %d: %v, want one SEND FIRST probe at %#x with AckReq", k+1, out, wireSQPSN)
		}
		if b := w.q.comp.backoff; int(b) != k+1 {
			t.Fatalf("timeout %d: backoff %d", k+1, b)
		}
	}
	out := w.feed(bth.Fields{Opcode: bth.RCAck, PSN: wireSQPSN, AETH: bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid)}}, nil)
	if len(out) != 7 || out[0].PSN() != wireSQPSN.Add(1) || out[6].Opcode() != bth.RCSendLast {
		t.Fatalf("after the probe's ACK: %d packets, want the other 7 of the window", len(out))
	}
	if w.q.comp.backoff != 0 || w.q.win.probing {
		t.Fatalf("backoff %d probing %v after progress", w.q.comp.backoff, w.q.win.probing)
	}
	if st := w.e.cfg.Stats.Snapshot(); st.Timeouts != 4 || st.BackedOffTimeouts != 3 || st.Retransmits != 11 {
		t.Fatalf("timeouts %d backed off %d retransmits %d", st.Timeouts, st.BackedOffTimeouts, st.Retransmits)
	}
}
