package interop

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/interop/labtest"
)

// TestPerftestRunInfinitely runs ib_send_bw --run_infinitely -D 1 against
// roce-perftest in both directions: both sides print a row every second until
// the run is ended from outside (goroce's --timeout; the stock tool is killed),
// and every row must carry the size and, while traffic flows, a positive figure.
func TestPerftestRunInfinitely(t *testing.T) {
	lab := labtest.Open(t)
	bin := toolBin(t, "GOROCE_PERFTEST", "cmd/roce-perftest")
	g := lab.Guest(t, "a")
	c := ptCase{test: "send_bw", size: 4096, extra: []string{"--run_infinitely", "-D", "1"}, timed: true}
	opts := fmt.Sprintf("-s %d -F %s", c.size, strings.Join(c.extra, " "))
	stock := fmt.Sprintf("ib_%s -d rxe0 -x %d %s", c.test, g.GIDIndex, opts)
	ours := append([]string{c.test, "-d", lab.HostIP.String(), "-x", "1", "--stats", "-s", "4096", "-F"}, c.extra...)
	for _, dir := range []ptDirection{ptOursToRxe, ptRxeToOurs} {
		t.Run(c.name()+"/"+dir.short(), func(t *testing.T) {
			res := ptResult{c: c, dir: dir, verdict: "FAIL"}
			defer func() { res.record(t) }()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			before, err := g.Counters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer captureRun(t, lab, "perftest-"+c.name()+"-"+dir.short(), lab.HostIP)()
			var r pairRun
			if dir == ptOursToRxe {
				// The stock server runs until killed; ours ends after 6 s.
				job, err := g.Start(ctx, stock)
				if err != nil {
					t.Fatal(err)
				}
				r.oursRC, r.oursOut, r.oursErr = runOurs(ctx, lab, bin, append(ours, "--timeout", "6s", g.IP.String()), true)
				r.stock, _ = job.Kill()
			} else {
				// Ours serves for 12 s; the stock client is stopped after 5.
				r = runPair(ctx, t, lab, g, bin, "timeout -s INT 5 "+stock, append(ours, "--timeout", "12s"), false)
			}
			if r.oursRC != 0 {
				t.Errorf("roce-perftest exit %d:\n%s%s", r.oursRC, r.oursOut, r.oursErr)
			}
			for _, side := range []struct{ who, out string }{{"roce-perftest", r.oursOut}, {"ib_send_bw", r.stock.Out}} {
				rows, err := parsePTRows(side.out, false)
				if err != nil {
					t.Errorf("%s: %v:\n%s", side.who, err, side.out)
					continue
				}
				positive := 0
				for _, row := range rows {
					if row.bytes != c.size {
						t.Errorf("%s: row %+v; want %d bytes", side.who, row, c.size)
					}
					if row.value > 0 && row.iters > 0 {
						positive++
						if side.who == "roce-perftest" && res.usec == 0 {
							res.usec = float64(c.size) / (row.value * (1 << 20)) * 1e6
						}
					}
					t.Logf("%s: %s", side.who, row.line)
				}
				if positive < 2 {
					t.Errorf("%s: %d rows with traffic, want at least 2:\n%s", side.who, positive, side.out)
				}
			}
			res.oursStats = checkOursStats(t, "roce-perftest", r.oursErr)
			after, err := g.Counters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d := after.Sub(before)
			res.rxe = d
			if bad := d.Unexpected(); len(bad) > 0 {
				t.Errorf("rxe counters: %v (all: %v)", bad, d)
			}
			if d["rcvd_pkts"] == 0 {
				t.Errorf("rxe received nothing from goroce")
			}
			if !t.Failed() {
				res.verdict = "pass"
			}
			t.Logf("rxe: %v", d)
			t.Logf("goroce: %s", lastLine(r.oursErr))
		})
	}
}
