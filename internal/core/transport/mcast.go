package transport

import (
	"errors"
	"net/netip"
	"slices"
	"syscall"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
)

// McastQPN is the destination QP of a multicast datagram (IBA 10.5.2.4, rxe
// IB_MULTICAST_QPN): it is delivered to every UD QP attached to the group it
// was sent to. A UD send to a multicast group names it as RemoteQPN.
const McastQPN = 0xFFFFFF

// mcastTable maps a group (its unmapped IP address) to its UD QPs. Readers
// load it lock-free; attach and detach copy it under Engine.mcMu.
type mcastTable map[netip.Addr][]*QP

// AttachMcast is ibv_attach_mcast for the group's IP address: the QP receives
// every datagram sent to group with DestQP McastQPN. The first QP attached to
// a group joins it on the Link (link.Multicaster), and a reader of its own
// serves it; attaching twice is not an error (as uverbs). EINVAL for a QP
// that is not UD or an address that is not multicast; ENOSYS when the Link
// cannot join groups; the Link's errno when the join fails.
func (q *QP) AttachMcast(group netip.Addr) error {
	const op = "ibv_attach_mcast"
	e := q.e
	g := group.Unmap().WithZone("")
	switch {
	case e.closed.Load():
		return closedErr(op, q.qpn)
	case q.typ != verbs.QPTypeUD:
		return newErr(op, q.qpn, syscall.EINVAL, "only UD QPs join multicast groups")
	case !g.IsMulticast():
		return newErr(op, q.qpn, syscall.EINVAL, "%v is not a multicast address", group)
	}
	e.mcMu.Lock()
	defer e.mcMu.Unlock()
	if q.mcastGone {
		return newErr(op, q.qpn, syscall.EINVAL, "QP destroyed")
	}
	old := e.mcastTable()
	qs := old[g]
	if slices.Contains(qs, q) {
		return nil
	}
	if len(qs) == 0 {
		if err := e.joinGroup(op, q.qpn, g); err != nil {
			return err
		}
	}
	t := make(mcastTable, len(old)+1)
	for k, v := range old {
		t[k] = v
	}
	t[g] = append(slices.Clip(qs), q)
	e.mcast.Store(&t)
	return nil
}

// DetachMcast is ibv_detach_mcast: EINVAL when the QP is not attached. The
// last QP to leave a group leaves it on the Link, ending its reader.
func (q *QP) DetachMcast(group netip.Addr) error {
	const op = "ibv_detach_mcast"
	e := q.e
	g := group.Unmap().WithZone("")
	if e.closed.Load() {
		return closedErr(op, q.qpn)
	}
	e.mcMu.Lock()
	defer e.mcMu.Unlock()
	if !slices.Contains(e.mcastTable()[g], q) {
		return newErr(op, q.qpn, syscall.EINVAL, "not attached to %v", group)
	}
	e.detachLocked(q, g)
	return nil
}

// detachAll takes a destroyed QP out of every group (uverbs detaches a QP's
// groups before it destroys the QP).
func (q *QP) detachAll() {
	e := q.e
	e.mcMu.Lock()
	defer e.mcMu.Unlock()
	q.mcastGone = true
	for g, qs := range e.mcastTable() {
		if slices.Contains(qs, q) {
			e.detachLocked(q, g)
		}
	}
}

func (e *Engine) detachLocked(q *QP, g netip.Addr) {
	old := e.mcastTable()
	t := make(mcastTable, len(old))
	for k, v := range old {
		t[k] = v
	}
	qs := slices.DeleteFunc(slices.Clone(old[g]), func(x *QP) bool { return x == q })
	if len(qs) == 0 {
		delete(t, g)
		if ml, ok := e.cfg.Link.(link.Multicaster); ok && !e.closed.Load() {
			_ = ml.LeaveGroup(g) // its reader ends with net.ErrClosed
		}
	} else {
		t[g] = qs
	}
	e.mcast.Store(&t)
}

// joinGroup joins g on the Link and starts the reader of its datagrams.
func (e *Engine) joinGroup(op string, qpn uint32, g netip.Addr) error {
	ml, ok := e.cfg.Link.(link.Multicaster)
	if !ok {
		return newErr(op, qpn, syscall.ENOSYS, "the link cannot join multicast groups")
	}
	recv, err := ml.JoinGroup(g)
	if err != nil {
		errno := syscall.EIO
		errors.As(err, &errno)
		return newErr(op, qpn, errno, "join %v: %v", g, err)
	}
	r := newReader(e, recv, e.shards[0].batch)
	r.group = g
	e.wg.Add(1)
	go r.loop()
	return nil
}

// mcastTable returns the current group table (never nil).
func (e *Engine) mcastTable() mcastTable {
	if t := e.mcast.Load(); t != nil {
		return *t
	}
	return nil
}

// dispatchMcast hands a McastQPN datagram to every QP attached to its group
// (m.Local), a copy each but the last (rxe_rcv_mcast_pkt), each QP checking it
// as its own (type, state, Q_Key: C10-15); true if a shard took it.
func (r *reader) dispatchMcast(it rxItem, m *link.Message) bool {
	e := r.e
	qs := e.mcastTable()[m.Local.Unmap().WithZone("")]
	if len(qs) == 0 {
		e.cfg.Stats.UnknownQP.Add(1)
		return false
	}
	for _, q := range qs[:len(qs)-1] {
		b := link.GetBuffer()
		if !r.enqueue(rxItem{buf: b, n: copy(b[:], it.bytes())}, m, q) {
			link.PutBuffer(b)
		}
	}
	return r.enqueue(it, m, qs[len(qs)-1])
}
