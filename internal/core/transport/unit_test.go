package transport

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/internal/core/verbserr"
	"github.com/goroce/goroce/link"
)

func TestCheckPSN(t *testing.T) {
	cases := []struct {
		name        string
		expected, p bth.PSN
		want        verdict
	}{
		{"expected", 100, 100, verdictExpected},
		{"one ahead", 100, 101, verdictAhead},
		{"one behind", 100, 99, verdictDuplicate},
		{"wrap ahead", 0xFFFFFF, 0, verdictAhead},
		{"wrap behind", 0, 0xFFFFFF, verdictDuplicate},
		{"wrap expected", 0, 0, verdictExpected},
		{"far behind", 0x800000, 1, verdictDuplicate},
	}
	for _, tc := range cases {
		if got := checkPSN(tc.expected, tc.p); got != tc.want {
			t.Errorf("%s: checkPSN(%#x, %#x) = %v, want %v", tc.name, tc.expected, tc.p, got, tc.want)
		}
	}
}

func TestNextOpcode(t *testing.T) {
	cases := []struct {
		typ               verbs.QPType
		op                verbs.WROpcode
		off, length, pmtu uint32
		want              bth.Opcode
		last              bool
	}{
		{verbs.QPTypeRC, verbs.WRSend, 0, 0, 1024, bth.RCSendOnly, true},
		{verbs.QPTypeRC, verbs.WRSend, 0, 1024, 1024, bth.RCSendOnly, true},
		{verbs.QPTypeRC, verbs.WRSend, 0, 1025, 1024, bth.RCSendFirst, false},
		{verbs.QPTypeRC, verbs.WRSend, 1024, 1025, 1024, bth.RCSendLast, true},
		{verbs.QPTypeRC, verbs.WRSend, 1024, 4096, 1024, bth.RCSendMiddle, false},
		{verbs.QPTypeRC, verbs.WRSendWithImm, 0, 10, 256, bth.RCSendOnlyImm, true},
		{verbs.QPTypeRC, verbs.WRSendWithImm, 256, 300, 256, bth.RCSendLastImm, true},
		{verbs.QPTypeRC, verbs.WRSendWithInv, 0, 10, 256, bth.RCSendOnlyInv, true},
		{verbs.QPTypeRC, verbs.WRSendWithInv, 256, 512, 256, bth.RCSendLastInv, true},
		{verbs.QPTypeRC, verbs.WRRDMAWrite, 0, 5000, 4096, bth.RCWriteFirst, false},
		{verbs.QPTypeRC, verbs.WRRDMAWrite, 4096, 5000, 4096, bth.RCWriteLast, true},
		{verbs.QPTypeRC, verbs.WRRDMAWriteWithImm, 0, 0, 4096, bth.RCWriteOnlyImm, true},
		{verbs.QPTypeRC, verbs.WRRDMAWriteWithImm, 4096, 9000, 4096, bth.RCWriteMiddle, false},
		{verbs.QPTypeRC, verbs.WRRDMARead, 0, 1 << 20, 1024, bth.RCReadRequest, true},
		{verbs.QPTypeRC, verbs.WRRDMARead, 2048, 1 << 20, 1024, bth.RCReadRequest, true},
		{verbs.QPTypeRC, verbs.WRAtomicCmpAndSwp, 0, 8, 1024, bth.RCCompareSwap, true},
		{verbs.QPTypeRC, verbs.WRAtomicFetchAndAdd, 0, 8, 1024, bth.RCFetchAdd, true},
		{verbs.QPTypeUC, verbs.WRSend, 0, 1025, 1024, bth.UCSendFirst, false},
		{verbs.QPTypeUC, verbs.WRRDMAWriteWithImm, 1024, 1025, 1024, bth.UCWriteLastImm, true},
		{verbs.QPTypeUD, verbs.WRSendWithImm, 0, 100, 1024, bth.UDSendOnlyImm, true},
	}
	for _, tc := range cases {
		q := &QP{typ: tc.typ, pmtu: tc.pmtu}
		w := &sendWQE{wr: verbs.SendWR{Opcode: tc.op}, length: tc.length}
		q.req.q = q
		got, last := q.req.nextOpcode(w, tc.off)
		if got != tc.want || last != tc.last {
			t.Errorf("%v nextOpcode(%d, %d, %d, %d) = %v %v, want %v %v", tc.typ, tc.op, tc.off, tc.length, tc.pmtu, got, last, tc.want, tc.last)
		}
	}
}

func TestNumPackets(t *testing.T) {
	for _, tc := range []struct {
		op           verbs.WROpcode
		length, pmtu uint32
		want         uint32
	}{{verbs.WRRDMARead, 0, 1024, 1}, {verbs.WRRDMARead, 1024, 1024, 1}, {verbs.WRRDMARead, 1025, 1024, 2}, {verbs.WRSend, 1 << 20, 4096, 256}, {verbs.WRAtomicFetchAndAdd, 8, 256, 1}} {
		if got := numPackets(tc.op, tc.length, tc.pmtu); got != tc.want {
			t.Errorf("numPackets(%d, %d, %d) = %d, want %d", tc.op, tc.length, tc.pmtu, got, tc.want)
		}
	}
}

func TestRNRTimerTable(t *testing.T) {
	for code, want := range map[uint8]time.Duration{0: 655360 * time.Microsecond, 1: 10 * time.Microsecond, 12: 640 * time.Microsecond, 14: 1280 * time.Microsecond, 31: 491520 * time.Microsecond} {
		if got := bth.RNRTimerDuration(code); got != want {
			t.Errorf("RNR timer code %d = %v, want %v", code, got, want)
		}
	}
}

const (
	initMask = verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags
	rtrMask  = verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRDAtomic | verbs.QPAttrMinRNRTimer
	rtsMask  = verbs.QPAttrState | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrSQPSN | verbs.QPAttrMaxQPRDAtomic
)

func TestModifyOKTable(t *testing.T) {
	cases := []struct {
		name      string
		cur, next verbs.QPState
		typ       verbs.QPType
		mask      verbs.QPAttrMask
		ok        bool
	}{
		{"RC reset->init", verbs.QPSReset, verbs.QPSInit, verbs.QPTypeRC, initMask, true},
		{"RC reset->init missing access", verbs.QPSReset, verbs.QPSInit, verbs.QPTypeRC, initMask &^ verbs.QPAttrAccessFlags, false},
		{"RC reset->init with qkey", verbs.QPSReset, verbs.QPSInit, verbs.QPTypeRC, initMask | verbs.QPAttrQKey, false},
		{"UD reset->init", verbs.QPSReset, verbs.QPSInit, verbs.QPTypeUD, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey, true},
		{"UD reset->init with access", verbs.QPSReset, verbs.QPSInit, verbs.QPTypeUD, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey | verbs.QPAttrAccessFlags, false},
		{"RC reset->rtr", verbs.QPSReset, verbs.QPSRTR, verbs.QPTypeRC, rtrMask, false},
		{"RC init->rtr", verbs.QPSInit, verbs.QPSRTR, verbs.QPTypeRC, rtrMask, true},
		{"RC init->rtr missing min rnr", verbs.QPSInit, verbs.QPSRTR, verbs.QPTypeRC, rtrMask &^ verbs.QPAttrMinRNRTimer, false},
		{"UC init->rtr", verbs.QPSInit, verbs.QPSRTR, verbs.QPTypeUC, verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN, true},
		{"UC init->rtr with rd atomic", verbs.QPSInit, verbs.QPSRTR, verbs.QPTypeUC, verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRDAtomic, false},
		{"UD init->rtr", verbs.QPSInit, verbs.QPSRTR, verbs.QPTypeUD, verbs.QPAttrState, true},
		{"UD init->rtr with av", verbs.QPSInit, verbs.QPSRTR, verbs.QPTypeUD, verbs.QPAttrState | verbs.QPAttrAV, false},
		{"RC rtr->rts", verbs.QPSRTR, verbs.QPSRTS, verbs.QPTypeRC, rtsMask, true},
		{"RC rtr->rts missing timeout", verbs.QPSRTR, verbs.QPSRTS, verbs.QPTypeRC, rtsMask &^ verbs.QPAttrTimeout, false},
		{"UD rtr->rts", verbs.QPSRTR, verbs.QPSRTS, verbs.QPTypeUD, verbs.QPAttrState | verbs.QPAttrSQPSN, true},
		{"UD rtr->rts with cur state", verbs.QPSRTR, verbs.QPSRTS, verbs.QPTypeUD, verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrCurState | verbs.QPAttrQKey, true},
		{"RC rts->sqd", verbs.QPSRTS, verbs.QPSSQD, verbs.QPTypeRC, verbs.QPAttrState | verbs.QPAttrEnSQDAsyncNotify, true},
		{"RC sqd->rts", verbs.QPSSQD, verbs.QPSRTS, verbs.QPTypeRC, verbs.QPAttrState, true},
		{"RC sqd->sqd timeout", verbs.QPSSQD, verbs.QPSSQD, verbs.QPTypeRC, verbs.QPAttrState | verbs.QPAttrTimeout, true},
		{"UD sqd->sqd timeout", verbs.QPSSQD, verbs.QPSSQD, verbs.QPTypeUD, verbs.QPAttrState | verbs.QPAttrTimeout, false},
		{"RC sqe->rts", verbs.QPSSQE, verbs.QPSRTS, verbs.QPTypeRC, verbs.QPAttrState, false},
		{"UD sqe->rts", verbs.QPSSQE, verbs.QPSRTS, verbs.QPTypeUD, verbs.QPAttrState, true},
		{"RC rts->rts min rnr", verbs.QPSRTS, verbs.QPSRTS, verbs.QPTypeRC, verbs.QPAttrState | verbs.QPAttrMinRNRTimer, true},
		{"RC rts->rts sq psn", verbs.QPSRTS, verbs.QPSRTS, verbs.QPTypeRC, verbs.QPAttrState | verbs.QPAttrSQPSN, false},
		{"any->err", verbs.QPSRTS, verbs.QPSErr, verbs.QPTypeRC, verbs.QPAttrState, true},
		{"err->reset", verbs.QPSErr, verbs.QPSReset, verbs.QPTypeUD, verbs.QPAttrState, true},
		{"err->rts", verbs.QPSErr, verbs.QPSRTS, verbs.QPTypeRC, verbs.QPAttrState, false},
		{"reset->err", verbs.QPSReset, verbs.QPSErr, verbs.QPTypeRC, verbs.QPAttrState, true},
		{"init->rts", verbs.QPSInit, verbs.QPSRTS, verbs.QPTypeRC, rtsMask, false},
		{"cur state from init", verbs.QPSInit, verbs.QPSInit, verbs.QPTypeRC, verbs.QPAttrState | verbs.QPAttrCurState, false},
		{"rtr->rtr", verbs.QPSRTR, verbs.QPSRTR, verbs.QPTypeRC, verbs.QPAttrState, false},
		{"cap never", verbs.QPSRTS, verbs.QPSRTS, verbs.QPTypeRC, verbs.QPAttrState | verbs.QPAttrCap, false},
	}
	for _, tc := range cases {
		if ok, why := modifyOK(tc.cur, tc.next, tc.typ, tc.mask); ok != tc.ok {
			t.Errorf("%s: modifyOK = %v (%s), want %v", tc.name, ok, why, tc.ok)
		}
	}
}

// nullLink is a Link that never delivers anything, for verb tests.
type nullLink struct{ done chan struct{} }

func (l *nullLink) ReadBatch(m []link.Message) (int, error) { <-l.done; return 0, errClosed }
func (l *nullLink) WriteBatch(m []link.Message) (int, error) {
	return len(m), nil
}
func (l *nullLink) LocalAddr() netip.AddrPort { return addrA }
func (l *nullLink) SourcePort(uint16) bool    { return true }
func (l *nullLink) BatchSize() int            { return 8 }
func (l *nullLink) Close() error {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return nil
}

func TestModifyQPStateMachine(t *testing.T) {
	n := newNode(t, &nullLink{done: make(chan struct{})}, 1)
	defer n.close(t)
	q := n.createQP(t, verbs.QPTypeRC, rcOpts{})
	mustFail := func(a verbs.QPAttr, m verbs.QPAttrMask) {
		t.Helper()
		before, _ := q.Query()
		if err := q.Modify(&a, m); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("Modify(%v, %v) = %v, want EINVAL", a.State, m, err)
		}
		if after, _ := q.Query(); after != before {
			t.Fatalf("failed Modify changed the QP: %+v -> %+v", before, after)
		}
	}
	mustFail(verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState)
	mustFail(verbs.QPAttr{State: verbs.QPSInit}, initMask&^verbs.QPAttrPort)
	mustFail(verbs.QPAttr{State: verbs.QPSInit, PortNum: 2}, initMask)
	if _, err := q.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("PostSend in RESET = %v", err)
	}
	if _, err := q.PostRecv([]verbs.RecvWR{{}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("PostRecv in RESET = %v", err)
	}
	connect(t, q, netip.MustParseAddr("10.0.0.2"), 0x42, rcOpts{})
	if a, _ := q.Query(); a.State != verbs.QPSRTS || a.DestQPN != 0x42 || a.PathMTU != verbs.MTU1024 {
		t.Fatalf("after connect: %+v", a)
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPSSQD}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if _, err := q.PostRecv([]verbs.RecvWR{{WRID: 5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.PostSend([]verbs.SendWR{{WRID: 6, Opcode: verbs.WRRDMAWrite}, {WRID: 7, Opcode: verbs.WROpcode(77)}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("bad opcode = %v", err)
	} else if e := (*verbserr.Error)(nil); !errors.As(err, &e) || e.Index != 1 {
		t.Fatalf("bad_wr index: %v", err)
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	wcs := waitWC(t, n.scq, 1, 10*time.Second)
	if wcs[0].WRID != 6 || wcs[0].Status != verbs.WCWRFlushErr {
		t.Fatalf("send flush %s", wcString(wcs[0]))
	}
	if w := waitWC(t, n.rcq, 1, 10*time.Second)[0]; w.WRID != 5 || w.Status != verbs.WCWRFlushErr {
		t.Fatalf("recv flush %s", wcString(w))
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if a, _ := q.Query(); a.State != verbs.QPSReset {
		t.Fatalf("state %v", a.State)
	}
	if err := q.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.e.CreateQPWithNum(&QPInitAttr{Type: verbs.QPTypeUD, SendCQ: n.scq, RecvCQ: n.rcq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}, 1); err != nil {
		t.Fatalf("GSI QP 1: %v", err)
	}
	if _, err := n.e.CreateQPWithNum(&QPInitAttr{Type: verbs.QPTypeUD, SendCQ: n.scq, RecvCQ: n.rcq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}, 1); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second QP 1: %v", err)
	}
}
