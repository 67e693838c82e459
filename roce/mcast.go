package roce

import (
	"net/netip"
	"syscall"

	"github.com/goroce/goroce/internal/core/transport"
)

// McastQPN is the destination QP of a UD send to a multicast group (0xFFFFFF):
// the datagram reaches every QP attached to the group.
const McastQPN = transport.McastQPN

// mcastState is the device's multicast bookkeeping, for max_mcast_grp,
// max_mcast_qp_attach and max_total_mcast_qp_attach.
type mcastState struct {
	groups map[netip.Addr]int // group → attached QPs
	total  int                // attachments on the device
}

// AttachMcast is ibv_attach_mcast: the UD QP receives the datagrams sent to the
// multicast group gid (an IPv4 group as ::ffff:a.b.c.d, or an IPv6 one) with
// DestQP McastQPN, as every other QP attached to it does. On RoCE lid is unused.
// The first QP of the device attached to a group joins the IP group on the
// device's network interface, as the kernel does for rdma_join_multicast (IGMP
// or MLD). Attaching twice is not an error, as with uverbs.
//
// Errors: EINVAL for a QP that is not UD, a GID that is not multicast or of the
// other IP family than the device's; ENOMEM when max_mcast_grp groups, or
// max_mcast_qp_attach QPs in this group, or max_total_mcast_qp_attach
// attachments exist; ENOSYS when the device's link cannot join groups; the
// errno of the join otherwise.
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

// DetachMcast is ibv_detach_mcast. EINVAL when the QP is not attached to gid.
// The last QP of the device to leave a group leaves the IP group.
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

// forgetAllMcast drops every attachment of a destroyed QP (the engine detached
// it from its groups).
func (d *Device) forgetAllMcast(q *QP) {
	d.mcMu.Lock()
	defer d.mcMu.Unlock()
	for g := range q.mcast {
		d.forgetMcastLocked(q, g)
	}
}
