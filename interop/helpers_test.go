package interop

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/goroce/goroce/interop/labtest"
)

// containsConnectFailure reports whether a stock client failed only because
// nothing listened on the TCP port yet.
func containsConnectFailure(out string) bool {
	return strings.Contains(out, "Couldn't connect to") || // ibv_*_pingpong
		strings.Contains(out, "Unable to init the socket connection") // perftest
}

// captureRun captures the lab bridge into run/pcap/NAME.pcap for one run; the
// returned function stops it, checks that every RoCEv2 datagram we (address
// ours) sent left from a per-QP source port as rxe derives them (never 4791,
// see checkSourcePorts), and keeps the file (dumped to the log) only when t
// failed, or always with GOROCE_KEEP_CAPTURES=1 (to refresh the traces in
// testdata).
func captureRun(t *testing.T, lab *labtest.Lab, name string, ours netip.Addr) func() {
	pcap := filepath.Join(lab.RunDir(), "pcap", strings.ReplaceAll(name, "/", "_")+".pcap")
	os.MkdirAll(filepath.Dir(pcap), 0o755)
	capture, err := lab.StartCapture(lab.Bridge, pcap)
	if err != nil {
		t.Logf("no capture: %v", err)
		return func() {}
	}
	return func() {
		capture.Stop()
		if ours.IsValid() { // no address: the run has no datagram of ours
			checkSourcePorts(t, pcap, ours)
		}
		finishCapture(t, pcap)
	}
}

// finishCapture keeps a run's capture, dumped to the log, when t failed, or
// always with GOROCE_KEEP_CAPTURES=1 (to refresh the traces in testdata), and
// removes it otherwise.
func finishCapture(t *testing.T, pcap string) {
	switch {
	case t.Failed():
		t.Logf("capture kept: %s", pcap)
		logDump(t, pcap)
	case os.Getenv("GOROCE_KEEP_CAPTURES") == "1":
		t.Logf("capture kept (GOROCE_KEEP_CAPTURES=1): %s", pcap)
	default:
		os.Remove(pcap)
	}
}

// checkSourcePorts reads a capture and fails t if it holds no RoCEv2 datagram
// from one of ours, or one that came from a port below 0xC000: rxe's per-QP
// source ports (and QP1's 55410) are all in 49152..65535, and only a refused
// port would fall back to 4791.
func checkSourcePorts(t *testing.T, pcap string, ours netip.Addr) {
	t.Helper()
	var n int
	bad := map[uint16]int{}
	err := eachRoCE(pcap, func(_ time.Time, src netip.Addr, udp *layers.UDP) {
		if src != ours {
			return
		}
		n++
		if udp.SrcPort < 0xC000 {
			bad[uint16(udp.SrcPort)]++
		}
	})
	switch {
	case err != nil:
		t.Errorf("source ports: %v", err)
	case n == 0:
		t.Errorf("no RoCEv2 datagram from %v in %s", ours, pcap)
	case len(bad) > 0:
		t.Errorf("%d of our %d RoCEv2 datagrams left from a port below 0xC000 (port: count %v)", sum(bad), n, bad)
	}
}

// eachRoCE calls fn with the capture time, the source address (unmapped) and
// the UDP header (its Payload the RoCEv2 packet) of every datagram to port 4791
// in the capture pcap.
func eachRoCE(pcap string, fn func(ts time.Time, src netip.Addr, udp *layers.UDP)) error {
	f, err := os.Open(pcap)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", pcap, err)
	}
	for {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			return nil // io.EOF, or a record cut short when tcpdump stopped
		}
		p := gopacket.NewPacket(data, r.LinkType(), gopacket.DecodeOptions{Lazy: true, NoCopy: true})
		udp, _ := p.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp == nil || udp.DstPort != 4791 {
			continue
		}
		var srcIP []byte
		switch ip := p.NetworkLayer().(type) {
		case *layers.IPv4:
			srcIP = ip.SrcIP
		case *layers.IPv6:
			srcIP = ip.SrcIP
		}
		src, _ := netip.AddrFromSlice(srcIP)
		fn(ci.Timestamp, src.Unmap(), udp)
	}
}

func sum(m map[uint16]int) int {
	s := 0
	for _, v := range m {
		s += v
	}
	return s
}

// pairRun is what one stock tool in a guest and one of ours on the host did.
type pairRun struct {
	stock            labtest.Result
	oursRC           int
	oursOut, oursErr string
}

// runPair runs the stock command in g against our bin with args (no SERVER). With
// oursClient the stock server starts first and ours connects to g, retrying until
// it listens; otherwise ours serves and the stock client is retried until it gets
// past the TCP connection. Each side gets 20 s after the other finished.
func runPair(ctx context.Context, t *testing.T, lab *labtest.Lab, g *labtest.Guest, bin, stock string, args []string, oursClient bool) pairRun {
	t.Helper()
	var r pairRun
	if oursClient {
		job, err := g.Start(ctx, stock)
		if err != nil {
			t.Fatal(err)
		}
		return oursAgainst(ctx, t, lab, job, bin, append(args, g.IP.String()))
	}
	srv := lab.Command(ctx, bin, args...)
	var so, se bytes.Buffer
	srv.Stdout, srv.Stderr = &so, &se
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	r.stock = retryStockClient(ctx, t, g, stock+" "+lab.HostIP.String(), done)
	var werr error
	select {
	case werr = <-done:
	case <-time.After(20 * time.Second):
		srv.Process.Kill()
		werr = <-done
	}
	r.oursRC, r.oursOut, r.oursErr = exitCode(werr), so.String(), se.String()
	return r
}

// oursAgainst runs our client bin with args (the server's address last)
// against the stock server job, retrying while the server does not listen yet
// (runOurs), and then waits for the server: 20 s after ours ended, and none
// when ours failed (the server is killed).
func oursAgainst(ctx context.Context, t *testing.T, lab *labtest.Lab, job *labtest.Job, bin string, args []string) pairRun {
	t.Helper()
	var r pairRun
	r.oursRC, r.oursOut, r.oursErr = runOurs(ctx, lab, bin, args, true)
	if r.oursRC != 0 {
		job.Kill()
	}
	var err error
	if r.stock, err = waitJob(job, 20*time.Second); err != nil && !stalled(ctx) {
		t.Errorf("stock server: %v", err)
	}
	return r
}

// rxeSince reads g's rxe hw_counters and returns how far they moved since
// before, failing t on an error counter that moved (labtest's Unexpected, but
// allow).
func rxeSince(ctx context.Context, t *testing.T, g *labtest.Guest, before labtest.Counters, allow ...string) labtest.Counters {
	t.Helper()
	return rxeSinceOurs(ctx, t, g, before, nil, allow...)
}

// rxeSinceOurs is rxeSince for a row whose only RoCE peer of g was one goroce
// process, whose stats line is ours (nil: none): see hostLoss.
func rxeSinceOurs(ctx context.Context, t *testing.T, g *labtest.Guest, before labtest.Counters, ours map[string]uint64, allow ...string) labtest.Counters {
	t.Helper()
	after, err := g.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if h := hostLoss(d, ours); len(h) > 0 {
		t.Logf("guest %s: rxe sent %d packets and goroce read %d; goroce sent %d and rxe read %d: %v allowed",
			g.Name, d["sent_pkts"], ours["rcvd_pkts"], ours["sent_pkts"], d["rcvd_pkts"], h)
		allow = append(allow, h...)
	}
	if bad := d.Unexpected(allow...); len(bad) > 0 {
		t.Errorf("guest %s: rxe counters: %v (all: %v)", g.Name, bad, d)
	}
	return d
}

// hostLoss returns the sequence-error counters of rxe's delta d that packets lost
// between rxe and the goroce process of stats ours explain: a packet of rxe's that
// goroce's reader never got (rxe's sent_pkts above goroce's rcvd_pkts: a socket
// buffer or a tap queue overflowed on a loaded host) makes goroce NAK the gap, which
// rxe counts as rcvd_seq_err; one of goroce's that rxe never got makes rxe see a gap
// (out_of_seq_request). Each is allowed when it is no larger than the packets that
// went missing that way, and some did: then it is the host's loss, not a peer's
// mistake.
func hostLoss(d labtest.Counters, ours map[string]uint64) []string {
	if ours == nil {
		return nil
	}
	var allow []string
	for _, c := range []struct {
		counter    string
		sent, rcvd uint64
	}{
		{"rcvd_seq_err", d["sent_pkts"], ours["rcvd_pkts"]},
		{"out_of_seq_request", ours["sent_pkts"], d["rcvd_pkts"]},
	} {
		if c.sent > c.rcvd && d[c.counter] > 0 && d[c.counter] <= c.sent-c.rcvd {
			allow = append(allow, c.counter)
		}
	}
	return allow
}

// TestHostLoss: a sequence error is allowed only where as many packets went
// missing on its way, and at most that many.
func TestHostLoss(t *testing.T) {
	for _, c := range []struct {
		name string
		rxe  labtest.Counters
		ours map[string]uint64
		want []string
	}{
		{"ci56: 4 of rxe's lost, 1 NAK counted", labtest.Counters{"sent_pkts": 1263, "rcvd_pkts": 103, "rcvd_seq_err": 1},
			map[string]uint64{"sent_pkts": 103, "rcvd_pkts": 1259}, []string{"rcvd_seq_err"}},
		{"nothing lost", labtest.Counters{"sent_pkts": 800, "rcvd_pkts": 200, "rcvd_seq_err": 1},
			map[string]uint64{"sent_pkts": 200, "rcvd_pkts": 800}, nil},
		{"more errors than losses", labtest.Counters{"sent_pkts": 802, "rcvd_pkts": 200, "rcvd_seq_err": 3},
			map[string]uint64{"sent_pkts": 200, "rcvd_pkts": 800}, nil},
		{"goroce's lost, rxe saw the gap", labtest.Counters{"sent_pkts": 200, "rcvd_pkts": 798, "out_of_seq_request": 2},
			map[string]uint64{"sent_pkts": 800, "rcvd_pkts": 200}, []string{"out_of_seq_request"}},
		{"losses, no errors", labtest.Counters{"sent_pkts": 210, "rcvd_pkts": 790},
			map[string]uint64{"sent_pkts": 800, "rcvd_pkts": 200}, nil},
		{"between the guests", labtest.Counters{"sent_pkts": 9, "rcvd_seq_err": 1}, nil, nil},
	} {
		if got := hostLoss(c.rxe, c.ours); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// checkOursStats parses the -stats line our tool printed and fails t on any
// counter that must stay zero, or a missing one.
func checkOursStats(t *testing.T, who, stderr string) map[string]uint64 {
	t.Helper()
	return checkOursStatsUpTo(t, who, stderr, nil)
}

// checkOursStatsUpTo is checkOursStats where a row's own protocol bounds a
// counter above zero: upTo[k] is the most counter k may reach.
func checkOursStatsUpTo(t *testing.T, who, stderr string, upTo map[string]uint64) map[string]uint64 {
	t.Helper()
	st := parseStats(stderr)
	for _, k := range []string{"icrc_err", "malformed", "unknown_qp", "retry_exceeded", "tx_errors", "cq_overruns",
		"bad_pkey", "bad_qkey", "bad_source"} {
		if v, ok := st[k]; !ok {
			t.Errorf("%s printed no %s counter: %q", who, k, lastLine(stderr))
		} else if v > upTo[k] {
			t.Errorf("%s counted %s=%d (at most %d)", who, k, v, upTo[k])
		}
	}
	return st
}

// result is one row of the results table interop/run.sh prints (GOROCE_INTEROP_RESULTS).
type result struct {
	c         ppCase
	dir       direction
	verdict   string
	usec      float64
	ours      string
	stockOut  string
	rxe       labtest.Counters
	oursStats map[string]uint64
	tool      string // the tool column, when not the stock tool's own name
}

var resultsMu sync.Mutex

// resultRow is one line of $GOROCE_INTEROP_RESULTS: the columns of the README's
// results table.
type resultRow struct {
	tool, dir, transport, opts string
	verdict                    string  // "" is pass; a failed test is always FAIL
	usec                       float64 // per iteration; 0 prints "-"
	counters                   string  // rxe's hw_counters and goroce's, as printed
}

// appendResult appends row to $GOROCE_INTEROP_RESULTS, tab-separated, with the
// verdict FAIL when t failed. Without the variable it does nothing.
func appendResult(t *testing.T, row resultRow) {
	path := os.Getenv("GOROCE_INTEROP_RESULTS")
	if path == "" {
		return
	}
	verdict := row.verdict
	switch {
	case t.Failed():
		verdict = "FAIL"
	case verdict == "":
		verdict = "pass"
	}
	usec := "-"
	if row.usec > 0 {
		usec = fmt.Sprintf("%.0f", row.usec)
	}
	resultsMu.Lock()
	defer resultsMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Logf("results: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, strings.Join([]string{row.tool, row.dir, row.transport, row.opts, verdict, usec,
		strings.TrimSpace(row.counters)}, "\t"))
}

// oursCounters formats the nonzero goroce counters among keys, sorted.
func oursCounters(stats map[string]uint64, keys ...string) string {
	var ours []string
	for _, k := range keys {
		if v := stats[k]; v != 0 {
			ours = append(ours, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(ours)
	return strings.Join(ours, " ")
}

// record appends the pingpong row to $GOROCE_INTEROP_RESULTS.
func (r *result) record(t *testing.T) {
	opts := fmt.Sprintf("-s %d -n %d", r.c.size, r.c.iters)
	if r.c.qps > 0 {
		opts += fmt.Sprintf(" -q %d", r.c.qps)
	}
	if r.c.mtu > 0 {
		opts += fmt.Sprintf(" -m %d", r.c.mtu)
	}
	if r.c.loss {
		opts += " +2% loss each way"
	}
	if r.c.ipv6 {
		opts += " IPv6 (-g 0)"
	}
	ours := oursCounters(r.oursStats, "sent_pkts", "rcvd_pkts", "retransmits", "out_of_seq", "dup_req", "naks_sent", "naks_rcvd")
	tool := "ibv_" + r.c.mode + "_pingpong"
	if r.tool != "" {
		tool = r.tool
	}
	appendResult(t, resultRow{tool: tool, dir: string(r.dir), transport: strings.ToUpper(r.c.mode),
		opts: opts, verdict: r.verdict, usec: r.usec, counters: r.rxe.String() + " | goroce: " + ours})
}

// goPeer is this test binary re-executed in the lab's namespace to play goroce's side of
// a row (the init functions of cmtools_test.go and probe_test.go dispatch on its
// environment): the engine must bind the host address, which exists only in there.
type goPeer struct {
	cmd       *exec.Cmd
	out, errs lockedBuffer
	ready     chan struct{} // closed once stdout holds the ready line
	done      chan error    // the process's exit
}

// startGoPeer starts the peer with env added to ours. With ready set it waits, at most
// 20 s, until the peer's stdout holds that text (a server listening).
func startGoPeer(ctx context.Context, t *testing.T, lab *labtest.Lab, ready string, env ...string) *goPeer {
	t.Helper()
	p := &goPeer{cmd: lab.Command(ctx, os.Args[0], "-test.run=^$"), ready: make(chan struct{}), done: make(chan error, 1)}
	p.out.b, p.errs.b = new(bytes.Buffer), new(bytes.Buffer)
	p.out.onWrite = func(s string) {
		if ready != "" && strings.Contains(s, ready) {
			select {
			case <-p.ready:
			default:
				close(p.ready)
			}
		}
	}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	if ready == "" {
		return p
	}
	select {
	case <-p.ready:
	case err := <-p.done:
		p.done <- err
		t.Fatalf("goroce peer exited before %q: %v\n%s%s", ready, err, p.out.String(), p.errs.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("goroce peer did not print %q within 20 s\n%s", ready, p.errs.String())
	}
	return p
}

// wait waits up to d for the peer to exit (then kills it) and returns its exit code.
func (p *goPeer) wait(d time.Duration) (rc int, killed bool) {
	select {
	case err := <-p.done:
		return exitCode(err), false
	case <-time.After(d):
		p.cmd.Process.Kill()
		return exitCode(<-p.done), true
	}
}
