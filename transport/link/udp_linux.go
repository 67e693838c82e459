//go:build linux

package link

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// RoCEv2Port is the IANA UDP destination port of RoCEv2.
const RoCEv2Port = 4791

// udpNoCheck6RX is UDP_NO_CHECK6_RX; 102 on every Linux architecture.
const udpNoCheck6RX = unix.UDP_NO_CHECK6_RX

const (
	sockaddrLen = unix.SizeofSockaddrInet6 // room for either family
	oobLen      = 128                      // PKTINFO + TOS/TCLASS cmsgs, with slack
)

// UDP is a Link over one UDP socket bound to a single local address, using
// recvmmsg/sendmmsg. See the package documentation for the socket options it
// sets and why.
type UDP struct {
	conn    *net.UDPConn
	rc      syscall.RawConn
	local   netip.AddrPort
	is6     bool
	batch   int
	zone    string // zone of local, reused for link-local peers on the same link
	zoneIdx uint32

	rcvbuf, sndbuf int // what the kernel granted

	// Send-only sockets for SourcePort: the map is copied on write, so
	// WriteBatch reads it without a lock.
	ports     atomic.Pointer[map[uint16]syscall.RawConn]
	portsMu   sync.Mutex // guards the fields below and writes of ports
	portConns []*net.UDPConn
	refused   map[uint16]bool // ports whose bind failed: not retried
	maxPorts  int
	sockbuf   int
	zeroCsum6 bool

	closed    atomic.Bool
	truncated atomic.Uint64

	scratch sync.Pool // *mmsgScratch, one per concurrent ReadBatch/WriteBatch
}

var _ Link = (*UDP)(nil)

// ListenUDP opens a UDP link bound to local, which must be a specific unicast
// address (the device's IP: rxe checks that RC packets come from the address
// in the peer's GID). Port 0 picks an ephemeral port (tests); production uses
// RoCEv2Port. If the port is taken the error satisfies
// errors.Is(err, syscall.EADDRINUSE); a loaded rdma_rxe module typically
// holds 4791.
func ListenUDP(local netip.AddrPort, cfg Config) (*UDP, error) {
	addr := local.Addr().Unmap()
	if !addr.IsValid() || addr.IsUnspecified() || addr.IsMulticast() {
		return nil, fmt.Errorf("link: listen %v: need a specific unicast address: %w", local, syscall.EINVAL)
	}
	if addr.Zone() != "" && !addr.Is6() {
		return nil, fmt.Errorf("link: listen %v: zone on an IPv4 address: %w", local, syscall.EINVAL)
	}
	local = netip.AddrPortFrom(addr, local.Port())
	is6 := addr.Is6()
	network := "udp4"
	if is6 {
		network = "udp6"
	}
	sockbuf := cfg.socketBuffer()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = setSockopts(int(fd), is6, sockbuf, cfg.ZeroChecksum6) }); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, local.String())
	if err != nil {
		return nil, fmt.Errorf("link: listen %v: %w", local, err)
	}
	conn := pc.(*net.UDPConn)
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("link: listen %v: %w", local, err)
	}
	u := &UDP{
		conn:      conn,
		rc:        rc,
		local:     netip.AddrPortFrom(addr, conn.LocalAddr().(*net.UDPAddr).AddrPort().Port()),
		is6:       is6,
		batch:     cfg.batchSize(),
		zone:      addr.Zone(),
		refused:   map[uint16]bool{},
		maxPorts:  cfg.maxSourcePorts(),
		sockbuf:   sockbuf,
		zeroCsum6: cfg.ZeroChecksum6,
	}
	u.ports.Store(&map[uint16]syscall.RawConn{})
	if u.zone != "" {
		if ifi, err := net.InterfaceByName(u.zone); err == nil {
			u.zoneIdx = uint32(ifi.Index)
		} else if n, err := strconv.ParseUint(u.zone, 10, 32); err == nil {
			u.zoneIdx = uint32(n)
		}
	}
	_ = rc.Control(func(fd uintptr) {
		u.rcvbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		u.sndbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	u.scratch.New = func() any { return newMmsgScratch(u.batch) }
	return u, nil
}

// setSockopts runs before bind. Options that interop depends on are fatal;
// buffer sizes are best effort.
func setSockopts(fd int, is6 bool, sockbuf int, zeroCsum6 bool) error {
	type opt struct {
		level, name, value int
		what               string
	}
	var opts []opt
	if is6 {
		opts = []opt{
			// No fragmentation, same as IPv4 (RoCE never fragments).
			{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER"},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1, "IPV6_RECVPKTINFO"},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS"},
			// rxe sends UDP checksum 0 over IPv6 (RFC 6936 style); Linux
			// drops those unless the socket opts in.
			{unix.IPPROTO_UDP, udpNoCheck6RX, 1, "UDP_NO_CHECK6_RX"},
		}
		if zeroCsum6 {
			opts = append(opts, opt{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1, "UDP_NO_CHECK6_TX"})
		}
	} else {
		opts = []opt{
			// DF on an unconnected socket makes Linux send IPv4 ID 0, which
			// the ICRC covers (see doc.go).
			{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, "IP_MTU_DISCOVER"},
			{unix.IPPROTO_IP, unix.IP_PKTINFO, 1, "IP_PKTINFO"},
			{unix.IPPROTO_IP, unix.IP_RECVTOS, 1, "IP_RECVTOS"},
		}
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			return fmt.Errorf("setsockopt %s: %w", o.what, err)
		}
	}
	if sockbuf > 0 {
		setBuf(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, sockbuf)
		setBuf(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, sockbuf)
	}
	return nil
}

// setBuf tries the FORCE option (needs CAP_NET_ADMIN) and falls back to the
// clamped one. Failure only costs performance, so it is not an error.
func setBuf(fd, force, plain, n int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, n) == nil {
		return
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, n)
}

// LocalAddr returns the bound address and port.
func (u *UDP) LocalAddr() netip.AddrPort { return u.local }

// BatchSize returns the configured messages per system call.
func (u *UDP) BatchSize() int { return u.batch }

// SocketBuffers reports the SO_RCVBUF and SO_SNDBUF sizes the kernel granted
// (Linux reports twice the requested value, its bookkeeping overhead).
func (u *UDP) SocketBuffers() (recv, send int) { return u.rcvbuf, u.sndbuf }

// Truncated counts datagrams larger than the read buffer; they are dropped.
func (u *UDP) Truncated() uint64 { return u.truncated.Load() }

// SourcePort implements Link: it opens a send-only socket bound to the
// link's address and port, with the same options as the main socket, so
// that datagrams can leave from it. It says false when the port is taken
// (rxe draws from 49152-65535, the kernel's ephemeral range), when
// Config.MaxSourcePorts sockets are open, or after Close.
func (u *UDP) SourcePort(port uint16) bool {
	if port == 0 || port == u.local.Port() {
		return true
	}
	u.portsMu.Lock()
	defer u.portsMu.Unlock()
	m := *u.ports.Load()
	if _, ok := m[port]; ok {
		return true
	}
	if u.closed.Load() || u.refused[port] || len(m) >= u.maxPorts {
		return false
	}
	conn, rc, err := u.openSender(port)
	if err != nil {
		u.refused[port] = true
		return false
	}
	nm := make(map[uint16]syscall.RawConn, len(m)+1)
	for k, v := range m {
		nm[k] = v
	}
	nm[port] = rc
	u.ports.Store(&nm)
	u.portConns = append(u.portConns, conn)
	return true
}

// openSender binds a socket for sending from port. Nothing reads it, so its
// receive buffer is the kernel's minimum: a stray datagram costs little.
func (u *UDP) openSender(port uint16) (*net.UDPConn, syscall.RawConn, error) {
	network := "udp4"
	if u.is6 {
		network = "udp6"
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			if serr = setSockopts(int(fd), u.is6, u.sockbuf, u.zeroCsum6); serr == nil {
				_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 0)
			}
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(u.local.Addr(), port).String())
	if err != nil {
		return nil, nil, err
	}
	conn := pc.(*net.UDPConn)
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, rc, nil
}

// sender is the socket that sends from port.
func (u *UDP) sender(port uint16) (syscall.RawConn, error) {
	if port == 0 || port == u.local.Port() {
		return u.rc, nil
	}
	if rc, ok := (*u.ports.Load())[port]; ok {
		return rc, nil
	}
	return nil, fmt.Errorf("link: write from %v port %d: not granted by SourcePort: %w", u.local.Addr(), port, syscall.EINVAL)
}

// Close closes the sockets and unblocks ReadBatch. Later calls return nil.
func (u *UDP) Close() error {
	if u.closed.Swap(true) {
		return nil
	}
	u.portsMu.Lock()
	for _, c := range u.portConns {
		c.Close()
	}
	u.portConns = nil
	u.ports.Store(&map[uint16]syscall.RawConn{})
	u.portsMu.Unlock()
	return u.conn.Close()
}

// mmsghdr is struct mmsghdr; Go's layout matches C's on every Linux ABI.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
}

// mmsgScratch is the per-call storage for one recvmmsg/sendmmsg. The header
// array points into the scratch's own name and control arrays once, at
// creation; a call only sets the iovec base and the lengths. A scratch is used
// by one goroutine at a time (it lives in UDP.scratch).
type mmsgScratch struct {
	hs    []mmsghdr
	iovs  []unix.Iovec
	names [][sockaddrLen]byte
	oob   []byte

	// Arguments and results of the bound syscall functions, so that the
	// closures passed to RawConn are created once (no per-call allocation).
	count  int
	n      int
	errno  syscall.Errno
	recvFn func(fd uintptr) bool
	sendFn func(fd uintptr) bool
}

func newMmsgScratch(batch int) *mmsgScratch {
	s := &mmsgScratch{
		hs:    make([]mmsghdr, batch),
		iovs:  make([]unix.Iovec, batch),
		names: make([][sockaddrLen]byte, batch),
		oob:   make([]byte, batch*oobLen),
	}
	for i := range s.hs {
		h := &s.hs[i].hdr
		h.Name = &s.names[i][0]
		h.Iov = &s.iovs[i]
		h.SetIovlen(1)
	}
	s.recvFn = s.recv
	s.sendFn = s.send
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

// clear drops the references to caller buffers so the pool does not keep
// them alive.
func (s *mmsgScratch) clear(n int) {
	for i := range s.iovs[:n] {
		s.iovs[i].Base = nil
	}
}

// ReadBatch implements Link. Datagrams larger than their buffer are dropped
// and counted in Truncated. It does not allocate in steady state.
func (u *UDP) ReadBatch(msgs []Message) (int, error) {
	if len(msgs) > u.batch {
		msgs = msgs[:u.batch]
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	for i := range msgs {
		if cap(msgs[i].Buf) == 0 {
			return 0, fmt.Errorf("link: read: message %d has no buffer: %w", i, syscall.EINVAL)
		}
	}
	s := u.scratch.Get().(*mmsgScratch)
	defer u.scratch.Put(s)
	for {
		for i := range msgs {
			b := msgs[i].Buf[:cap(msgs[i].Buf)]
			s.iovs[i].Base = &b[0]
			s.iovs[i].SetLen(len(b))
			h := &s.hs[i]
			h.hdr.Namelen = sockaddrLen
			h.hdr.Control = &s.oob[i*oobLen]
			h.hdr.SetControllen(oobLen)
			h.hdr.Flags = 0
			h.len = 0
		}
		s.count = len(msgs)
		err := u.rc.Read(s.recvFn)
		s.clear(len(msgs))
		if err != nil {
			return 0, fmt.Errorf("link: read %v: %w", u.local, err)
		}
		if s.errno != 0 {
			return 0, fmt.Errorf("link: recvmmsg on %v: %w", u.local, s.errno)
		}
		n := 0
		for i := 0; i < s.n; i++ {
			h := &s.hs[i]
			if h.hdr.Flags&unix.MSG_TRUNC != 0 {
				u.truncated.Add(1)
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
			m.Addr = u.parseName(s.names[i][:h.hdr.Namelen])
			m.Local, m.TOS = parseControl(s.oob[i*oobLen:i*oobLen+int(h.hdr.Controllen)], u.is6)
			if m.Local.Is6() && m.Local.IsLinkLocalUnicast() && u.zone != "" {
				m.Local = m.Local.WithZone(u.zone)
			}
			n++
		}
		if n > 0 {
			raceAcquireIO()
			return n, nil
		}
	}
}

// WriteBatch implements Link: each run of messages with one SrcPort goes out
// through that port's socket. It does not allocate in steady state.
func (u *UDP) WriteBatch(msgs []Message) (int, error) {
	raceReleaseIO()
	s := u.scratch.Get().(*mmsgScratch)
	defer u.scratch.Put(s)
	sent := 0
	for sent < len(msgs) {
		port := msgs[sent].SrcPort
		end := sent + 1
		for end < len(msgs) && msgs[end].SrcPort == port {
			end++
		}
		rc, err := u.sender(port)
		if err != nil {
			return sent, err
		}
		n, err := u.writeRun(s, rc, msgs[sent:end])
		sent += n
		if err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// writeRun sends msgs through rc in sendmmsg batches.
func (u *UDP) writeRun(s *mmsgScratch, rc syscall.RawConn, msgs []Message) (int, error) {
	sent := 0
	for sent < len(msgs) {
		chunk := msgs[sent:]
		if len(chunk) > u.batch {
			chunk = chunk[:u.batch]
		}
		k := 0 // messages packed
		var packErr error
		for i := range chunk {
			nl, err := u.putName(&s.names[i], chunk[i].Addr)
			if err != nil {
				packErr = err
				break
			}
			h := &s.hs[i]
			h.hdr.Namelen = uint32(nl)
			h.hdr.Control = nil
			h.hdr.SetControllen(0)
			h.hdr.Flags = 0
			h.len = 0
			if b := chunk[i].Buf; len(b) > 0 {
				s.iovs[i].Base = &b[0]
			} else {
				s.iovs[i].Base = nil
			}
			s.iovs[i].SetLen(len(chunk[i].Buf))
			k++
		}
		for done := 0; done < k; {
			// sendmmsg may stop early; resume from the first unsent.
			s.count = k - done
			hs := s.hs
			s.hs = s.hs[done:]
			err := rc.Write(s.sendFn)
			s.hs = hs
			if err != nil {
				s.clear(k)
				return sent + done, fmt.Errorf("link: write %v: %w", u.local, err)
			}
			if s.errno != 0 {
				s.clear(k)
				return sent + done, fmt.Errorf("link: sendmmsg %v to %v: %w", u.local, chunk[done].Addr, s.errno)
			}
			done += s.n
		}
		s.clear(k)
		sent += k
		if packErr != nil {
			return sent, packErr
		}
	}
	return sent, nil
}

// putName encodes ap as a sockaddr for this socket's family and returns its
// length.
func (u *UDP) putName(b *[sockaddrLen]byte, ap netip.AddrPort) (int, error) {
	a := ap.Addr()
	if !u.is6 {
		a = a.Unmap()
		if !a.Is4() {
			return 0, fmt.Errorf("link: write from %v to %v: %w", u.local, ap, syscall.EAFNOSUPPORT)
		}
		binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET)
		binary.BigEndian.PutUint16(b[2:4], ap.Port())
		a4 := a.As4()
		copy(b[4:8], a4[:])
		clear(b[8:unix.SizeofSockaddrInet4])
		return unix.SizeofSockaddrInet4, nil
	}
	if !a.Is6() || a.Is4In6() {
		return 0, fmt.Errorf("link: write from %v to %v: %w", u.local, ap, syscall.EAFNOSUPPORT)
	}
	binary.NativeEndian.PutUint16(b[0:2], unix.AF_INET6)
	binary.BigEndian.PutUint16(b[2:4], ap.Port())
	clear(b[4:8]) // flow info
	a16 := a.As16()
	copy(b[8:24], a16[:])
	var scope uint32
	if z := a.Zone(); z != "" {
		scope = u.zoneIndex(z)
	} else if a.IsLinkLocalUnicast() {
		// A GID carries no zone: an unzoned link-local peer is on our own link.
		scope = u.zoneIdx
	}
	binary.NativeEndian.PutUint32(b[24:28], scope)
	return unix.SizeofSockaddrInet6, nil
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

// parseControl walks the control messages of one received datagram and
// returns the destination address (PKTINFO) and the TOS / traffic class.
// Malformed or unknown messages are skipped; it never panics.
func parseControl(b []byte, is6 bool) (local netip.Addr, tos uint8) {
	const align = int(unsafe.Sizeof(uintptr(0)))
	hdrLen := unix.SizeofCmsghdr
	dataOff := (hdrLen + align - 1) &^ (align - 1)
	for len(b) >= hdrLen {
		var l int
		var level, typ int32
		if hdrLen == 16 {
			l64 := binary.NativeEndian.Uint64(b[0:8])
			if l64 > uint64(len(b)) {
				return
			}
			l = int(l64)
			level = int32(binary.NativeEndian.Uint32(b[8:12]))
			typ = int32(binary.NativeEndian.Uint32(b[12:16]))
		} else {
			l = int(binary.NativeEndian.Uint32(b[0:4]))
			level = int32(binary.NativeEndian.Uint32(b[4:8]))
			typ = int32(binary.NativeEndian.Uint32(b[8:12]))
		}
		if l < dataOff || l > len(b) {
			return
		}
		data := b[dataOff:l]
		switch {
		case !is6 && level == unix.IPPROTO_IP && typ == unix.IP_PKTINFO && len(data) >= unix.SizeofInet4Pktinfo:
			local = netip.AddrFrom4([4]byte(data[8:12])) // ipi_addr: the header destination
		case !is6 && level == unix.IPPROTO_IP && typ == unix.IP_TOS && len(data) >= 1:
			tos = data[0]
		case is6 && level == unix.IPPROTO_IPV6 && typ == unix.IPV6_PKTINFO && len(data) >= unix.SizeofInet6Pktinfo:
			local = netip.AddrFrom16([16]byte(data[0:16]))
		case is6 && level == unix.IPPROTO_IPV6 && typ == unix.IPV6_TCLASS && len(data) >= 4:
			tos = uint8(binary.NativeEndian.Uint32(data[0:4]))
		}
		next := (l + align - 1) &^ (align - 1)
		if next >= len(b) {
			return
		}
		b = b[next:]
	}
	return
}
