package oob

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// replayConn is a net.Conn that serves a recorded stream to reads and records writes.
type replayConn struct {
	net.Conn // nil; only the methods below are used
	r        *bytes.Reader
	w        bytes.Buffer
}

func (c *replayConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *replayConn) Write(b []byte) (int, error)      { return c.w.Write(b) }
func (c *replayConn) SetDeadline(time.Time) error      { return nil }
func (c *replayConn) SetReadDeadline(time.Time) error  { return nil }
func (c *replayConn) SetWriteDeadline(time.Time) error { return nil }
func newReplay(in []byte) *replayConn                  { return &replayConn{r: bytes.NewReader(in)} }
func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestReplayAgainstStockTools plays each side against the other side's recorded bytes
// and checks that we write exactly what the stock tool wrote.
func TestReplayAgainstStockTools(t *testing.T) {
	for _, tt := range []struct {
		name string
		n    int
		real int
	}{{"rc_pingpong", 1, 1}, {"ud_pingpong", 1, 1}, {"srq_pingpong", SRQRecords, 4}} {
		c2s := readStream(t, tt.name, "client-to-server")
		s2c := readStream(t, tt.name, "server-to-client")
		clientDests, _ := ParseRecords(c2s[:tt.n*RecordLen])
		serverDests, _ := ParseRecords(s2c)
		t.Run(tt.name+"/client", func(t *testing.T) {
			c := newReplay(s2c)
			remote, err := ClientExchange(ctxTimeout(t), c, clientDests[:tt.real], tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(c.w.Bytes(), c2s) {
				t.Errorf("client wrote %d bytes that differ from the stock client's %d", c.w.Len(), len(c2s))
			}
			if remote[0] != serverDests[0] || len(remote) != tt.n {
				t.Errorf("remote = %v (%d)", remote[0], len(remote))
			}
		})
		t.Run(tt.name+"/server", func(t *testing.T) {
			c := newReplay(c2s)
			var got []Dest
			remote, err := ServerExchange(ctxTimeout(t), c, tt.n, func(r []Dest) ([]Dest, error) {
				got = r
				return serverDests[:tt.real], nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(c.w.Bytes(), s2c) {
				t.Errorf("server wrote %d bytes that differ from the stock server's %d", c.w.Len(), len(s2c))
			}
			if len(got) != tt.n || got[0] != clientDests[0] || remote[0] != clientDests[0] {
				t.Errorf("connect got %d records, first %v", len(got), got[0])
			}
		})
	}
}

func TestExchangeOverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := ctxTimeout(t)
	cli := []Dest{{QPN: 0x11, PSN: 0x123456, GID: gid("::ffff:127.0.0.1")}, {QPN: 0x12, PSN: 1}}
	srv := []Dest{{QPN: 0x21, PSN: 0xabcdef, GID: gid("fe80::1")}, {QPN: 0x22, PSN: 2}, {QPN: 0x23}}
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		r, err := ServerExchange(ctx, c, SRQRecords, func(r []Dest) ([]Dest, error) { return srv, nil })
		if err == nil && (r[0] != cli[0] || r[1] != cli[1] || !r[2].IsZero()) {
			err = errors.New("server got wrong records")
		}
		errc <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := ClientExchange(ctx, c, cli, SRQRecords)
	if err != nil {
		t.Fatal(err)
	}
	if r[0] != srv[0] || r[2] != srv[2] || !r[3].IsZero() {
		t.Errorf("client got %v %v %v", r[0], r[2], r[3])
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestExchangeFailures(t *testing.T) {
	rec, _ := Dest{QPN: 1}.AppendRecord(nil)
	connectOK := func([]Dest) ([]Dest, error) { return []Dest{{QPN: 2}}, nil }
	t.Run("client: server closes before answering", func(t *testing.T) {
		_, err := ClientExchange(ctxTimeout(t), newReplay(nil), []Dest{{QPN: 1}}, 1)
		if !errors.Is(err, syscall.EPROTO) {
			t.Errorf("err = %v, want EPROTO", err)
		}
	})
	t.Run("client: garbage answer", func(t *testing.T) {
		_, err := ClientExchange(ctxTimeout(t), newReplay(bytes.Repeat([]byte("x"), RecordLen)), []Dest{{QPN: 1}}, 1)
		if !errors.Is(err, ErrRecord) {
			t.Errorf("err = %v, want ErrRecord", err)
		}
	})
	t.Run("client: too many local records", func(t *testing.T) {
		_, err := ClientExchange(ctxTimeout(t), newReplay(nil), make([]Dest, 2), 1)
		if !errors.Is(err, syscall.EINVAL) {
			t.Errorf("err = %v, want EINVAL", err)
		}
	})
	t.Run("server: no done", func(t *testing.T) {
		_, err := ServerExchange(ctxTimeout(t), newReplay(rec), 1, connectOK)
		if !errors.Is(err, syscall.EPROTO) {
			t.Errorf("err = %v, want EPROTO", err)
		}
	})
	t.Run("server: wrong done", func(t *testing.T) {
		_, err := ServerExchange(ctxTimeout(t), newReplay(append(rec, "nope\x00"...)), 1, connectOK)
		if !errors.Is(err, ErrRecord) {
			t.Errorf("err = %v, want ErrRecord", err)
		}
	})
	t.Run("server: connect fails, nothing written", func(t *testing.T) {
		c := newReplay(append(rec, "done\x00"...))
		boom := errors.New("boom")
		_, err := ServerExchange(ctxTimeout(t), c, 1, func([]Dest) ([]Dest, error) { return nil, boom })
		if !errors.Is(err, boom) || c.w.Len() != 0 {
			t.Errorf("err = %v, wrote %d bytes", err, c.w.Len())
		}
	})
	t.Run("zero records", func(t *testing.T) {
		if _, err := ClientExchange(ctxTimeout(t), newReplay(nil), nil, 0); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("client err = %v", err)
		}
		if _, err := ServerExchange(ctxTimeout(t), newReplay(nil), 0, connectOK); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("server err = %v", err)
		}
	})
}

// TestExchangeContext: a silent peer holds the exchange only until ctx ends,
// to the instant in virtual time.
func TestExchangeContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		go io.Copy(io.Discard, b) // accepts the client's record, never answers
		const wait = 100 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		start := time.Now()
		_, err := ClientExchange(ctx, a, []Dest{{QPN: 1}}, 1)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want DeadlineExceeded", err)
		}
		if d := time.Since(start); d != wait {
			t.Errorf("took %v, want ctx's %v", d, wait)
		}
	})
}
