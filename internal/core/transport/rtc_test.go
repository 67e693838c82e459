package transport

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// rtcWire is a wire in run-to-completion mode whose engine writes to a
// recording link and polls the given datagrams, one batch per Poll.
func rtcWire(t *testing.T, reads *[]link.Message) (*wire, *recLink) {
	return rtcWireOpts(t, reads, rcOpts{recvWR: 4, sendWR: 4})
}

func rtcWireOpts(t *testing.T, reads *[]link.Message, o rcOpts) (*wire, *recLink) {
	w := newWire(t, verbs.QPTypeRC, o)
	l := &recLink{noLink: noLink{t}}
	w.e.cfg.Link, w.e.cfg.RunToCompletion = l, true
	w.e.pollers = append(w.e.pollers, &poller{r: scriptReader(w, reads, 1)})
	return w, l
}

// scriptReader is a poller's reader that takes up to batch datagrams of
// reads at a time.
func scriptReader(w *wire, reads *[]link.Message, batch int) *reader {
	r := newReader(w.e, func(msgs []link.Message) (int, error) {
		n := min(len(msgs), len(*reads))
		for i, m := range (*reads)[:n] {
			b := append(msgs[i].Buf[:0], m.Buf...)
			msgs[i] = m
			msgs[i].Buf = b
		}
		*reads = (*reads)[n:]
		return n, nil
	}, batch)
	r.poll = true
	return r
}

// TestRunToCompletionPostSends: in run-to-completion mode a post on an idle
// shard sends its packet before it returns, with no shard goroutine.
func TestRunToCompletionPostSends(t *testing.T) {
	var none []link.Message
	w, l := rtcWire(t, &none)
	sb := w.mem.reg(1, pattern(64, 2), verbs.AccessLocalWrite)
	w.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}})
	if len(l.msgs) != 1 || bth.Opcode(l.msgs[0].Buf[0]) != bth.RCSendOnly {
		t.Fatalf("%d messages written by the post, want the SEND", len(l.msgs))
	}
}

// TestRunToCompletionPollHoldsACK: a CQ poller that receives a SEND sees its
// completion at once, while the SEND's ACK waits; the poller's reply then
// leaves in the same batch, after the ACK (never overtaking it: see
// pollSlice), and a poll that finds nothing sends what is held.
func TestRunToCompletionPollHoldsACK(t *testing.T) {
	var reads []link.Message
	w, l := rtcWire(t, &reads)
	rb := w.mem.reg(1, make([]byte, 256), verbs.AccessLocalWrite)
	sb := w.mem.reg(1, pattern(64, 2), verbs.AccessLocalWrite)
	w.recv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{rb.sge(0, 256)}}, verbs.RecvWR{WRID: 8, SGL: []verbs.SGE{rb.sge(0, 256)}})
	send := func(psn bth.PSN) {
		it := w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: psn, AckReq: true}, pattern(64, 1))
		reads = append(reads, link.Message{Buf: append([]byte(nil), it.bytes()...), Addr: w.peer, Local: addrA.Addr()})
		it.release()
	}
	send(wireRQPSN)
	if n := w.e.Poll(); n != 1 {
		t.Fatalf("Poll read %d messages, want 1", n)
	}
	if wcs := w.wcs(w.rcq); len(wcs) != 1 || wcs[0].WRID != 7 || wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("receive completions %v, want WR 7", wcs)
	}
	if len(l.msgs) != 0 {
		t.Fatalf("%d messages written before the reply, want the ACK held", len(l.msgs))
	}
	w.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}})
	if l.writes != 1 {
		t.Fatalf("the ACK and the reply took %d link writes, want 1", l.writes)
	}
	if len(l.msgs) != 2 || bth.Opcode(l.msgs[0].Buf[0]) != bth.RCAck || bth.Opcode(l.msgs[1].Buf[0]) != bth.RCSendOnly {
		t.Fatalf("written %d messages, want the ACK, then the reply", len(l.msgs))
	}
	send(wireRQPSN.Add(1))
	w.e.Poll()
	if len(l.msgs) != 2 {
		t.Fatal("the second ACK was not held")
	}
	if n := w.e.Poll(); n != 0 || len(l.msgs) != 3 || bth.Opcode(l.msgs[2].Buf[0]) != bth.RCAck {
		t.Fatalf("an empty poll wrote %d messages in all, want the held ACK sent", len(l.msgs))
	}
}

// TestRunToCompletionCloseSendsHeldACK: the ACK a poller's slice holds leaves
// when the engine closes; a program that polled its last receive and exited
// would otherwise leave its peer retrying a message already completed.
func TestRunToCompletionCloseSendsHeldACK(t *testing.T) {
	var reads []link.Message
	w, l := rtcWire(t, &reads)
	rb := w.mem.reg(1, make([]byte, 256), verbs.AccessLocalWrite)
	w.recv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{rb.sge(0, 256)}})
	queueSend(w, &reads, wireRQPSN)
	if n := w.e.Poll(); n != 1 || len(l.msgs) != 0 {
		t.Fatalf("Poll read %d messages and wrote %d, want 1 read and the ACK held", n, len(l.msgs))
	}
	w.e.Close()
	if len(l.msgs) != 1 || bth.Opcode(l.msgs[0].Buf[0]) != bth.RCAck {
		t.Fatalf("Close wrote %d messages, want the held ACK", len(l.msgs))
	}
}

// TestRunToCompletionPollKeepsRequestOrder: a poll-driven slice that serves a
// QP's requester (its post found the token taken) sends those requests at
// once; held, they would leave after the next post's requests and the peer
// would see a PSN gap, then a duplicate.
func TestRunToCompletionPollKeepsRequestOrder(t *testing.T) {
	var reads []link.Message
	w, l := rtcWire(t, &reads)
	rb := w.mem.reg(1, make([]byte, 256), verbs.AccessLocalWrite)
	sb := w.mem.reg(1, pattern(64, 2), verbs.AccessLocalWrite)
	w.recv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{rb.sge(0, 256)}})
	it := w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: wireRQPSN, AckReq: true}, pattern(64, 1))
	reads = append(reads, link.Message{Buf: append([]byte(nil), it.bytes()...), Addr: w.peer, Local: addrA.Addr()})
	it.release()

	// Another goroutine holds the token: the post only queues the QP.
	w.q.sh.mu.Lock()
	w.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}})
	w.q.sh.mu.Unlock()
	if len(l.msgs) != 0 {
		t.Fatalf("%d messages written while the token was taken", len(l.msgs))
	}
	// The poller's slice receives the SEND and serves the queued post.
	if n := w.e.Poll(); n != 1 {
		t.Fatalf("Poll read %d messages, want 1", n)
	}
	w.post(verbs.SendWR{WRID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}})
	w.e.FlushPosts() // the poller's next poll: the post waited behind WR 1
	var psns []bth.PSN
	for _, m := range l.msgs {
		if bth.Opcode(m.Buf[0]) == bth.RCSendOnly {
			pkt, err := bth.Parse(m.Buf)
			if err != nil {
				t.Fatal(err)
			}
			psns = append(psns, pkt.PSN())
		}
	}
	if len(psns) != 2 || psns[0] != wireSQPSN || psns[1] != wireSQPSN.Add(1) {
		t.Fatalf("SEND PSNs on the wire %v, want %v then %v", psns, wireSQPSN, wireSQPSN.Add(1))
	}
}

// sendPSNs returns the PSNs of the SENDs in msgs (each segment of a train),
// in order.
func sendPSNs(t *testing.T, msgs []link.Message) []bth.PSN {
	t.Helper()
	var psns []bth.PSN
	for _, m := range msgs {
		for i := range m.NumSegments() {
			b := m.Segment(i)
			if bth.Opcode(b[0]) != bth.RCSendOnly {
				continue
			}
			pkt, err := bth.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			psns = append(psns, pkt.PSN())
		}
	}
	return psns
}

// inSequence reports whether psns run from first, one by one.
func inSequence(psns []bth.PSN, first bth.PSN) bool {
	for i, p := range psns {
		if p != first.Add(i) {
			return false
		}
	}
	return true
}

// TestRunToCompletionPostBatching: in run-to-completion mode a post to an
// idle send queue sends before it returns; posts behind outstanding WRs wait
// for the CQ poller, whose next poll (FlushPosts) sends them all in one link
// write, or for the postBatch-th of them, or for the post timer.
func TestRunToCompletionPostBatching(t *testing.T) {
	cases := []struct {
		name   string
		behind int                     // posts after the first, one WR each
		then   func(w *wire, s *shard) // what follows the posts
		writes int                     // link writes after the first post's, want
	}{
		{"poll", 3, func(w *wire, _ *shard) { w.e.FlushPosts() }, 1},
		{"batch bound", postBatch, func(*wire, *shard) {}, 1},
		{"timer", 2, func(_ *wire, s *shard) {
			if !s.postArmed.Load() {
				t.Fatal("posts wait for the poller with no timer armed")
			}
			s.postDue()
			select {
			case <-s.kick: // the shard goroutine's turn
			default:
				t.Fatal("the post timer did not wake the shard goroutine")
			}
			s.mu.Lock()
			s.process()
			s.mu.Unlock()
		}, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var none []link.Message
			w, l := rtcWireOpts(t, &none, rcOpts{recvWR: 4, sendWR: 2 * postBatch})
			s := w.q.sh
			sb := w.mem.reg(1, pattern(64, 2), verbs.AccessLocalWrite)
			send := func(id uint64) {
				w.post(verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}})
			}
			send(0)
			if l.writes != 1 {
				t.Fatalf("a post to an idle send queue made %d link writes, want 1", l.writes)
			}
			for i := 1; i < c.behind; i++ {
				send(uint64(i))
			}
			if l.writes != 1 {
				t.Fatalf("posts behind an outstanding WR made %d link writes, want them held", l.writes-1)
			}
			send(uint64(c.behind))
			c.then(w, s)
			if got := l.writes - 1; got != c.writes {
				t.Errorf("%d link writes for the posts behind, want %d", got, c.writes)
			}
			if psns := sendPSNs(t, l.msgs); len(psns) != c.behind+1 || !inSequence(psns, wireSQPSN) {
				t.Errorf("SEND PSNs on the wire %v, want %d from %v in order", psns, c.behind+1, wireSQPSN)
			}
			if s.posts.Load() != 0 {
				t.Errorf("%d posts still counted as waiting", s.posts.Load())
			}
		})
	}
}

// TestRunToCompletionPostTimerStops: a poll that sends the posts stops the
// post timer, so a stream whose poller keeps up never wakes the shard
// goroutine; a timer that fires after the poller sent them wakes nobody.
func TestRunToCompletionPostTimerStops(t *testing.T) {
	var none []link.Message
	w, l := rtcWireOpts(t, &none, rcOpts{recvWR: 4, sendWR: 8})
	s := w.q.sh
	sb := w.mem.reg(1, pattern(64, 2), verbs.AccessLocalWrite)
	for id := range uint64(2) {
		w.post(verbs.SendWR{WRID: id, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}})
	}
	if !s.postArmed.Load() {
		t.Fatal("no post timer armed for the post behind")
	}
	w.e.FlushPosts()
	if s.postArmed.Load() {
		t.Error("the post timer still runs after the poll sent the posts")
	}
	select {
	case <-s.kick: // the posts' own wake-ups, if any
	default:
	}
	s.postDue() // a fire racing the stop
	select {
	case <-s.kick:
		t.Error("a post timer with nothing left woke the shard goroutine")
	default:
	}
	if psns := sendPSNs(t, l.msgs); len(psns) != 2 {
		t.Errorf("SENDs %v written, want 2", psns)
	}
}

// TestRunToCompletionPollWaitsForHolder: a CQ poll that finds the receive
// path or the QP's shard held by another goroutine (the path's reader
// goroutine, woken by the same datagram) waits for it and returns with the
// completion made, instead of returning empty for the program to spin on
// while the holder, with no core, cannot finish.
func TestRunToCompletionPollWaitsForHolder(t *testing.T) {
	cases := []struct {
		name string
		held func(w *wire) *sync.Mutex
	}{
		{"path", func(w *wire) *sync.Mutex { return &w.e.pollers[0].mu }},
		{"shard", func(w *wire) *sync.Mutex { return &w.q.sh.mu }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var reads []link.Message
			w, _ := rtcWire(t, &reads)
			rb := w.mem.reg(1, make([]byte, 256), verbs.AccessLocalWrite)
			w.recv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{rb.sge(0, 256)}})
			queueSend(w, &reads, wireRQPSN)

			mu := c.held(w)
			mu.Lock() // another goroutine's
			polled := make(chan int, 1)
			go func() { polled <- w.e.Poll() }()
			deadline := time.Now().Add(time.Minute) // a bound for a failure, not a timing
			for w.e.cfg.Stats.PollerWaits.Load() == 0 {
				if time.Now().After(deadline) {
					mu.Unlock()
					t.Fatal("the poll did not wait for the holder")
				}
				runtime.Gosched()
			}
			select {
			case n := <-polled:
				mu.Unlock()
				t.Fatalf("the poll returned %d while the holder held on", n)
			default:
			}
			mu.Unlock()
			if n := <-polled; n != 1 {
				t.Fatalf("Poll read %d messages, want 1", n)
			}
			if wcs := w.wcs(w.rcq); len(wcs) != 1 || wcs[0].WRID != 7 {
				t.Fatalf("receive completions %v when the poll returned, want WR 7", wcs)
			}
		})
	}
}

// TestRunToCompletionStreaming: a post behind streamPackets outstanding WRs,
// a read of streamPackets packets, or a send of as many (one large message),
// marks a stream for streamFor; a request/response's posts, reads and sends
// do not.
func TestRunToCompletionStreaming(t *testing.T) {
	cases := []struct {
		name   string
		posts  int // posts of one SEND each, before the check
		pkts   int // packets of each SEND (0: one of 64 bytes)
		reads  int // datagrams in one read, before the check
		stream bool
	}{
		{"request", 1, 0, 0, false},
		{"posts behind a few", streamPackets, 0, 0, false},
		{"posts behind many", streamPackets + 1, 0, 0, true},
		{"small read", 0, 0, streamPackets - 1, false},
		{"batch read", 0, 0, streamPackets, true},
		{"short message", 1, streamPackets - 1, 0, false},
		{"long message", 1, streamPackets, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var reads []link.Message
			w, _ := rtcWireOpts(t, &reads, rcOpts{recvWR: 2 * streamPackets, sendWR: 2 * streamPackets})
			w.e.pollers[0].r = scriptReader(w, &reads, 2*streamPackets)
			size := 64
			if c.pkts > 0 {
				size = c.pkts * verbs.MTU1024.Bytes() // the wire's path MTU
			}
			sb := w.mem.reg(1, pattern(size, 2), verbs.AccessLocalWrite)
			for range c.posts {
				w.post(verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, size)}})
			}
			rb := w.mem.reg(1, make([]byte, 256), verbs.AccessLocalWrite)
			for i := range c.reads {
				w.recv(verbs.RecvWR{SGL: []verbs.SGE{rb.sge(0, 256)}})
				queueSend(w, &reads, wireRQPSN.Add(i))
			}
			if c.reads > 0 {
				if n := w.e.Poll(); n != c.reads {
					t.Fatalf("Poll read %d messages, want %d", n, c.reads)
				}
			}
			if got := w.e.Streaming(); got != c.stream {
				t.Fatalf("Streaming() = %v, want %v", got, c.stream)
			}
			w.clock.now = w.clock.now.Add(streamFor)
			if w.e.Streaming() {
				t.Error("still streaming streamFor after the last sign")
			}
		})
	}
}

// queueSend queues a 64-byte SEND ONLY from the peer with psn on reads.
func queueSend(w *wire, reads *[]link.Message, psn bth.PSN) {
	it := w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: psn, AckReq: true}, pattern(64, 1))
	*reads = append(*reads, link.Message{Buf: append([]byte(nil), it.bytes()...), Addr: w.peer, Local: addrA.Addr()})
	it.release()
}

// TestRunToCompletionStreamSendsACKs: a poller's slice holds a request's ACK
// for the reply its program is about to post, but in a stream, where no reply
// comes and the ACK is what opens the peer's window, the ACK leaves at once.
func TestRunToCompletionStreamSendsACKs(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "request", true: "stream"}[stream], func(t *testing.T) {
			var reads []link.Message
			w, l := rtcWire(t, &reads)
			rb := w.mem.reg(1, make([]byte, 256), verbs.AccessLocalWrite)
			w.recv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{rb.sge(0, 256)}})
			queueSend(w, &reads, wireRQPSN)
			if stream {
				w.e.markStream()
			}
			if n := w.e.Poll(); n != 1 {
				t.Fatalf("Poll read %d messages, want 1", n)
			}
			if sent := len(l.msgs) == 1 && bth.Opcode(l.msgs[0].Buf[0]) == bth.RCAck; sent != stream {
				t.Fatalf("%d messages written by the poll, want the ACK sent %v", len(l.msgs), stream)
			}
		})
	}
}

// handClock is a Clock the test moves by hand: advance fires the timers that
// come due, in order, on the test's goroutine.
type handClock struct {
	now    time.Time
	timers []*handTimer
}

type handTimer struct {
	c    *handClock
	at   time.Time
	f    func()
	live bool
	arms int // AfterFunc and Reset calls
}

func (c *handClock) Now() time.Time { return c.now }

func (c *handClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &handTimer{c: c, f: f}
	c.timers = append(c.timers, t)
	t.Reset(d)
	return t
}

func (t *handTimer) Stop() bool {
	was := t.live
	t.live = false
	return was
}

func (t *handTimer) Reset(d time.Duration) bool {
	was := t.live
	t.at, t.live = t.c.now.Add(d), true
	t.arms++
	return was
}

func (c *handClock) advance(d time.Duration) {
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if t.live && !t.at.After(c.now) {
			t.live = false
			t.f()
		}
	}
}

// TestRunToCompletionHoldTimer: the hold timer is armed once for the ACKs a
// poller holds, not restarted by the holds that follow while it runs nor
// stopped when a reply sends them; it runs out holdFor after the first, and
// wakes the shard goroutine only if an ACK is held then.
func TestRunToCompletionHoldTimer(t *testing.T) {
	var reads []link.Message
	w, l := rtcWire(t, &reads)
	c := &handClock{now: w.clock.now}
	w.e.cfg.Clock = c
	s := w.e.shards[0]
	rb := w.mem.reg(1, make([]byte, 256), verbs.AccessLocalWrite)
	sb := w.mem.reg(1, pattern(64, 2), verbs.AccessLocalWrite)
	for i := range 4 {
		w.recv(verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{rb.sge(0, 256)}})
	}
	woken := func() bool {
		select {
		case <-s.kick:
			return true
		default:
			return false
		}
	}
	held := func() bool { return s.heldN.Load() > 0 }
	hold := func(psn bth.PSN) {
		t.Helper()
		queueSend(w, &reads, psn)
		if n := w.e.Poll(); n != 1 || !held() {
			t.Fatalf("Poll read %d messages, held %v; want 1 and the ACK held", n, held())
		}
	}
	emptyPoll := func() {
		t.Helper()
		if n := w.e.Poll(); n != 0 || held() {
			t.Fatalf("an empty poll read %d, held %v; want 0 and the ACK sent", n, held())
		}
	}
	woken()
	hold(wireRQPSN)
	ht, _ := s.heldTimer.(*handTimer)
	if ht == nil || ht.arms != 1 {
		t.Fatal("the hold did not arm the hold timer")
	}
	w.post(verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}}) // the reply
	if held() {
		t.Fatal("the reply left the ACK held")
	}
	c.advance(holdFor / 2)
	hold(wireRQPSN.Add(1))
	if ht.arms != 1 || !ht.live {
		t.Fatalf("the timer was armed %d times and live %v, want it left running", ht.arms, ht.live)
	}
	c.advance(holdFor / 2)
	if !woken() {
		t.Fatal("the timer ran out with an ACK held and did not wake the shard")
	}
	emptyPoll()
	hold(wireRQPSN.Add(2))
	if ht.arms != 2 {
		t.Fatalf("a hold after the timer ran out left it armed %d times, want 2", ht.arms)
	}
	emptyPoll()
	c.advance(holdFor)
	if woken() {
		t.Fatal("the timer woke the shard with nothing held")
	}
	// The first ACK and the reply after it, then the two ACKs the empty polls
	// sent.
	if got := len(l.msgs); got != 4 {
		t.Fatalf("%d messages written, want 4", got)
	}
}

// TestReaderDrives: a default-mode reader runs the shards it fed whatever
// GOMAXPROCS is; run to completion drives anyway (kickOrDrive), and tests may
// pin the choice.
func TestReaderDrives(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	for _, tc := range []struct {
		mode int8
		rtc  bool
		want bool
	}{{0, false, true}, {driveAlways, false, true}, {driveNever, false, false}, {0, true, false}} {
		e := idleEngine(t, noLink{t}, func(c *Config) { c.readerDrives, c.RunToCompletion = tc.mode, tc.rtc })
		for _, procs := range []int{1, runtime.NumCPU(), runtime.NumCPU() + 2} {
			runtime.GOMAXPROCS(procs)
			if got := e.readerDrives(); got != tc.want {
				t.Errorf("mode %d, run to completion %v, GOMAXPROCS %d: drives %v, want %v", tc.mode, tc.rtc, procs, got, tc.want)
			}
		}
	}
}
