package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/tool/devapi"
	"github.com/goroce/goroce/interop/labtest"
)

// fleetUID is the fleet's second uid, and its gid: nobody and nogroup, which
// every Debian host has. roced's socket belongs to that group (mode 0660), so
// its processes may attach.
const fleetUID = 65534

// fleetPortOffset puts the fleet's TCP ports over pingpongPort, one per pair
// (9 of them), below the next lane's (Lab.Port adds 100 per lane).
const fleetPortOffset = 40

// Bounds of TestSharedFleetRxe's waits, each for an event measured on this
// 2-core host at load 6-16 (another lab and other tests beside it; the
// figures are in interop/README.md's fleet section).
const (
	// fleetListenBound: the stock servers, four starting at once in each
	// one-vCPU TCG guest, all listening 5-12 s after their start: 5x.
	fleetListenBound = 60 * time.Second
	// fleetMidRunBound: from the clients' start until all nine have a QP in
	// RTS, 2-5 s (roced's /debug/devices answers about once a second): 12x.
	fleetMidRunBound = 60 * time.Second
	// fleetRetryBound: the killed client's stock peer retransmits its
	// window after rxe's timeout (perftest's 14: 67 ms; 0.1-1 s apart under
	// TCG), and roced counts it within its 100 ms drain: the first
	// fleetRetransmits were counted within 1 s of the kill: 30x.
	fleetRetryBound = 30 * time.Second
	// fleetDrainBound: roced reads a free block's socket empty every 100 ms:
	// 100x.
	fleetDrainBound = 10 * time.Second
	// fleetRetransmits is how many datagrams for the dead block roced must
	// have counted before the stock peer is stopped: its retransmissions
	// (a window of 30-40 SENDs each time, in the runs so far).
	fleetRetransmits = 20
	// fleetRunBound bounds the whole fleet phase: the listen and mid-run
	// waits, the runs (roce-pingpong's own --timeout is 60 s; they took
	// 8-30 s) and the kill's waits.
	fleetRunBound = 4 * time.Minute
)

// fleetRun is one attached client of the fleet and its stock server.
type fleetRun struct {
	name  string
	guest string // the stock server's guest
	uid   uint32 // 0 or fleetUID
	pp    *ppCase
	pt    *ptCase // when pp is nil
	port  int

	job   *labtest.Job
	r     pairRun
	ended chan struct{} // closed once both sides ended
}

// stock is the run's stock server command line in g.
func (f *fleetRun) stock(g *labtest.Guest) string {
	if f.pp != nil {
		return f.pp.stockCommand(g.GIDIndex, f.port)
	}
	return f.pt.stockCommand(g, f.port)
}

// ours is the attached client's program and arguments (the server last).
func (f *fleetRun) ours(lab *labtest.Lab, g *labtest.Guest, pp, pt string) (string, []string) {
	var bin string
	var args []string
	if f.pp != nil {
		bin, args = rocePingpong(pp).command(*f.pp, lab.HostIP.String(), "1", f.port)
	} else {
		bin, args = rocePerftest(pt).command(*f.pt, lab.HostIP.String(), f.pt.options(f.port))
	}
	return asUID(f.uid, bin, append(args, g.IP.String()))
}

// check checks both sides' results as the single-run rows do, and records
// the row.
func (f *fleetRun) check(t *testing.T) {
	row := resultRow{dir: fmt.Sprintf("attached %s client (uid %d) -> rxe server", f.who(), f.uid), verdict: "FAIL"}
	defer func() { appendResult(t, row) }()
	var stats map[string]uint64
	if f.pp != nil {
		row.tool, row.transport = "ibv_"+f.pp.mode+"_pingpong", strings.ToUpper(f.pp.mode)
		row.opts = fmt.Sprintf("-s %d -n %d", f.pp.size, f.pp.iters)
		if f.pp.qps > 0 {
			row.opts += fmt.Sprintf(" -q %d", f.pp.qps)
		}
		row.usec, stats = checkPingpongRun(t, f.who(), *f.pp, f.r)
	} else {
		row.tool, row.transport, row.opts = "ib_"+f.pt.test, "RC", f.pt.opts()
		o := rocePerftest("")
		row.usec = checkPTSides(t, *f.pt, o, ptOursToRxe, f.r.ptSides(o.who, row.tool, false))
		stats = checkOursStats(t, o.who, f.r.oursErr)
	}
	row.opts += " (8 clients at once beside roced)"
	row.counters = "goroce: " + oursCounters(stats, "sent_pkts", "rcvd_pkts", "retransmits", "out_of_seq", "dup_req", "naks_sent", "naks_rcvd")
	if !t.Failed() {
		row.verdict = "pass"
	}
	t.Logf("goroce: %s", lastLine(f.r.oursErr))
}

func (f *fleetRun) who() string {
	if f.pp != nil {
		return "roce-pingpong"
	}
	return "roce-perftest"
}

// asUID runs bin as uid (gid the same) through setpriv, which ip netns exec
// starts in place: the process's pid is the tool's own. uid 0 runs bin as is.
func asUID(uid uint32, bin string, args []string) (string, []string) {
	if uid == 0 {
		return bin, args
	}
	id := strconv.Itoa(int(uid))
	return "setpriv", append([]string{"--reuid=" + id, "--regid=" + id, "--clear-groups", "--", bin}, args...)
}

// TestSharedFleetRxe is issue 22's fleet run against the stock tools: roced
// owns the lane's host address; eight goroce clients attach to it at once,
// half of them as uid 65534, each running roce-pingpong rc, srq or ud or
// roce-perftest write_bw against its own stock server in a guest; a ninth,
// an attached roce-perftest send_bw server fed by a stock ib_send_bw client,
// is killed with SIGKILL while it and every client not yet done run (on a
// loaded host all eight; a quiet one finishes some first). Every run passes
// its data checks; the processes hold disjoint QPN blocks and each client's QPNs are in
// its own; the stock client's retransmissions to the dead QPN are counted by
// roced as steered to no owner (roce_steer_drops_total), none delivered
// elsewhere (roce_steer_misrouted_total 0, no client counting an unknown QP
// beyond an srq run's own over-send, see checkPingpongRun);
// and the killed client started again gets a fresh block and passes.
func TestSharedFleetRxe(t *testing.T) {
	lab := labtest.Open(t)
	ga, gb := lab.Guest(t, "a"), lab.Guest(t, "b")
	dir := sharedDir(t)
	pp := copyTool(t, toolBin(t, "GOROCE_PINGPONG", "cmd/roce-pingpong"), dir)
	pt := copyTool(t, toolBin(t, "GOROCE_PERFTEST", "cmd/roce-perftest"), dir)
	// Sizes and counts: each run took 8-30 s with both guests busy (TCG)
	// on a host at load 6-16, at least 3x the 2-5 s the nine take to be in
	// RTS at once, so there every client is mid-run at the kill; and inside
	// roce-pingpong's 60 s --timeout on a host twice as loaded. On a quiet
	// host a run can end in a second, before the kill: the kill does not wait
	// for it. The guest that feeds the victim gets the lighter half.
	fleet := []*fleetRun{
		{name: "rc-1024", guest: "a", pp: &ppCase{mode: "rc", size: 1024, iters: 500}},
		{name: "write_bw-4096", guest: "a", pt: &ptCase{test: "write_bw", size: 4096, iters: 9000}},
		{name: "srq-1024", guest: "a", pp: &ppCase{mode: "srq", size: 1024, iters: 1300, qps: 4}},
		{name: "ud-1000", guest: "a", pp: &ppCase{mode: "ud", size: 1000, iters: 500}},
		{name: "rc-64", guest: "b", pp: &ppCase{mode: "rc", size: 64, iters: 450}},
		{name: "srq-4096", guest: "b", pp: &ppCase{mode: "srq", size: 4096, iters: 600, qps: 2}},
		{name: "ud-64", guest: "b", pp: &ppCase{mode: "ud", size: 64, iters: 450}},
		{name: "rc-4096", guest: "b", pp: &ppCase{mode: "rc", size: 4096, iters: 400}},
	}
	for i, f := range fleet {
		f.port, f.ended = lab.Port(pingpongPort)+fleetPortOffset+i, make(chan struct{})
		if i%2 == 1 {
			f.uid = fleetUID
		}
	}
	// The victim: an attached send_bw server that a stock client keeps busy
	// (-n far beyond the run), so rxe has requests in flight to its QP when
	// it dies and retransmits them to a QPN no process holds. It does so for
	// ever: perftest sets retry_cnt 7, which rxe takes as unlimited (its
	// completer decrements retry_cnt only when it is not 7), so the stock
	// client ends by our kill, through the PID it wrote.
	victim := ptCase{test: "send_bw", size: 1024, iters: 1000000}
	victimPort := lab.Port(pingpongPort) + fleetPortOffset + len(fleet)
	const victimPID = "/tmp/goroce-fleet-victim.pid"

	ctx, cancel := context.WithTimeout(context.Background(), fleetRunBound)
	var wg sync.WaitGroup
	start := make(chan struct{})
	var startOnce sync.Once
	open := func() { startOnce.Do(func() { close(start) }) }
	// On any failure below: the clients start (or see ctx ended) and end,
	// and their subtests return before this test does.
	defer wg.Wait()
	defer cancel()
	defer open()

	guests := map[string]*labtest.Guest{"a": ga, "b": gb}
	t0 := time.Now()
	for _, f := range fleet {
		job, err := guests[f.guest].Start(ctx, f.stock(guests[f.guest]))
		if err != nil {
			t.Fatal(err)
		}
		f.job = job
	}
	// roced starts while the stock tools start in the guests (seconds under
	// TCG); they send nothing before their clients connect.
	sock := filepath.Join(dir, "roced.sock")
	// Metrics on the namespace's loopback, where roced also serves
	// /debug/devices (the processes, their blocks and QPs).
	p := startRoced(t, lab, "-pingpong=false", "-srq-pingpong=false", "-ud-pingpong=false", "-rping=false", "-socket", sock,
		"-socket-mode", "0660", "-socket-group", strconv.Itoa(fleetUID), "-metrics", "127.0.0.1:0")
	t.Setenv("GOROCE_ROCED_SOCKET", sock) // every program below attaches through it

	before := map[string]labtest.Counters{}
	for name, g := range guests {
		c, err := g.Counters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = c
	}
	vbin, vargs := rocePerftest(pt).command(victim, lab.HostIP.String(), victim.options(victimPort))
	vbin, vargs = asUID(fleetUID, vbin, vargs)
	vcmd := lab.Command(ctx, vbin, vargs...)
	var vout, verr lockedBuffer
	vcmd.Stdout, vcmd.Stderr = &vout, &verr
	if err := vcmd.Start(); err != nil {
		t.Fatal(err)
	}
	vdone := make(chan error, 1)
	go func() { vdone <- vcmd.Wait() }()
	defer func() {
		select {
		case <-vdone:
		default:
			vcmd.Process.Kill()
		}
	}()

	// The victim's stock client, retried until the attached server listens,
	// starts with the stock servers: perftest takes seconds to start in a
	// TCG guest (its clock calibration), the pingpongs' clients one.
	vstock := make(chan labtest.Result, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		vstock <- retryStockClient(ctx, t, gb, "echo $$ >"+victimPID+"; exec "+victim.stockCommand(gb, victimPort)+" "+lab.HostIP.String(), vdone)
	}()
	for name, g := range guests {
		var ports []int
		for _, f := range fleet {
			if f.guest == name {
				ports = append(ports, f.port)
			}
		}
		if err := waitListening(ctx, g, ports, fleetListenBound); err != nil {
			t.Fatalf("the stock servers in guest %s: %v", name, err)
		}
	}
	t.Logf("the stock servers listen %v after their start", time.Since(t0).Round(time.Millisecond))

	for _, f := range fleet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(f.name, func(t *testing.T) {
				defer close(f.ended)
				select {
				case <-start:
				case <-ctx.Done():
					f.job.Kill()
					t.Fatal("the fleet did not start")
				}
				g := guests[f.guest]
				bin, args := f.ours(lab, g, pp, pt)
				f.r = oursAgainst(ctx, t, lab, f.job, bin, args)
				f.check(t)
			})
		}()
	}
	started := time.Now()
	open()

	// Mid-run: the victim has a QP in RTS with traffic received, and every
	// client still running has one in RTS. A client that already ended is not
	// waited for: how long a run lasts is the host's and the guests' speed
	// (8-30 s at load 6-16, under 1 s on a quiet host), so the kill finds
	// as many of the eight mid-run as the host allows, and the row says how
	// many. The blocks are checked over every process that attached.
	vpid := vcmd.Process.Pid
	var snap []devapi.Process
	seen := map[int]devapi.Process{}    // by pid: every process any snapshot listed
	firstRTS := map[int]time.Duration{} // by pid: when the fleet's wait first saw it in RTS
	running := 0                        // clients not ended at the last look
	err := waitUntil(fleetMidRunBound, func() (bool, error) {
		running = 0
		for _, f := range fleet {
			select {
			case <-f.ended:
			default:
				running++
			}
		}
		select {
		case err := <-vdone:
			return false, fmt.Errorf("the victim ended before its kill: %v\n%s%s", err, vout.String(), verr.String())
		default:
		}
		procs, qps, err := p.processes(lab.HostIP)
		if err != nil {
			return false, err
		}
		for _, pr := range procs {
			seen[pr.PID] = pr
		}
		rts := map[int]bool{}
		victimBusy := false
		for _, q := range qps {
			if q.State == "RTS" {
				rts[q.PID] = true
				if _, ok := firstRTS[q.PID]; !ok {
					firstRTS[q.PID] = time.Since(started).Round(time.Millisecond)
				}
				victimBusy = victimBusy || q.PID == vpid && q.RxPackets > 0
			}
		}
		snap = procs
		delete(rts, vpid)
		return victimBusy && len(rts) >= running, nil
	})
	if err != nil {
		t.Fatalf("waiting for the fleet to run: %v", err)
	}
	t.Logf("the victim and %d of the %d clients in RTS %v after the start (the victim %v; the others ended before)",
		running, len(fleet), time.Since(started).Round(time.Millisecond), firstRTS[vpid])
	vproc := processOf(snap, vpid)
	if vproc == nil {
		t.Fatalf("the victim (pid %d) is not among the attached processes %+v", vpid, snap)
	}

	pcap := filepath.Join(lab.RunDir(), "pcap", "shared-fleet-kill.pcap")
	os.MkdirAll(filepath.Dir(pcap), 0o755)
	capture, err := lab.StartCapture(lab.Bridge, pcap)
	if err != nil {
		t.Fatal(err)
	}
	m0, _ := p.scrape(t)
	if err := vcmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-vdone
	dead := time.Now()
	vdone <- nil // for retryStockClient: its server has exited
	const drops = `roce_steer_drops_total{reason="no_owner"}`
	// The window in flight at the kill can all land between the socket's
	// close and the reap (a CI run counted 57 within 4 ms, every one before
	// dead), so the stock peer is stopped only once the capture also holds
	// a datagram for the dead block sent after the reap: a retransmission.
	lateAfterReap := func() (int, error) {
		n := 0
		err := eachRoCE(pcap, func(ts time.Time, src netip.Addr, udp *layers.UDP) {
			qpn, ok := bth.PeekDestQP(udp.Payload)
			if ok && src == gb.IP && ts.After(dead) && qpn >= vproc.FirstQPN && qpn <= vproc.LastQPN {
				n++
			}
		})
		return n, err
	}
	var m1 map[string]float64
	late := 0
	err = waitUntil(fleetRetryBound, func() (bool, error) {
		m1, _ = p.scrape(t)
		if m1[drops]-m0[drops] < fleetRetransmits {
			return false, nil
		}
		// A pcap still without its first packet has no header yet: not an
		// error here, only not yet.
		late, _ = lateAfterReap()
		return late > 0, nil
	})
	if err != nil {
		t.Errorf("%s moved by %v after the kill (want %d), with %d datagrams for the dead block on the wire after the reap (want some): %v",
			drops, m1[drops]-m0[drops], fleetRetransmits, late, err)
	}
	t.Logf("%s +%v %v after the kill", drops, m1[drops]-m0[drops], time.Since(dead).Round(time.Millisecond))
	if r, err := gb.Run(ctx, "kill -9 $(cat "+victimPID+")"); err != nil || r.RC != 0 {
		t.Errorf("stopping the stock peer: %v %s", err, r.Out)
	}
	select {
	case vres := <-vstock:
		if vres.RC == 0 {
			t.Errorf("the killed client's stock peer, stopped: rc %d\n%s", vres.RC, vres.Out)
		}
	case <-time.After(fleetRetryBound):
		t.Fatalf("the killed client's stock peer did not end within %v of its SIGKILL", fleetRetryBound)
	}
	capture.Stop()
	// Every datagram the capture saw for the dead block after the process was
	// reaped went to roced's copy of the block's socket: counted, not delivered.
	late, err = lateAfterReap()
	if err != nil {
		t.Error(err)
	}
	if late == 0 {
		t.Errorf("the stock client sent nothing to the dead block [%#x, %#x] after the kill", vproc.FirstQPN, vproc.LastQPN)
	}
	err = waitUntil(fleetDrainBound, func() (bool, error) {
		m1, _ = p.scrape(t)
		return m1[drops]-m0[drops] >= float64(late), nil
	})
	if err != nil {
		t.Errorf("%s moved by %v after the kill; the capture has %d datagrams for the dead block", drops, m1[drops]-m0[drops], late)
	}
	t.Logf("after the kill: %d datagrams for the dead block [%#x, %#x] on the wire, %s +%v",
		late, vproc.FirstQPN, vproc.LastQPN, drops, m1[drops]-m0[drops])
	checkSourcePorts(t, pcap, lab.HostIP)
	finishCapture(t, pcap)

	wg.Wait()
	// Every process that attached, from the snapshots and roced's log (a run
	// that ended between two snapshots is only in the log): their blocks are
	// disjoint, and each client's QPNs, as it printed them, are in the block
	// roced gave its process, of the client's uid.
	for _, a := range attachedLines(p.stderr.String()) {
		if _, ok := seen[a.pid]; !ok {
			seen[a.pid] = devapi.Process{PID: a.pid, UID: a.uid, FirstQPN: a.first, LastQPN: a.last}
		}
	}
	all := make([]devapi.Process, 0, len(seen))
	for _, pr := range seen {
		all = append(all, pr)
	}
	checkBlocks(t, all)
	for _, f := range fleet {
		q := printedQPNs(f.r.oursOut)
		if len(q) == 0 {
			t.Errorf("%s printed no QPN", f.name)
		}
		for i, n := range q {
			pr := blockOf(all, n)
			if i == 0 && pr != nil {
				t.Logf("%s: pid %d uid %d, block [%#x, %#x], in RTS %v after the start", f.name, pr.PID, pr.UID,
					pr.FirstQPN, pr.LastQPN, firstRTS[pr.PID])
			}
			switch {
			case pr == nil:
				t.Errorf("%s's QPN %#x is in no attached process's block", f.name, n)
			case pr.UID != f.uid:
				t.Errorf("%s ran as uid %d, but its QPN %#x is in the block of pid %d, uid %d", f.name, f.uid, n, pr.PID, pr.UID)
			case pr.PID == vpid:
				t.Errorf("%s's QPN %#x is in the victim's block", f.name, n)
			}
		}
	}
	var rxe []string
	for _, name := range []string{"a", "b"} {
		d := rxeSince(context.Background(), t, guests[name], before[name])
		rxe = append(rxe, fmt.Sprintf("guest %s: %v", name, d))
	}
	m2, _ := p.scrape(t)
	if v := m2["roce_steer_misrouted_total"]; v != 0 {
		t.Errorf("roce_steer_misrouted_total = %v: a process received a datagram of another's block", v)
	}
	fleetFailed := t.Failed()
	appendResult(t, resultRow{tool: "roced fleet", dir: "8 attached clients (uids 0, 65534) -> rxe servers",
		transport: "RC, SRQ, UD", opts: fmt.Sprintf("one kill -9 mid-run (%d of %d clients running)", running, len(fleet)),
		counters: strings.Join(rxe, " | ") + fmt.Sprintf(" | roced: steer_drops(after the kill)=%v misrouted=%v, the stock peer's datagrams to the dead block=%d",
			m1[drops]-m0[drops], m2["roce_steer_misrouted_total"], late)})

	// The killed client started again: a fresh block, and a clean run.
	t.Run("restarted", func(t *testing.T) {
		if fleetFailed {
			t.Skip("the fleet failed")
		}
		n0 := len(p.stderr.String())
		o := rocePerftest(pt)
		cmd := o.command
		o.tool = "ib_send_bw (attached roce-perftest restarted after kill -9)"
		o.command = func(c ptCase, addr string, opts []string) (string, []string) {
			bin, args := cmd(c, addr, opts)
			return asUID(fleetUID, bin, args)
		}
		runPerftest(t, lab, gb, o, ptCase{test: victim.test, size: victim.size, iters: 200}, ptRxeToOurs)
		att := attachedLines(p.stderr.String()[n0:])
		if len(att) == 0 {
			t.Fatalf("no attach in roced's log:\n%s", tail(p.stderr.String(), 10))
		}
		for _, a := range att {
			if a.first <= vproc.LastQPN && vproc.FirstQPN <= a.last {
				t.Errorf("the restarted client (pid %d) got [%#x, %#x], overlapping the killed one's [%#x, %#x]",
					a.pid, a.first, a.last, vproc.FirstQPN, vproc.LastQPN)
			}
			if a.uid != fleetUID {
				t.Errorf("the restarted client attached as uid %d, want %d", a.uid, fleetUID)
			}
		}
		t.Logf("restarted: block [%#x, %#x] (the killed client's [%#x, %#x])", att[0].first, att[0].last, vproc.FirstQPN, vproc.LastQPN)
	})
}

// sharedDir is t's temporary directory, made one every uid may enter (and
// the test's directory above it): the fleet's second uid runs the tools from
// it and connects to roced's socket in it.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// copyTool copies the executable bin into dir (mode 0755) and returns the copy.
func copyTool(t *testing.T, bin, dir string) string {
	t.Helper()
	src, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	path := filepath.Join(dir, filepath.Base(bin))
	dst, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitListening waits until each of ports has a listening TCP socket in g
// (/proc/net/tcp, tcp6): the stock servers are ready for their clients.
func waitListening(ctx context.Context, g *labtest.Guest, ports []int, bound time.Duration) error {
	var missing []int
	err := waitUntil(bound, func() (bool, error) {
		r, err := g.Run(ctx, "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")
		if err != nil {
			return false, err
		}
		listening := map[int]bool{}
		for _, line := range strings.Split(r.Out, "\n") {
			f := strings.Fields(line)
			if len(f) < 4 || f[3] != "0A" {
				continue
			}
			_, hex, _ := strings.Cut(f[1], ":")
			if n, err := strconv.ParseUint(hex, 16, 16); err == nil {
				listening[int(n)] = true
			}
		}
		missing = missing[:0]
		for _, p := range ports {
			if !listening[p] {
				missing = append(missing, p)
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("TCP ports %v not listening: %w", missing, err)
	}
	return nil
}

// waitUntil polls cond every 200 ms until it holds or fails, for at most bound.
func waitUntil(bound time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(bound)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v", bound)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// processes returns the processes attached to roced's address addr and the
// address's QPs (each with its owner's pid), from /debug/devices.
func (p *rocedProc) processes(addr netip.Addr) ([]devapi.Process, []devapi.QP, error) {
	resp, err := p.http.Get("http://" + p.metrics + devapi.Path)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	var devs []devapi.Device
	if err := json.NewDecoder(resp.Body).Decode(&devs); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", devapi.Path, err)
	}
	for _, d := range devs {
		if d.Addr == addr.String() {
			return d.Processes, d.QPs, nil
		}
	}
	return nil, nil, fmt.Errorf("%s: no device %v", devapi.Path, addr)
}

// checkBlocks fails t unless the processes' QPN blocks are non-empty and
// pairwise disjoint, and both uids are among them.
func checkBlocks(t *testing.T, procs []devapi.Process) {
	t.Helper()
	s := slices.Clone(procs)
	slices.SortFunc(s, func(a, b devapi.Process) int { return int(a.FirstQPN) - int(b.FirstQPN) })
	uids := map[uint32]int{}
	for i, a := range s {
		uids[a.UID]++
		if a.FirstQPN > a.LastQPN {
			t.Errorf("pid %d: empty block [%#x, %#x]", a.PID, a.FirstQPN, a.LastQPN)
		}
		if i > 0 && s[i-1].LastQPN >= a.FirstQPN {
			t.Errorf("pids %d and %d hold overlapping blocks [%#x, %#x] and [%#x, %#x]",
				s[i-1].PID, a.PID, s[i-1].FirstQPN, s[i-1].LastQPN, a.FirstQPN, a.LastQPN)
		}
	}
	if uids[0] == 0 || uids[fleetUID] == 0 {
		t.Errorf("attached processes by uid: %v; want both 0 and %d", uids, fleetUID)
	}
	t.Logf("%d processes attached, by uid %v, in disjoint blocks", len(s), uids)
}

func processOf(procs []devapi.Process, pid int) *devapi.Process {
	for i := range procs {
		if procs[i].PID == pid {
			return &procs[i]
		}
	}
	return nil
}

// blockOf returns the process whose block holds qpn.
func blockOf(procs []devapi.Process, qpn uint32) *devapi.Process {
	for i := range procs {
		if procs[i].FirstQPN <= qpn && qpn <= procs[i].LastQPN {
			return &procs[i]
		}
	}
	return nil
}

// localQPN matches the local QPN lines of roce-pingpong and roce-perftest
// (as the stock tools print them).
var localQPN = regexp.MustCompile(`local address:.*QPN (0x[0-9a-fA-F]+)`)

// printedQPNs are the local QPNs a tool printed.
func printedQPNs(out string) []uint32 {
	var q []uint32
	for _, m := range localQPN.FindAllStringSubmatch(out, -1) {
		if n, err := strconv.ParseUint(m[1], 0, 32); err == nil {
			q = append(q, uint32(n))
		}
	}
	return q
}

// attach is one "attached" line of roced's log.
type attach struct {
	pid         int
	uid         uint32
	first, last uint32
}

var attachedLine = regexp.MustCompile(`msg=attached pid=(\d+) uid=(\d+) .*qpns=(0x[0-9a-f]+)-(0x[0-9a-f]+)`)

// attachedLines returns the attaches roced logged in log.
func attachedLines(log string) []attach {
	var out []attach
	for _, m := range attachedLine.FindAllStringSubmatch(log, -1) {
		pid, _ := strconv.Atoi(m[1])
		uid, _ := strconv.ParseUint(m[2], 10, 32)
		first, _ := strconv.ParseUint(m[3], 0, 32)
		last, _ := strconv.ParseUint(m[4], 0, 32)
		out = append(out, attach{pid, uint32(uid), uint32(first), uint32(last)})
	}
	return out
}
