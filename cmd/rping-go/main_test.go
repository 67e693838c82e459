package main

import (
	"bytes"

	"context"
	"errors"
	"fmt"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/rping"
	"github.com/goroce/goroce/internal/testsupport/syncbuf"
	"github.com/goroce/goroce/roce"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseOpts(t *testing.T) {
	tests := []struct {
		args []string
		ok   bool
		want func(o options) bool
	}{
		{[]string{"-c", "-a", "1.2.3.4", "-C", "5", "-vVd"}, true, func(o options) bool {
			return o.server == 0 && o.addr == "1.2.3.4" && o.count == 5 && o.verbose && o.validate && o.debug && o.port == 7174 && o.size == 64
		}},
		{[]string{"-s", "-a1.2.3.4", "-p7175", "-S1000", "-P"}, true, func(o options) bool {
			return o.server == 1 && o.addr == "1.2.3.4" && o.port == 7175 && o.size == 1000 && o.persistent
		}},
		{[]string{"-c", "--udp-port", "5000"}, true, func(o options) bool { return o.udpPort == 5000 }},
		{[]string{"-c", "--udp-port=5001", "--stats"}, true, func(o options) bool { return o.udpPort == 5001 && o.stats }},
		{[]string{"operand", "-c", "-a", "1.2.3.4", "-C5x"}, true, func(o options) bool { return o.server == 0 && o.addr == "1.2.3.4" && o.count == 5 }},
		{[]string{"-s", "-c"}, true, func(o options) bool { return o.server == 0 }}, // the last role wins
		{[]string{"-c", "-s", "-a", "::1"}, true, func(o options) bool { return o.server == 1 && o.addr == "::1" }},
		{[]string{"-c", "-a"}, false, nil}, // -a needs a value
		{[]string{"-c", "--udp-port", "0"}, false, nil},
		{[]string{"-v"}, false, nil},             // neither -s nor -c
		{[]string{"-c", "-S", "25"}, false, nil}, // below RPING_MIN_BUFSIZE
		{[]string{"-c", "-S", "65536"}, false, nil},
		{[]string{"-c", "-C", "-1"}, false, nil},
		{[]string{"-c", "-x"}, false, nil},
	}
	for _, tt := range tests {
		var so, se bytes.Buffer
		o, code, ok := parseOpts(tt.args, &so, &se)
		if ok != tt.ok || (!ok && code != 22) || (ok && !tt.want(o)) {
			t.Errorf("%q: ok %v code %d opts %+v stderr %q", tt.args, ok, code, o, se.String())
		}
	}
	var so, se bytes.Buffer
	parseOpts([]string{"-c", "-S", "10"}, &so, &se)
	if se.String() != "Invalid size 10 (valid range is 26 to 65536)\n" {
		t.Errorf("size message %q", se.String())
	}
}

// freePort returns a UDP port free on 127.0.0.1 and 127.0.0.2.
func freePort(t *testing.T) int {
	for i := 0; i < 50; i++ {
		p := 20000 + rand.IntN(40000)
		a, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(p))))
		if err != nil {
			continue
		}
		b, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(p))))
		a.Close()
		if err != nil {
			continue
		}
		b.Close()
		return p
	}
	t.Skip("no free UDP port on 127.0.0.1 and 127.0.0.2")
	return 0
}

// listenWait bounds how long a client tries again while its server is not
// listening yet: the server is a goroutine of the test, but a loaded host
// may start it late.
const listenWait = 30 * time.Second

// tryClient runs rping-go with a client's args, again while the server
// rejects it as not listening yet (REJECTED), for up to listenWait; out and
// errb hold the last run's output.
func tryClient(ctx context.Context, args []string, out, errb *syncbuf.Buffer) int {
	for deadline := time.Now().Add(listenWait); ; time.Sleep(20 * time.Millisecond) {
		out.Reset()
		errb.Reset()
		code := run(ctx, args, out, errb)
		if code == 0 || !strings.Contains(errb.String(), "REJECTED") || time.Now().After(deadline) || ctx.Err() != nil {
			return code
		}
	}
}

// TestLoopback runs rping-go -s on 127.0.0.2 and rping-go -c on 127.0.0.1
// over real UDP, CM over QP1, for rping's sizes, and checks every line of
// -v output against what rping prints for the same data.
func TestLoopback(t *testing.T) {
	// Every packet must arrive intact the first time on loopback: a bad ICRC
	// or a retransmission means a bug (it once cost 2 s per run).
	var mu sync.Mutex
	var bad []string
	closeHook = func(d *roce.Device) {
		s := d.Stats()
		if s.ICRCErrors+s.Malformed+s.Retransmits+s.UnknownQP != 0 {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("%v: %+v", d.Addr(), s))
			mu.Unlock()
		}
	}
	defer func() { closeHook = nil }()
	defer func() {
		for _, b := range bad {
			t.Errorf("engine counters: %s", b)
		}
	}()
	for _, tc := range []struct{ size, count int }{{64, 20}, {1000, 10}, {16384, 5}} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			port := fmt.Sprint(freePort(t))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			size, count := fmt.Sprint(tc.size), fmt.Sprint(tc.count)
			var sout, serr, cout, cerr syncbuf.Buffer
			scode := make(chan int, 1)
			go func() {
				scode <- run(ctx, []string{"-s", "-a", "127.0.0.2", "-p", "7174", "-v", "-S", size, "--udp-port", port}, &sout, &serr)
			}()
			ccode := tryClient(ctx, []string{"-c", "-a", "127.0.0.2", "-I", "127.0.0.1", "-C", count, "-S", size, "-v", "-V",
				"--udp-port", port, "--stats"}, &cout, &cerr)
			if ccode != 0 {
				t.Fatalf("client exit %d\nstdout:\n%s\nstderr:\n%s\nserver stderr:\n%s", ccode, cout.String(), cerr.String(), serr.String())
			}
			select {
			case c := <-scode:
				if c != 0 {
					t.Fatalf("server exit %d: %s", c, serr.String())
				}
			case <-ctx.Done():
				t.Fatal("server did not exit after the client disconnected")
			}
			if !strings.Contains(cerr.String(), "stats: sent_pkts=") || !strings.Contains(cerr.String(), " icrc_err=0 ") {
				t.Errorf("--stats printed no counters line with icrc_err=0:\n%s", cerr.String())
			}
			var want bytes.Buffer
			buf := make([]byte, tc.size)
			start := byte(65)
			for i := 0; i < tc.count; i++ {
				start = rping.Fill(buf, i, start)
				fmt.Fprintf(&want, "ping data: %s\n", buf[:bytes.IndexByte(buf, 0)])
			}
			if cout.String() != want.String() {
				t.Errorf("client -v output differs from rping's:\n got %q\nwant %q", cout.String(), want.String())
			}
			if sout.String() != strings.ReplaceAll(want.String(), "ping data: ", "server ping data: ") {
				t.Errorf("server -v output differs:\n%s", sout.String())
			}
			if serr.String() != "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n" {
				t.Errorf("server stderr %q", serr.String())
			}
		})
	}
}

// TestClientRejected: a CM with nothing listening on the port answers REJ
// (invalid service ID); rping-go reports it as rping does and exits non-zero.
func TestClientRejected(t *testing.T) {
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, mads, err := openGSI(netip.MustParseAddr("127.0.0.2"), uint16(port))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	mgr := cm.NewManager(mads, cm.ManagerConfig{})
	defer mgr.Close()
	var cout, cerr bytes.Buffer
	code := run(ctx, []string{"-c", "-a", "127.0.0.2", "-I", "127.0.0.1", "--udp-port", fmt.Sprint(port)}, &cout, &cerr)
	if code == 0 || !strings.HasPrefix(cerr.String(), "cma event RDMA_CM_EVENT_REJECTED, error 8\n") {
		t.Errorf("exit %d, stderr %q", code, cerr.String())
	}
}

// TestPersistentServer: rping-go -s -P serves clients one after another and
// exits 0 when interrupted.
func TestPersistentServer(t *testing.T) {
	port := fmt.Sprint(freePort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	var sout, serr syncbuf.Buffer
	scode := make(chan int, 1)
	go func() {
		scode <- run(sctx, []string{"-s", "-P", "-a", "127.0.0.2", "-v", "--udp-port", port}, &sout, &serr)
	}()
	for i := 0; i < 3; i++ {
		var cout, cerr syncbuf.Buffer
		if code := tryClient(ctx, []string{"-c", "-a", "127.0.0.2", "-I", "127.0.0.1", "-C", "2", "-V", "--udp-port", port}, &cout, &cerr); code != 0 {
			t.Fatalf("client %d exit %d", i, code)
		}
	}
	stop()
	if c := <-scode; c != 0 {
		t.Errorf("server exit %d: %s", c, serr.String())
	}
	if n := strings.Count(sout.String(), "server ping data: rdma-ping-1: "); n != 3 {
		t.Errorf("server served %d clients:\n%s", n, sout.String())
	}
}

// TestClientFailedStatus: a -V mismatch exits 255 with rping's line, as stock
// rping's main returns rping_test_client's -1; other failures exit 1.
func TestClientFailedStatus(t *testing.T) {
	var b bytes.Buffer
	if code := clientFailed(&b, fmt.Errorf("ping 3: %w", rping.ErrMismatch)); code != 255 || b.String() != "rping client failed: -1\n" {
		t.Errorf("mismatch: exit %d, %q", code, b.String())
	}
	b.Reset()
	if code := clientFailed(&b, errors.New("connect: timeout")); code != 1 || b.String() != "rping client failed: connect: timeout\n" {
		t.Errorf("other failure: exit %d, %q", code, b.String())
	}
}

// TestAddressTaken: rping-go -c -a 127.0.0.1 while another process (roced)
// serves 127.0.0.1 fails with one line that gives the rule and the fix in
// rping-go's own options (-I 127.0.0.x), as does a server on a held address.
func TestAddressTaken(t *testing.T) {
	held, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := fmt.Sprint(held.LocalAddr().(*net.UDPAddr).Port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-c", "-a", "127.0.0.1", "-C", "1", "--udp-port", port}, "-I 127.0.0.x"},
		{[]string{"-s", "-a", "127.0.0.1", "--udp-port", port}, "-a 127.0.0.x"},
	} {
		var out, errb bytes.Buffer
		code := run(ctx, tt.args, &out, &errb)
		msg := errb.String()
		if code != 1 || !strings.Contains(msg, tt.want) || !strings.Contains(msg, "one process serves one address") ||
			strings.Count(msg, "\n") != 1 {
			t.Errorf("%q: exit %d, stderr %q", tt.args, code, msg)
		}
	}
}
