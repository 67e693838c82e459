package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/oob"
)

func TestParseArgs(t *testing.T) {
	ok := []struct {
		name string
		args []string
		want func(*config) bool
	}{
		{"bw server defaults", []string{"write_bw", "-d", "127.0.0.1"}, func(c *config) bool {
			return c.server == "" && c.size == 65536 && c.iters == 5000 && c.mtu == 0 && c.TCPPort == 18515 && c.gidIndex == -1 &&
				c.txDepth == 128 && c.numQPs == 1 && c.conn == connRC && c.qpTimeout == 14
		}},
		{"lat defaults", []string{"write_lat", "-d", "127.0.0.1"}, func(c *config) bool { return c.size == 2 && c.iters == 1000 && c.txDepth == 1 }},
		{"atomic defaults", []string{"atomic_bw"}, func(c *config) bool { return c.size == 8 && c.iters == 1000 && !c.atomicCAS }},
		{"ib_ prefix", []string{"ib_read_bw"}, func(c *config) bool { return c.test == test{read, false} }},
		// perftest's own command lines, as users type them.
		{"client with perftest flags", []string{"send_bw", "-d", "198.18.0.1", "-x", "1", "-n", "200", "-s", "64", "-F", "-m", "4096", "-p", "1234", "198.18.0.11"}, func(c *config) bool {
			return c.server == "198.18.0.11" && c.gidIndex == 1 && c.iters == 200 && c.size == 64 && c.mtu == 4096 && c.TCPPort == 1234 && c.rxDepth == 200
		}},
		{"flags after the host", []string{"write_bw", "127.0.0.1", "-d", "127.0.0.2", "-n", "10"}, func(c *config) bool {
			return c.server == "127.0.0.1" && c.Addr.String() == "127.0.0.2" && c.iters == 10 && c.txDepth == 10
		}},
		{"attached and long", []string{"read_bw", "-n10", "--size=4K", "--ib-dev=lo", "--iters", "20", "-i", "1", "127.0.0.1"}, func(c *config) bool {
			return c.iters == 20 && c.size == 4096 && c.Addr.String() == "127.0.0.1"
		}},
		{"-s with M", []string{"write_bw", "-s", "1M"}, func(c *config) bool { return c.size == 1<<20 && c.cqMod == 1 }},
		{"-a", []string{"write_bw", "-a", "-n", "5"}, func(c *config) bool { return c.all && c.size == maxSize }},
		{"-q 4 -b", []string{"send_bw", "-q", "4", "-b", "-n", "100"}, func(c *config) bool { return c.numQPs == 4 && c.duplex }},
		{"-D", []string{"write_bw", "-D", "4"}, func(c *config) bool { return c.duration == 4 && c.margin == 1 && c.noPeak }},
		{"-D -f", []string{"send_lat", "-D", "10", "-f", "2"}, func(c *config) bool { return c.duration == 10 && c.margin == 2 }},
		{"atomic CAS", []string{"atomic_lat", "-A", "CMP_AND_SWAP"}, func(c *config) bool { return c.atomicCAS }},
		{"--atomic_type=FETCH_AND_ADD", []string{"atomic_bw", "--atomic_type=FETCH_AND_ADD", "-o", "4"}, func(c *config) bool { return !c.atomicCAS && c.outReads == 4 }},
		{"UD", []string{"send_bw", "-c", "UD", "-n", "50"}, func(c *config) bool { return c.conn == connUD && c.rxDepth == 50 }},
		{"UC", []string{"write_bw", "--connection=UC"}, func(c *config) bool { return c.conn == connUC }},
		{"report options", []string{"write_bw", "--report_gbits", "--run_infinitely", "-b", "--report-both"}, func(c *config) bool {
			return c.reportGbits && c.runInf && c.duplex && c.reportBoth && c.noPeak
		}},
		{"accepted and ignored", []string{"send_lat", "-F", "-Q", "10", "-I", "64", "-S", "3", "--odp", "--cpu_util", "-N"}, func(c *config) bool { return c.noPeak && !c.events }},
		{"events", []string{"send_lat", "-e"}, func(c *config) bool { return c.events }},
		{"odd rx depth rounds up", []string{"send_bw", "-r", "7"}, func(c *config) bool { return c.rxDepth == 8 }},
		{"-- before the host", []string{"write_lat", "--", "127.0.0.1"}, func(c *config) bool { return c.server == "127.0.0.1" }},
		{"-R", []string{"write_bw", "-R", "-T", "96", "127.0.0.1"}, func(c *config) bool { return c.rdmaCM && c.tos == 96 }},
		{"--rdma_cm", []string{"read_lat", "--rdma_cm", "-d", "lo"}, func(c *config) bool { return c.rdmaCM }},
		// WRITE_IMM takes send_bw's receive depth (512, at most -n) and -r.
		{"--write_with_imm", []string{"write_bw", "--write_with_imm", "-n", "100"}, func(c *config) bool {
			return c.writeImm && c.rxDepth == 100 && c.noPeak && c.receives()
		}},
		{"--write_with_imm -r", []string{"write_bw", "--write_with_imm", "-r", "7", "127.0.0.1"}, func(c *config) bool { return c.rxDepth == 7 }},
		// -l: the CQ moderation becomes the list's length, unless -Q divides it.
		{"-l", []string{"write_bw", "-l", "4", "-n", "200"}, func(c *config) bool { return c.postList == 4 && c.cqMod == 4 }},
		{"-l with -Q", []string{"send_bw", "--post_list=8", "-Q", "2", "-n", "64"}, func(c *config) bool { return c.postList == 8 && c.cqMod == 2 }},
		{"-l by time", []string{"write_bw", "-l", "3", "-D", "4"}, func(c *config) bool { return c.postList == 3 && c.cqMod == 3 }},
		{"--use-srq", []string{"send_bw", "--use-srq", "-q", "4", "-n", "200"}, func(c *config) bool { return c.useSRQ && c.rxDepth == 200 }},
	}
	for _, tt := range ok {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := parseArgs(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(c) {
				t.Errorf("config %+v", c)
			}
		})
	}
	bad := []struct {
		name string
		args []string
		msg  string
	}{
		{"no test", nil, "missing TEST"},
		{"unknown test", []string{"rawbw"}, "unknown TEST"},
		{"device that is no interface", []string{"write_bw", "-d", "rxe0"}, "-d rxe0: not an IP address or a network interface"},
		{"bad mtu", []string{"write_bw", "-m", "1500"}, "-m 1500"},
		{"size above perftest's max", []string{"write_bw", "-s", "8388609"}, "-s 8388609"},
		{"too few iters", []string{"write_bw", "-n", "4"}, "-n 4"},
		{"atomic size", []string{"atomic_bw", "-s", "16"}, "atomic tests is 8"},
		{"UC read", []string{"read_bw", "-c", "UC"}, "UC has no RDMA_Read"},
		{"UD write", []string{"write_bw", "-c", "UD"}, "UD only SENDs"},
		{"XRC", []string{"send_bw", "-c", "XRC"}, "XRC QPs are not supported"},
		{"-q on lat", []string{"write_lat", "-q", "2"}, "several QPs only in the bw tests"},
		{"-b on lat", []string{"send_lat", "-b"}, "bidirectional only in the bw tests"},
		{"-A on write", []string{"write_bw", "-A", "CMP_AND_SWAP"}, "only the atomic tests"},
		{"bad atomic type", []string{"atomic_bw", "-A", "SWAP"}, "CMP_AND_SWAP or FETCH_AND_ADD"},
		{"-D with -a", []string{"write_bw", "-a", "-D", "3"}, "-D: not with -a"},
		{"margin too large", []string{"write_bw", "-D", "4", "-f", "2"}, "twice the margin"},
		{"rx depth on write", []string{"write_bw", "-r", "4"}, "rx depth of 1"},
		{"rdma_cm server without -d", []string{"write_bw", "-R"}, "-R: the server needs -d"},
		{"rdma_cm over UD", []string{"send_bw", "-R", "-c", "UD", "-d", "lo"}, "-R: only RC QPs"},
		{"multicast", []string{"send_bw", "-g"}, "-g: multicast is not supported"},
		{"raw ethernet", []string{"send_bw", "--source_mac", "00:11:22:33:44:55"}, "-B: raw Ethernet"},
		{"tos without -R", []string{"write_bw", "-T", "3"}, "-T: the type of service applies to rdma_cm QPs"},
		{"pkey", []string{"write_bw", "--pkey_index=1"}, "--pkey_index 1"},
		{"unknown option", []string{"write_bw", "--frob"}, "unknown option: --frob"},
		{"two servers", []string{"write_bw", "a", "b"}, "too many arguments"},
		{"run_infinitely on lat", []string{"write_lat", "--run_infinitely"}, "only in the bw tests"},
		{"output mismatch", []string{"write_lat", "--output=bandwidth"}, "does not fit write_lat"},
		{"write_with_imm on send", []string{"send_bw", "--write_with_imm"}, "--write_with_imm: only in write_bw"},
		{"write_with_imm on lat", []string{"write_lat", "--write_with_imm"}, "--write_with_imm: only in write_bw"},
		{"write_with_imm infinitely both ways", []string{"write_bw", "--write_with_imm", "--run_infinitely", "-b"}, "not with -b"},
		{"-l on lat", []string{"write_lat", "-l", "2"}, "-l: post lists only in the bw tests"},
		{"-l not dividing -n", []string{"write_bw", "-l", "3", "-n", "100"}, "must be a multiple of the post list size"},
		{"-l not a multiple of -Q", []string{"write_bw", "-l", "4", "-Q", "3", "-n", "100"}, "must be a multiple of the CQ moderation"},
		{"-l over the tx depth", []string{"write_bw", "-l", "8", "-t", "4", "-n", "96"}, "longer than the TX depth"},
		{"-l 0", []string{"write_bw", "-l", "0"}, "-l 0: the post list size must be positive"},
		{"--use-srq on write", []string{"write_bw", "--use-srq"}, "an SRQ only in the send tests"},
		{"--use-srq with write_with_imm", []string{"write_bw", "--write_with_imm", "--use-srq"}, "an SRQ only in the send tests"},
		{"--use-srq with more QPs than receives", []string{"send_bw", "--use-srq", "-q", "8", "-r", "4"}, "must be at least the number of QPs"},
		{"receive post lists", []string{"send_bw", "--recv_post_list=2"}, "receive post lists are not supported"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			c, _, err := parseArgs(tt.args)
			if err == nil {
				t.Fatalf("parseArgs(%q) = %+v, want an error", tt.args, c)
			}
			if !strings.Contains(err.Error(), tt.msg) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %q, want one line with %q", err, tt.msg)
			}
		})
	}
}

// TestRunMessages: a mistake is one line on stderr; the usage only with -h;
// -V and --version print the version.
func TestRunMessages(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"write_bw", "-g"}, &out, &errb); rc != 1 || out.Len() != 0 || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("bad option: exit %d, stdout %q, stderr %q", rc, out.String(), errb.String())
	}
	for _, args := range [][]string{{"-h"}, {"write_bw", "--help"}} {
		out.Reset()
		errb.Reset()
		if rc := run(args, &out, &errb); rc != 0 || errb.Len() != 0 || !strings.Contains(out.String(), "--run_infinitely") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, rc, out.String(), errb.String())
		}
	}
	for _, args := range [][]string{{"-V"}, {"write_bw", "--version"}, {"-version"}} {
		out.Reset()
		if rc := run(args, &out, &errb); rc != 0 || !strings.HasPrefix(out.String(), "roce-perftest ") {
			t.Errorf("%q: exit %d, stdout %q", args, rc, out.String())
		}
	}
}

func TestParseVersion(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want float64
	}{{"6.06", 6.06}, {"5.70", 5.70}, {"6.28", 6.28}, {"6.29.", 6.29}, {"25.01-x", 25.01}, {"", 0}, {"abc", 0}} {
		if got := parseVersion(tt.in); got != tt.want {
			t.Errorf("parseVersion(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestCHex(t *testing.T) {
	for _, tt := range []struct {
		v     uint64
		width int
		want  string
	}{{0, 4, "0000"}, {0x1e, 6, "0x001e"}, {0xc74fee, 6, "0xc74fee"}, {0x10ca, 8, "0x0010ca"}, {0x55c13b372000, 16, "0x0055c13b372000"}, {0x80, 4, "0x80"}} {
		if got := cHex(tt.v, tt.width); got != tt.want {
			t.Errorf("cHex(%#x, %d) = %q, want %q", tt.v, tt.width, got, tt.want)
		}
	}
}

// TestPrintDest pins the address lines against the ones stock ib_read_bw printed
// in the lab.
func TestPrintDest(t *testing.T) {
	var b bytes.Buffer
	s := &session{c: &config{test: test{read, false}}, out: &b}
	gid := [16]byte{10: 255, 11: 255, 12: 198, 13: 18, 15: 11}
	s.printDest("local", oob.PerftestDest{QPN: 0x1f, PSN: 0x5648dc, OutReads: 0x80, RKey: 0x1023, VAddr: 0x55ebed3e4000, GID: gid})
	want := " local address: LID 0000 QPN 0x001f PSN 0x5648dc OUT 0x80 RKey 0x001023 VAddr 0x0055ebed3e4000\n" +
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:198:18:00:11\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
}

// TestXchgReports checks the report exchange byte for byte against what perftest's
// xchg_bw_reports writes: five 8-byte big-endian values, each its own step.
// TestSendsDone pins the closing rule: a peer from perftest 23.10 (6.17) on closes after
// the last hand-shake without "done" (25.01, version 6.24, does); 4.5 (6.06) writes it.
func TestSendsDone(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want bool
	}{{"6.06", true}, {"6.16", true}, {"6.17", false}, {"6.24", false}, {oob.PerftestVersion, false}, {"", true}} {
		if got := sendsDone(tt.v); got != tt.want {
			t.Errorf("sendsDone(%q) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

func TestXchgReports(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	s := &session{conn: oob.NewPerftestConn(a, true)}
	mine := bwReport{size: 65536, iters: 200, peak: 12.5, avg: 11.25, msgRatep: 0.000180}
	peer := bwReport{size: 65536, iters: 200, peak: 1, avg: 2, msgRatep: 3}
	var wg sync.WaitGroup
	var got []byte
	var perr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The stock server's side: read each value, then answer with its own.
		for _, v := range []uint64{peer.size, peer.iters, math.Float64bits(peer.peak), math.Float64bits(peer.avg), math.Float64bits(peer.msgRatep)} {
			var in [8]byte
			if _, err := io.ReadFull(b, in[:]); err != nil {
				perr = err
				return
			}
			got = append(got, in[:]...)
			var out [8]byte
			binary.BigEndian.PutUint64(out[:], v)
			if _, err := b.Write(out[:]); err != nil {
				perr = err
				return
			}
		}
	}()
	rem, err := s.xchgReports(context.Background(), mine)
	wg.Wait()
	if err != nil || perr != nil {
		t.Fatal(err, perr)
	}
	if rem != peer {
		t.Errorf("remote report %+v, want %+v", rem, peer)
	}
	want := binary.BigEndian.AppendUint64(nil, 65536)
	want = binary.BigEndian.AppendUint64(want, 200)
	for _, f := range []float64{12.5, 11.25, 0.000180} {
		want = binary.BigEndian.AppendUint64(want, math.Float64bits(f))
	}
	if !bytes.Equal(got, want) {
		t.Errorf("sent % x\nwant % x", got, want)
	}
}

// TestPrintLat pins perftest's latency statistics: round trips halved (or not, for
// READ), the two largest dropped (the first of them shown as t_max, as perftest
// does), the median of an even count averaged, the deviation from integer
// differences.
func TestPrintLat(t *testing.T) {
	at := func(us ...int) []int64 {
		var ts []int64
		for _, u := range us {
			ts = append(ts, int64(u)*1000)
		}
		return ts
	}
	for _, tt := range []struct {
		name   string
		posted []int64
		verb   verb
		want   []string // t_min t_max t_typical t_avg t_stdev 99% 99.9%
	}{
		// Gaps 10, 10, 30, 20, 1000, 500, halved: 5 5 10 15 | 250 500.
		{"halved, tail dropped", at(0, 10, 20, 50, 70, 1070, 1570), write,
			[]string{"5.00", "250.00", "7.50", "8.75", "3.71", "250.00", "250.00"}},
		{"read: whole round trip", at(0, 10, 20, 50, 70, 1070, 1570), read,
			[]string{"10.00", "500.00", "15.00", "17.50", "7.84", "500.00", "500.00"}},
		{"odd count", at(0, 4, 8, 14, 1014, 2014), atomic,
			[]string{"4.00", "1000.00", "4.00", "4.67", "0.58", "1000.00", "1000.00"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			s := &session{c: &config{test: test{tt.verb, true}}, out: &b}
			s.printLat(64, len(tt.posted), tt.posted)
			f := strings.Fields(b.String())
			if len(f) != 9 || f[0] != "64" || f[1] != strconv.Itoa(len(tt.posted)) {
				t.Fatalf("row %q", b.String())
			}
			if got := f[2:]; !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// freeTCPPort and freeUDPPort return ports that were free a moment ago.
func freeTCPPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func freeUDPPort(t *testing.T) int {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// rows returns every results row under the first header of out: bytes,
// iterations and the figure (BW average, or t_avg).
func rows(out string, lat bool) [][3]float64 {
	_, rest, ok := strings.Cut(out, "#bytes")
	if !ok {
		return nil
	}
	col := 3
	if lat {
		col = 5
	}
	var got [][3]float64
	for _, line := range strings.Split(rest, "\n")[1:] {
		f := strings.Fields(line)
		if lat && len(f) == 4 {
			col = 2 // a -D row: t_avg, then tps
		}
		if len(f) <= col {
			break
		}
		b, err1 := strconv.ParseFloat(f[0], 64)
		n, err2 := strconv.ParseFloat(f[1], 64)
		v, err3 := strconv.ParseFloat(f[col], 64)
		if err1 != nil || err2 != nil || err3 != nil {
			break
		}
		got = append(got, [3]float64{b, n, v})
	}
	return got
}

// pair runs our server and our client of one test against each other over
// loopback UDP (127.0.0.1 and 127.0.0.2) and returns both exits and outputs.
func pair(t *testing.T, args []string, timeout string) (src, crc int, sout, serr, cout, cerr string) {
	t.Helper()
	common := append([]string{"-p", strconv.Itoa(freeTCPPort(t)), "--roce-port", strconv.Itoa(freeUDPPort(t)),
		"--timeout", timeout, "--linger", "50ms", "--stats"}, args...)
	var srvOut, srvErr bytes.Buffer
	srvRC := make(chan int, 1)
	go func() { srvRC <- run(append([]string{"-d", "127.0.0.1"}, common...), &srvOut, &srvErr) }()
	var cliOut, cliErr bytes.Buffer
	for deadline := time.Now().Add(10 * time.Second); ; {
		cliOut.Reset()
		cliErr.Reset()
		crc = run(append(append([]string{"-d", "127.0.0.2"}, common...), "127.0.0.1"), &cliOut, &cliErr)
		if crc == 0 || !strings.Contains(cliErr.String(), "couldn't connect") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case src = <-srvRC:
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not exit; client exit %d:\n%s%s", crc, cliOut.String(), cliErr.String())
	}
	return src, crc, srvOut.String(), srvErr.String(), cliOut.String(), cliErr.String()
}

// TestLoopback runs our server and our client of every test, transport and
// option against each other and checks both results tables and counters.
func TestLoopback(t *testing.T) {
	for _, tt := range []struct {
		args       []string
		size, iter int
		rows       int  // results rows each side prints (-a: one per size; a passive server prints the last)
		quietSrv   bool // the server prints no row (read_lat, atomic_lat)
		atomics    bool // both sides check the atomics
	}{
		{[]string{"write_bw", "-s", "64", "-n", "300"}, 64, 300, 1, false, false},
		{[]string{"write_bw", "-s", "65536", "-n", "50"}, 65536, 50, 1, false, false},
		{[]string{"read_bw", "-s", "64", "-n", "300"}, 64, 300, 1, false, false},
		{[]string{"read_bw", "-s", "64K", "-n", "50"}, 65536, 50, 1, false, false},
		{[]string{"send_bw", "-s", "64", "-n", "300"}, 64, 300, 1, false, false},
		{[]string{"send_bw", "-s", "65536", "-n", "50"}, 65536, 50, 1, false, false},
		{[]string{"atomic_bw", "-n", "300"}, 8, 300, 1, false, true},
		{[]string{"atomic_bw", "-n", "300", "-A", "CMP_AND_SWAP"}, 8, 300, 1, false, true},
		{[]string{"write_lat", "-s", "2", "-n", "200"}, 2, 200, 1, false, false},
		{[]string{"write_lat", "-s", "65536", "-n", "50"}, 65536, 50, 1, false, false},
		{[]string{"read_lat", "-s", "64", "-n", "200"}, 64, 200, 1, true, false},
		{[]string{"send_lat", "-s", "64", "-n", "200"}, 64, 200, 1, false, false},
		{[]string{"send_lat", "-s", "65536", "-n", "50"}, 65536, 50, 1, false, false},
		// -e: completions from the channel instead of busy-polling.
		{[]string{"send_lat", "-e", "-s", "64", "-n", "200"}, 64, 200, 1, false, false},
		{[]string{"send_bw", "-e", "-s", "4096", "-n", "300"}, 4096, 300, 1, false, false},
		{[]string{"atomic_lat", "-e", "-n", "100"}, 8, 100, 1, true, true},
		{[]string{"atomic_lat", "-n", "200"}, 8, 200, 1, true, true},
		{[]string{"atomic_lat", "-n", "200", "-A", "CMP_AND_SWAP"}, 8, 200, 1, true, true},
		{[]string{"write_bw", "-q", "4", "-s", "4096", "-n", "100"}, 4096, 400, 1, false, false},
		{[]string{"send_bw", "-q", "4", "-s", "4096", "-n", "100"}, 4096, 400, 1, false, false},
		{[]string{"read_bw", "-q", "4", "-s", "4096", "-n", "100"}, 4096, 400, 1, false, false},
		{[]string{"atomic_bw", "-q", "4", "-n", "100"}, 8, 400, 1, false, true},
		{[]string{"write_bw", "-b", "-s", "4096", "-n", "100"}, 4096, 100, 1, false, false},
		{[]string{"send_bw", "-b", "-s", "4096", "-n", "100"}, 4096, 100, 1, false, false},
		{[]string{"read_bw", "-b", "-q", "2", "-s", "4096", "-n", "100"}, 4096, 200, 1, false, false},
		{[]string{"write_bw", "-a", "-n", "5"}, 0, 5, 23, false, false},
		{[]string{"send_lat", "-a", "-n", "5"}, 0, 5, 23, false, false},
		{[]string{"send_bw", "-c", "UD", "-s", "1024", "-n", "100"}, 1024, 100, 1, false, false},
		{[]string{"send_bw", "-c", "UD", "-a", "-n", "20"}, 0, 20, 12, false, false}, // to the MTU, 4096
		{[]string{"send_lat", "-c", "UD", "-s", "512", "-n", "100"}, 512, 100, 1, false, false},
		{[]string{"send_bw", "-c", "UC", "-s", "4096", "-n", "100"}, 4096, 100, 1, false, false},
		{[]string{"write_bw", "-c", "UC", "-s", "4096", "-n", "100"}, 4096, 100, 1, false, false},
		{[]string{"write_lat", "-c", "UC", "-s", "64", "-n", "100"}, 64, 100, 1, false, false},
		{[]string{"write_bw", "--report_gbits", "-s", "4096", "-n", "100"}, 4096, 100, 1, false, false},
		// Through rdma_cm (-R): the exchange over an RC connection, the QPs connected by the CM.
		{[]string{"write_bw", "-R", "-s", "4096", "-n", "100"}, 4096, 100, 1, false, false},
		{[]string{"read_bw", "-R", "-q", "2", "-s", "4096", "-n", "100"}, 4096, 200, 1, false, false},
		{[]string{"send_bw", "-R", "-b", "-s", "4096", "-n", "100"}, 4096, 100, 1, false, false},
		{[]string{"atomic_bw", "-R", "-n", "100"}, 8, 100, 1, false, true},
		{[]string{"write_lat", "-R", "-s", "64", "-n", "100"}, 64, 100, 1, false, false},
		{[]string{"read_lat", "-R", "-s", "64", "-n", "100"}, 64, 100, 1, true, false},
		{[]string{"send_lat", "-R", "-s", "64", "-n", "100"}, 64, 100, 1, false, false},
		// RDMA WRITE with immediate: the server counts the receives each consumes.
		{[]string{"write_bw", "--write_with_imm", "-s", "4096", "-n", "100"}, 4096, 100, 1, false, false},
		{[]string{"write_bw", "--write_with_imm", "-q", "2", "-s", "64", "-n", "100"}, 64, 200, 1, false, false},
		{[]string{"write_bw", "--write_with_imm", "-b", "-s", "4096", "-n", "100"}, 4096, 100, 1, false, false},
		{[]string{"write_bw", "--write_with_imm", "-a", "-n", "5"}, 0, 5, 23, false, false},
		{[]string{"write_bw", "--write_with_imm", "-c", "UC", "-s", "1024", "-n", "100"}, 1024, 100, 1, false, false},
		// Post lists (-l): chains of WRs per ibv_post_send, one completion per list.
		{[]string{"write_bw", "-l", "4", "-s", "4096", "-n", "200"}, 4096, 200, 1, false, false},
		{[]string{"send_bw", "-l", "4", "-q", "2", "-s", "64", "-n", "200"}, 64, 400, 1, false, false},
		{[]string{"read_bw", "-l", "8", "-Q", "2", "-s", "4096", "-n", "96"}, 4096, 96, 1, false, false},
		{[]string{"atomic_bw", "-l", "4", "-n", "200"}, 8, 200, 1, false, true},
		{[]string{"write_bw", "-l", "4", "-b", "-s", "4096", "-n", "100"}, 4096, 100, 1, false, false},
		{[]string{"send_bw", "-l", "2", "-c", "UD", "-s", "1024", "-n", "100"}, 1024, 100, 1, false, false},
		// One SRQ shared by the receiving side's QPs.
		{[]string{"send_bw", "--use-srq", "-q", "2", "-s", "64", "-n", "200"}, 64, 400, 1, false, false},
		{[]string{"send_bw", "--use-srq", "-q", "4", "-s", "4096", "-n", "200"}, 4096, 800, 1, false, false},
		{[]string{"send_bw", "--use-srq", "-b", "-q", "2", "-s", "4096", "-n", "100"}, 4096, 200, 1, false, false},
		// UD over an SRQ: one QP, whose -n datagrams find as many receives (UD has
		// no RNR; with more QPs than that, perftest's -r, at most -n, leaves
		// datagrams that come faster than the receives are reposted to be dropped).
		{[]string{"send_bw", "--use-srq", "-c", "UD", "-s", "1024", "-n", "100"}, 1024, 100, 1, false, false},
		{[]string{"send_lat", "--use-srq", "-s", "64", "-n", "100"}, 64, 100, 1, false, false},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			src, crc, sout, serr, cout, cerr := pair(t, tt.args, "60s")
			if src != 0 || crc != 0 {
				t.Fatalf("server exit %d:\n%s%s\nclient exit %d:\n%s%s", src, sout, serr, crc, cout, cerr)
			}
			lat := strings.HasSuffix(tt.args[0], "_lat")
			for _, side := range []struct{ who, out, errs string }{{"client", cout, cerr}, {"server", sout, serr}} {
				passive := side.who == "server" && tt.args[0] == "write_bw" && tt.rows > 1
				if !(tt.quietSrv && side.who == "server") {
					r := rows(side.out, lat)
					if passive && len(r) == 1 && r[0][0] == maxSize {
						continue // the passive server prints the client's last report
					}
					if len(r) != tt.rows {
						t.Errorf("%s: %d rows, want %d:\n%s", side.who, len(r), tt.rows, side.out)
					}
					for i, row := range r {
						size := tt.size
						if size == 0 {
							size = 2 << i
						}
						// -a's first rows and the 8-byte atomics move a few bytes at a
						// time: on a loaded machine their MB/sec rounds to 0.00, as
						// perftest's own (atomic_bw -q 4 -n 100 did at load 14).
						zeroOK := size < 1024 && !lat
						if int(row[0]) != size || int(row[1]) != tt.iter || !(row[2] > 0 || zeroOK) {
							t.Errorf("%s row %d: %v; want %d bytes, %d iterations, a positive figure", side.who, i, row, size, tt.iter)
						}
					}
				}
				for _, bad := range []string{"icrc_err", "malformed", "unknown_qp", "retry_exceeded", "tx_errors", "cq_overruns",
					"bad_pkey", "bad_qkey", "bad_source"} {
					if !strings.Contains(side.errs, " "+bad+"=0") {
						t.Errorf("%s counted %s: %s", side.who, bad, side.errs)
					}
				}
				if tt.atomics && !strings.Contains(side.errs, "executed exactly once") {
					t.Errorf("%s did not check the atomics:\n%s", side.who, side.errs)
				}
			}
			if strings.Contains(strings.Join(tt.args, " "), "gbits") && !strings.Contains(cout, "BW average[Gb/sec]") {
				t.Errorf("no Gb/sec header:\n%s", cout)
			}
			for flag, want := range map[string]string{"-l": " Post List       : ", "--use-srq": "Using SRQ      : ON"} {
				if slices.Contains(tt.args, flag) && (!strings.Contains(cout, want) || !strings.Contains(sout, want)) {
					t.Errorf("%s: the banners lack %q:\n%s\n%s", flag, want, sout, cout)
				}
			}
		})
	}
}

// TestBanner: the dashed table perftest prints before the addresses.
func TestBanner(t *testing.T) {
	_, crc, _, _, cout, cerr := pair(t, []string{"atomic_bw", "-n", "50", "-A", "CMP_AND_SWAP", "-x", "1"}, "30s")
	if crc != 0 {
		t.Fatalf("client exit %d: %s%s", crc, cout, cerr)
	}
	for _, want := range []string{
		resultLine + "\n                    Atomic CMP_AND_SWAP BW Test\n",
		" Dual-port       : OFF\t\tDevice         : 127.0.0.2\n",
		" Number of qps   : 1\t\tTransport type : IB\n",
		" Connection type : RC\t\tUsing SRQ      : OFF\n",
		" TX depth        : 50\n",
		" Link type       : Ethernet\n",
		" GID index       : 1\n",
		" Outstand reads  : ",
		" rdma_cm QPs\t : OFF\n Data ex. method : Ethernet\n" + resultLine + "\n",
		" local address: LID 0000 QPN 0x",
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:02\n",
		" GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:00:00:01\n",
	} {
		if !strings.Contains(cout, want) {
			t.Errorf("banner lacks %q:\n%s", want, cout)
		}
	}
}

// TestDuration: -D runs for its seconds, and both sides print a row of what the
// sample counted.
func TestDuration(t *testing.T) {
	for _, args := range [][]string{
		{"write_bw", "-D", "2", "-s", "4096"},
		{"send_bw", "-D", "2", "-s", "4096"},
		{"send_lat", "-D", "2", "-s", "64"},
		{"write_lat", "-D", "2", "-s", "64"},
		{"read_lat", "-D", "2", "-s", "64"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			start := time.Now()
			src, crc, sout, serr, cout, cerr := pair(t, args, "30s")
			if src != 0 || crc != 0 {
				t.Fatalf("server exit %d:\n%s%s\nclient exit %d:\n%s%s", src, sout, serr, crc, cout, cerr)
			}
			if d := time.Since(start); d < 2*time.Second {
				t.Errorf("a 2 s run took %v", d)
			}
			lat := strings.HasSuffix(args[0], "_lat")
			if r := rows(cout, lat); len(r) != 1 || !(r[0][1] > 0) || !(r[0][2] > 0) {
				t.Errorf("client rows %v:\n%s", r, cout)
			}
			if lat && !strings.Contains(cout, latDurHeader) {
				t.Errorf("no duration header:\n%s", cout)
			}
		})
	}
}

// TestRunInfinitely: the client prints a row every -D seconds until its
// --timeout ends the run, which is not an error.
func TestRunInfinitely(t *testing.T) {
	// Two rows take 2 s from the first message; --timeout counts from the
	// client's start, so the other 3 s are the setup's margin on a loaded host.
	_, crc, _, _, cout, cerr := pair(t, []string{"write_bw", "--run_infinitely", "-D", "1", "-s", "4096"}, "5s")
	if crc != 0 {
		t.Fatalf("client exit %d:\n%s%s", crc, cout, cerr)
	}
	if r := rows(cout, false); len(r) < 2 || !(r[0][2] > 0) {
		t.Errorf("rows %v:\n%s", r, cout)
	}
}

// TestClientNoServer fails, and says why, when nothing listens.
func TestClientNoServer(t *testing.T) {
	var out, errs bytes.Buffer
	rc := run([]string{"write_bw", "-d", "127.0.0.2", "-p", strconv.Itoa(freeTCPPort(t)), "--roce-port",
		strconv.Itoa(freeUDPPort(t)), "--timeout", "5s", "127.0.0.1"}, &out, &errs)
	if rc == 0 || !strings.Contains(errs.String(), "couldn't connect") {
		t.Errorf("exit %d, stderr %q; want 1 and couldn't connect", rc, errs.String())
	}
}

// TestServerTimeout ends a server nobody connects to with --timeout.
func TestServerTimeout(t *testing.T) {
	var out, errs bytes.Buffer
	const timeout = 300 * time.Millisecond
	start := time.Now()
	rc := run([]string{"send_bw", "-d", "127.0.0.1", "-p", strconv.Itoa(freeTCPPort(t)), "--roce-port",
		strconv.Itoa(freeUDPPort(t)), "--timeout", timeout.String()}, &out, &errs)
	// The margin over --timeout is the device's opening and a loaded host's
	// scheduling; a server that ignored --timeout would wait forever.
	if took := time.Since(start); rc == 0 || !strings.Contains(errs.String(), "no client") || took > timeout+10*time.Second {
		t.Errorf("exit %d after %v, stderr %q; want 1 with no client within --timeout %v (+10 s)", rc, took, errs.String(), timeout)
	}
}

// TestNoDevice: without -d each side binds the address of its TCP connection.
func TestNoDevice(t *testing.T) {
	tcp, udp := strconv.Itoa(freeTCPPort(t)), strconv.Itoa(freeUDPPort(t))
	common := []string{"-p", tcp, "--roce-port", udp, "--timeout", "30s", "--linger", "50ms", "-n", "20", "-s", "64"}
	var srvOut, srvErr bytes.Buffer
	srvRC := make(chan int, 1)
	go func() { srvRC <- run(append([]string{"send_bw"}, common...), &srvOut, &srvErr) }()
	var out, errs bytes.Buffer
	var rc int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out.Reset()
		errs.Reset()
		// The route to 127.0.0.3 leaves from 127.0.0.1; the server binds 127.0.0.3.
		rc = run(append([]string{"send_bw", "127.0.0.3"}, common...), &out, &errs)
		if rc == 0 || !strings.Contains(errs.String(), "couldn't connect") || time.Now().After(deadline) {
			break
		}
	}
	if src := <-srvRC; rc != 0 || src != 0 {
		t.Fatalf("client exit %d: %s%s\nserver exit %d: %s%s", rc, out.String(), errs.String(), src, srvOut.String(), srvErr.String())
	}
	if !strings.Contains(srvOut.String(), "Device         : 127.0.0.3") {
		t.Errorf("server banner:\n%s", srvOut.String())
	}
}

// TestOldPeer refuses a peer older than 5.70, as perftest does.
func TestOldPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var v [oob.PerftestVersionLen]byte
		io.ReadFull(c, v[:])
		copy(v[:], "5.60\x00\x00")
		c.Write(v[:])
		io.Copy(io.Discard, c)
	}()
	var out, errs bytes.Buffer
	rc := run([]string{"write_bw", "-d", "127.0.0.2", "-p", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), "--roce-port",
		strconv.Itoa(freeUDPPort(t)), "--timeout", "5s", "127.0.0.1"}, &out, &errs)
	if rc == 0 || !strings.Contains(errs.String(), "older than 5.70") {
		t.Errorf("exit %d, stderr %q; want 1 and a version error", rc, errs.String())
	}
}

// TestSendLatLoss: send_lat with a TX depth of 1 over a lossy link. When an
// ACK is lost, the peer's next message comes before this side's send has
// completed; as perftest, each side waits for its send's completion before it
// answers again, so the one-WR send queue is never over-posted.
func TestSendLatLoss(t *testing.T) {
	args := []string{"send_lat", "-s", "64", "-n", "200", "--loss", "0.05", "--seed", "5"}
	src, crc, sout, serr, cout, cerr := pair(t, args, "60s")
	if src != 0 || crc != 0 {
		t.Fatalf("server exit %d:\n%s%s\nclient exit %d:\n%s%s", src, sout, serr, crc, cout, cerr)
	}
	for _, side := range []struct{ who, out, errs string }{{"client", cout, cerr}, {"server", sout, serr}} {
		if r := rows(side.out, true); len(r) != 1 || int(r[0][1]) != 200 {
			t.Errorf("%s: rows %v, want one of 200 iterations:\n%s", side.who, r, side.out)
		}
		if strings.Contains(side.errs, " retransmits=0 ") {
			t.Errorf("%s: no retransmission, so the loss was not exercised: %s", side.who, side.errs)
		}
	}
}
