package attachd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/core/attach"
)

// Defaults of Config fields left zero.
const (
	DefaultMaxClients = 64
	DefaultMode       = 0o660
	// Quarantine is how long a block stays unused after its process went
	// away: datagrams and CM MADs still in flight for its QPNs and
	// communication IDs are counted as dropped, not handed to the next
	// process.
	Quarantine = 2 * time.Second
	// drainEvery is how often roced empties the sockets of free blocks.
	drainEvery = 100 * time.Millisecond
	// helloTimeout bounds how long a connection may take to say Hello.
	helloTimeout = 5 * time.Second
	// queryTimeout bounds how long roced waits for a client's report.
	queryTimeout = 2 * time.Second
)

// Quota bounds what the processes of one uid hold on a device, summed over
// them; zero is no bound.
type Quota struct {
	QPs, MRs, Listeners int
}

// Config configures a Server.
type Config struct {
	// Socket is the path of the Unix socket (attach.DefaultSocket when
	// empty). Its directory is made (mode 0755) if missing.
	Socket string
	// Mode is the socket file's permission bits (DefaultMode when zero):
	// connecting needs write permission, so the owner, group and mode
	// decide who may attach.
	Mode os.FileMode
	// Group is the socket file's group, by name or number ("" keeps the
	// process's).
	Group string
	// Blocks is the number of QPN blocks per address (steer.DefaultBlocks
	// when zero); block 0 is roced's own.
	Blocks int
	// MaxClients bounds the processes attached at once over all addresses
	// (DefaultMaxClients when zero).
	MaxClients int
	// Quota is per uid.
	Quota Quota
	// NoGRO tells clients not to turn UDP_GRO on for their sockets (see
	// package link/steer for what GRO means for steering).
	NoGRO bool
	// MTU is the port's active MTU code (1..5) every client device gets
	// (3, 1024 bytes, when zero).
	MTU uint8
	// Logger receives attaches, departures and refusals; nil is silent.
	Logger *slog.Logger
}

// Server is roced's side of the attach protocol: it listens on the Unix
// socket, hands each process a QPN block of the address it asks for with
// that block's socket, routes its CM MADs, counts its quota and asks for
// its reports.
type Server struct {
	cfg Config
	ln  *net.UnixListener
	log *slog.Logger

	mu      sync.Mutex
	devs    map[netip.AddrPort]*Device
	clients map[*Client]struct{}
	uids    map[uint32]*usage
	closed  bool

	done chan struct{}
	wg   sync.WaitGroup
}

// usage is what one uid's processes hold.
type usage struct {
	qps, mrs, listeners int
}

// Listen opens the socket. A socket file nobody accepts on is a leftover
// of a roced that died, and is replaced; one that answers is EADDRINUSE.
func Listen(cfg Config) (*Server, error) {
	if cfg.Socket == "" {
		cfg.Socket = attach.DefaultSocket
	}
	if cfg.Mode == 0 {
		cfg.Mode = DefaultMode
	}
	if cfg.MaxClients <= 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	if cfg.MTU == 0 {
		cfg.MTU = 3
	}
	gid := -1
	if cfg.Group != "" {
		g, err := lookupGroup(cfg.Group)
		if err != nil {
			return nil, err
		}
		gid = g
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o755); err != nil {
		return nil, fmt.Errorf("attachd: socket directory: %w", err)
	}
	if c, err := net.DialTimeout("unixpacket", cfg.Socket, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("attachd: %s: another roced listens there: %w", cfg.Socket, syscall.EADDRINUSE)
	}
	if err := os.Remove(cfg.Socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("attachd: removing the stale socket: %w", err)
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.Socket, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("attachd: listen on %s: %w", cfg.Socket, err)
	}
	if err := os.Chmod(cfg.Socket, cfg.Mode.Perm()); err != nil {
		ln.Close()
		return nil, fmt.Errorf("attachd: chmod %s: %w", cfg.Socket, err)
	}
	if gid >= 0 {
		if err := os.Chown(cfg.Socket, -1, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("attachd: chgrp %s: %w", cfg.Socket, err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, ln: ln, log: log, devs: map[netip.AddrPort]*Device{},
		clients: map[*Client]struct{}{}, uids: map[uint32]*usage{}, done: make(chan struct{})}
	s.wg.Add(1)
	go s.drainLoop()
	return s, nil
}

func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("attachd: socket group %q: %w", g, err)
	}
	return strconv.Atoi(gr.Gid)
}

// Path is the socket's path.
func (s *Server) Path() string { return s.cfg.Socket }

// Serve accepts attaching processes until Close.
func (s *Server) Serve() error {
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			select {
			case <-s.done:
				return nil
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(attach.NewConn(c))
		}()
	}
}

// Close stops accepting, ends every client's session (their devices see
// DEVICE_FATAL) and closes the devices' groups.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	clients := make([]*Client, 0, len(s.clients))
	for c := range s.clients {
		clients = append(clients, c)
	}
	s.mu.Unlock()
	err := s.ln.Close()
	for _, c := range clients {
		c.conn.Close()
	}
	s.wg.Wait()
	s.mu.Lock()
	for _, d := range s.devs {
		d.close()
	}
	s.mu.Unlock()
	return err
}

// drainLoop polices the groups and empties the free blocks' sockets,
// counting what it finds.
func (s *Server) drainLoop() {
	defer s.wg.Done()
	t := time.NewTicker(drainEvery)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.mu.Lock()
		devs := make([]*Device, 0, len(s.devs))
		for _, d := range s.devs {
			devs = append(devs, d)
		}
		s.mu.Unlock()
		for _, d := range devs {
			d.police()
			d.drainFree()
		}
	}
}

// refuse answers a request with err's errno (EPROTO if it has none).
func refuse(conn *attach.Conn, seq uint32, err error) { _ = conn.Send(refusal(seq, err)) }

// refusal is the Error message of err.
func refusal(seq uint32, err error) *attach.Msg {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		errno = syscall.EPROTO
	}
	text := err.Error()
	if len(text) > 200 {
		text = text[:200]
	}
	return &attach.Msg{Type: attach.TError, Seq: seq, Errno: errno, Text: text}
}

// handle serves one connection from Hello to its end.
func (s *Server) handle(conn *attach.Conn) {
	defer conn.Close()
	cred, err := conn.Peer()
	if err != nil {
		return
	}
	c := &Client{s: s, conn: conn, PID: int(cred.Pid), UID: cred.Uid, GID: cred.Gid, Comm: commOf(int(cred.Pid)),
		Since: time.Now(), waiting: map[uint32]chan attach.Msg{}, out: make(chan *attach.Msg, outQueue)}
	hello, err := c.recvHello()
	if err != nil {
		if !attach.IsClosed(err) {
			refuse(conn, 1, err)
		}
		return
	}
	c.Name = hello.Name
	ap := netip.AddrPortFrom(hello.Addr.Unmap(), hello.Port)
	s.mu.Lock()
	d := s.devs[ap]
	switch {
	case s.closed:
		err = fmt.Errorf("roced is stopping: %w", syscall.ESHUTDOWN)
	case d == nil:
		err = fmt.Errorf("roced does not serve %v: %w", ap, syscall.ENODEV)
	case len(s.clients) >= s.cfg.MaxClients:
		err = fmt.Errorf("%d processes attached, the most roced takes (-attach-max): %w", len(s.clients), syscall.EUSERS)
	default:
		s.clients[c] = struct{}{}
	}
	s.mu.Unlock()
	if err != nil {
		s.log.Info("attach refused", "pid", c.PID, "uid", c.UID, "comm", c.Comm, "addr", ap, "err", err)
		refuse(conn, hello.Seq, err)
		return
	}
	defer c.leave()
	if err := d.admit(c); err != nil {
		s.log.Info("attach refused", "pid", c.PID, "uid", c.UID, "comm", c.Comm, "addr", ap, "err", err)
		refuse(conn, hello.Seq, err)
		return
	}
	// Listed from now on: admit's writes to c happen before any reader
	// that takes s.mu and sees admitted.
	s.mu.Lock()
	c.admitted = true
	s.mu.Unlock()
	first, last := d.g.Range(c.Block)
	prefix, _ := CommIDs(uint32(c.Block), d.router.shift)
	var flags uint32
	if !s.cfg.NoGRO {
		flags |= attach.FlagGRO
	}
	grant := attach.Msg{Type: attach.TGrant, Seq: hello.Seq, Block: uint16(c.Block), First: first, Last: last,
		CommIDs: prefix, Flags: flags, MTU: s.cfg.MTU}
	if err := conn.Send(&grant, d.g.Socket(c.Block)); err != nil {
		return
	}
	s.log.Info("attached", "pid", c.PID, "uid", c.UID, "comm", c.Comm, "addr", ap, "block", c.Block,
		"qpns", fmt.Sprintf("%#x-%#x", first, last))
	c.serve()
	s.log.Info("detached", "pid", c.PID, "uid", c.UID, "comm", c.Comm, "addr", ap, "block", c.Block)
}

// commOf is the command name of pid (/proc/PID/comm), for display only.
func commOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// Clients returns the attached processes, over every address.
func (s *Server) Clients() []*Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Client, 0, len(s.clients))
	for c := range s.clients {
		if c.admitted {
			out = append(out, c)
		}
	}
	return out
}

// Query asks every attached process for its report, at once, and returns
// them with the processes that answered in time (the others keep their last
// report).
func (s *Server) Query(ctx context.Context) []*Client {
	cs := s.Clients()
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.query(ctx)
		}()
	}
	wg.Wait()
	return cs
}

// charge takes n of kind against uid's quota, or gives -n back.
func (s *Server) charge(uid uint32, kind attach.Kind, n int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.uids[uid]
	if u == nil {
		u = new(usage)
		s.uids[uid] = u
	}
	var held *int
	var limit int
	var what string
	switch kind {
	case attach.KindQP:
		held, limit, what = &u.qps, s.cfg.Quota.QPs, "QPs"
	case attach.KindMR:
		held, limit, what = &u.mrs, s.cfg.Quota.MRs, "MRs"
	default:
		held, limit, what = &u.listeners, s.cfg.Quota.Listeners, "listeners"
	}
	if n > 0 && limit > 0 && *held+n > limit {
		return fmt.Errorf("uid %d holds %d %s, its quota is %d: %w", uid, *held, what, limit, syscall.EDQUOT)
	}
	*held = max(*held+n, 0)
	return nil
}

// Usage returns what uid's processes hold: QPs, MRs, listeners.
func (s *Server) Usage(uid uint32) (qps, mrs, listeners int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.uids[uid]; u != nil {
		return u.qps, u.mrs, u.listeners
	}
	return 0, 0, 0
}
