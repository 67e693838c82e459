package attachd

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/core/attach"
)

// kindListener counts claims against the listener quota (attach has no
// Kind for them: the client never charges them, roced does).
const kindListener attach.Kind = 0

// Client is one attached process.
type Client struct {
	s    *Server
	dev  *Device
	conn *attach.Conn

	PID      int
	UID, GID uint32
	Comm     string // /proc/PID/comm at attach
	Name     string // what the process called itself in Hello
	Since    time.Time
	Block    int
	port     *Port
	admitted bool // under s.mu: dev, Block and port are set

	// out queues what roced sends the process, written by one goroutine, so
	// that a process that stops reading never blocks roced's QP1 reader.
	out      chan *attach.Msg
	overflow atomic.Uint64 // messages dropped on a full out

	seq     atomic.Uint32
	mu      sync.Mutex
	waiting map[uint32]chan attach.Msg
	charged [3]int // by kind: listeners, QPs, MRs
	report  attach.Report
	got     time.Time // when report arrived; zero: never
}

// Addr is the address the process attached to.
func (c *Client) Addr() netip.AddrPort { return c.dev.g.LocalAddr() }

// Report returns the process's last report and when it came (zero: none
// yet).
func (c *Client) Report() (attach.Report, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.report, c.got
}

// QPNs returns the process's block.
func (c *Client) QPNs() (first, last uint32) { return c.dev.g.Range(c.Block) }

// Listeners returns how many services the process listens on.
func (c *Client) Listeners() int {
	if c.port == nil {
		return 0
	}
	return c.port.Claims()
}

func (c *Client) recvHello() (attach.Msg, error) {
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(helloTimeout):
			c.conn.Close()
		}
	}()
	m, files, err := c.conn.Recv()
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		return m, err
	}
	if m.Type != attach.THello {
		return m, fmt.Errorf("expected Hello, got %v: %w", m.Type, syscall.EPROTO)
	}
	return m, nil
}

// outQueue bounds the messages waiting for a process that reads slowly:
// QP1's receive queue's depth.
const outQueue = 512

// send queues m for the process; false when its queue is full.
func (c *Client) send(m *attach.Msg) bool {
	select {
	case c.out <- m:
		return true
	default:
		c.overflow.Add(1)
		return false
	}
}

// writeLoop sends the queued messages until the connection fails or done.
func (c *Client) writeLoop(done <-chan struct{}) {
	for {
		select {
		case m := <-c.out:
			if err := c.conn.Send(m); err != nil && attach.IsClosed(err) {
				return
			}
		case <-done:
			return
		}
	}
}

// serve reads the process's requests until its connection ends.
func (c *Client) serve() {
	done := make(chan struct{})
	defer close(done)
	go c.writeLoop(done)
	for {
		m, files, err := c.conn.Recv()
		for _, f := range files {
			f.Close() // a client never sends descriptors
		}
		if err != nil {
			if attach.IsClosed(err) {
				return
			}
			continue // malformed: counted by nothing, answered by nothing
		}
		switch m.Type {
		case attach.TMADOut:
			_ = c.port.Send(m.MAD, m.Addr)
		case attach.TClaim:
			c.reply(m.Seq, c.claim(m.ServiceID, m.UD))
		case attach.TRelease:
			c.release(m.ServiceID, m.UD)
		case attach.TCharge:
			err := c.charge(m.Kind, int(m.Delta))
			if m.Delta > 0 {
				c.reply(m.Seq, err)
			}
		case attach.TReport:
			c.mu.Lock()
			ch := c.waiting[m.Seq]
			delete(c.waiting, m.Seq)
			c.mu.Unlock()
			if ch != nil {
				ch <- m
			}
		default:
			c.reply(m.Seq, fmt.Errorf("%v is not a request: %w", m.Type, syscall.EPROTO))
		}
	}
}

func (c *Client) reply(seq uint32, err error) {
	if err != nil {
		c.send(refusal(seq, err))
		return
	}
	c.send(&attach.Msg{Type: attach.TOK, Seq: seq})
}

func (c *Client) claim(sid uint64, ud bool) error {
	if err := c.charge(kindListener, 1); err != nil {
		return err
	}
	if err := c.port.Claim(sid, ud); err != nil {
		c.charge(kindListener, -1)
		return err
	}
	return nil
}

func (c *Client) release(sid uint64, ud bool) {
	before := c.port.Claims()
	c.port.Release(sid, ud)
	if c.port.Claims() < before {
		c.charge(kindListener, -1)
	}
}

// charge counts n of kind for the process and against its uid's quota.
func (c *Client) charge(kind attach.Kind, n int) error {
	if int(kind) >= len(c.charged) {
		return fmt.Errorf("resource kind %d: %w", kind, syscall.EINVAL)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n < 0 {
		n = -min(-n, c.charged[kind]) // never give back more than was taken
	}
	if err := c.s.charge(c.UID, kind, n); err != nil {
		return err
	}
	c.charged[kind] += n
	return nil
}

// query asks the process for its report and keeps it.
func (c *Client) query(ctx context.Context) {
	seq := c.seq.Add(1)
	ch := make(chan attach.Msg, 1)
	c.mu.Lock()
	c.waiting[seq] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiting, seq)
		c.mu.Unlock()
	}()
	if !c.send(&attach.Msg{Type: attach.TQuery, Seq: seq}) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	select {
	case m := <-ch:
		r, err := attach.DecodeReport(m.Body)
		if err != nil {
			return
		}
		c.mu.Lock()
		c.report, c.got = r, time.Now()
		c.mu.Unlock()
	case <-ctx.Done():
	}
}

// leave releases everything the process held: its block (quarantined),
// its CM state (a DREQ per connection), its services and its charges.
func (c *Client) leave() {
	s := c.s
	if c.port != nil {
		c.port.Remove()
	}
	if c.dev != nil {
		c.dev.release(c)
	}
	c.mu.Lock()
	charged := c.charged
	c.charged = [3]int{}
	c.mu.Unlock()
	for k, n := range charged {
		if n > 0 {
			s.charge(c.UID, attach.Kind(k), -n)
		}
	}
	s.mu.Lock()
	delete(s.clients, c)
	if c.dev != nil {
		c.dev.departed.fold(c)
	}
	s.mu.Unlock()
}
