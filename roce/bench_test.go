package roce

import (
	"runtime"
	"testing"
)

// The data-path verbs alone, without the wire: what PostSend, PostRecv and Poll cost
// to hand their WRs and completions across to the engine. A QP in SQD queues send
// WRs without sending them; a QP moved to ERR flushes its receive WRs into its CQ.

// benchVerb runs verb b.N times; when it reports a full queue (or an empty CQ) the
// timer stops while recycle makes room.
func benchVerb(b *testing.B, verb func() bool, recycle func()) {
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !verb() {
			b.StopTimer()
			recycle()
			b.StartTimer()
		}
	}
}

const benchDepth = 4096

func benchQP(b *testing.B, pd *PD, c *CQ, target QPState) *QP {
	qp := must[*QP](b)(pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: c, RecvCQ: c,
		Cap: QPCap{MaxSendWR: benchDepth, MaxRecvWR: benchDepth, MaxSendSGE: 2, MaxRecvSGE: 2}}))
	driveTo(b, qp, QPTypeRC, target)
	return qp
}

func benchSetup(b *testing.B) (*PD, *CQ, []SGE) {
	d := pipeDevice(b, WithShards(1))
	pd := must[*PD](b)(d.AllocPD())
	mr := must[*MR](b)(pd.RegMR(make([]byte, 4096), AccessLocalWrite))
	sgl := []SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}, {Addr: mr.Addr() + 64, Length: 64, LKey: mr.LKey()}}
	return pd, must[*CQ](b)(d.CreateCQ(benchDepth)), sgl
}

func BenchmarkPostSend(b *testing.B) {
	pd, c, sgl := benchSetup(b)
	wrs := []SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: sgl}}
	qp := benchQP(b, pd, c, QPSSQD)
	benchVerb(b, func() bool { _, err := qp.PostSend(wrs); return err == nil }, func() {
		noErr(b, qp.Close())
		qp = benchQP(b, pd, c, QPSSQD)
	})
}

func BenchmarkPostRecv(b *testing.B) {
	pd, _, sgl := benchSetup(b)
	wrs := []RecvWR{{WRID: 1, SGL: sgl}}
	attr := SRQInitAttr{Attr: SRQAttr{MaxWR: benchDepth, MaxSGE: 2}}
	s := must[*SRQ](b)(pd.CreateSRQ(attr))
	benchVerb(b, func() bool { _, err := s.PostRecv(wrs); return err == nil }, func() {
		noErr(b, s.Close())
		s = must[*SRQ](b)(pd.CreateSRQ(attr))
	})
}

func BenchmarkPoll(b *testing.B) {
	pd, c, sgl := benchSetup(b)
	refill := func() {
		qp := benchQP(b, pd, c, QPSInit)
		for i := 0; i < benchDepth; i++ {
			_ = must[int](b)(qp.PostRecv([]RecvWR{{WRID: uint64(i), SGL: sgl}}))
		}
		noErr(b, qp.Modify(&QPAttr{State: QPSErr}, QPAttrState))
		for c.Len() < benchDepth {
			runtime.Gosched()
		}
		noErr(b, qp.Close())
	}
	wc := make([]WC, 1)
	refill()
	benchVerb(b, func() bool { n, _ := c.Poll(wc); return n == 1 }, refill)
}
