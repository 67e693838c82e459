package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testsupport/syncbuf"
	"github.com/goroce/goroce/internal/tool/devapi"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/metrics"
	"github.com/goroce/goroce/roce"
)

func TestMTUCode(t *testing.T) {
	for bytes, want := range map[int]uint8{256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5} {
		if got := mtuCode(bytes); got != want {
			t.Errorf("mtuCode(%d) = %d, want %d", bytes, got, want)
		}
	}
}

func TestPcapPath(t *testing.T) {
	tests := []struct {
		path  string
		addr  string
		binds int
		want  string
	}{
		{"/var/log/roce.pcap", "192.0.2.1", 1, "/var/log/roce.pcap"},
		{"/var/log/roce.pcap", "192.0.2.1", 2, "/var/log/roce-192.0.2.1.pcap"},
		{"cap", "2001:db8::1", 2, "cap-2001_db8__1"},
	}
	for _, tt := range tests {
		if got := pcapPath(tt.path, netip.MustParseAddr(tt.addr), tt.binds); got != tt.want {
			t.Errorf("pcapPath(%q, %s, %d) = %q, want %q", tt.path, tt.addr, tt.binds, got, tt.want)
		}
	}
}

func TestReopenFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "x.log")
	f, err := openReopenFile(p, os.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "one\n")
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "two\n") // still the old file
	if err := f.Reopen(); err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "three\n")
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("x")); err == nil {
		t.Error("write after Close succeeded")
	}
	old, _ := os.ReadFile(p + ".1")
	cur, _ := os.ReadFile(p)
	if string(old) != "one\ntwo\n" || string(cur) != "three\n" {
		t.Errorf("old = %q, new = %q", old, cur)
	}
	if _, err := openReopenFile(filepath.Join(dir, "no", "such", "dir"), os.O_APPEND); err == nil {
		t.Error("opening a file in a missing directory succeeded")
	}
}

// fakeShards is a device whose shard ages the test sets.
type fakeShards struct {
	mu   sync.Mutex
	ages []time.Duration
}

func (f *fakeShards) Addr() netip.Addr { return netip.MustParseAddr("192.0.2.1") }
func (f *fakeShards) ShardLoopAges() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.ages...)
}
func (f *fakeShards) set(ages ...time.Duration) {
	f.mu.Lock()
	f.ages = ages
	f.mu.Unlock()
}

// TestHealthzReadyz: /healthz fails with the reason when a shard is wedged past
// the deadline; /readyz also fails until roced accepts sessions; the shard ages
// are exported; /debug/* is served only where allowed.
func TestHealthzReadyz(t *testing.T) {
	var ready atomic.Bool
	shards := &fakeShards{}
	shards.set(0, 0, 0)
	h := newHealth([]shardAger{shards}, 5*time.Second)
	reg := newRegistry(metrics.NewCollector(metrics.Options{}), h)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ep := endpoints{reg: reg, ready: &ready, health: h.check, log: log}
	get := func(mux *http.ServeMux, path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code, rec.Body.String()
	}
	noDebug := newMux(ep)
	ep.debug = newDebugMux(func() any { return []devapi.QP{} }, log)
	mux := newMux(ep)
	const wedged = "engine shard 1 of 192.0.2.1 has not finished a pass for 7s (deadline 5s)\n"
	tests := []struct {
		name          string
		ready         bool
		ages          []time.Duration
		health, readz int
		body          string
	}{
		{"starting", false, []time.Duration{0, 0, 0}, 200, 503, "ok\n"},
		{"serving", true, []time.Duration{0, 250 * time.Millisecond, 0}, 200, 200, "ok\n"},
		{"wedged", true, []time.Duration{0, 7 * time.Second, 0}, 503, 503, wedged},
		{"wedged while draining", false, []time.Duration{0, 7 * time.Second, 0}, 503, 503, wedged},
		{"draining", false, []time.Duration{0, 0, 0}, 200, 503, "ok\n"},
	}
	for _, tt := range tests {
		ready.Store(tt.ready)
		shards.set(tt.ages...)
		code, body := get(mux, "/healthz")
		if code != tt.health || body != tt.body {
			t.Errorf("%s: /healthz = %d %q, want %d %q", tt.name, code, body, tt.health, tt.body)
		}
		if code, body := get(mux, "/readyz"); code != tt.readz || (code == 200) != (body == "ready\n") {
			t.Errorf("%s: /readyz = %d %q, want %d", tt.name, code, body, tt.readz)
		}
	}
	shards.set(0, 3*time.Second, 0)
	h.poll()
	if code, body := get(mux, "/metrics"); code != http.StatusOK ||
		!strings.Contains(body, `roce_shard_loop_age_seconds{address="192.0.2.1",shard="1"} 3`) ||
		!strings.Contains(body, "roce_packets_total") {
		t.Errorf("/metrics = %d without the shard ages or the engine counters:\n%s", code, body)
	}
	if code, body := get(mux, "/debug/qps"); code != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Errorf("/debug/qps = %d %q, want []", code, body)
	}
	if code, body := get(noDebug, "/debug/qps"); code != http.StatusNotFound || !strings.Contains(body, "-debug") {
		t.Errorf("/debug/qps where not allowed = %d %q, want 404 naming -debug", code, body)
	}
	if code, _ := get(mux, "/"); code != http.StatusOK {
		t.Errorf("/ = %d", code)
	}
	if code, _ := get(mux, "/nope"); code != http.StatusNotFound {
		t.Errorf("/nope = %d, want 404", code)
	}
}

func TestDebugHere(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:9464": true, "127.3.4.5:1": true, "[::1]:9464": true, "localhost:9464": true,
		"192.0.2.10:9464": false, ":9464": false, "0.0.0.0:9464": false, "[::]:9464": false, "myhost:9464": false,
	} {
		if got := debugHere(addr); got != want {
			t.Errorf("debugHere(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestRunInProcess runs the daemon function itself: it serves until the context ends,
// /healthz is 503 once shutdown starts, and it returns 0.
func TestRunInProcess(t *testing.T) {
	addrs := testAddrs(1)
	port := freeUDPPort(t, addrs...)
	metrics := freeTCPAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-metrics", metrics,
			"-pingpong=false", "-ud-pingpong=false"}, &stdout, &stderr)
	}()
	waitFor(t, "the metrics endpoint", func() bool {
		code, _ := tryGet("http://" + metrics + "/healthz")
		return code == http.StatusOK
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run returned %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after the context ended")
	}
	if code, _ := tryGet("http://" + metrics + "/healthz"); code != 0 {
		t.Errorf("/healthz answers %d after run returned", code)
	}
	if !bytes.Contains([]byte(stdout.String()), []byte("serving RoCEv2 on "+addrs[0].String())) {
		t.Errorf("stdout:\n%s", stdout.String())
	}
}

// FuzzParseFlags: any command line either parses or fails with one line; never a
// panic, never a multi-line error.
func FuzzParseFlags(f *testing.F) {
	f.Add("-bind\x00127.0.0.1\x00-mtu\x004096")
	f.Add("-metrics\x00[::1]:9464\x00-log-level\x00debug")
	f.Add("-bind\x00::ffff:10.0.0.1,fe80::1\x00-port\x0065535")
	f.Add("-pingpong-max-size\x00-1\x00-drain-timeout\x001h")
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		c, err := parseFlags(args, io.Discard)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("multi-line error %q", err)
			}
			return
		}
		if len(c.binds) == 0 || c.port == 0 || mtuCode(c.mtu) < 1 || mtuCode(c.mtu) > 5 || c.ppMaxSize < 1 {
			t.Errorf("accepted an invalid config %+v", *c)
		}
	})
}

// TestWatchEventsStopsOnDeviceFatal: the daemon logs async events, and a device
// whose socket dies (DEVICE_FATAL) ends the daemon with an error, so a supervisor
// restarts it rather than leaving a deaf daemon running.
func TestWatchEventsStopsOnDeviceFatal(t *testing.T) {
	la, lb := link.Pipe(netip.MustParseAddrPort("127.0.0.1:4791"), netip.MustParseAddrPort("127.0.0.2:4791"))
	defer lb.Close()
	dev, err := roce.OpenLink(la)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	var logBuf syncbuf.Buffer
	d := &daemon{log: slog.New(slog.NewTextHandler(&logBuf, nil))}
	errc := make(chan error, 1)
	go func() { errc <- d.watchEvents(dev) }()
	la.Close() // the socket goes away under the open device
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "DEVICE_FATAL") {
			t.Fatalf("watchEvents = %v, want a DEVICE_FATAL error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watchEvents did not return after the link died")
	}
	if !strings.Contains(logBuf.String(), "event=DEVICE_FATAL") {
		t.Fatalf("log has no DEVICE_FATAL line:\n%s", logBuf.String())
	}
}

// TestNotifierWatchdog: WATCHDOG=1 only while healthy; an unhealthy engine sends
// its reason as STATUS instead, so systemd's watchdog fires.
func TestNotifierWatchdog(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	n := &notifier{addr: &net.UnixAddr{Name: sock, Net: "unixgram"}, watchdog: 20 * time.Millisecond}
	var why atomic.Value
	why.Store("")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { n.watch(func() string { return why.Load().(string) }, stop); close(done) }()
	read := func() string {
		buf := make([]byte, 256)
		ln.SetReadDeadline(time.Now().Add(5 * time.Second))
		k, err := ln.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:k])
	}
	if got := read(); got != "WATCHDOG=1" {
		t.Errorf("healthy: %q", got)
	}
	why.Store("engine shard 0 of 192.0.2.1 has not finished a pass for 9s (deadline 5s)")
	for got := read(); got != "STATUS=unhealthy: engine shard 0 of 192.0.2.1 has not finished a pass for 9s (deadline 5s)"; got = read() {
		if got != "WATCHDOG=1" {
			t.Fatalf("unhealthy: %q", got)
		}
	}
	close(stop)
	<-done
	if err := (&notifier{}).notify("READY=1"); err != nil {
		t.Errorf("notify without a socket: %v", err)
	}
}
