package cm

import (
	"net"
	"net/netip"
	"sync"
)

// MADConn sends and receives CM MADs on a port's QP1 (the GSI QP). A real
// device implements it with a UD QP (QPN 1, Q_Key GSIQKey, P_Key GSIPKey);
// Pipe implements it in memory for tests.
type MADConn interface {
	// ReadMAD blocks until a MAD arrives, copies it into b and returns its
	// length and the sender's IP address (its GID). After Close it returns
	// an error that Is(net.ErrClosed).
	ReadMAD(b []byte) (n int, from netip.Addr, err error)
	// WriteMAD sends one MAD to QP1 at to. It must not block for long: the
	// Manager calls it with its lock held.
	WriteMAD(mad []byte, to netip.Addr) error
	// LocalAddr is the IP address (GID) MADs are sent from.
	LocalAddr() netip.Addr
	// Close unblocks ReadMAD.
	Close() error
}

// ServiceClaimer is implemented by a MADConn that several processes share
// (an attached device's, through roced, which owns QP1): REQs and SIDR_REQs
// reach the process that claimed their service ID. A Manager claims a
// service before it listens on it and releases it when the listener
// closes. A claim another process holds fails with EADDRINUSE.
type ServiceClaimer interface {
	ClaimService(serviceID uint64, ud bool) error
	ReleaseService(serviceID uint64, ud bool)
}

// CommIDSpace is implemented by a MADConn that several processes share:
// roced hands each answer to the process whose prefix its communication ID
// (or SIDR request ID) carries, so a Manager on it draws every ID as
// prefix | (random & mask).
type CommIDSpace interface {
	CommIDs() (prefix, mask uint32)
}

// PipeConn is one end of an in-memory MADConn pair made by Pipe.
type PipeConn struct {
	addr netip.Addr
	peer *PipeConn
	in   chan pipeMAD
	done chan struct{}
	once sync.Once

	mu   sync.Mutex
	drop func(mad []byte) bool // mu guards drop
}

type pipeMAD struct {
	b    []byte
	from netip.Addr
}

// Pipe returns two connected MADConns with the given addresses. Each queues
// up to 64 MADs; further MADs are dropped, as a UD receive queue would.
func Pipe(a, b netip.Addr) (*PipeConn, *PipeConn) {
	pa := &PipeConn{addr: a, in: make(chan pipeMAD, 64), done: make(chan struct{})}
	pb := &PipeConn{addr: b, in: make(chan pipeMAD, 64), done: make(chan struct{})}
	pa.peer, pb.peer = pb, pa
	return pa, pb
}

// SetDrop installs a filter on MADs this end sends: drop returns true to
// lose the MAD. nil loses nothing.
func (p *PipeConn) SetDrop(drop func(mad []byte) bool) {
	p.mu.Lock()
	p.drop = drop
	p.mu.Unlock()
}

// ReadMAD implements MADConn.
func (p *PipeConn) ReadMAD(b []byte) (int, netip.Addr, error) {
	select {
	case m := <-p.in:
		return copy(b, m.b), m.from, nil
	case <-p.done:
		return 0, netip.Addr{}, net.ErrClosed
	}
}

// WriteMAD implements MADConn. MADs to an address other than the peer's, or
// after either end closed, vanish like UD datagrams.
func (p *PipeConn) WriteMAD(mad []byte, to netip.Addr) error {
	select {
	case <-p.done:
		return net.ErrClosed
	default:
	}
	p.mu.Lock()
	drop := p.drop
	p.mu.Unlock()
	if to != p.peer.addr || drop != nil && drop(mad) {
		return nil
	}
	select {
	case p.peer.in <- pipeMAD{append([]byte(nil), mad...), p.addr}:
	default:
	}
	return nil
}

// LocalAddr implements MADConn.
func (p *PipeConn) LocalAddr() netip.Addr { return p.addr }

// Close implements MADConn.
func (p *PipeConn) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}
