package roce

import (
	"bytes"
	"fmt"
	"testing"
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
