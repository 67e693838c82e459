//go:build linux

package link

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A send-only socket stays out of the runtime's network poller. The poller
// registers every socket for readability and writability, edge-triggered, so
// each datagram the kernel frees after a send makes the socket writable again
// and runs the kernel's wake-up path (sock_wfree, sock_def_write_space, the
// epoll callback) for an event nobody waits for: 1.3-2.2 % of a 4 KiB
// stream's CPU on loopback. A sender that finds its socket's buffer full
// (EAGAIN, rare: a UDP send buffer drains as the device takes the datagrams)
// waits in poll(2) instead, bounded by sendPoll so Close is never held up for
// long.

// sendPoll bounds one wait for a full send buffer to drain.
const sendPoll = 10 // ms

// unpolledSock is a socket the runtime's poller does not watch, as a
// syscall.RawConn: Control and Write run their function on the descriptor
// under a read lock, so Close (the write lock) never closes it, and the
// kernel never reuses its number, while a function still uses it.
type unpolledSock struct {
	fd     int
	mu     sync.RWMutex
	closed bool
}

var _ syscall.RawConn = (*unpolledSock)(nil)

// errUnpolledRead: nothing reads a send-only socket.
var errUnpolledRead = errors.New("link: read on a send-only socket")

// openUnpolled binds a send-only socket to ap outside the runtime's poller.
func (u *UDP) openUnpolled(ap netip.AddrPort, role sockRole) (*unpolledSock, error) {
	fd, err := u.bindSocket(ap, role)
	if err != nil {
		return nil, err
	}
	return &unpolledSock{fd: fd}, nil
}

// bindSocket opens a non-blocking UDP socket in the link's network
// namespace, sets the options role needs and binds it to ap.
func (u *UDP) bindSocket(ap netip.AddrPort, role sockRole) (int, error) {
	family, sa := u.sockaddr(ap)
	var fd int
	err := u.netns.do(func() (err error) {
		fd, err = unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
		return err
	})
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := u.setSockopts(fd, role, false); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind %v: %w", ap, err)
	}
	return fd, nil
}

// sockaddr is ap as the link's address family and a sockaddr to bind. A
// link-local address's zone is an interface name or index (fe80::1%eth0, as
// the net package takes it); the kernel wants the index (zoneIndex).
func (u *UDP) sockaddr(ap netip.AddrPort) (int, unix.Sockaddr) {
	if u.is6 {
		return unix.AF_INET6, &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port()), ZoneId: u.zoneIndex(ap.Addr().Zone())}
	}
	return unix.AF_INET, &unix.SockaddrInet4{Addr: ap.Addr().Unmap().As4(), Port: int(ap.Port())}
}

// Control runs f on the descriptor.
func (s *unpolledSock) Control(f func(fd uintptr)) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return net.ErrClosed
	}
	f(uintptr(s.fd))
	return nil
}

// Read is not supported: the socket only sends.
func (s *unpolledSock) Read(func(fd uintptr) bool) error { return errUnpolledRead }

// Write runs f until it reports done, waiting in poll(2) for room in the
// send buffer whenever it does not (EAGAIN).
func (s *unpolledSock) Write(f func(fd uintptr) bool) error {
	for {
		s.mu.RLock()
		if s.closed {
			s.mu.RUnlock()
			return net.ErrClosed
		}
		if f(uintptr(s.fd)) {
			s.mu.RUnlock()
			return nil
		}
		err := waitWritable(s.fd)
		s.mu.RUnlock()
		if err != nil {
			return err
		}
	}
}

// waitWritable waits up to sendPoll for fd to take a datagram.
func waitWritable(fd int) error {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	for {
		_, err := unix.Poll(pfd, sendPoll)
		if err != unix.EINTR {
			return err
		}
	}
}

// Close closes the socket once no function uses it. Later calls return nil.
func (s *unpolledSock) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return unix.Close(s.fd)
}
