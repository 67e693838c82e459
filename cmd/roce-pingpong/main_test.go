package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
)

func TestParseArgs(t *testing.T) {
	ok := []struct {
		name string
		args []string
		want func(*config) bool
	}{
		{"rc server defaults", []string{"rc", "-d", "127.0.0.1"}, func(c *config) bool {
			return c.server == "" && c.size == 4096 && c.mtu == 1024 && c.iters == 1000 && c.rxDepth == 500 && c.TCPPort == 18515 &&
				c.numQP == 1 && c.Addr.String() == "127.0.0.1" && c.IBPort == 1 && c.RoCEPort == 4791
		}},
		{"ud default size", []string{"ud", "-d", "127.0.0.1"}, func(c *config) bool { return c.size == 2048 }},
		{"client with flags", []string{"rc", "-d", "198.18.0.1", "-g", "1", "-n", "200", "-s", "1", "-c", "-p", "1234", "198.18.0.11"}, func(c *config) bool {
			return c.server == "198.18.0.11" && c.gidIndex == 1 && c.iters == 200 && c.size == 1 && c.validate && c.TCPPort == 1234
		}},
		// The invocations of issue 14, as a user of ibv_rc_pingpong types them.
		{"flags after the host", []string{"rc", "127.0.0.1", "-d", "127.0.0.2", "-n", "10"}, func(c *config) bool {
			return c.server == "127.0.0.1" && c.Addr.String() == "127.0.0.2" && c.iters == 10
		}},
		{"attached argument", []string{"rc", "-n10", "127.0.0.1"}, func(c *config) bool { return c.iters == 10 && c.server == "127.0.0.1" }},
		{"long options with =", []string{"rc", "--ib-dev=127.0.0.2", "--size=64", "--iters=7", "127.0.0.1"}, func(c *config) bool {
			return c.Addr.String() == "127.0.0.2" && c.size == 64 && c.iters == 7
		}},
		{"long options with a separate argument", []string{"uc", "--ib-dev", "127.0.0.2", "--size", "64", "--mtu", "2048", "--rx-depth", "9", "--gid-idx", "1", "127.0.0.1"}, func(c *config) bool {
			return c.Addr.String() == "127.0.0.2" && c.size == 64 && c.mtu == 2048 && c.rxDepth == 9 && c.gidIndex == 1
		}},
		{"-i 1", []string{"rc", "-d", "127.0.0.2", "-i", "1", "127.0.0.1"}, func(c *config) bool { return c.IBPort == 1 }},
		{"--ib-port=1", []string{"rc", "--ib-port=1"}, func(c *config) bool { return c.IBPort == 1 }},
		{"bundled short options", []string{"rc", "-ec", "-n5"}, func(c *config) bool { return c.events && c.validate && c.iters == 5 }},
		{"-d names an interface", []string{"rc", "-d", "lo", "127.0.0.1"}, func(c *config) bool { return c.Addr.String() == "127.0.0.1" }},
		{"no -d: resolved from the TCP connection later", []string{"rc", "127.0.0.1"}, func(c *config) bool { return !c.Addr.IsValid() && c.Device == "" }},
		{"options before the mode", []string{"-n", "3", "srq", "-q", "4"}, func(c *config) bool { return c.mode == "srq" && c.iters == 3 && c.numQP == 4 }},
		{"srq --num-qp", []string{"srq", "--num-qp=4"}, func(c *config) bool { return c.numQP == 4 }},
		{"rc ignores -q", []string{"rc", "-d", "::1", "-q", "4"}, func(c *config) bool { return c.numQP == 1 }},
		{"odp and friends accepted", []string{"rc", "-oOPNU", "--odp"}, func(c *config) bool { return c.mode == "rc" }},
		{"-- ends the options", []string{"rc", "--", "127.0.0.1"}, func(c *config) bool { return c.server == "127.0.0.1" }},
		{"goroce's long options", []string{"rc", "--loss=0.1", "--seed", "3", "--stats", "--timeout=2s", "--roce-port", "5000"}, func(c *config) bool {
			return c.Loss == 0.1 && c.Seed == 3 && c.Stats && c.Timeout == 2*time.Second && c.RoCEPort == 5000
		}},
	}
	for _, tt := range ok {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := parseArgs(tt.args)
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
		msg  string // in the one-line error
	}{
		{"no mode", nil, "missing MODE"},
		{"unknown mode", []string{"xrc", "-d", "127.0.0.1"}, "unknown MODE"},
		{"device name that is no interface", []string{"rc", "-d", "rxe0"}, "-d rxe0: not an IP address or a network interface"},
		{"bad mtu", []string{"rc", "-m", "1500"}, "-m 1500"},
		{"negative size", []string{"rc", "-s", "-1"}, "-s -1"},
		{"zero iters", []string{"rc", "-n", "0"}, "-n 0"},
		{"not a number", []string{"rc", "-n", "ten"}, `invalid value "ten" for -n`},
		{"missing value", []string{"rc", "-n"}, "-n needs a value"},
		{"too many QPs", []string{"srq", "-q", "257"}, "-q 257"},
		{"rx depth below QPs", []string{"srq", "-q", "16", "-r", "16"}, "-r 16"},
		{"two servers", []string{"rc", "a", "b"}, "too many arguments"},
		{"loss 1", []string{"rc", "--loss", "1"}, "--loss 1"},
		{"unknown option", []string{"rc", "-x"}, "unknown option: -x"},
		{"unknown long option", []string{"rc", "--frobnicate"}, "unknown option: --frobnicate"},
		{"port 2", []string{"rc", "-i", "2"}, "-i 2: a goroce device has port 1 only"},
		{"timestamps", []string{"rc", "-t"}, "-t: completion timestamps are not supported"},
		{"device memory", []string{"rc", "--dm"}, "-j: device memory is not supported"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := parseArgs(tt.args)
			if err == nil {
				t.Fatalf("parseArgs(%q) = %+v, want an error", tt.args, c)
			}
			if !strings.Contains(err.Error(), tt.msg) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line with %q", err, tt.msg)
			}
		})
	}
}

// TestRunMessages: a mistake is one line on stderr and exit 1; the usage comes
// only with -h, on stdout, exit 0.
func TestRunMessages(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"rc", "-x"}, &out, &errb); rc != 1 || out.Len() != 0 || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("bad option: exit %d, stdout %q, stderr %q", rc, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if rc := run([]string{"-h"}, &out, &errb); rc != 0 || errb.Len() != 0 || !strings.Contains(out.String(), "--ib-dev") {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", rc, out.String(), errb.String())
	}
	out.Reset()
	if rc := run([]string{"--version"}, &out, &errb); rc != 0 || !strings.HasPrefix(out.String(), "roce-pingpong ") {
		t.Errorf("--version: exit %d, stdout %q", rc, out.String())
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
		{"rc", []string{"-s", "4096", "--loss", "0.05", "--seed", "7", "--linger", "500ms"}},
		{"ud", []string{"-s", "1024"}},
		{"srq", []string{"-q", "4", "-s", "64"}},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%s%v", tt.mode, tt.extra), func(t *testing.T) {
			tcp := fmt.Sprint(freeTCPPort(t))
			roce := fmt.Sprint(20000 + (time.Now().Nanosecond()/1000+i*101)%20000)
			common := append([]string{"-n", "50", "-c", "-p", tcp, "--roce-port", roce, "--timeout", "30s", "--linger", "50ms"}, tt.extra...)
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

// TestUDSizeOverPortMTU: ud with a message larger than the device's active MTU
// refuses before it connects, with the stock tool's line and exit 1; up to the
// MTU it goes on to connect (to a port where nobody listens, so it fails there).
func TestUDSizeOverPortMTU(t *testing.T) {
	for _, tc := range []struct {
		size   string // -s; "" is ud's default, 2048
		mtu    roce.MTU
		refuse bool
	}{
		{"1024", roce.MTU1024, false},
		{"1025", roce.MTU1024, true},
		{"", roce.MTU1024, true},
		{"", roce.MTU2048, false},
		{"2049", roce.MTU2048, true},
		{"4096", roce.MTU4096, false},
		{"4097", roce.MTU4096, true},
	} {
		t.Run(fmt.Sprintf("s%s/mtu%d", tc.size, tc.mtu.Bytes()), func(t *testing.T) {
			u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			rport := fmt.Sprint(u.LocalAddr().(*net.UDPAddr).Port)
			u.Close()
			args := []string{"ud", "-d", "127.0.0.1", "--roce-port", rport, "-p", fmt.Sprint(freeTCPPort(t)), "127.0.0.1"}
			if tc.size != "" {
				args = append(args, "-s", tc.size)
			}
			c, _, err := parseArgs(args)
			if err != nil {
				t.Fatal(err)
			}
			c.portMTU = tc.mtu
			var out, errb bytes.Buffer
			rc := report(&errb, runPingpong(context.Background(), c, &out, &errb))
			want := fmt.Sprintf("Requested size larger than port MTU (%d)\n", tc.mtu.Bytes())
			switch {
			case tc.refuse && (rc != 1 || errb.String() != want):
				t.Errorf("exit %d, stderr %q; want exit 1, stderr %q", rc, errb.String(), want)
			case !tc.refuse && (rc != 1 || !strings.Contains(errb.String(), "couldn't connect")):
				t.Errorf("exit %d, stderr %q; want it to pass the MTU check and fail to connect", rc, errb.String())
			}
		})
	}
}
