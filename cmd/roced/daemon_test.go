package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/goroce/goroce/bth"
)

// TestStartupErrors: every bad start exits non-zero with exactly one clear line.
func TestStartupErrors(t *testing.T) {
	addrs := testAddrs(1)
	port := freeUDPPort(t, addrs...)
	busy, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrs[0], port)))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyTCP, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyTCP.Close()
	okPort := freeUDPPort(t, addrs...)
	busyPP, err := net.Listen("tcp", net.JoinHostPort(addrs[0].String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer busyPP.Close()

	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"bad mtu", []string{"-mtu", "1500"}, 2, "roced: invalid value 1500 for flag -mtu: want 256, 512, 1024, 2048 or 4096"},
		{"unknown flag", []string{"-frobnicate"}, 2, "roced: flag provided but not defined: -frobnicate"},
		{"bad port", []string{"-port", "0"}, 2, "roced: invalid value 0 for flag -port: want 1..65535"},
		{"bad log format", []string{"-log-format", "yaml"}, 2, `roced: invalid value "yaml" for flag -log-format: want text or json`},
		{"not an address", []string{"-bind", "roce0"}, 2, `roced: invalid value "roce0" for flag -bind: "roce0" is not an IP address`},
		{"address not on host", []string{"-bind", "192.0.2.55"}, 1,
			"roced: -bind 192.0.2.55: no interface of this host has that address (see `ip -brief addr`)"},
		{"udp port busy", []string{"-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-metrics", ""}, 1,
			fmt.Sprintf("roced: -bind %s: UDP %d is in use — a loaded rdma_rxe module (soft-RoCE) or another roced usually holds it", addrs[0], port)},
		{"metrics port busy", []string{"-bind", addrs[0].String(), "-port", strconv.Itoa(int(okPort)), "-pingpong=false", "-metrics", busyTCP.Addr().String()}, 1,
			fmt.Sprintf("roced: -metrics %s: TCP port in use (another roced, or a Prometheus exporter, may hold it); pick another with -metrics", busyTCP.Addr())},
		{"pingpong port busy", []string{"-bind", addrs[0].String(), "-port", strconv.Itoa(int(okPort)), "-metrics", "", "-ud-pingpong=false", "-pingpong-port", tcpPort(busyPP)}, 1,
			fmt.Sprintf("roced: pingpong (ibv_rc_pingpong, ibv_srq_pingpong) responder: TCP %s is in use (a stock pingpong server or another roced?); pick another port or switch the responder off", busyPP.Addr())},
		{"pcap dir missing", []string{"-bind", addrs[0].String(), "-port", strconv.Itoa(int(okPort)), "-metrics", "", "-pingpong=false", "-pcap", "/nonexistent/dir/x.pcap"}, 1,
			"roced: -pcap: open /nonexistent/dir/x.pcap: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runRoced(t, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d", code, tt.wantCode)
			}
			if stderr != tt.want+"\n" {
				t.Errorf("stderr:\n%q\nwant one line:\n%q", stderr, tt.want+"\n")
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
}

// TestServeAndStop: the endpoints answer, and SIGTERM exits 0 quickly.
func TestServeAndStop(t *testing.T) {
	addrs := testAddrs(1)
	port := freeUDPPort(t, addrs...)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false")

	if !strings.Contains(p.stdout.String(), fmt.Sprintf("roced: serving RoCEv2 on %s UDP %d", addrs[0], port)) {
		t.Errorf("stdout does not say what it serves:\n%s", p.stdout.String())
	}
	if code, body := httpGet(t, "http://"+p.metrics+"/healthz"); code != http.StatusOK || string(body) != "ok\n" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	code, body := httpGet(t, "http://"+p.metrics+"/debug/qps")
	var qps []map[string]any
	if err := json.Unmarshal(body, &qps); code != http.StatusOK || err != nil {
		t.Errorf("/debug/qps = %d %q (%v), want 200 and a JSON list", code, body, err)
	}
	mfs := p.scrape(t)
	for _, name := range []string{"roce_packets_total", "roce_bytes_total", "roce_icrc_errors_total", "roce_naks_total",
		"roce_queue_pairs", "roce_ack_latency_seconds", "go_goroutines", "process_resident_memory_bytes", "go_build_info",
		"roce_build_info", "roce_shard_loop_age_seconds", "roce_gsi_mads_total", "roce_cm_pending_connections",
		"roce_async_events_total", "roce_link_drops_total", "roce_rping_active_sessions"} {
		if _, ok := mfs[name]; !ok {
			t.Errorf("%s not exported", name)
		}
	}
	if v := value(t, mfs, "roce_packets_total", "direction", "rx", "op_class", "send"); v != 0 {
		t.Errorf("idle daemon: rx send packets = %v", v)
	}
	code, took := p.stop(10 * time.Second)
	if code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0; stderr:\n%s", code, p.stderr.String())
	}
	// An idle daemon has nothing to drain: it must not wait out the drain deadline.
	if took >= defaultDrainTimeout {
		t.Errorf("SIGTERM to exit took %v, the whole -drain-timeout (%v)", took, defaultDrainTimeout)
	}
}

// TestDebugFlag: -debug moves /debug/* to its own listener; the metrics address
// then answers 404 for it, and /readyz and /healthz answer ok.
func TestDebugFlag(t *testing.T) {
	addrs := testAddrs(1)
	port := freeUDPPort(t, addrs...)
	dbg := freeTCPAddr(t)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false", "-ud-pingpong=false", "-debug", dbg)
	if code, body := httpGet(t, "http://"+dbg+"/debug/qps"); code != http.StatusOK || !strings.HasPrefix(string(body), "[") {
		t.Errorf("-debug /debug/qps = %d %q", code, body)
	}
	if code, _ := httpGet(t, "http://"+p.metrics+"/debug/qps"); code != http.StatusNotFound {
		t.Errorf("/debug/qps on the metrics address with -debug set = %d, want 404", code)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := httpGet(t, "http://"+p.metrics+path); code != http.StatusOK {
			t.Errorf("%s = %d %q", path, code, body)
		}
	}
	// The line follows the metrics line that startDaemon waited for.
	waitFor(t, "stdout to name the debug address", func() bool {
		return strings.Contains(p.stdout.String(), "roced: debug endpoints on http://"+dbg+"/debug/qps")
	})
}

// sendDatagrams sends every datagram in pkts from from to the daemon, under
// flow control so that its socket never overflows (a kernel drop would make
// the exact counts the tests check wrong, and pacing by the clock did not hold
// when the daemon was descheduled on a loaded host).
func sendDatagrams(t *testing.T, from netip.Addr, to netip.AddrPort, pkts [][]byte) {
	t.Helper()
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, to.Port())))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dst := net.UDPAddrFromAddrPort(to)
	fc := newFlowControl(t, to)
	for i, p := range pkts {
		fc.before(i)
		if _, err := c.WriteToUDP(p, dst); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	fc.check()
}

// flowControl keeps what a sender has queued on the daemon's UDP socket
// within what the smallest receive buffer holds: bursts of flowBurst
// datagrams, each sent once the daemon has read the queue down to
// flowLowWater bytes. Linux charges a small loopback datagram about 1-2 KiB
// (truesize), so a burst and the low water fit the kernel's default 208 KiB
// SO_RCVBUF, which the daemon gets when it cannot raise it.
type flowControl struct {
	t     *testing.T
	to    netip.AddrPort
	drops int
}

const (
	flowBurst    = 50
	flowLowWater = 64 << 10
	flowWait     = 30 * time.Second // a daemon that reads nothing for this long is stuck
)

func newFlowControl(t *testing.T, to netip.AddrPort) *flowControl {
	_, drops := udpQueue(t, to)
	return &flowControl{t: t, to: to, drops: drops}
}

// before is called before datagram i is sent.
func (f *flowControl) before(i int) {
	if i%flowBurst != 0 {
		return
	}
	deadline := time.Now().Add(flowWait)
	for {
		q, _ := udpQueue(f.t, f.to)
		if q <= flowLowWater {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("the daemon's socket on %v still holds %d bytes after %v", f.to, q, flowWait)
		}
		time.Sleep(time.Millisecond)
	}
}

// check fails the test if the kernel dropped datagrams at the daemon's socket
// since newFlowControl.
func (f *flowControl) check() {
	if _, drops := udpQueue(f.t, f.to); drops != f.drops {
		f.t.Fatalf("the kernel dropped %d datagrams at %v's socket: the counts would be wrong", drops-f.drops, f.to)
	}
}

// udpQueue sums, over the IPv4 UDP sockets bound to at, the bytes queued and
// not yet read and the datagrams the kernel dropped (/proc/net/udp's rx_queue
// and drops).
func udpQueue(t *testing.T, at netip.AddrPort) (queued, drops int) {
	t.Helper()
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	a := at.Addr().As4()
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], at.Port())
	for _, l := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(l)
		if len(f) < 13 || f[1] != want {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		q, err1 := strconv.ParseUint(rx, 16, 64)
		d, err2 := strconv.Atoi(f[len(f)-1])
		if err1 != nil || err2 != nil {
			t.Fatalf("/proc/net/udp line %q", l)
		}
		queued += int(q)
		drops += d
	}
	return queued, drops
}

// junk returns n datagrams of three kinds: random bytes, truncated headers (shorter
// than a BTH) and well-formed SEND ONLY packets to a QPN nobody has, with a wrong
// ICRC. It returns how many are truncated and how many have a bad ICRC.
func junk(r *rand.Rand, n int) (pkts [][]byte, truncated, badICRC int) {
	for i := range n {
		switch i % 3 {
		case 0:
			b := make([]byte, 1+r.IntN(1500))
			for j := range b {
				b[j] = byte(r.Uint32())
			}
			pkts = append(pkts, b)
		case 1:
			b := make([]byte, r.IntN(bth.BTHLen))
			for j := range b {
				b[j] = byte(r.Uint32())
			}
			pkts = append(pkts, b)
			truncated++
		case 2:
			f := bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: 0xabcde, PSN: bth.PSN(i), AckReq: true}
			b := bth.Append(nil, &f, make([]byte, 64))
			binary.BigEndian.PutUint32(b[len(b)-4:], r.Uint32()|1) // a nonzero, almost surely wrong ICRC
			pkts = append(pkts, b)
			badICRC++
		}
	}
	return pkts, truncated, badICRC
}

func dropped(t *testing.T, mfs map[string]*dto.MetricFamily) float64 {
	return value(t, mfs, "roce_malformed_packets_total") + value(t, mfs, "roce_icrc_errors_total") + value(t, mfs, "roce_unknown_qp_total")
}

// TestMalformedFlood: junk is counted and dropped, the daemon keeps serving, and its
// memory stays flat.
// Shared (the default), junk whose DestQP is in a block no process holds is
// read and counted by roced's drain (roce_unknown_qp_total includes it);
// alone, every datagram reaches roced's engine.
func TestMalformedFlood(t *testing.T) {
	for _, shared := range []bool{true, false} {
		t.Run(map[bool]string{true: "shared", false: "alone"}[shared], func(t *testing.T) { malformedFlood(t, shared) })
	}
}

func malformedFlood(t *testing.T, shared bool) {
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	args := []string{"-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false"}
	if !shared {
		args = append(args, "-socket", "none")
	}
	p := startDaemon(t, args...)
	to := netip.AddrPortFrom(addrs[0], port)
	r := rand.New(rand.NewPCG(1, 2))

	waitDropped := func(want float64) map[string]*dto.MetricFamily {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mfs := p.scrape(t)
			got := dropped(t, mfs)
			if got == want {
				return mfs
			}
			if got > want || time.Now().After(deadline) {
				t.Fatalf("malformed+icrc+unknown_qp = %v, want %v", got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// Warm up: the first rounds grow pools and buffers to their working size.
	const round = 3000
	total := 0
	var truncated, badICRC int
	for range 2 {
		pkts, tr, bi := junk(r, round)
		sendDatagrams(t, addrs[1], to, pkts)
		total += len(pkts)
		truncated += tr
		badICRC += bi
	}
	mfs := waitDropped(float64(total))
	rss0 := value(t, mfs, "process_resident_memory_bytes")
	heap0 := value(t, mfs, "go_memstats_heap_inuse_bytes")

	for range 8 {
		pkts, tr, bi := junk(r, round)
		sendDatagrams(t, addrs[1], to, pkts)
		total += len(pkts)
		truncated += tr
		badICRC += bi
	}
	mfs = waitDropped(float64(total))
	if m := value(t, mfs, "roce_malformed_packets_total"); !shared && m < float64(truncated) {
		t.Errorf("malformed = %v, want >= %d truncated datagrams", m, truncated)
	}
	if v := value(t, mfs, "roce_packets_total", "direction", "tx", "op_class", "ack"); v != 0 {
		t.Errorf("the daemon answered junk with %v ACK/NAK packets", v)
	}
	rss1 := value(t, mfs, "process_resident_memory_bytes")
	heap1 := value(t, mfs, "go_memstats_heap_inuse_bytes")
	t.Logf("counted: malformed %v, bad ICRC %v, unknown QP %v", value(t, mfs, "roce_malformed_packets_total"),
		value(t, mfs, "roce_icrc_errors_total"), value(t, mfs, "roce_unknown_qp_total"))
	t.Logf("%d datagrams (%d truncated, %d bad ICRC): RSS %.1f -> %.1f MiB, heap in use %.1f -> %.1f MiB",
		total, truncated, badICRC, rss0/(1<<20), rss1/(1<<20), heap0/(1<<20), heap1/(1<<20))
	if rss1-rss0 > 16<<20 {
		t.Errorf("RSS grew by %.1f MiB over %d junk datagrams", (rss1-rss0)/(1<<20), 8*round)
	}
	if heap1-heap0 > 8<<20 {
		t.Errorf("heap in use grew by %.1f MiB over %d junk datagrams", (heap1-heap0)/(1<<20), 8*round)
	}
	if code, _ := httpGet(t, "http://"+p.metrics+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d after the flood", code)
	}
	if code, _ := p.stop(10 * time.Second); code != 0 {
		t.Errorf("exit code %d after the flood; stderr:\n%s", code, p.stderr.String())
	}
}

// TestSIGHUPReopens: after the files are moved away, SIGHUP makes roced write fresh
// ones: a pcap with its own header and a log file.
func TestSIGHUPReopens(t *testing.T) {
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	dir := t.TempDir()
	pcap, logf := filepath.Join(dir, "roce.pcap"), filepath.Join(dir, "roced.log")
	// Alone: shared, roced captures its own block only (QP1 and its
	// responders), and junk lands in any block.
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false",
		"-pcap", pcap, "-log-file", logf, "-log-format", "json", "-socket", "none")
	to := netip.AddrPortFrom(addrs[0], port)
	pkts, _, _ := junk(rand.New(rand.NewPCG(3, 4)), 9)

	sendDatagrams(t, addrs[1], to, pkts[:3])
	waitFor(t, "3 records in the first pcap", func() bool { return pcapRecords(t, pcap) == 3 })
	for _, f := range []string{pcap, logf} {
		if err := os.Rename(f, f+".1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a new log file", func() bool {
		b, err := os.ReadFile(logf)
		return err == nil && strings.Contains(string(b), "SIGHUP: reopened")
	})
	sendDatagrams(t, addrs[1], to, pkts[3:])
	waitFor(t, "6 records in the new pcap", func() bool { return pcapRecords(t, pcap) == 6 })
	if n := pcapRecords(t, pcap+".1"); n != 3 {
		t.Errorf("old pcap has %d records after SIGHUP, want 3", n)
	}
	if code, _ := p.stop(10 * time.Second); code != 0 {
		t.Errorf("exit code %d; stderr:\n%s", code, p.stderr.String())
	}
	b, err := os.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line is not JSON: %q", line)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pcapRecords counts the records of a classic pcap file; -1 if it is not one.
func pcapRecords(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 24 || binary.LittleEndian.Uint32(b) != 0xa1b2c3d4 {
		return -1
	}
	n := 0
	for off := 24; off+16 <= len(b); n++ {
		incl := int(binary.LittleEndian.Uint32(b[off+8:]))
		off += 16 + incl
		if off > len(b) {
			return n // a record still being written
		}
	}
	return n
}

// TestMultipleBinds: two addresses, one device each, each with its own pcap file;
// every engine series carries its device's address.
func TestMultipleBinds(t *testing.T) {
	addrs := testAddrs(3)
	port := freeUDPPort(t, addrs...)
	dir := t.TempDir()
	pcap := filepath.Join(dir, "roce.pcap")
	p := startDaemon(t, "-bind", addrs[0].String()+","+addrs[1].String(), "-port", strconv.Itoa(int(port)),
		"-pingpong=false", "-ud-pingpong=false", "-pcap", pcap)
	for _, a := range addrs[:2] {
		if !strings.Contains(p.stdout.String(), fmt.Sprintf("serving RoCEv2 on %s UDP %d", a, port)) {
			t.Errorf("stdout does not announce %s:\n%s", a, p.stdout.String())
		}
	}
	short := [][]byte{{1}, {2}, {3}}
	sendDatagrams(t, addrs[2], netip.AddrPortFrom(addrs[0], port), short[:1])
	sendDatagrams(t, addrs[2], netip.AddrPortFrom(addrs[1], port), short[1:])
	waitFor(t, "3 malformed datagrams over both devices", func() bool {
		m := p.scrape(t)
		return value(t, m, "roce_malformed_packets_total", "address", addrs[0].String()) == 1 &&
			value(t, m, "roce_malformed_packets_total", "address", addrs[1].String()) == 2 &&
			value(t, m, "roce_queue_pairs", "address", addrs[1].String(), "state", "rts") == 0 &&
			value(t, m, "roce_gsi_drops_total", "address", addrs[0].String(), "reason", "malformed") == 0
	})
	for i, a := range addrs[:2] {
		f := filepath.Join(dir, "roce-"+a.String()+".pcap")
		if n := pcapRecords(t, f); n != i+1 {
			t.Errorf("%s: %d records, want %d", f, n, i+1)
		}
	}
}

func tcpPort(l net.Listener) string { return strconv.Itoa(l.Addr().(*net.TCPAddr).Port) }
