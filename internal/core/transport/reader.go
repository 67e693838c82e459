package transport

import (
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/link"
)

// A reader serves one receive path of the Link: it reads batches and hands
// each packet to its QP's shard (by BTH DestQP, in the QP table), never
// blocking on a shard.
//
// With GRO (link.Offloads) it reads into buffers that hold a whole train: a
// run of datagrams of one flow as one message (link.Message.SegSize). Each
// segment goes to its QP as a packet of its own, a reslice of the shared
// buffer, which returns to its pool with the last segment (rxTrain), and is
// parsed and ICRC-checked like a lone datagram. A datagram that arrives alone
// is copied, so a 64 KiB train buffer never waits in a shard queue for one
// small packet.

// rxTrain is a received GRO train, shared by the packets of its segments.
type rxTrain struct {
	buf  [link.MaxTrain]byte
	refs atomic.Int32 // the reader's own reference and one per queued segment
}

var trainPool = sync.Pool{New: func() any { return new(rxTrain) }}

// unref drops one reference and returns the train to the pool with the last.
func (t *rxTrain) unref() { t.drop(1) }

// drop drops n references, returning the train to the pool with the last.
func (t *rxTrain) drop(n int32) {
	if t.refs.Add(-n) == 0 {
		trainPool.Put(t)
	}
}

// trainRefs drops the references of a run of segments of one train at once:
// a slice handles a train's segments one after another, and one atomic add
// on the train's count (a line the reader wrote last) replaces one a segment.
type trainRefs struct {
	t *rxTrain
	n int32
}

// release releases it, or counts its reference if it is a segment.
func (r *trainRefs) release(it *rxItem) {
	t := it.train
	if t == nil {
		it.release()
		return
	}
	if t != r.t {
		r.flush()
		r.t = t
	}
	r.n++
	it.train = nil
}

// flush drops the references counted, returning the train with the last.
func (r *trainRefs) flush() {
	if r.t != nil {
		r.t.drop(r.n)
	}
	r.t, r.n = nil, 0
}

// bytes is the packet: its datagram buffer, or its segment of a train.
func (it *rxItem) bytes() []byte {
	if it.train != nil {
		return it.train.buf[it.off : it.off+it.n]
	}
	return it.buf[:it.n]
}

func (it *rxItem) release() {
	if it.train != nil {
		it.train.unref()
		it.train = nil
		return
	}
	link.PutBuffer(it.buf)
	it.buf = nil
}

// detach copies a train segment kept for long (held behind a READ reply) into
// a datagram buffer, so it does not pin the whole train.
func (it *rxItem) detach() {
	if it.train == nil {
		return
	}
	b := link.GetBuffer()
	n := copy(b[:], it.bytes())
	it.release()
	it.buf, it.n, it.off = b, n, 0
}

// reader is one receive path's goroutine state.
type reader struct {
	e      *Engine
	recv   link.ReceiveFunc
	group  netip.Addr // the multicast group this path serves; zero for the Link's own paths
	msgs   []link.Message
	bufs   []*[link.MaxDatagram]byte // without GRO
	trains []*rxTrain                // with GRO
	kicked []*shard
	led    []bool // led[i]: msgs[i]'s ACK went ahead of the batch (take)
	poll   bool   // a poller's reader (Engine.Poll), not a goroutine's

	// ordered: the goroutine's reader of a path pollers share (run to
	// completion) reads it without waiting under the path's lock
	// (orderedOnce).
	ordered *poller
	wait    link.WaitFunc

	// spin reads the path without waiting (link.Poller): while the engine
	// carries a stream, the reader polls it for a moment before it parks
	// (read). hold: the path is the engine's only one, so the moment may be
	// readHold (see readSpin).
	spin link.ReceiveFunc
	hold bool
}

// A reader parked on its socket is woken by the runtime's network poller, and
// that is a thread woken from sleep: the kernel wakes the poller's thread from
// the softirq of the send that delivered the datagram. On a stream, whose next
// train or ACK is due within microseconds, such wakes cost twice:
//   - with the Go scheduler oversubscribed (GOMAXPROCS above the cores) each
//     wake is an OS context switch, and they left a 2-core host 37 % idle at
//     GOMAXPROCS 8;
//   - with one P per core the kernel may wake the thread on the sender's core
//     (a socket wakes its reader as a synchronous wake-up, as if the waker
//     were about to sleep): on a 2-core KVM guest (kernel 6.18) the two
//     threads then took turns on one core while the other stayed idle for up
//     to 10 ms at a time, until the load balancer moved one. RCWrite/1MiB left
//     35 % of the machine idle there and ran at 29 % of raw GSO.
//
// So while the engine carries a stream (Engine.streamed) a reader polls its
// socket before it parks, yielding between polls (the shards and programs
// that share its P run meanwhile), and it parks only when the stream has gone
// quiet:
//   - with one P per core and a single receive path, for up to readHold: a
//     reader that does not park is never woken, and a stream whose trains or
//     ACKs arrive within that never puts a core to sleep (RCWrite/1MiB: idle
//     35 % to 0 %, 29 % to 56-62 % of raw GSO, with the reader driving the
//     shards it fed: readerDrives);
//   - under an oversubscribed scheduler, for up to readSpin: there a poller's
//     yield wakes another thread (the runtime's idle P), and a long spin took
//     the cores from the work (RCWrite/1MiB 0.78 M against 1.09 M pkts/s at
//     GOMAXPROCS 8);
//   - with several receive paths (SO_REUSEPORT), for up to readSpin: the
//     engine's streams mark it as a whole, and a path that carries none of
//     them would poll for nothing.
//
// The bound is in polls too: under a fake clock time stands still. Outside a
// stream a reader parks at once, so a request-response flow does not pay a
// spin per packet.
//
// The clock is read every readSpinClock polls: an empty poll and its yield
// take a microsecond or more, and a clock read per poll was 0.5 % of a 4 KiB
// stream's CPU.
const (
	readSpin      = 50 * time.Microsecond
	readSpinPolls = 128
	readHold      = streamFor
	readHoldPolls = 1024
	readSpinClock = 4
)

// groBatch caps a GRO read: each message needs a 64 KiB buffer, and 16 trains
// hold up to 1024 packets.
const groBatch = 16

func newReader(e *Engine, recv link.ReceiveFunc, batch int) *reader {
	if e.offloads.GRO {
		batch = min(batch, groBatch)
	}
	r := &reader{e: e, recv: recv, msgs: make([]link.Message, batch), led: make([]bool, batch), kicked: make([]*shard, 0, len(e.shards))}
	if !e.offloads.GRO {
		r.bufs = make([]*[link.MaxDatagram]byte, batch)
		for i := range r.bufs {
			r.bufs[i] = link.GetBuffer()
		}
	} else {
		r.trains = make([]*rxTrain, batch)
		for i := range r.trains {
			r.trains[i] = trainPool.Get().(*rxTrain)
		}
	}
	return r
}

// loop reads until the Link closes (or dies: DEVICE_FATAL).
func (r *reader) loop() {
	e := r.e
	defer e.wg.Done()
	for {
		var err error
		if r.ordered != nil {
			err = r.orderedOnce()
		} else {
			_, err = r.once()
		}
		if err == nil {
			continue
		}
		if e.closed.Load() || linkGone(err) {
			r.close()
			if !e.closed.Load() && !r.group.IsValid() {
				e.fail() // a group's path ends when its last QP leaves the group
			}
			return
		}
		time.Sleep(time.Millisecond) // transient socket error; do not spin
	}
}

// once reads a batch and hands its packets on; it returns the messages read.
func (r *reader) once() (int, error) {
	n, err := r.take()
	r.kick()
	return n, err
}

// orderedOnce is once for a path pollers share: the read and the hand-off run
// under the path's lock, so batches reach the shards in the order they were
// read and a QP never sees its packets reordered (a PSN gap would cost a NAK
// and a go-back-N resend). The reader also runs the shards it fed under the
// lock, so a CQ poller waiting for the lock (Engine.Poll) finds the batch's
// completions made or their shards woken. An empty path is polled again, the
// lock let go between polls, as reader.read polls its own (see readSpin),
// then waited on outside the lock.
func (r *reader) orderedOnce() error {
	p := r.ordered
	var (
		start time.Time
		bound time.Duration
		polls int
	)
	for i := 0; ; i++ {
		p.mu.Lock()
		n, err := r.take()
		r.kick()
		p.mu.Unlock()
		if err != nil || n > 0 {
			return err
		}
		if i == 0 {
			bound, polls = r.spinBounds()
		}
		if i+1 >= polls || !r.spinOn(i, &start, bound) {
			break
		}
		runtime.Gosched()
	}
	return r.wait()
}

// take reads a batch and queues its packets, noting the shards in r.kicked.
func (r *reader) take() (int, error) {
	for i := range r.msgs {
		if r.trains != nil {
			r.msgs[i] = link.Message{Buf: r.trains[i].buf[:]}
		} else {
			r.msgs[i] = link.Message{Buf: r.bufs[i][:]}
		}
	}
	n, err := r.read()
	if err != nil {
		return 0, err
	}
	r.kicked = r.kicked[:0]
	pkts := 0
	ahead := true
	for i := range n {
		pkts += r.msgs[i].NumSegments()
		r.led[i] = false
		if ahead {
			r.led[i], ahead = r.lead(i)
		}
	}
	for i := range n {
		if r.trains != nil {
			r.takeTrain(i)
		} else if !r.led[i] {
			r.takeDatagram(i)
		}
	}
	if pkts >= streamPackets {
		r.e.markStream()
	}
	return n, nil
}

// read reads a batch into r.msgs: while the engine carries a stream it polls
// for up to readSpin or readHold first (see readSpin), then it waits.
func (r *reader) read() (int, error) {
	if r.spin != nil {
		bound, polls := r.spinBounds()
		var start time.Time
		for i := range polls {
			if n, err := r.spin(r.msgs); n > 0 || err != nil {
				return n, err
			}
			if !r.spinOn(i, &start, bound) {
				break
			}
			runtime.Gosched()
		}
	}
	return r.recv(r.msgs)
}

// spinBounds is how long, and how many times, a reader polls its path before
// it parks (see readSpin): not at all outside a stream.
func (r *reader) spinBounds() (time.Duration, int) {
	switch {
	case !r.e.streamed():
		return 0, 0
	case r.hold && !r.e.procs.oversubscribed():
		return readHold, readHoldPolls
	}
	return readSpin, readSpinPolls
}

// spinOn reports whether a reader whose path was empty at the i-th poll in a
// row (from 0) may poll again within bound; the first poll sets start.
func (r *reader) spinOn(i int, start *time.Time, bound time.Duration) bool {
	if i == 0 {
		*start = r.e.cfg.Clock.Now()
		return true
	}
	return i%readSpinClock != 0 || r.e.cfg.Clock.Now().Sub(*start) < bound
}

// kick runs or wakes the shards the last batch fed.
func (r *reader) kick() {
	drives := len(r.kicked) > 0 && r.e.readerDrives()
	for _, s := range r.kicked {
		if r.poll && s.e.cfg.RunToCompletion {
			s.waitDrive(true)
			continue
		}
		s.kickOrDrive(r.poll, drives)
	}
	r.kicked = r.kicked[:0]
}

// A batch's responses are handled before its requests. A peer's requests
// and its responses to ours are independent sequences, and the sender of an
// ACK meant it to arrive before what it sent next: a train's shorter last
// segment may be an ACK the sender put behind the reply to the message it
// acknowledges (shard.ackBehind), so the program sees its send complete
// before the reply arrives, as behind a NIC. A peer without GRO on loopback
// reads such a train's segments as lone datagrams, mostly in one batch, and
// gets the same order from this. Responses keep their own order: a READ
// response overtaken by a later ACK would read as lost (an implicit NAK), so
// the batch's responses go ahead only up to the first train that carries
// some.

// lead hands msgs[i] on ahead of the batch if it is a lone response, or its
// trailing ACK if it is a train that ends in one, and reports whether it did
// (a lone datagram is then done with; a train goes on with its other
// segments in takeTrain) and whether later responses may still go ahead.
func (r *reader) lead(i int) (led, ahead bool) {
	m := &r.msgs[i]
	if m.SegSize <= 0 || len(m.Buf) <= m.SegSize {
		if !isResponse(m.Buf) {
			return false, true
		}
		r.takeDatagram(i)
		return true, true
	}
	ahead = !isResponse(m.Segment(0))
	if !trailingACK(m) {
		return false, ahead
	}
	t := r.trains[i]
	segs := m.NumSegments()
	t.refs.Store(int32(1 + segs)) // the reader's, dropped by takeTrain, and each segment's
	r.takeSegment(t, m, segs-1)
	return true, ahead
}

// isResponse reports whether b is an RC response: an ACK or NAK, a READ
// response or an atomic ACK.
func isResponse(b []byte) bool { return len(b) >= bth.BTHLen && bth.Opcode(b[0]).IsResponse() }

// trailingACK reports whether train m ends in a shorter ACK (ackBehind).
func trailingACK(m *link.Message) bool {
	last := m.Segment(m.NumSegments() - 1)
	return len(last) < m.SegSize && len(last) >= bth.BTHLen && bth.Opcode(last[0]) == bth.RCAck
}

// takeTrain hands on trains[i]: each segment of a train, a trailing ACK
// first (unless it went ahead: lead), or a lone datagram (takeDatagram).
func (r *reader) takeTrain(i int) {
	m := &r.msgs[i]
	if m.SegSize <= 0 || len(m.Buf) <= m.SegSize {
		if !r.led[i] {
			r.takeDatagram(i)
		}
		return
	}
	t := r.trains[i]
	segs := m.NumSegments()
	r.e.cfg.Stats.RxTrains.Add(1)
	r.e.cfg.Stats.RxTrainSegments.Add(uint64(segs))
	if r.led[i] {
		segs-- // its trailing ACK went ahead, and refs counts them all (lead)
	} else {
		// The reader's reference, dropped below, and one per segment, set
		// before any shard sees one: the reader then writes the count once
		// a train, not once a segment on the line the shard decrements.
		t.refs.Store(int32(1 + segs))
		if trailingACK(m) {
			segs-- // the ACK first, then the packets it was sent behind
			r.takeSegment(t, m, segs)
		}
	}
	for j := range segs {
		r.takeSegment(t, m, j)
	}
	if t.refs.Add(-1) != 0 {
		r.trains[i] = trainPool.Get().(*rxTrain) // segments in flight keep t
	}
}

// takeDatagram hands on msgs[i], a lone datagram: its own buffer, replaced
// if a shard took it, or, read into a train buffer, a copy.
func (r *reader) takeDatagram(i int) {
	m := &r.msgs[i]
	if r.trains == nil {
		if r.dispatch(rxItem{buf: r.bufs[i], n: len(m.Buf)}, m) {
			r.bufs[i] = link.GetBuffer()
		}
		return
	}
	b := link.GetBuffer()
	if !r.dispatch(rxItem{buf: b, n: copy(b[:], m.Buf)}, m) {
		link.PutBuffer(b)
	}
}

// takeSegment hands on segment j of train t, read as m; t.refs already
// counts it, and loses it if no shard takes it.
func (r *reader) takeSegment(t *rxTrain, m *link.Message, j int) {
	if !r.dispatch(rxItem{train: t, off: j * m.SegSize, n: len(m.Segment(j))}, m) {
		t.unref()
	}
}

// dispatch queues it (bytes set; the rest from m) on its QP's shard and
// reports whether the shard took it; else the caller keeps the buffer.
func (r *reader) dispatch(it rxItem, m *link.Message) bool {
	e := r.e
	qpn, ok := bth.PeekDestQP(it.bytes())
	if !ok {
		e.cfg.Stats.Malformed.Add(1)
		return false
	}
	if qpn == McastQPN {
		return r.dispatchMcast(it, m)
	}
	q := e.lookup(qpn)
	if q == nil {
		e.cfg.Stats.UnknownQP.Add(1)
		return false
	}
	return r.enqueue(it, m, q)
}

// enqueue queues it, which arrived as m, on q's shard; true if taken.
func (r *reader) enqueue(it rxItem, m *link.Message, q *QP) bool {
	e := r.e
	it.src, it.local, it.tos, it.ttl, it.flow, it.qp = m.Addr, m.Local, m.TOS, m.TTL, m.FlowLabel, q
	s := q.sh
	if !s.enqueue(it) {
		e.cfg.Stats.RxQueueDrops.Add(1)
		return false
	}
	if !containsShard(r.kicked, s) {
		r.kicked = append(r.kicked, s)
	}
	return true
}

func (r *reader) close() {
	for _, b := range r.bufs {
		link.PutBuffer(b)
	}
	for _, t := range r.trains {
		trainPool.Put(t)
	}
}

func containsShard(l []*shard, s *shard) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
