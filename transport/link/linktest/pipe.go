package linktest

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/goroce/goroce/transport/link"
)

// PipeQueueLen is how many datagrams a Pipe end holds before further writes
// to it are dropped (and counted), like a full socket receive buffer.
const PipeQueueLen = 4096

// pipeBatchSize is the BatchSize a Pipe end reports.
const pipeBatchSize = 64

type datagram struct {
	buf *[link.MaxDatagram]byte
	n   int
	src netip.AddrPort
}

// PipeEnd is one end of a Pipe. It implements link.Link.
type PipeEnd struct {
	local netip.AddrPort
	peer  *PipeEnd
	in    chan datagram
	done  chan struct{}
	once  sync.Once

	dropped atomic.Uint64
}

var _ link.Link = (*PipeEnd)(nil)

// Pipe returns two connected in-memory links: a datagram written on one end
// to any address arrives at the other end with Addr set to the sender's
// address and Local to the receiver's. Nothing is lost unless the receiver's
// queue is full (PipeQueueLen) or it is closed. Create it inside a
// testing/synctest bubble to use virtual time: a blocked ReadBatch is durably
// blocked.
func Pipe(a, b netip.AddrPort) (link.Link, link.Link) {
	ea := &PipeEnd{local: a, in: make(chan datagram, PipeQueueLen), done: make(chan struct{})}
	eb := &PipeEnd{local: b, in: make(chan datagram, PipeQueueLen), done: make(chan struct{})}
	ea.peer, eb.peer = eb, ea
	return ea, eb
}

// ReadBatch implements link.Link: it blocks for the first datagram, then
// takes whatever else is queued, up to len(msgs).
func (p *PipeEnd) ReadBatch(msgs []link.Message) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	var d datagram
	select {
	case <-p.done:
		return 0, p.closedErr("read")
	default:
	}
	select {
	case d = <-p.in:
	case <-p.done:
		return 0, p.closedErr("read")
	}
	n := 0
	for {
		p.deliver(&msgs[n], d)
		n++
		if n == len(msgs) {
			return n, nil
		}
		select {
		case d = <-p.in:
		default:
			return n, nil
		}
	}
}

func (p *PipeEnd) deliver(m *link.Message, d datagram) {
	m.Buf = m.Buf[:cap(m.Buf)]
	k := copy(m.Buf, d.buf[:d.n])
	m.Buf = m.Buf[:k]
	m.Addr = d.src
	m.Local = p.local.Addr()
	m.TOS = 0
	link.PutBuffer(d.buf)
}

// SourcePort implements link.Link: a Pipe sends from any port.
func (p *PipeEnd) SourcePort(uint16) bool { return true }

// source is the address a datagram sent from port arrives from.
func (p *PipeEnd) source(port uint16) netip.AddrPort {
	if port == 0 {
		return p.local
	}
	return netip.AddrPortFrom(p.local.Addr(), port)
}

// WriteBatch implements link.Link. Datagrams for a closed or full peer are
// dropped silently, as UDP would.
func (p *PipeEnd) WriteBatch(msgs []link.Message) (int, error) {
	select {
	case <-p.done:
		return 0, p.closedErr("write")
	default:
	}
	for i := range msgs {
		if len(msgs[i].Buf) > link.MaxDatagram {
			return i, fmt.Errorf("linktest: write %d bytes: %w", len(msgs[i].Buf), syscall.EMSGSIZE)
		}
		select {
		case <-p.peer.done:
			continue
		default:
		}
		buf := link.GetBuffer()
		n := copy(buf[:], msgs[i].Buf)
		select {
		case p.peer.in <- datagram{buf: buf, n: n, src: p.source(msgs[i].SrcPort)}:
		default:
			p.peer.dropped.Add(1)
			link.PutBuffer(buf)
		}
	}
	return len(msgs), nil
}

// LocalAddr implements link.Link.
func (p *PipeEnd) LocalAddr() netip.AddrPort { return p.local }

// BatchSize implements link.Link.
func (p *PipeEnd) BatchSize() int { return pipeBatchSize }

// Close implements link.Link: it unblocks ReadBatch and makes the peer's
// writes to this end vanish.
func (p *PipeEnd) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}

// Dropped counts datagrams for this end lost to a full queue.
func (p *PipeEnd) Dropped() uint64 { return p.dropped.Load() }

func (p *PipeEnd) closedErr(op string) error {
	return fmt.Errorf("linktest: %s %v: %w", op, p.local, net.ErrClosed)
}
