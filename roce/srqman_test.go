package roce

import (
	"bytes"
	"testing"
	"time"
)

// Tests named after sentences of ibv_post_srq_recv() (Dotan Barak's page) that the
// srq package alone cannot show: they need QPs, the engine and the wire.

// "ibv_post_srq_recv() can be called whether any QP is associated with the SRQ or
// not and regardless to the state of the QPs which are associated with it."
func TestPostSRQRecv_RegardlessOfTheStateOfItsQPs(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	c := must[*CQ](t)(d.CreateCQ(64))
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 64, MaxSGE: 1}}))
	_ = must[int](t)(s.PostRecv([]RecvWR{{WRID: 1}})) // no QP yet
	for _, tc := range []struct {
		typ   QPType
		state QPState
	}{
		{QPTypeRC, QPSReset}, {QPTypeRC, QPSInit}, {QPTypeRC, QPSRTR}, {QPTypeRC, QPSRTS},
		{QPTypeRC, QPSSQD}, {QPTypeRC, QPSErr}, {QPTypeUD, QPSSQE},
	} {
		t.Run(tc.typ.String()+"/"+tc.state.String(), func(t *testing.T) {
			qp := must[*QP](t)(pd.CreateQP(QPInitAttr{Type: tc.typ, SendCQ: c, RecvCQ: c, SRQ: s, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}}))
			defer qp.Close()
			if tc.state == QPSSQE {
				driveToSQE(t, pd, qp, c)
			} else {
				driveTo(t, qp, tc.typ, tc.state)
			}
			if n, err := s.PostRecv([]RecvWR{{WRID: 2}, {WRID: 3}}); n != 2 || err != nil {
				t.Fatalf("PostRecv with a QP in %v = %d, %v", tc.state, n, err)
			}
		})
	}
}

// "If the QP is in RTR, RTS, SQD or SQE state, incoming messages will be processed
// and RRs will be fetched from the SRQ if needed." RTR and RTS are the engine's
// own tests (TestSRQFetchedOnlyInRTRAndRTS); here are SQD, for an RC QP, and SQE,
// which only a UD (or UC) QP can be in. The UD case also shows "If a RR is being
// posted to an UD QP, the Global Routing Header (GRH) of the incoming message will
// be placed in the first 40 bytes of the buffer(s) in the scatter list ... the
// actual data of the incoming message will start at an offset of 40 bytes".
func TestSRQ_QPInSQDOrSQEFetchesRRs(t *testing.T) {
	t.Run("RC in SQD", func(t *testing.T) {
		s, a, b := rcSRQPair(t, SRQAttr{MaxWR: 4, MaxSGE: 1}, 64, 64)
		noErr(t, b.qp.Modify(&QPAttr{State: QPSSQD}, QPAttrState))
		_ = must[int](t)(s.PostRecv([]RecvWR{{WRID: 7, SGL: []SGE{{Addr: b.mr.Addr(), Length: 64, LKey: b.mr.LKey()}}}}))
		copy(a.buf, "to a QP in SQD")
		_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled,
			SGL: []SGE{{Addr: a.mr.Addr(), Length: 14, LKey: a.mr.LKey()}}}}))
		checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], 1, WCSend, -1)
		checkWC(t, pollN(t, b.rcq, 1, wcTimeout)[0], 7, WCRecv, 14)
		if string(b.buf[:14]) != "to a QP in SQD" {
			t.Fatalf("received %q", b.buf[:14])
		}
	})
	t.Run("UD in SQE", func(t *testing.T) {
		da, db := pipePair(t)
		pdb := must[*PD](t)(db.AllocPD())
		s := must[*SRQ](t)(pdb.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 4, MaxSGE: 1}}))
		a := newSide(t, da, QPTypeUD, 64, nil, nil)
		b := newSide(t, db, QPTypeUD, 128, s, pdb)
		driveTo(t, a.qp, QPTypeUD, QPSRTS)
		driveToSQE(t, pdb, b.qp, b.scq)
		const grh = 40
		_ = must[int](t)(s.PostRecv([]RecvWR{{WRID: 8, SGL: []SGE{{Addr: b.mr.Addr(), Length: 128, LKey: b.mr.LKey()}}}}))
		copy(a.buf, "to a QP in SQE")
		ah := must[*AH](t)(a.pd.CreateAH(AHAttr{DGID: db.Addr(), SGIDIndex: uint8(da.GIDIndex()), HopLimit: 64, IsGlobal: true}))
		qkey := validAttr(QPSInit).QKey // driveTo and driveToSQE set it
		_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: 2, Opcode: WRSend, Flags: SendSignaled,
			SGL: []SGE{{Addr: a.mr.Addr(), Length: 14, LKey: a.mr.LKey()}}, AH: ah.AV(), RemoteQPN: b.qp.QPN(), RemoteQKey: qkey}}))
		checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], 2, WCSend, -1)
		wc := pollN(t, b.rcq, 1, wcTimeout)[0]
		checkWC(t, wc, 8, WCRecv, grh+14)
		if wc.Flags&WCGRH == 0 || string(b.buf[grh:grh+14]) != "to a QP in SQE" {
			t.Fatalf("completion %+v, data at offset 40 %q", wc, b.buf[grh:grh+14])
		}
	})
}

// FAQ "Which operations will consume RRs? If the remote side post a Send Request
// with one of the following opcodes, a RR will be consumed: Send, Send with
// Immediate, RDMA Write with immediate". An RDMA Write without immediate takes none.
func TestSRQ_SendSendWithImmAndWriteWithImmConsumeRRs(t *testing.T) {
	s, a, b := rcSRQPair(t, SRQAttr{MaxWR: 8, MaxSGE: 1}, 64, 64)
	for i := uint64(0); i < 4; i++ {
		_ = must[int](t)(s.PostRecv([]RecvWR{{WRID: 10 + i, SGL: []SGE{{Addr: b.mr.Addr() + 32, Length: 32, LKey: b.mr.LKey()}}}}))
	}
	sge := []SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}}
	for _, tc := range []struct {
		op     WROpcode
		consum bool
		wcOp   WCOpcode
	}{
		{WRRDMAWrite, false, 0},
		{WRSend, true, WCRecv},
		{WRSendWithImm, true, WCRecv},
		{WRRDMAWriteWithImm, true, WCRecvRDMAWithImm},
		{WRRDMAWrite, false, 0},
	} {
		before := s.q.Len()
		_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: 1, Opcode: tc.op, Flags: SendSignaled, SGL: sge, Imm: 5,
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}))
		pollN(t, a.scq, 1, wcTimeout)
		if !tc.consum {
			noMoreWC(t, b.rcq, 20*time.Millisecond)
			if s.q.Len() != before {
				t.Fatalf("opcode %d took a receive WR", tc.op)
			}
			continue
		}
		wc := pollN(t, b.rcq, 1, wcTimeout)[0]
		if wc.Opcode != tc.wcOp || wc.WRID != uint64(10+4-before) || s.q.Len() != before-1 {
			t.Fatalf("opcode %d: completion %+v, %d WRs left of %d", tc.op, wc, s.q.Len(), before)
		}
	}
}

// "sg_list ... The entries in the list can specify memory blocks that were
// registered by different Memory Regions. The maximum message size that it can
// serve is the sum of all of the memory buffers length in the scatter/gather list."
func TestPostSRQRecv_SGEsOfDifferentMRsHoldUpToTheirSum(t *testing.T) {
	s, a, b := rcSRQPair(t, SRQAttr{MaxWR: 4, MaxSGE: 2}, 256, 8)
	pdb := b.pd
	buf1, buf2 := make([]byte, 100), make([]byte, 100)
	mr1 := must[*MR](t)(pdb.RegMR(buf1, AccessLocalWrite))
	mr2 := must[*MR](t)(pdb.RegMR(buf2, AccessLocalWrite))
	rr := func(id uint64) RecvWR {
		return RecvWR{WRID: id, SGL: []SGE{{Addr: mr1.Addr(), Length: 100, LKey: mr1.LKey()}, {Addr: mr2.Addr(), Length: 100, LKey: mr2.LKey()}}}
	}
	_ = must[int](t)(s.PostRecv([]RecvWR{rr(1), rr(2)}))
	fill(a.buf[:201], 3)
	send := func(n int) {
		_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: uint64(n), Opcode: WRSend, Flags: SendSignaled,
			SGL: []SGE{{Addr: a.mr.Addr(), Length: uint32(n), LKey: a.mr.LKey()}}}}))
	}
	send(200) // exactly the sum: fills both MRs
	checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], 200, WCSend, -1)
	checkWC(t, pollN(t, b.rcq, 1, wcTimeout)[0], 1, WCRecv, 200)
	if !bytes.Equal(buf1, a.buf[:100]) || !bytes.Equal(buf2, a.buf[100:200]) {
		t.Fatal("message not scattered over the two MRs in order")
	}
	send(201) // one byte more than the sum: the RR cannot serve it
	if wc := pollN(t, b.rcq, 1, wcTimeout)[0]; wc.WRID != 2 || wc.Status != WCLocLenErr {
		t.Fatalf("receive of 201 bytes into 200: %+v (%v), want LOC_LEN_ERR", wc, wc.Status)
	}
	if wc := pollN(t, a.scq, 1, wcTimeout)[0]; wc.WRID != 201 || wc.Status != WCRemInvReqErr {
		t.Fatalf("send of 201 bytes: %+v (%v), want REM_INV_REQ_ERR", wc, wc.Status)
	}
}

// rcSRQPair connects two RC QPs over a pipe; b's QP takes its receive WRs from a
// new SRQ of attr on b's PD.
func rcSRQPair(t *testing.T, attr SRQAttr, aLen, bLen int) (*SRQ, *side, *side) {
	t.Helper()
	da, db := pipePair(t)
	pdb := must[*PD](t)(db.AllocPD())
	s := must[*SRQ](t)(pdb.CreateSRQ(SRQInitAttr{Attr: attr}))
	a := newSide(t, da, QPTypeRC, aLen, nil, nil)
	b := newSide(t, db, QPTypeRC, bLen, s, pdb)
	connectRC(t, a, b, MTU1024)
	return s, a, b
}
