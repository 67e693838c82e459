//go:build linux

package link

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	sockaddrLen = unix.SizeofSockaddrInet6 // room for either family
	// oobLen is the control space per datagram: on read PKTINFO, TOS or
	// traffic class, TTL or hop limit, flow info and UDP_GRO; on write
	// UDP_SEGMENT, TOS and TTL. The largest is IPv6 read: 40 + 4*24.
	oobLen = 160
)

// mmsghdr is struct mmsghdr; Go's layout matches C's on every Linux ABI.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// mmsgScratch is the per-call storage for one recvmmsg/sendmmsg: batch
// headers, their names and control space, and an iovec arena that grows to
// the largest gather list seen (so steady state does not allocate). A
// scratch is used by one goroutine at a time (it lives in UDP.scratch).
type mmsgScratch struct {
	hs    []mmsghdr
	names [][sockaddrLen]byte
	oob   []byte
	iovs  []unix.Iovec // arena; entry i uses iovs[iovAt[i]:iovAt[i]+iovlen]
	iovAt []int

	// Per write entry: the message it belongs to, the byte offset in that
	// message where it starts, its segment count, its kind (entryPlain,
	// entryGSO, entrySegment), and a re-keyed ICRC trailer when it needs one.
	owner []int
	start []int
	segs  []int
	kind  []uint8
	icrc  [][4]byte
	g     gather // the message being packed

	// Arguments and results of the bound syscall functions, so that the
	// closures passed to RawConn are created once (no per-call allocation).
	count  int
	n      int
	errno  syscall.Errno
	recvFn func(fd uintptr) bool
	sendFn func(fd uintptr) bool
	got    bool             // pollFn's result: something was read
	pollFn func(fd uintptr) // one recvmmsg that does not wait (RawConn.Control)
}

func newMmsgScratch(batch int) *mmsgScratch {
	s := &mmsgScratch{
		hs:    make([]mmsghdr, batch),
		names: make([][sockaddrLen]byte, batch),
		oob:   make([]byte, batch*oobLen),
		iovs:  make([]unix.Iovec, batch),
		iovAt: make([]int, batch),
		owner: make([]int, batch),
		start: make([]int, batch),
		segs:  make([]int, batch),
		kind:  make([]uint8, batch),
		icrc:  make([][4]byte, batch),
	}
	for i := range s.hs {
		s.hs[i].hdr.Name = &s.names[i][0]
	}
	s.recvFn = s.recv
	s.sendFn = s.send
	s.pollFn = func(fd uintptr) { s.got = s.recv(fd) }
	return s
}

func (s *mmsgScratch) recv(fd uintptr) bool {
	return s.mmsg(unix.SYS_RECVMMSG, fd)
}

func (s *mmsgScratch) send(fd uintptr) bool {
	return s.mmsg(unix.SYS_SENDMMSG, fd)
}

// mmsg runs one non-blocking recvmmsg/sendmmsg on hs[:count]. It returns
// false (wait for readiness) on EAGAIN, as syscall.RawConn expects.
func (s *mmsgScratch) mmsg(trap uintptr, fd uintptr) bool {
	for {
		n, _, e := unix.Syscall6(trap, fd, uintptr(unsafe.Pointer(&s.hs[0])), uintptr(s.count), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		s.n, s.errno = int(n), e
		return true
	}
}

// iov returns room for k more iovecs at the end of the arena, growing it
// (rarely: the arena keeps its size) if needed. used is how many are taken.
func (s *mmsgScratch) iov(used, k int) []unix.Iovec {
	if used+k > len(s.iovs) {
		n := make([]unix.Iovec, max(2*len(s.iovs), used+k))
		copy(n, s.iovs[:used])
		s.iovs = n
	}
	return s.iovs[used : used+k]
}

// point sets entry i's iovec pointer once the arena stopped growing.
func (s *mmsgScratch) point(i, at, n int) {
	h := &s.hs[i].hdr
	if n == 0 {
		h.Iov = nil
	} else {
		h.Iov = &s.iovs[at]
	}
	h.SetIovlen(n)
}

// clear drops the references to caller buffers so the pool does not keep
// them alive.
func (s *mmsgScratch) clear(used int) {
	for i := range s.iovs[:used] {
		s.iovs[i].Base = nil
	}
}
