package attach

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultSocket is where roced listens unless told otherwise (roced
// -socket PATH, clients' EnvSocket).
const DefaultSocket = "/run/goroce/roced.sock"

// EnvSocket names the environment variable that moves the socket clients
// dial; the value "none" makes them never attach.
const EnvSocket = "GOROCE_ROCED_SOCKET"

// SocketPath is the socket clients dial: $GOROCE_ROCED_SOCKET, or
// DefaultSocket; "" when attaching is switched off.
func SocketPath() string {
	p, ok := os.LookupEnv(EnvSocket)
	switch {
	case !ok || p == "":
		return DefaultSocket
	case p == "none":
		return ""
	}
	return p
}

// requestTimeout bounds how long a client waits for roced to answer one
// request: roced answers from memory, so only a stopped roced takes long.
const requestTimeout = 5 * time.Second

// madQueue is how many CM MADs wait for the client's CM, as the QP1 agent
// of an owned device keeps (cm/gsi).
const madQueue = 512

// ErrNoDaemon means no roced listens on the socket (it does not exist, or
// nothing accepts on it): the caller opens the device itself.
var ErrNoDaemon = errors.New("attach: no roced on the socket")

// ErrNotServed means roced runs but does not serve the address and port
// asked for: the caller opens the device itself.
var ErrNotServed = errors.New("attach: roced does not serve that address")

// Session is a client's attachment to roced: the grant (QPN block and its
// socket) and the control connection that carries CM MADs, listens,
// quota charges and roced's queries. It ends when either side closes; Done
// is closed then.
type Session struct {
	conn  *Conn
	grant Msg
	sock  *os.File
	addr  netip.Addr

	seq     atomic.Uint32
	mu      sync.Mutex
	waiting map[uint32]chan Msg
	report  func() []byte

	mads        chan madIn
	madOverflow atomic.Uint64
	madRx       atomic.Uint64
	madTx       atomic.Uint64

	done      chan struct{}
	closeOnce sync.Once
}

type madIn struct {
	mad  []byte
	from netip.Addr
}

// Dial attaches to the roced listening on path for addr:port. ErrNoDaemon
// and ErrNotServed say the caller should open the device itself; any other
// error (permission, roced full, version) is roced's refusal.
func Dial(path string, addr netip.Addr, port uint16) (*Session, error) {
	if path == "" {
		return nil, ErrNoDaemon
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOTDIR) {
			return nil, ErrNoDaemon
		}
		return nil, fmt.Errorf("attach: dial roced at %s: %w", path, unwrapOp(err))
	}
	conn := NewConn(c.(*net.UnixConn))
	s := &Session{conn: conn, addr: addr.Unmap(), waiting: map[uint32]chan Msg{},
		mads: make(chan madIn, madQueue), done: make(chan struct{})}
	name := filepath.Base(os.Args[0])
	if len(name) > 64 {
		name = name[:64]
	}
	_ = c.SetDeadline(time.Now().Add(requestTimeout))
	if err := conn.Send(&Msg{Type: THello, Seq: 1, Addr: s.addr, Port: port, Name: name}); err != nil {
		conn.Close()
		return nil, fmt.Errorf("attach: hello to roced at %s: %w", path, err)
	}
	m, files, err := conn.Recv()
	if err != nil {
		conn.Close()
		if IsClosed(err) {
			return nil, fmt.Errorf("attach: roced at %s closed the connection: %w", path, syscall.ECONNRESET)
		}
		return nil, fmt.Errorf("attach: roced at %s: %w", path, err)
	}
	_ = c.SetDeadline(time.Time{})
	switch {
	case m.Type == TError && m.Errno == syscall.ENODEV:
		conn.Close()
		closeFiles(files)
		return nil, ErrNotServed
	case m.Type == TError:
		conn.Close()
		closeFiles(files)
		return nil, fmt.Errorf("attach: roced at %s refused %v port %d: %s: %w", path, addr, port, m.Text, m.Errno)
	case m.Type != TGrant || len(files) != 1:
		conn.Close()
		closeFiles(files)
		return nil, fmt.Errorf("attach: roced at %s answered %v with %d descriptors: %w", path, m.Type, len(files), syscall.EPROTO)
	}
	s.grant, s.sock = m, files[0]
	go s.readLoop()
	return s, nil
}

func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

// Grant returns roced's grant: Block, First and Last (the client's QPNs),
// CommIDs, Flags, MTU.
func (s *Session) Grant() Msg { return s.grant }

// Socket returns the block's socket. The Session keeps it; link.FromFile
// makes a link of a duplicate.
func (s *Session) Socket() *os.File { return s.sock }

// Done is closed when the session ends: roced went away, or Close.
func (s *Session) Done() <-chan struct{} { return s.done }

// SetReporter installs what answers roced's queries: a JSON Report of the
// device (see Report).
func (s *Session) SetReporter(fn func() []byte) {
	s.mu.Lock()
	s.report = fn
	s.mu.Unlock()
}

// Close ends the session: roced releases the block, the listens and the
// charges at once.
func (s *Session) Close() error {
	s.end()
	s.sock.Close()
	return nil
}

func (s *Session) end() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.conn.Close()
	})
}

// readLoop dispatches roced's messages until the connection ends.
func (s *Session) readLoop() {
	defer s.end()
	for {
		m, files, err := s.conn.Recv()
		closeFiles(files) // nothing after the grant carries one
		if err != nil {
			if IsClosed(err) || errors.Is(err, syscall.EBADF) {
				return
			}
			continue // a malformed message: roced's bug, not a reason to die
		}
		switch m.Type {
		case TMADIn:
			select {
			case s.mads <- madIn{m.MAD, m.Addr}:
			default:
				s.madOverflow.Add(1)
			}
		case TQuery:
			go s.answer(m.Seq)
		case TOK, TError, TReport:
			s.mu.Lock()
			ch := s.waiting[m.Seq]
			delete(s.waiting, m.Seq)
			s.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		}
	}
}

// answer sends the device's report for query seq.
func (s *Session) answer(seq uint32) {
	s.mu.Lock()
	fn := s.report
	s.mu.Unlock()
	var body []byte
	if fn != nil {
		body = fn()
	}
	if len(body) > MaxMessage-headerLen {
		body = nil // the reporter bounds itself; an oversized one reports nothing
	}
	_ = s.conn.Send(&Msg{Type: TReport, Seq: seq, Body: body})
}

// request sends m and waits for roced's answer.
func (s *Session) request(m *Msg) (Msg, error) {
	m.Seq = s.seq.Add(1) + 1 // 1 was the hello
	ch := make(chan Msg, 1)
	s.mu.Lock()
	s.waiting[m.Seq] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, m.Seq)
		s.mu.Unlock()
	}()
	if err := s.conn.Send(m); err != nil {
		return Msg{}, fmt.Errorf("attach: %v to roced: %w", m.Type, closedAs(err))
	}
	t := time.NewTimer(requestTimeout)
	defer t.Stop()
	select {
	case a := <-ch:
		if a.Type == TError {
			return a, fmt.Errorf("roced: %s: %w", a.Text, a.Errno)
		}
		return a, nil
	case <-s.done:
		return Msg{}, fmt.Errorf("attach: %v: roced went away: %w", m.Type, syscall.ENODEV)
	case <-t.C:
		return Msg{}, fmt.Errorf("attach: %v: roced did not answer in %v: %w", m.Type, requestTimeout, syscall.ETIMEDOUT)
	}
}

func closedAs(err error) error {
	if IsClosed(err) {
		return syscall.ENODEV
	}
	return err
}

// Claim makes serviceID the client's (a CM listen, or a UD service for
// SIDR): REQs (SIDR_REQs) for it reach this client only. A service another
// process holds is EADDRINUSE; over the uid's listener quota, EDQUOT.
func (s *Session) Claim(serviceID uint64, ud bool) error {
	_, err := s.request(&Msg{Type: TClaim, ServiceID: serviceID, UD: ud})
	return err
}

// Release gives serviceID back. It does not wait.
func (s *Session) Release(serviceID uint64, ud bool) {
	_ = s.conn.Send(&Msg{Type: TRelease, ServiceID: serviceID, UD: ud})
}

// Charge takes n more of kind against the uid's quota (EDQUOT when it is
// exhausted), or gives -n back without waiting.
func (s *Session) Charge(kind Kind, n int) error {
	if n < 0 {
		return s.conn.Send(&Msg{Type: TCharge, Kind: kind, Delta: int32(n)})
	}
	_, err := s.request(&Msg{Type: TCharge, Kind: kind, Delta: int32(n)})
	return err
}

// ReadMADUntil receives the next CM MAD roced routed to this client. After
// the session ends, or stop is closed, it returns net.ErrClosed.
func (s *Session) ReadMADUntil(b []byte, stop <-chan struct{}) (int, netip.Addr, error) {
	select {
	case m := <-s.mads:
		s.madRx.Add(1)
		return copy(b, m.mad), m.from, nil
	case <-s.done:
		return 0, netip.Addr{}, net.ErrClosed
	case <-stop:
		return 0, netip.Addr{}, net.ErrClosed
	}
}

// WriteMAD has roced send mad from QP1 to the CM at to. roced checks that
// the MAD's communication ID is the client's.
func (s *Session) WriteMAD(mad []byte, to netip.Addr) error {
	if err := s.conn.Send(&Msg{Type: TMADOut, Addr: to.Unmap(), MAD: mad}); err != nil {
		return closedAs(err)
	}
	s.madTx.Add(1)
	return nil
}

// CommIDs returns the prefix every communication ID (and SIDR request ID)
// of this client must carry, and the mask of the bits it may choose: the
// block number in the top bits, as many as the QPN's block number has (a
// block of 2^k QPNs leaves k+8 bits to choose).
func (s *Session) CommIDs() (prefix, mask uint32) {
	return s.grant.CommIDs, (s.grant.Last-s.grant.First+1)<<8 - 1
}

// MADStats returns the MADs received and sent through roced, and those
// dropped because the client's CM read too slowly.
func (s *Session) MADStats() (rx, tx, overflow uint64) {
	return s.madRx.Load(), s.madTx.Load(), s.madOverflow.Load()
}

// sessions maps what a session was opened for (a roce.Device) to it, so a
// package above the device (cm/gsi) finds the session that carries its
// MADs without the device exporting it.
var sessions sync.Map

// Bind records s as the session of key.
func Bind(key any, s *Session) { sessions.Store(key, s) }

// Unbind forgets key's session.
func Unbind(key any) { sessions.Delete(key) }

// Of returns key's session, or nil.
func Of(key any) *Session {
	if s, ok := sessions.Load(key); ok {
		return s.(*Session)
	}
	return nil
}
