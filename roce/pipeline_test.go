package roce

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestRCReadPipelinedBehindOtherWRs posts a READ in the same batch as the SENDs and
// WRITEs before it. The READ response then implicitly acknowledges them (no separate
// ACK need arrive first); the completer must still expect the READ's first PSN, not
// treat the response as a gap and reissue the READ forever.
func TestRCReadPipelinedBehindOtherWRs(t *testing.T) {
	for _, c := range []struct {
		ops []WROpcode
		n   int
	}{
		{[]WROpcode{WRRDMARead}, 3077},
		{[]WROpcode{WRSend, WRRDMARead}, 100},
		{[]WROpcode{WRRDMAWrite, WRRDMARead}, 100},
		{[]WROpcode{WRRDMAWrite, WRRDMARead}, 3077},
		{[]WROpcode{WRSend, WRRDMAWrite, WRRDMARead}, 3077},
	} {
		t.Run(fmt.Sprint(c), func(t *testing.T) {
			da, db := udpPair(t, MTU1024)
			n := c.n
			a := newSide(t, da, QPTypeRC, 2*n, nil, nil)
			b := newSide(t, db, QPTypeRC, 2*n, nil, nil)
			connectRC(t, a, b, MTU1024)
			var wrs []SendWR
			for i, op := range c.ops {
				wr := SendWR{WRID: uint64(i + 1), Opcode: op, Flags: SendSignaled, SGL: []SGE{{Addr: a.mr.Addr(), Length: uint32(n), LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
				if op == WRSend {
					_ = must[int](t)(b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{{Addr: b.mr.Addr(), Length: uint32(n), LKey: b.mr.LKey()}}}}))
				}
				if op == WRRDMARead {
					wr.SGL[0].Addr += uint64(n)
				}
				wrs = append(wrs, wr)
			}
			_ = must[int](t)(a.qp.PostSend(wrs))
			for i, wc := range pollN(t, a.scq, len(wrs), wcTimeout) {
				if wc.Status != WCSuccess || wc.WRID != uint64(i+1) {
					t.Fatalf("completion %d: %+v", i, wc)
				}
			}
			db.barrier()
			da.barrier()
			if !bytes.Equal(a.buf[n:2*n], b.buf[:n]) {
				t.Fatal("READ returned different bytes")
			}
		})
	}
}

// TestPostSendAfterPollNeverSeesFullQueue uses a send queue of depth 1: once Poll has
// returned a WR's completion its slot must be free, so the next PostSend succeeds
// every time (the engine once posted the completion before freeing the slot).
func TestPostSendAfterPollNeverSeesFullQueue(t *testing.T) {
	da, db := udpPair(t, MTU1024)
	mk := func(d *Device) *side {
		pd := must[*PD](t)(d.AllocPD())
		x := &side{dev: d, pd: pd, scq: must[*CQ](t)(d.CreateCQ(4)), rcq: must[*CQ](t)(d.CreateCQ(4))}
		x.qp = must[*QP](t)(pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: x.scq, RecvCQ: x.rcq,
			Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}))
		x.buf = make([]byte, 64)
		x.mr = must[*MR](t)(pd.RegMR(x.buf, testAccess))
		return x
	}
	a, b := mk(da), mk(db)
	connectRC(t, a, b, MTU1024)
	for i := 0; i < 500; i++ {
		wr := SendWR{WRID: uint64(i), Opcode: WRRDMAWrite, Flags: SendSignaled,
			SGL: []SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		if _, err := a.qp.PostSend([]SendWR{wr}); err != nil {
			t.Fatalf("post %d right after polling the previous completion: %v", i, err)
		}
		// Spin on Poll so the next PostSend follows the completion as closely as
		// possible: that is where a slot freed after the completion shows up.
		var wc [1]WC
		deadline := time.Now().Add(wcTimeout)
		for {
			k, err := a.scq.Poll(wc[:])
			noErr(t, err)
			if k == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no completion for WR %d", i)
			}
		}
		checkWC(t, wc[0], uint64(i), WCRDMAWrite, -1)
	}
}
