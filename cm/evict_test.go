package cm

import (
	"net/netip"
	"testing"
	"time"
)

// flooded is a passive Machine and the REQs it was sent, by arrival.
type flooded struct {
	t   *testing.T
	m   *Machine
	ids []uint32 // local IDs of the admitted REQs, in arrival order
}

// spoof sends the REQ with comm ID n from 198.18.x.y and returns the events.
func (f *flooded) spoof(now time.Time, n int) []Event {
	f.t.Helper()
	f.m.Receive(now, spoofed(n), reqMAD(f.t, uint32(n), nil))
	_, ev := f.m.Drain()
	for _, e := range ev {
		if e.Type == EventConnectRequest {
			f.ids = append(f.ids, e.ID)
		}
	}
	return ev
}

func spoofed(n int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(n >> 8), byte(n)}) }

func (f *flooded) accept(now time.Time, i int) {
	f.t.Helper()
	if err := f.m.Accept(now, f.ids[i], REP{LocalQPN: 0x22}); err != nil {
		f.t.Fatal(err)
	}
	f.m.Drain()
}

// TestEvictOldest: a REQ that finds MaxPending pending evicts the connection
// whose REP went out first and got no answer: REJ (timeout) of the REP,
// EventUnreachable, no timewait. Requests the owner holds and REPs the peer
// MRA'd are not evicted, and the per-peer cap still refuses.
func TestEvictOldest(t *testing.T) {
	tests := []struct {
		name  string
		setup func(f *flooded) // three REQs pending, from 1, 2, 3
		from  netip.Addr       // the fourth REQ's source
		evict int              // index of the evicted; -1: none
		admit bool
	}{
		{"oldest REP", func(f *flooded) { f.accept(t0, 0); f.accept(t0, 1); f.accept(t0, 2) }, spoofed(4), 0, true},
		{"REP order, not REQ order", func(f *flooded) { f.accept(t0, 2); f.accept(t0, 0); f.accept(t0, 1) }, spoofed(4), 2, true},
		{"requests the owner holds stay", func(f *flooded) { f.accept(t0, 1) }, spoofed(4), 1, true},
		{"none evictable", func(*flooded) {}, spoofed(4), -1, false},
		{"MRA'd REP stays", func(f *flooded) {
			f.accept(t0, 0)
			f.accept(t0, 1)
			mra, _ := Marshal(1, &MRA{LocalCommID: 1, RemoteCommID: f.ids[0], MessageMRAed: MsgREP, ServiceTimeout: 20})
			f.m.Receive(t0, spoofed(1), mra)
		}, spoofed(4), 1, true},
		{"per-peer cap refuses", func(f *flooded) {
			f.accept(t0, 0)
			f.accept(t0, 1)
			d, _ := f.m.Deadline() // REPs resent: unanswered
			f.m.Tick(d)
		}, spoofed(1), -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &flooded{t: t, m: NewMachine(Config{Rand: seq(1), MaxPending: 3, MaxUnansweredPerPeer: 1, PendingTimeout: time.Minute})}
			if err := f.m.Listen(svc); err != nil {
				t.Fatal(err)
			}
			for n := 1; n <= 3; n++ {
				f.spoof(t0, n)
			}
			tt.setup(f)
			f.m.Drain()
			before := f.m.Stats()
			f.m.Receive(t0, tt.from, reqMAD(t, 4, nil))
			out, ev := f.m.Drain()
			var want []EventType
			if tt.evict >= 0 {
				want = append(want, EventUnreachable)
			}
			if tt.admit {
				want = append(want, EventConnectRequest)
			}
			wantEvents(t, "server", ev, want...)
			s := f.m.Stats()
			if tt.evict < 0 {
				if len(out) != 0 || s.Evicted != 0 || s.Refused != before.Refused+1 || f.m.Pending() != 3 {
					t.Errorf("%d MADs, evicted %d, refused %d, pending %d; want nothing sent or evicted, one refused, 3 pending",
						len(out), s.Evicted, s.Refused-before.Refused, f.m.Pending())
				}
				return
			}
			victim := f.ids[tt.evict]
			if ev[0].ID != victim || f.m.State(victim) != StateIdle {
				t.Errorf("unreachable %d (now %v), want %d evicted and forgotten", ev[0].ID, f.m.State(victim), victim)
			}
			if len(out) != 1 || out[0].Peer != spoofed(tt.evict+1) {
				t.Fatalf("%d MADs, want one REJ to %v", len(out), spoofed(tt.evict+1))
			}
			if _, msg, err := Parse(out[0].MAD); err != nil || msg.(*REJ).Reason != RejTimeout || msg.(*REJ).MessageRejected != MsgREP {
				t.Errorf("sent %v %+v, want REJ timeout of the REP", err, msg)
			}
			if s.Evicted != 1 || s.Refused != before.Refused || s.RejSent != before.RejSent+1 || f.m.Pending() != 3 {
				t.Errorf("evicted %d, refused +%d, REJs +%d, pending %d; want 1, 0, 1, 3",
					s.Evicted, s.Refused-before.Refused, s.RejSent-before.RejSent, f.m.Pending())
			}
		})
	}
}

// TestFloodRealClient: a flood of spoofed REQs at 1,000 a second, each
// accepted at once and never answered, far above MaxPending per
// PendingTimeout (64 per 30 s), fills the table; a real client connecting
// meanwhile, 1 ms away, is established with its first REQ. Without
// eviction its REQ and every retransmission are refused for the flood's
// minute.
func TestFloodRealClient(t *testing.T) {
	const (
		limit   = 64
		rate    = 1000 // REQs a second
		latency = time.Millisecond
		flood   = time.Minute
		join    = 2 * time.Second // when the client connects: the table is full
	)
	srv := NewMachine(Config{Rand: seq(1 << 20), MaxPending: limit, MaxUnansweredPerPeer: 8, PendingTimeout: 30 * time.Second})
	cli := NewMachine(Config{Rand: seq(1)})
	if err := srv.Listen(svc); err != nil {
		t.Fatal(err)
	}
	type mad struct {
		at   time.Time
		toSv bool
		b    []byte
	}
	var wire []mad // in flight between client and server, by arrival
	var cliID, srvID uint32
	established := time.Time{}
	for n, now := 1, t0; now.Before(t0.Add(flood)) && established.IsZero(); now = now.Add(latency) {
		for range rate * int(latency) / int(time.Second) {
			srv.Receive(now, spoofed(n), reqMAD(t, uint32(n), nil))
			n++
		}
		if now.Equal(t0.Add(join)) {
			if srv.Pending() != limit {
				t.Fatalf("%d pending when the client connects, want the table full (%d)", srv.Pending(), limit)
			}
			var err error
			if cliID, err = cli.Connect(now, addrB, testREQ()); err != nil {
				t.Fatal(err)
			}
		}
		for len(wire) > 0 && !wire[0].at.After(now) {
			if w := wire[0]; w.toSv {
				srv.Receive(now, addrA, w.b)
			} else {
				cli.Receive(now, addrB, w.b)
			}
			wire = wire[1:]
		}
		srv.Tick(now)
		cli.Tick(now)
		for out, ev := cli.Drain(); len(out)+len(ev) > 0; out, ev = cli.Drain() {
			for _, d := range out {
				wire = append(wire, mad{now.Add(latency), true, d.MAD})
			}
			for _, e := range ev {
				if e.Type == EventReply {
					if err := cli.ReadyToUse(e.ID, nil); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		for out, ev := srv.Drain(); len(out)+len(ev) > 0; out, ev = srv.Drain() {
			for _, d := range out {
				if d.Peer == addrA {
					wire = append(wire, mad{now.Add(latency), false, d.MAD})
				}
			}
			for _, e := range ev {
				switch {
				case e.Type == EventConnectRequest:
					if err := srv.Accept(now, e.ID, REP{LocalQPN: 0x22}); err != nil {
						t.Fatal(err)
					}
					if e.Peer == addrA {
						srvID = e.ID
					}
				case e.Type == EventEstablished && e.ID == srvID:
					established = now
				}
			}
		}
		if srv.Pending() > limit {
			t.Fatalf("%d pending at %v, cap %d", srv.Pending(), now.Sub(t0), limit)
		}
	}
	s := srv.Stats()
	t.Logf("client established %v after it connected; %d REQs: %d evicted, %d refused, %d expired",
		established.Sub(t0.Add(join)), s.RxMADs, s.Evicted, s.Refused, s.Expired)
	if established.IsZero() || cli.State(cliID) != StateEstablished {
		t.Fatalf("the real client was not established during the flood (client %v; %d REQs refused)", cli.State(cliID), s.Refused)
	}
	// REQ, REP, RTU: three one-way trips, no retransmission.
	if d := established.Sub(t0.Add(join)); d > 3*latency {
		t.Errorf("established %v after connecting, want %v", d, 3*latency)
	}
	if s.Evicted == 0 || s.Refused != 0 {
		t.Errorf("evicted %d, refused %d; want evictions and no refusal", s.Evicted, s.Refused)
	}
}
