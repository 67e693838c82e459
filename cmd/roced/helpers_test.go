package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/internal/testsupport/syncbuf"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/roce"
)

// rocedBin is the roced binary TestMain builds, so tests exercise exactly what users run.
var rocedBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "roced-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rocedBin = filepath.Join(dir, "roced")
	build := exec.Command("go", "build", "-o", rocedBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building roced:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testAddrs returns n loopback addresses in a random 127.x.y.0/24, so concurrent test
// runs (ours and other packages') do not collide on addresses.
func testAddrs(n int) []netip.Addr {
	b1, b2 := byte(64+rand.IntN(128)), byte(1+rand.IntN(250))
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{127, b1, b2, byte(i + 1)})
	}
	return out
}

// freeUDPPort returns a UDP port that is free on every address in addrs (tests use it
// instead of 4791, which a real rxe or another test may hold).
func freeUDPPort(t *testing.T, addrs ...netip.Addr) uint16 {
	t.Helper()
	for range 50 {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrs[0], 0)))
		if err != nil {
			t.Fatal(err)
		}
		port := uint16(c.LocalAddr().(*net.UDPAddr).Port)
		ok := true
		var others []*net.UDPConn
		for _, a := range addrs[1:] {
			o, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, port)))
			if err != nil {
				ok = false
				break
			}
			others = append(others, o)
		}
		c.Close()
		for _, o := range others {
			o.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no UDP port free on all test addresses")
	return 0
}

// daemonProc is a roced process started by a test.
type daemonProc struct {
	t       *testing.T
	cmd     *exec.Cmd
	metrics string       // host:port of the HTTP endpoint, from the announce line
	client  *http.Client // reaches metrics (inside a lab namespace for rxe tests)
	stdout  *syncbuf.Buffer
	stderr  *syncbuf.Buffer
	exited  chan struct{}
	waitErr error
}

// startDaemon runs roced with args plus "-metrics 127.0.0.1:0" (unless args set
// -metrics) and waits until it has announced its metrics address. The process gets
// SIGTERM (then SIGKILL by PID) at cleanup.
func startDaemon(t *testing.T, args ...string) *daemonProc {
	t.Helper()
	return startDaemonCmd(t, func(args []string) *exec.Cmd { return exec.Command(rocedBin, args...) }, http.DefaultClient, args...)
}

// startDaemonCmd is startDaemon with the command built by mk (to run roced in a network
// namespace) and the HTTP endpoint reached through client.
func startDaemonCmd(t *testing.T, mk func(args []string) *exec.Cmd, client *http.Client, args ...string) *daemonProc {
	t.Helper()
	hasMetrics := false
	for _, a := range args {
		if a == "-metrics" || strings.HasPrefix(a, "-metrics=") {
			hasMetrics = true
		}
	}
	if !hasMetrics {
		args = append(args, "-metrics", "127.0.0.1:0")
	}
	args = withSocket(t, args)
	p := &daemonProc{t: t, client: client, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, exited: make(chan struct{})}
	p.cmd = mk(args)
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(p.stdout, line)
			if _, rest, ok := strings.Cut(line, "metrics on http://"); ok {
				host, _, _ := strings.Cut(rest, "/")
				select {
				case ready <- host:
				default:
				}
			}
		}
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(10 * time.Second) })
	select {
	case p.metrics = <-ready:
	case <-p.exited:
		t.Fatalf("roced %v exited early: %v\nstderr:\n%s", args, p.waitErr, p.stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("roced %v did not announce its metrics address in 30s; stderr:\n%s", args, p.stderr.String())
	}
	return p
}

// stop sends SIGTERM and waits up to d; it kills the process by PID if it does not exit.
// It returns the exit code and how long the exit took.
func (p *daemonProc) stop(d time.Duration) (int, time.Duration) {
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode(), 0
	default:
	}
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode(), time.Since(start)
	case <-time.After(d):
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.t.Errorf("roced did not exit within %v of SIGTERM; killed", d)
		return -1, time.Since(start)
	}
}

func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	return httpGetWith(t, http.DefaultClient, url)
}

func httpGetWith(t *testing.T, client *http.Client, url string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, b
}

// scrape fetches /metrics in the text format and parses it with expfmt.
func (p *daemonProc) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := httpGetWith(t, p.client, "http://"+p.metrics+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d: %s", code, body)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

// value returns the value of the series of family name whose labels include every
// name=value pair in labels (given as "name", "value", ...); counters, gauges and
// untyped only. Missing series fail the test.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	mf, ok := mfs[name]
	if !ok {
		t.Fatalf("metric %s not exported", name)
	}
next:
	for _, m := range mf.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Untyped != nil:
			return m.GetUntyped().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// withSocket gives roced an attach socket of the test's own, unless args
// name one: roced shares its addresses by default, and tests that run at
// once must not meet on one socket path.
func withSocket(t *testing.T, args []string) []string {
	for _, a := range args {
		if a == "-socket" || strings.HasPrefix(a, "-socket=") {
			return args
		}
	}
	return append(args[:len(args):len(args)], "-socket", filepath.Join(t.TempDir(), "roced.sock"))
}

// runRoced runs the binary to completion (for start-up failures) and returns its exit
// code, stdout and stderr.
func runRoced(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, rocedBin, withSocket(t, args)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("roced %v did not exit in 30s", args)
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return code, out.String(), errb.String()
}

// cmPeer opens a client device on addr with its connection manager (what rping-go
// -c runs on), closed when the test ends.
func cmPeer(t *testing.T, addr netip.Addr, port uint16) (*roce.Device, *cm.Manager) {
	t.Helper()
	dev, mgr, _ := cmPeerWire(t, addr, port)
	return dev, mgr
}

// cmPeerWire is cmPeer that also returns the device's UDP socket: closing it
// silences the client at once, as the death of its process does.
func cmPeerWire(t *testing.T, addr netip.Addr, port uint16) (*roce.Device, *cm.Manager, link.Link) {
	t.Helper()
	u, err := link.ListenUDP(netip.AddrPortFrom(addr, port), link.Config{})
	if err != nil {
		t.Fatal(err)
	}
	l, mads := gsi.Wrap(u)
	dev, err := roce.OpenLink(l, roce.WithMTU(roce.MTU1024))
	if err != nil {
		u.Close()
		t.Fatal(err)
	}
	mgr := cm.NewManager(mads, cm.ManagerConfig{})
	t.Cleanup(func() { mgr.Close(); dev.Close() })
	return dev, mgr, u
}
