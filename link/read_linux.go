//go:build linux

package link

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// reader is one receive socket: the main socket, a SO_REUSEPORT sibling, or
// a multicast group's socket.
type reader struct {
	u     *UDP
	conn  *net.UDPConn
	rc    syscall.RawConn
	group netip.Addr // the group of a multicast reader

	gro   atomic.Bool // UDP_GRO is on
	groMu sync.Mutex  // serialises turning it on
}

// ReadBatch implements Link: it reads the first receive socket (see
// ReceiveFuncs for the others). Datagrams larger than their buffer are
// dropped and counted in Truncated. It does not allocate in steady state.
//
// GRO: the first read whose buffers all have capacity MaxTrain turns
// UDP_GRO on for the socket (unless Config.NoGRO or the kernel lacks it).
// From then on a run of datagrams the kernel coalesced arrives as one
// message with SegSize set (split it with Message.Segment, no copy), and
// reads must keep passing MaxTrain buffers: a train that does not fit its
// buffer is dropped and counted in Truncated. Reads with smaller buffers
// never turn GRO on and get one datagram per message, as before.
func (u *UDP) ReadBatch(msgs []Message) (int, error) { return u.readers[0].read(msgs) }

// PollFuncs implements Poller: each receive socket read without waiting.
// The read goes through the socket's descriptor directly (RawConn.Control),
// not through the poller's read lock, which a reader goroutine parked in
// ReadBatch holds.
func (u *UDP) PollFuncs() []ReceiveFunc {
	fns := make([]ReceiveFunc, len(u.readers))
	for i, r := range u.readers {
		fns[i] = r.poll
	}
	return fns
}

// WaitFuncs implements Waiter: each receive socket waited on until a
// datagram is queued.
func (u *UDP) WaitFuncs() []WaitFunc {
	fns := make([]WaitFunc, len(u.readers))
	for i, r := range u.readers {
		fns[i] = r.wait
	}
	return fns
}

// wait blocks until the socket has a datagram queued. The check is a
// zero-length MSG_PEEK read inside RawConn.Read, after the poller's readiness
// is reset, so a datagram that arrives between a reader's last empty read
// and this wait is never missed (a readiness wait alone, edge-triggered,
// would sleep on a datagram already queued).
func (r *reader) wait() error {
	if err := r.rc.Read(peekQueued); err != nil {
		return fmt.Errorf("link: wait %v: %w", r.where(), err)
	}
	return nil
}

// peekQueued reports whether a datagram is queued on fd (or an error is
// pending, which the next read reports), for RawConn.Read.
func peekQueued(fd uintptr) bool {
	for {
		_, _, e := unix.Syscall6(unix.SYS_RECVFROM, fd, 0, 0, unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		}
		return true
	}
}

func (r *reader) where() string {
	if r.group.IsValid() {
		return netip.AddrPortFrom(r.group, r.u.local.Port()).String()
	}
	return r.u.local.String()
}

// enableGRO turns UDP_GRO on for the socket, once. A kernel without it
// (before 5.0) is remembered for the whole link.
func (r *reader) enableGRO() {
	r.groMu.Lock()
	defer r.groMu.Unlock()
	if r.gro.Load() || !r.u.groAllowed.Load() {
		return
	}
	var serr error
	if err := r.rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_GRO, 1)
	}); err != nil {
		return // closed
	}
	if serr != nil {
		r.u.groAllowed.Store(false)
		r.u.logf("link: UDP GRO off: the kernel refused UDP_GRO", "err", serr)
		return
	}
	r.gro.Store(true)
}

func (r *reader) read(msgs []Message) (int, error) { return r.recv(msgs, true) }

func (r *reader) poll(msgs []Message) (int, error) { return r.recv(msgs, false) }

// recv reads one batch into msgs; without wait it returns (0, nil) when
// nothing is queued.
func (r *reader) recv(msgs []Message, wait bool) (int, error) {
	u := r.u
	if len(msgs) > u.batch {
		msgs = msgs[:u.batch]
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	big := true
	for i := range msgs {
		c := cap(msgs[i].Buf)
		if c == 0 {
			return 0, fmt.Errorf("link: read: message %d has no buffer: %w", i, syscall.EINVAL)
		}
		big = big && c >= MaxTrain
	}
	if big && !r.gro.Load() && u.groAllowed.Load() {
		r.enableGRO()
	}
	s := u.scratch.Get().(*mmsgScratch)
	defer u.scratch.Put(s)
	for {
		for i := range msgs {
			b := msgs[i].Buf[:cap(msgs[i].Buf)]
			s.iovs[i].Base = &b[0]
			s.iovs[i].SetLen(len(b))
			s.point(i, i, 1)
			h := &s.hs[i]
			h.hdr.Namelen = sockaddrLen
			h.hdr.Control = &s.oob[i*oobLen]
			h.hdr.SetControllen(oobLen)
			h.hdr.Flags = 0
			h.len = 0
		}
		s.count = len(msgs)
		s.got = true
		var err error
		if wait {
			err = r.rc.Read(s.recvFn)
		} else {
			err = r.rc.Control(s.pollFn)
		}
		s.clear(len(msgs))
		if err != nil {
			return 0, fmt.Errorf("link: read %v: %w", r.where(), err)
		}
		if !s.got {
			return 0, nil // nothing queued
		}
		if s.errno != 0 {
			return 0, fmt.Errorf("link: recvmmsg on %v: %w", r.where(), s.errno)
		}
		if n := r.fill(s, msgs); n > 0 || !wait {
			raceAcquireIO()
			return n, nil
		}
	}
}

// fill turns the s.n received entries into msgs, dropping truncated ones,
// and returns how many it kept.
func (r *reader) fill(s *mmsgScratch, msgs []Message) int {
	u := r.u
	n := 0
	for i := 0; i < s.n; i++ {
		h := &s.hs[i]
		if h.hdr.Flags&unix.MSG_TRUNC != 0 {
			u.c.truncated.Add(1)
			continue
		}
		m := &msgs[n]
		if n != i {
			// Compact by copying, never by swapping slices: callers keep
			// their own index -> buffer table (see Link.ReadBatch).
			m.Buf = append(m.Buf[:0], msgs[i].Buf[:h.len]...)
		} else {
			m.Buf = m.Buf[:h.len]
		}
		m.Pieces = nil
		m.Addr = u.parseName(s.names[i][:h.hdr.Namelen])
		meta := parseControl(s.oob[i*oobLen:i*oobLen+int(h.hdr.Controllen)], u.is6)
		m.Local, m.TOS, m.TTL, m.FlowLabel, m.SrcPort = meta.local, meta.tos, meta.ttl, meta.flow, 0
		if u.zone != "" && needsZone(m.Local) {
			m.Local = m.Local.WithZone(u.zone)
		}
		m.SegSize = 0
		if meta.gro > 0 && int(h.len) > meta.gro {
			m.SegSize = meta.gro
			u.c.groTrains.Add(1)
			u.c.groSegments.Add(uint64(m.NumSegments()))
		}
		n++
	}
	return n
}

// parseName decodes a received sockaddr_in / sockaddr_in6.
func (u *UDP) parseName(b []byte) netip.AddrPort {
	if len(b) < 2 {
		return netip.AddrPort{}
	}
	switch binary.NativeEndian.Uint16(b[0:2]) {
	case unix.AF_INET:
		if len(b) < 8 {
			return netip.AddrPort{}
		}
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4]))
	case unix.AF_INET6:
		if len(b) < 28 {
			return netip.AddrPort{}
		}
		a := netip.AddrFrom16([16]byte(b[8:24]))
		if scope := binary.NativeEndian.Uint32(b[24:28]); scope != 0 && a.IsLinkLocalUnicast() {
			if scope == u.zoneIdx && u.zone != "" {
				a = a.WithZone(u.zone)
			} else {
				a = a.WithZone(strconv.FormatUint(uint64(scope), 10))
			}
		}
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[2:4]))
	}
	return netip.AddrPort{}
}

func (u *UDP) zoneIndex(z string) uint32 {
	if z == u.zone {
		return u.zoneIdx
	}
	if ifi, err := net.InterfaceByName(z); err == nil {
		return uint32(ifi.Index)
	}
	n, _ := strconv.ParseUint(z, 10, 32)
	return uint32(n)
}
