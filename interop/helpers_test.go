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

// record appends the row to $GOROCE_INTEROP_RESULTS, tab-separated.
func (r *result) record(t *testing.T) {
	path := os.Getenv("GOROCE_INTEROP_RESULTS")
	if path == "" {
		return
	}
	if t.Failed() {
		r.verdict = "FAIL"
	}
	resultsMu.Lock()
	defer resultsMu.Unlock()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Logf("results: %v", err)
		return
	}
	defer f.Close()
	tool := "ibv_" + r.c.mode + "_pingpong"
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
	var ours []string
	for _, k := range []string{"sent_pkts", "rcvd_pkts", "retransmits", "out_of_seq", "dup_req", "naks_sent", "naks_rcvd"} {
		if v := r.oursStats[k]; v != 0 {
			ours = append(ours, fmt.Sprintf("%s=%d", k, v))
		}
	}
	sort.Strings(ours)
	usec := "-"
	if r.usec > 0 {
		usec = fmt.Sprintf("%.0f", r.usec)
	}
	fmt.Fprintf(f, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tool, r.dir, strings.ToUpper(r.c.mode), opts, r.verdict, usec,
		strings.TrimSpace(r.rxe.String()+" | goroce: "+strings.Join(ours, " ")))
}
