package cli

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
)

func parse(t *testing.T, args ...string) (*Flags, []string, error) {
	t.Helper()
	var f Flags
	o := NewOptions("t")
	f.Register(o)
	ops, err := o.Parse(args)
	if err != nil {
		return nil, nil, err
	}
	peer := ""
	if len(ops) > 0 {
		peer = ops[0]
	}
	return &f, ops, f.Check(peer)
}

func TestFlags(t *testing.T) {
	f, ops, err := parse(t, "-d", "127.0.0.2", "-p", "1234", "host")
	if err != nil || f.Addr.String() != "127.0.0.2" || f.TCPPort != 1234 || f.RoCEPort != 4791 || f.Linger != 500*time.Millisecond ||
		f.IBPort != 1 || len(ops) != 1 || ops[0] != "host" {
		t.Fatalf("%+v %q, %v", f, ops, err)
	}
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-d", "nonsense"}, "-d nonsense: not an IP address or a network interface"},
		{[]string{"-p", "0"}, "-p 0: not a TCP port"},
		{[]string{"--roce-port", "70000"}, "--roce-port 70000: not a UDP port"},
		{[]string{"-i", "2"}, "-i 2"},
		{[]string{"--timeout=-1s"}, "cannot be negative"},
		{[]string{"-p"}, "option -p needs a value"},
		{[]string{"--port=x"}, `invalid value "x" for --port`},
	} {
		if _, _, err := parse(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%q: err %v, want %q", tt.args, err, tt.msg)
		}
	}
	if _, _, err := parse(t, "-h"); err != ErrHelp {
		t.Errorf("-h: %v", err)
	}
}

// TestPermutation: options and operands in any order, as glibc's getopt_long
// permutes them, and "--" ends the options.
func TestPermutation(t *testing.T) {
	for _, tt := range []struct {
		args []string
		ops  []string
		port int
	}{
		{[]string{"rc", "host", "-p", "7"}, []string{"rc", "host"}, 7},
		{[]string{"-p7", "rc", "host"}, []string{"rc", "host"}, 7},
		{[]string{"rc", "--port=7", "host", "--stats"}, []string{"rc", "host"}, 7},
		{[]string{"rc", "--", "-p", "7"}, []string{"rc", "-p", "7"}, 18515},
		{[]string{"rc", "-", "host"}, []string{"rc", "-", "host"}, 18515},
	} {
		var f Flags
		o := NewOptions("t")
		f.Register(o)
		ops, err := o.Parse(tt.args)
		if err != nil || !slices.Equal(ops, tt.ops) || f.TCPPort != tt.port {
			t.Errorf("%q: operands %q port %d err %v; want %q port %d", tt.args, ops, f.TCPPort, err, tt.ops, tt.port)
		}
	}
}

func TestOperands(t *testing.T) {
	if m, s, err := Operands([]string{"rc"}, "MODE"); m != "rc" || s != "" || err != nil {
		t.Errorf("one: %q %q %v", m, s, err)
	}
	if m, s, err := Operands([]string{"rc", "h"}, "MODE"); m != "rc" || s != "h" || err != nil {
		t.Errorf("two: %q %q %v", m, s, err)
	}
	if _, _, err := Operands(nil, "MODE"); err == nil || !strings.Contains(err.Error(), "missing MODE") {
		t.Errorf("none: %v", err)
	}
	if _, _, err := Operands([]string{"a", "b", "c"}, "MODE"); err == nil {
		t.Error("three accepted")
	}
}

func TestLocalAddr(t *testing.T) {
	for _, tt := range []struct {
		dev, peer, want string
	}{
		{"127.0.0.3", "", "127.0.0.3"},
		{"::ffff:127.0.0.3", "", "127.0.0.3"},
		{"lo", "", "127.0.0.1"},
		{"lo", "127.0.0.5", "127.0.0.1"},
	} {
		peer, _ := netip.ParseAddr(tt.peer)
		got, err := LocalAddr("-d", tt.dev, peer)
		if err != nil || got.String() != tt.want {
			t.Errorf("LocalAddr(%q, %q) = %v, %v; want %s", tt.dev, tt.peer, got, err, tt.want)
		}
	}
	if _, err := LocalAddr("-x", "rxe0", netip.Addr{}); err == nil || !strings.Contains(err.Error(), "-x rxe0: not an IP address") {
		t.Errorf("rxe0: %v", err)
	}
}

func TestRouteSource(t *testing.T) {
	src, err := RouteSource(netip.MustParseAddr("127.0.0.9"), 4791)
	if err != nil || !src.IsLoopback() {
		t.Errorf("RouteSource(127.0.0.9) = %v, %v", src, err)
	}
}

// TestOpenError: a device whose address another process holds fails with the
// one-process-per-address rule and the tool's own options.
func TestOpenError(t *testing.T) {
	addr := netip.MustParseAddr("127.0.0.1")
	held, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.LocalAddr().(*net.UDPAddr).Port
	_, err = roce.Open(addr, roce.WithPort(uint16(port)))
	if err == nil {
		t.Fatal("opened a device on a held port")
	}
	msg := OpenError(err, addr, port, "-I", "--udp-port").Error()
	for _, want := range []string{"one process serves one address", "-I 127.0.0.x", "--udp-port"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "WithPort") || strings.Contains(msg, "\n") {
		t.Errorf("message %q: Go API names or several lines", msg)
	}
	other := OpenError(syscall.EACCES, addr, port, "-d", "--roce-port")
	if !errors.Is(other, syscall.EACCES) || strings.Contains(other.Error(), "one process") {
		t.Errorf("other errors pass through: %v", other)
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
