package transport

import (
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// TestDropCounters injects packets with a valid ICRC that a QP must refuse
// and checks each lands in its own counter, not in Malformed: a P_Key other
// than the default, a UD Q_Key other than the QP's, and an RC SEND from an
// address that is not the QP's peer.
func TestDropCounters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		la, lb := link.Pipe(addrA, addrB)
		b := newNode(t, lb, 2)
		defer b.close(t)
		defer la.Close()
		rc := b.createQP(t, verbs.QPTypeRC, rcOpts{})
		connect(t, rc, addrA.Addr(), 0x99, rcOpts{})
		stranger := b.createQP(t, verbs.QPTypeRC, rcOpts{})
		connect(t, stranger, netip.MustParseAddr("10.0.0.9"), 0x99, rcOpts{})
		ud := udQP(t, b, 5)
		inject := func(f bth.Fields) {
			t.Helper()
			pkt := bth.Append(nil, &f, []byte{1, 2, 3, 4})
			bth.PutICRC(&bth.Envelope{Src: addrA.Addr(), Dst: addrB.Addr(), DF: true, SrcPort: addrA.Port(), DstPort: addrB.Port()}, pkt)
			if _, err := la.WriteBatch([]link.Message{{Buf: pkt, Addr: addrB}}); err != nil {
				t.Fatal(err)
			}
		}
		inject(bth.Fields{Opcode: bth.RCSendOnly, PKey: 0x1234, DestQP: rc.QPN(), PSN: bth.PSN(0x123400 + 0x99)})
		inject(bth.Fields{Opcode: bth.UDSendOnly, PKey: 0xFFFF, DestQP: ud.QPN(), DETH: bth.DETH{QKey: 6, SrcQP: 0x99}})
		inject(bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xFFFF, DestQP: stranger.QPN(), PSN: bth.PSN(0x123400 + 0x99)})
		time.Sleep(time.Millisecond)
		synctest.Wait()
		s := b.e.Stats().Snapshot()
		if s.BadPKey != 1 || s.BadQKey != 1 || s.BadSource != 1 || s.Malformed != 0 || s.ICRCErrors != 0 {
			t.Fatalf("bad P_Key %d, bad Q_Key %d, bad source %d, malformed %d, ICRC %d; want 1, 1, 1, 0, 0",
				s.BadPKey, s.BadQKey, s.BadSource, s.Malformed, s.ICRCErrors)
		}
		noMoreWC(t, b.rcq, time.Millisecond)
	})
}

// TestDestroyedWhileQueued: a packet the reader queued for a QP that is
// destroyed before its shard serves it is dropped and counted
// (DestroyedQPDrops), not lost from the counters.
func TestDestroyedWhileQueued(t *testing.T) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{})
	rb := w.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite)
	w.recv(verbs.RecvWR{WRID: 1, SGL: []verbs.SGE{rb.sge(0, 64)}})
	it := w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: wireRQPSN, AckReq: true}, filled(8, 1))
	if !w.q.sh.enqueue(it) {
		t.Fatal("inbound queue full")
	}
	w.q.destroyed = true // what Destroy's command does, between two steps
	if got := w.step(); len(got) != 0 {
		t.Fatalf("a destroyed QP answered: %v", got)
	}
	s := w.e.Stats().Snapshot()
	if s.DestroyedQPDrops != 1 || s.UnknownQP != 0 || s.RcvdPackets[classOf(bth.RCSendOnly)] != 0 {
		t.Fatalf("destroyed-QP drops %d, unknown QP %d, received SENDs %d; want 1, 0, 0",
			s.DestroyedQPDrops, s.UnknownQP, s.RcvdPackets[classOf(bth.RCSendOnly)])
	}
	if wcs := w.wcs(w.rcq); len(wcs) != 0 {
		t.Fatalf("completions for a destroyed QP: %v", wcs)
	}
}
