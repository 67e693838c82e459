package verbsprobe

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
)

func TestParseLine(t *testing.T) {
	for _, tt := range []struct {
		line string
		want string // Msg.String of the result; "" for an error
	}{
		{"hello test=atomic qpn=0x000011 psn=0x123456 gid=00000000000000000000ffffc612000b", "="},
		{"verified ok=1", "="},
		{"done", "="},
		{"", ""},
		{" target", ""},
		{"target  addr=1", ""},
		{"target addr", ""},
		{"target addr=", ""},
		{"target =1", ""},
		{"target a=b=c", ""},
		{"target a=\x01", ""},
		{"tar\tget", ""},
		{"x " + strings.Repeat("k=v ", 130), ""},
	} {
		m, err := ParseLine(tt.line)
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("ParseLine(%q) = %+v, want an error", tt.line, m)
		case tt.want == "" && !errors.Is(err, ErrLine):
			t.Errorf("ParseLine(%q): error %v does not wrap ErrLine", tt.line, err)
		case tt.want == "=" && (err != nil || m.String() != tt.line):
			t.Errorf("ParseLine(%q) = %q, %v", tt.line, m.String(), err)
		}
	}
	m, _ := ParseLine("target addr=0x55d0e4c6f400 rkey=0x8000176 len=1024 seed=010")
	for _, tt := range []struct {
		key  string
		want uint64
		ok   bool
	}{{"addr", 0x55d0e4c6f400, true}, {"rkey", 0x8000176, true}, {"len", 1024, true}, {"seed", 8, true}, {"nope", 0, false}} {
		got, err := m.Uint(tt.key)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("Uint(%s) = %d, %v", tt.key, got, err)
		}
	}
	if m, _ := ParseLine("check value=0xzz"); true {
		if _, err := m.Uint("value"); !errors.Is(err, ErrLine) {
			t.Errorf("Uint of a bad number: %v", err)
		}
	}
}

func FuzzParseLine(f *testing.F) {
	for _, s := range []string{"hello test=atomic qpn=0x11", "done", "a=b", "x y=z w=", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		m, err := ParseLine(line)
		if err != nil {
			return
		}
		if m.String() != line {
			t.Fatalf("ParseLine(%q).String() = %q", line, m.String())
		}
		for _, fl := range m.Fields {
			m.Uint(fl.Key)
		}
	})
}

func TestConn(t *testing.T) {
	a, b := net.Pipe()
	ca, cb := NewConn(a), NewConn(b)
	defer ca.Close()
	defer cb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- ca.Send(ctx, "target", "addr", uint64(0x1000), "rkey", uint32(0x42), "len", 1024, "ok", true, "test", "atomic")
	}()
	m, err := cb.Recv(ctx, "target")
	if err != nil || <-errc != nil {
		t.Fatalf("Recv: %v", err)
	}
	if m.String() != "target addr=0x1000 rkey=0x42 len=1024 ok=1 test=atomic" {
		t.Errorf("got %q", m)
	}
	// The wrong verb, and the peer's error line.
	go func() { errc <- ca.Send(ctx, "verified", "ok", false) }()
	if _, err := cb.Recv(ctx, "result"); !errors.Is(err, ErrLine) || <-errc != nil {
		t.Errorf("Recv of the wrong verb: %v", err)
	}
	go func() { errc <- ca.Send(ctx, "error", "msg", "server_runs_flush") }()
	if _, err := cb.Recv(ctx, "hello"); err == nil || !strings.Contains(err.Error(), "server_runs_flush") || <-errc != nil {
		t.Errorf("Recv of an error line: %v", err)
	}
	// What Send refuses, before writing anything.
	for _, kv := range [][]any{{"odd"}, {"k", 1.5}, {"k", "has space"}, {"k", ""}} {
		if err := ca.Send(ctx, "x", kv...); err == nil {
			t.Errorf("Send(%v) succeeded", kv)
		}
	}
	// A line longer than MaxLine, and a deadline.
	go func() { a.Write([]byte(strings.Repeat("x", MaxLine+10) + "\n")) }()
	if _, err := cb.Recv(ctx, "x"); !errors.Is(err, ErrLine) {
		t.Errorf("Recv of a long line: %v", err)
	}
	short, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := ca.Recv(short, "x"); err == nil {
		t.Error("Recv returned without a line")
	}
}

// loopbackPair opens two goroce devices on 127.0.0.1 and 127.0.0.2, on a UDP port that is
// free on the first.
func loopbackPair(t *testing.T) (srv, cli *roce.Device) {
	t.Helper()
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(u.LocalAddr().(*net.UDPAddr).Port)
	u.Close()
	for i, a := range []string{"127.0.0.1", "127.0.0.2"} {
		d, err := roce.Open(netip.MustParseAddr(a), roce.WithPort(port), roce.WithMTU(roce.MTU1024))
		if err != nil {
			t.Skipf("loopback device %s: %v", a, err)
		}
		t.Cleanup(func() { d.Close() })
		if i == 0 {
			srv = d
		} else {
			cli = d
		}
	}
	return srv, cli
}

// TestLoopback runs goroce's server and client of every test that has both against each
// other: the harness the interop rows use, proven without the lab.
func TestLoopback(t *testing.T) {
	for name, tt := range Tests {
		if tt.Server == nil || tt.Client == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			srv, cli := loopbackPair(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a, b := net.Pipe()
			type result struct {
				sum string
				err error
			}
			sc := make(chan result, 1)
			go func() {
				s, err := Run(ctx, srv, name, false, a)
				sc <- result{s, err}
			}()
			sum, err := Run(ctx, cli, name, true, b)
			if err != nil {
				t.Errorf("client: %v", err)
			}
			s := <-sc
			if s.err != nil {
				t.Errorf("server: %v", s.err)
			}
			t.Logf("client: %s; server: %s", sum, s.sum)
		})
	}
}

// TestRunRefuses checks Run's errors: an unknown test, a role goroce does not have yet,
// and a peer that runs another test.
func TestRunRefuses(t *testing.T) {
	srv, cli := loopbackPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, err := Run(ctx, cli, "nope", true, b); err == nil {
		t.Error("Run of an unknown test succeeded")
	}
	for name, tt := range Tests {
		if tt.Client == nil {
			if _, err := Run(ctx, cli, name, true, b); err == nil || !strings.Contains(err.Error(), tt.Needs) {
				t.Errorf("Run(%s) without a client role: %v", name, err)
			}
		}
	}
	errc := make(chan error, 1)
	go func() {
		_, err := Run(ctx, srv, "atomic", false, a)
		errc <- err
	}()
	p, err := NewPeer(cli, "flush", qpAccess)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Connect(ctx, b, true); err == nil || !strings.Contains(err.Error(), "server_runs_atomic") {
		t.Errorf("Connect to a server of another test: %v", err)
	}
	if err := <-errc; err == nil {
		t.Error("the server accepted a client of another test")
	}
}
