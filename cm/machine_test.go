package cm

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

var (
	addrA = netip.MustParseAddr("10.0.0.1")
	addrB = netip.MustParseAddr("10.0.0.2")
	t0    = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

const svc = 0x0000000001061c06

// seq returns a deterministic Rand.
func seq(start uint32) func() uint32 {
	return func() uint32 { start++; return start }
}

// pair is two Machines and an explicit clock; deliver moves their output
// through drop, which returns true to lose a MAD.
type pair struct {
	t      *testing.T
	now    time.Time
	a, b   *Machine
	evA    []Event
	evB    []Event
	drop   func(from string, attr AttrID) bool
	sentAB []AttrID
	sentBA []AttrID
	rawAB  [][]byte // every MAD A sent, lost or not, in order
}

func newPair(t *testing.T) *pair {
	return &pair{t: t, now: t0, a: NewMachine(Config{Rand: seq(100)}), b: NewMachine(Config{Rand: seq(200)})}
}

// deliver runs until neither machine has output.
func (p *pair) deliver() {
	for i := 0; i < 100; i++ {
		outA, evA := p.a.Drain()
		outB, evB := p.b.Drain()
		p.evA = append(p.evA, evA...)
		p.evB = append(p.evB, evB...)
		if len(outA) == 0 && len(outB) == 0 {
			return
		}
		for _, d := range outA {
			attr := attrOf(d.MAD)
			p.sentAB = append(p.sentAB, attr)
			p.rawAB = append(p.rawAB, d.MAD)
			if d.Peer != addrB {
				p.t.Fatalf("A sent to %v", d.Peer)
			}
			if p.drop == nil || !p.drop("A", attr) {
				p.b.Receive(p.now, addrA, d.MAD)
			}
		}
		for _, d := range outB {
			attr := attrOf(d.MAD)
			p.sentBA = append(p.sentBA, attr)
			if p.drop == nil || !p.drop("B", attr) {
				p.a.Receive(p.now, addrB, d.MAD)
			}
		}
	}
	p.t.Fatal("MAD storm")
}

// advance moves the clock to the earliest deadline of either machine.
func (p *pair) advance() {
	p.t.Helper()
	da, okA := p.a.Deadline()
	db, okB := p.b.Deadline()
	switch {
	case okA && (!okB || da.Before(db)):
		p.now = da
	case okB:
		p.now = db
	default:
		p.t.Fatal("no timer running")
	}
	p.a.Tick(p.now)
	p.b.Tick(p.now)
	p.deliver()
}

func (p *pair) takeA() []Event { e := p.evA; p.evA = nil; return e }
func (p *pair) takeB() []Event { e := p.evB; p.evB = nil; return e }

func testREQ() REQ {
	return REQ{ServiceID: svc, LocalQPN: 0x11, ResponderResources: 1, InitiatorDepth: 1,
		RemoteCMResponseTimeout: 20, LocalCMResponseTimeout: 20, StartingPSN: 0x123456,
		RetryCount: 7, RNRRetryCount: 7, PKey: 0xffff, PathMTU: 3, MaxCMRetries: 3,
		Primary: Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: GIDFromAddr(addrA),
			RemoteGID: GIDFromAddr(addrB), HopLimit: 64, LocalACKTimeout: 19}}
}

func wantEvents(t *testing.T, who string, got []Event, want ...EventType) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s events %v, want %v", who, evTypes(got), want)
	}
	for i := range want {
		if got[i].Type != want[i] {
			t.Fatalf("%s events %v, want %v", who, evTypes(got), want)
		}
	}
}

func evTypes(ev []Event) []EventType {
	var ts []EventType
	for _, e := range ev {
		ts = append(ts, e.Type)
	}
	return ts
}

// connect runs REQ/REP/RTU with no loss and returns the two IDs.
func (p *pair) connect() (idA, idB uint32) {
	t := p.t
	t.Helper()
	if err := p.b.Listen(svc); err != nil {
		t.Fatal(err)
	}
	idA, err := p.a.Connect(p.now, addrB, testREQ())
	if err != nil {
		t.Fatal(err)
	}
	p.deliver()
	ev := p.takeB()
	wantEvents(t, "B", ev, EventConnectRequest)
	idB = ev[0].ID
	if ev[0].REQ.LocalCommID != idA || ev[0].REQ.LocalQPN != 0x11 {
		t.Fatalf("REQ %+v", ev[0].REQ)
	}
	if err := p.b.Accept(p.now, idB, REP{LocalQPN: 0x22, StartingPSN: 0x654321, ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	p.deliver()
	ev = p.takeA()
	wantEvents(t, "A", ev, EventReply)
	if ev[0].REP.LocalQPN != 0x22 || ev[0].REP.RemoteCommID != idA || ev[0].REP.LocalCommID != idB {
		t.Fatalf("REP %+v", ev[0].REP)
	}
	if err := p.a.ReadyToUse(idA, nil); err != nil {
		t.Fatal(err)
	}
	p.deliver()
	wantEvents(t, "B", p.takeB(), EventEstablished)
	if p.a.State(idA) != StateEstablished || p.b.State(idB) != StateEstablished {
		t.Fatalf("states %v %v", p.a.State(idA), p.b.State(idB))
	}
	return idA, idB
}

func TestConnectDisconnect(t *testing.T) {
	p := newPair(t)
	idA, idB := p.connect()
	if err := p.a.Disconnect(p.now, idA, nil); err != nil {
		t.Fatal(err)
	}
	p.deliver()
	wantEvents(t, "B", p.takeB(), EventDisconnectRequest)
	if p.b.State(idB) != StateDREQRcvd {
		t.Fatalf("B state %v", p.b.State(idB))
	}
	if err := p.b.Disconnect(p.now, idB, nil); err != nil {
		t.Fatal(err)
	}
	p.deliver()
	wantEvents(t, "B", p.takeB(), EventDisconnected)
	wantEvents(t, "A", p.takeA(), EventDisconnected)
	if p.a.State(idA) != StateTimeWait || p.b.State(idB) != StateTimeWait {
		t.Fatalf("states %v %v", p.a.State(idA), p.b.State(idB))
	}
	p.advance() // both timewaits end together
	wantEvents(t, "A", p.takeA(), EventTimeWaitExit)
	wantEvents(t, "B", p.takeB(), EventTimeWaitExit)
	if p.a.State(idA) != StateIdle || p.b.State(idB) != StateIdle {
		t.Fatalf("after timewait: %v %v", p.a.State(idA), p.b.State(idB))
	}
	want := []AttrID{AttrREQ, AttrRTU, AttrDREQ}
	if !equalAttrs(p.sentAB, want) || !equalAttrs(p.sentBA, []AttrID{AttrREP, AttrDREP}) {
		t.Errorf("wire A→B %v, B→A %v", p.sentAB, p.sentBA)
	}
	if s := p.a.Stats(); s.Retransmits != 0 || s.Duplicates != 0 || s.Malformed != 0 {
		t.Errorf("stats %+v", s)
	}
}

func equalAttrs(a, b []AttrID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestLoss drops the first copy of one message type and checks that the
// protocol recovers by retransmission after exactly one CM timeout, and that
// duplicates are answered rather than re-executed.
func TestLoss(t *testing.T) {
	// REQ interval: 4.096µs·2^20 + 2·4.096µs·2^18 ≈ 6.44 s.
	reqInterval := TimeoutDuration(20) + 2*TimeoutDuration(18)
	tests := []struct {
		name     string
		from     string
		attr     AttrID
		wantAB   []AttrID
		wantBA   []AttrID
		wantTime time.Duration
	}{
		{"REQ lost", "A", AttrREQ, []AttrID{AttrREQ, AttrREQ, AttrRTU}, []AttrID{AttrREP}, reqInterval},
		// A lost REP: A retransmits REQ, B answers the duplicate with its REP.
		{"REP lost", "B", AttrREP, []AttrID{AttrREQ, AttrREQ, AttrRTU}, []AttrID{AttrREP, AttrREP}, reqInterval},
		// A lost RTU: B retransmits REP, A answers the duplicate with RTU.
		{"RTU lost", "A", AttrRTU, []AttrID{AttrREQ, AttrRTU, AttrRTU}, []AttrID{AttrREP, AttrREP}, reqInterval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPair(t)
			dropped := false
			p.drop = func(from string, attr AttrID) bool {
				if !dropped && from == tt.from && attr == tt.attr {
					dropped = true
					return true
				}
				return false
			}
			p.b.Listen(svc)
			idA, _ := p.a.Connect(p.now, addrB, testREQ())
			p.deliver()
			var allB []Event
			// settle answers every event until both machines are quiet.
			settle := func() {
				for {
					evA, evB := p.takeA(), p.takeB()
					if len(evA) == 0 && len(evB) == 0 {
						return
					}
					allB = append(allB, evB...)
					for _, e := range evB {
						if e.Type == EventConnectRequest {
							p.b.Accept(p.now, e.ID, REP{LocalQPN: 0x22})
						}
					}
					for _, e := range evA {
						if e.Type == EventReply {
							p.a.ReadyToUse(e.ID, nil)
						}
					}
					p.deliver()
				}
			}
			settle()
			for i := 0; i < 10 && (p.a.State(idA) != StateEstablished || countEvents(allB, EventEstablished) == 0); i++ {
				p.advance()
				settle()
			}
			if got := countEvents(allB, EventConnectRequest); got != 1 {
				t.Errorf("%d connect requests: duplicate REQ re-executed", got)
			}
			if got := countEvents(allB, EventEstablished); got != 1 {
				t.Errorf("%d established events on B", got)
			}
			if p.a.State(idA) != StateEstablished {
				t.Fatalf("A state %v", p.a.State(idA))
			}
			if !equalAttrs(p.sentAB, tt.wantAB) || !equalAttrs(p.sentBA, tt.wantBA) {
				t.Errorf("wire A→B %v (want %v), B→A %v (want %v)", p.sentAB, tt.wantAB, p.sentBA, tt.wantBA)
			}
			if el := p.now.Sub(t0); el != tt.wantTime {
				t.Errorf("recovered at %v, want %v", el, tt.wantTime)
			}
		})
	}
}

func countEvents(ev []Event, typ EventType) int {
	n := 0
	for _, e := range ev {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func TestDREQLostAndDuplicate(t *testing.T) {
	p := newPair(t)
	idA, idB := p.connect()
	drops := 0
	p.drop = func(from string, attr AttrID) bool {
		if attr == AttrDREQ && drops == 0 || attr == AttrDREP && drops == 1 {
			drops++
			return true
		}
		return false
	}
	p.a.Disconnect(p.now, idA, nil)
	p.deliver() // DREQ lost
	p.advance() // DREQ retransmitted
	wantEvents(t, "B", p.takeB(), EventDisconnectRequest)
	p.b.Disconnect(p.now, idB, nil)
	p.deliver() // DREP lost
	wantEvents(t, "B", p.takeB(), EventDisconnected)
	p.advance() // DREQ again: B in timewait resends the saved DREP
	wantEvents(t, "A", p.takeA(), EventDisconnected)
	if got := p.b.Stats().Duplicates; got != 1 {
		t.Errorf("B duplicates %d", got)
	}
	if !equalAttrs(p.sentBA, []AttrID{AttrREP, AttrDREP, AttrDREP}) {
		t.Errorf("B sent %v", p.sentBA)
	}
}

// TestDuplicateREQInTimeWait re-delivers A's REQ to B after the connection
// was established and torn down: B answers with REJ stale connection (cm.c
// cm_dup_req_handler, IB_CM_TIMEWAIT), not with its saved DREP, and does not
// treat it as a new connect request.
func TestDuplicateREQInTimeWait(t *testing.T) {
	p := newPair(t)
	idA, idB := p.connect()
	p.a.Disconnect(p.now, idA, nil)
	p.deliver()
	wantEvents(t, "B", p.takeB(), EventDisconnectRequest)
	p.b.Disconnect(p.now, idB, nil)
	p.deliver()
	wantEvents(t, "A", p.takeA(), EventDisconnected)
	wantEvents(t, "B", p.takeB(), EventDisconnected)
	if p.a.State(idA) != StateTimeWait || p.b.State(idB) != StateTimeWait {
		t.Fatalf("states %v %v", p.a.State(idA), p.b.State(idB))
	}
	if len(p.rawAB) == 0 || attrOf(p.rawAB[0]) != AttrREQ {
		t.Fatalf("first A→B MAD is not the REQ")
	}
	reqMAD := p.rawAB[0]
	reqHdr, _ := ParseHeader(reqMAD)
	before := p.b.Stats()

	p.b.Receive(p.now, addrA, reqMAD)
	out, ev := p.b.Drain()
	if len(ev) != 0 {
		t.Errorf("B events %v: duplicate REQ re-executed", evTypes(ev))
	}
	if len(out) != 1 {
		t.Fatalf("B answered with %d MADs, want 1", len(out))
	}
	if out[0].Peer != addrA {
		t.Errorf("answer to %v", out[0].Peer)
	}
	h, msg, err := Parse(out[0].MAD)
	if err != nil {
		t.Fatal(err)
	}
	rej, ok := msg.(*REJ)
	if !ok {
		t.Fatalf("B answered with %v, want REJ", h.AttrID)
	}
	if rej.Reason != RejStaleConn || rej.MessageRejected != MsgOther ||
		rej.LocalCommID != idB || rej.RemoteCommID != idA {
		t.Errorf("REJ %+v, want stale connection, MsgOther, local %d remote %d", rej, idB, idA)
	}
	if h.TID != reqHdr.TID {
		t.Errorf("REJ TID %#x, want the REQ's %#x", h.TID, reqHdr.TID)
	}
	s := p.b.Stats()
	if s.RejSent != before.RejSent+1 || s.Duplicates != before.Duplicates+1 {
		t.Errorf("stats before %+v after %+v", before, s)
	}
	if p.b.State(idB) != StateTimeWait {
		t.Errorf("B state %v", p.b.State(idB))
	}

	// A, itself in timewait, ignores the REJ; a second duplicate gets the same answer.
	p.a.Receive(p.now, addrB, out[0].MAD)
	if _, ev := p.a.Drain(); len(ev) != 0 || p.a.State(idA) != StateTimeWait {
		t.Errorf("A events %v state %v", evTypes(ev), p.a.State(idA))
	}
	p.b.Receive(p.now, addrA, reqMAD)
	if out2, _ := p.b.Drain(); len(out2) != 1 || string(out2[0].MAD) != string(out[0].MAD) {
		t.Errorf("second duplicate answered with %d MADs", len(out2))
	}
}

// TestDuplicateREQAfterReject: the REJ saved by Reject is resent byte for
// byte to a duplicate of the rejected REQ; a REJ that withdrew a REP is not,
// the duplicate REQ then gets REJ stale connection.
func TestDuplicateREQAfterReject(t *testing.T) {
	req := testREQ()
	req.LocalCommID = 555
	reqMAD, err := Marshal(0xabc, &req)
	if err != nil {
		t.Fatal(err)
	}
	// start delivers the REQ to a listening Machine and returns its ID.
	start := func(t *testing.T) (*Machine, uint32) {
		m := NewMachine(Config{Rand: seq(200)})
		m.Listen(svc)
		m.Receive(t0, addrA, reqMAD)
		_, ev := m.Drain()
		wantEvents(t, "B", ev, EventConnectRequest)
		return m, ev[0].ID
	}
	// dup delivers the REQ again and returns the single REJ answered.
	dup := func(t *testing.T, m *Machine) (*REJ, []byte) {
		t.Helper()
		m.Receive(t0, addrA, reqMAD)
		out, ev := m.Drain()
		if len(ev) != 0 || len(out) != 1 {
			t.Fatalf("duplicate REQ: %d MADs, events %v", len(out), evTypes(ev))
		}
		_, msg, err := Parse(out[0].MAD)
		rej, ok := msg.(*REJ)
		if err != nil || !ok {
			t.Fatalf("answer %T %v", msg, err)
		}
		return rej, out[0].MAD
	}
	for _, mra := range []bool{false, true} {
		name := "rejected"
		if mra {
			name = "rejected after MRA"
		}
		t.Run(name, func(t *testing.T) {
			m, id := start(t)
			if mra {
				m.SendMRA(id, 10)
			}
			if err := m.Reject(t0, id, RejConsumerDefined, []byte("busy")); err != nil {
				t.Fatal(err)
			}
			out, _ := m.Drain()
			rej, b := dup(t, m)
			if string(b) != string(out[len(out)-1].MAD) {
				t.Errorf("duplicate got %+v, not the saved REJ", rej)
			}
			if rej.Reason != RejConsumerDefined || rej.MessageRejected != MsgREQ || rej.RemoteCommID != 555 {
				t.Errorf("REJ %+v", rej)
			}
			if s := m.Stats(); s.RejSent != 1 {
				t.Errorf("RejSent %d, want 1 (a resend is a duplicate answer)", s.RejSent)
			}
		})
	}
	t.Run("REP withdrawn", func(t *testing.T) {
		m, id := start(t)
		m.Accept(t0, id, REP{LocalQPN: 0x22})
		if err := m.Disconnect(t0, id, nil); err != nil || m.State(id) != StateTimeWait {
			t.Fatalf("withdraw: %v %v", err, m.State(id))
		}
		m.Drain()
		rej, _ := dup(t, m)
		if rej.Reason != RejStaleConn || rej.MessageRejected != MsgOther || rej.LocalCommID != id || rej.RemoteCommID != 555 {
			t.Errorf("REJ %+v", rej)
		}
	})
}

func TestREQToDeadPeerTimesOut(t *testing.T) {
	p := newPair(t)
	p.drop = func(string, AttrID) bool { return true }
	req := testREQ()
	req.MaxCMRetries = 2
	id, _ := p.a.Connect(p.now, addrB, req)
	p.deliver()
	for p.a.State(id) != StateIdle {
		p.advance()
	}
	ev := p.takeA()
	wantEvents(t, "A", ev, EventUnreachable)
	if !errors.Is(ev[0].Err, ErrTimeout) || !errors.Is(ev[0].Err, syscall.ETIMEDOUT) {
		t.Errorf("err %v", ev[0].Err)
	}
	if !equalAttrs(p.sentAB, []AttrID{AttrREQ, AttrREQ, AttrREQ}) {
		t.Errorf("sent %v", p.sentAB)
	}
	if want := 3 * (TimeoutDuration(20) + 2*TimeoutDuration(18)); p.now.Sub(t0) != want {
		t.Errorf("gave up after %v, want %v", p.now.Sub(t0), want)
	}
	if _, ok := p.a.Deadline(); ok {
		t.Error("timer still running")
	}
}

func TestRejects(t *testing.T) {
	t.Run("no listener", func(t *testing.T) {
		p := newPair(t)
		id, _ := p.a.Connect(p.now, addrB, testREQ())
		p.deliver()
		ev := p.takeA()
		wantEvents(t, "A", ev, EventRejected)
		var rej *RejectError
		if !errors.As(ev[0].Err, &rej) || rej.Reason != RejInvalidServiceID || !errors.Is(ev[0].Err, syscall.ECONNREFUSED) {
			t.Errorf("err %v", ev[0].Err)
		}
		if p.a.State(id) != StateIdle || len(p.takeB()) != 0 {
			t.Error("state left behind")
		}
	})
	t.Run("consumer reject with private data, duplicate REQ gets same REJ", func(t *testing.T) {
		p := newPair(t)
		p.b.Listen(svc)
		dropREJ := true
		p.drop = func(from string, attr AttrID) bool {
			if attr == AttrREJ && dropREJ {
				dropREJ = false
				return true
			}
			return false
		}
		p.a.Connect(p.now, addrB, testREQ())
		p.deliver()
		ev := p.takeB()
		wantEvents(t, "B", ev, EventConnectRequest)
		if err := p.b.Reject(p.now, ev[0].ID, RejConsumerDefined, []byte("busy")); err != nil {
			t.Fatal(err)
		}
		p.deliver()
		p.advance() // REQ retransmitted; B answers from timewait with the saved REJ
		ev = p.takeA()
		wantEvents(t, "A", ev, EventRejected)
		var rej *RejectError
		if !errors.As(ev[0].Err, &rej) || rej.Reason != RejConsumerDefined || string(rej.PrivateData[:4]) != "busy" {
			t.Errorf("err %v", ev[0].Err)
		}
		if n := len(p.takeB()); n != 0 {
			t.Errorf("B re-executed the REQ: %d events", n)
		}
	})
	t.Run("bad transport type", func(t *testing.T) {
		p := newPair(t)
		p.b.Listen(svc)
		req := testREQ()
		req.TransportServiceType = TransportRD
		p.a.Connect(p.now, addrB, req)
		p.deliver()
		ev := p.takeA()
		var rej *RejectError
		if len(ev) != 1 || !errors.As(ev[0].Err, &rej) || rej.Reason != RejInvalidTransportType {
			t.Errorf("events %+v", ev)
		}
	})
}

func TestMRA(t *testing.T) {
	p := newPair(t)
	p.b.Listen(svc)
	idA, _ := p.a.Connect(p.now, addrB, testREQ())
	p.deliver()
	idB := p.takeB()[0].ID
	// B is slow: A retransmits, B answers the duplicate with MRA, A then waits
	// the service timeout instead of its CM timeout.
	p.advance()
	if p.b.State(idB) != StateMRAREQSent || p.a.State(idA) != StateMRAREQRcvd {
		t.Fatalf("states A %v B %v", p.a.State(idA), p.b.State(idB))
	}
	dl, _ := p.a.Deadline()
	if want := p.now.Add(TimeoutDuration(20) + TimeoutDuration(18)); !dl.Equal(want) {
		t.Errorf("A deadline %v, want %v", dl.Sub(p.now), want.Sub(p.now))
	}
	if err := p.b.Accept(p.now, idB, REP{LocalQPN: 0x22}); err != nil {
		t.Fatal(err)
	}
	p.deliver()
	wantEvents(t, "A", p.takeA(), EventReply)
	if !equalAttrs(p.sentBA, []AttrID{AttrMRA, AttrREP}) {
		t.Errorf("B sent %v", p.sentBA)
	}
}

func TestSIDR(t *testing.T) {
	p := newPair(t)
	udp := ServiceID(PortSpaceUDP, 7174)
	p.b.Listen(udp)
	lost := true
	p.drop = func(from string, attr AttrID) bool {
		if attr == AttrSIDRREP && lost {
			lost = false
			return true
		}
		return false
	}
	id, _ := p.a.ResolveService(p.now, addrB, SIDRREQ{PKey: 0xffff, ServiceID: udp}, time.Second, 3)
	p.deliver()
	ev := p.takeB()
	wantEvents(t, "B", ev, EventSIDRRequest)
	p.b.SIDRReply(p.now, ev[0].ID, SIDRREP{Status: SIDRSuccess, QPN: 0x33, QKey: UDPQKey})
	p.deliver() // lost
	p.advance() // SIDR_REQ again; duplicate answered from saved SIDR_REP
	ev = p.takeA()
	wantEvents(t, "A", ev, EventSIDRReply)
	if r := ev[0].SIDRREP; r.QPN != 0x33 || r.QKey != UDPQKey || r.RequestID != id || r.ServiceID != udp {
		t.Errorf("SIDR_REP %+v", r)
	}
	if len(p.takeB()) != 0 {
		t.Error("duplicate SIDR_REQ re-executed")
	}
	// Unknown service: status unsupported, no state.
	p.a.ResolveService(p.now, addrB, SIDRREQ{ServiceID: udp + 1}, time.Second, 0)
	p.deliver()
	ev = p.takeA()
	if len(ev) != 1 || ev[0].SIDRREP.Status != SIDRUnsupported {
		t.Errorf("events %+v", ev)
	}
}

func TestStateErrors(t *testing.T) {
	m := NewMachine(Config{})
	if err := m.Accept(t0, 1, REP{}); !errors.Is(err, ErrUnknownID) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Accept unknown: %v", err)
	}
	id, _ := m.Connect(t0, addrB, testREQ())
	for name, err := range map[string]error{
		"Accept on active": m.Accept(t0, id, REP{}),
		"RTU before REP":   m.ReadyToUse(id, nil),
		"Reject own REQ":   m.Reject(t0, id, RejConsumerDefined, nil),
	} {
		if !errors.Is(err, ErrState) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := m.Connect(t0, addrB, REQ{PrivateData: make([]byte, 93)}); !errors.Is(err, ErrPrivateDataTooLong) {
		t.Errorf("long private data: %v", err)
	}
	if m.Listen(svc) != nil || !errors.Is(m.Listen(svc), ErrInUse) {
		t.Error("double Listen")
	}
	// Withdrawing an unanswered REQ sends REJ(timeout) and enters timewait.
	if err := m.Disconnect(t0, id, nil); err != nil || m.State(id) != StateTimeWait {
		t.Errorf("withdraw: %v %v", err, m.State(id))
	}
	out, _ := m.Drain()
	if _, msg, _ := Parse(out[len(out)-1].MAD); msg.(*REJ).Reason != RejTimeout {
		t.Errorf("withdraw sent %+v", msg)
	}
	// Garbage is counted, never a panic.
	m.Receive(t0, addrB, []byte{1, 2, 3})
	m.Receive(t0, addrB, make([]byte, 256))
	if s := m.Stats(); s.Malformed != 2 {
		t.Errorf("malformed %d", s.Malformed)
	}
}

// FuzzMachine feeds arbitrary MADs to a Machine that listens and has one
// outstanding connection. Property: no panic, and Deadline/Tick keep working.
func FuzzMachine(f *testing.F) {
	for _, msg := range []Message{&REQ{ServiceID: svc}, &REP{RemoteCommID: 101}, &RTU{}, &DREQ{}, &DREP{},
		&REJ{RemoteCommID: 101}, &MRA{RemoteCommID: 101}, &SIDRREQ{ServiceID: svc}, &SIDRREP{RequestID: 101}} {
		b, _ := Marshal(7, msg)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m := NewMachine(Config{Rand: seq(100)})
		m.Listen(svc)
		m.Connect(t0, addrB, testREQ())
		m.Receive(t0, addrB, b)
		m.Receive(t0, addrB, b)
		for _, e := range m.events {
			if e.Type == EventConnectRequest {
				m.Accept(t0, e.ID, REP{})
			}
		}
		if d, ok := m.Deadline(); ok {
			m.Tick(d)
		}
	})
}
