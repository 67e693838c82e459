package interop

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/interop/labtest"
)

// rpingCount is -C of every rping run: enough pings to exercise the protocol's
// buffer reuse, few enough for TCG guests.
const rpingCount = 100

// rpingSizes are the -S values: one packet, just under the MTU, many packets.
var rpingSizes = []int{64, 1000, 16384}

var (
	toolsMu  sync.Mutex
	toolBins = map[string]string{}
)

// toolBin returns the binary of a goroce command: $env if set (interop/run.sh builds
// them), else one built now into a temporary directory that TestMain removes.
func toolBin(t *testing.T, env, pkg string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	toolsMu.Lock()
	defer toolsMu.Unlock()
	if p, ok := toolBins[pkg]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "goroce-interop-")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", p, "github.com/goroce/goroce/"+pkg).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	toolBins[pkg] = p
	return p
}

// rpingRow is one row of the results table, in the pingpong rows' columns.
type rpingRow struct {
	tool    string // the results table's tool column
	dir     string
	size    int
	verdict string
	usec    float64
	rxe     labtest.Counters
	ours    string
}

func (r *rpingRow) record(t *testing.T) {
	appendResult(t, resultRow{tool: r.tool, dir: r.dir, transport: "RC (rdma_cm)",
		opts: fmt.Sprintf("-S %d -C %d -V -v", r.size, rpingCount), verdict: r.verdict, usec: r.usec,
		counters: r.rxe.String() + " | goroce: " + r.ours})
}

// rpingLines returns the "ping data" lines of an rping -v output, checking there are
// rpingCount of them; prefix is "ping data: " (client) or "server ping data: ".
func rpingLines(t *testing.T, who, out, prefix string) []string {
	t.Helper()
	var lines []string
	out, _, _ = strings.Cut(out, stderrMarker)
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			lines = append(lines, l)
		}
	}
	if len(lines) != rpingCount {
		t.Errorf("%s printed %d %q lines, want %d; output:\n%s", who, len(lines), prefix, rpingCount, tail(out, 20))
	}
	return lines
}

// stockRping is a guest command line running stock rping with stderr kept apart: rping
// writes its -v lines to buffered stdout and its event messages to unbuffered stderr,
// so through one pipe they interleave mid-line. The stderr text follows a marker line.
func stockRping(args string) string {
	f := "/tmp/rping-err.$$"
	return fmt.Sprintf("rping %s 2>%s; rc=$?; echo; echo %s; cat %s; rm -f %s; exit $rc", args, f, stderrMarker, f, f)
}

// stderrMarker separates stockRping's stdout from its stderr.
const stderrMarker = "__RPING_STDERR__"

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = append([]string{fmt.Sprintf("... (%d lines)", len(l)-n)}, l[len(l)-n:]...)
	}
	return strings.Join(l, "\n")
}

// cmNotListening reports whether an rping client failed only because nothing listened
// on the rdma_cm port yet (the CM rejected the REQ, or nobody answered).
func cmNotListening(out string) bool {
	return strings.Contains(out, "RDMA_CM_EVENT_REJECTED") || strings.Contains(out, "RDMA_CM_EVENT_UNREACHABLE")
}

// rpingCheck holds what every rping run checks on rxe's side.
type rpingCheck struct {
	g      *labtest.Guest
	before labtest.Counters
}

func startRpingCheck(ctx context.Context, t *testing.T, g *labtest.Guest) *rpingCheck {
	t.Helper()
	before, err := g.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &rpingCheck{g: g, before: before}
}

// finishCounters reads rxe's counters again and returns the difference; no error
// counter may move.
func (c *rpingCheck) finishCounters(ctx context.Context, t *testing.T) labtest.Counters {
	t.Helper()
	after, err := c.g.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(c.before)
	if bad := d.Unexpected(); len(bad) > 0 {
		t.Errorf("rxe counters: %v (all: %v)", bad, d)
	}
	return d
}

// finish is finishCounters, and rxe must have received at least every packet of the
// pings (a packet we got wrong is a silent drop).
func (c *rpingCheck) finish(ctx context.Context, t *testing.T, size int) labtest.Counters {
	t.Helper()
	d := c.finishCounters(ctx, t)
	// Per ping rxe receives, as server, the client's two SENDs and the READ response;
	// as client, the two go-ahead SENDs and the WRITE: 2 + ceil(size/1024) either way.
	if want := uint64(rpingCount * (2 + (size+1023)/1024)); d["rcvd_pkts"] < want {
		t.Errorf("rxe rcvd_pkts=%d, want at least %d", d["rcvd_pkts"], want)
	}
	t.Logf("rxe: %v", d)
	return d
}

// rpingCapture records the run on the bridge; a failed run keeps it and prints it.
func rpingCapture(t *testing.T, lab *labtest.Lab, name string) func() {
	pcap := filepath.Join(lab.RunDir(), "pcap", strings.ReplaceAll(name, "/", "_")+".pcap")
	os.MkdirAll(filepath.Dir(pcap), 0o755)
	c, err := lab.StartCapture(lab.Bridge, pcap)
	if err != nil {
		t.Logf("no capture: %v", err)
		return func() {}
	}
	return func() {
		c.Stop()
		finishCapture(t, pcap)
	}
}

// rpingOurs is goroce's side of the rping rows: cmd/rping-go, or the stock rping
// on goroce's librdmacm (cabi_test.go).
type rpingOurs struct {
	who, tool string // in messages (client role; "-s" replaces "-c") and the results table
	// command is the program and arguments for rping's own args on our host
	// address.
	command func(host string, args ...string) (string, []string)
}

// rpingGo is cmd/rping-go built at bin.
func rpingGo(bin string) rpingOurs {
	return rpingOurs{who: "rping-go", tool: "rping", command: func(host string, args ...string) (string, []string) {
		if args[0] == "-c" {
			args = append(args, "-I", host)
		}
		return bin, append(args, "--stats")
	}}
}

// TestRping runs stock rping (rdmacm-utils) in guest a against cmd/rping-go on the
// host side of the bridge, both directions, at each size, with validation (-V) on the
// client, and checks that rping-go's -v output is byte-identical to stock rping's for
// the same size and role.
func TestRping(t *testing.T) {
	lab := labtest.Open(t)
	runRpingRows(t, lab, rpingGo(toolBin(t, "GOROCE_RPING", "cmd/rping-go")))
}

// runRpingRows makes TestRping's rows with o as goroce's side.
func runRpingRows(t *testing.T, lab *labtest.Lab, o rpingOurs) {
	g := lab.Guest(t, "a")
	host, guest := lab.HostIP.String(), g.IP.String()
	for _, size := range rpingSizes {
		// -v output of each program in each role, compared once both directions ran.
		var stockClient, oursClient, stockServer, oursServer []string
		t.Run(fmt.Sprintf("s%d/ours-to-rxe", size), func(t *testing.T) {
			row := rpingRow{dir: o.who + " client -> rxe rping server", size: size, verdict: "pass", tool: o.tool}
			defer row.record(t)
			defer rpingCapture(t, lab, t.Name())()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			chk := startRpingCheck(ctx, t, g)
			job, err := g.Start(ctx, stockRping(fmt.Sprintf("-s -V -v -a %s -C %d -S %d", guest, rpingCount, size)))
			if err != nil {
				t.Fatal(err)
			}
			bin, args := o.command(host, "-c", "-V", "-v", "-a", guest, "-C", strconv.Itoa(rpingCount), "-S", strconv.Itoa(size))
			var rc int
			var out, errOut string
			var took time.Duration
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(300 * time.Millisecond) {
				cmd := lab.Command(ctx, bin, args...)
				var so, se bytes.Buffer
				cmd.Stdout, cmd.Stderr = &so, &se
				start := time.Now()
				rc = exitCode(cmd.Run())
				took, out, errOut = time.Since(start), so.String(), se.String()
				if rc == 0 || !cmNotListening(errOut) || time.Now().After(deadline) || len(job.Done()) > 0 {
					break
				}
			}
			if rc != 0 {
				job.Kill()
				t.Errorf("%s client exit %d:\n%s\n%s", o.who, rc, tail(out, 5), errOut)
			}
			res, err := waitJob(job, 20*time.Second)
			if err != nil {
				t.Errorf("stock rping server: %v", err)
			}
			if res.RC != 0 {
				t.Errorf("stock rping server exit %d:\n%s", res.RC, tail(res.Out, 10))
			}
			row.ours = rpingOursCounters(t, o.who+" -c", errOut)
			oursClient = rpingLines(t, o.who+" -c", out, "ping data: ")
			stockServer = rpingLines(t, "rping -s", res.Out, "server ping data: ")
			row.usec = float64(took.Microseconds()) / rpingCount
			row.rxe = chk.finish(ctx, t, size)
		})
		t.Run(fmt.Sprintf("s%d/rxe-to-ours", size), func(t *testing.T) {
			row := rpingRow{dir: "rxe rping client -> " + o.who + " server", size: size, verdict: "pass", tool: o.tool}
			defer row.record(t)
			defer rpingCapture(t, lab, t.Name())()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			chk := startRpingCheck(ctx, t, g)
			bin, args := o.command(host, "-s", "-v", "-a", host, "-C", strconv.Itoa(rpingCount), "-S", strconv.Itoa(size))
			srv := lab.Command(ctx, bin, args...)
			var so, se bytes.Buffer
			srv.Stdout, srv.Stderr = &so, &se
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- srv.Wait() }()
			res, took := retryRpingClient(ctx, t, g, stockRping(fmt.Sprintf("-c -V -v -a %s -C %d -S %d", host, rpingCount, size)), done)
			var werr error
			select {
			case werr = <-done:
			case <-time.After(20 * time.Second):
				srv.Process.Kill()
				werr = <-done
				t.Errorf("%s server still running 20 s after the client ended; killed", o.who)
			}
			if rc := exitCode(werr); rc != 0 {
				t.Errorf("%s server exit %d:\n%s\n%s", o.who, rc, tail(so.String(), 5), se.String())
			}
			if res.RC != 0 {
				t.Errorf("stock rping client exit %d:\n%s", res.RC, tail(res.Out, 10))
			}
			stockClient = rpingLines(t, "rping -c", res.Out, "ping data: ")
			row.ours = rpingOursCounters(t, o.who+" -s", se.String())
			oursServer = rpingLines(t, o.who+" -s", so.String(), "server ping data: ")
			row.usec = float64(took.Microseconds()) / rpingCount
			row.rxe = chk.finish(ctx, t, size)
		})
		t.Run(fmt.Sprintf("s%d/output", size), func(t *testing.T) {
			sameLines(t, "client ("+o.who+" -c vs rping -c)", oursClient, stockClient)
			sameLines(t, "server ("+o.who+" -s vs rping -s)", oursServer, stockServer)
		})
	}
}

// rpingOursCounters checks the counters rping-go printed with --stats (no ICRC
// error, malformed packet, unknown QP, ...) and returns the results-table text.
func rpingOursCounters(t *testing.T, who, stderr string) string {
	t.Helper()
	st := checkOursStats(t, who, stderr)
	return oursCounters(st, "sent_pkts", "rcvd_pkts", "retransmits", "out_of_seq", "dup_req", "naks_sent", "naks_rcvd")
}

// sameLines compares two programs' -v lines byte for byte.
func sameLines(t *testing.T, what string, ours, stock []string) {
	t.Helper()
	if len(ours) == 0 || len(stock) == 0 {
		t.Errorf("%s: nothing to compare (%d and %d lines; see the runs above)", what, len(ours), len(stock))
		return
	}
	if len(ours) != len(stock) {
		t.Errorf("%s: %d lines vs %d", what, len(ours), len(stock))
	}
	for i := range min(len(ours), len(stock)) {
		if ours[i] != stock[i] {
			t.Errorf("%s: line %d differs:\n ours:  %q\n stock: %q", what, i+1, ours[i], stock[i])
			return
		}
	}
}

// retryRpingClient runs a stock rping client until it gets past the connection (our
// server may not listen yet), for up to 20 s or until our server has exited. It
// returns the last run and how long that run took.
func retryRpingClient(ctx context.Context, t *testing.T, g *labtest.Guest, cmd string, srvDone <-chan error) (labtest.Result, time.Duration) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		start := time.Now()
		r, err := g.Run(ctx, cmd)
		took := time.Since(start)
		if err != nil {
			t.Errorf("stock rping client: %v", err)
			return r, took
		}
		if r.RC == 0 || !cmNotListening(r.Out) || time.Now().After(deadline) || len(srvDone) > 0 {
			if r.RC == 0 && took > 0 {
				t.Logf("stock rping client: %v for %d pings", took, rpingCount)
			}
			return r, took
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// rocedProc is cmd/roced running in the lab namespace.
type rocedProc struct {
	cmd     *exec.Cmd
	metrics string // host:port
	http    *http.Client
	stderr  bytes.Buffer
	done    chan error
}

// startRoced starts roced on the host side of the bridge and waits for its metrics
// announcement. Cleanup stops it with SIGTERM and checks it exits 0.
func startRoced(t *testing.T, lab *labtest.Lab, args ...string) *rocedProc {
	t.Helper()
	bin := toolBin(t, "GOROCE_ROCED", "cmd/roced")
	host := lab.HostIP.String()
	// An attach socket of the test's own: the lanes run at once, and the
	// host's /run/goroce is not the lab's.
	args = append([]string{"-bind", host, "-metrics", net.JoinHostPort(host, "0"),
		"-socket", filepath.Join(t.TempDir(), "roced.sock")}, args...)
	p := &rocedProc{done: make(chan error, 1), http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return lab.Dial(ctx, addr) },
	}}}
	p.cmd = lab.Command(context.Background(), bin, args...)
	p.cmd.Stderr = &lockedBuffer{b: &p.stderr}
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
			if _, rest, ok := strings.Cut(sc.Text(), "metrics on http://"); ok {
				h, _, _ := strings.Cut(rest, "/")
				ready <- h
			}
		}
		io.Copy(io.Discard, out)
		p.done <- p.cmd.Wait()
	}()
	select {
	case p.metrics = <-ready:
	case err := <-p.done:
		t.Fatalf("roced exited early: %v\n%s", err, p.stderr.String())
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("roced did not announce its metrics in 30 s:\n%s", p.stderr.String())
	}
	t.Cleanup(func() {
		// ip netns exec passes the signal on: it execs the program.
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.done:
			if rc := exitCode(err); rc != 0 {
				t.Errorf("roced exit %d after SIGTERM:\n%s", rc, tail(p.stderr.String(), 20))
			}
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
			t.Errorf("roced did not exit within 15 s of SIGTERM; killed")
		}
	})
	return p
}

// scrape returns the label-free samples of /metrics (name -> value) and the whole text.
// rpingEnded is the series of rping sessions the client ended with its DREQ.
const rpingEnded = `roce_rping_session_ends_total{reason="disconnect"}`

func (p *rocedProc) scrape(t *testing.T) (map[string]float64, string) {
	t.Helper()
	resp, err := p.http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v", resp.StatusCode, err)
	}
	m := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		name, v, ok := strings.Cut(l, " ")
		if !ok || strings.HasPrefix(l, "#") {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			m[name] = f
		}
	}
	return m, string(body)
}

// lockedBuffer is a bytes.Buffer safe for the process's writer goroutine. onWrite, when
// set, sees the whole text after each write. The zero value is ready to use.
type lockedBuffer struct {
	mu      sync.Mutex
	b       *bytes.Buffer
	onWrite func(string)
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b == nil {
		l.b = new(bytes.Buffer)
	}
	n, err := l.b.Write(p)
	if l.onWrite != nil {
		l.onWrite(l.b.String())
	}
	return n, err
}

// String returns what was written so far.
func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b == nil {
		return ""
	}
	return l.b.String()
}

// TestRpingRoced runs stock rping clients in guest a against roced's rping responder
// (one daemon for every size, as in production) and checks roced's rping counters move
// by exactly one session and rpingCount pings per run, with no engine error counted.
func TestRpingRoced(t *testing.T) {
	lab := labtest.Open(t)
	g := lab.Guest(t, "a")
	p := startRoced(t, lab, "-pingpong=false", "-ud-pingpong=false")
	host := lab.HostIP.String()
	for _, size := range rpingSizes {
		t.Run(fmt.Sprintf("s%d", size), func(t *testing.T) {
			row := rpingRow{tool: "rping", dir: "rxe rping client -> roced", size: size, verdict: "pass"}
			defer row.record(t)
			defer rpingCapture(t, lab, t.Name())()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			chk := startRpingCheck(ctx, t, g)
			m0, _ := p.scrape(t)
			start := time.Now()
			res, err := g.Run(ctx, stockRping(fmt.Sprintf("-c -V -v -a %s -C %d -S %d", host, rpingCount, size)))
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if res.RC != 0 {
				t.Errorf("stock rping client exit %d:\n%s\nroced:\n%s", res.RC, tail(res.Out, 10), tail(p.stderr.String(), 10))
			}
			rpingLines(t, "rping -c", res.Out, "ping data: ")
			// The session ends when roced has handled the client's DREQ.
			var m1 map[string]float64
			var text string
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				m1, text = p.scrape(t)
				if m1["roce_rping_active_sessions"] == 0 && m1[rpingEnded] > m0[rpingEnded] || time.Now().After(deadline) {
					break
				}
			}
			for _, w := range []struct {
				name string
				want float64
			}{
				{"roce_rping_active_sessions", 0},
				{"roce_rping_sessions_total", 1},
				{rpingEnded, 1},
				{"roce_rping_pings_total", rpingCount},
				{`roce_rping_session_ends_total{reason="error"}`, 0},
				{"roce_rping_accept_errors_total", 0},
				{"roce_icrc_errors_total", 0},
				{"roce_malformed_packets_total", 0},
				{"roce_retry_exceeded_total", 0},
			} {
				got := m1[w.name]
				if w.name != "roce_rping_active_sessions" {
					got -= m0[w.name]
				}
				if _, ok := m1[w.name]; !ok {
					t.Errorf("roced exports no %s", w.name)
				} else if got != w.want {
					t.Errorf("%s moved by %v, want %v", w.name, got, w.want)
				}
			}
			// A datagram for no QP is not this session's: ci53 counted one while rxe
			// sent the session its usual packets, every one to QP1 or the session's
			// QP (the capture). roced's address is the lane's, where earlier tests'
			// peers may still retransmit to their gone QPs. So it is logged, and the
			// session's own packets are judged by the pings, the ends and rxe's
			// counters.
			if n := m1["roce_unknown_qp_total"] - m0["roce_unknown_qp_total"]; n != 0 {
				t.Logf("roce_unknown_qp_total moved by %v during the session", n)
			}
			if t.Failed() {
				t.Logf("roced metrics:\n%s\nroced log:\n%s", text, tail(p.stderr.String(), 20))
			}
			row.ours = fmt.Sprintf("rping_pings=%v sessions=%v", m1["roce_rping_pings_total"]-m0["roce_rping_pings_total"],
				m1["roce_rping_sessions_total"]-m0["roce_rping_sessions_total"])
			row.usec = float64(took.Microseconds()) / rpingCount
			row.rxe = chk.finish(ctx, t, size)
		})
	}
}
