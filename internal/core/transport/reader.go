package transport

import (
	"net/netip"
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
func (t *rxTrain) unref() {
	if t.refs.Add(-1) == 0 {
		trainPool.Put(t)
	}
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
	poll   bool // a poller's reader (Engine.Poll), not a goroutine's

	// ordered: the goroutine's reader of a path pollers share (run to
	// completion) reads it without waiting under the path's lock
	// (orderedOnce).
	ordered *poller
	wait    link.WaitFunc
}

// groBatch caps a GRO read: each message needs a 64 KiB buffer, and 16 trains
// hold up to 1024 packets.
const groBatch = 16

func newReader(e *Engine, recv link.ReceiveFunc, batch int) *reader {
	if e.offloads.GRO {
		batch = min(batch, groBatch)
	}
	r := &reader{e: e, recv: recv, msgs: make([]link.Message, batch), kicked: make([]*shard, 0, len(e.shards))}
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
// and a go-back-N resend). An empty path is waited on outside the lock.
func (r *reader) orderedOnce() error {
	p := r.ordered
	p.mu.Lock()
	n, err := r.take()
	p.mu.Unlock()
	r.kick()
	if err != nil || n > 0 {
		return err
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
	n, err := r.recv(r.msgs)
	if err != nil {
		return 0, err
	}
	r.kicked = r.kicked[:0]
	for i := range n {
		if r.trains != nil {
			r.takeTrain(i)
		} else if r.dispatch(rxItem{buf: r.bufs[i], n: len(r.msgs[i].Buf)}, &r.msgs[i]) {
			r.bufs[i] = link.GetBuffer()
		}
	}
	return n, nil
}

// kick runs or wakes the shards the last batch fed.
func (r *reader) kick() {
	for _, s := range r.kicked {
		s.kickOrDrive(r.poll)
	}
	r.kicked = r.kicked[:0]
}

// takeTrain hands on trains[i]: each segment of a train, or a copy of a lone
// datagram.
func (r *reader) takeTrain(i int) {
	m := &r.msgs[i]
	if m.SegSize <= 0 || len(m.Buf) <= m.SegSize {
		b := link.GetBuffer()
		if !r.dispatch(rxItem{buf: b, n: copy(b[:], m.Buf)}, m) {
			link.PutBuffer(b)
		}
		return
	}
	t := r.trains[i]
	t.refs.Store(1) // the reader's, dropped below
	segs := m.NumSegments()
	r.e.cfg.Stats.RxTrains.Add(1)
	r.e.cfg.Stats.RxTrainSegments.Add(uint64(segs))
	for j := range segs {
		t.refs.Add(1) // before the shard can see it
		if !r.dispatch(rxItem{train: t, off: j * m.SegSize, n: len(m.Segment(j))}, m) {
			t.refs.Add(-1)
		}
	}
	if t.refs.Add(-1) != 0 {
		r.trains[i] = trainPool.Get().(*rxTrain) // segments in flight keep t
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
