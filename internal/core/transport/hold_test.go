package transport

import (
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// holdWire is a wire of typ at a 4096-byte MTU whose engine sends trains as
// GSO: 15 packets of 4112 bytes to a datagram.
func holdWire(t *testing.T, typ verbs.QPType) (*wire, *Region) {
	w := newWire(t, typ, rcOpts{mtu: verbs.MTU4096, sendWR: 256})
	w.e.offloads.GSO = true
	return w, w.mem.reg(1, pattern(1<<17, 3), verbs.AccessLocalWrite)
}

// sendWRs is n WRs of op, size bytes each, from WR ID first on.
func sendWRs(mr *Region, op verbs.WROpcode, first uint64, n, size int) []verbs.SendWR {
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = sendWR(first+uint64(i), op, 0, size)
		wrs[i].SGL[0] = mr.sge(i*size%(1<<16), size)
	}
	return wrs
}

// postTurn posts wrs and returns the packets the QP's next turn emits.
func (w *wire) postTurn(wrs []verbs.SendWR) []bth.Packet {
	w.t.Helper()
	w.post(wrs...)
	return w.step()
}

// ackTo acknowledges every request up to and including PSN last.
func (w *wire) ackTo(last bth.PSN) []bth.Packet {
	w.t.Helper()
	return w.feed(bth.Fields{Opcode: bth.RCAck, PSN: last, AETH: bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid)}}, nil)
}

// TestHoldShortTail: with two datagrams' worth or more in flight, a turn that
// empties the send queue sends whole datagrams and holds the rest; the next
// post adds to what is held, and the held packets go in the turn an ACK gives
// the QP once less than two datagrams are in flight. A held turn does not
// queue the QP again.
func TestHoldShortTail(t *testing.T) {
	w, mr := holdWire(t, verbs.QPTypeRC)
	if got := w.postTurn(sendWRs(mr, verbs.WRSend, 1, 30, 4096)); len(got) != 30 {
		t.Fatalf("with nothing in flight the post sent %d of 30", len(got))
	}
	yielded := w.e.cfg.Stats.TurnsYielded.Load()
	got := w.postTurn(sendWRs(mr, verbs.WRSend, 31, 16, 4096))
	if len(got) != 15 || got[14].PSN() != wireSQPSN.Add(44) {
		t.Fatalf("behind 30 in flight, 16 SENDs sent %d packets, want one datagram of 15 (PSNs to %#x)", len(got), wireSQPSN.Add(44))
	}
	got = w.postTurn(sendWRs(mr, verbs.WRSend, 47, 16, 4096))
	if len(got) != 15 || got[0].PSN() != wireSQPSN.Add(45) {
		t.Fatalf("the next 16 sent %d packets from %#x, want 15 from %#x: the held one first", len(got), got[0].PSN(), wireSQPSN.Add(45))
	}
	if y := w.e.cfg.Stats.TurnsYielded.Load(); y != yielded {
		t.Fatalf("held turns queued the QP again %d times", y-yielded)
	}
	if got := w.ackTo(wireSQPSN.Add(29)); len(got) != 0 {
		t.Fatalf("with 30 still in flight an ACK's turn sent %d packets, want the 2 held", len(got))
	}
	got = w.ackTo(wireSQPSN.Add(44))
	if len(got) != 2 || got[0].PSN() != wireSQPSN.Add(60) || got[1].PSN() != wireSQPSN.Add(61) || !got[1].AckReq() {
		t.Fatalf("with 15 in flight an ACK's turn sent %d packets, want the 2 held (PSNs %#x, %#x), asking for an ACK",
			len(got), wireSQPSN.Add(60), wireSQPSN.Add(61))
	}
	w.ackTo(wireSQPSN.Add(61))
	if wcs := w.wcs(w.scq); len(wcs) != 62 {
		t.Fatalf("%d completions, want 62", len(wcs))
	}
}

// TestHoldOnlyInStreams: a turn sends everything it may unless a whole
// datagram's packets would go now, two datagrams' worth are in flight, and the
// rest are new one-packet messages of one size on an RC QP with GSO.
func TestHoldOnlyInStreams(t *testing.T) {
	mixed := func(mr *Region) []verbs.SendWR {
		return append(sendWRs(mr, verbs.WRSend, 1, 15, 4096), sendWRs(mr, verbs.WRSend, 16, 1, 100)...)
	}
	read := func(mr *Region) []verbs.SendWR {
		wrs := sendWRs(mr, verbs.WRSend, 1, 16, 4096)
		wrs[15] = verbs.SendWR{WRID: 16, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{mr.sge(0, 64)}, RemoteAddr: 0x1000, RKey: 7}
		return wrs
	}
	tests := []struct {
		name   string
		typ    verbs.QPType
		noGSO  bool
		before int                             // 4096-byte SENDs in flight first
		wrs    func(mr *Region) []verbs.SendWR // then posted
		want   int                             // packets the turn sends
	}{
		{"nothing in flight", verbs.QPTypeRC, false, 0, func(mr *Region) []verbs.SendWR { return sendWRs(mr, verbs.WRSend, 1, 16, 4096) }, 16},
		{"less than two datagrams in flight", verbs.QPTypeRC, false, 29, func(mr *Region) []verbs.SendWR { return sendWRs(mr, verbs.WRSend, 1, 16, 4096) }, 16},
		{"a datagram and one", verbs.QPTypeRC, false, 30, func(mr *Region) []verbs.SendWR { return sendWRs(mr, verbs.WRSend, 1, 16, 4096) }, 15},
		{"less than a datagram", verbs.QPTypeRC, false, 30, func(mr *Region) []verbs.SendWR { return sendWRs(mr, verbs.WRSend, 1, 14, 4096) }, 0},
		{"two datagrams exactly", verbs.QPTypeRC, false, 30, func(mr *Region) []verbs.SendWR { return sendWRs(mr, verbs.WRSend, 1, 30, 4096) }, 30},
		{"one-packet WRITEs", verbs.QPTypeRC, false, 30, func(mr *Region) []verbs.SendWR { return sendWRs(mr, verbs.WRRDMAWrite, 1, 16, 4096) }, 15},
		{"two-packet messages", verbs.QPTypeRC, false, 30, func(mr *Region) []verbs.SendWR { return sendWRs(mr, verbs.WRSend, 1, 8, 8192) }, 16},
		{"two datagram sizes", verbs.QPTypeRC, false, 30, mixed, 16},
		{"a READ queued", verbs.QPTypeRC, false, 30, read, 16},
		{"the window would close", verbs.QPTypeRC, false, 120, func(mr *Region) []verbs.SendWR { return sendWRs(mr, verbs.WRSend, 1, 16, 4096) }, 8},
		{"64-byte SENDs: 64 to a datagram", verbs.QPTypeRC, false, 105, func(mr *Region) []verbs.SendWR { return sendWRs(mr, verbs.WRSend, 1, 16, 64) }, 16},
		{"no GSO", verbs.QPTypeRC, true, 30, func(mr *Region) []verbs.SendWR { return sendWRs(mr, verbs.WRSend, 1, 16, 4096) }, 16},
		{"UC", verbs.QPTypeUC, false, 30, func(mr *Region) []verbs.SendWR { return sendWRs(mr, verbs.WRSend, 1, 16, 4096) }, 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, mr := holdWire(t, tt.typ)
			w.e.offloads.GSO = !tt.noGSO
			for sent := 0; sent < tt.before; { // a datagram's worth a post: never held
				n := min(15, tt.before-sent)
				if got := w.postTurn(sendWRs(mr, verbs.WRSend, uint64(1000+sent), n, 4096)); len(got) != n {
					t.Fatalf("a post of %d behind %d sent %d", n, sent, len(got))
				}
				sent += n
			}
			if got := w.postTurn(tt.wrs(mr)); len(got) != tt.want {
				t.Fatalf("the post sent %d packets, want %d", len(got), tt.want)
			}
		})
	}
}
