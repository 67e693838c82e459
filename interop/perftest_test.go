package interop

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/interop/labtest"
)

// ptDirection says which side of a perftest run is goroce.
type ptDirection string

const (
	ptOursToRxe ptDirection = "roce-perftest client -> rxe server"
	ptRxeToOurs ptDirection = "rxe client -> roce-perftest server"
	ptRxeToRxe  ptDirection = "rxe client -> rxe server"
)

func (d ptDirection) short() string {
	switch d {
	case ptOursToRxe:
		return "ours-to-rxe"
	case ptRxeToOurs:
		return "rxe-to-ours"
	}
	return "rxe-to-rxe"
}

// ptCase is one perftest run, made in both directions.
type ptCase struct {
	test  string // write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat, send_lat, atomic_lat
	size  int
	iters int
	extra []string // options both sides get (-q 4, -b, -a, -D 2, -c UD, -A ...)
	rows  int      // results rows of the side that runs the test (-a: one per size); 0 is 1
	qps   int      // QPs (-q); 0 is 1
	timed bool     // -D: the iterations are what the sample counted
	gens  labtest.Gens
	// needs is what roce-perftest's usage must mention for goroce to run the case (an
	// option); until it does, the case runs rxe to rxe only and reports that it waits.
	needs string
	// rxeToRxe adds a run between the lane's two guests first, which proves the row.
	rxeToRxe bool
}

func (c ptCase) name() string {
	n := fmt.Sprintf("%s/s%d", c.test, c.size)
	if len(c.extra) > 0 {
		n += "/" + strings.ReplaceAll(strings.Join(c.extra, ""), "-", "")
	}
	return n
}

// read reports whether the test moves its data with RDMA READ.
func (c ptCase) read() bool { return strings.HasPrefix(c.test, "read_") }

// lat reports whether c is a latency test.
func (c ptCase) lat() bool { return strings.HasSuffix(c.test, "_lat") }

// atomic reports whether c is an atomic test.
func (c ptCase) atomic() bool { return strings.HasPrefix(c.test, "atomic_") }

// has reports whether c has the option opt.
func (c ptCase) has(opt string) bool { return slices.Contains(c.extra, opt) }

// silent reports whether goroce sends nothing in c: it only receives, over UC or
// UD, which have no acknowledgements.
func (c ptCase) silent(dir ptDirection) bool {
	return dir == ptRxeToOurs && !c.lat() && !c.has("-b") && (c.has("UC") || c.has("UD"))
}

// minRxePackets is how many packets from goroce rxe must count at least: the
// requests goroce sent (a READ request is one packet, a READ response one per
// MTU of 1024), or for a goroce server of a write/send bw test its ACKs, which it
// coalesces per receive batch. Runs by time or over all sizes only need traffic.
func (c ptCase) minRxePackets(dir ptDirection) int {
	switch {
	case c.silent(dir):
		return 0
	case c.timed || c.has("-a"):
		return 1
	}
	n := c.iters * max(c.qps, 1)
	data := max(1, (c.size+1023)/1024)
	switch {
	case c.read() && dir == ptOursToRxe:
		return n
	case c.read():
		return n * data
	case c.lat() || dir == ptOursToRxe || c.has("-b"):
		return n * data
	}
	return 1
}

// TestPerftest runs the stock perftest tools (ib_write_bw, ib_read_bw, ib_send_bw,
// ib_atomic_bw, and the _lat ones) in an rxe guest against cmd/roce-perftest on the
// host side of the lab bridge, in both directions, over RC, UC and UD, with several
// QPs, both ways at once, all sizes, by duration, through rdma_cm (-R), with post
// lists (-l) and with an SRQ (--use-srq), and checks both tools' result
// rows, goroce's counters, that every atomic ran exactly once, and rxe's
// hw_counters after every run.
func TestPerftest(t *testing.T) {
	lab := labtest.Open(t)
	bin := toolBin(t, "GOROCE_PERFTEST", "cmd/roce-perftest")
	g := lab.Guest(t, "a")
	const n = 200
	var cases []ptCase
	// 4096 bytes, the page size, runs below with an option in every row (-q 4, -b,
	// -l 4, -c UC, -R, --use-srq, -D): a plain row would repeat them.
	for _, test := range []string{"write_bw", "read_bw", "send_bw"} {
		for _, s := range []int{64, 65536} {
			cases = append(cases, ptCase{test: test, size: s, iters: n})
		}
	}
	for _, test := range []string{"write_lat", "read_lat", "send_lat"} {
		for _, s := range []int{64, 65536} {
			cases = append(cases, ptCase{test: test, size: s, iters: n})
		}
	}
	cases = append(cases,
		ptCase{test: "atomic_bw", size: 8, iters: n},
		ptCase{test: "atomic_bw", size: 8, iters: n, extra: []string{"-A", "CMP_AND_SWAP"}},
		ptCase{test: "atomic_lat", size: 8, iters: 100},
		ptCase{test: "atomic_lat", size: 8, iters: 100, extra: []string{"-A", "CMP_AND_SWAP"}},
		ptCase{test: "atomic_bw", size: 8, iters: 50, qps: 4, extra: []string{"-q", "4"}},
		ptCase{test: "write_bw", size: 4096, iters: 50, qps: 4, extra: []string{"-q", "4"}},
		ptCase{test: "send_bw", size: 4096, iters: 50, qps: 4, extra: []string{"-q", "4"}},
		ptCase{test: "write_bw", size: 4096, iters: 100, extra: []string{"-b"}},
		ptCase{test: "send_bw", size: 4096, iters: 100, extra: []string{"-b"}},
		ptCase{test: "read_bw", size: 4096, iters: 100, extra: []string{"-b", "--report_gbits"}},
		ptCase{test: "write_bw", size: 0, iters: 5, rows: 23, extra: []string{"-a"}},
		ptCase{test: "send_lat", size: 0, iters: 5, rows: 10, extra: []string{"-a", "-c", "UD"}},
		ptCase{test: "write_bw", size: 4096, extra: []string{"-D", "2"}, timed: true},
		ptCase{test: "send_lat", size: 64, extra: []string{"-D", "2"}, timed: true},
		ptCase{test: "send_bw", size: 1024, iters: 100, extra: []string{"-c", "UD"}},
		ptCase{test: "send_bw", size: 4096, iters: 100, extra: []string{"-c", "UC"}},
		ptCase{test: "write_bw", size: 4096, iters: 100, extra: []string{"-c", "UC"}},
		ptCase{test: "write_lat", size: 64, iters: 100, extra: []string{"-c", "UC"}},
		ptCase{test: "send_lat", size: 64, iters: 100, extra: []string{"-c", "UC"}},
		ptCase{test: "write_bw", size: 4096, iters: 100, qps: 2, extra: []string{"-R", "-q", "2"}},
		ptCase{test: "send_bw", size: 4096, iters: 100, extra: []string{"-R"}},
		ptCase{test: "read_lat", size: 64, iters: 100, extra: []string{"-R"}},
		// Post lists: chains of -l WRs per ibv_post_send, one completion per list;
		// an SRQ that the receiving side's QPs share (-r/-q receives per QP region).
		ptCase{test: "write_bw", size: 4096, iters: n, extra: []string{"-l", "4"}},
		ptCase{test: "send_bw", size: 65536, iters: 100, qps: 2, extra: []string{"--use-srq", "-q", "2"}},
		ptCase{test: "send_bw", size: 4096, iters: 100, qps: 4, extra: []string{"--use-srq", "-q", "4"}},
		// perftest 4.5 (Debian 12) has no --write_with_imm.
		ptCase{test: "write_bw", size: 4096, iters: n, extra: []string{"--write_with_imm"}, gens: labtest.Gens{labtest.Gen612},
			needs: "write_with_imm", rxeToRxe: true},
	)
	for i := range cases {
		if cases[i].atomic() {
			cases[i].rxeToRxe = true // new to the suite with the 6.12 lane: proven between the guests too
		}
	}
	usage := toolUsage(t, bin)
	for _, c := range cases {
		t.Run(c.name(), func(t *testing.T) {
			lab.RunsOn(t, c.gens)
			dirs := []ptDirection{ptOursToRxe, ptRxeToOurs}
			if c.rxeToRxe {
				dirs = append([]ptDirection{ptRxeToRxe}, dirs...)
			}
			for _, dir := range dirs {
				t.Run(dir.short(), func(t *testing.T) {
					if dir != ptRxeToRxe && c.needs != "" && !strings.Contains(usage, c.needs) {
						appendResult(t, resultRow{tool: "ib_" + c.test, dir: string(dir), transport: "RC", opts: c.opts(),
							verdict: "waiting: roce-perftest has no " + c.needs})
						t.Skipf("roce-perftest has no %s yet", c.needs)
					}
					runPerftest(t, lab, g, rocePerftest(bin), c, dir)
				})
			}
		})
	}
}

// toolUsage returns what a goroce tool prints for -h: its tests and options.
func toolUsage(t *testing.T, bin string) string {
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	if len(out) == 0 {
		t.Fatalf("%s -h printed nothing", bin)
	}
	return string(out)
}

// events reports whether the stock tool runs with -e (see pingpongPort). perftest
// refuses it for WRITE, and the runs with other options keep perftest's polling,
// but the SRQ's: a server polling its SRQ's QPs on the guest's one vCPU held off
// rxe's ACKs of 64 KiB messages past our retransmission timer (half the packets
// sent twice, 14 s for the row; with -e, none).
func (c ptCase) events() bool {
	return !strings.HasPrefix(c.test, "write_") && (len(c.extra) == 0 || c.atomic() && c.has("-A") && len(c.extra) == 2 ||
		c.has("--use-srq"))
}

// opts is the options of the results table's row.
func (c ptCase) opts() string {
	var o []string
	if c.size > 0 {
		o = append(o, fmt.Sprintf("-s %d", c.size))
	}
	if c.iters > 0 {
		o = append(o, fmt.Sprintf("-n %d", c.iters))
	}
	return strings.Join(append(o, c.extra...), " ")
}

// ptResult is one row of the results table (GOROCE_INTEROP_RESULTS).
type ptResult struct {
	tool      string // the tool column; "" is ib_TEST
	c         ptCase
	dir       ptDirection
	verdict   string
	usec      float64
	rxe       labtest.Counters
	oursStats map[string]uint64
	rerun     bool // the first run ended in rxe's event stall (watchStall)
}

// record appends the row to $GOROCE_INTEROP_RESULTS in the columns the pingpong rows
// use; the usec/iter column is goroce's figure (per message for bw, t_avg for lat).
func (r *ptResult) record(t *testing.T) {
	counters := "guest a: " + r.rxe.String()
	if r.dir != ptRxeToRxe {
		counters = r.rxe.String() + " | goroce: " + oursCounters(r.oursStats, "sent_pkts", "rcvd_pkts", "retransmits",
			"out_of_seq", "dup_req", "naks_sent", "naks_rcvd", "rx_queue_drops")
	}
	transport := "RC"
	for i, o := range r.c.extra {
		if o == "-c" && i+1 < len(r.c.extra) {
			transport = r.c.extra[i+1]
		}
	}
	tool := "ib_" + r.c.test
	if r.tool != "" {
		tool = r.tool
	}
	appendResult(t, resultRow{tool: tool, dir: string(r.dir), transport: transport,
		opts: r.c.opts(), verdict: r.verdict, usec: r.usec, counters: counters})
}

// ptRow is the figures of a perftest results row.
type ptRow struct {
	bytes, iters int
	value        float64 // BW average [MB/sec], or t_avg [usec]
	line         string
}

// parsePTRows returns the results rows under perftest's "#bytes" header.
// stockClockFailed reports whether perftest could not calibrate its cycle
// counter (get_cpu_mhz: "Correlation coefficient r^2 < 0.9", common on a
// loaded TCG guest). It then prints bandwidth figures of 0 from a clock of
// 0 MHz, while the iteration counts stay true: a row's traffic is judged by
// its iterations.
func stockClockFailed(out string) bool {
	return strings.Contains(out, "Correlation coefficient r^2")
}

// clockWarning is get_cpu_mhz's complaint, written to stderr; in a combined
// output it can land inside the table, after a row's last figure and before
// the row's newline.
var clockWarning = regexp.MustCompile(`Correlation coefficient r\^2: \S+ < 0\.9\n`)

func parsePTRows(out string, lat bool) ([]ptRow, error) {
	lines := strings.Split(clockWarning.ReplaceAllString(out, ""), "\n")
	for i, l := range lines {
		if !strings.Contains(l, "#bytes") {
			continue
		}
		var rows []ptRow
		for _, row := range lines[i+1:] {
			f := strings.Fields(row)
			if len(f) < 4 {
				break
			}
			b, err1 := strconv.Atoi(f[0])
			n, err2 := strconv.Atoi(f[1])
			if err1 != nil || err2 != nil {
				break
			}
			col := 3 // BW average
			switch {
			case lat && len(f) == 4:
				col = 2 // a -D latency row: t_avg, then tps
			case lat:
				col = 5 // t_avg
				if len(f) < 6 {
					return nil, fmt.Errorf("short latency row %q", row)
				}
			}
			v, err := strconv.ParseFloat(f[col], 64)
			if err != nil {
				return nil, fmt.Errorf("row %q: %v", row, err)
			}
			rows = append(rows, ptRow{bytes: b, iters: n, value: v, line: strings.TrimSpace(row)})
		}
		if len(rows) == 0 {
			return nil, fmt.Errorf("no results row")
		}
		return rows, nil
	}
	return nil, fmt.Errorf("no results row")
}

// ptOurs is goroce's side of a perftest row: roce-perftest, or the stock
// perftest on goroce's libibverbs (cabi_test.go).
type ptOurs struct {
	who, tool string // in messages, and the results table's tool column ("" is ib_TEST)
	// command is the program and arguments for case c on our address with
	// perftest's options opts (the stock side's, without its -e).
	command func(c ptCase, addr string, opts []string) (string, []string)
	// atomicsChecked says the program checks that every atomic ran once
	// (roce-perftest's "executed exactly once").
	atomicsChecked bool
}

// rocePerftest is cmd/roce-perftest built at bin.
func rocePerftest(bin string) ptOurs {
	return ptOurs{who: "roce-perftest", atomicsChecked: true, command: func(c ptCase, addr string, opts []string) (string, []string) {
		return bin, append([]string{c.test, "-d", addr, "-x", "1", "--stats", "--timeout", "120s"}, opts...)
	}}
}

// runPerftest makes one run and checks it.
func runPerftest(t *testing.T, lab *labtest.Lab, g *labtest.Guest, o ptOurs, c ptCase, dir ptDirection) {
	res := ptResult{c: c, dir: dir, verdict: "FAIL", tool: o.tool}
	defer func() { res.record(t) }()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	before, err := g.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	port := lab.Port(pingpongPort)
	opts := c.options(port)
	var sides []ptSide
	var oursErr string
	if dir == ptRxeToRxe {
		b := lab.Guest(t, "b")
		job, err := g.Start(ctx, c.stockCommand(g, port))
		if err != nil {
			t.Fatal(err)
		}
		cli := retryStockClient(ctx, t, b, c.stockCommand(b, port)+" "+g.IP.String(), nil)
		srv, err := waitJob(job, 20*time.Second)
		if err != nil {
			t.Errorf("stock server: %v", err)
		}
		sides = []ptSide{{"ib_" + c.test + " server (guest a)", srv.Out, srv.RC, true},
			{"ib_" + c.test + " client (guest b)", cli.Out, cli.RC, false}}
	} else {
		sender := lab.HostIP
		if c.silent(dir) {
			sender = netip.Addr{} // nothing of ours to look for in the capture
		}
		defer captureRun(t, lab, "perftest-"+c.name()+"-"+dir.short(), sender)()
		bin, ours := o.command(c, lab.HostIP.String(), opts)
		r := runPairWatched(ctx, t, lab, g, bin, "ib_"+c.test, c.events(), c.stockCommand(g, port), ours, dir == ptOursToRxe, &before, &res.rerun)
		sides = r.ptSides(o.who, "ib_"+c.test, dir == ptRxeToOurs)
		oursErr = r.oursErr
	}
	res.usec = checkPTSides(t, c, o, dir, sides)
	if dir != ptRxeToRxe {
		if o.atomicsChecked && c.atomic() && !strings.Contains(oursErr, "executed exactly once") {
			t.Errorf("%s did not check the atomics:\n%s", o.who, oursErr)
		}
		res.oursStats = checkOursStats(t, o.who, oursErr)
	}
	d := rxeSinceOurs(ctx, t, g, before, res.oursStats) // nil between the guests
	res.rxe = d
	// Every request goroce sent must have reached rxe's transport: a packet with a
	// bad ICRC, P_Key or address is dropped silently and would be missing here.
	// Between the guests, a (the server) counts the client's requests.
	want := c.minRxePackets(dir)
	if dir == ptRxeToRxe {
		want = c.minRxePackets(ptOursToRxe)
	}
	if d["rcvd_pkts"] < uint64(want) {
		t.Errorf("rxe rcvd_pkts=%d, want at least %d", d["rcvd_pkts"], want)
	}
	if !t.Failed() {
		res.verdict = "pass"
		if res.rerun {
			res.verdict = rerunVerdict
		}
	}
	t.Logf("rxe: %v", d)
	if dir != ptRxeToRxe {
		t.Logf("goroce: %s", lastLine(oursErr))
	}
}

// options is what both sides of c get on TCP port: perftest's command line
// but the device, the GID index and the stock side's -e.
func (c ptCase) options(port int) []string {
	var opts []string
	if c.size > 0 && !c.atomic() {
		opts = append(opts, "-s", strconv.Itoa(c.size))
	}
	if c.iters > 0 {
		opts = append(opts, "-n", strconv.Itoa(c.iters))
	}
	return append(append(opts, "-F", "-p", strconv.Itoa(port)), c.extra...)
}

// stockCommand is the stock ib_TEST command line of c in g (no server
// address), with -e where c.events().
func (c ptCase) stockCommand(g *labtest.Guest, port int) string {
	opts := c.options(port)
	if c.events() {
		opts = append([]string{"-e"}, opts...)
	}
	return fmt.Sprintf("ib_%s -d rxe0 -x %d %s", c.test, g.GIDIndex, strings.Join(opts, " "))
}

// ptSide is what one side of a perftest run printed.
type ptSide struct {
	who, out string
	rc       int
	server   bool
}

// ptSides are the two sides of a run between ours (who) and the stock tool;
// oursServer says which served. Our stderr is added to our output when we
// failed.
func (r pairRun) ptSides(who, stock string, oursServer bool) []ptSide {
	ours := ptSide{who, r.oursOut, r.oursRC, oursServer}
	if r.oursRC != 0 {
		ours.out += r.oursErr
	}
	return []ptSide{ours, {stock, r.stock.Out, r.stock.RC, !oursServer}}
}

// checkPTSides checks both sides of a perftest run of c: each exits 0 and
// prints the results rows it must (bytes, iterations, a figure). It returns
// the usec/iter figure of the results table: goroce's, or between the guests
// the client's.
func checkPTSides(t *testing.T, c ptCase, o ptOurs, dir ptDirection, sides []ptSide) float64 {
	t.Helper()
	var usec float64
	for _, side := range sides {
		if side.rc != 0 {
			t.Errorf("%s exit %d:\n%s", side.who, side.rc, side.out)
		}
	}
	lat := c.lat()
	for _, side := range sides {
		if (c.test == "read_lat" || c.test == "atomic_lat") && side.server {
			continue // the read and atomic latency servers measure nothing and print no row
		}
		rows, err := parsePTRows(side.out, lat)
		if err != nil {
			t.Errorf("%s: %v:\n%s", side.who, err, side.out)
			continue
		}
		// The passive write/read/atomic server prints the client's (last) report,
		// so its row also proves the report exchange. With --write_with_imm the
		// server counts receives and prints its own, as send_bw's.
		passive := side.server && !c.has("-b") && !c.has("--write_with_imm") && !strings.HasPrefix(c.test, "send_") && !lat
		want := max(c.rows, 1)
		if passive {
			want = 1
		}
		if len(rows) != want {
			t.Errorf("%s: %d rows, want %d:\n%s", side.who, len(rows), want, side.out)
			continue
		}
		for i, row := range rows {
			size, iters := c.size, c.iters*max(c.qps, 1)
			if c.rows > 1 {
				size = 2 << i
				if passive {
					size = 2 << (c.rows - 1)
				}
			}
			if c.timed {
				iters = row.iters // what the sample counted
			}
			// A few bytes at a time, -a's first rows can round to 0.00 MB/sec. A
			// figure the stock tool measured (its own row, or the report goroce's
			// passive server prints) may be 0.00 too: perftest under TCG sometimes
			// prints that for a whole run.
			stockFigure := side.who != o.who || o.tool != "" || passive
			if row.bytes != size || row.iters != iters || row.iters < 1 || !(row.value > 0 || c.rows > 1 && size < 1024 || stockFigure) {
				t.Errorf("%s: row %+v; want %d bytes, %d iterations, a positive figure", side.who, row, size, iters)
			}
			if (side.who == o.who || dir == ptRxeToRxe && !side.server) && row.value > 0 && i == 0 {
				usec = row.value
				if !lat {
					usec = float64(size) / (row.value * (1 << 20)) * 1e6
				}
			}
			t.Logf("%s: %s", side.who, row.line)
		}
	}
	return usec
}

// TestParsePTRowsClockWarning: get_cpu_mhz's stderr complaint landing inside
// the table (as a stock ib_write_bw -a printed it under TCG) costs no row.
func TestParsePTRowsClockWarning(t *testing.T) {
	out := " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n" +
		" 262144     5                1.99               1.99   \t\t     0.000008Correlation coefficient r^2: 0.632029 < 0.9\n" +
		"\n" +
		" 524288     5                0.00               0.00   \t\t     0.000000\n" +
		" 1048576    5                2.93               2.93   \t\t     0.000003\n" +
		"---------------------------------------------------------------------------------------\n"
	rows, err := parsePTRows(out, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, r := range rows {
		got = append(got, r.bytes)
	}
	if want := []int{262144, 524288, 1048576}; !slices.Equal(got, want) {
		t.Errorf("rows %v, want %v", got, want)
	}
}
