package interop

import (
	"context"
	"fmt"
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
)

func (d ptDirection) short() string {
	if d == ptOursToRxe {
		return "ours-to-rxe"
	}
	return "rxe-to-ours"
}

// ptCase is one perftest run, made in both directions.
type ptCase struct {
	test  string // write_bw, read_bw, send_bw, write_lat, read_lat, send_lat
	size  int
	iters int
}

func (c ptCase) name() string { return fmt.Sprintf("%s/s%d", c.test, c.size) }

// read reports whether the test moves its data with RDMA READ.
func (c ptCase) read() bool { return strings.HasPrefix(c.test, "read_") }

// lat reports whether c is a latency test.
func (c ptCase) lat() bool { return strings.HasSuffix(c.test, "_lat") }

// minRxePackets is how many packets from goroce rxe must count at least: the
// requests goroce sent (a READ request is one packet, a READ response one per
// MTU of 1024), or for a goroce server of a write/send bw test its ACKs, which it
// coalesces per receive batch.
func (c ptCase) minRxePackets(dir ptDirection) int {
	data := max(1, (c.size+1023)/1024)
	switch {
	case c.read() && dir == ptOursToRxe:
		return c.iters
	case c.read():
		return c.iters * data
	case c.lat() || dir == ptOursToRxe:
		return c.iters * data
	}
	return 1
}

// TestPerftest runs the stock perftest tools (ib_write_bw, ib_read_bw, ib_send_bw,
// ib_write_lat, ib_read_lat, ib_send_lat) in an rxe guest against cmd/roce-perftest on the host side of the lab
// bridge, in both directions, and checks both tools' result rows, goroce's counters
// and rxe's hw_counters after every run.
func TestPerftest(t *testing.T) {
	lab := labtest.Open(t)
	bin := toolBin(t, "GOROCE_PERFTEST", "cmd/roce-perftest")
	g := lab.Guest(t, "a")
	const n = 200
	var cases []ptCase
	for _, test := range []string{"write_bw", "read_bw", "send_bw"} {
		for _, s := range []int{64, 4096, 65536} {
			cases = append(cases, ptCase{test: test, size: s, iters: n})
		}
	}
	for _, test := range []string{"write_lat", "read_lat", "send_lat"} {
		for _, s := range []int{64, 65536} {
			cases = append(cases, ptCase{test: test, size: s, iters: n})
		}
	}
	for _, c := range cases {
		for _, dir := range []ptDirection{ptOursToRxe, ptRxeToOurs} {
			t.Run(c.name()+"/"+dir.short(), func(t *testing.T) { runPerftest(t, lab, g, bin, c, dir) })
		}
	}
}

// ptResult is one row of the results table (GOROCE_INTEROP_RESULTS).
type ptResult struct {
	c         ptCase
	dir       ptDirection
	verdict   string
	usec      float64
	rxe       labtest.Counters
	oursStats map[string]uint64
}

// record appends the row to $GOROCE_INTEROP_RESULTS in the columns the pingpong rows
// use; the usec/iter column is goroce's figure (per message for bw, t_avg for lat).
func (r *ptResult) record(t *testing.T) {
	ours := oursCounters(r.oursStats, "sent_pkts", "rcvd_pkts", "retransmits", "out_of_seq", "dup_req", "naks_sent", "naks_rcvd", "rx_queue_drops")
	appendResult(t, resultRow{tool: "ib_" + r.c.test, dir: string(r.dir), transport: "RC",
		opts: fmt.Sprintf("-s %d -n %d", r.c.size, r.c.iters), verdict: r.verdict, usec: r.usec,
		counters: r.rxe.String() + " | goroce: " + ours})
}

// ptRow is the figures of a perftest results row.
type ptRow struct {
	bytes, iters int
	value        float64 // BW average [MB/sec], or t_avg [usec]
	line         string
}

// parsePTRow finds the results row under perftest's "#bytes" header.
func parsePTRow(out string, lat bool) (ptRow, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "#bytes") {
			continue
		}
		for _, row := range lines[i+1:] {
			f := strings.Fields(row)
			if len(f) < 5 {
				continue
			}
			b, err1 := strconv.Atoi(f[0])
			n, err2 := strconv.Atoi(f[1])
			if err1 != nil || err2 != nil {
				continue
			}
			col := 3 // BW average
			if lat {
				col = 5 // t_avg
				if len(f) < 6 {
					return ptRow{}, fmt.Errorf("short latency row %q", row)
				}
			}
			v, err := strconv.ParseFloat(f[col], 64)
			if err != nil {
				return ptRow{}, fmt.Errorf("row %q: %v", row, err)
			}
			return ptRow{bytes: b, iters: n, value: v, line: strings.TrimSpace(row)}, nil
		}
	}
	return ptRow{}, fmt.Errorf("no results row")
}

// runPerftest makes one run and checks it.
func runPerftest(t *testing.T, lab *labtest.Lab, g *labtest.Guest, bin string, c ptCase, dir ptDirection) {
	res := ptResult{c: c, dir: dir, verdict: "FAIL"}
	defer func() { res.record(t) }()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	before, err := g.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer captureRun(t, lab, "perftest-"+c.name()+"-"+dir.short(), lab.HostIP)()

	stock := fmt.Sprintf("ib_%s -d rxe0 -x %d -s %d -n %d -F", c.test, g.GIDIndex, c.size, c.iters)
	ours := []string{c.test, "-d", lab.HostIP.String(), "-x", "1", "-s", strconv.Itoa(c.size), "-n", strconv.Itoa(c.iters),
		"-F", "-stats", "-timeout", "120s"}
	r := runPair(ctx, t, lab, g, bin, stock, ours, dir == ptOursToRxe)
	stockRes, oursRC, oursOut, oursErr := r.stock, r.oursRC, r.oursOut, r.oursErr

	if oursRC != 0 {
		t.Errorf("roce-perftest exit %d:\n%s%s", oursRC, oursOut, oursErr)
	}
	if stockRes.RC != 0 {
		t.Errorf("ib_%s exit %d:\n%s", c.test, stockRes.RC, stockRes.Out)
	}
	lat := c.lat()
	for _, side := range []struct {
		who, out string
		server   bool
	}{{"roce-perftest", oursOut, dir == ptRxeToOurs}, {"ib_" + c.test, stockRes.Out, dir == ptOursToRxe}} {
		if c.test == "read_lat" && side.server {
			continue // read_lat's server measures nothing and prints no row
		}
		row, err := parsePTRow(side.out, lat)
		if err != nil {
			t.Errorf("%s: %v:\n%s", side.who, err, side.out)
			continue
		}
		// The passive write/read server prints the client's report, so its row
		// also proves the report exchange.
		if row.bytes != c.size || row.iters != c.iters || !(row.value > 0) {
			t.Errorf("%s: row %+v; want %d bytes, %d iterations, a positive figure", side.who, row, c.size, c.iters)
		}
		if side.who == "roce-perftest" && row.value > 0 {
			res.usec = row.value
			if !lat {
				res.usec = float64(c.size) / (row.value * (1 << 20)) * 1e6
			}
		}
		t.Logf("%s: %s", side.who, row.line)
	}
	res.oursStats = checkOursStats(t, "roce-perftest", oursErr)
	after, err := g.Counters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	res.rxe = d
	if bad := d.Unexpected(); len(bad) > 0 {
		t.Errorf("rxe counters: %v (all: %v)", bad, d)
	}
	// Every request goroce sent must have reached rxe's transport: a packet with a
	// bad ICRC, P_Key or address is dropped silently and would be missing here.
	if want := c.minRxePackets(dir); d["rcvd_pkts"] < uint64(want) {
		t.Errorf("rxe rcvd_pkts=%d, want at least %d", d["rcvd_pkts"], want)
	}
	if !t.Failed() {
		res.verdict = "pass"
	}
	t.Logf("rxe: %v", d)
	t.Logf("goroce: %s", lastLine(oursErr))
}
