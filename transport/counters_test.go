package transport

import (
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/transport/link"
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
		rc := b.createQP(t, QPTypeRC, rcOpts{})
		connect(t, rc, addrA.Addr(), 0x99, rcOpts{})
		stranger := b.createQP(t, QPTypeRC, rcOpts{})
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
