//go:build linux

package steer

import (
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
)

// DefaultBlocks is the number of QPN blocks (and sockets) of a group: 256
// blocks of 65536 QPNs.
const DefaultBlocks = 256

// MaxBlocks bounds a group's sockets: 4096 blocks of 4096 QPNs.
const MaxBlocks = 4096

// qpnBits is the width of a BTH DestQP.
const qpnBits = 24

// Group is a steered SO_REUSEPORT group: one UDP socket per QPN block, all
// bound to one address and port, in block order, with the program that
// steers each datagram to the socket of its DestQP's block. The Group holds
// every socket for its whole life, so the kernel's index of each socket
// never changes.
type Group struct {
	local netip.AddrPort
	socks []*os.File
	shift uint
}

// Listen binds blocks sockets (a power of two from 1 to MaxBlocks; 0 means
// DefaultBlocks) to local with SO_REUSEPORT and attaches the steering
// program. Port 0 picks a free port for all of them. A port that is taken
// (rdma_rxe, another roced, a process that bound it alone) is EADDRINUSE.
func Listen(local netip.AddrPort, blocks int) (*Group, error) {
	if blocks == 0 {
		blocks = DefaultBlocks
	}
	if blocks < 1 || blocks > MaxBlocks || blocks&(blocks-1) != 0 {
		return nil, fmt.Errorf("steer: %d blocks: need a power of two from 1 to %d: %w", blocks, MaxBlocks, syscall.EINVAL)
	}
	addr := local.Addr().Unmap()
	if !addr.IsValid() || addr.IsUnspecified() || addr.IsMulticast() {
		return nil, fmt.Errorf("steer: listen %v: need a specific unicast address: %w", local, syscall.EINVAL)
	}
	g := &Group{local: netip.AddrPortFrom(addr, local.Port()), shift: uint(qpnBits - bits.TrailingZeros(uint(blocks)))}
	if err := probeFree(g.local); err != nil {
		return nil, fmt.Errorf("steer: listen %v: %w", g.local, err)
	}
	for i := 0; i < blocks; i++ {
		f, port, err := bindReusePort(g.local)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("steer: listen %v (socket %d of %d): %w", g.local, i, blocks, err)
		}
		if i == 0 {
			g.local = netip.AddrPortFrom(addr, port)
		}
		g.socks = append(g.socks, f)
	}
	if err := g.Attach(); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// probeFree fails with EADDRINUSE when some socket holds ap, by binding it
// without SO_REUSEPORT for a moment. A socket of this uid with
// SO_REUSEPORT would otherwise let the group join it: a member of an
// earlier group that a process still holds (a client of a roced that
// exited) would take a place in the kernel's order and shift every block.
func probeFree(ap netip.AddrPort) error {
	if ap.Port() == 0 {
		return nil
	}
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("the port is held (by a process still attached to an earlier roced, rdma_rxe, or another program): %w", syscall.EADDRINUSE)
		}
		return err
	}
	return c.Close()
}

// bindReusePort opens a UDP socket with SO_REUSEPORT bound to ap and
// returns it with the port it got.
func bindReusePort(ap netip.AddrPort) (*os.File, uint16, error) {
	family := unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	if ap.Addr().Is6() {
		family = unix.AF_INET6
		sa6 := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()}
		sa = sa6
	}
	// Blocking, so that os.NewFile below makes a plain File: a non-blocking
	// descriptor becomes a pollable File, registered in the process's epoll
	// set, and the group keeps every socket open for its whole life. roced
	// then took an epoll event for every datagram to every attached process.
	// Whoever reads a block makes its own pollable duplicate (link.FromFile),
	// which turns O_NONBLOCK on for the open file, shared by every duplicate;
	// roced itself only reads with MSG_DONTWAIT.
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, 0, err
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("setsockopt SO_REUSEPORT: %w", err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	port := 0
	switch s := got.(type) {
	case *unix.SockaddrInet4:
		port = s.Port
	case *unix.SockaddrInet6:
		port = s.Port
	}
	return os.NewFile(uintptr(fd), "steer:"+ap.String()), uint16(port), nil
}

// Program returns the classic BPF program that steers a datagram of a
// group of blocks sockets (see the package documentation).
func Program(blocks int) []unix.SockFilter {
	shift := uint32(qpnBits - bits.TrailingZeros(uint(blocks)))
	return []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 4},
		{Code: unix.BPF_ALU | unix.BPF_AND | unix.BPF_K, K: 1<<qpnBits - 1},
		{Code: unix.BPF_ALU | unix.BPF_RSH | unix.BPF_K, K: shift},
		{Code: unix.BPF_RET | unix.BPF_A},
	}
}

// Attach (re)attaches the steering program to the group through block 0's
// socket, which the Group never hands out. A program replaced or detached
// through another member is put back.
func (g *Group) Attach() error {
	prog := Program(len(g.socks))
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := Control(g.socks[0], func(fd int) error {
		return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &fprog)
	}); err != nil {
		return fmt.Errorf("steer: attach the steering program on %v: %w", g.local, err)
	}
	return nil
}

// LocalAddr is the address and port every socket of the group is bound to.
func (g *Group) LocalAddr() netip.AddrPort { return g.local }

// Blocks is the number of QPN blocks, one socket each.
func (g *Group) Blocks() int { return len(g.socks) }

// Block returns the block of qpn: the index of the socket its datagrams
// reach.
func (g *Group) Block(qpn uint32) int { return int(qpn&(1<<qpnBits-1)) >> g.shift }

// Range returns the first and last QPN of block b.
func (g *Group) Range(b int) (first, last uint32) {
	first = uint32(b) << g.shift
	return first, first + 1<<g.shift - 1
}

// Socket returns the socket of block b. It stays the Group's: a caller that
// passes it on passes a duplicate (SCM_RIGHTS), and the Group closes it.
func (g *Group) Socket(b int) *os.File { return g.socks[b] }

// Link returns a link.UDP over a duplicate of block b's socket.
func (g *Group) Link(b int, cfg link.Config) (*link.UDP, error) {
	return link.FromFile(g.socks[b], cfg)
}

// Lock forbids attaching a steering program through f (SO_LOCK_FILTER),
// for a socket about to be handed to another process: the kernel checks
// the lock in __get_filter, so SO_ATTACH_REUSEPORT_CBPF through f fails
// with EPERM. The lock cannot be lifted.
func Lock(f *os.File) error {
	if err := Control(f, func(fd int) error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_LOCK_FILTER, 1) }); err != nil {
		return fmt.Errorf("steer: setsockopt SO_LOCK_FILTER: %w", err)
	}
	return nil
}

// Close closes every socket of the group.
func (g *Group) Close() error {
	var errs []error
	for _, f := range g.socks {
		errs = append(errs, f.Close())
	}
	g.socks = nil
	return errors.Join(errs...)
}

// Control runs fn on f's descriptor. Unlike os.File.Fd it leaves the
// descriptor non-blocking: the socket's file description is shared with
// every process holding it, and one that blocked would stall their readers.
func Control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}
