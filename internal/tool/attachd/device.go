package attachd

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/core/attach"
	"github.com/goroce/goroce/internal/core/transport"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/steer"
)

// freeRcvbuf is the receive buffer of a block nobody holds: what arrives
// for it is only counted, so a flood costs little memory.
const freeRcvbuf = 64 << 10

// Device is one shared address: its steered group (one socket per QPN
// block), which process holds which block, and the CM router on QP1.
// Block 0 is roced's own: its device reads that socket (Link), and QP1,
// whose QPN is in block 0, arrives there.
type Device struct {
	s      *Server
	g      *steer.Group
	router *Router

	mu     sync.Mutex
	owner  []*Client
	freed  []time.Time // when each block's last process left
	locked []bool      // SO_LOCK_FILTER set (once handed out)
	next   int         // where the search for a free block starts

	drops      atomic.Uint64 // datagrams that arrived for a block no process held
	violations atomic.Uint64 // processes ended for connecting their socket
	seen       []uint32      // each free block's kernel drop count (SK_MEMINFO_DROPS) already counted
	buf        []byte        // drainLocked's, under mu: one, not one per block and tick
	peer       peerBuf       // police's, under mu
	// fds are the blocks' descriptors, which the group keeps open until
	// close (after the drain loop ended): the tick's system calls use them
	// without a RawConn and a closure per block and tick.
	fds []int
	// free is an epoll set of the free blocks' sockets (the data, the
	// block), so a tick reads only those that something arrived for: one
	// epoll_wait instead of a recv and a getsockopt for each of a few hundred
	// idle blocks. A block leaves it before its socket is handed out.
	free     int
	ready    [64]unix.EpollEvent // drainFree's, under mu
	departed departed            // under s.mu
}

// departed sums the last reports of the processes that left, so that the
// device's totals never go down.
type departed struct {
	stats     transport.StatsSnapshot
	misrouted uint64
}

func (dp *departed) fold(c *Client) {
	r, _ := c.Report()
	dp.stats.Add(&r.Stats)
	dp.misrouted += r.Misrouted
}

// Share starts serving local: it binds the steered group (EADDRINUSE when
// anything else holds the port). The caller opens its own device on Link
// and starts the CM with StartCM.
func (s *Server) Share(local netip.AddrPort) (*Device, error) {
	g, err := steer.Listen(local, s.cfg.Blocks)
	if err != nil {
		return nil, err
	}
	if g.Blocks() < 2 {
		g.Close()
		return nil, fmt.Errorf("attachd: %d QPN blocks leave none for clients: %w", g.Blocks(), syscall.EINVAL)
	}
	n := g.Blocks()
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("attachd: epoll_create1: %w", err)
	}
	d := &Device{s: s, g: g, owner: make([]*Client, n), freed: make([]time.Time, n), locked: make([]bool, n),
		seen: make([]uint32, n), fds: make([]int, n), free: ep, next: 1}
	for b := 0; b < n; b++ {
		_ = steer.Control(g.Socket(b), func(fd int) error {
			d.fds[b] = fd
			return nil
		})
		if b == 0 {
			continue
		}
		_ = unix.SetsockoptInt(d.fds[b], unix.SOL_SOCKET, unix.SO_RCVBUF, freeRcvbuf)
		if err := d.watch(b, true); err != nil {
			d.close()
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		d.close()
		return nil, fmt.Errorf("attachd: server closed: %w", syscall.ESHUTDOWN)
	}
	ap := g.LocalAddr()
	if s.devs[ap] != nil {
		d.close()
		return nil, fmt.Errorf("attachd: %v already shared: %w", ap, syscall.EEXIST)
	}
	s.devs[ap] = d
	return d, nil
}

// Group is the device's steered group.
func (d *Device) Group() *steer.Group { return d.g }

// Link returns a link over block 0's socket, for roced's own device.
func (d *Device) Link(cfg link.Config) (*link.UDP, error) { return d.g.Link(0, cfg) }

// MADReader reads QP1's MADs: the device's cm/gsi agent.
type MADReader interface {
	ReadMAD(b []byte) (int, netip.Addr, error)
}

// StartCM routes QP1's MADs, which rw reads from and writes to the wire,
// until rw's ReadMAD fails. It returns the router, whose home port is the
// cm.MADConn of roced's own CM.
func (d *Device) StartCM(rw interface {
	MADReader
	MADWriter
}) *Router {
	d.router = NewRouter(rw, d.g.LocalAddr().Addr(), d.g.Blocks())
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := rw.ReadMAD(buf)
			if err != nil {
				d.router.home.Close()
				return
			}
			d.router.Receive(buf[:n], from)
		}
	}()
	return d.router
}

// Router returns the CM router (nil before StartCM).
func (d *Device) Router() *Router { return d.router }

// Drops counts the datagrams that arrived for blocks no process held.
func (d *Device) Drops() uint64 { return d.drops.Load() }

// Tally is a device's processes at one instant: those of a list still
// attached, and the summed last reports of those that left; never both,
// so a total of the two counts a process once, and never goes down.
type Tally struct {
	Live      []*Client
	Departed  transport.StatsSnapshot
	Misrouted uint64 // the departed processes'
}

// Tally sorts cs (from Clients or Query, perhaps a while ago).
func (d *Device) Tally(cs []*Client) Tally {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	t := Tally{Departed: d.departed.stats, Misrouted: d.departed.misrouted}
	for _, c := range cs {
		if _, ok := d.s.clients[c]; ok && c.dev == d {
			t.Live = append(t.Live, c)
		}
	}
	return t
}

// admit gives c a free block: the next one after the last handed out that
// has been free for Quarantine, so a restarted process gets a fresh block
// and the QPNs of one that left are not anyone's for a while.
func (d *Device) admit(c *Client) error {
	if d.router == nil {
		return fmt.Errorf("roced's CM is not running on %v: %w", d.g.LocalAddr(), syscall.EAGAIN)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n := len(d.owner)
	now := time.Now()
	b := -1
	for i := 0; i < n-1; i++ {
		cand := 1 + (d.next-1+i)%(n-1)
		if d.owner[cand] == nil && (d.freed[cand].IsZero() || now.Sub(d.freed[cand]) >= Quarantine) {
			b = cand
			break
		}
	}
	if b < 0 {
		return fmt.Errorf("no free QPN block on %v (%d blocks, quarantine %v): %w", d.g.LocalAddr(), n-1, Quarantine, syscall.EUSERS)
	}
	sock := d.g.Socket(b)
	if !d.locked[b] {
		if err := steer.Lock(sock); err != nil {
			return err
		}
		d.locked[b] = true
	}
	if err := d.watch(b, false); err != nil && !errors.Is(err, unix.ENOENT) {
		return err // ENOENT: its release could not watch it
	}
	d.drainLocked(b)
	if old := d.router.portOf(b); old != nil {
		old.Forget()
	}
	port, err := d.router.Add(b, c.deliver)
	if err != nil {
		return err
	}
	d.owner[b], d.next = c, b%(n-1)+1
	c.dev, c.Block, c.port = d, b, port
	return nil
}

// release frees c's block: roced takes its socket back (a connect undone,
// GRO off, a small buffer) and counts what arrives for it from now on.
func (d *Device) release(c *Client) {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := c.Block
	if d.owner[b] != c {
		return
	}
	d.owner[b], d.freed[b] = nil, time.Now()
	d.seen[b] = kernelDrops(d.fds[b]) // the process's own overflows are not roced's
	_ = steer.Control(d.g.Socket(b), func(fd int) error {
		disconnect(fd)
		_ = unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_GRO, 0)
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, freeRcvbuf)
	})
	if err := d.watch(b, true); err != nil {
		// Not drained from now on: what arrives fills its buffer, and the
		// kernel drops the rest.
		d.s.log.Error("watching a free block", "addr", d.g.LocalAddr(), "block", b, "err", err)
	}
	d.drainLocked(b)
}

// watch adds block b's socket to the free set, or removes it.
func (d *Device) watch(b int, free bool) error {
	op, ev := unix.EPOLL_CTL_DEL, &unix.EpollEvent{}
	if free {
		op, ev = unix.EPOLL_CTL_ADD, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(b)}
	}
	if err := unix.EpollCtl(d.free, op, d.fds[b], ev); err != nil {
		return fmt.Errorf("attachd: epoll_ctl of block %d: %w", b, err)
	}
	return nil
}

// police undoes what a process may do to the group through the socket it
// holds (see package link/steer): it puts the steering program back, in
// case a member detached it, and ends the session of a process that
// connected its socket, after undoing the connect. It returns how many
// processes it ended.
func (d *Device) police() int {
	if err := d.g.Attach(); err != nil {
		d.s.log.Error("re-attaching the steering program", "addr", d.g.LocalAddr(), "err", err)
	}
	d.mu.Lock()
	var bad []*Client
	for b := 1; b < len(d.owner); b++ {
		c := d.owner[b]
		if c == nil {
			continue
		}
		if d.peer.connected(d.fds[b]) {
			disconnect(d.fds[b])
			bad = append(bad, c)
		}
	}
	d.mu.Unlock()
	for _, c := range bad {
		d.violations.Add(1)
		d.s.log.Warn("ending the session of a process that connected its steered socket", "pid", c.PID, "uid", c.UID, "comm", c.Comm, "block", c.Block)
		c.conn.Close()
	}
	return len(bad)
}

// Violations counts the processes police ended.
func (d *Device) Violations() uint64 { return d.violations.Load() }

// drainFree empties the free blocks' sockets that something arrived for.
// Bounded: each free block at most once a tick.
func (d *Device) drainFree() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for left := len(d.owner); left > 0; {
		n, err := unix.EpollWait(d.free, d.ready[:min(left, len(d.ready))], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		for _, ev := range d.ready[:n] {
			if b := int(ev.Fd); b > 0 && b < len(d.owner) && d.owner[b] == nil {
				d.drainLocked(b)
			}
		}
		left -= n
		if n < len(d.ready) {
			return
		}
	}
}

// drainLocked reads block b's socket empty without waiting, counting, and
// counts what the kernel dropped for it meanwhile (its buffer full; a full
// buffer keeps the socket readable, so the next drain sees a drop that comes
// after this one's count).
func (d *Device) drainLocked(b int) {
	defer func() {
		if k := kernelDrops(d.fds[b]); k != d.seen[b] {
			d.drops.Add(uint64(k - d.seen[b]))
			d.seen[b] = k
		}
	}()
	if d.buf == nil {
		d.buf = make([]byte, link.MaxTrain)
	}
	for i := 0; i < 1<<16; i++ { // bounded: a flood is drained over several ticks
		// recv(2) without the source address: unix.Recvfrom allocates one
		// per call, and this runs for every free block on every tick.
		_, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(d.fds[b]), uintptr(unsafe.Pointer(&d.buf[0])), uintptr(len(d.buf)),
			unix.MSG_DONTWAIT|unix.MSG_TRUNC, 0, 0)
		if e != 0 {
			if e == unix.EINTR {
				continue
			}
			return
		}
		d.drops.Add(1)
	}
}

func (d *Device) close() {
	d.g.Close()
	unix.Close(d.free)
}

// portOf returns the port registered for block b (a departed process's, not
// yet forgotten), or nil.
func (r *Router) portOf(b int) *Port {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ports[uint32(b)]
}

// deliver hands a MAD routed to c's port to the process, without waiting.
func (c *Client) deliver(mad []byte, from netip.Addr) bool {
	return c.send(&attach.Msg{Type: attach.TMADIn, Addr: from, MAD: append([]byte(nil), mad...)})
}

// disconnect undoes a connect(2) a process made on its block's socket (a
// connected member takes its peer's datagrams whatever their QPN): connect
// with AF_UNSPEC.
func disconnect(fd int) {
	var sa unix.RawSockaddr // Family 0: AF_UNSPEC
	_, _, _ = unix.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa))
}

// kernelDrops returns how many datagrams the kernel dropped for the socket
// so far (SO_MEMINFO's SK_MEMINFO_DROPS: a full receive buffer).
func kernelDrops(fd int) uint32 {
	const skMeminfoDrops = 8
	var mi [9]uint32
	n := uint32(unsafe.Sizeof(mi))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_MEMINFO,
		uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 || n/4 <= skMeminfoDrops {
		return 0
	}
	return mi[skMeminfoDrops]
}

// peerBuf is getpeername(2)'s result space, kept by the Device:
// unix.Getpeername allocates on every call, and police asks ten times a
// second for every block in use, which a benchmark of a slow attached
// ping-pong counted as allocations per packet.
type peerBuf struct {
	sa unix.RawSockaddrAny
	n  uint32
}

// connected reports whether fd has a peer: a process connect(2)ed it.
func (p *peerBuf) connected(fd int) bool {
	p.n = uint32(unsafe.Sizeof(p.sa))
	_, _, e := unix.RawSyscall(unix.SYS_GETPEERNAME, uintptr(fd), uintptr(unsafe.Pointer(&p.sa)), uintptr(unsafe.Pointer(&p.n)))
	return e == 0
}
