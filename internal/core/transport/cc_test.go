package transport

import (
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/core/verbs"
)

// ccOn is congestion control on a 10 Gb/s port with a pacing bucket of two
// packets (the wire's time only moves when the test says).
func ccOn() dcqcn.Config {
	c := dcqcn.DefaultConfig()
	c.LineRate = 10_000_000_000
	c.PacingBurst = time.Nanosecond
	return c
}

// sendCE delivers a SEND ONLY with AckReq at psn offset i carrying tos, to a
// QP with a receive WR posted, and returns what the QP emitted.
func sendCE(w *wire, i int, tos uint8) []bth.Packet {
	rb := w.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite)
	w.recv(verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{rb.sge(0, 64)}})
	it := w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: wireRQPSN.Add(i), AckReq: true}, filled(8, 1))
	it.tos = tos
	return w.deliver(it)
}

// TestCCTrafficClass: data packets carry the QP's DSCP with ECT(0) when
// congestion control is on and the traffic class as it is when off (rxe);
// ACKs never carry ECT.
func TestCCTrafficClass(t *testing.T) {
	tests := []struct {
		name      string
		cc        dcqcn.Config
		tclass    uint8
		data, ack uint8
	}{
		{"off", dcqcn.Config{}, 0x6B, 0x6B, 0x6B},
		{"off, tclass 0", dcqcn.Config{}, 0, 0, 0},
		{"on", ccOn(), 0x68, 0x6A, 0x68},
		{"on, ECN bits of the traffic class replaced", ccOn(), 0x6B, 0x6A, 0x68},
	}
	for _, tt := range tests {
		w := newWire(t, verbs.QPTypeRC, rcOpts{cc: tt.cc})
		w.q.attr.AV.TrafficClass = tt.tclass // as ibv_modify_qp would have set it at RTR
		mr := w.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite)
		w.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{mr.sge(0, 8)}})
		if got := w.step(); len(got) != 1 || w.tos[0] != tt.data {
			t.Errorf("%s: SEND TOS %#x, want %#x", tt.name, w.tos, tt.data)
		}
		if got := sendCE(w, 0, 0); len(got) != 1 || got[0].Opcode() != bth.RCAck || w.tos[0] != tt.ack {
			t.Errorf("%s: ACK TOS %#x, want %#x", tt.name, w.tos, tt.ack)
		}
	}
}

// TestCCNotificationPoint: a CE-marked packet is counted and, with congestion
// control on, answered with a CNP to the QP that sent it (BECN, P_Key,
// DestQP = the peer QP, PSN 0, cnp_dscp, Not-ECT), at most one per
// min_time_between_cnps.
func TestCCNotificationPoint(t *testing.T) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{cc: ccOn()})
	cnps := func(got []bth.Packet) (n int) {
		for i, p := range got {
			if p.Opcode() == bth.CNP {
				n++
				if !p.BECN() || p.PKey() != 0xFFFF || p.DestQP() != wirePeerQPN || p.PSN() != 0 || w.tos[i] != 48<<2 {
					t.Errorf("CNP %v BECN %v P_Key %#x PSN %d TOS %#x", p.DestQP(), p.BECN(), p.PKey(), p.PSN(), w.tos[i])
				}
			}
		}
		return n
	}
	steps := []struct {
		after time.Duration
		tos   uint8
		cnp   int
	}{
		{0, dcqcn.CE, 1},
		{time.Microsecond, dcqcn.CE, 0}, // within min_time_between_cnps (4 µs)
		{time.Microsecond, dcqcn.ECT0, 0},
		{3 * time.Microsecond, dcqcn.CE, 1},
		{time.Microsecond, 0x68 | dcqcn.CE, 0},
	}
	for i, s := range steps {
		w.clock.now = w.clock.now.Add(s.after)
		if got := cnps(sendCE(w, i, s.tos)); got != s.cnp {
			t.Errorf("packet %d (TOS %#x): %d CNPs, want %d", i, s.tos, got, s.cnp)
		}
	}
	st := w.e.cfg.Stats.Snapshot()
	if st.ECNMarked != 4 || st.CNPsSent != 2 || st.SentPackets[ClassCNP] != 0 {
		// SentPackets counts at flush, which a wire never runs.
		t.Errorf("ECNMarked %d CNPsSent %d", st.ECNMarked, st.CNPsSent)
	}

	off := newWire(t, verbs.QPTypeRC, rcOpts{})
	if got := sendCE(off, 0, dcqcn.CE); len(got) != 1 || got[0].Opcode() != bth.RCAck {
		t.Errorf("congestion control off: emitted %s", pktsString(got))
	}
	if st := off.e.cfg.Stats.Snapshot(); st.ECNMarked != 1 || st.CNPsSent != 0 {
		t.Errorf("off: ECNMarked %d CNPsSent %d", st.ECNMarked, st.CNPsSent)
	}
}

// TestCCNotificationPointUD: a UD QP answers the datagram's sender, the DETH
// source QP at the source address.
func TestCCNotificationPointUD(t *testing.T) {
	w := newWire(t, verbs.QPTypeUD, rcOpts{cc: ccOn()})
	rb := w.mem.reg(1, make([]byte, 128), verbs.AccessLocalWrite)
	w.recv(verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{rb.sge(0, 128)}})
	it := w.packet(bth.Fields{Opcode: bth.UDSendOnly, DETH: bth.DETH{QKey: wireQKey, SrcQP: 0x99}}, filled(8, 1))
	it.tos = dcqcn.CE
	got := w.deliver(it)
	if len(got) != 1 || got[0].Opcode() != bth.CNP || got[0].DestQP() != 0x99 {
		t.Fatalf("emitted %s, want a CNP to QP 0x99", pktsString(got))
	}
}

// TestCCReactionPoint: a CNP cuts the QP's rate and the pacer spaces its
// requests to it; without congestion control a CNP is counted as ignored.
func TestCCReactionPoint(t *testing.T) {
	cc := ccOn()
	cc.Params.RPGByteReset = 0 // no byte counter increase: the rate holds for the test's 100 µs
	w := newWire(t, verbs.QPTypeRC, rcOpts{cc: cc, mtu: verbs.MTU1024, sendWR: 64})
	mr := w.mem.reg(1, make([]byte, 1<<20), verbs.AccessLocalWrite)
	cnp := w.packet(bth.Fields{Opcode: bth.CNP, BECN: true}, nil)
	if got := w.deliver(cnp); len(got) != 0 {
		t.Fatalf("a CNP was answered: %s", pktsString(got))
	}
	// First CNP: α = 1023/1024, the 10 Gb/s line rate halves.
	if rp := &w.q.cc.rp; rp.Rate() != 10_000_000_000*(2048-1023)/2048 || rp.Cuts() != 1 || rp.Alpha() != 1023 {
		t.Fatalf("after a CNP: rate %d cuts %d α %d", rp.Rate(), rp.Cuts(), rp.Alpha())
	}
	// A 1 MiB WRITE is 1024 packets of 1024 bytes; at about 5 Gb/s the
	// pacer (a two-packet bucket) lets two packets leave at once, then
	// one per 1.7 µs.
	w.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, RemoteAddr: 0x5000, RKey: 9, SGL: []verbs.SGE{mr.sge(0, 1<<20)}})
	sent := len(w.step())
	for i := 0; i < 100; i++ {
		sent += len(w.advance(time.Microsecond))
	}
	// 100 µs at 5.002 Gb/s is 62.5 KB: 60 packets of 1044 bytes, plus the bucket.
	if sent < 55 || sent > 64 {
		t.Errorf("%d packets in 100 µs paced at 5 Gb/s, want about 60", sent)
	}
	if st := w.e.cfg.Stats.Snapshot(); st.CNPsRcvd != 1 || st.RateCuts != 1 || st.CNPsIgnored != 0 {
		t.Errorf("CNPsRcvd %d RateCuts %d CNPsIgnored %d", st.CNPsRcvd, st.RateCuts, st.CNPsIgnored)
	}
	if d := w.q.nextDeadline(); d.IsZero() || d.Sub(w.clock.now) > 2*time.Microsecond {
		t.Errorf("paced QP's next deadline %v from now, want the pacer's wake-up", d.Sub(w.clock.now))
	}

	off := newWire(t, verbs.QPTypeRC, rcOpts{})
	off.deliver(off.packet(bth.Fields{Opcode: bth.CNP, BECN: true}, nil))
	if st := off.e.cfg.Stats.Snapshot(); st.CNPsRcvd != 1 || st.CNPsIgnored != 1 || st.RateCuts != 0 || off.q.cc != nil {
		t.Errorf("off: CNPsRcvd %d CNPsIgnored %d RateCuts %d", st.CNPsRcvd, st.CNPsIgnored, st.RateCuts)
	}
}
