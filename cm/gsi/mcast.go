package gsi

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/goroce/goroce/link"
)

var _ link.Multicaster = (*Link)(nil)

// JoinGroup implements link.Multicaster for a wrapped Link that does, so a
// device opened with Open joins multicast groups (cm/mcast). A group's
// datagrams go to DestQP 0xFFFFFF, never QP1, so none is diverted. Without a
// wrapped Multicaster it is ENOSYS.
func (g *Link) JoinGroup(group netip.Addr) (link.ReceiveFunc, error) {
	mc, ok := g.Link.(link.Multicaster)
	if !ok {
		return nil, fmt.Errorf("gsi: join %v: the wrapped link has no multicast: %w", group, syscall.ENOSYS)
	}
	return mc.JoinGroup(group)
}

// LeaveGroup implements link.Multicaster for a wrapped Link that does.
func (g *Link) LeaveGroup(group netip.Addr) error {
	mc, ok := g.Link.(link.Multicaster)
	if !ok {
		return fmt.Errorf("gsi: leave %v: the wrapped link has no multicast: %w", group, syscall.ENOSYS)
	}
	return mc.LeaveGroup(group)
}
