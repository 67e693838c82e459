package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	ok := []struct {
		name string
		args []string
		want func(*config) bool
	}{
		{"rc server defaults", []string{"rc", "-d", "127.0.0.1"}, func(c *config) bool {
			return c.server == "" && c.size == 4096 && c.mtu == 1024 && c.iters == 1000 && c.rxDepth == 500 && c.TCPPort == 18515 && c.numQP == 1
		}},
		{"ud default size", []string{"ud", "-d", "127.0.0.1"}, func(c *config) bool { return c.size == 2048 }},
		{"client with flags", []string{"rc", "-d", "198.18.0.1", "-g", "1", "-n", "200", "-s", "1", "-c", "-p", "1234", "198.18.0.11"}, func(c *config) bool {
			return c.server == "198.18.0.11" && c.gidIndex == 1 && c.iters == 200 && c.size == 1 && c.validate && c.TCPPort == 1234
		}},
		{"srq keeps -q", []string{"srq", "-d", "::1", "-q", "4"}, func(c *config) bool { return c.numQP == 4 }},
		{"rc ignores -q", []string{"rc", "-d", "::1", "-q", "4"}, func(c *config) bool { return c.numQP == 1 }},
	}
	for _, tt := range ok {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseArgs(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(c) {
				t.Errorf("config %+v", c)
			}
		})
	}
	bad := []struct {
		name string
		args []string
	}{
		{"no mode", nil},
		{"unknown mode", []string{"xrc", "-d", "127.0.0.1"}},
		{"no -d", []string{"rc"}},
		{"device name instead of address", []string{"rc", "-d", "rxe0"}},
		{"bad mtu", []string{"rc", "-d", "127.0.0.1", "-m", "1500"}},
		{"zero size", []string{"rc", "-d", "127.0.0.1", "-s", "-1"}},
		{"zero iters", []string{"rc", "-d", "127.0.0.1", "-n", "0"}},
		{"too many QPs", []string{"srq", "-d", "127.0.0.1", "-q", "257"}},
		{"rx depth below QPs", []string{"srq", "-d", "127.0.0.1", "-q", "16", "-r", "16"}},
		{"two servers", []string{"rc", "-d", "127.0.0.1", "a", "b"}},
		{"loss 1", []string{"rc", "-d", "127.0.0.1", "-loss", "1"}},
		{"unknown flag", []string{"rc", "-d", "127.0.0.1", "-x"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if c, err := parseArgs(tt.args, io.Discard); err == nil {
				t.Errorf("parseArgs(%q) = %+v, want an error", tt.args, c)
			}
		})
	}
}

var summary = regexp.MustCompile(`(?m)^(\d+) bytes in [0-9.]+ seconds = [0-9.]+ Mbit/sec\n(\d+) iters in [0-9.]+ seconds = [0-9.]+ usec/iter$`)

// freeTCPPort returns a TCP port that was free a moment ago.
func freeTCPPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestLoopback runs a server and a client of each mode against each other over
// 127.0.0.1 and 127.0.0.2, with buffer validation, and with loss for RC.
func TestLoopback(t *testing.T) {
	tests := []struct {
		mode  string
		extra []string
	}{
		{"rc", []string{"-s", "1"}},
		{"rc", []string{"-s", "65536", "-m", "4096"}},
		// Linger past a few retransmission timeouts (67 ms each): the peer may
		// have lost our last ACK.
		{"rc", []string{"-s", "4096", "-loss", "0.05", "-seed", "7", "-linger", "500ms"}},
		{"ud", []string{"-s", "1024"}},
		{"srq", []string{"-q", "4", "-s", "64"}},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%s%v", tt.mode, tt.extra), func(t *testing.T) {
			tcp := fmt.Sprint(freeTCPPort(t))
			roce := fmt.Sprint(20000 + (time.Now().Nanosecond()/1000+i*101)%20000)
			common := append([]string{"-n", "50", "-c", "-p", tcp, "-roce-port", roce, "-timeout", "30s", "-linger", "50ms"}, tt.extra...)
			var wg sync.WaitGroup
			var srvOut, srvErr bytes.Buffer
			var srvRC int
			wg.Add(1)
			go func() {
				defer wg.Done()
				srvRC = run(append([]string{tt.mode, "-d", "127.0.0.1"}, common...), &srvOut, &srvErr)
			}()
			var cliOut, cliErr bytes.Buffer
			cliRC := 1
			// The server may not listen yet: retry like a user would.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				cliOut.Reset()
				cliErr.Reset()
				cliRC = run(append(append([]string{tt.mode, "-d", "127.0.0.2"}, common...), "127.0.0.1"), &cliOut, &cliErr)
				if cliRC == 0 || !strings.Contains(cliErr.String(), "couldn't connect") {
					break
				}
			}
			wg.Wait()
			for _, side := range []struct {
				name     string
				rc       int
				out, err *bytes.Buffer
			}{{"server", srvRC, &srvOut, &srvErr}, {"client", cliRC, &cliOut, &cliErr}} {
				if side.rc != 0 {
					t.Errorf("%s exit %d: %s%s", side.name, side.rc, side.out, side.err)
					continue
				}
				m := summary.FindStringSubmatch(side.out.String())
				if m == nil || m[2] != "50" {
					t.Errorf("%s: no summary for 50 iters:\n%s", side.name, side.out)
				}
			}
		})
	}
}

func TestCheckPattern(t *testing.T) {
	c := &config{mode: "rc", size: 2*pageSize + 3}
	s := &session{c: c, fill: 0x7b}
	p := bytes.Repeat([]byte{0x7b}, c.size)
	if err := s.check(p); err != nil {
		t.Errorf("server, client without -c: %v", err)
	}
	p[pageSize] = 0
	if err := s.check(p); err != nil {
		t.Errorf("server, client with -c: %v", err)
	}
	p[pageSize+1] = 0
	if err := s.check(p); err == nil {
		t.Error("server accepted a zero inside a page")
	}
	c.server = "x"
	p[pageSize+1] = 0x7b
	if err := s.check(p); err == nil {
		t.Error("client accepted page 0 without its zero")
	}
	p[0] = 0
	p[2*pageSize] = 0
	if err := s.check(p); err != nil {
		t.Errorf("client, exact echo: %v", err)
	}
}
