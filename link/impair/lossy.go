package impair

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/link"
)

// Dir is the direction of a datagram through a Lossy link.
type Dir uint8

// Directions passed to LossConfig.DropFn.
const (
	Send Dir = iota // written by the wrapped side (WriteBatch)
	Recv            // read by the wrapped side (ReadBatch and every ReceiveFunc)
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
// datagram written (per segment of a train), in [0, 1]; they are applied on
// the send side only, in this order: DropFn, Drop, Corrupt, Dup, Reorder,
// Delay.
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
	// scenarios such as "drop the first ACK". On receive it sees a GRO
	// train whole. It must not keep b.
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

// pending is one datagram in the delay line, in a pooled buffer, with the
// addressing and header fields of the message it came from.
type pending struct {
	due  time.Time
	buf  *[link.MaxDatagram]byte
	n    int
	meta link.Message // Addr, TOS, TTL, FlowLabel, SrcPort
}

var (
	_ link.Link        = (*Lossy)(nil)
	_ link.Receivers   = (*Lossy)(nil)
	_ link.Poller      = (*Lossy)(nil)
	_ link.Multicaster = (*Lossy)(nil)
)

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
// every message as written, as a lossy network would, unless the wrapped
// link fails. Each segment of a train is one datagram here.
func (l *Lossy) WriteBatch(msgs []link.Message) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var direct []link.Message
	var owned []*[link.MaxDatagram]byte // copies of train segments in direct
	defer func() {
		for _, b := range owned {
			link.PutBuffer(b)
		}
	}()
	for i := range msgs {
		m := &msgs[i]
		meta := link.Message{Addr: m.Addr, TOS: m.TOS, TTL: m.TTL, FlowLabel: m.FlowLabel, SrcPort: m.SrcPort}
		if len(m.Pieces) == 0 && (m.SegSize <= 0 || m.SegSize >= len(m.Buf)) {
			direct = l.impairLocked(m.Buf, meta, direct)
			continue
		}
		segs, err := segments(m)
		if err != nil {
			return i, err
		}
		for _, s := range segs {
			owned = append(owned, s.buf)
			direct = l.impairLocked(s.buf[:s.n], meta, direct)
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

// segment is one datagram of a train, copied out.
type segment struct {
	buf *[link.MaxDatagram]byte
	n   int
}

// segments copies the datagrams of a train (or a gather list) into pooled
// buffers. An IPv4 segment gets the ICRC for the ID 0 it has on the wire
// alone instead of its ID in the train (link.TrainIPv4ID).
func segments(m *link.Message) ([]segment, error) {
	if m.SegSize > link.MaxDatagram || (m.SegSize <= 0 && m.Len() > link.MaxDatagram) {
		return nil, fmt.Errorf("impair: write %d bytes, segment size %d: %w", m.Len(), m.SegSize, syscall.EMSGSIZE)
	}
	n := max(1, m.NumSegments())
	out := make([]segment, n)
	for j := range out {
		s := segment{buf: link.GetBuffer()}
		s.n = m.CopySegment(s.buf[:], j)
		if id := link.TrainIPv4ID(m.SegSize, j); n > 1 && id != 0 && s.n >= 4 && m.Addr.Addr().Unmap().Is4() {
			var x [4]byte
			binary.LittleEndian.PutUint32(x[:], link.ICRCIDDelta(s.n, id, 0))
			for k := range x {
				s.buf[s.n-4+k] ^= x[k]
			}
		}
		out[j] = s
	}
	return out, nil
}

// impairLocked decides the fate of datagram b: dropped, or appended to
// direct (sent now, without a copy), or copied into the delay line.
func (l *Lossy) impairLocked(b []byte, meta link.Message, direct []link.Message) []link.Message {
	if l.cfg.DropFn != nil && l.cfg.DropFn(Send, b) {
		l.DroppedFn.Add(1)
		return direct
	}
	// Draw the same amount of randomness for every datagram so a change in
	// one probability does not reshuffle the others.
	rDrop, rCorrupt, rDup, rReorder := l.rng.Float64(), l.rng.Float64(), l.rng.Float64(), l.rng.Float64()
	bit := l.rng.Uint64()
	if rDrop < l.cfg.Drop {
		l.Dropped.Add(1)
		return direct
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
			d := meta
			d.Buf = b
			direct = append(direct, d)
			continue
		}
		p := pending{due: now.Add(l.cfg.Delay), buf: link.GetBuffer(), meta: meta}
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
	return direct
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
				msgs[i] = p.meta
				msgs[i].Buf = p.buf[:p.n]
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
func (l *Lossy) ReadBatch(msgs []link.Message) (int, error) { return l.filtered(l.l.ReadBatch, msgs) }

// Offloads implements link.Offloader: the wrapped Link's.
func (l *Lossy) Offloads() link.Offloads { return link.OffloadsOf(l.l) }

// ReceiveFuncs implements link.Receivers: each of the wrapped Link's receive
// paths, with DropFn applied.
func (l *Lossy) ReceiveFuncs() []link.ReceiveFunc {
	return link.WrapReceiveFuncs(link.ReceiveFuncs(l.l), l.filtered)
}

// PollFuncs implements link.Poller for a wrapped Link that does (nil
// otherwise): its non-blocking receive paths, with DropFn applied.
func (l *Lossy) PollFuncs() []link.ReceiveFunc {
	return link.WrapReceiveFuncs(link.PollFuncs(l.l), l.filtered)
}

// WaitFuncs implements link.Waiter for a wrapped Link that does (nil
// otherwise). A wait may end on a datagram the filter then drops; the
// reader's next read finds nothing and waits again.
func (l *Lossy) WaitFuncs() []link.WaitFunc { return link.WaitFuncs(l.l) }

// filtered reads through fn and applies DropFn to what arrives.
func (l *Lossy) filtered(fn link.ReceiveFunc, msgs []link.Message) (int, error) {
	for {
		n, err := fn(msgs)
		if l.cfg.DropFn == nil || n == 0 {
			return n, err
		}
		k := 0
		for i := range msgs[:n] {
			if l.keep(&msgs[i]) == 0 {
				continue
			}
			if k != i { // copy, never swap buffers (link.Link.ReadBatch)
				m := msgs[i]
				m.Buf = append(msgs[k].Buf[:0], m.Buf...)
				msgs[k] = m
			}
			k++
		}
		if k > 0 || err != nil {
			return k, err
		}
	}
}

// keep applies DropFn to what m carries, each segment of a GRO train on its
// own (a network drops the datagrams one by one before the receiver
// coalesces them), moves the survivors together in m.Buf, and returns how
// many are left; a train left with one datagram becomes a plain message.
func (l *Lossy) keep(m *link.Message) int {
	if m.SegSize <= 0 || len(m.Buf) <= m.SegSize {
		if l.cfg.DropFn(Recv, m.Buf) {
			l.DroppedFn.Add(1)
			return 0
		}
		return 1
	}
	w, kept := 0, 0
	for lo := 0; lo < len(m.Buf); lo += m.SegSize {
		b := m.Buf[lo:min(lo+m.SegSize, len(m.Buf))]
		if l.cfg.DropFn(Recv, b) {
			l.DroppedFn.Add(1)
			continue
		}
		w += copy(m.Buf[w:], b) // w <= lo: copy moves overlapping bytes safely
		kept++
	}
	m.Buf = m.Buf[:w]
	if kept == 1 {
		m.SegSize = 0
	}
	return kept
}

// JoinGroup implements link.Multicaster for a wrapped Link that does; the
// group's datagrams pass DropFn too. Otherwise it is ENOSYS.
func (l *Lossy) JoinGroup(group netip.Addr) (link.ReceiveFunc, error) {
	mc, ok := l.l.(link.Multicaster)
	if !ok {
		return nil, fmt.Errorf("impair: join %v: the wrapped link has no multicast: %w", group, syscall.ENOSYS)
	}
	fn, err := mc.JoinGroup(group)
	if err != nil {
		return nil, err
	}
	return func(msgs []link.Message) (int, error) { return l.filtered(fn, msgs) }, nil
}

// LeaveGroup implements link.Multicaster for a wrapped Link that does.
func (l *Lossy) LeaveGroup(group netip.Addr) error {
	mc, ok := l.l.(link.Multicaster)
	if !ok {
		return fmt.Errorf("impair: leave %v: the wrapped link has no multicast: %w", group, syscall.ENOSYS)
	}
	return mc.LeaveGroup(group)
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
