package interop

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/interop/labtest"
	"github.com/goroce/goroce/interop/verbsprobe"
	"github.com/goroce/goroce/roce"
)

// verbs-probe (interop/verbs-probe, built into every guest image against that
// generation's libibverbs) issues the verbs no stock tool does. Every row runs three
// ways: between the two rxe guests of the lane first, so that a row failing against
// goroce is goroce's fault and not the row's; then goroce's client (the requester)
// against an rxe server (the responder), and an rxe client against goroce's server.
// goroce's side is verbsprobe.Tests, run by this test binary re-executed in the lab's
// namespace ($GOROCE_PROBEPEER, see init below).

// probeRow is one verbs-probe test of the suite.
type probeRow struct {
	test string
	gens labtest.Gens // the kernel generations whose rxe has the verbs; empty: every one
	// allow names rxe error counters the row moves on purpose.
	allow []string
}

// probeRows are the rows. FLUSH and ATOMIC_WRITE came with kernel 6.2 (and rdma-core 45).
var probeRows = []probeRow{
	{test: "atomic"},
	{test: "send_inv"},
	{test: "send_inv_mr"},
	{test: "bind_mw1"},
	{test: "bind_mw2"},
	{test: "flush", gens: labtest.Gens{labtest.Gen612}},
	{test: "atomic_write", gens: labtest.Gens{labtest.Gen612}},
}

// probePort is verbs-probe's TCP port (Lab.Port moves it per lane).
const probePort = 18600

func init() {
	if test := os.Getenv("GOROCE_PROBEPEER"); test != "" {
		if err := runProbePeer(test); err != nil {
			fmt.Printf("verbs-probe %s: FAIL: %v\n", test, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// TestVerbsProbe runs every verbs-probe row of the lane's generation: rxe to rxe, then
// goroce to rxe both ways. Each checks both sides' PASS lines (which check the values
// read back and the completion statuses, see verbs-probe.c) and rxe's counters.
func TestVerbsProbe(t *testing.T) {
	lab := labtest.Open(t)
	for _, r := range probeRows {
		t.Run(r.test, func(t *testing.T) {
			lab.RunsOn(t, r.gens)
			t.Run("rxe-to-rxe", func(t *testing.T) { runProbe(t, lab, r, "rxe", "rxe") })
			t.Run("ours-to-rxe", func(t *testing.T) { runProbe(t, lab, r, "goroce", "rxe") })
			t.Run("rxe-to-ours", func(t *testing.T) { runProbe(t, lab, r, "rxe", "goroce") })
		})
	}
}

// runProbe runs one row with client (the requester) and server (the responder) each
// "rxe" or "goroce".
func runProbe(t *testing.T, lab *labtest.Lab, r probeRow, client, server string) {
	row := resultRow{tool: "verbs-probe " + r.test, dir: client + " client -> " + server + " server", transport: "RC"}
	defer func() { appendResult(t, row) }()
	goroce := client == "goroce" || server == "goroce"
	if tt := verbsprobe.Tests[r.test]; goroce && (client == "goroce" && tt.Client == nil || server == "goroce" && tt.Server == nil) {
		row.verdict = "waiting: goroce has no " + tt.Needs
		t.Skipf("goroce has no %s yet", tt.Needs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, b := lab.Guest(t, "a"), lab.Guest(t, "b")
	guests := []*labtest.Guest{a}
	if !goroce {
		guests = append(guests, b)
	} else {
		defer captureRun(t, lab, "probe-"+r.test+"-"+client+"-to-"+server, lab.HostIP)()
	}
	before := map[string]labtest.Counters{}
	for _, g := range guests {
		c, err := g.Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before[g.Name] = c
	}
	port := lab.Port(probePort)
	probe := func(g *labtest.Guest, peer string) string {
		cmd := fmt.Sprintf("verbs-probe -t %s -g %d -p %d", r.test, g.GIDIndex, port)
		if peer != "" {
			cmd += " " + peer
		}
		return cmd + " 2>&1"
	}
	var srvOut, cliOut string
	var srvRC, cliRC int
	start := time.Now()
	switch {
	case !goroce: // a serves, b connects
		job, err := a.Start(ctx, probe(a, ""))
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.Run(ctx, probe(b, a.IP.String()))
		if err != nil {
			t.Fatal(err)
		}
		cliOut, cliRC = res.Out, res.RC
		sres, err := waitJob(job, 20*time.Second)
		if err != nil {
			t.Errorf("server: %v", err)
		}
		srvOut, srvRC = sres.Out, sres.RC
	case server == "goroce":
		peer := startGoPeer(ctx, t, lab, "listening", probePeerEnv(lab, r.test, "server", port, netip.Addr{})...)
		res, err := a.Run(ctx, probe(a, lab.HostIP.String()))
		if err != nil {
			t.Fatal(err)
		}
		cliOut, cliRC = res.Out, res.RC
		var killed bool
		if srvRC, killed = peer.wait(20 * time.Second); killed {
			t.Errorf("goroce server still running 20 s after the client ended; killed")
		}
		srvOut = peer.out.String() + peer.errs.String()
	default: // goroce client, rxe server
		job, err := a.Start(ctx, probe(a, ""))
		if err != nil {
			t.Fatal(err)
		}
		peer := startGoPeer(ctx, t, lab, "", probePeerEnv(lab, r.test, "client", port, a.IP)...)
		var killed bool
		if cliRC, killed = peer.wait(60 * time.Second); killed {
			t.Errorf("goroce client still running after 60 s; killed")
		}
		cliOut = peer.out.String() + peer.errs.String()
		sres, err := waitJob(job, 20*time.Second)
		if err != nil {
			t.Errorf("server: %v", err)
		}
		srvOut, srvRC = sres.Out, sres.RC
	}
	t.Logf("both sides done in %v", time.Since(start))
	for _, side := range []struct {
		who, out string
		rc       int
	}{{client + " client", cliOut, cliRC}, {server + " server", srvOut, srvRC}} {
		pass := "verbs-probe " + r.test + ": PASS"
		if side.rc != 0 || !strings.Contains(side.out, pass) {
			t.Errorf("%s: exit %d, want 0 and %q:\n%s", side.who, side.rc, pass, tail(side.out, 15))
		} else {
			t.Logf("%s: %s", side.who, passLine(side.out, pass))
		}
	}
	var counters []string
	for _, g := range guests {
		d := rxeSince(ctx, t, g, before[g.Name], r.allow...)
		if d["rcvd_pkts"] == 0 {
			t.Errorf("guest %s: rxe received nothing", g.Name)
		}
		counters = append(counters, g.Name+": "+d.String())
	}
	if goroce {
		ours := "goroce: -"
		for _, l := range strings.Split(cliOut+"\n"+srvOut, "\n") {
			if strings.HasPrefix(l, "goroce: ") {
				ours = l
			}
		}
		counters = append(counters, ours)
	}
	row.counters = strings.Join(counters, " | ")
	if !t.Failed() {
		row.verdict = "pass"
	}
}

// passLine returns the line of out that holds pass.
func passLine(out, pass string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, pass) {
			return l
		}
	}
	return ""
}

// probePeerEnv is the environment of a goroce peer of test in role; server is the rxe
// server a client connects to.
func probePeerEnv(lab *labtest.Lab, test, role string, port int, server netip.Addr) []string {
	env := []string{"GOROCE_PROBEPEER=" + test, "GOROCE_PROBEPEER_ROLE=" + role,
		"GOROCE_PROBEPEER_ADDR=" + lab.HostIP.String(), "GOROCE_PROBEPEER_PORT=" + strconv.Itoa(port)}
	if server.IsValid() {
		env = append(env, "GOROCE_PROBEPEER_SERVER="+server.String())
	}
	return env
}

// runProbePeer is goroce's side of a verbs-probe row, in the lab's namespace: a device
// on the host address, then verbsprobe.Run over a TCP connection it accepts (server) or
// makes (client). It prints verbs-probe's PASS line and the engine's counters.
func runProbePeer(test string) error {
	addr, err := netip.ParseAddr(os.Getenv("GOROCE_PROBEPEER_ADDR"))
	if err != nil {
		return err
	}
	port := os.Getenv("GOROCE_PROBEPEER_PORT")
	client := os.Getenv("GOROCE_PROBEPEER_ROLE") == "client"
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	dev, err := roce.Open(addr)
	if err != nil {
		return err
	}
	defer dev.Close()
	var c net.Conn
	if client {
		server := net.JoinHostPort(os.Getenv("GOROCE_PROBEPEER_SERVER"), port)
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if c, err = net.Dial("tcp", server); err == nil || time.Now().After(deadline) {
				break
			}
		}
	} else {
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort(addr.String(), port)); err != nil {
			return err
		}
		fmt.Printf("verbs-probe %s: listening on %s\n", test, ln.Addr())
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		c, err = ln.Accept()
		stop()
		ln.Close()
	}
	if err != nil {
		return err
	}
	defer c.Close()
	sum, err := verbsprobe.Run(ctx, dev, test, client, c)
	if err != nil {
		return err
	}
	fmt.Printf("verbs-probe %s: PASS %s\n", test, sum)
	return checkPeerStats(dev.Stats())
}
