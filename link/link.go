package link

import (
	"net/netip"
	"sync"
)

// MaxDatagram is the largest UDP payload a Link handles as one packet, in
// bytes.
//
// The largest RoCEv2 packet at path MTU 4096 is RDMA WRITE ONLY WITH IMMEDIATE:
// BTH 12 + RETH 16 + ImmDt 4 + 4096 payload + ICRC 4 = 4132 bytes (a 4096-byte
// payload needs no pad; UD SEND with DETH+ImmDt is 4124). 64 bytes of slack
// covers every header combination and keeps the size a round number.
// Datagrams larger than their read buffer are truncated by the kernel and
// dropped by the Link (counted, never delivered half).
const MaxDatagram = 4096 + 64

// MaxTrain is the capacity of a buffer that can hold a whole UDP GRO train
// (a coalesced run of datagrams): the kernel never coalesces past 64 KiB of
// IP packet. A reader that passes buffers this large gets trains whole
// (Message.SegSize); see UDP.ReadBatch.
const MaxTrain = 64 << 10

// Message is one datagram, or one train of datagrams, in a batch.
//
// Buffer ownership: Buf and Pieces belong to the caller before and after
// ReadBatch and WriteBatch; a Link never keeps a reference to them once the
// call returns.
type Message struct {
	// Buf is, on write, the datagram (or train) to send, unless Pieces is
	// set. On read the caller passes a buffer (capacity MaxDatagram, e.g.
	// GetBuffer()[:], or MaxTrain to receive GRO trains whole); the Link
	// reads into Buf[:cap(Buf)] and reslices Buf to the length received.
	Buf []byte
	// Pieces is, on write, a gather list that replaces Buf when it is not
	// empty: the bytes sent are the pieces in order, with no copy (for
	// example a header, a slice of registered memory and the ICRC). Ignored
	// on read.
	Pieces [][]byte
	// SegSize, on write, makes the message a train: its bytes are
	// consecutive datagrams of SegSize bytes each, the last one possibly
	// shorter, all to Addr from SrcPort with the same IP header fields. A
	// UDP link sends a train as UDP GSO super-datagrams (see
	// GSOSegmentIPv4ID for what that means for the ICRC); other Links send
	// the datagrams one by one. 0 means one datagram. On read, SegSize is
	// nonzero when Buf holds a GRO train of datagrams of SegSize bytes (the
	// last possibly shorter): split it with Segment.
	SegSize int
	// Addr is the remote peer: the source on read, the destination on write.
	// On write it may be an IP multicast group (see Multicaster).
	Addr netip.AddrPort
	// Local is, on read, the destination address of the datagram (from
	// IP_PKTINFO / IPV6_PKTINFO): the link's address, or a multicast group.
	// It is ignored on write: a Link always sends from the address it is
	// bound to.
	Local netip.Addr
	// TOS is the IPv4 TOS byte or IPv6 traffic class (DSCP<<2 | ECN). On
	// read it is what arrived (IP_RECVTOS / IPV6_RECVTCLASS), CE marks
	// included. On write it is what to send; 0 is the socket default (0), so
	// ECT(0) is 0b10 in the low bits.
	TOS uint8
	// TTL is the IPv4 TTL or IPv6 hop limit. On read it is what arrived
	// (IP_RECVTTL / IPV6_RECVHOPLIMIT), 0 if the Link cannot tell. On write
	// 0 is the socket default (the kernel's ip_default_ttl / hop_limit for
	// unicast, Config.MulticastTTL for a group).
	TTL uint8
	// FlowLabel is the 20-bit IPv6 flow label. On read it is what arrived
	// (IPV6_FLOWINFO). On write 0 leaves it to the kernel (which hashes one
	// from the ports and addresses unless auto flow labels are off);
	// nonzero asks for exactly that label. Ignored for IPv4.
	FlowLabel uint32
	// SrcPort is, on write, the UDP source port: 0 is the Link's own port,
	// anything else must have been granted by SourcePort. Ignored on read
	// (Addr carries the sender's port).
	SrcPort uint16
}

// Len returns the number of bytes the message carries: len(Buf), or the
// total of Pieces when it is not empty.
func (m *Message) Len() int {
	if len(m.Pieces) == 0 {
		return len(m.Buf)
	}
	n := 0
	for _, p := range m.Pieces {
		n += len(p)
	}
	return n
}

// NumSegments returns how many datagrams m carries: 1, or the number of
// segments of its train (0 for an empty train).
func (m *Message) NumSegments() int {
	if m.SegSize <= 0 {
		return 1
	}
	return (m.Len() + m.SegSize - 1) / m.SegSize
}

// Segment returns datagram i of a received train, a view into Buf (no
// copy). For a message that is not a train, Segment(0) is Buf.
func (m *Message) Segment(i int) []byte {
	if m.SegSize <= 0 {
		return m.Buf
	}
	lo := i * m.SegSize
	return m.Buf[lo:min(lo+m.SegSize, len(m.Buf))]
}

// CopySegment copies datagram i of m (a segment of a train, or the whole
// message) into dst, gathering it from Pieces if need be, and returns its
// length; dst must be large enough (MaxDatagram for a train). A Link that
// sends datagram by datagram uses it to split trains.
func (m *Message) CopySegment(dst []byte, i int) int {
	total := m.Len()
	lo, hi := 0, total
	if m.SegSize > 0 {
		lo, hi = min(i*m.SegSize, total), min((i+1)*m.SegSize, total)
	}
	var g gather
	g.reset(m)
	g.skip(lo)
	g.read(dst[:hi-lo])
	return hi - lo
}

// Link moves RoCEv2 datagrams. It is the analogue of wireguard-go's conn.Bind:
// it only moves bytes and never looks inside the BTH.
//
// ReadBatch and WriteBatch may be called concurrently with each other and
// with themselves (one reader goroutine and several writers is the intended
// use). After Close, both return an error wrapping net.ErrClosed.
//
// Optional interfaces add what not every Link has: Receivers (several receive
// paths) and Multicaster (IP multicast groups).
type Link interface {
	// ReadBatch blocks until at least one datagram arrives, then fills up to
	// min(len(msgs), BatchSize()) messages and returns how many. Each
	// msgs[i].Buf must have a nonzero capacity (normally MaxDatagram); it is
	// resliced to the datagram's length, and msgs[i].Buf keeps pointing into
	// the buffer the caller put there: an implementation that drops a
	// datagram (truncated, filtered) compacts the batch by copying bytes into
	// the earlier slot, never by swapping slices, because callers hand their
	// own buffer i on with msgs[i]'s length. After Close it returns an error
	// wrapping net.ErrClosed.
	ReadBatch(msgs []Message) (int, error)
	// WriteBatch sends every message in msgs, each to its Addr. It returns
	// len(msgs) and nil, or the number sent before the failure and an error
	// describing msgs[n]; callers that want to carry on skip msgs[n] and
	// call again with msgs[n+1:]. Of a train that fails half way, the
	// datagrams before the failure may have been sent.
	WriteBatch(msgs []Message) (int, error)
	// LocalAddr is the address and port the Link is bound to.
	LocalAddr() netip.AddrPort
	// SourcePort makes port usable as Message.SrcPort and reports whether it
	// is. RoCEv2 receivers accept any source port, so senders vary it per QP
	// for ECMP entropy (rxe derives it from the QPNs); a Link that cannot send
	// from port (in use, or over its limit) says false and the caller sends
	// from LocalAddr's port. The port stays usable until Close.
	SourcePort(port uint16) bool
	// BatchSize is the most messages one ReadBatch call returns, and the
	// batch size callers should use for writes.
	BatchSize() int
	// Close releases the Link and unblocks ReadBatch. It is safe to call
	// more than once.
	Close() error
}

// ReceiveFunc reads one batch from one receive path of a Link, with the
// contract of Link.ReadBatch. Each path is served by its own goroutine (the
// idea of wireguard-go's conn.ReceiveFunc).
type ReceiveFunc func(msgs []Message) (int, error)

// Receivers is implemented by a Link with several receive paths, such as a
// UDP link with Config.Readers > 1 (SO_REUSEPORT sockets over which the
// kernel spreads flows). Every function must be read: datagrams the kernel
// put on a path nobody reads are lost. The first function is ReadBatch.
type Receivers interface {
	ReceiveFuncs() []ReceiveFunc
}

// ReceiveFuncs returns the receive paths of l: l.ReceiveFuncs() when l
// implements Receivers, else just l.ReadBatch.
func ReceiveFuncs(l Link) []ReceiveFunc {
	if r, ok := l.(Receivers); ok {
		if fns := r.ReceiveFuncs(); len(fns) > 0 {
			return fns
		}
	}
	return []ReceiveFunc{l.ReadBatch}
}

// WrapReceiveFuncs returns fns, each passed through wrap: the receive paths
// of a Link that wraps another (a tap records what each path reads, a
// filter drops from it).
func WrapReceiveFuncs(fns []ReceiveFunc, wrap func(ReceiveFunc, []Message) (int, error)) []ReceiveFunc {
	out := make([]ReceiveFunc, len(fns))
	for i, fn := range fns {
		out[i] = func(msgs []Message) (int, error) { return wrap(fn, msgs) }
	}
	return out
}

// ReceiveFiltered reads through fn and keeps the messages keep accepts,
// moved forward in order by copying into the earlier slot's buffer (the
// Link contract: a slot's buffer stays the caller's). A batch keep rejects
// whole is followed by another read, so a waiting path never returns empty
// for a filter's sake; a path that does not wait (a poll) returns what is
// left, even nothing. keep may rewrite the message it is given (a train
// that keeps some of its segments).
func ReceiveFiltered(fn ReceiveFunc, msgs []Message, keep func(*Message) bool) (int, error) {
	for {
		n, err := fn(msgs)
		k := 0
		for i := 0; i < n; i++ {
			if !keep(&msgs[i]) {
				continue
			}
			if k != i {
				m := &msgs[i]
				msgs[k].Buf = append(msgs[k].Buf[:0], m.Buf...)
				msgs[k].Addr, msgs[k].Local, msgs[k].TOS, msgs[k].TTL = m.Addr, m.Local, m.TOS, m.TTL
				msgs[k].FlowLabel, msgs[k].SegSize = m.FlowLabel, m.SegSize
			}
			k++
		}
		if k > 0 || err != nil || n == 0 {
			return k, err
		}
	}
}

// Poller is implemented by a Link whose receive paths can also be read
// without waiting, by a goroutine other than the path's reader: each
// function takes what is queued on its path (the ReceiveFuncs in the same
// order) and returns (0, nil) at once when nothing is. Two goroutines may
// read a path at the same time, each datagram going to one of them, but
// then nothing orders what they hand on: the batch read second can be
// handed on first. A caller that needs the path's order (a QP's packets
// must reach it as they arrived) reads only under one lock per path and
// waits outside it with the path's Waiter function.
type Poller interface {
	PollFuncs() []ReceiveFunc
}

// WaitFunc blocks until its receive path has something queued, without
// reading it, and fails when the Link is closed. It may return when another
// reader took what was queued in the meantime.
type WaitFunc func() error

// Waiter is implemented by a Poller whose receive paths can be waited on
// without being read (the ReceiveFuncs in the same order). A reader that
// waits with it and then reads with the PollFuncs under the path's lock
// shares the path with pollers in order.
type Waiter interface {
	WaitFuncs() []WaitFunc
}

// WaitFuncs returns the wait functions of l's receive paths, or nil when l
// is not a Waiter.
func WaitFuncs(l Link) []WaitFunc {
	if w, ok := l.(Waiter); ok {
		return w.WaitFuncs()
	}
	return nil
}

// PollFuncs returns the non-blocking receive paths of l, or nil when l is not
// a Poller.
func PollFuncs(l Link) []ReceiveFunc {
	if p, ok := l.(Poller); ok {
		return p.PollFuncs()
	}
	return nil
}

// Offloads are what a Link does with trains. The engine gathers runs of
// equal-size packets into trains only for a Link that sends them as GSO,
// and reads with MaxTrain buffers only from one that may receive them
// whole (GRO): it has no switch of its own.
type Offloads struct {
	// GSO: WriteBatch sends a train (Message.SegSize) as UDP GSO
	// super-datagrams, in fewer system calls than its datagrams one by one.
	GSO bool
	// GRO: ReadBatch may return trains into MaxTrain buffers.
	GRO bool
}

// Offloader is implemented by a Link that reports its Offloads; a Link that
// wraps another reports the wrapped one's.
type Offloader interface {
	Offloads() Offloads
}

// OffloadsOf returns l's Offloads. A Link that does not report them gets
// both, as every Link accepts trains and large read buffers.
func OffloadsOf(l Link) Offloads {
	if o, ok := l.(Offloader); ok {
		return o.Offloads()
	}
	return Offloads{GSO: true, GRO: true}
}

// WholeTrainer is implemented by a Link that knows which destinations get a
// train in one piece: its segments handed to the receiving program together,
// in order, in one read. The engine may then let a packet that must reach the
// peer first (an ACK, ahead of the reply to the message it acknowledges) ride
// as a train's shorter last segment, which the receiver handles first: the
// two cost one trip through the kernel instead of two. A Link that wraps
// another reports the wrapped one's.
type WholeTrainer interface {
	WholeTrains(dst netip.Addr) bool
}

// WholeTrains reports whether l delivers a train to dst in one piece; false
// for a Link that cannot tell.
func WholeTrains(l Link, dst netip.Addr) bool {
	if w, ok := l.(WholeTrainer); ok {
		return w.WholeTrains(dst)
	}
	return false
}

// Multicaster is implemented by a Link that can join IP multicast groups
// (RoCE UD multicast: the MGID maps to an IP group, and datagrams to the
// group arrive at every member on the RoCEv2 port).
type Multicaster interface {
	// JoinGroup joins group on the Link's network interface and returns the
	// receive path of the group's datagrams, to be read by its own goroutine
	// until it fails. Joining a group twice is EEXIST; a group of the other
	// family or a unicast address is EINVAL.
	JoinGroup(group netip.Addr) (ReceiveFunc, error)
	// LeaveGroup leaves group. The group's ReceiveFunc then returns an error
	// wrapping net.ErrClosed. A group not joined is EADDRNOTAVAIL.
	LeaveGroup(group netip.Addr) error
}

var bufPool = sync.Pool{New: func() any { return new([MaxDatagram]byte) }}

// GetBuffer returns a datagram buffer from a shared pool. Its contents are
// undefined. Exactly one owner holds it until it is handed back with PutBuffer.
func GetBuffer() *[MaxDatagram]byte { return bufPool.Get().(*[MaxDatagram]byte) }

// PutBuffer returns b to the pool. It does not allocate (the pool stores the
// array pointer itself). b must not be used afterwards.
func PutBuffer(b *[MaxDatagram]byte) {
	if b != nil {
		bufPool.Put(b)
	}
}

var trainPool = sync.Pool{New: func() any { return new([MaxTrain]byte) }}

// GetTrainBuffer returns a buffer that holds a whole GRO train, from a
// second shared pool, with GetBuffer's ownership rules.
func GetTrainBuffer() *[MaxTrain]byte { return trainPool.Get().(*[MaxTrain]byte) }

// PutTrainBuffer returns b to the train pool. It does not allocate.
func PutTrainBuffer(b *[MaxTrain]byte) {
	if b != nil {
		trainPool.Put(b)
	}
}
