package interop

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/interop/labtest"
)

// TestRxeToRxe checks the lab itself: ibv_rc_pingpong between guests a and b with data
// validation, then rxe's counters on both sides. If this fails, no other interop result
// means anything.
func TestRxeToRxe(t *testing.T) {
	lab := labtest.Open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, b := lab.Guest(t, "a"), lab.Guest(t, "b")
	before := map[string]labtest.Counters{}
	for _, g := range []*labtest.Guest{a, b} {
		c, err := g.Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before[g.Name] = c
	}
	const iters, size = 50, 1024
	srv, err := a.Start(ctx, fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %d -n %d -s %d -c", a.GIDIndex, iters, size))
	if err != nil {
		t.Fatal(err)
	}
	cli := retryClient(ctx, t, b, fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %d -n %d -s %d -c %s", b.GIDIndex, iters, size, a.IP))
	sres, err := srv.Wait()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		who string
		res labtest.Result
	}{{"server a", sres}, {"client b", cli}} {
		if r.res.RC != 0 {
			t.Fatalf("%s: exit %d:\n%s", r.who, r.res.RC, r.res.Out)
		}
		s, err := labtest.ParseSummary(r.res.Out)
		if err != nil {
			t.Fatalf("%s: %v:\n%s", r.who, err, r.res.Out)
		}
		if s.Iters != iters || s.Bytes != 2*iters*size {
			t.Errorf("%s: summary %+v, want %d iters and %d bytes", r.who, s, iters, 2*iters*size)
		}
		t.Logf("%s: %.0f usec/iter", r.who, s.USecIter)
	}
	for _, g := range []*labtest.Guest{a, b} {
		c, err := g.Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d := c.Sub(before[g.Name])
		t.Logf("guest %s counters: %v", g.Name, d)
		if bad := d.Unexpected(); len(bad) > 0 {
			t.Errorf("guest %s: unexpected rxe counters %v", g.Name, bad)
		}
		// One message each way per iteration, 1024 B = one packet at MTU 1024.
		if d["rdma_recvs"] < iters || d["rcvd_pkts"] < iters {
			t.Errorf("guest %s: rdma_recvs=%d rcvd_pkts=%d, want >= %d", g.Name, d["rdma_recvs"], d["rcvd_pkts"], iters)
		}
	}
}

// retryClient runs a pingpong client in g, retrying while the server is not yet
// listening (the stock client exits 1 with "Couldn't connect"), for at most 10 s.
func retryClient(ctx context.Context, t *testing.T, g *labtest.Guest, cmd string) labtest.Result {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := g.Run(ctx, cmd)
		if err != nil {
			t.Fatal(err)
		}
		if r.RC == 0 || !containsConnectFailure(r.Out) || time.Now().After(deadline) {
			return r
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestGuestJobKill checks that killing a job ends it and its children: a stock
// pingpong server waiting for a client forever.
func TestGuestJobKill(t *testing.T) {
	lab := labtest.Open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g := lab.Guest(t, "b")
	j, err := g.Start(ctx, "ibv_rc_pingpong -d rxe0 -g 1 -p 18599")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now() // no pause: Kill must also work before the job reported its PID
	// Kill has its own bounds (the PID's report, the signal, the job's end:
	// 10 s each) and fails past them; a fixed 5 s here only measured how
	// loaded the TCG guest was.
	r, err := j.Kill()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Kill took %v", time.Since(start))
	if r.RC == 0 {
		t.Errorf("job survived: rc %d, output %q", r.RC, r.Out)
	}
	if r, err := g.Run(ctx, "ps | grep -c '[i]bv_rc_pingpong -d rxe0 -g 1 -p 18599'"); err != nil || strings.TrimSpace(r.Out) != "0" {
		t.Errorf("pingpong still running in the guest: %q %v", r.Out, err)
	}
}
