package interop

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/interop/labtest"
)

// TestPerftestRunInfinitely runs ib_send_bw --run_infinitely -D 1 against
// roce-perftest in both directions: both sides print a row a second until the
// run is ended from outside (goroce's client by --timeout, goroce's server by
// SIGINT, the stock tool killed), every row carries the size, and goroce prints
// rows with traffic every second. The guest busy-polls on one TCG vCPU, where
// the stock tool's print thread may get few turns: one row with traffic from it
// is enough, and when that tool fails to calibrate its clock its rows show
// bandwidth 0 with true iteration counts. -t 16 and 1 KiB messages keep rxe's
// queues from overflowing.
func TestPerftestRunInfinitely(t *testing.T) {
	lab := labtest.Open(t)
	bin := toolBin(t, "GOROCE_PERFTEST", "cmd/roce-perftest")
	g := lab.Guest(t, "a")
	c := ptCase{test: "send_bw", size: 1024, extra: []string{"--run_infinitely", "-D", "1", "-t", "16"}, timed: true}
	// The lane's own TCP port: the lanes run at once in one namespace.
	port := strconv.Itoa(lab.Port(pingpongPort))
	opts := fmt.Sprintf("-s %d -F -p %s %s", c.size, port, strings.Join(c.extra, " "))
	stock := fmt.Sprintf("ib_%s -d rxe0 -x %d %s", c.test, g.GIDIndex, opts)
	ours := append([]string{c.test, "-d", lab.HostIP.String(), "-x", "1", "--stats", "-s", strconv.Itoa(c.size), "-F", "-p", port}, c.extra...)
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
				job, err := g.Start(ctx, stock)
				if err != nil {
					t.Fatal(err)
				}
				r.oursRC, r.oursOut, r.oursErr = runOurs(ctx, lab, bin, append(ours, "--timeout", "5s", g.IP.String()), true)
				r.stock, _ = job.Kill()
			} else {
				r = runInfinitelyServer(ctx, t, lab, g, bin, ours, stock+" "+lab.HostIP.String())
			}
			if r.oursRC != 0 {
				t.Errorf("roce-perftest exit %d:\n%s%s", r.oursRC, r.oursOut, r.oursErr)
			}
			for _, side := range []struct {
				who, out string
				min      int
			}{{"roce-perftest", r.oursOut, 3}, {"ib_send_bw", r.stock.Out, 1}} {
				rows, err := parsePTRows(side.out, false)
				if err != nil {
					t.Errorf("%s: %v:\n%s", side.who, err, side.out)
					continue
				}
				positive := 0
				noClock := side.who == "ib_send_bw" && stockClockFailed(side.out)
				for _, row := range rows {
					if row.bytes != c.size {
						t.Errorf("%s: row %+v; want %d bytes", side.who, row, c.size)
					}
					if row.iters > 0 && (row.value > 0 || noClock) {
						positive++
						if side.who == "roce-perftest" && res.usec == 0 {
							res.usec = float64(c.size) / (row.value * (1 << 20)) * 1e6
						}
					}
					t.Logf("%s: %s", side.who, row.line)
				}
				if positive < side.min {
					t.Errorf("%s: %d rows with traffic, want at least %d:\n%s", side.who, positive, side.min, side.out)
				}
			}
			res.oursStats = checkOursStats(t, "roce-perftest", r.oursErr)
			d := rxeSince(ctx, t, g, before)
			res.rxe = d
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

// runInfinitelyServer runs our --run_infinitely server and the stock client
// against it (retried while our server does not listen yet), kills the client
// after 7 s, then ends our server with SIGINT.
func runInfinitelyServer(ctx context.Context, t *testing.T, lab *labtest.Lab, g *labtest.Guest, bin string, ours []string, stock string) pairRun {
	t.Helper()
	var r pairRun
	srv := lab.Command(ctx, bin, append(ours, "--timeout", "40s")...)
	var so, se bytes.Buffer
	srv.Stdout, srv.Stderr = &so, &se
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		job, err := g.Start(ctx, stock)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-job.Done():
			r.stock, _ = job.Wait()
		case <-time.After(7 * time.Second):
			r.stock, _ = job.Kill()
		case werr := <-done:
			r.stock, _ = job.Kill()
			r.oursRC, r.oursOut, r.oursErr = exitCode(werr), so.String(), se.String()
			return r
		}
		if !containsConnectFailure(r.stock.Out) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	srv.Process.Signal(os.Interrupt)
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
