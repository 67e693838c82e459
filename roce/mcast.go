package roce

import (
	"net/netip"
	"syscall"

	"github.com/goroce/goroce/internal/core/transport"
)

// McastQPN (0xFFFFFF) is the RemoteQPN of a UD send to a multicast group.
const McastQPN = transport.McastQPN

// mcastState counts attachments against the max_mcast_* limits.
type mcastState struct {
	groups map[netip.Addr]int // group → attached QPs
	total  int                // attachments on the device
}

// AttachMcast is ibv_attach_mcast: the UD QP receives the datagrams sent to multicast
// group gid with DestQP McastQPN (package doc, UD multicast); lid is unused on RoCE.
// Attaching twice is not an error, as with uverbs.
//
// Errors: EINVAL for a QP that is not UD, a GID that is not multicast or of the other
// IP family; ENOMEM at max_mcast_grp groups, max_mcast_qp_attach QPs in the group or
// max_total_mcast_qp_attach attachments; ENOSYS when the link cannot join groups; the
// join's errno otherwise.
func (q *QP) AttachMcast(gid GID, lid uint16) error {
	const op = "ibv_attach_mcast"
	d := q.pd.dev
	g, err := q.mcastGroup(op, gid)
	if err != nil {
		return err
	}
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	if q.mcast[g] {
		return nil
	}
	m, l := &d.mcast, d.limits
	switch {
	case m.groups[g] == 0 && len(m.groups) >= l.MaxMcastGrp:
		return newErr(op, q.obj, syscall.ENOMEM, "max_mcast_grp %d reached", l.MaxMcastGrp)
	case m.groups[g] >= l.MaxMcastQPAttach:
		return newErr(op, q.obj, syscall.ENOMEM, "max_mcast_qp_attach %d reached for %v", l.MaxMcastQPAttach, g)
	case m.total >= l.MaxTotalMcastQPAttach:
		return newErr(op, q.obj, syscall.ENOMEM, "max_total_mcast_qp_attach %d reached", l.MaxTotalMcastQPAttach)
	}
	if err := q.qp.AttachMcast(g); err != nil {
		return wrapErr(op, q.obj, -1, err)
	}
	if m.groups == nil {
		m.groups = make(map[netip.Addr]int)
	}
	if q.mcast == nil {
		q.mcast = make(map[netip.Addr]bool)
	}
	m.groups[g]++
	m.total++
	q.mcast[g] = true
	return nil
}

// DetachMcast is ibv_detach_mcast: EINVAL when the QP is not attached to gid. The
// device's last QP to leave a group leaves the IP group.
func (q *QP) DetachMcast(gid GID, lid uint16) error {
	const op = "ibv_detach_mcast"
	d := q.pd.dev
	g, err := q.mcastGroup(op, gid)
	if err != nil {
		return err
	}
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	if !q.mcast[g] {
		return newErr(op, q.obj, syscall.EINVAL, "not attached to %v", gid)
	}
	if err := q.qp.DetachMcast(g); err != nil {
		return wrapErr(op, q.obj, -1, err)
	}
	d.forgetMcastLocked(q, g)
	return nil
}

// mcastGroup checks a verb's QP and GID and returns the group's IP address.
func (q *QP) mcastGroup(op string, gid GID) (netip.Addr, error) {
	d := q.pd.dev
	g := gid.Addr()
	switch {
	case d.closed.Load():
		return g, closedErr(op, q.obj)
	case q.init.Type != QPTypeUD:
		return g, newErr(op, q.obj, syscall.EINVAL, "only UD QPs attach to multicast groups")
	case !g.IsMulticast():
		return g, newErr(op, q.obj, syscall.EINVAL, "%v is not a multicast GID", gid)
	case g.Is4() != d.addr.Is4():
		return g, newErr(op, q.obj, syscall.EINVAL, "group %v and device %v are of different IP families", g, d.addr)
	}
	return g, nil
}

// forgetMcastLocked drops q's attachment to g from the counts.
func (d *Device) forgetMcastLocked(q *QP, g netip.Addr) {
	delete(q.mcast, g)
	d.mcast.total--
	if d.mcast.groups[g]--; d.mcast.groups[g] <= 0 {
		delete(d.mcast.groups, g)
	}
}

// forgetAllMcast drops a destroyed QP's attachments (the engine detached it).
func (d *Device) forgetAllMcast(q *QP) {
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	for g := range q.mcast {
		d.forgetMcastLocked(q, g)
	}
}
