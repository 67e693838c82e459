package bottleneck

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/link"
)

// packet is one datagram inside the switch.
type packet struct {
	buf     *[link.MaxDatagram]byte
	n       int
	src     netip.AddrPort
	dst     netip.AddrPort
	tos     uint8
	due     time.Time // delivery time, once serialized
	arrived time.Time // when it entered the queue
}

// Marking is a queue's ECN policy, as a switch's WRED/ECN profile on the
// instantaneous queue depth in bytes. The decision is taken when a packet
// leaves the queue (its last bit is out), on the bytes still queued behind
// it, as switch ASICs mark at egress dequeue: the receiver then learns of
// the queue one queueing delay sooner than with marking on arrival, and
// the decision does not depend on which goroutine ran first at an instant
// when several packets arrive together. An
// ECN-capable packet (ECT(0) or ECT(1)) that leaves q bytes behind is
// marked CE with probability PMax·(q−MinBytes)/(MaxBytes−MinBytes) from
// MinBytes on, and always from MaxBytes on. MinBytes == MaxBytes is a plain threshold (DCTCP's K). Packets
// that are not ECN-capable are never marked and never dropped early: only
// a full buffer drops them. The zero Marking marks nothing.
type Marking struct {
	MinBytes, MaxBytes int
	PMax               float64 // in (0, 1]; 0 means 1
}

// server is a FIFO served at a fixed rate, one packet at a time, followed
// by a fixed propagation delay: a switch egress port or a host's NIC. One
// goroutine per server runs the clock; enqueue may be called from any
// goroutine.
type server struct {
	rate   uint64 // bit/s; 0: infinitely fast
	delay  time.Duration
	buffer int // bytes, 0: unbounded
	mark   Marking
	out    func(*packet) // called from the server goroutine at delivery time

	mu      sync.Mutex
	rng     *rand.Rand // mu guards
	queue   []*packet  // mu guards: waiting and in service (head)
	qbytes  int        // mu guards
	flight  []*packet  // mu guards: serialized, waiting out the delay
	svcDone time.Time  // mu guards: when the head finishes, zero when idle
	busyTo  time.Time  // mu guards: when the last packet finished serializing
	stats   Stats      // mu guards
	closed  bool       // mu guards
	kick    chan struct{}
	done    chan struct{}
}

// Stats are a queue's counters.
type Stats struct {
	Enqueued, Marked, Dropped, Delivered uint64 // packets
	DeliveredBytes                       uint64
	MaxBytes                             int // highest queue depth seen, bytes
}

func newServer(rate uint64, delay time.Duration, buffer int, mark Marking, seed uint64, out func(*packet)) *server {
	s := &server{
		rate: rate, delay: delay, buffer: buffer, mark: mark, out: out,
		rng:  rand.New(rand.NewPCG(seed, 0x5851f42d4c957f2d)),
		kick: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
	go s.run()
	return s
}

// enqueue admits p or drops it (tail drop). It reports whether p was admitted; a dropped packet's
// buffer is returned to the pool.
func (s *server) enqueue(p *packet, now time.Time) bool {
	s.mu.Lock()
	if s.closed || (s.buffer > 0 && s.qbytes+p.n > s.buffer) {
		if !s.closed {
			s.stats.Dropped++
		}
		s.mu.Unlock()
		link.PutBuffer(p.buf)
		return false
	}
	p.arrived = now
	s.queue = append(s.queue, p)
	s.qbytes += p.n
	s.stats.Enqueued++
	s.stats.MaxBytes = max(s.stats.MaxBytes, s.qbytes)
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return true
}

// shouldMark draws the marking decision for a packet leaving q bytes
// behind it. mu held.
func (s *server) shouldMark(q int) bool {
	m := s.mark
	switch {
	case m.MaxBytes <= 0 || q < m.MinBytes:
		return false
	case q >= m.MaxBytes:
		return true
	}
	pmax := m.PMax
	if pmax <= 0 {
		pmax = 1
	}
	return s.rng.Float64() < pmax*float64(q-m.MinBytes)/float64(m.MaxBytes-m.MinBytes)
}

// txTime is the serialization time of n bytes.
func (s *server) txTime(n int) time.Duration {
	if s.rate == 0 {
		return 0
	}
	return time.Duration((uint64(n)*8*uint64(time.Second) + s.rate - 1) / s.rate)
}

// run is the server's clock: it finishes the head packet when its
// serialization time is up, starts the next, and delivers packets whose
// delay has passed, in order.
func (s *server) run() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		due, wait := s.step(time.Now())
		for _, p := range due {
			s.out(p)
		}
		if len(due) > 0 {
			continue
		}
		var tc <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			tc = timer.C
		}
		select {
		case <-s.kick:
		case <-tc:
		case <-s.done:
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

// step advances the queue to now and returns the packets to deliver and
// how long to wait for the next event (-1: none pending).
func (s *server) step(now time.Time) ([]*packet, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, -1
	}
	for {
		if !s.svcDone.IsZero() && !s.svcDone.After(now) {
			p := s.queue[0]
			s.queue = s.queue[1:]
			s.qbytes -= p.n
			if p.tos&3 != 0 && s.shouldMark(s.qbytes) {
				p.tos |= 3
				s.stats.Marked++
			}
			p.due = s.svcDone.Add(s.delay)
			s.flight = append(s.flight, p)
			s.busyTo = s.svcDone
			s.svcDone = time.Time{}
		}
		if !s.svcDone.IsZero() || len(s.queue) == 0 {
			break
		}
		// The next packet starts when it arrived or when the line became
		// free, whichever is later, however late this goroutine runs.
		head := s.queue[0]
		start := head.arrived
		if s.busyTo.After(start) {
			start = s.busyTo
		}
		s.svcDone = start.Add(s.txTime(head.n))
	}
	k := 0
	for k < len(s.flight) && !s.flight[k].due.After(now) {
		k++
	}
	var due []*packet
	if k > 0 {
		due = append(due, s.flight[:k]...)
		s.flight = append(s.flight[:0], s.flight[k:]...)
		for _, p := range due {
			s.stats.Delivered++
			s.stats.DeliveredBytes += uint64(p.n)
		}
	}
	wait := time.Duration(-1)
	if !s.svcDone.IsZero() {
		wait = s.svcDone.Sub(now)
	}
	if len(s.flight) > 0 {
		if d := s.flight[0].due.Sub(now); wait < 0 || d < wait {
			wait = d
		}
	}
	return due, wait
}

// depth is the queue depth in bytes, the packet in service included.
func (s *server) depth() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.qbytes
}

func (s *server) snapshot() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// close stops the goroutine and frees what is queued.
func (s *server) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	for _, p := range s.queue {
		link.PutBuffer(p.buf)
	}
	for _, p := range s.flight {
		link.PutBuffer(p.buf)
	}
	s.queue, s.flight, s.qbytes = nil, nil, 0
	s.svcDone = time.Time{}
	s.mu.Unlock()
	close(s.done)
}
