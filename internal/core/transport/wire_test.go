package transport

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// A wire drives one QP packet by packet, without a link, a second engine or
// any goroutine: the test is the peer and the shard. deliver hands the QP one
// datagram and runs one shard step; the packets the QP emitted come back
// from the output list, and its completions go to the CQs. Time stands still
// unless the test moves it (advance). This is how the IBA rule tables
// (resp_rules_test.go, comp_rules_test.go) test the state machines.
type wire struct {
	t      testing.TB
	e      *Engine
	mem    *fakeMem
	q      *QP
	scq    *cq.Queue
	rcq    *cq.Queue
	clock  *stepClock
	events []Event
	peer   netip.AddrPort
	tos    []uint8 // TOS of each packet the last step emitted
}

// stepClock is a Clock whose time only moves when the test says; its timers
// never fire by themselves (the test runs a step after moving the time).
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time                        { return c.now }
func (c *stepClock) AfterFunc(time.Duration, func()) Timer { return stepTimer{} }

type stepTimer struct{}

func (stepTimer) Stop() bool               { return true }
func (stepTimer) Reset(time.Duration) bool { return true }

// noLink is the Link of a wire's engine: nothing is ever read from or written
// to it (a wire never flushes its output list).
type noLink struct{ t testing.TB }

func (l noLink) ReadBatch([]link.Message) (int, error) {
	l.t.Fatal("a wire's link read")
	return 0, nil
}
func (l noLink) WriteBatch([]link.Message) (int, error) {
	l.t.Fatal("a wire's link written")
	return 0, nil
}
func (noLink) LocalAddr() netip.AddrPort { return addrA }
func (noLink) SourcePort(uint16) bool    { return false }
func (noLink) BatchSize() int            { return 64 }
func (noLink) Close() error              { return nil }

const (
	wirePeerQPN = 0x77
	wireRQPSN   = bth.PSN(0x1000) // the PSN the QP expects first
	wireSQPSN   = bth.PSN(0x2000) // the PSN of its first request
	wireQKey    = 0x11111111      // a UD QP's Q_Key
)

// newWire makes a QP of typ in RTS (RTR when o.skipRTS) with peer QPN
// wirePeerQPN at addrB; a UD QP has Q_Key wireQKey and no peer.
func newWire(t testing.TB, typ verbs.QPType, o rcOpts) *wire {
	t.Helper()
	w := &wire{t: t, mem: newFakeMem(), clock: &stepClock{now: time.Unix(1000, 0)}, peer: addrB}
	var err error
	if w.scq, err = cq.New(cqSize, 1<<16); err != nil {
		t.Fatal(err)
	}
	if w.rcq, err = cq.New(cqSize, 1<<16); err != nil {
		t.Fatal(err)
	}
	// The test plays the shard goroutine: a reader never runs it.
	w.e, err = newEngine(Config{Link: noLink{t}, Memory: w.mem, Shards: 1, Clock: w.clock, readerDrives: driveNever,
		OnEvent: func(ev Event) { w.events = append(w.events, ev) }, CC: o.cc})
	if err != nil {
		t.Fatal(err)
	}
	o.defaults()
	w.q, err = w.e.CreateQP(&QPInitAttr{Type: typ, SendCQ: w.scq, RecvCQ: w.rcq, SRQ: o.srq, PD: 1,
		Cap: verbs.QPCap{MaxSendWR: o.sendWR, MaxRecvWR: o.recvWR, MaxSendSGE: 4, MaxRecvSGE: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if typ == verbs.QPTypeUD {
		w.modify(verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: wireQKey}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrQKey)
		w.modify(verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState)
		w.modify(verbs.QPAttr{State: verbs.QPSRTS, SQPSN: uint32(wireSQPSN)}, verbs.QPAttrState|verbs.QPAttrSQPSN)
		return w
	}
	w.modify(verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: o.access}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	rtr := verbs.QPAttr{State: verbs.QPSRTR, AV: verbs.AddressVector{DGID: w.peer.Addr()}, PathMTU: o.mtu, DestQPN: wirePeerQPN,
		RQPSN: uint32(wireRQPSN), MaxDestRDAtomic: 16, MinRNRTimer: o.minRNR}
	rtrMask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRDAtomic | verbs.QPAttrMinRNRTimer
	if typ == verbs.QPTypeUC {
		rtrMask &^= verbs.QPAttrMaxDestRDAtomic | verbs.QPAttrMinRNRTimer
	}
	w.modify(rtr, rtrMask)
	if o.skipRTS {
		return w
	}
	rts, rtsMask := verbs.QPAttr{State: verbs.QPSRTS, SQPSN: uint32(wireSQPSN)}, verbs.QPAttrState|verbs.QPAttrSQPSN
	if typ == verbs.QPTypeRC {
		rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRDAtomic = o.timeout, o.retry, o.rnrRetry, o.maxRD
		rtsMask |= verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRDAtomic
	}
	w.modify(rts, rtsMask)
	return w
}

// modify is ibv_modify_qp run the way the shard runs commands: between steps.
func (w *wire) modify(a verbs.QPAttr, mask verbs.QPAttrMask) {
	w.t.Helper()
	if err := w.q.modify(w.clock.now, &a, mask); err != nil {
		w.t.Fatal(err)
	}
}

// packet builds a datagram from the peer to the QP.
func (w *wire) packet(f bth.Fields, payload []byte) rxItem {
	f.PKey, f.DestQP = 0xFFFF, w.q.qpn
	buf := link.GetBuffer()
	pkt := bth.Append(buf[:0], &f, payload)
	env := bth.Envelope{Src: w.peer.Addr(), Dst: addrA.Addr(), DF: true, SrcPort: w.peer.Port(), DstPort: addrA.Port()}
	bth.PutICRC(&env, pkt)
	return rxItem{buf: buf, n: len(pkt), src: w.peer, local: addrA.Addr(), qp: w.q}
}

// deliver hands the QP datagrams from the peer in one shard step and returns
// the packets it emitted.
func (w *wire) deliver(pkts ...rxItem) []bth.Packet {
	w.t.Helper()
	s := w.q.sh
	for _, it := range pkts {
		if !s.enqueue(it) {
			w.t.Fatal("inbound queue full")
		}
	}
	return w.step()
}

// feed delivers one request or response built from f and payload.
func (w *wire) feed(f bth.Fields, payload []byte) []bth.Packet {
	w.t.Helper()
	return w.deliver(w.packet(f, payload))
}

// step runs one shard step (delivering what is queued, serving ready QPs,
// timers at the current time) and returns the emitted packets, copied.
func (w *wire) step() []bth.Packet {
	w.t.Helper()
	s := w.q.sh
	s.wakeQP(w.q)
	s.step()
	var out []bth.Packet
	w.tos = w.tos[:0]
	for _, p := range s.out {
		w.tos = append(w.tos, p.tos)
		pkt, err := bth.Parse(p.packet())
		if err != nil {
			w.t.Fatalf("emitted a malformed packet: %v", err)
		}
		out = append(out, pkt)
		link.PutBuffer(p.buf)
	}
	clear(s.out)
	s.out = s.out[:0]
	s.drainWC()
	return out
}

// advance moves the clock by d and runs a step, as the QP's timer would.
func (w *wire) advance(d time.Duration) []bth.Packet {
	w.clock.now = w.clock.now.Add(d)
	return w.step()
}

// post posts send WRs on the QP.
func (w *wire) post(wrs ...verbs.SendWR) {
	w.t.Helper()
	if _, err := w.q.PostSend(wrs); err != nil {
		w.t.Fatal(err)
	}
}

// recv posts receive WRs on the QP's receive queue.
func (w *wire) recv(wrs ...verbs.RecvWR) {
	w.t.Helper()
	if _, err := w.q.PostRecv(wrs); err != nil {
		w.t.Fatal(err)
	}
}

// wcs polls every completion from c.
func (w *wire) wcs(c *cq.Queue) []verbs.WC {
	var out []verbs.WC
	buf := make([]verbs.WC, 16)
	for {
		n, _ := c.Poll(buf)
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
	}
}
