//go:build linux

package link

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// RoCEv2Port is the IANA UDP destination port of RoCEv2.
const RoCEv2Port = 4791

// IPv6 socket options golang.org/x/sys/unix does not name (linux/in6.h).
const (
	ipv6Flowinfo     = 11 // IPV6_FLOWINFO: receive the flow info as a cmsg
	ipv6FlowlabelMgr = 32 // IPV6_FLOWLABEL_MGR: lease a flow label
	ipv6FlowinfoSend = 33 // IPV6_FLOWINFO_SEND: send sin6_flowinfo's label
)

// UDP is a Link over UDP sockets bound to a single local address, using
// recvmmsg/sendmmsg: one socket that reads and sends from the bound port,
// Config.Readers-1 more readers on the same port (SO_REUSEPORT), send-only
// sockets for extra source ports, and a socket per joined multicast group.
// See the package documentation for the socket options it sets and why.
type UDP struct {
	main    *sendSock // the bound port's socket, also readers[0]
	readers []*reader
	local   netip.AddrPort
	is6     bool
	batch   int
	zone    string // zone of local, reused for link-local peers on the same link
	zoneIdx uint32
	ifindex int     // the interface that holds local (multicast), 0 if unknown
	netns   netnsOf // where later sockets are opened

	rcvbuf, sndbuf int // what the kernel granted
	defTTL, mcTTL  int // the sockets' unicast and multicast TTL / hop limit

	// Send-only sockets for SourcePort: the map is copied on write, so
	// WriteBatch reads it without a lock.
	ports     atomic.Pointer[map[uint16]*sendSock]
	portsMu   sync.Mutex // guards the fields below, writes of ports, and groups
	portConns []*unpolledSock
	refused   map[uint16]bool // ports whose bind failed: not retried
	groups    map[netip.Addr]*reader
	maxPorts  int
	cfg       Config

	gso        atomic.Bool // trains go out as UDP_SEGMENT super-datagrams
	groAllowed atomic.Bool // UDP_GRO may be enabled on readers
	log        *slog.Logger
	gsoLogOnce sync.Once
	flLogOnce  sync.Once

	closed atomic.Bool
	c      counters

	scratch sync.Pool // *mmsgScratch, one per concurrent read or write
}

var (
	_ Link        = (*UDP)(nil)
	_ Receivers   = (*UDP)(nil)
	_ Poller      = (*UDP)(nil)
	_ Multicaster = (*UDP)(nil)
)

// counters are the link's event counts; Counters snapshots them.
type counters struct {
	truncated, gsoSends, gsoSegments, gsoFallbacks, gsoFallbackSegs,
	groTrains, groSegments, flowLabelRefused atomic.Uint64
}

// Counters is a snapshot of a UDP link's counters, for metrics.
type Counters struct {
	// Truncated counts datagrams (or GRO trains) larger than their read
	// buffer; they are dropped.
	Truncated uint64
	// GSOSends counts UDP GSO super-datagrams sent, GSOSegments the
	// datagrams inside them.
	GSOSends, GSOSegments uint64
	// GSOFallbacks counts the kernel's refusals of UDP_SEGMENT (EIO, EINVAL,
	// ENOPROTOOPT); the first turns GSO off for the link's life.
	// GSOFallbackSegments counts train segments sent one datagram each
	// since then (or because Config.NoGSO / an old kernel ruled GSO out).
	GSOFallbacks, GSOFallbackSegments uint64
	// GROTrains counts coalesced datagrams received (UDP_GRO), GROSegments
	// the datagrams inside them.
	GROTrains, GROSegments uint64
	// FlowLabelRefused counts IPv6 datagrams sent without the flow label
	// they asked for, because the kernel refused to lease it.
	FlowLabelRefused uint64
}

// Counters returns the link's counters.
func (u *UDP) Counters() Counters {
	return Counters{
		Truncated:           u.c.truncated.Load(),
		GSOSends:            u.c.gsoSends.Load(),
		GSOSegments:         u.c.gsoSegments.Load(),
		GSOFallbacks:        u.c.gsoFallbacks.Load(),
		GSOFallbackSegments: u.c.gsoFallbackSegs.Load(),
		GROTrains:           u.c.groTrains.Load(),
		GROSegments:         u.c.groSegments.Load(),
		FlowLabelRefused:    u.c.flowLabelRefused.Load(),
	}
}

// sendSock is one socket datagrams leave from, with the IPv6 flow labels it
// holds leases for.
type sendSock struct {
	rc     syscall.RawConn
	labels atomic.Pointer[map[uint32]bool] // leased (true) or refused (false); copied on write
	mu     sync.Mutex                      // serialises leasing
}

func newSendSock(rc syscall.RawConn) *sendSock {
	s := &sendSock{rc: rc}
	s.labels.Store(&map[uint32]bool{})
	return s
}

// sockRole says which options a socket needs.
type sockRole uint8

const (
	roleMain   sockRole = iota // reads and sends (the bound port)
	roleReader                 // reads only (SO_REUSEPORT siblings)
	roleSender                 // sends only (extra source ports)
	roleGroup                  // reads a multicast group
)

// ListenUDP opens a UDP link bound to local, which must be a specific unicast
// address (the device's IP: rxe checks that RC packets come from the address
// in the peer's GID). Port 0 picks an ephemeral port (tests); production uses
// RoCEv2Port. If the port is taken the error satisfies
// errors.Is(err, syscall.EADDRINUSE); a loaded rdma_rxe module typically
// holds 4791.
func ListenUDP(local netip.AddrPort, cfg Config) (*UDP, error) {
	u, err := newUDP(local, cfg)
	if err != nil {
		return nil, err
	}
	nr := cfg.readers()
	role := roleMain
	for i := 0; i < nr; i++ {
		conn, rc, err := u.open(u.local, role, nr > 1)
		if err != nil {
			u.closeReaders()
			u.netns.close()
			return nil, fmt.Errorf("link: listen %v: %w", u.local, err)
		}
		if i == 0 {
			// Port 0 picked a port: the other readers join it.
			u.local = netip.AddrPortFrom(u.local.Addr(), conn.LocalAddr().(*net.UDPAddr).AddrPort().Port())
			u.main = newSendSock(rc)
			role = roleReader
		}
		u.readers = append(u.readers, &reader{u: u, conn: conn, rc: rc})
	}
	u.finish()
	return u, nil
}

// FromFile makes a UDP link of a socket that is already bound, such as a
// slot of a steered SO_REUSEPORT group (package link/steer) handed over by
// another process. It sets the options ListenUDP sets before bind (all of
// them apply after bind too) and reads and sends through its own duplicate
// of f, so the caller closes f. Config.Readers is ignored: the link has the
// one socket. The socket must be a UDP socket bound to a specific unicast
// address, else EINVAL.
func FromFile(f *os.File, cfg Config) (*UDP, error) {
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("link: socket from file: %w", err)
	}
	conn, ok := pc.(*net.UDPConn)
	if !ok {
		pc.Close()
		return nil, fmt.Errorf("link: socket from file: not a UDP socket: %w", syscall.EINVAL)
	}
	local := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	u, err := newUDP(local, cfg)
	if err != nil {
		conn.Close()
		return nil, err
	}
	conn, rc, err := rawUDP(conn, nil)
	if err == nil {
		var serr error
		if err = rc.Control(func(fd uintptr) { serr = u.setSockopts(int(fd), roleMain, false) }); err == nil {
			err = serr
		}
	}
	if err != nil {
		if conn != nil {
			conn.Close()
		}
		u.netns.close()
		return nil, fmt.Errorf("link: socket from file %v: %w", local, err)
	}
	u.main = newSendSock(rc)
	u.readers = []*reader{{u: u, conn: conn, rc: rc}}
	u.finish()
	return u, nil
}

// newUDP checks local and sets up what every UDP link has before its
// sockets: configuration, namespace, interface.
func newUDP(local netip.AddrPort, cfg Config) (*UDP, error) {
	addr := local.Addr().Unmap()
	if !addr.IsValid() || addr.IsUnspecified() || addr.IsMulticast() {
		return nil, fmt.Errorf("link: listen %v: need a specific unicast address: %w", local, syscall.EINVAL)
	}
	if addr.Zone() != "" && !addr.Is6() {
		return nil, fmt.Errorf("link: listen %v: zone on an IPv4 address: %w", local, syscall.EINVAL)
	}
	u := &UDP{
		local:    netip.AddrPortFrom(addr, local.Port()),
		is6:      addr.Is6(),
		batch:    cfg.batchSize(),
		zone:     addr.Zone(),
		refused:  map[uint16]bool{},
		groups:   map[netip.Addr]*reader{},
		maxPorts: cfg.maxSourcePorts(),
		cfg:      cfg,
		mcTTL:    cfg.multicastTTL(),
		log:      cfg.Logger,
	}
	u.ports.Store(&map[uint16]*sendSock{})
	runtime.LockOSThread() // the namespace of the thread that binds the sockets
	u.netns = currentNetns()
	runtime.UnlockOSThread()
	if u.zone != "" {
		if ifi, err := net.InterfaceByName(u.zone); err == nil {
			u.zoneIdx = uint32(ifi.Index)
		} else if n, err := strconv.ParseUint(u.zone, 10, 32); err == nil {
			u.zoneIdx = uint32(n)
		}
	}
	u.ifindex = interfaceOf(addr, u.zoneIdx)
	u.scratch.New = func() any { return newMmsgScratch(u.batch) }
	return u, nil
}

// finish reads back what the kernel granted the main socket and decides GSO
// and GRO.
func (u *UDP) finish() {
	_ = u.main.rc.Control(func(fd uintptr) {
		u.rcvbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		u.sndbuf, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
		if u.is6 {
			u.defTTL, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_UNICAST_HOPS)
		} else {
			u.defTTL, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_TTL)
		}
	})
	u.gso.Store(u.probeGSO())
	u.groAllowed.Store(!u.cfg.NoGRO)
}

// probeGSO decides whether trains go out with UDP_SEGMENT: not if the
// config says so, not with IPv6 zero checksums (the kernel refuses GSO
// without a checksum), and not on a kernel that does not know the option
// (before 4.18). Refusals that depend on the route show up on send.
func (u *UDP) probeGSO() bool {
	if u.cfg.NoGSO {
		return false
	}
	if u.is6 && u.cfg.ZeroChecksum6 {
		u.logf("link: UDP GSO off: the kernel refuses it with UDP_NO_CHECK6_TX (ZeroChecksum6)")
		return false
	}
	var serr error
	if err := u.main.rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_SEGMENT, 0)
	}); err != nil || serr != nil {
		u.logf("link: UDP GSO off: the kernel does not support UDP_SEGMENT", "err", errors.Join(err, serr))
		return false
	}
	return true
}

func (u *UDP) logf(msg string, args ...any) {
	if u.log != nil {
		u.log.Info(msg, append([]any{"local", u.local.String()}, args...)...)
	}
}

// open binds one socket to ap with the options its role needs.
func (u *UDP) open(ap netip.AddrPort, role sockRole, reusePort bool) (*net.UDPConn, syscall.RawConn, error) {
	network := "udp4"
	if u.is6 {
		network = "udp6"
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = u.setSockopts(int(fd), role, reusePort) }); err != nil {
			return err
		}
		return serr
	}}
	var pc net.PacketConn
	err := u.netns.do(func() (err error) {
		pc, err = lc.ListenPacket(context.Background(), network, ap.String())
		return err
	})
	return rawUDP(pc, err)
}

// rawUDP returns the UDP socket behind pc and its RawConn.
func rawUDP(pc net.PacketConn, err error) (*net.UDPConn, syscall.RawConn, error) {
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

type sockopt struct {
	level, name, value int
	what               string
}

// setSockopts runs before bind. Options that interop depends on are fatal;
// buffer sizes and the multicast options are best effort.
func (u *UDP) setSockopts(fd int, role sockRole, reusePort bool) error {
	var opts []sockopt
	if u.is6 {
		opts = []sockopt{
			// No fragmentation, same as IPv4 (RoCE never fragments).
			{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO, "IPV6_MTU_DISCOVER"},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1, "IPV6_RECVPKTINFO"},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1, "IPV6_RECVTCLASS"},
			{unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1, "IPV6_RECVHOPLIMIT"},
			{unix.IPPROTO_IPV6, ipv6Flowinfo, 1, "IPV6_FLOWINFO"},
			{unix.IPPROTO_IPV6, ipv6FlowinfoSend, 1, "IPV6_FLOWINFO_SEND"},
			// rxe sends UDP checksum 0 over IPv6 (RFC 6936 style); Linux
			// drops those unless the socket opts in.
			{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1, "UDP_NO_CHECK6_RX"},
		}
		if u.cfg.ZeroChecksum6 {
			opts = append(opts, sockopt{unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_TX, 1, "UDP_NO_CHECK6_TX"})
		}
	} else {
		opts = []sockopt{
			// DF on an unconnected socket makes Linux send IPv4 ID 0, which
			// the ICRC covers (see doc.go).
			{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO, "IP_MTU_DISCOVER"},
			{unix.IPPROTO_IP, unix.IP_PKTINFO, 1, "IP_PKTINFO"},
			{unix.IPPROTO_IP, unix.IP_RECVTOS, 1, "IP_RECVTOS"},
			{unix.IPPROTO_IP, unix.IP_RECVTTL, 1, "IP_RECVTTL"},
		}
	}
	switch role {
	case roleMain, roleReader:
		if reusePort {
			opts = append(opts, sockopt{unix.SOL_SOCKET, unix.SO_REUSEPORT, 1, "SO_REUSEPORT"})
		}
	case roleGroup:
		opts = append(opts, sockopt{unix.SOL_SOCKET, unix.SO_REUSEADDR, 1, "SO_REUSEADDR"})
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			return fmt.Errorf("setsockopt %s: %w", o.what, err)
		}
	}
	if role == roleMain || role == roleSender {
		u.setMulticastSend(fd)
	}
	if sb := u.cfg.socketBuffer(); sb > 0 {
		if role != roleSender {
			setBuf(fd, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, sb)
		}
		if role == roleMain || role == roleSender {
			setBuf(fd, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, sb)
		}
	}
	if role == roleSender {
		// Nothing reads it: a stray datagram should cost little.
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 0)
	}
	return nil
}

// setMulticastSend points a sending socket's multicast datagrams at the
// device's interface, with the configured TTL. Without IP_MULTICAST_IF the
// kernel routes a group by the routing table, which often sends it out of
// the default route's interface instead of ours.
func (u *UDP) setMulticastSend(fd int) {
	if u.is6 {
		if u.ifindex != 0 {
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, u.ifindex)
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, u.mcTTL)
		return
	}
	if u.ifindex != 0 {
		_ = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(u.ifindex)})
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, u.mcTTL)
}

// setBuf tries the FORCE option (needs CAP_NET_ADMIN) and falls back to the
// clamped one. Failure only costs performance, so it is not an error.
func setBuf(fd, force, plain, n int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, n) == nil {
		return
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, n)
}

// interfaceOf returns the index of the interface that holds a: the zone's
// for a zoned address, else the interface with a as one of its addresses,
// else a loopback interface whose prefix contains it (127.0.0.2 on lo).
// 0 if none.
func interfaceOf(a netip.Addr, zoneIdx uint32) int {
	if zoneIdx != 0 {
		return int(zoneIdx)
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return 0
	}
	loop := 0
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			pfx, err := netip.ParsePrefix(ad.String())
			if err != nil {
				continue
			}
			if pfx.Addr().WithZone("") == a.WithZone("") {
				return ifi.Index
			}
			if ifi.Flags&net.FlagLoopback != 0 && pfx.Contains(a.WithZone("")) {
				loop = ifi.Index
			}
		}
	}
	return loop
}

// LocalAddr returns the bound address and port.
func (u *UDP) LocalAddr() netip.AddrPort { return u.local }

// BatchSize returns the configured messages per system call.
func (u *UDP) BatchSize() int { return u.batch }

// SocketBuffers reports the SO_RCVBUF and SO_SNDBUF sizes the kernel granted
// (Linux reports twice the requested value, its bookkeeping overhead).
func (u *UDP) SocketBuffers() (recv, send int) { return u.rcvbuf, u.sndbuf }

// Truncated counts datagrams larger than the read buffer; they are dropped.
func (u *UDP) Truncated() uint64 { return u.c.truncated.Load() }

// GSO reports whether trains currently go out as UDP GSO super-datagrams.
// It turns false for good when the kernel refuses UDP_SEGMENT.
func (u *UDP) GSO() bool { return u.gso.Load() }

// Offloads implements Offloader: GSO unless Config.NoGSO, IPv6 zero
// checksums or the kernel ruled it out, GRO unless Config.NoGRO.
func (u *UDP) Offloads() Offloads { return Offloads{GSO: u.gso.Load(), GRO: u.groAllowed.Load()} }

// WholeTrains implements WholeTrainer for a loopback destination while the
// link sends GSO and reads with GRO. Loopback never splits a GSO datagram on
// the way, and a receiver with UDP_GRO on gets it in one read; the peer is
// then a program on this host at this link's port, which rxe's kernel socket
// cannot share, so another goroce, and this link takes it to read with GRO as
// it does itself (Config.NoGRO and roced's -gro apply to a host's devices
// alike). A peer that reads without GRO gets the segments one by one, in
// order; goroce's engine handles a read batch's ACKs first, so it sees the
// same order as from a train unless a read falls between two segments.
// Elsewhere a network may deliver segments apart, so no address but loopback
// qualifies.
func (u *UDP) WholeTrains(dst netip.Addr) bool {
	return dst.Unmap().IsLoopback() && u.gso.Load() && u.groAllowed.Load() && u.readers[0].gro.Load()
}

// Interface returns the index of the network interface the link's address
// is on (the one multicast uses), or 0 if it was not found.
func (u *UDP) Interface() int { return u.ifindex }

// ReceiveFuncs implements Receivers: one function per reader socket
// (Config.Readers), the first being ReadBatch.
func (u *UDP) ReceiveFuncs() []ReceiveFunc {
	fns := make([]ReceiveFunc, len(u.readers))
	for i, r := range u.readers {
		fns[i] = r.read
	}
	return fns
}

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
	sock, err := u.openUnpolled(netip.AddrPortFrom(u.local.Addr(), port), roleSender)
	if err != nil {
		u.refused[port] = true
		return false
	}
	nm := make(map[uint16]*sendSock, len(m)+1)
	for k, v := range m {
		nm[k] = v
	}
	nm[port] = newSendSock(sock)
	u.ports.Store(&nm)
	u.portConns = append(u.portConns, sock)
	return true
}

// sender is the socket that sends from port.
func (u *UDP) sender(port uint16) (*sendSock, error) {
	if port == 0 || port == u.local.Port() {
		return u.main, nil
	}
	if s, ok := (*u.ports.Load())[port]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("link: write from %v port %d: not granted by SourcePort: %w", u.local.Addr(), port, syscall.EINVAL)
}

// Close closes the sockets and unblocks every reader. Later calls return nil.
func (u *UDP) Close() error {
	if u.closed.Swap(true) {
		return nil
	}
	u.portsMu.Lock()
	for _, c := range u.portConns {
		c.Close()
	}
	u.portConns = nil
	u.ports.Store(&map[uint16]*sendSock{})
	for g, r := range u.groups {
		r.conn.Close()
		delete(u.groups, g)
	}
	u.portsMu.Unlock()
	u.netns.close()
	return u.closeReaders()
}

func (u *UDP) closeReaders() error {
	var err error
	for i, r := range u.readers {
		if e := r.conn.Close(); i == 0 {
			err = e
		}
	}
	return err
}
