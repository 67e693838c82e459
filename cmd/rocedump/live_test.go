package main

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
)

// livePSN is the first request PSN of sendBetween's SEND (and its ACK's PSN).
const livePSN = 0xC0FFEE

// sendBetween opens goroce devices on the loopback addresses a and b (UDP 4791)
// and sends one 64-byte SEND from a's first QP to b's, waiting for both
// completions: an RC SEND ONLY and its ACK on the wire.
func sendBetween(t *testing.T, a, b string) {
	t.Helper()
	type end struct {
		dev *roce.Device
		mr  *roce.MR
		cq  *roce.CQ
		qp  *roce.QP
	}
	open := func(addr string) *end {
		dev, err := roce.Open(netip.MustParseAddr(addr))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		pd, err := dev.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 64), roce.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		cq, err := dev.CreateCQ(4)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: roce.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return &end{dev, mr, cq, qp}
	}
	x, y := open(a), open(b)
	connect := func(e, peer *end, psn, peerPSN uint32) {
		attr := roce.ConnectAttr{AV: roce.AddressVector{DGID: peer.dev.Addr(), SGIDIndex: uint8(e.dev.GIDIndex()), HopLimit: 1, IsGlobal: true},
			PathMTU: roce.MTU1024, DestQPN: peer.qp.QPN(), RQPSN: peerPSN, MaxDestRDAtomic: 1, MinRNRTimer: 12,
			// Timeout 20 (4.3 s): on a loaded machine 67 ms can pass before the
			// ACK, and a retransmitted SEND would take the ACK's place in -c 2.
			SQPSN: psn, Timeout: 20, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 1}
		if err := e.qp.Connect(&attr); err != nil {
			t.Fatal(err)
		}
	}
	// PSNs no other test uses, so a capture on the shared lo can pick out
	// this exchange by its PSN (other packages' tests run at the same time).
	connect(x, y, livePSN, livePSN+0x100)
	connect(y, x, livePSN+0x100, livePSN)
	if _, err := y.qp.PostRecv([]roce.RecvWR{{WRID: 1, SGL: []roce.SGE{{Addr: y.mr.Addr(), Length: 64, LKey: y.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.qp.PostSend([]roce.SendWR{{WRID: 2, Opcode: roce.WRSend, Flags: roce.SendSignaled,
		SGL: []roce.SGE{{Addr: x.mr.Addr(), Length: 64, LKey: x.mr.LKey()}}}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]roce.WC, 1)
	for _, e := range []*end{x, y} {
		if n, err := e.cq.Wait(ctx, wc); err != nil || n != 1 || wc[0].Status != roce.WCSuccess {
			t.Fatalf("completion %v %+v", err, wc[0])
		}
	}
}
