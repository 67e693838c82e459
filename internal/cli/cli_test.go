package cli

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func parse(t *testing.T, args ...string) (*Flags, *flag.FlagSet, error) {
	t.Helper()
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &f, fs, f.Check()
}

func TestFlags(t *testing.T) {
	f, fs, err := parse(t, "-d", "127.0.0.2", "-p", "1234", "host")
	if err != nil || f.Addr.String() != "127.0.0.2" || f.TCPPort != 1234 || f.RoCEPort != 4791 || f.Linger != 500*time.Millisecond {
		t.Fatalf("%+v, %v", f, err)
	}
	if s, err := Server(fs); s != "host" || err != nil {
		t.Errorf("Server = %q, %v", s, err)
	}
	for _, args := range [][]string{
		{},                             // no -d
		{"-d", "nonsense"},             // not an address
		{"-d", "127.0.0.1", "-p", "0"}, // not a TCP port
		{"-d", "127.0.0.1", "-roce-port", "70000"}, // not a UDP port
	} {
		if _, _, err := parse(t, args...); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	_, fs, _ = parse(t, "-d", "127.0.0.1", "a", "b")
	if _, err := Server(fs); err == nil {
		t.Error("two SERVER arguments accepted")
	}
}

func TestClosersRunNewestFirst(t *testing.T) {
	var c Closers
	var order []int
	boom := errors.New("boom")
	for i := range 3 {
		c.Add(func() error {
			order = append(order, i)
			if i == 1 {
				return boom
			}
			return nil
		})
	}
	if err := c.Close(); !errors.Is(err, boom) {
		t.Errorf("Close = %v", err)
	}
	if len(order) != 3 || order[0] != 2 || order[1] != 1 || order[2] != 0 {
		t.Errorf("order %v", order)
	}
	if err := c.Close(); err != nil || len(order) != 3 {
		t.Error("a second Close ran the functions again")
	}
}

func TestConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	f := &Flags{TCPPort: port}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan string, 1)
	go func() {
		conn, err := f.Connect(ctx, "")
		if err != nil {
			got <- err.Error()
			return
		}
		defer conn.Close()
		b := make([]byte, 5)
		io.ReadFull(conn, b)
		got <- string(b)
	}()
	var conn net.Conn
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if conn, err = f.Connect(ctx, "127.0.0.1"); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	conn.Write([]byte("hello"))
	conn.Close()
	if s := <-got; s != "hello" {
		t.Errorf("server got %q", s)
	}
	// A server nobody connects to gives up when ctx ends, saying so.
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := f.Connect(short, ""); err == nil || !strings.Contains(err.Error(), "no client") {
		t.Errorf("idle server: %v", err)
	}
}

func TestHoldEndsWithContext(t *testing.T) {
	f := &Flags{Linger: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan struct{})
	go func() { f.Hold(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Hold outlived its context")
	}
}
