// Package gsi carries CM MADs for a goroce device: it is the GSI QP (QP1)
// as a link-level agent. Link wraps the device's link.Link, takes every
// datagram addressed to QPN 1 out of the stream before the transport engine
// sees it, checks it the way rxe does (UD SEND ONLY, P_Key 0xFFFF, Q_Key
// 0x80010000, a 256-byte MAD, the ICRC) and hands the MAD to Conn, a
// cm.MADConn. Conn sends MADs as UD SENDs from QPN 1 to QPN 1.
//
// To capture MADs in a pcap, put the tap inside (Wrap(link.NewTap(udp,
// ...))): diverted datagrams never reach a link wrapped around Link.
//
// Why at the link and not as an engine QP: the MAD path needs no receive
// queue, memory registration or completion queue, and it works with any
// engine. The engine never allocates QPN 1 (its QPNs start at 0x11), so the
// split is clean.
package gsi

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/core/attach"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/roce"
)

// Stats counts the GSI agent's datagrams.
type Stats struct {
	RxMADs    uint64 // MADs delivered to ReadMAD
	TxMADs    uint64 // MADs sent
	Malformed uint64 // QPN-1 datagrams that failed the checks (opcode, keys, length)
	BadICRC   uint64 // QPN-1 datagrams whose ICRC did not verify
	Overflow  uint64 // MADs dropped because the reader was too slow
}

// Link is a link.Link that diverts QP1 datagrams to its Conn.
type Link struct {
	link.Link
	conn *Conn
}

// Conn sends and receives CM MADs on QP1; it implements cm.MADConn.
type Conn struct {
	relay *attach.Session // attached: roced carries the MADs (l is nil)
	l     link.Link
	addr  netip.Addr
	port  uint16 // the RoCEv2 UDP port: ours, and the one peers listen on
	sport uint16 // the UDP source port of our MADs: rxe's QP1 port when the link grants it

	in        chan rxMAD
	done      chan struct{}
	closeOnce sync.Once
	psn       atomic.Uint32
	wmu       sync.Mutex // serialises WriteMAD's buffer
	wbuf      []byte

	rx, tx, malformed, badICRC, overflow atomic.Uint64
}

type rxMAD struct {
	mad  []byte
	from netip.Addr
}

// rxDepth is how many received MADs wait for the CM: the receives the
// kernel's MAD layer keeps posted on QP1 (ib_mad's recv_queue_size, 512), so
// a peer that opens hundreds of connections at once loses no REQ to a CM that
// is a moment late.
const rxDepth = 512

// Wrap returns l with QP1 diverted, and the Conn that receives it. Give the
// Link to the engine (roce.OpenLink) and the Conn to cm.NewManager.
func Wrap(l link.Link) (*Link, *Conn) {
	c := &Conn{l: l, addr: l.LocalAddr().Addr().Unmap(), port: l.LocalAddr().Port(),
		in: make(chan rxMAD, rxDepth), done: make(chan struct{})}
	// MADs leave from rxe's QP1 port (bth.QPSourcePort(1), 55410) when
	// the link can send from it.
	c.sport = c.port
	if p := bth.QPSourcePort(cm.GSIQPN); l.SourcePort(p) {
		c.sport = p
	}
	return &Link{Link: l, conn: c}, c
}

// Open opens the device on addr:port (port 0 means 4791) with QP1 for the
// CM. Where roced serves the address, the device attaches to it
// (roce.Open) and the Conn carries the MADs through roced, which owns QP1
// and hands this process the MADs of its listens and its communication
// IDs; elsewhere the device binds the address and the Conn diverts QP1 off
// its socket. Closing the Device closes the Conn.
func Open(addr netip.Addr, port uint16, opts ...roce.Option) (*roce.Device, *Conn, error) {
	if port == 0 {
		port = link.RoCEv2Port
	}
	var c *Conn
	wrap := func(l link.Link) link.Link {
		gl, gc := Wrap(l)
		c = gc
		return gl
	}
	d, err := roce.Open(addr, append(opts[:len(opts):len(opts)], roce.WithPort(port), roce.WithLinkWrapper(wrap))...)
	if err != nil {
		return nil, nil, err
	}
	if c == nil {
		s := attach.Of(d)
		if s == nil {
			d.Close()
			return nil, nil, errors.New("gsi: the device has neither QP1 nor roced's relay")
		}
		c = &Conn{relay: s, addr: d.Addr(), port: port, in: make(chan rxMAD), done: make(chan struct{})}
	}
	return d, c, nil
}

// ReadBatch reads from the wrapped link and returns only the datagrams that
// are not for QP1, compacting msgs. A datagram moves by copying its bytes
// into the earlier slot's buffer, never by swapping slices: callers (the
// engine) keep their own index → buffer table and hand bufs[i] on with
// msgs[i]'s length. A diverted slot's bytes are already copied out.
func (g *Link) ReadBatch(msgs []link.Message) (int, error) { return g.diverted(g.Link.ReadBatch, msgs) }

// ReceiveFuncs implements link.Receivers: every receive path of the wrapped
// link (SO_REUSEPORT readers), each with QP1 diverted.
func (g *Link) ReceiveFuncs() []link.ReceiveFunc {
	return link.WrapReceiveFuncs(link.ReceiveFuncs(g.Link), g.diverted)
}

// Offloads implements link.Offloader: the wrapped link's.
func (g *Link) Offloads() link.Offloads { return link.OffloadsOf(g.Link) }

// WholeTrains implements link.WholeTrainer: the wrapped link's.
func (g *Link) WholeTrains(dst netip.Addr) bool { return link.WholeTrains(g.Link, dst) }

// PollFuncs implements link.Poller when the wrapped link does (nil
// otherwise): its non-blocking receive paths, QP1 diverted.
func (g *Link) PollFuncs() []link.ReceiveFunc {
	return link.WrapReceiveFuncs(link.PollFuncs(g.Link), g.diverted)
}

// WaitFuncs implements link.Waiter when the wrapped link does (nil
// otherwise).
func (g *Link) WaitFuncs() []link.WaitFunc { return link.WaitFuncs(g.Link) }

// diverted reads through fn and keeps what is not for QP1.
func (g *Link) diverted(fn link.ReceiveFunc, msgs []link.Message) (int, error) {
	return link.ReceiveFiltered(fn, msgs, func(m *link.Message) bool { return !g.conn.divert(m) })
}

// Close closes the wrapped link and the Conn.
func (g *Link) Close() error {
	g.conn.Close()
	return g.Link.Close()
}

// divert reports whether m is QP1 traffic, and if so checks and queues its
// MADs. A GRO train (link.Message.SegSize: datagrams of one flow the kernel
// coalesced) whose first datagram is for QP1 is QP1's, each segment checked
// on its own: a flow is one source port, and rxe's QP1 sends from its own.
func (c *Conn) divert(m *link.Message) bool {
	if qpn, ok := bth.PeekDestQP(m.Buf); !ok || qpn != cm.GSIQPN {
		return false
	}
	for i := range m.NumSegments() {
		c.take(m, m.Segment(i))
	}
	return true
}

// take checks one QP1 datagram b that arrived in m and queues its MAD.
func (c *Conn) take(m *link.Message, b []byte) {
	if qpn, ok := bth.PeekDestQP(b); !ok || qpn != cm.GSIQPN {
		c.malformed.Add(1)
		return
	}
	pkt, err := bth.Parse(b)
	if err != nil || pkt.Opcode() != bth.UDSendOnly || pkt.PKey() != cm.GSIPKey ||
		pkt.DETH().QKey != cm.GSIQKey || len(pkt.Payload()) != cm.MADLen {
		c.malformed.Add(1)
		return
	}
	src := m.Addr.Addr().Unmap()
	dst := m.Local.Unmap()
	if !dst.IsValid() {
		dst = c.addr
	}
	env := bth.Envelope{Src: src, Dst: dst, DF: true, SrcPort: m.Addr.Port(), DstPort: c.port}
	if !bth.AcceptICRC(&env, b) {
		c.badICRC.Add(1)
		return
	}
	select {
	case c.in <- rxMAD{append([]byte(nil), pkt.Payload()...), src}:
	default:
		c.overflow.Add(1)
	}
}

// ReadMAD implements cm.MADConn.
func (c *Conn) ReadMAD(b []byte) (int, netip.Addr, error) {
	if c.relay != nil {
		return c.relay.ReadMADUntil(b, c.done)
	}
	select {
	case m := <-c.in:
		c.rx.Add(1)
		return copy(b, m.mad), m.from, nil
	case <-c.done:
		return 0, netip.Addr{}, net.ErrClosed
	}
}

// WriteMAD implements cm.MADConn: a UD SEND ONLY from QPN 1 to QPN 1 at to,
// AckReq set and one PSN per MAD as rxe's QP1 sends, to the RoCEv2 port.
func (c *Conn) WriteMAD(mad []byte, to netip.Addr) error {
	select {
	case <-c.done:
		return net.ErrClosed
	default:
	}
	if len(mad) != cm.MADLen {
		return errors.New("gsi: a MAD is 256 bytes")
	}
	if c.relay != nil {
		return c.relay.WriteMAD(mad, to)
	}
	to = to.Unmap()
	f := bth.Fields{Opcode: bth.UDSendOnly, PKey: cm.GSIPKey, DestQP: cm.GSIQPN, AckReq: true,
		PSN: bth.PSN(c.psn.Add(1) - 1), DETH: bth.DETH{QKey: cm.GSIQKey, SrcQP: cm.GSIQPN}}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = bth.Append(c.wbuf[:0], &f, mad)
	// A link sends IPv4 with ID 0 and DF (see package link).
	env := bth.Envelope{Src: c.addr, Dst: to, DF: true, SrcPort: c.sport, DstPort: c.port}
	bth.PutICRC(&env, c.wbuf)
	msgs := []link.Message{{Buf: c.wbuf, Addr: netip.AddrPortFrom(to, c.port), SrcPort: c.sport}}
	if _, err := c.l.WriteBatch(msgs); err != nil {
		return err
	}
	c.tx.Add(1)
	return nil
}

// LocalAddr implements cm.MADConn.
func (c *Conn) LocalAddr() netip.Addr { return c.addr }

// Close unblocks ReadMAD; it does not close the link (the Device does).
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { close(c.done) })
	return nil
}

// ClaimService implements cm.ServiceClaimer: through roced, the listen is
// the process's alone; on a device this process owns, there is nothing to
// claim.
func (c *Conn) ClaimService(serviceID uint64, ud bool) error {
	if c.relay != nil {
		return c.relay.Claim(serviceID, ud)
	}
	return nil
}

// ReleaseService implements cm.ServiceClaimer.
func (c *Conn) ReleaseService(serviceID uint64, ud bool) {
	if c.relay != nil {
		c.relay.Release(serviceID, ud)
	}
}

// CommIDs implements cm.CommIDSpace: through roced, the prefix of the
// process's block; otherwise any ID.
func (c *Conn) CommIDs() (prefix, mask uint32) {
	if c.relay != nil {
		return c.relay.CommIDs()
	}
	return 0, 1<<32 - 1
}

// Stats returns the counters.
func (c *Conn) Stats() Stats {
	if c.relay != nil {
		rx, tx, overflow := c.relay.MADStats()
		return Stats{RxMADs: rx, TxMADs: tx, Overflow: overflow}
	}
	return Stats{RxMADs: c.rx.Load(), TxMADs: c.tx.Load(), Malformed: c.malformed.Load(),
		BadICRC: c.badICRC.Load(), Overflow: c.overflow.Load()}
}
