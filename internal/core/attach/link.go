package attach

import (
	"net/netip"
	"sync/atomic"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/link"
)

// Link is a client's steered socket seen through its QPN block: every
// datagram, and every segment of a GRO train, whose DestQP is outside
// [first, last] is dropped and counted before the engine sees it. The
// kernel steers a coalesced train by its first segment only (see package
// link/steer), so a segment of another block can arrive here; it never
// reaches a QP of this process.
type Link struct {
	link.Link
	first, last uint32
	misrouted   atomic.Uint64
}

// NewLink wraps l, the link over the block's socket.
func NewLink(l link.Link, first, last uint32) *Link {
	return &Link{Link: l, first: first, last: last}
}

// Misrouted counts the datagrams dropped for a DestQP outside the block.
func (l *Link) Misrouted() uint64 { return l.misrouted.Load() }

// ReadBatch implements link.Link.
func (l *Link) ReadBatch(msgs []link.Message) (int, error) { return l.filtered(l.Link.ReadBatch, msgs) }

// ReceiveFuncs implements link.Receivers.
func (l *Link) ReceiveFuncs() []link.ReceiveFunc {
	return link.WrapReceiveFuncs(link.ReceiveFuncs(l.Link), l.filtered)
}

// PollFuncs implements link.Poller.
func (l *Link) PollFuncs() []link.ReceiveFunc {
	return link.WrapReceiveFuncs(link.PollFuncs(l.Link), l.filtered)
}

// WaitFuncs implements link.Waiter: a wait returns when the socket has a
// datagram queued, which may be one the poll that follows drops as another
// block's (the engine takes an empty poll as a wait that found nothing).
func (l *Link) WaitFuncs() []link.WaitFunc { return link.WaitFuncs(l.Link) }

// WholeTrains implements link.WholeTrainer: the block socket's. A train to the
// shared address goes whole to the socket its first segment's DestQP steers
// it to, and a train's segments share a QPN block.
func (l *Link) WholeTrains(dst netip.Addr) bool { return link.WholeTrains(l.Link, dst) }

// JoinGroup implements link.Multicaster: a group's datagrams arrive on a
// socket of their own, which every process joins for itself, so each gets
// its copy (DestQP 0xFFFFFF).
func (l *Link) JoinGroup(group netip.Addr) (link.ReceiveFunc, error) {
	m, ok := l.Link.(link.Multicaster)
	if !ok {
		return nil, errNoMulticast
	}
	return m.JoinGroup(group)
}

// LeaveGroup implements link.Multicaster.
func (l *Link) LeaveGroup(group netip.Addr) error {
	m, ok := l.Link.(link.Multicaster)
	if !ok {
		return errNoMulticast
	}
	return m.LeaveGroup(group)
}

// Unwrap returns the wrapped link.
func (l *Link) Unwrap() link.Link { return l.Link }

func (l *Link) mine(b []byte) bool {
	qpn, ok := bth.PeekDestQP(b)
	return ok && qpn >= l.first && qpn <= l.last
}

// filtered reads through fn and keeps what is for the block; a train keeps
// its segments that are the block's, in order.
func (l *Link) filtered(fn link.ReceiveFunc, msgs []link.Message) (int, error) {
	return link.ReceiveFiltered(fn, msgs, l.keep)
}

// keep checks every datagram of m and reports whether anything is left;
// a train loses its foreign segments in place.
func (l *Link) keep(m *link.Message) bool {
	if m.SegSize <= 0 {
		if l.mine(m.Buf) {
			return true
		}
		l.misrouted.Add(1)
		return false
	}
	segs := m.NumSegments()
	all := true
	for i := range segs {
		if !l.mine(m.Segment(i)) {
			all = false
			break
		}
	}
	if all {
		return true
	}
	// Rare: compact the train. Only the last segment may be short, and it
	// stays last, so the kept run is still a train of SegSize segments.
	out := 0
	for i := range segs {
		s := m.Segment(i)
		if !l.mine(s) {
			l.misrouted.Add(1)
			continue
		}
		out += copy(m.Buf[out:], s)
	}
	m.Buf = m.Buf[:out]
	return out > 0
}
