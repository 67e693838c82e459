//go:build linux

package link

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// JoinGroup implements Multicaster. A socket bound to the link's unicast
// address never receives datagrams sent to a group, so each group gets a
// socket of its own, bound to group:port with SO_REUSEADDR (other links and
// processes may join the same group on the same port), that joins the group
// on the link's interface (Interface) with IP_MULTICAST_ALL off, so it sees
// only this group. The returned function reads it with ReadBatch's contract;
// the datagrams' Local is the group.
//
// Sending to a group needs nothing: the link's sending sockets point their
// multicast datagrams at the same interface (IP_MULTICAST_IF) with TTL
// Config.MulticastTTL, and the kernel loops them back to members on this
// host (IP_MULTICAST_LOOP, on by default).
func (u *UDP) JoinGroup(group netip.Addr) (ReceiveFunc, error) {
	g := group.WithZone("")
	if !u.is6 {
		g = g.Unmap()
	}
	if !g.IsMulticast() || g.Is4() == u.is6 || g.Is4In6() {
		return nil, fmt.Errorf("link: join %v on %v: not a multicast group of the link's family: %w", group, u.local, syscall.EINVAL)
	}
	u.portsMu.Lock()
	defer u.portsMu.Unlock()
	if u.closed.Load() {
		return nil, fmt.Errorf("link: join %v on %v: %w", g, u.local, net.ErrClosed)
	}
	if _, ok := u.groups[g]; ok {
		return nil, fmt.Errorf("link: join %v on %v: already joined: %w", g, u.local, syscall.EEXIST)
	}
	bind := g
	if needsZone(g) && u.ifindex != 0 {
		bind = g.WithZone(strconv.Itoa(u.ifindex))
	}
	conn, rc, err := u.openGroup(netip.AddrPortFrom(bind, u.local.Port()))
	if err != nil {
		return nil, fmt.Errorf("link: join %v on %v: %w", g, u.local, err)
	}
	var serr error
	err = rc.Control(func(fd uintptr) { serr = u.join(int(fd), g) })
	if err == nil {
		err = serr
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("link: join %v on %v: %w", g, u.local, err)
	}
	r := &reader{u: u, conn: conn, rc: rc, group: g}
	u.groups[g] = r
	return r.read, nil
}

// needsZone reports whether an IPv6 address only means something on one
// link: link-local unicast, or multicast of interface- or link-local scope
// (ff01::/16, ff02::/16 and their flag variants such as ff12::/16).
func needsZone(a netip.Addr) bool {
	if !a.Is6() || a.Is4In6() {
		return false
	}
	if a.IsMulticast() {
		return a.As16()[1]&0x0f <= 2
	}
	return a.IsLinkLocalUnicast()
}

// openGroup binds a socket to the group's own address. The net package
// cannot do it: it binds a multicast address as the wildcard, which would
// take the port from the link's unicast socket and receive every datagram
// to it on any address.
func (u *UDP) openGroup(ap netip.AddrPort) (*net.UDPConn, syscall.RawConn, error) {
	fd, err := u.bindSocket(ap, roleGroup)
	if err != nil {
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), "group "+ap.String())
	defer f.Close() // FilePacketConn keeps a duplicate
	return rawUDP(net.FilePacketConn(f))
}

// join adds the socket to group on the link's interface and keeps other
// groups' datagrams away from it.
func (u *UDP) join(fd int, g netip.Addr) error {
	if u.is6 {
		mreq := unix.IPv6Mreq{Multiaddr: g.As16(), Interface: uint32(u.ifindex)}
		if err := unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP, &mreq); err != nil {
			return fmt.Errorf("setsockopt IPV6_JOIN_GROUP: %w", err)
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL, 0)
		return nil
	}
	mreq := unix.IPMreqn{Multiaddr: g.As4(), Address: u.local.Addr().As4(), Ifindex: int32(u.ifindex)}
	if err := unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP, &mreq); err != nil {
		return fmt.Errorf("setsockopt IP_ADD_MEMBERSHIP: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
	return nil
}

// LeaveGroup implements Multicaster: closing the group's socket leaves the
// group and ends its ReceiveFunc with net.ErrClosed.
func (u *UDP) LeaveGroup(group netip.Addr) error {
	g := group.WithZone("")
	if !u.is6 {
		g = g.Unmap()
	}
	u.portsMu.Lock()
	r, ok := u.groups[g]
	delete(u.groups, g)
	u.portsMu.Unlock()
	if !ok {
		return fmt.Errorf("link: leave %v on %v: not joined: %w", group, u.local, syscall.EADDRNOTAVAIL)
	}
	return r.conn.Close()
}
