// Package mcast is rdma_join_multicast and rdma_leave_multicast for a goroce
// UD QP, as the kernel's rdma_cm and librdmacm do them on RoCE: there is no
// subnet administrator to ask, so the MGID is derived from the IP group
// (cma_iboe_set_mgid), the host joins the IP group on the device's interface
// (IGMP or MLD) unless the join is send-only, and the join's result (the
// RDMA_CM_EVENT_MULTICAST_JOIN parameters: an address vector to the group,
// QPN 0xFFFFFF, the Q_Key) is known at once, with no event to wait for.
// librdmacm attaches the QP to the group when that event arrives, except for
// a send-only join; Join does the same.
//
// The QP is expected to have rdma_cm's Q_Key, cm.UDPQKey (0x01234567), which
// rdma_create_qp gives a UD QP and which the join reports: members drop
// datagrams with any other Q_Key.
package mcast

import (
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/roce"
)

// JoinFlags is rdma_join_multicast_ex's join_flags (enum
// rdma_cm_mc_join_flags).
type JoinFlags uint8

// Join flags with their librdmacm values.
const (
	// FullMember (RDMA_MC_JOIN_FLAG_FULLMEMBER) sends to and receives
	// from the group: the host joins the IP group and the QP is attached.
	FullMember JoinFlags = 0
	// SendOnlyFullMember (RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) only
	// sends: no IGMP/MLD join, no attach.
	SendOnlyFullMember JoinFlags = 1
)

// String names the flag as librdmacm does.
func (f JoinFlags) String() string {
	switch f {
	case FullMember:
		return "FULLMEMBER"
	case SendOnlyFullMember:
		return "SENDONLY_FULLMEMBER"
	}
	return fmt.Sprintf("JoinFlags(%d)", uint8(f))
}

// HopLimit is the hop limit of the address vector a RoCEv2 join reports
// (cma_iboe_join_multicast: IPV6_DEFAULT_HOPLIMIT), so datagrams to the group
// leave with TTL 64, where a plain IP multicast socket would send 1.
const HopLimit = 64

// MGID returns the multicast GID of an IP multicast group on RoCEv2, as the
// kernel's cma_iboe_set_mgid: an IPv4 group as the IPv4-mapped ::ffff:a.b.c.d
// (RoCEv2's GID form; RoCEv1 would use ff0e::ffff:a.b.c.d), an IPv6 group as
// itself. EINVAL for the unspecified address (cma_zero_addr) or an address
// that is not multicast (ib_attach_mcast's rdma_is_multicast_addr).
func MGID(group netip.Addr) (roce.GID, error) {
	g := group.Unmap().WithZone("")
	switch {
	case !g.IsValid() || g.IsUnspecified():
		return roce.GID{}, fmt.Errorf("cm/mcast: no group address: %w", syscall.EINVAL)
	case !g.IsMulticast():
		return roce.GID{}, fmt.Errorf("cm/mcast: %v is not a multicast group: %w", group, syscall.EINVAL)
	}
	return roce.GIDFromAddr(g), nil
}

// Membership is one join of a QP to a group; Leave ends it.
type Membership struct {
	qp    *roce.QP
	group netip.Addr
	mgid  roce.GID
	flags JoinFlags
	ah    roce.AHAttr

	mu   sync.Mutex
	left bool // mu guards
}

// Join is rdma_join_multicast (rdma_join_multicast_ex with join_flags) for a
// UD QP on RoCEv2. The group is an IP multicast address of the device's
// family. A full member's QP is attached to the group's MGID
// ((*roce.QP).AttachMcast), which joins the IP group on the device's
// interface; a send-only member is not. The Membership reports the address
// vector and remote QPN and Q_Key to send to the group with, as the
// RDMA_CM_EVENT_MULTICAST_JOIN event's ud parameters do.
//
// Errors: EINVAL for a QP that is not UD, a group that is not multicast or not
// of the device's IP family, unknown flags; AttachMcast's errors for a full
// member. The kernel refuses IPv6 groups on RoCEv2 (ENOTSUPP); goroce joins
// them with MLD, the MGID being the group.
func Join(qp *roce.QP, group netip.Addr, flags JoinFlags) (*Membership, error) {
	mgid, err := MGID(group)
	if err != nil {
		return nil, err
	}
	dev := qp.PD().Device()
	g := mgid.Addr()
	switch {
	case qp.Type() != roce.QPTypeUD:
		return nil, fmt.Errorf("cm/mcast: join %v: QP %#x is %v, not UD: %w", g, qp.QPN(), qp.Type(), syscall.EINVAL)
	case g.Is4() != dev.Addr().Is4():
		return nil, fmt.Errorf("cm/mcast: join %v: the device's address %v is of the other IP family: %w", g, dev.Addr(), syscall.EINVAL)
	case flags > SendOnlyFullMember:
		return nil, fmt.Errorf("cm/mcast: join %v: join flags %d: %w", g, flags, syscall.EINVAL)
	}
	m := &Membership{qp: qp, group: g, mgid: mgid, flags: flags,
		ah: roce.AHAttr{DGID: g, SGIDIndex: uint8(dev.GIDIndex()), HopLimit: HopLimit, IsGlobal: true}}
	if flags == FullMember {
		if err := qp.AttachMcast(mgid, 0); err != nil {
			return nil, fmt.Errorf("cm/mcast: join %v: %w", g, err)
		}
	}
	return m, nil
}

// Group returns the IP multicast group.
func (m *Membership) Group() netip.Addr { return m.group }

// MGID returns the group's multicast GID (the event's ah_attr.grh.dgid).
func (m *Membership) MGID() roce.GID { return m.mgid }

// Flags returns the join flags.
func (m *Membership) Flags() JoinFlags { return m.flags }

// AHAttr returns the address vector to the group, for (*roce.PD).CreateAH:
// DGID the group, the device's RoCEv2 GID index, hop limit 64, traffic class
// and flow label 0 (cma_make_mc_event, ib_init_ah_from_mcmember).
func (m *Membership) AHAttr() roce.AHAttr { return m.ah }

// RemoteQPN returns the destination QP of sends to the group, 0xFFFFFF.
func (m *Membership) RemoteQPN() uint32 { return roce.McastQPN }

// QKey returns the Q_Key of sends to the group, cm.UDPQKey.
func (m *Membership) QKey() uint32 { return cm.UDPQKey }

// Leave is rdma_leave_multicast: a full member's QP is detached from the
// group (the last QP of the device to leave leaves the IP group). Leaving
// twice is EINVAL, as for a group not joined.
func (m *Membership) Leave() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.left {
		return fmt.Errorf("cm/mcast: leave %v: not joined: %w", m.group, syscall.EINVAL)
	}
	m.left = true
	if m.flags == SendOnlyFullMember {
		return nil
	}
	if err := m.qp.DetachMcast(m.mgid, 0); err != nil {
		return fmt.Errorf("cm/mcast: leave %v: %w", m.group, err)
	}
	return nil
}
