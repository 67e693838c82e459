package link

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
)

// PipeQueueLen is how many datagrams a Pipe end's receive queue holds before
// further writes to it are dropped (and counted), like a full socket
// receive buffer.
const PipeQueueLen = 4096

// pipeBatchSize is the BatchSize a Pipe end reports.
const pipeBatchSize = 64

// pipeTTL is the TTL a datagram written with TTL 0 arrives with, the
// kernel's default.
const pipeTTL = 64

// PipeConfig tunes one end of a pipe. The zero value is one receive queue,
// GRO allowed.
type PipeConfig struct {
	// Readers is the number of receive queues; a datagram goes to the queue
	// a hash of its source port picks, as SO_REUSEPORT sockets spread flows.
	// ReceiveFuncs offers one function per queue. 0 means 1.
	Readers int
	// NoGRO delivers every train segment by segment. Otherwise, as with a
	// UDP link, a train arrives whole (Message.SegSize) once the end has
	// been read with MaxTrain buffers.
	NoGRO bool
}

// datagram is one queued datagram or train.
type datagram struct {
	buf      *[MaxDatagram]byte // one datagram, or
	train    *[MaxTrain]byte    // a whole train
	n, seg   int
	src      netip.AddrPort
	dst      netip.Addr
	tos, ttl uint8
	flow     uint32
}

func (d *datagram) bytes() []byte {
	if d.train != nil {
		return d.train[:d.n]
	}
	return d.buf[:d.n]
}

func (d *datagram) release() {
	PutBuffer(d.buf)
	PutTrainBuffer(d.train)
	d.buf, d.train = nil, nil
}

// PipeEnd is one end of a Pipe. It implements Link, Receivers and
// Multicaster.
type PipeEnd struct {
	local netip.AddrPort
	peer  *PipeEnd
	cfg   PipeConfig
	in    []chan datagram
	ready map[chan datagram]chan struct{} // per receive queue: a token after each datagram queued (WaitFuncs)
	done  chan struct{}
	once  sync.Once
	gro   atomic.Bool

	mu     sync.Mutex
	groups map[netip.Addr]*pipeGroup // mu guards

	dropped, truncated atomic.Uint64
}

var (
	_ Link        = (*PipeEnd)(nil)
	_ Receivers   = (*PipeEnd)(nil)
	_ Poller      = (*PipeEnd)(nil)
	_ Waiter      = (*PipeEnd)(nil)
	_ Multicaster = (*PipeEnd)(nil)
)

// Pipe returns two connected in-memory links: a datagram written on one end
// to any address arrives at the other end with Addr set to the sender's
// address and Local to the receiver's. Nothing is lost unless the receiver's
// queue is full (PipeQueueLen) or it is closed. Create it inside a
// testing/synctest bubble to use virtual time: a blocked ReadBatch is durably
// blocked. It is the analogue of wireguard-go's conn/bindtest.
func Pipe(a, b netip.AddrPort) (Link, Link) {
	ea, eb := NewPipe(a, b, PipeConfig{}, PipeConfig{})
	return ea, eb
}

// NewPipe is Pipe with a configuration for each end.
func NewPipe(a, b netip.AddrPort, ca, cb PipeConfig) (*PipeEnd, *PipeEnd) {
	ea, eb := newPipeEnd(a, ca), newPipeEnd(b, cb)
	ea.peer, eb.peer = eb, ea
	return ea, eb
}

func newPipeEnd(local netip.AddrPort, cfg PipeConfig) *PipeEnd {
	p := &PipeEnd{local: local, cfg: cfg, done: make(chan struct{}), groups: map[netip.Addr]*pipeGroup{},
		ready: map[chan datagram]chan struct{}{}}
	for range max(1, cfg.Readers) {
		q := make(chan datagram, PipeQueueLen)
		p.in = append(p.in, q)
		p.ready[q] = make(chan struct{}, 1)
	}
	return p
}

// ReadBatch implements Link: it reads the first receive queue, blocking for
// the first datagram, then taking whatever else is queued, up to len(msgs).
func (p *PipeEnd) ReadBatch(msgs []Message) (int, error) { return p.read(p.in[0], nil, msgs) }

// ReceiveFuncs implements Receivers: one function per receive queue.
func (p *PipeEnd) ReceiveFuncs() []ReceiveFunc {
	fns := make([]ReceiveFunc, len(p.in))
	for i, q := range p.in {
		fns[i] = func(msgs []Message) (int, error) { return p.read(q, nil, msgs) }
	}
	return fns
}

// PollFuncs implements Poller: each receive queue read without waiting.
func (p *PipeEnd) PollFuncs() []ReceiveFunc {
	fns := make([]ReceiveFunc, len(p.in))
	for i, q := range p.in {
		fns[i] = func(msgs []Message) (int, error) { return p.readWait(q, nil, msgs, false) }
	}
	return fns
}

// WaitFuncs implements Waiter: each receive queue waited on until it holds a
// datagram.
func (p *PipeEnd) WaitFuncs() []WaitFunc {
	fns := make([]WaitFunc, len(p.in))
	for i, q := range p.in {
		ready := p.ready[q]
		fns[i] = func() error {
			for len(q) == 0 {
				select {
				case <-ready: // put leaves a token after each datagram it queues
				case <-p.done:
					return p.closedErr("wait")
				}
			}
			return nil
		}
	}
	return fns
}

// read reads queue q until the end closes or stop (a group left) is closed.
func (p *PipeEnd) read(q chan datagram, stop chan struct{}, msgs []Message) (int, error) {
	return p.readWait(q, stop, msgs, true)
}

// readWait is read; without wait it returns (0, nil) when nothing is queued.
func (p *PipeEnd) readWait(q chan datagram, stop chan struct{}, msgs []Message, wait bool) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	big := true
	for i := range msgs {
		big = big && cap(msgs[i].Buf) >= MaxTrain
	}
	if big && !p.cfg.NoGRO {
		p.gro.Store(true)
	}
	n := 0
	for {
		var d datagram
		select {
		case <-p.done:
			return 0, p.closedErr("read")
		case <-stop:
			return 0, p.closedErr("read group")
		default:
		}
		select {
		case d = <-q:
		default:
			if n > 0 || !wait {
				return n, nil
			}
			select { // nothing yet (or all truncated): block
			case d = <-q:
			case <-p.done:
				return 0, p.closedErr("read")
			case <-stop:
				return 0, p.closedErr("read group")
			}
		}
		if p.deliver(&msgs[n], &d) {
			n++
		}
		if n == len(msgs) {
			return n, nil
		}
	}
}

// deliver copies d into m and releases it; a datagram larger than m's
// buffer is dropped and counted, as the kernel does.
func (p *PipeEnd) deliver(m *Message, d *datagram) bool {
	defer d.release()
	b := d.bytes()
	if len(b) > cap(m.Buf) {
		p.truncated.Add(1)
		return false
	}
	m.Buf = append(m.Buf[:0], b...)
	m.Pieces = nil
	m.SegSize = d.seg
	m.Addr = d.src
	m.Local = d.dst
	m.TOS, m.TTL, m.FlowLabel, m.SrcPort = d.tos, d.ttl, d.flow, 0
	return true
}

// SourcePort implements Link: a Pipe sends from any port.
func (p *PipeEnd) SourcePort(uint16) bool { return true }

// source is the address a datagram sent from port arrives from.
func (p *PipeEnd) source(port uint16) netip.AddrPort {
	if port == 0 {
		return p.local
	}
	return netip.AddrPortFrom(p.local.Addr(), port)
}

// Offloads implements Offloader: a pipe moves a train as one message (GSO),
// and delivers it whole unless PipeConfig.NoGRO.
func (p *PipeEnd) Offloads() Offloads { return Offloads{GSO: true, GRO: !p.cfg.NoGRO} }

// WholeTrains implements WholeTrainer: a train to the peer arrives whole
// while the peer's GRO is on.
func (p *PipeEnd) WholeTrains(dst netip.Addr) bool {
	return !dst.IsMulticast() && p.peer.gro.Load()
}

// WriteBatch implements Link. Datagrams for a closed or full peer are
// dropped silently, as UDP would. A train goes to the peer whole if its GRO
// is on, else segment by segment. A datagram to a multicast group goes to
// the ends that joined it, this one included (multicast loopback).
func (p *PipeEnd) WriteBatch(msgs []Message) (int, error) {
	select {
	case <-p.done:
		return 0, p.closedErr("write")
	default:
	}
	for i := range msgs {
		m := &msgs[i]
		total := m.Len()
		if m.SegSize < 0 || m.SegSize > MaxDatagram || (m.SegSize == 0 && total > MaxDatagram) || total > GSOMaxBytes*GSOMaxSegments {
			return i, fmt.Errorf("link: pipe: write %d bytes, segment size %d: %w", total, m.SegSize, syscall.EMSGSIZE)
		}
		d := datagram{src: p.source(m.SrcPort), tos: m.TOS, ttl: m.TTL, flow: m.FlowLabel & 0xFFFFF}
		if d.ttl == 0 {
			d.ttl = pipeTTL
		}
		if !p.local.Addr().Is6() {
			d.flow = 0
		}
		for _, to := range p.receivers(m.Addr.Addr()) {
			to.enqueue(m, d)
		}
	}
	return len(msgs), nil
}

// receivers returns the queues a datagram to dst goes to.
func (p *PipeEnd) receivers(dst netip.Addr) []pipeQueue {
	if !dst.IsMulticast() {
		return []pipeQueue{{end: p.peer, dst: p.peer.local.Addr()}}
	}
	var qs []pipeQueue
	for _, e := range []*PipeEnd{p.peer, p} {
		e.mu.Lock()
		if g, ok := e.groups[dst.WithZone("")]; ok {
			qs = append(qs, pipeQueue{end: e, q: g.q, dst: dst})
		}
		e.mu.Unlock()
	}
	return qs
}

// pipeQueue is where one copy of a datagram goes: a group's queue, or (q
// nil) the end's queue its source port picks.
type pipeQueue struct {
	end *PipeEnd
	q   chan datagram
	dst netip.Addr
}

// enqueue copies m into pooled buffers and queues it, whole or segment by
// segment.
func (pq pipeQueue) enqueue(m *Message, d datagram) {
	e := pq.end
	select {
	case <-e.done:
		return
	default:
	}
	q := pq.q
	if q == nil {
		q = e.in[queueOf(d.src.Port(), len(e.in))]
	}
	d.dst = pq.dst
	total := m.Len()
	if m.SegSize > 0 && m.SegSize < total && e.gro.Load() && total <= MaxTrain {
		d.train, d.n, d.seg = GetTrainBuffer(), total, m.SegSize
		gatherInto(d.train[:0], m)
		e.put(q, d)
		return
	}
	for j := range max(1, m.NumSegments()) {
		s := d
		s.buf = GetBuffer()
		s.n = m.CopySegment(s.buf[:], j)
		e.put(q, s)
	}
}

// queueOf picks a receive queue by source port: a fixed multiplicative
// hash, so tests are deterministic.
func queueOf(port uint16, n int) int {
	return int((uint64(port) * 0x9E3779B97F4A7C15 >> 40) % uint64(n))
}

func (e *PipeEnd) put(q chan datagram, d datagram) {
	select {
	case q <- d:
		if r, ok := e.ready[q]; ok {
			select {
			case r <- struct{}{}:
			default: // a token is there already
			}
		}
	default:
		e.dropped.Add(1)
		d.release()
	}
}

// pipeGroup is a joined group's queue.
type pipeGroup struct {
	q    chan datagram
	left chan struct{}
}

// JoinGroup implements Multicaster: datagrams either end writes to group
// arrive at the returned function.
func (p *PipeEnd) JoinGroup(group netip.Addr) (ReceiveFunc, error) {
	g := group.WithZone("")
	if !g.IsMulticast() || g.Unmap().Is4() == p.local.Addr().Is6() {
		return nil, fmt.Errorf("link: pipe: join %v: %w", group, syscall.EINVAL)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.groups[g]; ok {
		return nil, fmt.Errorf("link: pipe: join %v: %w", group, syscall.EEXIST)
	}
	pg := &pipeGroup{q: make(chan datagram, PipeQueueLen), left: make(chan struct{})}
	p.groups[g] = pg
	return func(msgs []Message) (int, error) { return p.read(pg.q, pg.left, msgs) }, nil
}

// LeaveGroup implements Multicaster.
func (p *PipeEnd) LeaveGroup(group netip.Addr) error {
	g := group.WithZone("")
	p.mu.Lock()
	defer p.mu.Unlock()
	pg, ok := p.groups[g]
	if !ok {
		return fmt.Errorf("link: pipe: leave %v: %w", group, syscall.EADDRNOTAVAIL)
	}
	delete(p.groups, g)
	close(pg.left)
	return nil
}

// LocalAddr implements Link.
func (p *PipeEnd) LocalAddr() netip.AddrPort { return p.local }

// BatchSize implements Link.
func (p *PipeEnd) BatchSize() int { return pipeBatchSize }

// Close implements Link: it unblocks every reader and makes the peer's
// writes to this end vanish.
func (p *PipeEnd) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}

// Dropped counts datagrams for this end lost to a full queue.
func (p *PipeEnd) Dropped() uint64 { return p.dropped.Load() }

// Truncated counts datagrams for this end dropped because they did not fit
// the read buffer (a train read with small buffers after GRO went on).
func (p *PipeEnd) Truncated() uint64 { return p.truncated.Load() }

func (p *PipeEnd) closedErr(op string) error {
	return fmt.Errorf("link: pipe: %s %v: %w", op, p.local, net.ErrClosed)
}
