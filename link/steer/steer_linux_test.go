//go:build linux

package steer

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/testsupport/nettest"
	"github.com/goroce/goroce/link"
)

var lo = netip.MustParseAddr("127.0.0.1")

// datagram is a UDP payload whose BTH DestQP is qpn (the byte before it, the
// FECN/BECN byte, set to make sure the program masks it).
func datagram(qpn uint32) []byte {
	b := make([]byte, 32)
	binary.BigEndian.PutUint32(b[4:], 0xC0000000|qpn)
	binary.BigEndian.PutUint32(b[12:], qpn) // the test finds it here
	return b
}

// collect reads the group's sockets until want datagrams arrived or the
// deadline passed, and returns, per socket, the tags of what it got: the
// uint32 at offset 12, or 0xFFFFFFFF for a datagram too short to carry one.
func collect(t *testing.T, g *Group, want int) map[int][]uint32 {
	t.Helper()
	got := map[int][]uint32{}
	n := 0
	fds := make([]unix.PollFd, g.Blocks())
	for i := range fds {
		_ = Control(g.Socket(i), func(fd int) error { fds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}; return nil })
	}
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, 64)
	for n < want && time.Now().Before(deadline) {
		if _, err := unix.Poll(fds, 100); err != nil && !errors.Is(err, syscall.EINTR) {
			t.Fatal(err)
		}
		for i := range fds {
			for {
				k, _, err := unix.Recvfrom(int(fds[i].Fd), buf, unix.MSG_DONTWAIT)
				if err != nil {
					break
				}
				tag := uint32(0xFFFFFFFF)
				if k >= 16 {
					tag = binary.BigEndian.Uint32(buf[12:])
				}
				got[i] = append(got[i], tag)
				n++
			}
		}
	}
	if n != want {
		t.Fatalf("received %d datagrams of %d within 5 s", n, want)
	}
	return got
}

func sendTo(t *testing.T, to netip.AddrPort, payloads ...[]byte) {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, p := range payloads {
		if _, err := c.WriteToUDPAddrPort(p, to); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSteerByBlock(t *testing.T) {
	for _, blocks := range []int{1, 16, DefaultBlocks} {
		g, err := Listen(netip.AddrPortFrom(lo, 0), blocks)
		if err != nil {
			t.Fatal(err)
		}
		// Every block's first and last QPN, and a middle one.
		var qpns []uint32
		for b := 0; b < blocks; b++ {
			first, last := g.Range(b)
			qpns = append(qpns, first, first+(last-first)/2, last)
		}
		var ps [][]byte
		for _, q := range qpns {
			ps = append(ps, datagram(q))
		}
		ps = append(ps, []byte{1, 2, 3}) // too short for a DestQP: block 0
		sendTo(t, g.LocalAddr(), ps...)
		got := collect(t, g, len(ps))
		for b, tags := range got {
			for _, tag := range tags {
				if tag == 0xFFFFFFFF {
					if b != 0 {
						t.Errorf("%d blocks: a short datagram reached block %d, want 0", blocks, b)
					}
					continue
				}
				if g.Block(tag) != b {
					t.Errorf("%d blocks: QPN %#x reached block %d, want %d", blocks, tag, b, g.Block(tag))
				}
			}
		}
		g.Close()
	}
}

// TestBypassIsRefused: a socket that binds the group's address and port
// without joining it (no SO_REUSEPORT, as roce.Open binds) gets EADDRINUSE.
func TestBypassIsRefused(t *testing.T) {
	g, err := Listen(netip.AddrPortFrom(lo, 0), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	_, err = link.ListenUDP(g.LocalAddr(), link.Config{})
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("bind beside the group: %v, want EADDRINUSE", err)
	}
}

// TestMemberPowers records what the kernel lets a process do with a group
// member it holds, which the package documentation states: attaching a
// program through a locked member is EPERM; detaching the program works
// through any member (selection falls back to the hash) and Attach puts it
// back; connecting a member takes the datagrams of that one peer.
func TestMemberPowers(t *testing.T) {
	g, err := Listen(netip.AddrPortFrom(lo, 0), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	member := g.Socket(2)
	if err := Lock(member); err != nil {
		t.Fatal(err)
	}
	prog := Program(4)
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	err = Control(member, func(fd int) error {
		return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &fprog)
	})
	if !errors.Is(err, syscall.EPERM) {
		t.Errorf("attach through a locked member: %v, want EPERM", err)
	}
	err = Control(member, func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DETACH_REUSEPORT_BPF, 0)
	})
	t.Logf("detach through a locked member: %v", err)
	if err == nil {
		if err := g.Attach(); err != nil {
			t.Fatal(err)
		}
	}
	// A member connected to a peer receives what that peer sends, whatever
	// the DestQP.
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer := c.LocalAddr().(*net.UDPAddr).AddrPort()
	if err := Control(member, func(fd int) error {
		return unix.Connect(fd, &unix.SockaddrInet4{Port: int(peer.Port()), Addr: peer.Addr().As4()})
	}); err != nil {
		t.Fatal(err)
	}
	first, _ := g.Range(1)
	if _, err := c.WriteToUDPAddrPort(datagram(first), g.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	got := collect(t, g, 1)
	t.Logf("block 1's datagram from a peer a member connected to reached %v", got)
}

// TestListenRefusesStaleMember: while a member of an earlier group is open
// (held by a process of a roced that exited), a new group on that address
// and port is EADDRINUSE rather than joining it out of order; once the
// member closes, the group binds.
func TestListenRefusesStaleMember(t *testing.T) {
	g, err := Listen(netip.AddrPortFrom(lo, 0), 4)
	if err != nil {
		t.Fatal(err)
	}
	held, err := g.Link(2, link.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ap := g.LocalAddr()
	g.Close()
	if g2, err := Listen(ap, 4); !errors.Is(err, syscall.EADDRINUSE) {
		if g2 != nil {
			g2.Close()
		}
		t.Fatalf("a group beside a stale member: %v, want EADDRINUSE", err)
	}
	held.Close()
	g2, err := Listen(ap, 4)
	if err != nil {
		t.Fatalf("a group after the stale member closed: %v", err)
	}
	g2.Close()
}

// TestSocketsNotPolled: the group's own copies of its sockets stay out of the
// process's epoll set. roced keeps them for the group's life; registered, every
// datagram to every attached process was an epoll event in roced.
func TestSocketsNotPolled(t *testing.T) {
	// The control: a socket the runtime polls is found registered.
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(lo, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var polled bool
	var perr error
	if err := rc.Control(func(fd uintptr) { polled, perr = nettest.InEpoll(int(fd)) }); err != nil || perr != nil || !polled {
		t.Fatalf("a net.UDPConn's socket: in epoll %v (%v, %v), want true", polled, err, perr)
	}
	g, err := Listen(netip.AddrPortFrom(lo, 0), 4)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for b := range g.Blocks() {
		err := Control(g.Socket(b), func(fd int) error {
			in, err := nettest.InEpoll(fd)
			if err == nil && in {
				err = errors.New("registered in epoll")
			}
			return err
		})
		if err != nil {
			t.Errorf("block %d's socket: %v", b, err)
		}
	}
}
