package roce

import (
	"testing"
	"time"
)

// TestDataPathVerbsDoNotAllocate: PostSend, PostRecv (QP and SRQ) and Poll cost no
// allocation per call; the verbs types cross into the engine's without a copy.
func TestDataPathVerbsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under -race")
	}
	d := pipeDevice(t, WithShards(1))
	pd := must[*PD](t)(d.AllocPD())
	c := must[*CQ](t)(d.CreateCQ(1024))
	fc := must[*CQ](t)(d.CreateCQ(1024))
	buf := make([]byte, 4096)
	mr := must[*MR](t)(pd.RegMR(buf, AccessLocalWrite))
	sgl := []SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}, {Addr: mr.Addr() + 64, Length: 64, LKey: mr.LKey()}}
	const runs = 100
	newQP := func(c *CQ) *QP {
		return must[*QP](t)(pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: c, RecvCQ: c,
			Cap: QPCap{MaxSendWR: 4 * runs, MaxRecvWR: 4 * runs, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 128}}))
	}
	// PostSend on a QP in SQD: the WRs are queued and checked, never sent, so only
	// the verb itself runs.
	sq := newQP(c)
	driveTo(t, sq, QPTypeRC, QPSSQD)
	send := []SendWR{{WRID: 1, Opcode: WRSend, SGL: sgl}, {WRID: 2, Opcode: WRSend, Flags: SendInline | SendSignaled, SGL: sgl}}
	// PostRecv on a QP in INIT and on an SRQ: queued, nothing arrives.
	rq := newQP(c)
	driveTo(t, rq, QPTypeRC, QPSInit)
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 4 * runs, MaxSGE: 2}}))
	recv := []RecvWR{{WRID: 3, SGL: sgl}}
	// Poll completions that are there: flushed receives of a QP moved to ERR.
	fq := newQP(fc)
	driveTo(t, fq, QPTypeRC, QPSInit)
	for i := 0; i < 2*runs+2; i++ {
		_ = must[int](t)(fq.PostRecv(recv))
	}
	noErr(t, fq.Modify(&QPAttr{State: QPSErr}, QPAttrState))
	pollUntil(t, fc, 2*runs+2)
	wc := make([]WC, 2)
	for name, verb := range map[string]func(){
		"QP.PostSend":  func() { _ = must[int](t)(sq.PostSend(send)) },
		"QP.PostRecv":  func() { _ = must[int](t)(rq.PostRecv(recv)) },
		"SRQ.PostRecv": func() { _ = must[int](t)(s.PostRecv(recv)) },
		"CQ.Poll": func() {
			if n, err := fc.Poll(wc); n != 2 || err != nil || wc[1].Status != WCWRFlushErr {
				t.Fatalf("Poll = %d, %v, %+v", n, err, wc[1])
			}
		},
	} {
		if a := testing.AllocsPerRun(runs, verb); a != 0 {
			t.Errorf("%s allocates %.1f times per call", name, a)
		}
	}
}

// pollUntil waits until the CQ holds n completions.
func pollUntil(t *testing.T, c *CQ, n int) {
	t.Helper()
	for i := 0; c.Len() < n; i++ {
		if i == 5000 {
			t.Fatalf("CQ holds %d completions, want %d", c.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
