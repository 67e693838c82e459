package main

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsDefaults(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := config{
		binds:        []netip.Addr{netip.MustParseAddr("127.0.0.1")},
		port:         4791,
		mtu:          1024,
		metrics:      "127.0.0.1:9464",
		logLevel:     slog.LevelInfo,
		pingpong:     true,
		pingpongPort: 18515,
		drainTimeout: 5 * time.Second,
	}
	if c.port != want.port || c.mtu != want.mtu || c.metrics != want.metrics || c.logLevel != want.logLevel ||
		c.logJSON || c.pingpong != want.pingpong || c.pingpongPort != want.pingpongPort ||
		c.drainTimeout != want.drainTimeout || len(c.binds) != 1 || c.binds[0] != want.binds[0] ||
		c.pcapFile != "" || c.logFile != "" || c.sourcePorts != 64 {
		t.Errorf("defaults = %+v, want %+v", *c, want)
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args    []string
		check   func(*config) bool
		wantErr string // substring of the one-line error; "" means success
	}{
		{[]string{"-bind", "127.0.0.2", "-bind", "127.0.0.3"}, func(c *config) bool {
			return len(c.binds) == 2 && c.binds[0] == netip.MustParseAddr("127.0.0.2") && c.binds[1] == netip.MustParseAddr("127.0.0.3")
		}, ""},
		{[]string{"-bind", "127.0.0.2,::1"}, func(c *config) bool { return len(c.binds) == 2 && c.binds[1] == netip.IPv6Loopback() }, ""},
		{[]string{"-bind", "::ffff:127.0.0.9"}, func(c *config) bool { return c.binds[0] == netip.MustParseAddr("127.0.0.9") }, ""},
		{[]string{"-mtu", "4096", "-port", "14791", "-log-format", "json", "-log-level", "debug"}, func(c *config) bool {
			return c.mtu == 4096 && c.port == 14791 && c.logJSON && c.logLevel == slog.LevelDebug
		}, ""},
		{[]string{"-metrics", ""}, func(c *config) bool { return c.metrics == "" }, ""},
		{[]string{"-pingpong=false"}, func(c *config) bool { return !c.pingpong }, ""},
		{[]string{"-metrics", "[::1]:0"}, func(c *config) bool { return c.metrics == "[::1]:0" }, ""},

		{[]string{"-mtu", "1500"}, nil, "invalid value 1500 for flag -mtu"},
		{[]string{"-mtu", "128"}, nil, "-mtu"},
		{[]string{"-mtu", "x"}, nil, "-mtu"},
		{[]string{"-port", "0"}, nil, "-port: want 1..65535"},
		{[]string{"-port", "70000"}, nil, "-port"},
		{[]string{"-pingpong-port", "-1"}, nil, "-pingpong-port"},
		{[]string{"-bind", "not-an-ip"}, nil, `"not-an-ip" is not an IP address`},
		{[]string{"-bind", "0.0.0.0"}, nil, "unicast address"},
		{[]string{"-bind", "224.0.0.1"}, nil, "unicast address"},
		{[]string{"-bind", "fe80::1%lo"}, nil, "does not serve link-local"},
		{[]string{"-bind", "fe80::1"}, nil, "does not serve link-local"},
		{[]string{"-bind", "127.0.0.1,127.0.0.1"}, nil, "given twice"},
		{[]string{"-metrics", "9464"}, nil, "-metrics: want host:port"},
		{[]string{"-metrics", "localhost:http"}, nil, "bad port"},
		{[]string{"-log-level", "loud"}, nil, "-log-level"},
		{[]string{"-log-format", "xml"}, nil, "-log-format"},
		{[]string{"-drain-timeout", "0s"}, nil, "-drain-timeout"},
		{[]string{"-source-ports", "-1"}, nil, "-source-ports: want 0..16384"},
		{[]string{"-source-ports", "0"}, func(c *config) bool { return c.sourcePorts == 0 }, ""},
		{[]string{"-readers", "0"}, nil, "-readers: want 1..64"},
		{[]string{"-readers", "2"}, func(c *config) bool { return c.readers == 2 && c.gso && c.gro && !c.runToCompletion }, ""},
		{[]string{"-gso=false", "-gro=false", "-run-to-completion"}, func(c *config) bool { return !c.gso && !c.gro && c.runToCompletion }, ""},
		{[]string{"-nosuchflag"}, nil, "flag provided but not defined: -nosuchflag"},
		{[]string{"extra"}, nil, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			c, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if !tt.check(c) {
					t.Errorf("config = %+v", *c)
				}
				return
			}
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("err = %v, want a usageError", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %q, want one line containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseFlagsHelp(t *testing.T) {
	var b strings.Builder
	_, err := parseFlags([]string{"-h"}, &b)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-bind", "-port", "-mtu", "-metrics", "-pcap", "-pingpong"} {
		if !strings.Contains(b.String(), f) {
			t.Errorf("usage does not mention %s:\n%s", f, b.String())
		}
	}
}

func TestCheckLocal(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.77", true},    // all of 127/8 is local on Linux
		{"192.0.2.55", false},   // TEST-NET-1: never configured here
		{"2001:db8::55", false}, // documentation prefix
	}
	for _, tt := range tests {
		err := checkLocal([]netip.Addr{netip.MustParseAddr(tt.addr)})
		if (err == nil) != tt.ok {
			t.Errorf("checkLocal(%s) = %v, want ok=%v", tt.addr, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "no interface of this host has that address") {
			t.Errorf("checkLocal(%s) = %q", tt.addr, err)
		}
	}
}
