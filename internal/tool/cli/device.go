package cli

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// LocalAddr resolves the value of a device option (-d): an IP address, or
// the name of a network interface of this host, whose address goroce binds.
// The stock tools' -d names an RDMA device (rxe0); a goroce device is an IP
// address, and an interface stands for its address. When the interface has
// several, the first of peer's family is taken (IPv4 when peer is not
// known), never a link-local IPv6 address, which RoCE cannot route.
func LocalAddr(flag, dev string, peer netip.Addr) (netip.Addr, error) {
	if a, err := netip.ParseAddr(dev); err == nil {
		return a.Unmap(), nil
	}
	ifc, err := net.InterfaceByName(dev)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s %s: not an IP address or a network interface of this host "+
			"(goroce binds an IP address: %s 192.0.2.10, or %s eth0 for eth0's address)", flag, dev, flag, flag)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s %s: %w", flag, dev, err)
	}
	want6 := peer.IsValid() && peer.Unmap().Is6()
	var other netip.Addr
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok || ip.IsLinkLocalUnicast() {
			continue
		}
		ip = ip.Unmap()
		if ip.Is6() == want6 {
			return ip, nil
		}
		if !other.IsValid() {
			other = ip
		}
	}
	if other.IsValid() {
		return other, nil
	}
	return netip.Addr{}, fmt.Errorf("%s %s: the interface has no IP address goroce can bind (see `ip -brief addr show %s`)", flag, dev, dev)
}

// RouteSource returns the address this host would send to dst from, as
// rdma_resolve_addr picks a source: the kernel's route lookup for a UDP
// socket "connected" to dst. No packet is sent.
func RouteSource(dst netip.Addr, udpPort int) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, uint16(udpPort))))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// OpenError explains a failure to open a goroce device on addr: when the
// address's RoCEv2 port is taken, it says that one process serves one
// address and how to give this one its own, in the tool's own options:
// addrFlag (-d for the pingpong and perftest tools, -I or -a for rping-go)
// and portFlag (the option that moves RoCEv2 off UDP 4791).
func OpenError(err error, addr netip.Addr, udpPort int, addrFlag, portFlag string) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("couldn't open the device on %v: %w", addr, err)
	}
	other := "another address of this host"
	if addr.Is4() && addr.IsLoopback() {
		other = "127.0.0.x (every 127/8 address is local)"
	}
	return fmt.Errorf("%v UDP port %d is taken by another process (roced or another goroce tool): "+
		"one process serves one address, so give this one its own: %s %s "+
		"(if the rdma_rxe module is loaded, it holds port %d on every address: unload it, or move both peers with %s)",
		addr, udpPort, addrFlag, other, udpPort, portFlag)
}
