package bottleneck

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/link"
)

// PortConfig describes one switch port and the host NIC behind it.
type PortConfig struct {
	// Rate is the egress rate toward the host, bit/s (0: infinitely fast).
	Rate uint64
	// Delay is the propagation delay of the cable to the host, added after
	// serialization.
	Delay time.Duration
	// Buffer is the egress queue's capacity in bytes; a packet that does
	// not fit is dropped (tail drop). 0: unbounded.
	Buffer int
	// Mark is the egress queue's ECN marking.
	Mark Marking
	// Uplink is the host NIC's rate toward the switch, bit/s (0:
	// infinitely fast). The NIC queue is unbounded and never marks: a host
	// cannot send faster than its line rate, and a real NIC would stall
	// the QP instead of dropping.
	Uplink uint64
	// UplinkDelay is the propagation delay from the host to the switch.
	UplinkDelay time.Duration
}

// Switch is a virtual-time output-queued switch: each attached host gets a
// Port (a link.Link) and each Port an egress queue toward its host with a
// rate, a buffer, tail drop and RED/threshold ECN marking. Datagrams are
// routed by destination IP address. Under testing/synctest its clocks are
// virtual: a 1 Gb/s port serializes a 1000-byte datagram in 8 µs of
// virtual time and no wall time.
type Switch struct {
	mu    sync.Mutex
	ports map[netip.Addr]*Port // mu guards
	seed  uint64

	Unroutable atomic.Uint64 // datagrams to an address with no port
}

// New returns an empty switch. seed makes RED's marking draws reproducible
// for a given order of arrivals.
func New(seed uint64) *Switch {
	return &Switch{ports: map[netip.Addr]*Port{}, seed: seed}
}

// Port is a host's end of a switch port. It implements link.Link.
type Port struct {
	sw     *Switch
	local  netip.AddrPort
	egress *server // switch → host
	uplink *server // host → switch
	in     chan *packet
	done   chan struct{}
	once   sync.Once

	mu        sync.Mutex
	bySource  map[netip.AddrPort]uint64 // mu guards: bytes delivered to this host per sender
	dropsIn   atomic.Uint64             // delivered while the host's receive queue was full
	delivered atomic.Uint64
}

var _ link.Link = (*Port)(nil)

// inQueueLen is how many datagrams a host's receive queue holds (a socket
// receive buffer); more are dropped and counted in Port.Stats.
const inQueueLen = 4096

// Attach adds a host at addr and returns its link. An address can be
// attached once.
func (s *Switch) Attach(addr netip.AddrPort, cfg PortConfig) (*Port, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := addr.Addr().Unmap()
	if _, dup := s.ports[a]; dup {
		return nil, fmt.Errorf("bottleneck: %v already attached: %w", a, syscall.EADDRINUSE)
	}
	p := &Port{
		sw: s, local: addr,
		in:       make(chan *packet, inQueueLen),
		done:     make(chan struct{}),
		bySource: map[netip.AddrPort]uint64{},
	}
	seed := s.seed + uint64(len(s.ports))*0x9e3779b97f4a7c15
	p.egress = newServer(cfg.Rate, cfg.Delay, cfg.Buffer, cfg.Mark, seed, p.deliver)
	p.uplink = newServer(cfg.Uplink, cfg.UplinkDelay, 0, Marking{}, seed+1, s.forward)
	s.ports[a] = p
	return p, nil
}

// forward routes a packet that left a host's NIC to its destination's
// egress queue.
func (s *Switch) forward(p *packet) {
	s.mu.Lock()
	dst := s.ports[p.dst.Addr().Unmap()]
	s.mu.Unlock()
	if dst == nil {
		s.Unroutable.Add(1)
		link.PutBuffer(p.buf)
		return
	}
	dst.egress.enqueue(p, time.Now())
}

// deliver hands a packet that crossed the egress port to the host.
func (p *Port) deliver(pk *packet) {
	p.mu.Lock()
	p.bySource[pk.src] += uint64(pk.n)
	p.mu.Unlock()
	select {
	case <-p.done:
		link.PutBuffer(pk.buf)
		return
	default:
	}
	select {
	case p.in <- pk:
		p.delivered.Add(1)
	default:
		p.dropsIn.Add(1)
		link.PutBuffer(pk.buf)
	}
}

// WriteBatch implements link.Link: each datagram enters the host's NIC
// queue with its TOS (Message.TOS is honoured on write, as a socket with
// IP_TOS would send it). A train enters segment by segment, as a GSO
// super-datagram leaves a NIC.
func (p *Port) WriteBatch(msgs []link.Message) (int, error) {
	select {
	case <-p.done:
		return 0, fmt.Errorf("bottleneck: write %v: %w", p.local, net.ErrClosed)
	default:
	}
	now := time.Now()
	for i := range msgs {
		m := &msgs[i]
		if m.SegSize > link.MaxDatagram || (m.SegSize <= 0 && m.Len() > link.MaxDatagram) {
			return i, fmt.Errorf("bottleneck: write %d bytes, segment size %d: %w", m.Len(), m.SegSize, syscall.EMSGSIZE)
		}
		for j := range max(1, m.NumSegments()) {
			pk := &packet{buf: link.GetBuffer(), dst: m.Addr, tos: m.TOS, src: p.local}
			if m.SrcPort != 0 {
				pk.src = netip.AddrPortFrom(p.local.Addr(), m.SrcPort)
			}
			pk.n = m.CopySegment(pk.buf[:], j)
			p.uplink.enqueue(pk, now)
		}
	}
	return len(msgs), nil
}

// ReadBatch implements link.Link: it blocks for one datagram, then takes
// what else is queued.
func (p *Port) ReadBatch(msgs []link.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	var pk *packet
	select {
	case pk = <-p.in:
	case <-p.done:
		return 0, fmt.Errorf("bottleneck: read %v: %w", p.local, net.ErrClosed)
	}
	n := 0
	for {
		m := &msgs[n]
		m.Buf = m.Buf[:cap(m.Buf)]
		m.Buf = m.Buf[:copy(m.Buf, pk.buf[:pk.n])]
		m.Addr, m.Local, m.TOS = pk.src, p.local.Addr(), pk.tos
		link.PutBuffer(pk.buf)
		n++
		if n == len(msgs) {
			return n, nil
		}
		select {
		case pk = <-p.in:
		default:
			return n, nil
		}
	}
}

// LocalAddr implements link.Link.
func (p *Port) LocalAddr() netip.AddrPort { return p.local }

// SourcePort implements link.Link: any source port is fine.
func (p *Port) SourcePort(uint16) bool { return true }

// BatchSize implements link.Link.
func (p *Port) BatchSize() int { return 64 }

// Close implements link.Link: it detaches the host, stops the port's
// clocks and unblocks ReadBatch.
func (p *Port) Close() error {
	p.once.Do(func() {
		close(p.done)
		p.sw.mu.Lock()
		delete(p.sw.ports, p.local.Addr().Unmap())
		p.sw.mu.Unlock()
		p.uplink.close()
		p.egress.close()
		for drained := false; !drained; {
			select {
			case pk := <-p.in:
				link.PutBuffer(pk.buf)
			default:
				drained = true
			}
		}
	})
	return nil
}

// QueueBytes is the depth of the egress queue toward this host, in bytes.
func (p *Port) QueueBytes() int { return p.egress.depth() }

// Egress returns the egress queue's counters.
func (p *Port) Egress() Stats { return p.egress.snapshot() }

// ReceiveDrops counts datagrams lost to a full host receive queue.
func (p *Port) ReceiveDrops() uint64 { return p.dropsIn.Load() }

// DeliveredFrom returns the bytes delivered to this host from src so far
// (src is the sender's address and UDP source port).
func (p *Port) DeliveredFrom(src netip.AddrPort) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.bySource[src]
}

// DeliveredFromAddr returns the bytes delivered to this host from every
// UDP port of addr.
func (p *Port) DeliveredFromAddr(addr netip.Addr) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var n uint64
	for s, b := range p.bySource {
		if s.Addr() == addr {
			n += b
		}
	}
	return n
}

// Sources returns every sender this host has received from.
func (p *Port) Sources() []netip.AddrPort {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]netip.AddrPort, 0, len(p.bySource))
	for s := range p.bySource {
		out = append(out, s)
	}
	return out
}
