package interop

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/interop/labtest"
)

// The rows of this file run Debian's own binaries (ibverbs-utils, perftest), not
// rebuilt, on goroce's libibverbs.so.1 (cabi/): on the host side of the lab with
// LD_LIBRARY_PATH=cabi/lib and GOROCE_DEVICES naming the host address, against
// rxe in the guests.

var cabiOnce struct {
	sync.Once
	dir string // cabi/, built
	err error
}

// cabiDir builds cabi (bash cabi/build.sh) once per test binary and returns its
// directory; GOROCE_CABI names one already built.
func cabiDir(t *testing.T) string {
	t.Helper()
	cabiOnce.Do(func() {
		if d := os.Getenv("GOROCE_CABI"); d != "" {
			cabiOnce.dir = d
			return
		}
		d, err := filepath.Abs("../cabi")
		if err != nil {
			cabiOnce.err = err
			return
		}
		if out, err := exec.Command("bash", filepath.Join(d, "build.sh")).CombinedOutput(); err != nil {
			cabiOnce.err = fmt.Errorf("cabi/build.sh: %v\n%s", err, out)
			return
		}
		cabiOnce.dir = d
	})
	if cabiOnce.err != nil {
		t.Fatal(cabiOnce.err)
	}
	return cabiOnce.dir
}

// stockTool returns the path of a stock binary on the host, failing t when its
// package is not installed (interop/run.sh installs them).
func stockTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed on the host (apt-get install ibverbs-utils perftest): %v", name, err)
	}
	return p
}

// cabiCommand is prog with args on goroce's libibverbs, on the device at addr,
// printing goroce's counters when it closes the device.
func cabiCommand(dir, addr, prog string, args ...string) (string, []string) {
	return "/usr/bin/env", append([]string{
		"LD_LIBRARY_PATH=" + filepath.Join(dir, "lib"),
		"GOROCE_DEVICES=" + addr,
		"GOROCE_STATS=1",
		prog,
	}, args...)
}

// cabiPingpong is goroce's side of a pingpong row played by the stock
// ibv_*_pingpong itself on cabi's libibverbs.
func cabiPingpong(t *testing.T, dir string) ppOurs {
	return ppOurs{tool: "ibv_*_pingpong on goroce libibverbs", who: "stock pingpong on goroce",
		command: func(c ppCase, addr, gid string, port int) (string, []string) {
			prog := stockTool(t, "ibv_"+c.mode+"_pingpong")
			args := []string{"-d", "goroce0", "-g", gid, "-p", strconv.Itoa(port), "-n", strconv.Itoa(c.iters),
				"-s", strconv.Itoa(c.size), "-c"}
			if c.events {
				args = append(args, "-e")
			}
			if c.qps > 0 {
				args = append(args, "-q", strconv.Itoa(c.qps))
			}
			if c.mtu > 0 {
				args = append(args, "-m", strconv.Itoa(c.mtu))
			}
			return cabiCommand(dir, addr, prog, args...)
		}}
}

// TestCABIPingpong runs the stock ibv_{rc,uc,ud,srq}_pingpong on goroce's
// libibverbs against the same tools on rxe, both ways, with buffer validation
// (-c), busy-polling and with completion events (-e), with the checks of
// TestPingpong.
func TestCABIPingpong(t *testing.T) {
	lab := labtest.Open(t)
	ours := cabiPingpong(t, cabiDir(t))
	g := lab.Guest(t, "a")
	const n = 200
	// The library is the same whatever the message: sizes and transports only as far as
	// its paths differ (polling or events, one packet or many, RQ or SRQ, RC, UC, UD);
	// TestPingpong covers the engine's sizes.
	cases := []ppCase{
		{mode: "rc", size: 1, iters: n},
		{mode: "rc", size: 65536, iters: n, events: true},
		// UC and UD recover no lost packet, and a poller on the host loses the
		// guest's some: they sleep on events.
		{mode: "uc", size: 4096, iters: n, events: true},
		{mode: "ud", size: 1024, iters: n, events: true},
		{mode: "srq", size: 4096, iters: n, qps: 4, events: true},
	}
	for _, c := range cases {
		for _, dir := range []direction{oursToRxe, rxeToOurs} {
			t.Run(c.name()+"/"+dirShort(dir), func(t *testing.T) { runPingpong(t, lab, g, ours, c, dir) })
		}
	}
}

// TestCABIPingpongMTU4096 is TestCABIPingpong with rxe's active MTU at 4096.
func TestCABIPingpongMTU4096(t *testing.T) {
	lab := labtest.Open(t)
	ours := cabiPingpong(t, cabiDir(t))
	g := lab.Guest(t, "a")
	withMTU4096(t, lab, g)
	for _, c := range []ppCase{
		{mode: "rc", size: 65536, iters: 200, mtu: 4096, events: true},
	} {
		for _, dir := range []direction{oursToRxe, rxeToOurs} {
			t.Run(c.name()+"/"+dirShort(dir), func(t *testing.T) { runPingpong(t, lab, g, ours, c, dir) })
		}
	}
}

// withMTU4096 raises the lab's netdev MTU to 9000 (rxe's active MTU 4096) until t ends.
func withMTU4096(t *testing.T, lab *labtest.Lab, g *labtest.Guest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old := lab.MTU
	if err := lab.SetMTU(ctx, 9000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := lab.SetMTU(ctx, old); err != nil {
			t.Errorf("restore MTU %d: %v", old, err)
		}
	})
	if mtu, err := g.ActiveMTU(ctx); err != nil || mtu != 4096 {
		t.Fatalf("rxe active MTU after netdev MTU 9000 = %d, %v; want 4096", mtu, err)
	}
}

// devinfoFields reads ibv_devinfo -v's "name: value" lines into a map; the GID
// lines are keyed "GID[i]".
func devinfoFields(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || k == "" || strings.ContainsAny(k, " \t") && !strings.HasPrefix(k, "GID[") {
			continue
		}
		k = strings.ReplaceAll(k, " ", "")
		m[k] = strings.TrimSpace(v)
	}
	return m
}

// TestCABIDevinfo runs the stock ibv_devices and ibv_devinfo -v on goroce's
// libibverbs and checks that goroce0 shows every field rxe0 shows, the port as
// rxe's, and the RoCEv2 GID of the host address.
func TestCABIDevinfo(t *testing.T) {
	lab := labtest.Open(t)
	dir := cabiDir(t)
	g := lab.Guest(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(prog string, args ...string) string {
		bin, a := cabiCommand(dir, lab.HostIP.String(), stockTool(t, prog), args...)
		out, err := lab.Command(ctx, bin, a...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", prog, err, out)
		}
		return string(out)
	}
	if out := run("ibv_devices"); !strings.Contains(out, "goroce0") {
		t.Errorf("ibv_devices lists no goroce0:\n%s", out)
	}
	ours := run("ibv_devinfo", "-v")
	r, err := g.Run(ctx, "ibv_devinfo -v -d rxe0")
	if err != nil || r.RC != 0 {
		t.Fatalf("ibv_devinfo in guest %s: %v %s", g.Name, err, r.Out)
	}
	of, rf := devinfoFields(ours), devinfoFields(r.Out)
	var missing []string
	for k := range rf {
		if _, ok := of[k]; !ok && !strings.HasPrefix(k, "GID[") {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("goroce0 lacks fields rxe0 shows: %v", missing)
	}
	for _, k := range []string{"transport", "state", "link_layer", "active_width", "active_speed", "phys_state",
		"active_mtu", "max_vl_num", "pkey_tbl_len", "port_cap_flags", "atomic_cap"} {
		if of[k] != rf[k] {
			t.Errorf("%s: goroce0 %q, rxe0 %q", k, of[k], rf[k])
		}
	}
	if want := "::ffff:" + lab.HostIP.String() + ", RoCE v2"; of["GID[1]"] != want {
		t.Errorf("GID[1] = %q, want %q", of["GID[1]"], want)
	}
	t.Logf("goroce0:\n%s", ours)
}

// errnoDifferences are the rows of verbs-errno where goroce answers otherwise
// than rxe, and why goroce's answer is the one the man pages ask for.
var errnoDifferences = map[string]string{
	// rxe's provider takes any opcode on a UD QP and fails the WR later; goroce
	// refuses it at post time, as ibv_post_send(3) allows and mlx5 does.
	"post_send_rdma_write_on_ud": "EINVAL at post (rxe: taken, then failed)",
	// rxe 6.1 fails a UD send longer than the path MTU with a local QP operation
	// error; goroce with a local length error, the status for a message that does
	// not fit.
	"post_send_ud_above_mtu": "LOC_LEN_ERR (rxe 6.1: LOC_QP_OP_ERR)",
	// Index 255 is past goroce's two-entry table (EINVAL, as the kernel answers past
	// its table) but an empty entry of rxe's 1024 (ENODATA).
	"create_ah_bad_sgid_index": "past the table (rxe: empty entry)",
}

// verbsErrnoRows runs cabi's verbs-errno and returns row → what it got, and its
// exit status.
func verbsErrnoRows(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasPrefix(f[1], "got=") {
			m[f[0]] = strings.TrimPrefix(f[1], "got=")
		}
	}
	return m
}

// TestCABIVerbsErrno runs cabi's verbs-errno table (invalid arguments of every
// verb) on goroce's libibverbs and, the same binary, on rxe in the guest, and
// compares the answers row by row.
func TestCABIVerbsErrno(t *testing.T) {
	lab := labtest.Open(t)
	dir := cabiDir(t)
	g := lab.Guest(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	prog := filepath.Join(dir, "bin", "verbs-errno")
	bin, args := cabiCommand(dir, lab.HostIP.String(), prog, "-d", "goroce0", "-g", "1")
	out, err := lab.Command(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Errorf("verbs-errno on goroce: %v\n%s", err, out)
	}
	ours := verbsErrnoRows(string(out))
	exe, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	// The guest image has no verbs-errno: the binary travels in the command line.
	cmd := fmt.Sprintf("echo %s | base64 -d > /tmp/verbs-errno && chmod +x /tmp/verbs-errno && /tmp/verbs-errno -d rxe0 -g %d",
		base64.StdEncoding.EncodeToString(exe), g.GIDIndex)
	r, err := g.Run(ctx, cmd)
	if err != nil {
		t.Fatalf("verbs-errno in guest %s: %v", g.Name, err)
	}
	rxe := verbsErrnoRows(r.Out)
	if len(rxe) == 0 || len(ours) != len(rxe) {
		t.Fatalf("verbs-errno rows: goroce %d, rxe %d\ngoroce:\n%s\nrxe:\n%s", len(ours), len(rxe), out, r.Out)
	}
	names := make([]string, 0, len(ours))
	for k := range ours {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		why, known := errnoDifferences[k]
		switch {
		case ours[k] != rxe[k] && !known:
			t.Errorf("%s: goroce %s, rxe %s", k, ours[k], rxe[k])
		case ours[k] == rxe[k] && known:
			t.Errorf("%s: goroce and rxe now agree (%s): drop it from errnoDifferences", k, ours[k])
		case known:
			t.Logf("%s: goroce %s, rxe %s: %s", k, ours[k], rxe[k], why)
		}
	}
	t.Logf("goroce:\n%s", out)
}

// cabiRping is goroce's side of the rping rows played by the stock rping itself
// on cabi's librdmacm.
func cabiRping(t *testing.T, dir string) rpingOurs {
	prog := stockTool(t, "rping")
	return rpingOurs{who: "rping on goroce", tool: "rping on goroce librdmacm", command: func(host string, args ...string) (string, []string) {
		return cabiCommand(dir, host, prog, args...)
	}}
}

// TestCABIRping is TestRping with the stock rping on goroce's librdmacm as
// goroce's side: both directions at every size, and its -v lines byte for byte
// against stock rping's on rxe.
func TestCABIRping(t *testing.T) {
	lab := labtest.Open(t)
	runRpingRows(t, lab, cabiRping(t, cabiDir(t)))
}

// cabiPerftest is goroce's side of a perftest row played by the stock perftest
// on cabi's libibverbs and librdmacm.
func cabiPerftest(t *testing.T, dir string) ptOurs {
	return ptOurs{who: "perftest on goroce", tool: "ib_* on goroce libibverbs",
		command: func(c ptCase, addr string, opts []string) (string, []string) {
			// Sleeping on completion events wherever perftest takes -e (not
			// for WRITE): a poller on the host takes a core from the guests'
			// TCG threads, delaying rxe's ACKs past its retransmission timer
			// (see pingpongPort).
			if !strings.HasPrefix(c.test, "write_") {
				opts = append([]string{"-e"}, opts...)
			}
			return cabiCommand(dir, addr, stockTool(t, "ib_"+c.test), append([]string{"-d", "goroce0", "-x", "1"}, opts...)...)
		}}
}

// TestCABIPerftest runs Debian's perftest on goroce's libibverbs against the same
// tools on rxe, both ways: every bandwidth and latency test, several QPs (-q 4),
// both ways at once (-b), all sizes (-a) and through rdma_cm (-R), with the checks
// of TestPerftest.
func TestCABIPerftest(t *testing.T) {
	lab := labtest.Open(t)
	ours := cabiPerftest(t, cabiDir(t))
	g := lab.Guest(t, "a")
	const n = 200
	cases := []ptCase{
		{test: "write_bw", size: 65536, iters: n},
		{test: "read_bw", size: 65536, iters: n},
		{test: "send_bw", size: 4096, iters: n},
		{test: "write_lat", size: 64, iters: n},
		{test: "read_lat", size: 64, iters: n},
		{test: "send_lat", size: 64, iters: n},
		{test: "atomic_bw", size: 8, iters: n},
		{test: "atomic_lat", size: 8, iters: 100},
		{test: "send_bw", size: 4096, iters: 50, qps: 4, extra: []string{"-q", "4"}},
		{test: "write_bw", size: 4096, iters: 100, extra: []string{"-b"}},
		// All sizes over UD (2 to the MTU): every size path of the library, in
		// seconds rather than the minute RC's 23 sizes take under TCG.
		{test: "send_lat", size: 0, iters: 5, rows: 10, extra: []string{"-a", "-c", "UD"}},
		{test: "write_bw", size: 4096, iters: 100, qps: 2, extra: []string{"-R", "-q", "2"}},
		{test: "send_lat", size: 64, iters: 100, extra: []string{"-R"}},
	}
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			for _, dir := range []ptDirection{ptOursToRxe, ptRxeToOurs} {
				t.Run(dir.short(), func(t *testing.T) {
					if c.has("-R") && dir == ptOursToRxe {
						// perftest's server (4.5 and 25.01) listens again for the test
						// QPs after the exchange, and its client connects them at once
						// and takes a REJ (invalid service ID) as the end: a client
						// faster than the server in its TCG guest loses that race every
						// time. roce-perftest's client asks again (TestPerftest's -R rows).
						appendResult(t, resultRow{tool: ours.tool, dir: string(dir), transport: "RC", opts: c.opts(),
							verdict: "skipped: perftest's -R server re-listens after the exchange"})
						t.Skip("perftest's -R server re-listens after its exchange; its client does not retry")
					}
					runPerftest(t, lab, g, ours, c, dir)
				})
			}
		})
	}
}

// cabiToolRun is one run of a stock rdma_cm tool pair: the server side and the
// client side, one of them on goroce's librdmacm, the other on rxe.
type cabiToolRun struct {
	tool           string // the server's program, and the client's unless clientTool
	clientTool     string
	server, client string // arguments; %s is the server's address in the client's
	want           string // the client's success line
}

// runCABITool runs r with goroce's side as the client (ours-to-rxe) or the
// server (rxe-to-ours), retrying the client while the server does not listen yet.
func runCABITool(t *testing.T, lab *labtest.Lab, g *labtest.Guest, dir string, r cabiToolRun, oursClient bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	host := lab.HostIP.String()
	row := resultRow{tool: r.tool + " on goroce librdmacm", transport: "rdma_cm", opts: r.client, verdict: "FAIL"}
	defer func() {
		if !t.Failed() {
			row.verdict = "pass"
		}
		appendResult(t, row)
	}()
	defer captureRun(t, lab, "cabi-"+r.tool+"-"+dirShortName(oursClient), netip.Addr{})()
	cliTool := r.tool
	if r.clientTool != "" {
		cliTool = r.clientTool
	}
	start := time.Now()
	var cli, srv string
	if oursClient {
		row.dir = "goroce " + r.tool + " client -> rxe server"
		job, err := g.Start(ctx, fmt.Sprintf("%s %s 2>&1", r.tool, fmt.Sprintf(r.server, g.IP)))
		prog := stockTool(t, cliTool)
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(300 * time.Millisecond) {
			bin, args := cabiCommand(dir, host, prog, strings.Fields(fmt.Sprintf(r.client, g.IP))...)
			out, err := lab.Command(ctx, bin, args...).CombinedOutput()
			cli = string(out)
			if err == nil || !cmNotListening(cli) && !strings.Contains(cli, "refused") || time.Now().After(deadline) || len(job.Done()) > 0 {
				if err != nil {
					t.Errorf("%s client on goroce: %v\n%s", cliTool, err, cli)
					job.Kill()
				}
				break
			}
		}
		res, err := waitJob(job, 30*time.Second)
		if err != nil || res.RC != 0 {
			t.Errorf("%s server on rxe: %v rc %d\n%s", r.tool, err, res.RC, res.Out)
		}
		srv = res.Out
		checkOursStats(t, r.tool+" client on goroce", cli)
	} else {
		row.dir = "rxe " + r.tool + " client -> goroce server"
		bin, args := cabiCommand(dir, host, stockTool(t, r.tool), strings.Fields(fmt.Sprintf(r.server, host))...)
		s := lab.Command(ctx, bin, args...)
		var so lockedBuffer
		s.Stdout, s.Stderr = &so, &so
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Wait() }()
		res := retryStockClient(ctx, t, g, fmt.Sprintf("%s %s 2>&1", cliTool, fmt.Sprintf(r.client, host)), done)
		cli = res.Out
		if res.RC != 0 {
			t.Errorf("%s client on rxe: rc %d\n%s", r.tool, res.RC, res.Out)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s server on goroce: %v\n%s", r.tool, err, so.String())
			}
		case <-time.After(30 * time.Second):
			s.Process.Kill()
			<-done
			t.Errorf("%s server on goroce did not end:\n%s", r.tool, so.String())
		}
		srv = so.String()
		checkOursStats(t, r.tool+" server on goroce", srv)
	}
	row.usec = float64(time.Since(start).Microseconds())
	if !strings.Contains(cli, r.want) {
		t.Errorf("%s client printed no %q:\n%s\nserver:\n%s", r.tool, r.want, cli, srv)
	}
}

func dirShortName(oursClient bool) string {
	if oursClient {
		return "ours-to-rxe"
	}
	return "rxe-to-ours"
}

// TestCABIRdmacmTools runs rdmacm-utils' ucmatose and udaddy and rdma-core's
// rdma_server/rdma_client on goroce's librdmacm against the same programs on rxe,
// both ways.
func TestCABIRdmacmTools(t *testing.T) {
	lab := labtest.Open(t)
	dir := cabiDir(t)
	g := lab.Guest(t, "a")
	for _, r := range []cabiToolRun{
		{tool: "ucmatose", server: "-b %s -C 10", client: "-s %s -C 10", want: "test complete"},
		{tool: "udaddy", server: "-b %s -C 10", client: "-s %s -C 10", want: "test complete"},
	} {
		for _, oursClient := range []bool{true, false} {
			t.Run(r.tool+"/"+dirShortName(oursClient), func(t *testing.T) { runCABITool(t, lab, g, dir, r, oursClient) })
		}
	}
	r := cabiToolRun{tool: "rdma_server", clientTool: "rdma_client", server: "-s %s -p 7481", client: "-s %s -p 7481",
		want: "rdma_client: end 0"}
	for _, oursClient := range []bool{true, false} {
		t.Run("rdma_server/"+dirShortName(oursClient), func(t *testing.T) { runCABITool(t, lab, g, dir, r, oursClient) })
	}
}

// cabiCmtimeConns is cmtime's -c in TestCABICmtime.
const cabiCmtimeConns = 100

// TestCABICmtime runs cmtime with cabiCmtimeConns connections at once: between
// the lane's guests (the kernel's CM on both sides), then with the stock cmtime on
// goroce's librdmacm as the client of rxe's server, and as the server of rxe's
// client, and reports each connect rate next to the kernel's. Debian 12's cmtime
// (rdma-core 44, the host's) has no TCP sync, which rdma-core 56's (trixie)
// requires of its peer, so the rows run on the 6.1 lane.
func TestCABICmtime(t *testing.T) {
	lab := labtest.Open(t)
	lab.RunsOn(t, labtest.Gens{labtest.Gen61})
	dir := cabiDir(t)
	a, b := lab.Guest(t, "a"), lab.Guest(t, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	prog := stockTool(t, "cmtime")
	row := func(dir string) resultRow {
		return resultRow{tool: "cmtime on goroce librdmacm", dir: dir, transport: "RC (rdma_cm)", opts: fmt.Sprintf("-c %d", cabiCmtimeConns)}
	}
	var kernel []time.Duration
	t.Run("rxe-to-rxe", func(t *testing.T) {
		r := row("rxe cmtime client (guest a) -> rxe cmtime server (guest b)")
		defer func() { appendResult(t, r) }()
		srv, err := b.Start(ctx, "cmtime 2>&1")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Kill() // rdma-core 44's server serves until it is killed
		if err := waitCmtimeServer(ctx, b, false); err != nil {
			t.Fatal(err)
		}
		res, err := a.Run(ctx, fmt.Sprintf("cmtime -s %s -c %d 2>&1", b.IP, cabiCmtimeConns))
		if err != nil {
			t.Fatal(err)
		}
		if kernel, err = checkCmtime(t, res); err != nil {
			t.Fatal(err)
		}
		r.usec = float64(kernel[0].Microseconds()) / cabiCmtimeConns
		r.verdict = "pass"
	})
	t.Run("ours-to-rxe", func(t *testing.T) {
		r := row("goroce cmtime client -> rxe cmtime server (guest b)")
		defer func() { appendResult(t, r) }()
		srv, err := b.Start(ctx, "cmtime 2>&1")
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Kill()
		if err := waitCmtimeServer(ctx, b, false); err != nil {
			t.Fatal(err)
		}
		bin, args := cabiCommand(dir, lab.HostIP.String(), prog, "-s", b.IP.String(), "-c", fmt.Sprint(cabiCmtimeConns))
		out, err := lab.Command(ctx, bin, args...).CombinedOutput()
		rc := 0
		if err != nil {
			rc = 1
		}
		ours, err := checkCmtime(t, labtest.Result{Out: string(out), RC: rc})
		if err != nil {
			t.Fatal(err)
		}
		r.usec = float64(ours[0].Microseconds()) / cabiCmtimeConns
		t.Logf("goroce librdmacm client: %s; kernel CM: %s", cabiRates(ours), cabiRates(kernel))
		if !t.Failed() {
			r.verdict = "pass"
		}
	})
	t.Run("rxe-to-ours", func(t *testing.T) {
		r := row("rxe cmtime client (guest a) -> goroce cmtime server")
		defer func() { appendResult(t, r) }()
		bin, args := cabiCommand(dir, lab.HostIP.String(), prog, "-b", lab.HostIP.String())
		s := lab.Command(ctx, bin, args...)
		var so lockedBuffer
		s.Stdout, s.Stderr = &so, &so
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			s.Process.Kill()
			s.Wait()
		}()
		var res labtest.Result
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(300 * time.Millisecond) {
			var err error
			if res, err = a.Run(ctx, fmt.Sprintf("cmtime -s %s -c %d 2>&1", lab.HostIP, cabiCmtimeConns)); err != nil {
				t.Fatal(err)
			}
			if res.RC == 0 || !strings.Contains(res.Out, "REJECTED") || time.Now().After(deadline) {
				break
			}
		}
		ours, err := checkCmtime(t, res)
		if err != nil {
			t.Fatalf("%v\ngoroce server:\n%s", err, so.String())
		}
		r.usec = float64(ours[0].Microseconds()) / cabiCmtimeConns
		t.Logf("goroce librdmacm server: %s; kernel CM: %s", cabiRates(ours), cabiRates(kernel))
		for i := range min(len(ours), len(kernel)) {
			if ours[i] > 2*kernel[i] {
				t.Errorf("run %d: goroce took %v for %d connections, more than twice the kernel's %v", i, ours[i], cabiCmtimeConns, kernel[i])
			}
		}
		if !t.Failed() {
			r.verdict = "pass"
		}
	})
}

func cabiRates(runs []time.Duration) string {
	var s []string
	for _, d := range runs {
		s = append(s, fmt.Sprintf("%v (%.0f/s)", d.Round(time.Millisecond), cabiCmtimeConns/d.Seconds()))
	}
	return strings.Join(s, ", ")
}

// TestCABICMErrors runs cabi's cm-errors on goroce's librdmacm against rxe and,
// the same binary, on rxe's against goroce: a connect to a port nobody listens
// on, and a reject with private data, must end in the same event with the same
// status either way.
func TestCABICMErrors(t *testing.T) {
	lab := labtest.Open(t)
	dir := cabiDir(t)
	g := lab.Guest(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := filepath.Join(dir, "bin", "cm-errors")
	exe, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	install := fmt.Sprintf("echo %s | base64 -d > /tmp/cm-errors && chmod +x /tmp/cm-errors", base64.StdEncoding.EncodeToString(exe))
	if r, err := g.Run(ctx, install); err != nil || r.RC != 0 {
		t.Fatalf("cm-errors into guest %s: %v %s", g.Name, err, r.Out)
	}
	host := lab.HostIP.String()
	ours := func(args ...string) string {
		bin, a := cabiCommand(dir, host, prog, args...)
		out, err := lab.Command(ctx, bin, a...).CombinedOutput()
		if err != nil {
			t.Errorf("cm-errors %v on goroce: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// rxe's CM answers on the guest's address whether or not a program listens.
	t.Run("noport/ours-to-rxe", func(t *testing.T) {
		if out := ours("-t", "noport", "-a", g.IP.String(), "-p", "7491"); !strings.Contains(out, "REJECTED status 8") {
			t.Errorf("goroce client to a port nobody listens on in rxe: want REJECTED status 8:\n%s", out)
		}
	})
	t.Run("reject/rxe-to-ours", func(t *testing.T) {
		bin, a := cabiCommand(dir, host, prog, "-t", "reject-server", "-b", host, "-p", "7492")
		s := lab.Command(ctx, bin, a...)
		var so lockedBuffer
		s.Stdout, s.Stderr = &so, &so
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			s.Process.Kill()
			s.Wait()
		}()
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(so.String(), "listening"); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("reject-server on goroce not listening:\n%s", so.String())
			}
		}
		r, err := g.Run(ctx, fmt.Sprintf("/tmp/cm-errors -t reject -a %s -p 7492", host))
		if err != nil || !strings.Contains(r.Out, "REJECTED status 28 private_data no thanks") {
			t.Errorf("rxe client rejected by goroce: want REJECTED status 28 with the private data: %v\n%s", err, r.Out)
		}
	})
	t.Run("reject/ours-to-rxe", func(t *testing.T) {
		job, err := g.Start(ctx, fmt.Sprintf("/tmp/cm-errors -t reject-server -b %s -p 7493", g.IP))
		if err != nil {
			t.Fatal(err)
		}
		var out string
		for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(300 * time.Millisecond) {
			out = ours("-t", "reject", "-a", g.IP.String(), "-p", "7493")
			if !strings.Contains(out, "status 8") || time.Now().After(deadline) {
				break // status 8: rxe's server was not listening yet
			}
		}
		if !strings.Contains(out, "REJECTED status 28 private_data no thanks") {
			t.Errorf("goroce client rejected by rxe: want REJECTED status 28 with the private data:\n%s", out)
		}
		waitJob(job, 10*time.Second)
	})
	t.Run("noport/rxe-to-ours", func(t *testing.T) {
		// goroce's CM answers only while a program has its librdmacm open: the
		// reject-server on another port keeps it so.
		bin, a := cabiCommand(dir, host, prog, "-t", "reject-server", "-b", host, "-p", "7494")
		s := lab.Command(ctx, bin, a...)
		var so lockedBuffer
		s.Stdout, s.Stderr = &so, &so
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			s.Process.Kill()
			s.Wait()
		}()
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(so.String(), "listening"); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("reject-server on goroce not listening:\n%s", so.String())
			}
		}
		r, err := g.Run(ctx, fmt.Sprintf("/tmp/cm-errors -t noport -a %s -p 7495", host))
		if err != nil || !strings.Contains(r.Out, "REJECTED status 8") {
			t.Errorf("rxe client to a port nobody listens on in goroce: want REJECTED status 8: %v\n%s", err, r.Out)
		}
	})
}

// TestCABIMckey runs rdmacm-utils' mckey on goroce's librdmacm against rxe's: a
// sender to a stock receiver with mckeyQPs QPs in the group, and a receiver with
// mckeyQPs QPs of a stock sender.
func TestCABIMckey(t *testing.T) {
	lab := labtest.Open(t)
	dir := cabiDir(t)
	a := lab.Guest(t, "a")
	prog := stockTool(t, "mckey")
	host := lab.HostIP.String()
	group := fmt.Sprintf("239.18.%d.2", lab.HostIP.As4()[2])
	row := func(dir string) resultRow {
		return resultRow{tool: "mckey on goroce librdmacm", dir: dir, transport: "UD multicast (rdma_cm)",
			opts: fmt.Sprintf("-m %s -C %d -S %d, receiver -c %d", group, mckeyCount, mckeySize, mckeyQPs)}
	}
	t.Run("ours-to-rxe", func(t *testing.T) {
		r := row("goroce mckey sender -> rxe receiver (guest a)")
		defer func() { appendResult(t, r) }()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		recv, err := a.Start(ctx, fmt.Sprintf("mckey -m %s -b %s -c %d -C %d -S %d 2>&1", group, a.IP, mckeyQPs, mckeyCount, mckeySize))
		if err != nil {
			t.Fatal(err)
		}
		waitMckeyJoined(ctx, t, a, group, mckeyQPs)
		bin, args := cabiCommand(dir, host, prog, "-m", group, "-b", host, "-s", "-C", fmt.Sprint(mckeyCount), "-S", fmt.Sprint(mckeySize))
		out, err := lab.Command(ctx, bin, args...).CombinedOutput()
		rc := 0
		if err != nil {
			rc = 1
		}
		checkMckey(t, "sender on goroce", labtest.Result{Out: string(out), RC: rc}, 1)
		rres, err := waitJob(recv, 20*time.Second)
		if err != nil {
			t.Errorf("receiver: %v", err)
		}
		checkMckey(t, "receiver (guest a)", rres, mckeyQPs)
		if !t.Failed() {
			r.verdict = "pass"
		}
	})
	t.Run("rxe-to-ours", func(t *testing.T) {
		r := row("rxe mckey sender (guest a) -> goroce receiver")
		defer func() { appendResult(t, r) }()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// Line-buffered, so its "joined" lines say when the sender may start.
		bin, args := cabiCommand(dir, host, "stdbuf", "-oL", prog, "-m", group, "-b", host, "-c", fmt.Sprint(mckeyQPs),
			"-C", fmt.Sprint(mckeyCount), "-S", fmt.Sprint(mckeySize))
		s := lab.Command(ctx, bin, args...)
		var so lockedBuffer
		s.Stdout, s.Stderr = &so, &so
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Wait() }()
		defer func() {
			if len(done) == 0 {
				s.Process.Kill()
			}
		}()
		for deadline := time.Now().Add(15 * time.Second); strings.Count(so.String(), "joined dgid") < mckeyQPs; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("goroce receiver did not join:\n%s", so.String())
			}
		}
		send, err := a.Run(ctx, mckeySender(fmt.Sprintf("-m %s -b %s -s -C %d -S %d", group, a.IP, mckeyCount, mckeySize)))
		if err != nil {
			t.Fatal(err)
		}
		checkMckey(t, "sender (guest a)", send, 1)
		var werr error
		select {
		case werr = <-done:
		case <-time.After(20 * time.Second):
			s.Process.Kill()
			werr = <-done
		}
		rc := 0
		if werr != nil {
			rc = 1
		}
		checkMckey(t, "receiver on goroce", labtest.Result{Out: so.String(), RC: rc}, mckeyQPs)
		if !t.Failed() {
			r.verdict = "pass"
		}
	})
}

// TestCABIVerbsEvents runs cabi's verbs-events (async_fd and completion
// channels under poll(2), the SRQ limit event, ibv_wr_* and ibv_cq_ex) on
// goroce's libibverbs and, the same binary, on rxe: both must pass.
func TestCABIVerbsEvents(t *testing.T) {
	lab := labtest.Open(t)
	dir := cabiDir(t)
	g := lab.Guest(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	prog := filepath.Join(dir, "bin", "verbs-events")
	bin, args := cabiCommand(dir, lab.HostIP.String(), prog, "-d", "goroce0", "-g", "1")
	if out, err := lab.Command(ctx, bin, args...).CombinedOutput(); err != nil || !strings.Contains(string(out), "verbs-events: PASS") {
		t.Errorf("verbs-events on goroce: %v\n%s", err, out)
	}
	exe, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	r, err := g.Run(ctx, fmt.Sprintf("echo %s | base64 -d > /tmp/verbs-events && chmod +x /tmp/verbs-events && /tmp/verbs-events -d rxe0 -g %d",
		base64.StdEncoding.EncodeToString(exe), g.GIDIndex))
	// rxe on kernel 6.1 reports the SRQ going below its limit as an async
	// event of type 0 (IBV_EVENT_CQ_ERR) on every run in this lab; 6.12 reports
	// IBV_EVENT_SRQ_LIMIT_REACHED, as the man page and goroce do. On 6.1 the
	// reference run must end exactly there, having passed every step before.
	const rxe61 = "verbs-events: FAIL: async event CQ error, want SRQ limit reached on our SRQ"
	if lab.Gen == labtest.Gen61 && err == nil && strings.Contains(r.Out, rxe61) {
		t.Logf("verbs-events on rxe %s stops at its known SRQ limit event defect:\n%s", lab.Gen, r.Out)
	} else if err != nil || !strings.Contains(r.Out, "verbs-events: PASS") {
		t.Errorf("verbs-events on rxe: %v\n%s", err, r.Out)
	}
}
