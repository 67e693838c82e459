package transport

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
)

// stormLink is the engine's side of a peer that sends, then vanishes: the
// test injects the peer's datagrams, and every datagram the engine writes is
// counted and lost. Writing costs cost of virtual time per datagram, standing
// for the CPU a shard spends per packet, so under testing/synctest a shard
// that keeps sending lets time, and its own timers, run on.
type stormLink struct {
	local, peer netip.AddrPort
	cost        time.Duration
	in          chan []byte
	done        chan struct{}
	closeOnce   sync.Once

	mu   sync.Mutex
	sent int // datagrams the engine wrote
}

func newStormLink(cost time.Duration) *stormLink {
	return &stormLink{local: addrA, peer: addrB, cost: cost, in: make(chan []byte, 64), done: make(chan struct{})}
}

func (l *stormLink) fill(m *link.Message, b []byte) {
	m.Buf = m.Buf[:copy(m.Buf[:cap(m.Buf)], b)]
	m.Addr, m.Local = l.peer, l.local.Addr()
}

func (l *stormLink) ReadBatch(msgs []link.Message) (int, error) {
	select {
	case b := <-l.in:
		l.fill(&msgs[0], b)
	case <-l.done:
		return 0, net.ErrClosed
	}
	n := 1
	for ; n < len(msgs); n++ {
		select {
		case b := <-l.in:
			l.fill(&msgs[n], b)
		default:
			return n, nil
		}
	}
	return n, nil
}

func (l *stormLink) WriteBatch(msgs []link.Message) (int, error) {
	select {
	case <-l.done:
		return 0, net.ErrClosed
	default:
	}
	n := 0
	for i := range msgs {
		n += msgs[i].NumSegments()
	}
	l.mu.Lock()
	l.sent += n
	l.mu.Unlock()
	time.Sleep(l.cost * time.Duration(n))
	return len(msgs), nil
}

func (l *stormLink) packetsSent() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent
}

func (l *stormLink) LocalAddr() netip.AddrPort { return l.local }
func (l *stormLink) SourcePort(uint16) bool    { return false }
func (l *stormLink) BatchSize() int            { return 64 }
func (l *stormLink) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

// stormResult is what one srq-storm run measured over its window.
type stormResult struct {
	peerPackets   int           // datagrams the vanished peer sent
	sent          int           // datagrams the engine sent, from the start to the end of the window
	retransmits   uint64        // request packets sent again
	timeouts      uint64        // retransmission timer expiries
	worstCommand  time.Duration // longest Query on a bystander QP of the same shard
	worstSnapshot time.Duration // longest Engine.QPs (the /debug/qps snapshot)
	commands      int           // Queries that completed within the window
	deferred      uint64        // timeouts that waited for the device budget
	minTimeouts   uint64        // fewest timeouts any storm QP had
}

// srqStorm is the ibv_srq_pingpong abandonment behind issue 10: n RC QPs on
// one shard share an SRQ; the peer sends one msgSize SEND on each at PMTU
// 1024, the engine echoes one back on each, and the peer is gone: nothing it
// sends is answered again. For window of virtual time the test queries a
// bystander QP of the same shard every 100 ms, timing each Query. Call it
// inside a synctest bubble.
func srqStorm(t *testing.T, n, msgSize int, cost, window time.Duration, opts ...func(*Config)) stormResult {
	l := newStormLink(cost)
	node := newNode(t, l, 1, opts...)
	defer node.close(t)
	s, err := srq.New(&verbs.SRQAttr{MaxWR: uint32(n), MaxSGE: 1}, srq.Caps{MaxWR: 1 << 16, MaxSGE: 4})
	if err != nil {
		t.Fatal(err)
	}
	big, err := cq.New(1<<16, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	buf := node.mem.reg(1, make([]byte, msgSize), verbs.AccessLocalWrite)
	qps := make([]*QP, n)
	for i := range qps {
		qps[i] = node.createQP(t, verbs.QPTypeRC, rcOpts{srq: s, sendCQ: big, recvCQ: big, sendWR: 4})
		connect(t, qps[i], l.peer.Addr(), 0x1000+uint32(i), rcOpts{})
		if _, err := s.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{buf.sge(0, msgSize)}}}); err != nil {
			t.Fatal(err)
		}
	}
	bystander := node.createQP(t, verbs.QPTypeRC, rcOpts{})

	// The peer's SENDs, one QP at a time so the shard's inbound queue
	// never overflows.
	start := time.Now()
	env := bth.Envelope{Src: l.peer.Addr(), Dst: l.local.Addr(), DF: true, SrcPort: l.peer.Port(), DstPort: l.local.Port()}
	payload := pattern(1024, 7)
	peerPackets := 0
	for i, q := range qps {
		npk := (msgSize + 1023) / 1024
		psn := bth.PSN(0x123400 + 0x1000 + uint32(i))
		for k := range npk {
			op, _ := bth.MessageOpcode(bth.TransportRC, bth.OpSend, k == 0, k == npk-1)
			f := bth.Fields{Opcode: op, PKey: 0xFFFF, DestQP: q.QPN(), PSN: psn.Add(k), AckReq: k == npk-1}
			b := bth.Append(nil, &f, payload)
			bth.PutICRC(&env, b)
			l.in <- b
			peerPackets++
		}
		time.Sleep(time.Millisecond) // let the shard take them and ACK
	}
	got := 0
	wcs := make([]verbs.WC, 256)
	for got < n {
		k, _ := big.Poll(wcs)
		for _, w := range wcs[:k] {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("receive completion %v", w.Status)
			}
		}
		got += k
		if k == 0 {
			t.Fatalf("%d of %d SENDs received", got, n)
		}
	}
	// The echoes, which nobody will acknowledge.
	for i, q := range qps {
		if _, err := q.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{buf.sge(0, msgSize)}}}); err != nil {
			t.Fatal(err)
		}
	}

	res := stormResult{peerPackets: peerPackets, minTimeouts: 1 << 62}
	var mu sync.Mutex
	end := start.Add(window)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for time.Now().Before(end) {
			t0 := time.Now()
			bystander.Query()
			d := time.Since(t0)
			t1 := time.Now()
			node.e.QPs() // the /debug/qps snapshot
			ds := time.Since(t1)
			mu.Lock()
			res.commands++
			res.worstCommand = max(res.worstCommand, d)
			res.worstSnapshot = max(res.worstSnapshot, ds)
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	time.Sleep(time.Until(end))
	res.sent = l.packetsSent()
	st := node.e.Stats()
	res.retransmits = st.Retransmits.Load()
	res.timeouts = st.Timeouts.Load()
	res.deferred = st.RetriesDeferred.Load()
	for _, in := range node.e.QPs() {
		if in.QPN != bystander.QPN() {
			res.minTimeouts = min(res.minTimeouts, in.Timeouts)
		}
	}
	<-sampled
	mu.Lock()
	defer mu.Unlock()
	return res
}

func (r stormResult) String() string {
	return fmt.Sprintf("peer sent %d packets; engine sent %d (%.2f per peer packet), %d retransmits, %d timeouts; %d bystander queries, worst %v; worst QPs snapshot %v",
		r.peerPackets, r.sent, float64(r.sent)/float64(r.peerPackets), r.retransmits, r.timeouts, r.commands, r.worstCommand, r.worstSnapshot)
}

// timeoutsWithin is how many retransmission timeouts a QP whose peer never
// answers takes within w after its last request, by the backoff rule: the
// timer runs rto, then doubles per consecutive timeout up to rto << maxBackoff.
func timeoutsWithin(w, rto time.Duration) int {
	n := 0
	for at, k := rto, 0; at <= w; n++ {
		k = min(k+1, maxBackoff)
		at += rto << k
	}
	return n
}

// TestSRQStormBounded is issue 10's wedge in virtual time: 256 RC QPs of one
// shard, sharing an SRQ, each receive a 64 KiB SEND at PMTU 1024 and echo
// one back to a peer that has vanished, with every packet costing the shard
// 5 µs. Before the fix the shard never left its loop (each 67 ms timeout
// resent all 64 packets of all 256 QPs, more than it could send in 67 ms):
// 5.9 million packets in 30 s, 363 per packet the peer sent, and no Query
// answered. Now a Query on a bystander QP waits at most one slice, and each
// QP sends one probe per backed-off timeout.
func TestSRQStormBounded(t *testing.T) {
	const (
		n      = 256
		size   = 64 << 10
		cost   = 5 * time.Microsecond
		window = 30 * time.Second
		rto    = time.Duration(4096<<14) * time.Nanosecond // timeout 14, as roced's responders
	)
	synctest.Test(t, func(t *testing.T) {
		r := srqStorm(t, n, size, cost, window)
		t.Logf("%v", r)
		// A command waits for the slice in progress: its budgeted packets
		// plus at most one ACK per datagram it took in.
		bound := (slicePackets + sliceInbound) * cost
		if r.worstCommand > bound || r.worstSnapshot > bound || r.commands < int(window/(100*time.Millisecond+2*bound)) {
			t.Errorf("bystander: %d queries, worst %v, worst snapshot %v; want one every 100 ms, each within %v",
				r.commands, r.worstCommand, r.worstSnapshot, bound)
		}
		perQP := timeoutsWithin(window, rto)
		if r.timeouts > uint64(n*perQP) || r.retransmits > r.timeouts || r.minTimeouts == 0 {
			t.Errorf("%d timeouts and %d retransmits (fewest timeouts of a QP %d); want at most %d per QP (backoff), one probe each",
				r.timeouts, r.retransmits, r.minTimeouts, perQP)
		}
		// Everything the engine sends: the 64 echo packets and at most one
		// ACK per peer packet per QP, then the probes.
		if limit := n*(size/1024) + r.peerPackets + n*perQP; r.sent > limit {
			t.Errorf("engine sent %d packets, want at most %d", r.sent, limit)
		}
		t.Logf("amplification: %.2f packets sent per packet the vanished peer sent (%d timeouts per QP allowed in %v)",
			float64(r.sent)/float64(r.peerPackets), perQP, window)
	})
}

// TestRetryBudgetDefers: with a device budget of 20 timeouts per second, 5
// deep, 64 QPs whose peer vanished act on at most 5 + 20 s⁻¹ × 10 s
// timeouts in 10 s; the others wait for a token (counted), none is dropped:
// every QP still times out.
func TestRetryBudgetDefers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 10 * time.Second
		r := srqStorm(t, 64, 4096, time.Microsecond, window, func(c *Config) { c.RetryRate, c.RetryBurst = 20, 5 })
		t.Logf("%v; %d deferred", r, r.deferred)
		if max := uint64(5 + 20*window/time.Second); r.timeouts > max || r.deferred == 0 || r.minTimeouts == 0 {
			t.Errorf("%d timeouts (want at most %d), %d deferred (want some), fewest per QP %d (want every QP served)",
				r.timeouts, max, r.deferred, r.minTimeouts)
		}
	})
}

func TestTimeoutsWithin(t *testing.T) {
	// rto 1: timeouts at 1, 3, 7, 15, 31, 63, 127, 191, ...
	for w, want := range map[time.Duration]int{0: 0, 1: 1, 2: 1, 3: 2, 63: 6, 126: 6, 127: 7, 191: 8, 255: 9} {
		if got := timeoutsWithin(w, 1); got != want {
			t.Errorf("timeoutsWithin(%d, 1) = %d, want %d", w, got, want)
		}
	}
}
