//go:build soak

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/tool/devapi"
)

// The soak: scripts/soak.sh runs `go test -tags soak -run TestSoak ./cmd/roced` with
// -soak.duration (5 minutes in CI, hours by hand).
var soakDuration = flag.Duration("soak.duration", 5*time.Minute, "how long the soak's load runs")

// soakServer is roced's address in the soak; clients use other 127.0.0.x addresses,
// one process per address, all on UDP 4791 as the tools default to.
const soakServer = "127.0.0.10"

// soakTools are the client binaries the soak runs.
type soakTools struct{ pingpong, rping, perftest string }

func buildSoakTools(t *testing.T) soakTools {
	dir := t.TempDir()
	var st soakTools
	for _, b := range []struct {
		dst *string
		pkg string
	}{{&st.pingpong, "roce-pingpong"}, {&st.rping, "rping-go"}, {&st.perftest, "roce-perftest"}} {
		*b.dst = filepath.Join(dir, b.pkg)
		if out, err := exec.Command("go", "build", "-o", *b.dst, "../"+b.pkg).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", b.pkg, err, out)
		}
	}
	return st
}

// tally counts what one kind of client did.
type tally struct {
	runs, ok, failed, killed, completions int
	failures                              []string
}

// soak is the state the load goroutines share.
type soak struct {
	t     *testing.T
	tools soakTools
	p     *daemonProc

	mu     sync.Mutex
	tallys map[string]*tally
	order  []string
}

func (s *soak) record(kind string, f func(*tally)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tl := s.tallys[kind]
	if tl == nil {
		tl = &tally{}
		s.tallys[kind] = tl
		s.order = append(s.order, kind)
	}
	f(tl)
}

// client is one good client run: its command line and how many completions its
// output must show.
type client struct {
	kind  string
	argv  []string
	count func(out string) int // completions the output shows
	want  int
}

var itersLine = regexp.MustCompile(`(?m)^(\d+) iters in `)

func pingpongCount(out string) int {
	m := itersLine.FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func rpingCount(out string) int { return strings.Count(out, "ping data: rdma-ping-") }

// goodClients are the kinds run over and over, each from its own address.
func (s *soak) goodClients() []client {
	pp, rp := s.tools.pingpong, s.tools.rping
	return []client{
		{"rc", []string{pp, "rc", "-d", "127.0.0.21", "-n", "200", "-s", "4096", "-c", soakServer}, pingpongCount, 200},
		{"rc 2% loss", []string{pp, "rc", "-d", "127.0.0.22", "-n", "100", "-s", "4096", "-c", "--loss=0.02", soakServer}, pingpongCount, 100},
		{"srq", []string{pp, "srq", "-d", "127.0.0.23", "-q", "4", "-n", "200", "-s", "2048", "-c", soakServer}, pingpongCount, 200},
		{"srq 2% loss", []string{pp, "srq", "-d", "127.0.0.24", "-q", "4", "-n", "100", "-s", "2048", "-c", "--loss=0.02", soakServer}, pingpongCount, 100},
		{"ud", []string{pp, "ud", "-d", "127.0.0.25", "-p", "18516", "-n", "200", "-s", "1024", soakServer}, pingpongCount, 200},
		{"rping", []string{rp, "-c", "-a", soakServer, "-I", "127.0.0.26", "-C", "100", "-S", "1000", "-V", "-v"}, rpingCount, 100},
	}
}

// runGood runs c until ctx ends, one run after the other.
func (s *soak) runGood(ctx context.Context, c client) {
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(rctx, c.argv[0], c.argv[1:]...).CombinedOutput()
		timedOut := rctx.Err() != nil
		cancel()
		got := c.count(string(out))
		s.record(c.kind, func(tl *tally) {
			tl.runs++
			if err == nil && got == c.want {
				tl.ok++
				tl.completions += got
				return
			}
			tl.failed++
			why := fmt.Sprintf("%v: %v (timed out %v), %d of %d completions: %s%s", c.argv[1:], err, timedOut, got, c.want, lastLines(string(out), 3), s.diagnose(c.argv))
			tl.failures = append(tl.failures, why)
		})
	}
}

// diagnose says what roced knows of a failed client: its QPs with that peer and
// the daemon's log lines naming the client's address.
func (s *soak) diagnose(argv []string) string {
	var addr string
	for i, a := range argv {
		if (a == "-d" || a == "-I") && i+1 < len(argv) {
			addr = argv[i+1]
		}
	}
	if addr == "" {
		return ""
	}
	var b strings.Builder
	if resp, err := http.Get("http://" + s.p.metrics + "/debug/qps"); err == nil {
		var rows []devapi.QP
		if json.NewDecoder(resp.Body).Decode(&rows) == nil {
			for _, r := range rows {
				if strings.Contains(r.Peer, addr) {
					fmt.Fprintf(&b, "\n  roced qp %+v", r)
				}
			}
		}
		resp.Body.Close()
	}
	var logs []string
	for _, l := range strings.Split(s.p.stderr.String(), "\n") {
		if strings.Contains(l, addr) || strings.Contains(l, "session ended") {
			logs = append(logs, l)
		}
	}
	for _, l := range logs[max(0, len(logs)-8):] {
		b.WriteString("\n  roced: " + l)
	}
	return b.String()
}

// runPerftest runs write_bw pairs (roced has no perftest responder, so both ends
// are roce-perftest, next to roced on the same loopback) until ctx ends.
func (s *soak) runPerftest(ctx context.Context) {
	pf := s.tools.perftest
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var sout bytes.Buffer
		srv := exec.CommandContext(rctx, pf, "write_bw", "-d", "127.0.0.31", "-p", "18700", "-n", "2000", "-s", "8192")
		srv.Stdout, srv.Stderr = &sout, &sout
		if err := srv.Start(); err != nil {
			s.t.Fatal(err)
		}
		var out []byte
		var err error
		// Again while the server is not listening yet, for as long as a
		// loaded host may take to start it (20 tries in 2 s did not hold).
		for deadline := time.Now().Add(30 * time.Second); ; {
			time.Sleep(100 * time.Millisecond)
			out, err = exec.CommandContext(rctx, pf, "write_bw", "-d", "127.0.0.32", "-p", "18700", "-n", "2000", "-s", "8192", "127.0.0.31").CombinedOutput()
			if err == nil || !bytes.Contains(out, []byte("refused")) || time.Now().After(deadline) {
				break
			}
		}
		serr := srv.Wait()
		cancel()
		s.record("perftest write_bw", func(tl *tally) {
			tl.runs++
			if err == nil && serr == nil {
				tl.ok++
				tl.completions += 2000
				return
			}
			tl.failed++
			tl.failures = append(tl.failures, fmt.Sprintf("client %v: %s; server %v: %s", err, lastLines(string(out), 3), serr, lastLines(sout.String(), 3)))
		})
	}
}

// runAbandoned starts clients that would run for hours and kills them by PID after
// half a second to two seconds: rc, srq and rping sessions the daemon must end on
// its own (idle limits) and clean up.
func (s *soak) runAbandoned(ctx context.Context) {
	pp, rp := s.tools.pingpong, s.tools.rping
	kinds := [][]string{
		{pp, "rc", "-d", "127.0.0.41", "-n", "100000000", "-s", "4096", soakServer},
		{pp, "srq", "-d", "127.0.0.41", "-q", "8", "-n", "100000000", "-s", "4096", soakServer},
		{rp, "-c", "-a", soakServer, "-I", "127.0.0.41", "-C", "100000000", "-S", "4000"},
	}
	for i := 0; ctx.Err() == nil; i++ {
		argv := kinds[i%len(kinds)]
		cmd := exec.Command(argv[0], argv[1:]...)
		if err := cmd.Start(); err != nil {
			s.t.Fatal(err)
		}
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		s.record("abandoned (kill -9)", func(tl *tally) { tl.runs++; tl.killed++ })
	}
}

// runJunk sends malformed traffic until ctx ends: random bytes to UDP 4791, packets
// with a bad ICRC to live QPs (taken from /debug/qps) and to unknown ones, MADs to
// QP1 with the wrong Q_Key or that do not parse, and REQs that never get an RTU.
// It returns how many datagrams it sent.
func (s *soak) runJunk(ctx context.Context) int {
	dst := netip.AddrPortFrom(netip.MustParseAddr(soakServer), 4791)
	srcs := make([]*net.UDPConn, 0, 10)
	for i := range 10 {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(200 + i)}), 0)))
		if err != nil {
			s.t.Fatal(err)
		}
		defer c.Close()
		srcs = append(srcs, c)
	}
	r := rand.New(rand.NewPCG(1, 2))
	var live []uint32 // QPNs roced has now
	n := 0
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return n
		case <-tick.C:
		}
		c := srcs[n%len(srcs)]
		src := c.LocalAddr().(*net.UDPAddr).AddrPort()
		if n%200 == 0 {
			live = s.liveQPNs()
		}
		var pkt []byte
		switch n % 6 {
		case 0: // random bytes
			pkt = make([]byte, 1+r.IntN(1400))
			for i := range pkt {
				pkt[i] = byte(r.Uint32())
			}
		case 1: // a well-formed SEND to a QPN nobody has, bad ICRC
			pkt = bth.Append(nil, &bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: 0x100000 | r.Uint32()&0xffff}, make([]byte, 64))
		case 2: // a MAD of junk to QP1 with a good ICRC
			pkt = bth.Append(nil, &bth.Fields{Opcode: bth.UDSendOnly, PKey: cm.GSIPKey, DestQP: cm.GSIQPN,
				DETH: bth.DETH{QKey: cm.GSIQKey, SrcQP: cm.GSIQPN}}, junkMAD(r))
			bth.PutICRC(&bth.Envelope{Src: src.Addr(), Dst: dst.Addr(), DF: true, SrcPort: src.Port(), DstPort: dst.Port()}, pkt)
		case 3: // a REQ that never gets its RTU, one round in three
			// About 11 a second, each pending for -cm-pending-timeout (3 s):
			// about 33 at once, under -cm-max-pending (64). A flood above the
			// cap evicts the oldest; TestCMREQFlood tests that bound.
			if (n/6)%3 != 0 {
				pkt = []byte{0}
				break
			}
			pkt = reqDatagram(s.t, r.Uint32()|1, src.Addr(), src.Port(), dst, defaultRpingPort)
		case 4: // to QP1 with the wrong Q_Key
			pkt = bth.Append(nil, &bth.Fields{Opcode: bth.UDSendOnly, PKey: cm.GSIPKey, DestQP: cm.GSIQPN,
				DETH: bth.DETH{QKey: 0x1234, SrcQP: cm.GSIQPN}}, junkMAD(r))
			bth.PutICRC(&bth.Envelope{Src: src.Addr(), Dst: dst.Addr(), DF: true, SrcPort: src.Port(), DstPort: dst.Port()}, pkt)
		case 5: // a SEND to a live QP with a bad ICRC: dropped before it can touch the session
			qpn := uint32(0x11)
			if len(live) > 0 {
				qpn = live[r.IntN(len(live))]
			}
			pkt = bth.Append(nil, &bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: qpn, PSN: bth.PSN(r.Uint32())}, make([]byte, 32))
		}
		_, _ = c.WriteToUDPAddrPort(pkt, dst)
		n++
	}
}

// liveQPNs lists the QPNs roced has now.
func (s *soak) liveQPNs() []uint32 {
	resp, err := http.Get("http://" + s.p.metrics + "/debug/qps")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var rows []devapi.QP
	if json.NewDecoder(resp.Body).Decode(&rows) != nil {
		return nil
	}
	qpns := make([]uint32, len(rows))
	for i, r := range rows {
		qpns[i] = r.QPN
	}
	return qpns
}

// junkMAD is 256 bytes that start like a CM MAD but do not parse as one.
func junkMAD(r *rand.Rand) []byte {
	b := make([]byte, cm.MADLen)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[0], b[1], b[2] = 1, 7, 2 // base version 1, class CM, class version 2
	return b
}

// watch probes the daemon every second until ctx ends: /healthz must answer 200,
// /debug/qps (a command to every QP's shard) must answer, and the memory peaks
// are recorded.
type watch struct {
	probes, healthFails, qpsFails int
	slowestQPs                    time.Duration
	peakRSS, peakHeap, peakG      float64
	fails                         []string
}

func (s *soak) watch(ctx context.Context) *watch {
	w := &watch{}
	cl := &http.Client{Timeout: 5 * time.Second}
	base := "http://" + s.p.metrics
	for {
		select {
		case <-ctx.Done():
			return w
		case <-time.After(time.Second):
		}
		w.probes++
		resp, err := cl.Get(base + "/healthz")
		if err != nil || resp.StatusCode != http.StatusOK {
			w.healthFails++
			w.fails = append(w.fails, fmt.Sprintf("/healthz: %v %v", err, statusOf(resp)))
		}
		drain(resp)
		start := time.Now()
		resp, err = cl.Get(base + "/debug/qps")
		took := time.Since(start)
		if err != nil || resp.StatusCode != http.StatusOK {
			w.qpsFails++
			w.fails = append(w.fails, fmt.Sprintf("/debug/qps after %v: %v %v", took, err, statusOf(resp)))
		}
		drain(resp)
		w.slowestQPs = max(w.slowestQPs, took)
		rss, heap, g := memory(s.t, s.p)
		w.peakRSS, w.peakHeap, w.peakG = max(w.peakRSS, rss), max(w.peakHeap, heap), max(w.peakG, g)
	}
}

func statusOf(r *http.Response) string {
	if r == nil {
		return ""
	}
	return r.Status
}

func drain(r *http.Response) {
	if r != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
}

// liveHeap asks roced to collect garbage and returns its live heap and goroutines.
func (s *soak) liveHeap() (heap, goroutines float64) {
	resp, err := http.Post("http://"+s.p.metrics+"/debug/gc", "text/plain", nil)
	if err != nil {
		s.t.Fatalf("/debug/gc: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, " ")
		f, _ := strconv.ParseFloat(v, 64)
		switch k {
		case "heap_alloc_bytes":
			heap = f
		case "goroutines":
			goroutines = f
		}
	}
	return heap, goroutines
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(l[max(0, len(l)-n):], " | ")
}

// TestSoak runs roced under good clients, loss, abandoned sessions and malformed
// traffic for -soak.duration and checks: every good client's run completes with
// all its completions (none lost, none extra), /healthz and /debug/qps answer
// throughout, and once the load stops every session, QP and CQ is gone and the
// live heap and goroutines are back to their baseline.
func TestSoak(t *testing.T) {
	for _, a := range []string{soakServer, "127.0.0.21", "127.0.0.41"} {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(a+":4791")))
		if err != nil {
			t.Skipf("UDP 4791 on %s is taken (another roced, or rdma_rxe loaded): %v", a, err)
		}
		c.Close()
	}
	s := &soak{t: t, tools: buildSoakTools(t), tallys: map[string]*tally{}}
	metricsPort := strings.TrimPrefix(freeTCPAddr(t), "127.0.0.1:")
	s.p = startDaemon(t, "-bind", soakServer, "-metrics", soakServer+":"+metricsPort, "-log-level", "info",
		"-pingpong-idle", "3s", "-rping-idle", "3s", "-cm-pending-timeout", "3s")
	// The baseline: roced announces its metrics address after it started every
	// listener and responder, so nothing is still coming up.
	heap0, g0 := s.liveHeap()
	rss0, _, _ := memory(t, s.p)

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), *soakDuration)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range s.goodClients() {
		wg.Add(1)
		go func() { defer wg.Done(); s.runGood(ctx, c) }()
	}
	wg.Add(3)
	go func() { defer wg.Done(); s.runPerftest(ctx) }()
	go func() { defer wg.Done(); s.runAbandoned(ctx) }()
	var junk int
	go func() { defer wg.Done(); junk = s.runJunk(ctx) }()
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan *watch)
	go func() { wdone <- s.watch(wctx) }()
	wg.Wait() // the load stopped; runs under way finished
	loadEnd := time.Now()

	// Everything the load left behind must go: abandoned sessions end at their idle
	// limit, pending CM connections at their pending timeout.
	var drained bool
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		m := s.p.scrape(t)
		left := 0.0
		for _, st := range []string{"reset", "init", "rtr", "rts", "sqd", "sqe", "err"} {
			left += value(t, m, "roce_queue_pairs", "state", st)
		}
		for _, k := range []string{"rc", "srq", "ud"} {
			left += value(t, m, "roce_pingpong_active_sessions", "kind", k)
		}
		left += value(t, m, "roce_rping_active_sessions") + value(t, m, "roce_cm_pending_connections") +
			value(t, m, "roce_completion_queues") + value(t, m, "roce_shared_receive_queues")
		if left == 0 {
			drained = true
			break
		}
	}
	drainTook := time.Since(loadEnd)
	wcancel()
	w := <-wdone
	heap1, g1 := s.liveHeap()
	rss1, _, _ := memory(t, s.p)
	m := s.p.scrape(t)

	// The summary.
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "client\truns\tok\tfailed\tkilled\tcompletions\t\n")
	for _, k := range s.order {
		tl := s.tallys[k]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", k, tl.runs, tl.ok, tl.failed, tl.killed, tl.completions)
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nload %v, drained in %v; junk datagrams sent: %d\n", loadEnd.Sub(start).Round(time.Second), drainTook.Round(100*time.Millisecond), junk)
	tw = tabwriter.NewWriter(&b, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "roced\tvalue\t\n")
	for _, row := range []struct {
		name   string
		labels []string
	}{
		{"roce_pingpong_sessions_total", []string{"kind", "rc"}}, {"roce_pingpong_sessions_total", []string{"kind", "srq"}},
		{"roce_pingpong_sessions_total", []string{"kind", "ud"}},
		{"roce_pingpong_session_ends_total", []string{"kind", "rc", "reason", "idle"}},
		{"roce_pingpong_session_ends_total", []string{"kind", "srq", "reason", "idle"}},
		{"roce_pingpong_session_ends_total", []string{"kind", "rc", "reason", "error"}},
		{"roce_pingpong_messages_total", []string{"kind", "rc"}}, {"roce_pingpong_exchange_errors_total", nil},
		{"roce_rping_sessions_total", nil}, {"roce_rping_session_ends_total", []string{"reason", "disconnect"}},
		{"roce_rping_session_ends_total", []string{"reason", "idle"}}, {"roce_rping_session_ends_total", []string{"reason", "error"}},
		{"roce_rping_accept_errors_total", nil}, {"roce_rping_pings_total", nil},
		{"roce_malformed_packets_total", nil}, {"roce_icrc_errors_total", nil}, {"roce_unknown_qp_total", nil},
		{"roce_gsi_drops_total", []string{"reason", "malformed"}}, {"roce_gsi_drops_total", []string{"reason", "overflow"}},
		{"roce_cm_drops_total", []string{"reason", "malformed"}}, {"roce_cm_drops_total", []string{"reason", "pending_limit"}},
		{"roce_cm_pending_expired_total", nil}, {"roce_retransmits_total", nil}, {"roce_timeouts_total", nil},
		{"roce_retry_exceeded_total", nil}, {"roce_duplicate_requests_total", nil},
	} {
		fmt.Fprintf(tw, "%s%v\t%.0f\t\n", row.name, row.labels, value(t, m, row.name, row.labels...))
	}
	tw.Flush()
	fmt.Fprintf(&b, "\nhealth probes %d: /healthz failed %d, /debug/qps failed %d, slowest /debug/qps %v\n",
		w.probes, w.healthFails, w.qpsFails, w.slowestQPs.Round(time.Millisecond))
	fmt.Fprintf(&b, "RSS %.1f MB at start, %.1f MB peak, %.1f MB at the end; live heap %.1f MB at start, %.1f MB at the end (peak in use %.1f MB); goroutines %v at start, %v peak, %v at the end\n",
		rss0/1e6, w.peakRSS/1e6, rss1/1e6, heap0/1e6, heap1/1e6, w.peakHeap/1e6, g0, w.peakG, g1)
	fmt.Printf("\n== soak summary\n%s\n", b.String())

	for _, k := range s.order {
		tl := s.tallys[k]
		for _, f := range tl.failures {
			t.Errorf("%s: %s", k, f)
		}
		if tl.runs == 0 || (tl.killed == 0 && tl.ok == 0) {
			t.Errorf("%s: %d runs, %d completed", k, tl.runs, tl.ok)
		}
	}
	for _, f := range w.fails {
		t.Errorf("probe: %s", f)
	}
	if !drained {
		t.Errorf("sessions, QPs or CQs still open a minute after the load stopped")
	}
	if heap1 > heap0+4e6 {
		t.Errorf("live heap %.1f MB at the end, %.1f MB at the start", heap1/1e6, heap0/1e6)
	}
	if g1 > g0+3 {
		t.Errorf("%v goroutines at the end, %v at the start", g1, g0)
	}
	if code, _ := s.p.stop(15 * time.Second); code != 0 {
		t.Errorf("roced exited %d after SIGTERM; stderr:\n%s", code, lastLines(s.p.stderr.String(), 20))
	}
}
