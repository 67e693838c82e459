package interop

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/goroce/goroce/interop/labtest"
)

// containsConnectFailure reports whether a stock pingpong client failed only because
// nothing listened on the TCP port yet.
func containsConnectFailure(out string) bool {
	return strings.Contains(out, "Couldn't connect to")
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
	appendResult(t, resultRow{tool: "ibv_" + r.c.mode + "_pingpong", dir: string(r.dir), transport: strings.ToUpper(r.c.mode),
		opts: opts, verdict: r.verdict, usec: r.usec, counters: r.rxe.String() + " | goroce: " + ours})
}
