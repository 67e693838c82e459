package attachd

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/goroce/goroce/cm"
)

// MADWriter sends a MAD from QP1: the device's cm/gsi agent.
type MADWriter interface {
	WriteMAD(mad []byte, to netip.Addr) error
}

// maxTracked bounds the connections a port remembers for the DREQs roced
// sends when its process dies, and maxPendingREQs the REQs it remembers
// until the process answers them.
const (
	maxTracked     = 4096
	maxPendingREQs = 1024
)

// RouterStats counts what the router did with MADs.
type RouterStats struct {
	In, Out     uint64 // MADs routed to a process, and sent for one
	NoOwner     uint64 // MADs for a communication ID or service no live process has
	Refused     uint64 // MADs a process sent that are not its own (another prefix, an unclaimed service, malformed)
	Overflow    uint64 // MADs a process read too slowly for
	DREQsOnExit uint64 // DREQs roced sent for the connections of processes that went away
	DREPs       uint64 // DREPs roced sent for DREQs to processes that went away
}

// Router shares QP1 among the processes of one address. It reads nothing
// itself: the device's QP1 reader calls Receive for each MAD, and each
// process's port calls Send.
//
// Routing (IBA 12.6): a REQ or SIDR_REQ goes to the process that claimed its
// service ID, or to the home port (roced's own CM, which rejects a service
// nobody listens on). Every other message names the receiver's
// communication ID (REP, REJ, MRA, RTU, DREQ, DREP, LAP, APR: the remote
// communication ID; SIDR_REP: the request ID), and each process draws its
// IDs with its block number in the top byte (cm.CommIDSpace), so the top
// byte names the port.
type Router struct {
	w    MADWriter
	addr netip.Addr // the device's: the home port's LocalAddr

	shift uint // a communication ID's port is id >> shift

	mu    sync.Mutex
	ports map[uint32]*Port // by block
	rc    map[uint64]*Port
	ud    map[uint64]*Port
	home  *Port

	in, out, noOwner, refused, overflow, dreqs, dreps atomic.Uint64
}

// NewRouter returns a router for a device of blocks QPN blocks (a power of
// two, at least 2) that sends through w, with the home port (block 0).
func NewRouter(w MADWriter, addr netip.Addr, blocks int) *Router {
	r := &Router{w: w, addr: addr, shift: uint(32 - bits.TrailingZeros(uint(blocks))),
		ports: map[uint32]*Port{}, rc: map[uint64]*Port{}, ud: map[uint64]*Port{}}
	r.home = r.newPort(0, nil)
	return r
}

// Stats returns the counters.
func (r *Router) Stats() RouterStats {
	return RouterStats{In: r.in.Load(), Out: r.out.Load(), NoOwner: r.noOwner.Load(), Refused: r.refused.Load(),
		Overflow: r.overflow.Load(), DREQsOnExit: r.dreqs.Load(), DREPs: r.dreps.Load()}
}

// Home is the port of roced's own CM (prefix 0): a cm.MADConn.
func (r *Router) Home() *Port { return r.home }

// Port is one process's end of the router.
type Port struct {
	r     *Router
	block uint32
	// deliver hands a MAD to the process; false when it had no room. nil
	// (the home port) queues it for ReadMAD.
	deliver func(mad []byte, from netip.Addr) bool
	in      chan homeMAD
	done    chan struct{}
	once    sync.Once

	// Under r.mu.
	claims  map[claimKey]bool
	conns   map[uint32]*tracked
	pending map[remoteID]uint32 // REQs routed here, not answered yet: the peer's QPN
	dead    bool
}

type homeMAD struct {
	mad  []byte
	from netip.Addr
}

type claimKey struct {
	sid uint64
	ud  bool
}

type remoteID struct {
	peer netip.Addr
	id   uint32
}

// tracked is a connection of the port's process as roced saw it pass: what
// a DREQ needs (the peer, its communication ID and its QPN).
type tracked struct {
	peer      netip.Addr
	remoteID  uint32
	remoteQPN uint32
}

func (r *Router) newPort(block uint32, deliver func([]byte, netip.Addr) bool) *Port {
	p := &Port{r: r, block: block, deliver: deliver, done: make(chan struct{}),
		claims: map[claimKey]bool{}, conns: map[uint32]*tracked{}, pending: map[remoteID]uint32{}}
	if deliver == nil {
		p.in = make(chan homeMAD, 512)
	}
	r.mu.Lock()
	r.ports[block] = p
	r.mu.Unlock()
	return p
}

// Add makes the port of the process of block (whose communication IDs carry
// the block number in their top bits); deliver hands it a MAD. A block
// whose earlier port was not forgotten is EBUSY.
func (r *Router) Add(block int, deliver func(mad []byte, from netip.Addr) bool) (*Port, error) {
	r.mu.Lock()
	_, taken := r.ports[uint32(block)]
	r.mu.Unlock()
	if block <= 0 || uint64(block) >= 1<<(32-r.shift) || taken {
		return nil, fmt.Errorf("attachd: block %d's communication IDs are in use: %w", block, syscall.EBUSY)
	}
	return r.newPort(uint32(block), deliver), nil
}

// MAD offsets: the body starts after the 24-byte common header; every
// message but REQ and the SIDR pair starts with the sender's and the
// receiver's communication IDs.
const (
	offLocalID  = cm.HeaderLen
	offRemoteID = cm.HeaderLen + 4
	offService  = cm.HeaderLen + 8  // REQ, SIDR_REQ
	offSIDRSvc  = cm.HeaderLen + 12 // SIDR_REP's service ID (after RequestID, Status, AddInfoLength, reserved, QPN)
)

func attrOf(mad []byte) cm.AttrID { return cm.AttrID(binary.BigEndian.Uint16(mad[16:])) }

func u32(b []byte, off int) uint32 { return binary.BigEndian.Uint32(b[off:]) }

// isCM reports whether mad is a CM Send MAD (class, versions, method).
func isCM(mad []byte) bool {
	return len(mad) == cm.MADLen && mad[0] == cm.BaseVersion && mad[1] == cm.MgmtClassCM &&
		mad[2] == cm.ClassVersion && mad[3] == cm.MethodSend
}

// Receive routes a MAD that arrived on QP1 from peer.
func (r *Router) Receive(mad []byte, from netip.Addr) {
	if !isCM(mad) {
		r.home.give(mad, from) // the home CM counts it malformed
		return
	}
	r.mu.Lock()
	p := r.ownerLocked(mad)
	var answer func()
	switch {
	case p == nil:
		r.noOwner.Add(1)
		if attrOf(mad) == cm.AttrDREQ {
			answer = func() { r.drep(mad, from) }
		}
	case p.dead:
		r.noOwner.Add(1)
		p = nil
	default:
		p.observeInLocked(mad, from)
	}
	r.mu.Unlock()
	if answer != nil {
		answer()
	}
	if p != nil {
		p.give(mad, from)
	}
}

// ownerLocked returns the port a MAD from the wire is for, nil if none.
func (r *Router) ownerLocked(mad []byte) *Port {
	switch attrOf(mad) {
	case cm.AttrREQ:
		if p := r.rc[binary.BigEndian.Uint64(mad[offService:])]; p != nil {
			return p
		}
		return r.home
	case cm.AttrSIDRREQ:
		if p := r.ud[binary.BigEndian.Uint64(mad[offService:])]; p != nil {
			return p
		}
		return r.home
	case cm.AttrSIDRREP:
		return r.ports[u32(mad, offLocalID)>>r.shift]
	}
	return r.ports[u32(mad, offRemoteID)>>r.shift]
}

func (p *Port) give(mad []byte, from netip.Addr) {
	r := p.r
	r.in.Add(1)
	if p.deliver != nil {
		if !p.deliver(mad, from) {
			r.overflow.Add(1)
		}
		return
	}
	select {
	case p.in <- homeMAD{append([]byte(nil), mad...), from}:
	default:
		r.overflow.Add(1)
	}
}

// observeInLocked notes what a DREQ on the process's exit will need from a
// MAD routed to it.
func (p *Port) observeInLocked(mad []byte, from netip.Addr) {
	switch attrOf(mad) {
	case cm.AttrREQ:
		if len(p.pending) < maxPendingREQs {
			p.pending[remoteID{from, u32(mad, offLocalID)}] = u32(mad, cm.HeaderLen+32) >> 8 // REQ LocalQPN (24 bits)
		}
	case cm.AttrREP:
		if c := p.conns[u32(mad, offRemoteID)]; c != nil && c.peer == from {
			c.remoteID = u32(mad, offLocalID)
			c.remoteQPN = u32(mad, cm.HeaderLen+12) >> 8 // REP LocalQPN (24 bits)
		}
	case cm.AttrREJ, cm.AttrDREQ, cm.AttrDREP:
		delete(p.conns, u32(mad, offRemoteID))
	}
}

// Send sends a MAD of the port's process from QP1 to peer. The MAD must be
// the process's own: its communication ID (or SIDR request ID) carries the
// port's prefix, or, for a SIDR_REP, its service is the port's. Anything
// else is EPERM, and malformed MADs EINVAL.
func (p *Port) Send(mad []byte, to netip.Addr) error {
	r := p.r
	if !isCM(mad) {
		r.refused.Add(1)
		return fmt.Errorf("attachd: not a CM MAD: %w", syscall.EINVAL)
	}
	r.mu.Lock()
	if p.dead {
		r.mu.Unlock()
		return net.ErrClosed
	}
	err := p.checkOutLocked(mad)
	if err == nil {
		p.observeOutLocked(mad, to)
	}
	r.mu.Unlock()
	if err != nil {
		r.refused.Add(1)
		return err
	}
	r.out.Add(1)
	return r.w.WriteMAD(mad, to)
}

func (p *Port) checkOutLocked(mad []byte) error {
	a := attrOf(mad)
	switch a {
	case cm.AttrREQ, cm.AttrMRA, cm.AttrREJ, cm.AttrREP, cm.AttrRTU, cm.AttrDREQ, cm.AttrDREP,
		cm.AttrLAP, cm.AttrAPR, cm.AttrSIDRREQ:
		if id := u32(mad, offLocalID); id>>p.r.shift != p.block {
			return fmt.Errorf("attachd: %v with communication ID %#x, not of block %d: %w", a, id, p.block, syscall.EPERM)
		}
	case cm.AttrSIDRREP:
		sid := binary.BigEndian.Uint64(mad[offSIDRSvc:])
		if !p.claims[claimKey{sid, true}] && p != p.r.home {
			return fmt.Errorf("attachd: SIDR_REP for service %#x, which this process does not listen on: %w", sid, syscall.EPERM)
		}
	default:
		return fmt.Errorf("attachd: %v is not a CM message: %w", a, syscall.EINVAL)
	}
	return nil
}

func (p *Port) observeOutLocked(mad []byte, to netip.Addr) {
	local := u32(mad, offLocalID)
	switch attrOf(mad) {
	case cm.AttrREQ:
		if len(p.conns) < maxTracked {
			p.conns[local] = &tracked{peer: to}
		}
	case cm.AttrREP:
		rid := remoteID{to, u32(mad, offRemoteID)}
		if qpn, ok := p.pending[rid]; ok {
			delete(p.pending, rid)
			if len(p.conns) < maxTracked {
				p.conns[local] = &tracked{peer: to, remoteID: rid.id, remoteQPN: qpn}
			}
		}
	case cm.AttrREJ:
		delete(p.pending, remoteID{to, u32(mad, offRemoteID)})
		delete(p.conns, local)
	case cm.AttrDREQ, cm.AttrDREP:
		delete(p.conns, local)
	}
}

// Claim makes a service ID the port's: exclusive, EADDRINUSE if any port
// (this one included) holds it.
func (p *Port) Claim(sid uint64, ud bool) error {
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.rc
	if ud {
		m = r.ud
	}
	if p.dead {
		return net.ErrClosed
	}
	if m[sid] != nil {
		return fmt.Errorf("attachd: service %#x is already listened on: %w", sid, syscall.EADDRINUSE)
	}
	m[sid] = p
	p.claims[claimKey{sid, ud}] = true
	return nil
}

// Release gives a service ID back, if the port holds it.
func (p *Port) Release(sid uint64, ud bool) {
	r := p.r
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.rc
	if ud {
		m = r.ud
	}
	if m[sid] == p {
		delete(m, sid)
	}
	delete(p.claims, claimKey{sid, ud})
}

// Claims returns how many services the port holds.
func (p *Port) Claims() int {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	return len(p.claims)
}

// Remove ends the port of a process that went away: its services are free
// at once, and each connection it had is ended with a DREQ to the peer, as
// the kernel's CM does for a process that exits. MADs for its IDs are
// dropped from now on (a DREQ answered with a DREP).
func (p *Port) Remove() {
	r := p.r
	r.mu.Lock()
	p.dead = true
	for k := range p.claims {
		m := r.rc
		if k.ud {
			m = r.ud
		}
		if m[k.sid] == p {
			delete(m, k.sid)
		}
	}
	var dreqs []*tracked
	var ids []uint32
	for id, c := range p.conns {
		if c.remoteID != 0 {
			dreqs, ids = append(dreqs, c), append(ids, id)
		}
	}
	p.conns, p.pending, p.claims = nil, nil, nil
	r.mu.Unlock()
	for i, c := range dreqs {
		if b, err := cm.Marshal(rand.Uint64(), &cm.DREQ{LocalCommID: ids[i], RemoteCommID: c.remoteID, RemoteQPN: c.remoteQPN}); err == nil {
			if r.w.WriteMAD(b, c.peer) == nil {
				r.dreqs.Add(1)
			}
		}
	}
	p.once.Do(func() { close(p.done) })
}

// Forget drops the prefix of a removed port, so a new process may take it
// (roced waits a quarantine first: late MADs for the old IDs must not reach
// the new process).
func (p *Port) Forget() {
	r := p.r
	r.mu.Lock()
	if r.ports[p.block] == p {
		delete(r.ports, p.block)
	}
	r.mu.Unlock()
}

// drep answers a DREQ for a communication ID nobody holds, as the kernel's
// CM answers one for a connection it no longer knows (cm_dreq_handler).
func (r *Router) drep(dreq []byte, from netip.Addr) {
	tid := binary.BigEndian.Uint64(dreq[8:])
	b, err := cm.Marshal(tid, &cm.DREP{LocalCommID: u32(dreq, offRemoteID), RemoteCommID: u32(dreq, offLocalID)})
	if err == nil && r.w.WriteMAD(b, from) == nil {
		r.dreps.Add(1)
	}
}

// ReadMAD implements cm.MADConn for the home port.
func (p *Port) ReadMAD(b []byte) (int, netip.Addr, error) {
	select {
	case m := <-p.in:
		return copy(b, m.mad), m.from, nil
	case <-p.done:
		return 0, netip.Addr{}, net.ErrClosed
	}
}

// WriteMAD implements cm.MADConn for the home port.
func (p *Port) WriteMAD(mad []byte, to netip.Addr) error { return p.Send(mad, to) }

// LocalAddr implements cm.MADConn: the device's address.
func (p *Port) LocalAddr() netip.Addr { return p.r.addr }

// Close implements cm.MADConn: it unblocks ReadMAD.
func (p *Port) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}

// ClaimService implements cm.ServiceClaimer.
func (p *Port) ClaimService(sid uint64, ud bool) error { return p.Claim(sid, ud) }

// ReleaseService implements cm.ServiceClaimer.
func (p *Port) ReleaseService(sid uint64, ud bool) { p.Release(sid, ud) }

// CommIDs implements cm.CommIDSpace.
func (p *Port) CommIDs() (prefix, mask uint32) { return CommIDs(p.block, p.r.shift) }

// CommIDs returns the communication ID prefix and mask of block, for a
// router whose port is id >> shift.
func CommIDs(block uint32, shift uint) (prefix, mask uint32) {
	return block << shift, 1<<shift - 1
}
