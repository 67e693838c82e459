package interop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/interop/labtest"
	"github.com/goroce/goroce/roce"
)

// cmtimeConns is cmtime's -c in TestCmtime: one peer opening this many RC
// connections at once, as an MPI job or a storage client starting up does.
const cmtimeConns = 500

// cmtimePort is cmtime's rdma_cm port (cmtime.c: "7471"); rdma-core 56's cmtime
// also runs its out-of-band sync over TCP on it.
const cmtimePort = 7471

// TestCmtime runs rdmacm-utils' cmtime client in guest a, cmtimeConns connections
// at once from one peer, first against the kernel's CM (cmtime's server in guest
// b), then against a goroce listener with the cm package's defaults. Every
// connection must be made and torn down, goroce's CM must refuse and drop none,
// and it must connect at no less than half the kernel's rate in the same run.
// rdma-core 44's cmtime connects once; 56's connects once as a warm-up, then
// cmtimeConns times with QPs and cmtimeConns times without, synchronising each
// step over TCP, and the rate is that of the QP run.
func TestCmtime(t *testing.T) {
	lab := labtest.Open(t)
	a, b := lab.Guest(t, "a"), lab.Guest(t, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	probe, err := a.Run(ctx, "cmtime -h 2>&1")
	if err != nil {
		t.Fatal(err)
	}
	oob := strings.Contains(probe.Out, "-S") // 56 has the socket baseline, and its TCP sync
	client := fmt.Sprintf("cmtime -s %%s -c %d 2>&1", cmtimeConns)
	row := func(dir string) resultRow {
		return resultRow{tool: "cmtime", dir: dir, transport: "RC (rdma_cm)", opts: fmt.Sprintf("-c %d", cmtimeConns)}
	}

	var kernel []time.Duration
	t.Run("rxe-to-rxe", func(t *testing.T) {
		r := row("rxe cmtime client (guest a) -> rxe cmtime server (guest b)")
		defer func() { appendResult(t, r) }()
		chk := startRpingCheck(ctx, t, b)
		srv, err := b.Start(ctx, fmt.Sprintf("cmtime -c %d 2>&1", cmtimeConns))
		if err != nil {
			t.Fatal(err)
		}
		if err := waitCmtimeServer(ctx, b, oob); err != nil {
			srv.Kill()
			t.Fatal(err)
		}
		res, err := a.Run(ctx, fmt.Sprintf(client, b.IP))
		var sres labtest.Result
		var serr error
		if oob {
			sres, serr = waitJob(srv, 30*time.Second)
		} else {
			srv.Kill() // rdma-core 44's server serves until it is killed
		}
		if err != nil {
			t.Fatal(err)
		}
		if kernel, err = checkCmtime(t, res); err != nil {
			t.Fatal(err)
		}
		if oob && (serr != nil || sres.RC != 0) {
			t.Errorf("cmtime server: %v exit %d:\n%s", serr, sres.RC, tail(sres.Out, 15))
		}
		d := chk.finishCounters(ctx, t)
		r.usec = float64(kernel[0].Microseconds()) / cmtimeConns
		r.counters = "guest b: " + d.String()
		t.Logf("kernel CM: %d connections in %s", cmtimeConns, rates(kernel))
	})
	t.Run("rxe-to-ours", func(t *testing.T) {
		r := row("rxe cmtime client (guest a) -> goroce CM listener")
		defer func() { appendResult(t, r) }()
		defer rpingCapture(t, lab, t.Name())()
		chk := startRpingCheck(ctx, t, a)
		env := []string{"GOROCE_CMPEER=cmtime", "GOROCE_CMPEER_ADDR=" + lab.HostIP.String(),
			"GOROCE_CMPEER_COUNT=" + strconv.Itoa(cmtimeConns), "GOROCE_CMPEER_SIZE=1"}
		if oob {
			env = append(env, "GOROCE_CMPEER_OOB=1")
		}
		peer := startGoPeer(ctx, t, lab, cmPeerReady, env...)
		res, err := a.Run(ctx, fmt.Sprintf(client, lab.HostIP))
		if err != nil {
			t.Fatal(err)
		}
		ours, cerr := checkCmtime(t, res)
		rc, killed := peer.wait(30 * time.Second)
		out := peer.out.String()
		if rc != 0 || killed {
			t.Errorf("goroce cmtime peer: exit %d (killed %v):\n%s%s", rc, killed, tail(out, 10), peer.errs.String())
		}
		t.Logf("goroce peer:\n%s", strings.TrimSpace(out))
		if cerr != nil {
			t.Fatal(cerr)
		}
		d := chk.finishCounters(ctx, t)
		r.usec = float64(ours[0].Microseconds()) / cmtimeConns
		r.counters = "guest a: " + d.String() + " | " + goroceLine(out) + " " + peerLine(out, "cm: ")
		t.Logf("goroce CM: %d connections in %s; kernel CM: %s", cmtimeConns, rates(ours), rates(kernel))
		if len(kernel) > 0 && len(ours) != len(kernel) {
			t.Fatalf("%d runs against goroce, %d against the kernel", len(ours), len(kernel))
		}
		for i := range kernel {
			if ours[i] > 2*kernel[i] {
				t.Errorf("run %d: goroce's CM took %v for %d connections, more than twice the kernel's %v", i, ours[i], cmtimeConns, kernel[i])
			}
		}
	})
}

// waitCmtimeServer waits, at most 15 s, until the cmtime server in g listens: its
// rdma_cm id (rdma resource), and with oob its TCP socket (7471 is 0x1D2F).
func waitCmtimeServer(ctx context.Context, g *labtest.Guest, oob bool) error {
	check := fmt.Sprintf("rdma resource show cm_id | grep -q 'LISTEN.*:%d'", cmtimePort)
	if oob {
		check += fmt.Sprintf(" && grep -q ':%04X 00000000:0000 0A' /proc/net/tcp", cmtimePort)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := g.Run(ctx, check)
		if err != nil || r.RC == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cmtime server in guest %s not listening after 15 s", g.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cmtimeConnect matches the connect step of cmtime's report: rdma-core 44's
// "connect      :   total ms ..." and 56's "cm connect     avg/iter total(us) ...".
var cmtimeConnect = regexp.MustCompile(`(?m)^(connect\s*:\s*([\d.]+)|cm connect\s+\d+\s+(\d+))`)

// checkCmtime checks a cmtime client's run (exit 0, no connection event in error)
// and returns how long the connect step of each of its runs of cmtimeConns
// connections took: 44's one, 56's with QPs and without.
func checkCmtime(t *testing.T, res labtest.Result) ([]time.Duration, error) {
	t.Helper()
	t.Logf("cmtime client:\n%s", res.Out)
	if res.RC != 0 || strings.Contains(res.Out, "event: ") || strings.Contains(res.Out, "ERROR") {
		return nil, fmt.Errorf("cmtime client exit %d:\n%s", res.RC, tail(res.Out, 20))
	}
	var runs []time.Duration
	for _, m := range cmtimeConnect.FindAllStringSubmatch(res.Out, -1) {
		if m[2] != "" {
			ms, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				return nil, err
			}
			runs = append(runs, time.Duration(ms*float64(time.Millisecond)))
			continue
		}
		us, err := strconv.ParseUint(m[3], 10, 64)
		if err != nil {
			return nil, err
		}
		runs = append(runs, time.Duration(us)*time.Microsecond)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("no connect step in cmtime's report:\n%s", tail(res.Out, 20))
	}
	return runs, nil
}

// rates formats runs of cmtimeConns connections as connections per second.
func rates(runs []time.Duration) string {
	var s []string
	for _, d := range runs {
		s = append(s, fmt.Sprintf("%v (%.0f/s)", d.Round(time.Millisecond), cmtimeConns/d.Seconds()))
	}
	return strings.Join(s, ", ")
}

// cmtimeServer is cmtime's server on goroce: a listener with rdma_cm's default
// backlog (cmtime's rdma_listen(id, 0)) in a CM with the cm package's defaults,
// and for every request an RC QP moved to RTS and rdma_accept, each on its own
// goroutine as cmtime's work queue does; the client's DREQ ends a connection.
// rdma-core 44's client connects count times; 56's (oob) connects once, then count
// times twice, and each step of a run waits for its TCP sync byte, which the server
// echoes once the step is done on its side: reset, every connection established,
// every one disconnected.
func cmtimeServer(ctx context.Context, dev *roce.Device, mg *cm.Manager, count int, oob bool) error {
	addr := netip.AddrPortFrom(dev.Addr(), cmtimePort)
	l, err := mg.Listen(addr, 0)
	if err != nil {
		return err
	}
	defer l.Close()
	var sync net.Conn
	if oob {
		ln, err := net.Listen("tcp", addr.String())
		if err != nil {
			return err
		}
		defer ln.Close()
		fmt.Println(cmPeerReady)
		if sync, err = acceptCtx(ctx, ln); err != nil {
			return err
		}
		defer sync.Close()
	} else {
		fmt.Println(cmPeerReady)
	}
	runs := []int{count}
	if oob {
		runs = []int{1, count, count}
	}
	total := 0
	for _, n := range runs {
		total += n
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	defer pd.Close()
	cq, err := dev.CreateCQ(2 * count)
	if err != nil {
		return err
	}
	defer cq.Close()
	established, ended := make(chan error, total), make(chan struct{}, total)
	go func() {
		for range total {
			r, err := l.GetRequest(ctx)
			if err != nil {
				established <- err
				return
			}
			go func() {
				err := acceptCmtime(ctx, dev, pd, cq, r, ended)
				established <- err
			}()
		}
	}()
	var rd *bufio.Reader
	var w io.Writer // nil without the sync connection
	if sync != nil {
		rd, w = bufio.NewReader(sync), sync
	}
	for i, n := range runs {
		start := time.Now()
		if err := echoSync(rd, w); err != nil {
			return fmt.Errorf("run %d: reset: %w", i, err)
		}
		for range n {
			select {
			case err := <-established:
				if err != nil {
					return fmt.Errorf("run %d: %w", i, err)
				}
			case <-ctx.Done():
				return fmt.Errorf("run %d: established: %w", i, ctx.Err())
			}
		}
		up := time.Since(start)
		if err := echoSync(rd, w); err != nil {
			return fmt.Errorf("run %d: connected: %w", i, err)
		}
		for range n {
			select {
			case <-ended:
			case <-ctx.Done():
				return fmt.Errorf("run %d: disconnected: %w", i, ctx.Err())
			}
		}
		if err := echoSync(rd, w); err != nil {
			return fmt.Errorf("run %d: disconnected: %w", i, err)
		}
		fmt.Printf("run %d: %d connections established in %v, all disconnected after %v\n", i, n, up, time.Since(start))
	}
	s := mg.Stats()
	fmt.Printf("cm: refused=%d discarded=%d reps=%d retransmits=%d duplicates=%d pending=%d\n",
		s.Refused, s.Discarded, s.REPs, s.Retransmits, s.Duplicates, mg.Pending())
	if s.Refused+s.Discarded != 0 {
		return errors.New("the CM refused or dropped connection requests")
	}
	return nil
}

// acceptCmtime is cmtime's req_handler for r (rdma_create_qp, the QP to RTS,
// rdma_accept); ended receives the connection's end (the client's DREQ).
func acceptCmtime(ctx context.Context, dev *roce.Device, pd *roce.PD, cq *roce.CQ, r *cm.ConnRequest, ended chan<- struct{}) error {
	qp, err := pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: roce.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err == nil {
		if err = qp.Init(&roce.ConnectAttr{}); err != nil {
			qp.Close()
		}
	}
	if err != nil {
		r.Reject(nil)
		return err
	}
	ready := func(q cm.QPParams) error {
		a := gsi.ConnectAttr(q, dev.GIDIndex(), 0)
		return qp.Connect(&a)
	}
	c, err := r.Accept(ctx, cm.ConnParam{QPN: qp.QPN(), StartingPSN: cm.RandomPSN(), ResponderResources: 1,
		InitiatorDepth: 1, Ready: ready})
	if err != nil {
		qp.Close()
		return fmt.Errorf("accept %v: %w", r.Remote, err)
	}
	go func() {
		select {
		case <-c.Done():
		case <-ctx.Done():
		}
		qp.Close()
		ended <- struct{}{}
	}()
	return nil
}

// echoSync is oob_recvsend: one byte from the client, sent back. Without a sync
// connection (rdma-core 44) it does nothing.
func echoSync(rd *bufio.Reader, w io.Writer) error {
	if w == nil {
		return nil
	}
	b, err := rd.ReadByte()
	if err != nil {
		return err
	}
	_, err = w.Write([]byte{b})
	return err
}

// acceptCtx is ln.Accept, given up when ctx ends.
func acceptCtx(ctx context.Context, ln net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	return ln.Accept()
}

// peerLine returns the line of a peer's output that starts with prefix, or "".
func peerLine(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
}

// TestCmtimePeerLoopback runs the goroce cmtime server of TestCmtime on loopback
// devices (127.0.0.1 and .2) against a goroce client that does what each
// rdma-core's cmtime client does: all its connections at once, then all its
// disconnects, with 56's TCP sync around every step or without it (44).
func TestCmtimePeerLoopback(t *testing.T) {
	const conns = 50
	for _, oob := range []bool{false, true} {
		t.Run(fmt.Sprintf("oob=%v", oob), func(t *testing.T) {
			srvDev, srvCM, cliCM := loopbackCMs(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- cmtimeServer(ctx, srvDev, srvCM, conns, oob) }()
			dst := netip.AddrPortFrom(srvDev.Addr(), cmtimePort)
			var sync net.Conn
			runs := []int{conns}
			if oob {
				var err error
				for sync == nil && ctx.Err() == nil {
					if sync, err = net.Dial("tcp", dst.String()); err != nil {
						time.Sleep(10 * time.Millisecond) // the server is not listening yet
					}
				}
				defer sync.Close()
				runs = []int{1, conns, conns}
			}
			step := func(b byte) {
				t.Helper()
				if sync == nil {
					return
				}
				got := []byte{0}
				if _, err := sync.Write([]byte{b}); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(sync, got); err != nil || got[0] != b {
					t.Fatalf("sync %d: got %d, %v", b, got[0], err)
				}
			}
			for _, n := range runs {
				step(0)
				cs := make([]*cm.Conn, n)
				errs := make(chan error, n)
				for i := range n {
					go func() {
						var err error
						cs[i], err = dialRetry(ctx, cliCM, dst)
						errs <- err
					}()
				}
				for range n {
					if err := <-errs; err != nil {
						t.Fatal(err)
					}
				}
				step(12)
				for _, c := range cs {
					go func() { errs <- c.Disconnect(ctx) }()
				}
				for range n {
					if err := <-errs; err != nil {
						t.Fatal(err)
					}
				}
				step(14)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// dialRetry dials dst until its listener is up (a REQ before it is rejected with
// "invalid service ID").
func dialRetry(ctx context.Context, mg *cm.Manager, dst netip.AddrPort) (*cm.Conn, error) {
	for {
		c, err := mg.Dial(ctx, netip.AddrPort{}, dst, cm.ConnParam{QPN: 0x100})
		var rej *cm.RejectError
		if !errors.As(err, &rej) || rej.Reason != cm.RejInvalidServiceID {
			return c, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// loopbackCMs opens two goroce devices with CMs (defaults) on 127.0.0.2 (the
// server) and 127.0.0.1, on a free UDP port, or skips.
func loopbackCMs(t *testing.T) (srvDev *roce.Device, srvCM, cliCM *cm.Manager) {
	t.Helper()
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Skip(err)
	}
	port := uint16(u.LocalAddr().(*net.UDPAddr).Port)
	u.Close()
	open := func(a string) (*roce.Device, *cm.Manager) {
		d, mads, err := gsi.Open(netip.MustParseAddr(a), port)
		if err != nil {
			t.Skipf("loopback device %s: %v", a, err)
		}
		mg := cm.NewManager(mads, cm.ManagerConfig{})
		t.Cleanup(func() { mg.Close(); d.Close() })
		return d, mg
	}
	srvDev, srvCM = open("127.0.0.2")
	_, cliCM = open("127.0.0.1")
	return
}
