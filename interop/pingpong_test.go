package interop

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/interop/labtest"
)

// direction says which side is goroce.
type direction string

const (
	oursToRxe direction = "roce-pingpong client -> rxe server"
	rxeToOurs direction = "rxe client -> roce-pingpong server"
)

// pingpongPort is the stock pingpongs' and perftest's TCP port (Lab.Port moves it per lane).
//
// The stock tools run with -e (sleep on completion events) rather than busy-polling:
// the guests have one vCPU, and a tool spinning on it holds off rxe's own work in the
// guest kernel (sending, ACKs) until the scheduler preempts it, long enough under TCG for
// retransmission timers to fire on both sides; and each spinning guest keeps a host
// core busy, which the other lane and goroce's side then lack.
const pingpongPort = 18515

// ppCase is one pingpong run, made in both directions.
type ppCase struct {
	mode  string // rc, uc, ud, srq
	size  int
	iters int
	qps   int  // srq -q
	mtu   int  // -m in bytes; 0: the tools' default (1024)
	loss  bool // 2% loss each way: netem in the guest, -loss on our side
	ipv6  bool // RoCEv2 over IPv6: GID index 0 (fe80::) on both sides
	// knownBug, when set, names a goroce bug that makes this case fail today. The
	// case is skipped with that text unless GOROCE_INTEROP_STRICT=1.
	knownBug string
	// events makes goroce's side sleep on completion events (-e) when it is a
	// stock tool over cabi's libibverbs; roce-pingpong always waits on events.
	events bool
}

func (c ppCase) name() string {
	n := fmt.Sprintf("%s/s%d", c.mode, c.size)
	if c.qps > 0 {
		n += fmt.Sprintf("/q%d", c.qps)
	}
	if c.mtu > 0 {
		n += fmt.Sprintf("/m%d", c.mtu)
	}
	if c.loss {
		n += "/loss2pct"
	}
	if c.ipv6 {
		n += "/ipv6"
	}
	if c.events {
		n += "/e"
	}
	return n
}

// ppOurs is goroce's side of a pingpong row: roce-pingpong, or a stock
// ibv_*_pingpong over cabi's libibverbs (cabi_test.go).
type ppOurs struct {
	tool string // the results table's tool column
	who  string // in messages
	// command is the program and arguments for case c on our address, GID index
	// and TCP port, without the server address a client takes last.
	command func(c ppCase, addr, gid string, port int) (bin string, args []string)
}

// rocePingpong is roce-pingpong built at bin.
func rocePingpong(bin string) ppOurs {
	return ppOurs{who: "roce-pingpong", command: func(c ppCase, addr, gid string, port int) (string, []string) {
		args := []string{c.mode, "-d", addr, "-p", strconv.Itoa(port), "-g", gid, "-n", strconv.Itoa(c.iters),
			"-s", strconv.Itoa(c.size), "-c", "--stats", "--timeout", "60s"}
		if c.qps > 0 {
			args = append(args, "-q", strconv.Itoa(c.qps))
		}
		if c.mtu > 0 {
			args = append(args, "-m", strconv.Itoa(c.mtu))
		}
		if c.loss {
			// netem may drop rxe's ACK of our very last send after which the stock
			// client exits: bound that one wait (the stock side still validates all).
			args = append(args, "--loss", "0.02", "--seed", "1", "--last-ack-wait", "3s")
		}
		return bin, args
	}}
}

func TestMain(m *testing.M) {
	code := m.Run()
	toolsMu.Lock()
	for _, p := range toolBins {
		os.RemoveAll(filepath.Dir(p))
	}
	toolsMu.Unlock()
	os.Exit(code)
}

// TestPingpong runs the stock ibv_*_pingpong tools in an rxe guest against
// cmd/roce-pingpong on the host side of the lab bridge, in both directions, with
// buffer validation (-c), and checks both tools' summaries, goroce's counters and rxe's
// hw_counters after every run.
func TestPingpong(t *testing.T) {
	lab := labtest.Open(t)
	bin := toolBin(t, "GOROCE_PINGPONG", "cmd/roce-pingpong")
	g := lab.Guest(t, "a")
	const n = 200
	var cases []ppCase
	for _, s := range []int{1, 64, 1024, 4096, 65536} {
		cases = append(cases, ppCase{mode: "rc", size: s, iters: n})
	}
	for _, s := range []int{1, 64, 1024, 4096, 65536} {
		cases = append(cases, ppCase{mode: "uc", size: s, iters: n})
	}
	for _, s := range []int{1, 64, 1024} { // ud messages must fit the active MTU (1024)
		cases = append(cases, ppCase{mode: "ud", size: s, iters: n})
	}
	cases = append(cases,
		ppCase{mode: "srq", size: 4096, iters: n, qps: 4},
		ppCase{mode: "srq", size: 4096, iters: n, qps: 16},
		ppCase{mode: "rc", size: 4096, iters: n, loss: true},
		ppCase{mode: "srq", size: 1024, iters: n, qps: 4, loss: true},
	)
	for _, c := range cases {
		for _, dir := range []direction{oursToRxe, rxeToOurs} {
			t.Run(c.name()+"/"+dirShort(dir), func(t *testing.T) { runPingpong(t, lab, g, rocePingpong(bin), c, dir) })
		}
	}
}

// TestPingpongMTU4096 raises the netdev MTU of the whole lab to 9000, so that rxe's
// active MTU is 4096, and runs RC, UC and srq with 4096-byte packets and UD with
// 4096-byte messages.
func TestPingpongMTU4096(t *testing.T) {
	lab := labtest.Open(t)
	bin := toolBin(t, "GOROCE_PINGPONG", "cmd/roce-pingpong")
	g := lab.Guest(t, "a")
	withMTU4096(t, lab, g)
	for _, c := range []ppCase{
		{mode: "rc", size: 4096, iters: 200, mtu: 4096},
		{mode: "rc", size: 65536, iters: 200, mtu: 4096},
		{mode: "uc", size: 4096, iters: 200, mtu: 4096},
		{mode: "uc", size: 65536, iters: 200, mtu: 4096},
		{mode: "srq", size: 4096, iters: 200, mtu: 4096, qps: 4},
		{mode: "ud", size: 4096, iters: 200},
	} {
		for _, dir := range []direction{oursToRxe, rxeToOurs} {
			t.Run(c.name()+"/"+dirShort(dir), func(t *testing.T) { runPingpong(t, lab, g, rocePingpong(bin), c, dir) })
		}
	}
}

func dirShort(d direction) string {
	if d == oursToRxe {
		return "ours-to-rxe"
	}
	return "rxe-to-ours"
}

// TestPingpongIPv6 runs RC over RoCEv2 on IPv6: rxe's GID index 0 (its fe80::
// address) against goroce on the bridge's link-local address. The TCP exchange stays
// on IPv4.
func TestPingpongIPv6(t *testing.T) {
	lab := labtest.Open(t)
	bin := toolBin(t, "GOROCE_PINGPONG", "cmd/roce-pingpong")
	g := lab.Guest(t, "a")
	for _, c := range []ppCase{
		{mode: "rc", size: 1024, iters: 200, ipv6: true},
		{mode: "rc", size: 65536, iters: 200, ipv6: true},
	} {
		for _, dir := range []direction{oursToRxe, rxeToOurs} {
			t.Run(c.name()+"/"+dirShort(dir), func(t *testing.T) { runPingpong(t, lab, g, rocePingpong(bin), c, dir) })
		}
	}
}

// runPingpong makes one run and checks it.
func runPingpong(t *testing.T, lab *labtest.Lab, g *labtest.Guest, o ppOurs, c ppCase, dir direction) {
	res := result{c: c, dir: dir, verdict: "FAIL", tool: o.tool}
	defer func() { res.record(t) }()
	if c.knownBug != "" && os.Getenv("GOROCE_INTEROP_STRICT") != "1" {
		res.verdict = "skipped: known goroce bug, " + c.knownBug[:strings.IndexByte(c.knownBug, ':')]
		t.Skipf("known goroce bug (GOROCE_INTEROP_STRICT=1 runs it): %s", c.knownBug)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()

	before, err := g.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.loss {
		r, err := g.Run(ctx, "/sbin/tc qdisc replace dev eth0 root netem loss 2%")
		if err != nil || r.RC != 0 {
			t.Fatalf("netem in guest %s: %v %s", g.Name, err, r.Out)
		}
		defer g.Run(context.Background(), "/sbin/tc qdisc del dev eth0 root")
	}

	stockGID, ourIP, ourGID := g.GIDIndex, lab.HostIP, "1"
	if c.ipv6 {
		ll, err := lab.HostLinkLocal(ctx)
		if err != nil {
			t.Fatal(err)
		}
		stockGID, ourIP, ourGID = 0, ll, "0"
	}
	ourAddr := ourIP.String()
	defer captureRun(t, lab, c.name()+"-"+dirShort(dir), ourIP.WithZone(""))()
	port := lab.Port(pingpongPort)
	bin, ours := o.command(c, ourAddr, ourGID, port)

	var rerun bool
	r := runPairWatched(ctx, t, lab, g, bin, "ibv_"+c.mode+"_pingpong", true, c.stockCommand(stockGID, port), ours, dir == oursToRxe, &before, &rerun)
	res.ours, res.stockOut = r.oursOut, r.stock.Out

	if strings.Contains(r.oursErr, "UC QPs are not implemented") {
		res.verdict = "not implemented (goroce has no UC)"
		t.Skipf("goroce: %s", strings.TrimSpace(lastLine(r.oursErr)))
	}
	res.usec, res.oursStats = checkPingpongRun(t, o.who, c, r)
	var allow []string
	if c.loss {
		allow = []string{"out_of_seq_request", "rcvd_seq_err"}
	}
	d := rxeSinceOurs(ctx, t, g, before, res.oursStats, allow...)
	res.rxe = d
	// Every request we sent must have reached rxe's transport: a packet with a bad
	// ICRC or a wrong P_Key/Q_Key/GID is dropped silently and would be missing here.
	if want := uint64(c.iters * packets(c)); d["rcvd_pkts"] < want && !c.loss {
		t.Errorf("rxe rcvd_pkts=%d, want at least %d (%d messages of %d packets)", d["rcvd_pkts"], want, c.iters, packets(c))
	}
	if c.loss && d["rcvd_pkts"] == 0 {
		t.Errorf("rxe received nothing")
	}
	if !t.Failed() {
		res.verdict = "pass"
		if rerun {
			res.verdict = rerunVerdict
		}
	}
	t.Logf("rxe: %v", d)
	t.Logf("goroce: %s", lastLine(r.oursErr))
}

// stockCommand is the stock ibv_*_pingpong command line of c (no server
// address), on GID index gid and TCP port, sleeping on completion events.
func (c ppCase) stockCommand(gid, port int) string {
	stock := fmt.Sprintf("ibv_%s_pingpong -d rxe0 -g %d -n %d -s %d -c -e -p %d", c.mode, gid, c.iters, c.size, port)
	if c.qps > 0 {
		stock += fmt.Sprintf(" -q %d", c.qps)
	}
	if c.mtu > 0 {
		stock += fmt.Sprintf(" -m %d", c.mtu)
	}
	return stock
}

// checkPingpongRun checks both sides of a pingpong run of c: both exit 0, the
// stock tool found no invalid data, both summaries count c.iters iterations
// and 2*c.iters*c.size bytes, and goroce (who) counted no error. It returns
// goroce's usec/iter and counters.
func checkPingpongRun(t *testing.T, who string, c ppCase, r pairRun) (float64, map[string]uint64) {
	t.Helper()
	stock := "ibv_" + c.mode + "_pingpong"
	if r.oursRC != 0 {
		t.Errorf("%s exit %d:\n%s%s", who, r.oursRC, r.oursOut, r.oursErr)
	}
	if r.stock.RC != 0 {
		t.Errorf("%s exit %d:\n%s", stock, r.stock.RC, r.stock.Out)
	}
	if strings.Contains(r.stock.Out, "invalid data") {
		t.Errorf("%s found invalid data:\n%s", stock, r.stock.Out)
	}
	var usec float64
	for _, side := range []struct{ who, out string }{{who, r.oursOut}, {stock, r.stock.Out}} {
		s, err := labtest.ParseSummary(side.out)
		if err != nil {
			t.Errorf("%s: %v", side.who, err)
			continue
		}
		if s.Iters != c.iters || s.Bytes != int64(2*c.iters*c.size) {
			t.Errorf("%s: %d iters, %d bytes; want %d, %d", side.who, s.Iters, s.Bytes, c.iters, 2*c.iters*c.size)
		}
		if side.who == who {
			usec = s.USecIter
		}
	}
	// ibv_srq_pingpong posts another send while fewer than -n have
	// completed, on whichever of its -q QPs is free, so either side may send
	// up to q-1 messages beyond -n; the side that stops after -n destroys its
	// QPs, and what of those extra messages arrives afterwards is for a QP
	// that no longer exists (the sender retransmits them on its timer until
	// it exits too, which the rxe check allows). Nothing else may reach a
	// missing QP.
	var upTo map[string]uint64
	if c.mode == "srq" && c.qps > 1 {
		upTo = map[string]uint64{"unknown_qp": uint64((c.qps - 1) * packets(c))}
	}
	return usec, checkOursStatsUpTo(t, who, r.oursErr, upTo)
}

// packets is how many packets one message takes at the path MTU.
func packets(c ppCase) int {
	mtu := 1024
	if c.mtu > 0 {
		mtu = c.mtu
	}
	if c.mode == "ud" {
		return 1
	}
	return max(1, (c.size+mtu-1)/mtu)
}

// runOurs runs roce-pingpong in the lab namespace. As a client it retries while the
// stock server is not listening yet, for up to 15 s.
func runOurs(ctx context.Context, lab *labtest.Lab, bin string, args []string, client bool) (int, string, string) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		cmd := lab.Command(ctx, bin, args...)
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		err := cmd.Run()
		rc := exitCode(err)
		refused := strings.Contains(se.String(), "couldn't connect") || containsConnectFailure(se.String()+so.String())
		if rc == 0 || !client || !refused || time.Now().After(deadline) || ctx.Err() != nil {
			return rc, so.String(), se.String()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// retryStockClient runs a stock client until it gets past the connection (our server
// may not listen yet), for up to 15 s or until our server has exited.
func retryStockClient(ctx context.Context, t *testing.T, g *labtest.Guest, cmd string, srvDone <-chan error) labtest.Result {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := g.Run(ctx, cmd)
		if err != nil {
			if !stalled(ctx) {
				t.Errorf("stock client: %v", err)
			}
			return r
		}
		if r.RC == 0 || !containsConnectFailure(r.Out) || time.Now().After(deadline) || len(srvDone) > 0 {
			return r
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitJob(j *labtest.Job, d time.Duration) (labtest.Result, error) {
	select {
	case <-j.Done():
		return j.Wait()
	case <-time.After(d):
		r, _ := j.Kill()
		return r, fmt.Errorf("still running %v after our side ended; killed", d)
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
		return ee.ExitCode()
	}
	return -1
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// parseStats reads roce-pingpong's "stats: k=v ..." line.
func parseStats(stderr string) map[string]uint64 {
	m := map[string]uint64{}
	for _, line := range strings.Split(stderr, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "stats: ")
		if !ok {
			continue
		}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				m[k] = n
			}
		}
	}
	return m
}

// logDump prints the capture of a failed run through cmd/rocedump --tsv, when the
// module has it.
func logDump(t *testing.T, pcap string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "run", "github.com/goroce/goroce/cmd/rocedump", "--tsv", "-r", pcap).CombinedOutput()
	if err != nil {
		t.Logf("rocedump: %v", err)
	}
	lines := strings.Split(string(out), "\n")
	if len(lines) > 80 {
		lines = append(lines[:80], fmt.Sprintf("... %d more lines", len(lines)-80))
	}
	t.Logf("rocedump --tsv -r %s:\n%s", pcap, strings.Join(lines, "\n"))
}
