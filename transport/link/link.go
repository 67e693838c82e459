package link

import (
	"net/netip"
	"sync"
)

// MaxDatagram is the largest UDP payload a Link handles, in bytes.
//
// The largest RoCEv2 packet at path MTU 4096 is RDMA WRITE ONLY WITH IMMEDIATE:
// BTH 12 + RETH 16 + ImmDt 4 + 4096 payload + ICRC 4 = 4132 bytes (a 4096-byte
// payload needs no pad; UD SEND with DETH+ImmDt is 4124). 64 bytes of slack
// covers every header combination and keeps the size a round number.
// Datagrams larger than this are truncated by the kernel and dropped by the
// Link (counted, never delivered half).
const MaxDatagram = 4096 + 64

// Message is one datagram in a batch.
//
// Buffer ownership: Buf belongs to the caller before and after ReadBatch and
// WriteBatch; a Link never keeps a reference to it once the call returns.
type Message struct {
	// Buf is, on write, the datagram to send. On read the caller passes a
	// buffer (normally with capacity MaxDatagram, e.g. GetBuffer()[:]); the
	// Link reads into Buf[:cap(Buf)] and reslices Buf to the datagram length.
	Buf []byte
	// Addr is the remote peer: the source on read, the destination on write.
	Addr netip.AddrPort
	// Local is, on read, the destination address of the datagram (from
	// IP_PKTINFO / IPV6_PKTINFO). It is ignored on write: a Link always sends
	// from the address it is bound to.
	Local netip.Addr
	// TOS is, on read, the IPv4 TOS byte or IPv6 traffic class (DSCP<<2 | ECN)
	// when the Link reports it (UDP does, via IP_RECVTOS / IPV6_RECVTCLASS);
	// otherwise 0. Ignored on write. Kept for ECN/DCQCN.
	TOS uint8
	// SrcPort is, on write, the UDP source port: 0 is the Link's own port,
	// anything else must have been granted by SourcePort. Ignored on read
	// (Addr carries the sender's port).
	SrcPort uint16
}

// Link moves RoCEv2 datagrams. It is the analogue of wireguard-go's conn.Bind:
// it only moves bytes and never looks inside the BTH.
//
// ReadBatch and WriteBatch may be called concurrently with each other and
// with themselves (one reader goroutine and several writers is the intended
// use). After Close, both return an error wrapping net.ErrClosed.
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
	// call again with msgs[n+1:].
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
