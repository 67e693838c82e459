package transport

import (
	"bytes"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
)

// TestSendQueueError: a local send error on a UD or UC QP completes the WR
// with its error, moves the QP to SQE (not ERR) and flushes the other send
// WRs, those posted later too; receives go on; ibv_modify_qp SQE→RTS
// resumes sending. An RC QP with the same error goes to ERR.
func TestSendQueueError(t *testing.T) {
	for _, typ := range []verbs.QPType{verbs.QPTypeUD, verbs.QPTypeUC, verbs.QPTypeRC} {
		t.Run(typ.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { sendQueueError(t, typ) })
		})
	}
}

func sendQueueError(t *testing.T, typ verbs.QPType) {
	a, b := pair(t, nil)
	defer a.close(t)
	defer b.close(t)
	var qa, qb *QP
	switch typ {
	case verbs.QPTypeUD:
		qa, qb = udQP(t, a, 9), udQP(t, b, 9)
	case verbs.QPTypeUC:
		qa, qb = ucPair(t, a, b)
	default:
		qa, qb = rcPair(t, a, b, rcOpts{})
	}
	src := a.mem.reg(1, pattern(64, 3), verbs.AccessLocalWrite)
	dstA := a.mem.reg(1, make([]byte, grhLen+64), verbs.AccessLocalWrite)
	dstB := b.mem.reg(1, make([]byte, grhLen+64), verbs.AccessLocalWrite)
	wr := func(id uint64, sge verbs.SGE) verbs.SendWR {
		w := verbs.SendWR{WRID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{sge}}
		if typ == verbs.QPTypeUD {
			w.AH, w.RemoteQPN, w.RemoteQKey = &verbs.AddressVector{DGID: b.addr}, qb.QPN(), 9
		}
		return w
	}
	post := func(w ...verbs.SendWR) {
		t.Helper()
		if _, err := qa.PostSend(w); err != nil {
			t.Fatal(err)
		}
	}
	bad := verbs.SGE{Addr: src.Addr, Length: 8, LKey: src.LKey + 100}
	post(wr(1, bad), wr(2, src.sge(0, 8)))
	wcs := waitWC(t, a.scq, 2, time.Second)
	if wcs[0].WRID != 1 || wcs[0].Status != verbs.WCLocProtErr || wcs[1].WRID != 2 || wcs[1].Status != verbs.WCWRFlushErr {
		t.Fatalf("completions %s, %s; want LOC_PROT_ERR then WR_FLUSH_ERR", wcString(wcs[0]), wcString(wcs[1]))
	}
	want := verbs.QPSSQE
	if typ == verbs.QPTypeRC {
		want = verbs.QPSErr
	}
	if st, _ := qa.Query(); st.State != want {
		t.Fatalf("state %v after a local send error, want %v", st.State, want)
	}
	if typ == verbs.QPTypeRC {
		return
	}
	// A WR posted in SQE is accepted and flushed.
	post(wr(3, src.sge(0, 8)))
	if w := waitWC(t, a.scq, 1, time.Second)[0]; w.WRID != 3 || w.Status != verbs.WCWRFlushErr {
		t.Fatalf("WR posted in SQE: %s", wcString(w))
	}
	// The receive side still works: b sends to a.
	if _, err := qa.PostRecv([]verbs.RecvWR{{WRID: 10, SGL: []verbs.SGE{dstA.sge(0, grhLen+64)}}}); err != nil {
		t.Fatal(err)
	}
	back := b.mem.reg(1, pattern(16, 9), verbs.AccessLocalWrite)
	bw := verbs.SendWR{WRID: 20, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{back.sge(0, 16)}}
	if typ == verbs.QPTypeUD {
		bw.AH, bw.RemoteQPN, bw.RemoteQKey = &verbs.AddressVector{DGID: a.addr}, qa.QPN(), 9
	}
	if _, err := qb.PostSend([]verbs.SendWR{bw}); err != nil {
		t.Fatal(err)
	}
	if w := waitWC(t, a.rcq, 1, time.Second)[0]; w.WRID != 10 || w.Status != verbs.WCSuccess {
		t.Fatalf("receive in SQE: %s", wcString(w))
	}
	// SQE -> RTS resumes sending.
	if err := qa.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 11, SGL: []verbs.SGE{dstB.sge(0, grhLen+64)}}}); err != nil {
		t.Fatal(err)
	}
	post(wr(4, src.sge(0, 8)))
	if w := waitWC(t, a.scq, 1, time.Second)[0]; w.WRID != 4 || w.Status != verbs.WCSuccess {
		t.Fatalf("send after SQE->RTS: %s", wcString(w))
	}
	r := waitWC(t, b.rcq, 1, time.Second)[0]
	off := 0
	if typ == verbs.QPTypeUD {
		off = grhLen
	}
	if r.WRID != 11 || r.Status != verbs.WCSuccess || !bytes.Equal(dstB.Buf[off:off+8], src.Buf[:8]) {
		t.Fatalf("receive after SQE->RTS: %s", wcString(r))
	}
}
