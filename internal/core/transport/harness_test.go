package transport

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/impair"
)

// fakeMem is a Memory for tests: regions by key, registered by the test.
type fakeMem struct {
	mu   sync.RWMutex
	byL  map[uint32]*Region
	byR  map[uint32]*Region
	next uint32
	addr uint64

	windows     map[uint32]bool // rkeys BindMW made
	binds       []MWBind        // every BindMW call
	invalidated []uint32        // every Invalidate call
	failBind    bool            // BindMW refuses
	bindQP      bool            // BindMW binds windows to the QP (type 2B)
}

func newFakeMem() *fakeMem {
	return &fakeMem{byL: map[uint32]*Region{}, byR: map[uint32]*Region{}, windows: map[uint32]bool{}, next: 0x100, addr: 0x10000}
}

func (m *fakeMem) LocalRegion(k uint32) *Region {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.byL[k]
}

func (m *fakeMem) RemoteRegion(k uint32) *Region {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.byR[k]
}

// reg registers buf in PD pd with acc at a fresh iova.
func (m *fakeMem) reg(pd uint32, buf []byte, acc verbs.Access) *Region {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next += 2
	r := &Region{PD: pd, Addr: m.addr, Buf: buf, Access: acc, LKey: m.next, RKey: m.next + 1}
	m.addr = (m.addr + uint64(len(buf)) + 0x1fff) &^ 0xfff
	m.byL[r.LKey] = r
	m.byR[r.RKey] = r
	return r
}

// BindMW is a stand-in for roce's window rules, for the engine's tests: it
// records the bind and, unless failBind is set, makes NewRKey resolve to the
// range of the MR it names (bound to the executing QP when bindQP is set).
func (m *fakeMem) BindMW(b *MWBind) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.binds = append(m.binds, *b)
	mr := m.byL[b.MRLKey]
	if m.failBind || mr == nil {
		return errors.New("fake bind refused")
	}
	off := b.Addr - mr.Addr
	r := &Region{PD: b.PD, Addr: b.Addr, Buf: mr.Buf[off : off+b.Length], Access: b.Access, RKey: b.NewRKey}
	if m.bindQP {
		r.QPN = b.QPN
	}
	m.byR[b.NewRKey] = r
	m.windows[b.NewRKey] = true
	return nil
}

// Invalidate is a stand-in for roce's invalidation rules: a window BindMW
// made, of the QP's PD and bound to it if bound at all, stops resolving.
func (m *fakeMem) Invalidate(rkey, qpn, pd uint32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.invalidated = append(m.invalidated, rkey)
	r := m.byR[rkey]
	if !m.windows[rkey] || r == nil || r.PD != pd || (r.QPN != 0 && r.QPN != qpn) {
		return errors.New("fake invalidate refused")
	}
	delete(m.byR, rkey)
	delete(m.windows, rkey)
	return nil
}

func (r *Region) sge(off, n int) verbs.SGE {
	return verbs.SGE{Addr: r.Addr + uint64(off), Length: uint32(n), LKey: r.LKey}
}

// node is one engine with its memory, CQs and events.
type node struct {
	e      *Engine
	mem    *fakeMem
	scq    *cq.Queue
	rcq    *cq.Queue
	addr   netip.Addr
	mu     sync.Mutex
	events []Event
}

func (n *node) onEvent(ev Event) {
	n.mu.Lock()
	n.events = append(n.events, ev)
	n.mu.Unlock()
}

func (n *node) hasEvent(t verbs.EventType) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ev := range n.events {
		if ev.Type == t {
			return true
		}
	}
	return false
}

// countEvents counts the events of type t raised for QP qpn.
func (n *node) countEvents(t verbs.EventType, qpn uint32) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := 0
	for _, ev := range n.events {
		if ev.Type == t && ev.QPN == qpn {
			c++
		}
	}
	return c
}

const cqSize = 4096

func newNode(t testing.TB, l link.Link, shards int, opts ...func(*Config)) *node {
	t.Helper()
	n := &node{mem: newFakeMem(), addr: l.LocalAddr().Addr()}
	var err error
	if n.scq, err = cq.New(cqSize, 1<<16); err != nil {
		t.Fatal(err)
	}
	if n.rcq, err = cq.New(cqSize, 1<<16); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Link: l, Memory: n.mem, Shards: shards, OnEvent: n.onEvent}
	for _, o := range opts {
		o(&cfg)
	}
	n.e, err = NewEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RunToCompletion {
		pollersMu.Lock()
		pollers[n.scq], pollers[n.rcq] = n.e, n.e
		pollersMu.Unlock()
		t.Cleanup(func() {
			pollersMu.Lock()
			delete(pollers, n.scq)
			delete(pollers, n.rcq)
			pollersMu.Unlock()
		})
	}
	return n
}

// pollers maps the CQs of run-to-completion nodes to their engines: waitWC
// polls the engine (Engine.Poll) before the CQ, as roce's CQ.Poll does, so
// the waiting goroutine receives and completes itself.
var (
	pollersMu sync.Mutex
	pollers   = map[*cq.Queue]*Engine{}
)

func enginePoll(c *cq.Queue) {
	pollersMu.Lock()
	e := pollers[c]
	pollersMu.Unlock()
	if e != nil {
		e.Poll()
	}
}

var (
	addrA = netip.MustParseAddrPort("10.0.0.1:4791")
	addrB = netip.MustParseAddrPort("10.0.0.2:4791")
)

// pair makes two nodes joined by a Pipe, optionally impaired.
func pair(t testing.TB, loss *impair.LossConfig, opts ...func(*Config)) (*node, *node) {
	t.Helper()
	la, lb := link.Pipe(addrA, addrB)
	if loss != nil {
		la = impair.NewLossy(la, *loss)
		lc := *loss
		lc.Seed++
		lb = impair.NewLossy(lb, lc)
	}
	return newNode(t, la, 2, opts...), newNode(t, lb, 2, opts...)
}

// runToCompletion is the option of nodes in run-to-completion mode.
func runToCompletion(c *Config) { c.RunToCompletion = true }

// readerHandsOff is the option of default-mode nodes whose readers wake the
// shard goroutines they fed instead of running them (Engine.readerDrives):
// the path of a batch whose shard another goroutine holds.
func readerHandsOff(c *Config) { c.readerDrives = driveNever }

func (n *node) close(t testing.TB) {
	if err := n.e.Close(); err != nil {
		t.Logf("close: %v", err)
	}
}

type rcOpts struct {
	mtu                verbs.MTU
	timeout, retry     uint8
	rnrRetry, minRNR   uint8
	maxRD              uint8
	sendWR, recvWR     uint32
	srq                *srq.Queue
	sqSigAll           bool
	access             verbs.Access
	recvCQ, sendCQ     *cq.Queue
	skipRTS            bool
	maxInline          uint32
	noConnect, noSetup bool
	cc                 dcqcn.Config // the engine's congestion control (wire)
	srcPort            uint16       // the address vector's UDP source port (0: rxe's)
}

func (o *rcOpts) defaults() {
	if o.mtu == 0 {
		o.mtu = verbs.MTU1024
	}
	if o.timeout == 0 {
		o.timeout = 14
	}
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnrRetry == 0 {
		o.rnrRetry = 7
	}
	if o.minRNR == 0 {
		o.minRNR = 1
	}
	if o.maxRD == 0 {
		o.maxRD = 16
	}
	if o.sendWR == 0 {
		o.sendWR = 256
	}
	if o.recvWR == 0 {
		o.recvWR = 256
	}
	if o.access == 0 {
		o.access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
}

func (n *node) createQP(t testing.TB, typ verbs.QPType, o rcOpts) *QP {
	t.Helper()
	o.defaults()
	scq, rcq := n.scq, n.rcq
	if o.sendCQ != nil {
		scq = o.sendCQ
	}
	if o.recvCQ != nil {
		rcq = o.recvCQ
	}
	q, err := n.e.CreateQP(&QPInitAttr{Type: typ, SendCQ: scq, RecvCQ: rcq, SRQ: o.srq, PD: 1, SQSigAll: o.sqSigAll,
		Cap: verbs.QPCap{MaxSendWR: o.sendWR, MaxRecvWR: o.recvWR, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: o.maxInline}})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// connect moves q to RTS (RTR only if o.skipRTS) talking to peer QPN dqpn at addr.
func connect(t testing.TB, q *QP, dst netip.Addr, dqpn uint32, o rcOpts) {
	t.Helper()
	o.defaults()
	must := func(a verbs.QPAttr, m verbs.QPAttrMask) {
		t.Helper()
		if err := q.Modify(&a, m); err != nil {
			t.Fatal(err)
		}
	}
	must(verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: o.access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	must(verbs.QPAttr{State: verbs.QPSRTR, AV: verbs.AddressVector{DGID: dst, SrcPort: o.srcPort}, PathMTU: o.mtu, DestQPN: dqpn, RQPSN: 0x123400 + dqpn,
		MaxDestRDAtomic: 16, MinRNRTimer: o.minRNR},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRDAtomic|verbs.QPAttrMinRNRTimer)
	if o.skipRTS {
		return
	}
	must(verbs.QPAttr{State: verbs.QPSRTS, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry,
		SQPSN: 0x123400 + q.QPN(), MaxRDAtomic: o.maxRD},
		verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRDAtomic)
}

func rcPair(t testing.TB, a, b *node, o rcOpts) (*QP, *QP) {
	t.Helper()
	qa := a.createQP(t, verbs.QPTypeRC, o)
	qb := b.createQP(t, verbs.QPTypeRC, o)
	connect(t, qa, b.addr, qb.QPN(), o)
	connect(t, qb, a.addr, qa.QPN(), o)
	return qa, qb
}

// waitWC polls c until n completions arrived or the (virtual) deadline.
func waitWC(t testing.TB, c *cq.Queue, n int, within time.Duration) []verbs.WC {
	t.Helper()
	var out []verbs.WC
	buf := make([]verbs.WC, 64)
	deadline := time.Now().Add(within)
	for len(out) < n {
		enginePoll(c)
		k, _ := c.Poll(buf)
		out = append(out, buf[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("got %d of %d completions within %v: %v", len(out), n, within, out)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}

// noMoreWC checks that c stays empty for d.
// It is a negative window: a loaded host shortens the stretch of the
// engine's work it covers but never fails a correct engine. Where a counter
// or an ordered completion proves the exchange was processed, wait for that
// first and pass 0: the check is then exact.
func noMoreWC(t testing.TB, c *cq.Queue, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	buf := make([]verbs.WC, 8)
	if k, _ := c.Poll(buf); k != 0 {
		t.Fatalf("unexpected completions: %v", buf[:k])
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+int(seed)) ^ byte(i>>8)
	}
	return b
}

func wcString(w verbs.WC) string {
	return fmt.Sprintf("{wr %d %v %v len %d}", w.WRID, w.Status, w.Opcode, w.ByteLen)
}

// grhLen is the GRH area at the start of every UD receive buffer.
const grhLen = bth.GRHLen

// unreg removes r from the memory map (ibv_dereg_mr).
func (m *fakeMem) unreg(r *Region) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byL, r.LKey)
	delete(m.byR, r.RKey)
}
