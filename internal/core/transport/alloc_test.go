package transport

import (
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// TestReceiveToCQENoAlloc checks that the steady-state receive path (parse,
// ICRC, responder, one copy into the receive WR, CQE) does not allocate.
func TestReceiveToCQENoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	n := newNode(t, &nullLink{done: make(chan struct{})}, 1)
	defer n.close(t)
	q := n.createQP(t, verbs.QPTypeRC, rcOpts{recvWR: 4})
	connect(t, q, addrB.Addr(), 0x77, rcOpts{})
	rb := n.mem.reg(1, make([]byte, 1024), verbs.AccessLocalWrite)
	wrs := []verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{rb.sge(0, 1024)}}}
	buf := link.GetBuffer()
	payload := pattern(512, 1)
	env := bth.Envelope{Src: addrB.Addr(), Dst: addrA.Addr(), DF: true, SrcPort: addrB.Port(), DstPort: addrA.Port()}
	wc := make([]verbs.WC, 4)
	psn := q.resp.psn
	var l int
	build := func() {
		f := bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xFFFF, DestQP: q.qpn, PSN: psn}
		pkt := bth.Append(buf[:0], &f, payload)
		bth.PutICRC(&env, pkt)
		l = len(pkt)
		psn = psn.Add(1)
	}
	step := func() {
		q.rq.PostRecv(wrs)
		build()
		it := rxItem{buf: buf, n: l, src: addrB, local: addrA.Addr(), qp: q}
		q.receive(n.e.cfg.Clock.Now(), &it)
		if k, _ := n.rcq.Poll(wc); k != 1 || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("poll %d %v", k, wc[0].Status)
		}
	}
	step()
	if a := testing.AllocsPerRun(100, step); a != 0 {
		t.Fatalf("receive to CQE allocates %.1f times per packet", a)
	}
}

// TestStepNoAlloc: a shard step that takes a request, executes it, emits its
// ACK into the output list and requests from a posted SEND allocates
// nothing per packet.
func TestStepNoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	w := newWire(t, verbs.QPTypeRC, rcOpts{recvWR: 4, sendWR: 4})
	rb := w.mem.reg(1, make([]byte, 1024), verbs.AccessLocalWrite)
	sb := w.mem.reg(1, pattern(512, 2), verbs.AccessLocalWrite)
	recv := []verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{rb.sge(0, 1024)}}}
	send := []verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 512)}}}
	payload := pattern(512, 1)
	rpsn, spsn := wireRQPSN, wireSQPSN
	wc := make([]verbs.WC, 4)
	s := w.q.sh
	step := func() {
		w.q.rq.PostRecv(recv)
		w.q.PostSend(send)
		it := w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: rpsn, AckReq: true}, payload)
		ack := w.packet(bth.Fields{Opcode: bth.RCAck, PSN: spsn, AETH: bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid)}}, nil)
		rpsn, spsn = rpsn.Add(1), spsn.Add(1)
		s.enqueue(it)
		s.step()
		if len(s.out) != 2 {
			t.Fatalf("emitted %d packets, want the ACK and the SEND", len(s.out))
		}
		for i := range s.out {
			link.PutBuffer(s.out[i].buf)
			s.out[i] = txPacket{}
		}
		s.out = s.out[:0]
		s.drainWC()
		s.enqueue(ack)
		s.step()
		s.drainWC()
		if k, _ := w.rcq.Poll(wc); k != 1 || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("poll %d %v", k, wc[0].Status)
		}
	}
	step()
	if a := testing.AllocsPerRun(100, step); a != 0 {
		t.Fatalf("a step allocates %.1f times", a)
	}
}
