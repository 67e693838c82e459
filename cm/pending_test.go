package cm

import (
	"errors"
	"net/netip"
	"testing"
	"time"
)

// reqMAD marshals a REQ with comm ID id, as a peer would send it.
func reqMAD(t *testing.T, id uint32, mutate func(*REQ)) []byte {
	t.Helper()
	r := testREQ()
	r.LocalCommID = id
	if mutate != nil {
		mutate(&r)
	}
	b, err := Marshal(uint64(id), &r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPendingCaps: a REQ over the device's pending cap is dropped without an
// answer and counted; a duplicate of an admitted REQ is still answered; an
// established connection frees its slot.
func TestPendingCaps(t *testing.T) {
	m := NewMachine(Config{Rand: seq(1), MaxPending: 3, MaxUnansweredPerPeer: 1})
	if err := m.Listen(svc); err != nil {
		t.Fatal(err)
	}
	peerC := netip.MustParseAddr("10.0.0.3")
	steps := []struct {
		peer    netip.Addr
		id      uint32
		admit   bool
		pending int
	}{
		{addrA, 1, true, 1},
		{addrA, 2, true, 2}, // the per-peer cap counts unanswered REPs only
		{peerC, 1, true, 3},
		{peerC, 2, false, 3}, // device cap
		{addrA, 3, false, 3},
	}
	var admitted []Event
	for i, st := range steps {
		m.Receive(t0, st.peer, reqMAD(t, st.id, nil))
		out, ev := m.Drain()
		if len(out) != 0 {
			t.Errorf("step %d: %d MADs sent; a REQ is answered only by Accept/Reject, a refused one never", i, len(out))
		}
		if got := len(ev) == 1 && ev[0].Type == EventConnectRequest; got != st.admit {
			t.Errorf("step %d (%v id %d): events %v, admitted want %v", i, st.peer, st.id, evTypes(ev), st.admit)
		}
		admitted = append(admitted, ev...)
		if m.Pending() != st.pending {
			t.Errorf("step %d: pending %d, want %d", i, m.Pending(), st.pending)
		}
	}
	if s := m.Stats(); s.Refused != 2 {
		t.Errorf("refused %d, want 2", s.Refused)
	}
	// A retransmission of an admitted REQ is a duplicate, answered with MRA.
	m.Receive(t0, addrA, reqMAD(t, 1, nil))
	if out, _ := m.Drain(); len(out) != 1 || attrOf(out[0].MAD) != AttrMRA {
		t.Errorf("duplicate REQ at the cap: %d MADs, want one MRA", len(out))
	}
	// Establish A's first connection: its slot frees, peer C gets in.
	id := admitted[0].ID
	if err := m.Accept(t0, id, REP{LocalQPN: 0x22}); err != nil {
		t.Fatal(err)
	}
	m.Drain()
	if m.Pending() != 3 {
		t.Fatalf("pending %d after REP, want 3 (no RTU yet)", m.Pending())
	}
	rtu, _ := Marshal(1, &RTU{LocalCommID: 1, RemoteCommID: id})
	m.Receive(t0, addrA, rtu)
	if _, ev := m.Drain(); len(ev) != 1 || ev[0].Type != EventEstablished {
		t.Fatalf("RTU: events %v", evTypes(ev))
	}
	if m.Pending() != 2 {
		t.Fatalf("pending %d once established, want 2", m.Pending())
	}
	m.Receive(t0, peerC, reqMAD(t, 2, nil))
	if _, ev := m.Drain(); len(ev) != 1 || ev[0].Type != EventConnectRequest {
		t.Errorf("REQ after a slot freed: events %v", evTypes(ev))
	}
}

// TestUnansweredPerPeer: a peer that opens many connections at once and
// answers every REP in time is never held to MaxUnansweredPerPeer; one whose
// REPs go unanswered (resent after the response time it promised) gets no
// more than that many pending, and gets in again as its RTUs arrive. An MRA
// for a REP says the peer is alive: its REP resent after the MRA's service
// time does not count.
func TestUnansweredPerPeer(t *testing.T) {
	const perPeer, burst = 2, 50
	m := NewMachine(Config{Rand: seq(1), MaxUnansweredPerPeer: perPeer})
	if err := m.Listen(svc); err != nil {
		t.Fatal(err)
	}
	accept := func(peer netip.Addr, remote uint32) uint32 {
		t.Helper()
		m.Receive(t0, peer, reqMAD(t, remote, nil))
		_, ev := m.Drain()
		if len(ev) != 1 || ev[0].Type != EventConnectRequest {
			t.Fatalf("REQ %d from %v: events %v, want a connection request", remote, peer, evTypes(ev))
		}
		if err := m.Accept(t0, ev[0].ID, REP{LocalQPN: 0x22}); err != nil {
			t.Fatal(err)
		}
		m.Drain()
		return ev[0].ID
	}
	rtu := func(peer netip.Addr, remote, id uint32) {
		t.Helper()
		b, _ := Marshal(uint64(remote), &RTU{LocalCommID: remote, RemoteCommID: id})
		m.Receive(t0, peer, b)
		if _, ev := m.Drain(); len(ev) != 1 || ev[0].Type != EventEstablished {
			t.Fatalf("RTU %d: events %v", remote, evTypes(ev))
		}
	}
	// A burst from A, far over the per-peer cap, all pending at once.
	ids := make([]uint32, burst)
	for i := range ids {
		ids[i] = accept(addrA, uint32(i+1))
	}
	for i, id := range ids {
		rtu(addrA, uint32(i+1), id)
	}
	// B answers nothing: its REPs are resent at its response time.
	var silent []uint32
	for i := range perPeer + 1 {
		silent = append(silent, accept(addrB, uint32(i+1)))
	}
	d, _ := m.Deadline()
	m.Tick(d)
	out, _ := m.Drain()
	if len(out) != perPeer+1 || m.Unanswered(addrB) != perPeer+1 {
		t.Fatalf("%d REPs resent, %d unanswered; want %d of each", len(out), m.Unanswered(addrB), perPeer+1)
	}
	m.Receive(d, addrB, reqMAD(t, 100, nil))
	if _, ev := m.Drain(); len(ev) != 0 {
		t.Fatalf("REQ from a peer with %d unanswered REPs admitted: %v", perPeer+1, evTypes(ev))
	}
	m.Receive(d, addrA, reqMAD(t, 100, nil))
	if _, ev := m.Drain(); len(ev) != 1 {
		t.Fatalf("REQ from a peer that answers refused: %v", evTypes(ev))
	}
	// B's late RTUs bring it under the cap.
	rtu(addrB, 1, silent[0])
	rtu(addrB, 2, silent[1])
	if m.Unanswered(addrB) != 1 {
		t.Fatalf("unanswered %d after two RTUs, want 1", m.Unanswered(addrB))
	}
	m.Receive(d, addrB, reqMAD(t, 100, nil))
	_, ev := m.Drain()
	if len(ev) != 1 {
		t.Fatalf("REQ under the cap again refused: %v", evTypes(ev))
	}
	// An MRA for the new REP: the resend after its service time is no
	// unanswered REP.
	if err := m.Accept(d, ev[0].ID, REP{LocalQPN: 0x23}); err != nil {
		t.Fatal(err)
	}
	m.Drain()
	mra, _ := Marshal(100, &MRA{LocalCommID: 100, RemoteCommID: ev[0].ID, MessageMRAed: MsgREP, ServiceTimeout: 10})
	m.Receive(d, addrB, mra)
	m.Tick(d.Add(time.Minute))
	m.Drain()
	if n := m.Unanswered(addrB); n != 1 {
		t.Errorf("unanswered %d after the MRA'd REP was resent, want 1", n)
	}
	// REPs: the burst's, B's first ones and their resends, the one after
	// the RTUs, and the last tick's resends of B's silent one and the MRA'd one.
	if s, want := m.Stats(), uint64(burst+2*(perPeer+1)+1+2); s.Refused != 1 || s.REPs != want {
		t.Errorf("refused %d, REPs %d; want 1 and %d", s.Refused, s.REPs, want)
	}
}

// TestDiscard: a REQ its owner has no room for is forgotten unanswered, and
// the peer's retransmission is a new connection request.
func TestDiscard(t *testing.T) {
	m := NewMachine(Config{Rand: seq(1)})
	if err := m.Listen(svc); err != nil {
		t.Fatal(err)
	}
	m.Receive(t0, addrA, reqMAD(t, 1, nil))
	_, ev := m.Drain()
	if len(ev) != 1 {
		t.Fatalf("events %v", evTypes(ev))
	}
	if err := m.Discard(ev[0].ID); err != nil {
		t.Fatal(err)
	}
	if out, _ := m.Drain(); len(out) != 0 || m.Pending() != 0 || len(m.byID) != 0 {
		t.Fatalf("after Discard: %d MADs, %d pending, %d IDs; want none", len(out), m.Pending(), len(m.byID))
	}
	if _, ok := m.Deadline(); ok {
		t.Error("a timer runs after Discard")
	}
	m.Receive(t0.Add(4*time.Second), addrA, reqMAD(t, 1, nil))
	_, ev = m.Drain()
	if len(ev) != 1 || ev[0].Type != EventConnectRequest {
		t.Fatalf("the retransmitted REQ: events %v, want a new connection request", evTypes(ev))
	}
	if err := m.Accept(t0, ev[0].ID, REP{}); err != nil {
		t.Fatal(err)
	}
	if err := m.Discard(ev[0].ID); !errors.Is(err, ErrState) {
		t.Errorf("Discard after Accept: %v, want ErrState", err)
	}
	if s := m.Stats(); s.Discarded != 1 {
		t.Errorf("discarded %d, want 1", s.Discarded)
	}
}

// TestPendingTimeout: a passive connection not established within
// PendingTimeout is withdrawn with REJ (timeout) and EventUnreachable,
// whether it waits for Accept or for RTU, even when the REQ asked for hours
// of REP retries; its slot frees.
func TestPendingTimeout(t *testing.T) {
	const limit = 10 * time.Second
	m := NewMachine(Config{Rand: seq(1), MaxPending: 2, PendingTimeout: limit})
	if err := m.Listen(svc); err != nil {
		t.Fatal(err)
	}
	slow := func(r *REQ) { r.LocalCMResponseTimeout, r.RemoteCMResponseTimeout, r.MaxCMRetries = 31, 31, 15 }
	m.Receive(t0, addrA, reqMAD(t, 1, slow)) // answered with REP, never RTU
	m.Receive(t0.Add(time.Second), addrA, reqMAD(t, 2, slow))
	_, ev := m.Drain()
	if len(ev) != 2 {
		t.Fatalf("events %v", evTypes(ev))
	}
	if err := m.Accept(t0, ev[0].ID, REP{LocalQPN: 0x22}); err != nil {
		t.Fatal(err)
	}
	m.Drain()
	if d, ok := m.Deadline(); !ok || !d.Equal(t0.Add(limit)) {
		t.Fatalf("deadline %v %v, want the pending limit %v", d, ok, t0.Add(limit))
	}
	for i, want := range []struct {
		at  time.Time
		msg uint8
	}{{t0.Add(limit), MsgREP}, {t0.Add(time.Second + limit), MsgREQ}} {
		d, _ := m.Deadline()
		if !d.Equal(want.at) {
			t.Fatalf("expiry %d: deadline %v, want %v", i, d, want.at)
		}
		m.Tick(d)
		out, ev := m.Drain()
		if len(ev) != 1 || ev[0].Type != EventUnreachable {
			t.Fatalf("expiry %d: events %v", i, evTypes(ev))
		}
		if len(out) != 1 || attrOf(out[0].MAD) != AttrREJ {
			t.Fatalf("expiry %d: %d MADs, want one REJ", i, len(out))
		}
		_, msg, err := Parse(out[0].MAD)
		if err != nil {
			t.Fatal(err)
		}
		if rej := msg.(*REJ); rej.Reason != RejTimeout || rej.MessageRejected != want.msg {
			t.Errorf("expiry %d: REJ reason %d of message %d, want timeout of %d", i, rej.Reason, rej.MessageRejected, want.msg)
		}
	}
	if m.Pending() != 0 {
		t.Errorf("pending %d after both expired", m.Pending())
	}
	if s := m.Stats(); s.Expired != 2 {
		t.Errorf("expired %d, want 2", s.Expired)
	}
}

// TestREQFlood: 5,000 spoofed REQs from as many addresses, none followed by
// an RTU. The machine holds at most MaxPending of them, sends nothing for the
// refused ones, and is empty again after the pending time and timewait.
func TestREQFlood(t *testing.T) {
	const flood, limit = 5000, 64
	m := NewMachine(Config{Rand: seq(1), MaxPending: limit, MaxUnansweredPerPeer: 4, PendingTimeout: 10 * time.Second,
		MaxTimeWait: time.Minute})
	if err := m.Listen(svc); err != nil {
		t.Fatal(err)
	}
	base := netip.MustParseAddr("198.18.0.0").As4()
	var sent, requests int
	for i := range flood {
		b := base
		b[2], b[3] = byte(i>>8), byte(i)
		// Timeouts of 31 would keep each in timewait for hours without MaxTimeWait.
		m.Receive(t0, netip.AddrFrom4(b), reqMAD(t, uint32(i+1), func(r *REQ) {
			r.LocalCMResponseTimeout, r.RemoteCMResponseTimeout = 31, 31
		}))
		out, ev := m.Drain()
		sent += len(out)
		requests += len(ev)
	}
	if requests != limit || sent != 0 {
		t.Errorf("%d connection requests and %d MADs out of %d REQs; want %d and 0", requests, sent, flood, limit)
	}
	if s := m.Stats(); s.Refused != flood-limit {
		t.Errorf("refused %d, want %d", s.Refused, flood-limit)
	}
	if n := len(m.byID); n != limit {
		t.Errorf("%d communication IDs held, want %d", n, limit)
	}
	m.Tick(t0.Add(10 * time.Second))
	if out, _ := m.Drain(); len(out) != limit {
		t.Errorf("%d MADs when the pending time ran out, want one REJ for each of %d", len(out), limit)
	}
	if n, p := len(m.byID), m.Pending(); n != limit || p != 0 {
		t.Errorf("after the pending time: %d IDs (in timewait), %d pending; want %d and 0", n, p, limit)
	}
	m.Tick(t0.Add(10*time.Second + time.Minute))
	m.Drain()
	if n := len(m.byID); n != 0 {
		t.Errorf("after MaxTimeWait: %d IDs left", n)
	}
}

// TestREQFloodAccepted: a flood of REQs that never send an RTU, each accepted
// as an application would (REP sent), for a minute of spoofing at a steady
// rate from as many addresses, above MaxPending per PendingTimeout. At most
// MaxPending pend at once; each new REQ evicts the oldest, which lived
// MaxPending/rate, less than the REP's resend interval (rdma_cm's 4.3 s plus
// two packet lifetimes): every REQ costs one REP and, evicted, one REJ.
func TestREQFloodAccepted(t *testing.T) {
	const (
		limit   = 64
		pend    = 20 * time.Second
		rate    = 100 // REQs a second
		seconds = 60
	)
	m := NewMachine(Config{Rand: seq(1), MaxPending: limit, MaxUnansweredPerPeer: 8, PendingTimeout: pend})
	if err := m.Listen(svc); err != nil {
		t.Fatal(err)
	}
	interval := TimeoutDuration(20) + 2*TimeoutDuration(18) // testREQ: timeouts 20, packet lifetime 18
	if life := limit * time.Second / rate; life >= interval {
		t.Fatalf("a REP lives %v, not less than its resend interval %v", life, interval)
	}
	var accepted, reps, rejs int
	for i := range rate * seconds {
		now := t0.Add(time.Duration(i) * time.Second / rate)
		m.Tick(now)
		src := netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		m.Receive(now, src, reqMAD(t, uint32(i+1), nil))
		for out, ev := m.Drain(); len(out)+len(ev) > 0; out, ev = m.Drain() {
			for _, d := range out {
				switch attrOf(d.MAD) {
				case AttrREP:
					reps++
				case AttrREJ:
					rejs++
				}
			}
			for _, e := range ev {
				if e.Type == EventConnectRequest {
					if err := m.Accept(now, e.ID, REP{LocalQPN: 0x22}); err != nil {
						t.Fatal(err)
					}
					accepted++
				}
			}
		}
		if m.Pending() > limit {
			t.Fatalf("%d pending at %v, cap %d", m.Pending(), now.Sub(t0), limit)
		}
	}
	s := m.Stats()
	t.Logf("%d REQs in %d s: %d accepted, %d refused, %d evicted, %d REPs, %d REJs",
		rate*seconds, seconds, accepted, s.Refused, s.Evicted, reps, rejs)
	if n := rate * seconds; accepted != n || uint64(reps) != s.REPs || reps != n || rejs != n-limit ||
		s.Evicted != uint64(n-limit) || s.Expired != 0 {
		t.Errorf("%d accepted, %d REPs sent (%d counted), %d REJs, %d evicted, %d expired; want %d, %d, %d, %d, 0",
			accepted, reps, s.REPs, rejs, s.Evicted, s.Expired, n, n, n-limit, n-limit)
	}
}
