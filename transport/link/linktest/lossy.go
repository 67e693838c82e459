package linktest

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/transport/link"
)

// Dir is the direction of a datagram through a Lossy link.
type Dir uint8

// Directions passed to LossConfig.DropFn.
const (
	Send Dir = iota // written by the wrapped side (WriteBatch)
	Recv            // read by the wrapped side (ReadBatch)
)

// String returns "send" or "recv".
func (d Dir) String() string {
	if d == Send {
		return "send"
	}
	return "recv"
}

// ReorderHold is how long a reordered datagram waits for a later one to
// overtake it before it is sent anyway.
const ReorderHold = time.Millisecond

// LossConfig describes the impairments of a Lossy link. Probabilities are per
// datagram written, in [0, 1]; they are applied on the send side only, in this
// order: DropFn, Drop, Corrupt, Dup, Reorder, Delay.
type LossConfig struct {
	// Seed makes every random decision reproducible: the same seed and the
	// same sequence of writes give the same drops, duplicates, and so on.
	Seed int64
	// Drop is the probability that a datagram is discarded.
	Drop float64
	// Dup is the probability that a datagram is sent twice.
	Dup float64
	// Reorder is the probability that a datagram is held back and sent
	// right after the next one (or after ReorderHold if none follows).
	Reorder float64
	// Corrupt is the probability that one random bit of a datagram is
	// flipped (the ICRC should catch it).
	Corrupt float64
	// Delay is added to every datagram sent. Delayed datagrams keep their
	// order. Use virtual time (testing/synctest) for long delays.
	Delay time.Duration
	// DropFn, if set, sees every datagram in both directions before any
	// random impairment and drops it when it returns true: for scripted
	// scenarios such as "drop the first ACK". It must not keep b.
	DropFn func(dir Dir, b []byte) bool
}

// Lossy wraps a link.Link and impairs the datagrams written through it. The
// exported counters say what it did. It is safe for concurrent use; with
// several concurrent writers the decisions are still drawn from one seeded
// sequence, in the order the writes take the lock.
//
// When it needs to hold datagrams back (Delay or Reorder) it runs one
// delivery goroutine, so Close it before the test ends (synctest requires it).
type Lossy struct {
	l   link.Link
	cfg LossConfig

	// Counters, in datagrams.
	Sent       atomic.Uint64 // handed to the wrapped link, duplicates included
	Dropped    atomic.Uint64 // by the Drop probability
	DroppedFn  atomic.Uint64 // by DropFn, both directions
	Duplicated atomic.Uint64
	Reordered  atomic.Uint64
	Corrupted  atomic.Uint64
	Delayed    atomic.Uint64

	mu      sync.Mutex
	rng     *rand.Rand // mu guards
	queue   []pending  // mu guards: the delay line, due times nondecreasing
	held    int        // mu guards: index in queue of a reordered datagram, or -1
	running bool       // mu guards: delivery goroutine started
	kick    chan struct{}
	done    chan struct{}
	once    sync.Once
}

type pending struct {
	due     time.Time
	buf     *[link.MaxDatagram]byte
	n       int
	dst     netip.AddrPort
	srcPort uint16
}

var _ link.Link = (*Lossy)(nil)

// NewLossy wraps l. Closing the Lossy closes l.
func NewLossy(l link.Link, cfg LossConfig) *Lossy {
	return &Lossy{
		l:    l,
		cfg:  cfg,
		rng:  rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15)),
		held: -1,
		kick: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
}

// WriteBatch applies the impairments and passes the survivors on. It reports
// every datagram as written, as a lossy network would, unless the wrapped
// link fails.
func (l *Lossy) WriteBatch(msgs []link.Message) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	direct := make([]link.Message, 0, len(msgs))
	for i := range msgs {
		b := msgs[i].Buf
		if l.cfg.DropFn != nil && l.cfg.DropFn(Send, b) {
			l.DroppedFn.Add(1)
			continue
		}
		// Draw the same amount of randomness for every datagram so a
		// change in one probability does not reshuffle the others.
		rDrop, rCorrupt, rDup, rReorder := l.rng.Float64(), l.rng.Float64(), l.rng.Float64(), l.rng.Float64()
		bit := l.rng.Uint64()
		if rDrop < l.cfg.Drop {
			l.Dropped.Add(1)
			continue
		}
		corrupt := rCorrupt < l.cfg.Corrupt && len(b) > 0
		copies := 1
		if rDup < l.cfg.Dup {
			copies = 2
			l.Duplicated.Add(1)
		}
		reorder := rReorder < l.cfg.Reorder && l.held < 0
		now := time.Now()
		for c := 0; c < copies; c++ {
			if !corrupt && !reorder && l.cfg.Delay == 0 && len(l.queue) == 0 {
				direct = append(direct, link.Message{Buf: b, Addr: msgs[i].Addr, SrcPort: msgs[i].SrcPort})
				continue
			}
			p := pending{due: now.Add(l.cfg.Delay), buf: link.GetBuffer(), dst: msgs[i].Addr, srcPort: msgs[i].SrcPort}
			p.n = copy(p.buf[:], b)
			if corrupt {
				k := bit % uint64(p.n*8)
				p.buf[k/8] ^= 1 << (k % 8)
				if c == copies-1 {
					l.Corrupted.Add(1)
				}
			}
			if l.cfg.Delay > 0 {
				l.Delayed.Add(1)
			}
			if reorder && c == 0 {
				p.due = p.due.Add(ReorderHold)
				l.Reordered.Add(1)
				l.held = len(l.queue)
				l.queue = append(l.queue, p)
				continue
			}
			l.enqueueLocked(p)
		}
	}
	if len(direct) > 0 {
		n, err := l.l.WriteBatch(direct)
		l.Sent.Add(uint64(n))
		if err != nil {
			return 0, err
		}
	}
	if len(l.queue) > 0 {
		l.startLocked()
	}
	return len(msgs), nil
}

// enqueueLocked appends p to the delay line. A held (reordered) datagram at
// the tail is overtaken: p goes before it and it leaves right after p.
func (l *Lossy) enqueueLocked(p pending) {
	if l.held < 0 {
		l.queue = append(l.queue, p)
		return
	}
	h := l.queue[l.held]
	if p.due.Before(h.due) {
		h.due = p.due
	}
	l.queue[l.held] = p
	l.queue = append(l.queue, h)
	l.held = -1
}

func (l *Lossy) startLocked() {
	if !l.running {
		l.running = true
		go l.deliver()
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// deliver is the delay line: it sends queued datagrams when they are due.
func (l *Lossy) deliver() {
	var timer *time.Timer
	for {
		var wait time.Duration = -1
		l.mu.Lock()
		now := time.Now()
		k := 0
		for k < len(l.queue) && !l.queue[k].due.After(now) {
			k++
		}
		if k > 0 {
			// Write while holding mu, so a direct write in WriteBatch can
			// never overtake datagrams already due.
			msgs := make([]link.Message, k)
			for i, p := range l.queue[:k] {
				msgs[i] = link.Message{Buf: p.buf[:p.n], Addr: p.dst, SrcPort: p.srcPort}
			}
			n, _ := l.l.WriteBatch(msgs)
			l.Sent.Add(uint64(n))
			for _, p := range l.queue[:k] {
				link.PutBuffer(p.buf)
			}
			l.queue = append(l.queue[:0], l.queue[k:]...)
			if l.held >= 0 {
				l.held -= k
				if l.held < 0 { // it left
					l.held = -1
				}
			}
		}
		if len(l.queue) > 0 {
			wait = l.queue[0].due.Sub(now)
		}
		l.mu.Unlock()
		if k > 0 {
			continue
		}
		var tc <-chan time.Time
		if wait >= 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			tc = timer.C
		}
		select {
		case <-l.kick:
		case <-tc:
		case <-l.done:
			return
		}
	}
}

// ReadBatch reads from the wrapped link and applies DropFn to what arrives.
func (l *Lossy) ReadBatch(msgs []link.Message) (int, error) {
	for {
		n, err := l.l.ReadBatch(msgs)
		if l.cfg.DropFn == nil || n == 0 {
			return n, err
		}
		k := 0
		for i := range msgs[:n] {
			if l.cfg.DropFn(Recv, msgs[i].Buf) {
				l.DroppedFn.Add(1)
				continue
			}
			if k != i { // copy, never swap buffers (link.Link.ReadBatch)
				m := msgs[i]
				msgs[k].Buf = append(msgs[k].Buf[:0], m.Buf...)
				msgs[k].Addr, msgs[k].Local, msgs[k].TOS = m.Addr, m.Local, m.TOS
			}
			k++
		}
		if k > 0 || err != nil {
			return k, err
		}
	}
}

// LocalAddr implements link.Link.
func (l *Lossy) LocalAddr() netip.AddrPort { return l.l.LocalAddr() }

// SourcePort forwards to the wrapped Link.
func (l *Lossy) SourcePort(port uint16) bool { return l.l.SourcePort(port) }

// BatchSize implements link.Link.
func (l *Lossy) BatchSize() int { return l.l.BatchSize() }

// Close stops the delivery goroutine, discards datagrams still held back,
// and closes the wrapped link.
func (l *Lossy) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.l.Close()
}
