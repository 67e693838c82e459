package transport

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
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
		typ               QPType
		op                WROpcode
		off, length, pmtu uint32
		want              bth.Opcode
		last              bool
	}{
		{QPTypeRC, WRSend, 0, 0, 1024, bth.RCSendOnly, true},
		{QPTypeRC, WRSend, 0, 1024, 1024, bth.RCSendOnly, true},
		{QPTypeRC, WRSend, 0, 1025, 1024, bth.RCSendFirst, false},
		{QPTypeRC, WRSend, 1024, 1025, 1024, bth.RCSendLast, true},
		{QPTypeRC, WRSend, 1024, 4096, 1024, bth.RCSendMiddle, false},
		{QPTypeRC, WRSendWithImm, 0, 10, 256, bth.RCSendOnlyImm, true},
		{QPTypeRC, WRSendWithImm, 256, 300, 256, bth.RCSendLastImm, true},
		{QPTypeRC, WRSendWithInv, 0, 10, 256, bth.RCSendOnlyInv, true},
		{QPTypeRC, WRSendWithInv, 256, 512, 256, bth.RCSendLastInv, true},
		{QPTypeRC, WRRDMAWrite, 0, 5000, 4096, bth.RCWriteFirst, false},
		{QPTypeRC, WRRDMAWrite, 4096, 5000, 4096, bth.RCWriteLast, true},
		{QPTypeRC, WRRDMAWriteWithImm, 0, 0, 4096, bth.RCWriteOnlyImm, true},
		{QPTypeRC, WRRDMAWriteWithImm, 4096, 9000, 4096, bth.RCWriteMiddle, false},
		{QPTypeRC, WRRDMARead, 0, 1 << 20, 1024, bth.RCReadRequest, true},
		{QPTypeRC, WRRDMARead, 2048, 1 << 20, 1024, bth.RCReadRequest, true},
		{QPTypeRC, WRAtomicCmpAndSwp, 0, 8, 1024, bth.RCCompareSwap, true},
		{QPTypeRC, WRAtomicFetchAndAdd, 0, 8, 1024, bth.RCFetchAdd, true},
		{QPTypeUC, WRSend, 0, 1025, 1024, bth.UCSendFirst, false},
		{QPTypeUC, WRRDMAWriteWithImm, 1024, 1025, 1024, bth.UCWriteLastImm, true},
		{QPTypeUD, WRSendWithImm, 0, 100, 1024, bth.UDSendOnlyImm, true},
	}
	for _, tc := range cases {
		q := &QP{typ: tc.typ, pmtu: tc.pmtu}
		w := &sendWQE{wr: SendWR{Opcode: tc.op}, length: tc.length}
		got, last := q.nextOpcode(w, tc.off)
		if got != tc.want || last != tc.last {
			t.Errorf("%v nextOpcode(%d, %d, %d, %d) = %v %v, want %v %v", tc.typ, tc.op, tc.off, tc.length, tc.pmtu, got, last, tc.want, tc.last)
		}
	}
}

func TestNumPackets(t *testing.T) {
	for _, tc := range []struct {
		op           WROpcode
		length, pmtu uint32
		want         uint32
	}{{WRRDMARead, 0, 1024, 1}, {WRRDMARead, 1024, 1024, 1}, {WRRDMARead, 1025, 1024, 2}, {WRSend, 1 << 20, 4096, 256}, {WRAtomicFetchAndAdd, 8, 256, 1}} {
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
	initMask = QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
	rtrMask  = QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRDAtomic | QPAttrMinRNRTimer
	rtsMask  = QPAttrState | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrSQPSN | QPAttrMaxQPRDAtomic
)

func TestModifyOKTable(t *testing.T) {
	cases := []struct {
		name      string
		cur, next QPState
		typ       QPType
		mask      QPAttrMask
		ok        bool
	}{
		{"RC reset->init", QPSReset, QPSInit, QPTypeRC, initMask, true},
		{"RC reset->init missing access", QPSReset, QPSInit, QPTypeRC, initMask &^ QPAttrAccessFlags, false},
		{"RC reset->init with qkey", QPSReset, QPSInit, QPTypeRC, initMask | QPAttrQKey, false},
		{"UD reset->init", QPSReset, QPSInit, QPTypeUD, QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey, true},
		{"UD reset->init with access", QPSReset, QPSInit, QPTypeUD, QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey | QPAttrAccessFlags, false},
		{"RC reset->rtr", QPSReset, QPSRTR, QPTypeRC, rtrMask, false},
		{"RC init->rtr", QPSInit, QPSRTR, QPTypeRC, rtrMask, true},
		{"RC init->rtr missing min rnr", QPSInit, QPSRTR, QPTypeRC, rtrMask &^ QPAttrMinRNRTimer, false},
		{"UC init->rtr", QPSInit, QPSRTR, QPTypeUC, QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN, true},
		{"UC init->rtr with rd atomic", QPSInit, QPSRTR, QPTypeUC, QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRDAtomic, false},
		{"UD init->rtr", QPSInit, QPSRTR, QPTypeUD, QPAttrState, true},
		{"UD init->rtr with av", QPSInit, QPSRTR, QPTypeUD, QPAttrState | QPAttrAV, false},
		{"RC rtr->rts", QPSRTR, QPSRTS, QPTypeRC, rtsMask, true},
		{"RC rtr->rts missing timeout", QPSRTR, QPSRTS, QPTypeRC, rtsMask &^ QPAttrTimeout, false},
		{"UD rtr->rts", QPSRTR, QPSRTS, QPTypeUD, QPAttrState | QPAttrSQPSN, true},
		{"UD rtr->rts with cur state", QPSRTR, QPSRTS, QPTypeUD, QPAttrState | QPAttrSQPSN | QPAttrCurState | QPAttrQKey, true},
		{"RC rts->sqd", QPSRTS, QPSSQD, QPTypeRC, QPAttrState | QPAttrEnSQDAsyncNotify, true},
		{"RC sqd->rts", QPSSQD, QPSRTS, QPTypeRC, QPAttrState, true},
		{"RC sqd->sqd timeout", QPSSQD, QPSSQD, QPTypeRC, QPAttrState | QPAttrTimeout, true},
		{"UD sqd->sqd timeout", QPSSQD, QPSSQD, QPTypeUD, QPAttrState | QPAttrTimeout, false},
		{"RC sqe->rts", QPSSQE, QPSRTS, QPTypeRC, QPAttrState, false},
		{"UD sqe->rts", QPSSQE, QPSRTS, QPTypeUD, QPAttrState, true},
		{"RC rts->rts min rnr", QPSRTS, QPSRTS, QPTypeRC, QPAttrState | QPAttrMinRNRTimer, true},
		{"RC rts->rts sq psn", QPSRTS, QPSRTS, QPTypeRC, QPAttrState | QPAttrSQPSN, false},
		{"any->err", QPSRTS, QPSErr, QPTypeRC, QPAttrState, true},
		{"err->reset", QPSErr, QPSReset, QPTypeUD, QPAttrState, true},
		{"err->rts", QPSErr, QPSRTS, QPTypeRC, QPAttrState, false},
		{"reset->err", QPSReset, QPSErr, QPTypeRC, QPAttrState, true},
		{"init->rts", QPSInit, QPSRTS, QPTypeRC, rtsMask, false},
		{"cur state from init", QPSInit, QPSInit, QPTypeRC, QPAttrState | QPAttrCurState, false},
		{"rtr->rtr", QPSRTR, QPSRTR, QPTypeRC, QPAttrState, false},
		{"cap never", QPSRTS, QPSRTS, QPTypeRC, QPAttrState | QPAttrCap, false},
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
	q := n.createQP(t, QPTypeRC, rcOpts{})
	mustFail := func(a QPAttr, m QPAttrMask) {
		t.Helper()
		before, _ := q.Query()
		if err := q.Modify(&a, m); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("Modify(%v, %v) = %v, want EINVAL", a.State, m, err)
		}
		if after, _ := q.Query(); after != before {
			t.Fatalf("failed Modify changed the QP: %+v -> %+v", before, after)
		}
	}
	mustFail(QPAttr{State: QPSRTR}, QPAttrState)
	mustFail(QPAttr{State: QPSInit}, initMask&^QPAttrPort)
	mustFail(QPAttr{State: QPSInit, PortNum: 2}, initMask)
	if _, err := q.PostSend([]SendWR{{Opcode: WRSend}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("PostSend in RESET = %v", err)
	}
	if _, err := q.PostRecv([]srq.RecvWR{{}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("PostRecv in RESET = %v", err)
	}
	connect(t, q, netip.MustParseAddr("10.0.0.2"), 0x42, rcOpts{})
	if a, _ := q.Query(); a.State != QPSRTS || a.DestQPN != 0x42 || a.PathMTU != MTU1024 {
		t.Fatalf("after connect: %+v", a)
	}
	if err := q.Modify(&QPAttr{State: QPSSQD}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(&QPAttr{State: QPSRTS}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	if _, err := q.PostRecv([]srq.RecvWR{{WRID: 5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.PostSend([]SendWR{{WRID: 6, Opcode: WRRDMAWrite}, {WRID: 7, Opcode: WROpcode(77)}}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("bad opcode = %v", err)
	} else if e := (*verbserr.Error)(nil); !errors.As(err, &e) || e.Index != 1 {
		t.Fatalf("bad_wr index: %v", err)
	}
	if err := q.Modify(&QPAttr{State: QPSErr}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	wcs := waitWC(t, n.scq, 1, time.Second)
	if wcs[0].WRID != 6 || wcs[0].Status != cq.WRFlushErr {
		t.Fatalf("send flush %s", wcString(wcs[0]))
	}
	if w := waitWC(t, n.rcq, 1, time.Second)[0]; w.WRID != 5 || w.Status != cq.WRFlushErr {
		t.Fatalf("recv flush %s", wcString(w))
	}
	if err := q.Modify(&QPAttr{State: QPSReset}, QPAttrState); err != nil {
		t.Fatal(err)
	}
	if a, _ := q.Query(); a.State != QPSReset {
		t.Fatalf("state %v", a.State)
	}
	if err := q.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.e.CreateQPWithNum(&QPInitAttr{Type: QPTypeUD, SendCQ: n.scq, RecvCQ: n.rcq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}}, 1); err != nil {
		t.Fatalf("GSI QP 1: %v", err)
	}
	if _, err := n.e.CreateQPWithNum(&QPInitAttr{Type: QPTypeUD, SendCQ: n.scq, RecvCQ: n.rcq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}}, 1); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second QP 1: %v", err)
	}
}
