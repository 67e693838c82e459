package roce

import (
	"testing"
	"time"
)

// TestQueueOccupancyCountsHeldCompletionsAndPostedWRs posts receives to an SRQ and
// leaves completions unpolled in a CQ, and checks the sums move by exactly that.
func TestQueueOccupancyCountsHeldCompletionsAndPostedWRs(t *testing.T) {
	da, db := udpPair(t, MTU1024)
	base := db.QueueOccupancy()
	pd := must[*PD](t)(db.AllocPD())
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 16, MaxSGE: 1}}))
	b := newSide(t, db, QPTypeRC, 4096, s, pd)
	a := newSide(t, da, QPTypeRC, 4096, nil, nil)
	connectRC(t, a, b, MTU1024)
	for i := 0; i < 5; i++ {
		_ = must[int](t)(s.PostRecv([]RecvWR{{WRID: uint64(i), SGL: []SGE{{Addr: b.mr.Addr(), Length: 64, LKey: b.mr.LKey()}}}}))
	}
	o := db.QueueOccupancy()
	if o.SRQs != base.SRQs+1 || o.SRQWRs != base.SRQWRs+5 || o.SRQCapacity < base.SRQCapacity+16 {
		t.Fatalf("after 5 posts: %+v (base %+v)", o, base)
	}
	if o.CQs != base.CQs+2 || o.CQCapacity != base.CQCapacity+512 || o.CQEntries != base.CQEntries {
		t.Fatalf("CQs: %+v (base %+v)", o, base)
	}
	for i := 0; i < 2; i++ {
		_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: uint64(i), Opcode: WRSend, Flags: SendSignaled,
			SGL: []SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}}}}))
		pollN(t, a.scq, 1, wcTimeout)
	}
	// Both receive completions reach b's CQ (the responder makes them visible
	// just after its ACKs leave, so wait for them without polling), and two WRs
	// left the SRQ.
	deadline := time.Now().Add(wcTimeout)
	o = db.QueueOccupancy()
	for o.CQEntries != base.CQEntries+2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		o = db.QueueOccupancy()
	}
	if o.CQEntries != base.CQEntries+2 || o.SRQWRs != base.SRQWRs+3 {
		t.Fatalf("after 2 SENDs: %+v (base %+v)", o, base)
	}
}
