package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/testsupport/syncbuf"
	"github.com/goroce/goroce/internal/tool/devapi"
	"github.com/goroce/goroce/roce"
)

// Identities of the fleet test when it runs as root: the socket's group,
// a second uid in it, and a uid outside it.
const (
	fleetGID      = 47910
	fleetUID      = 47911
	strangerUID   = 47912
	fleetDeadline = 90 * time.Second // one tool run, under load; the runs take a few seconds
)

var (
	toolsOnce sync.Once
	toolsDir  string
	toolsErr  error
)

// tools builds roce-pingpong, roce-perftest and rping-go once, into a directory every
// uid may read (the fleet's second uid runs them).
func tools(t *testing.T) string {
	t.Helper()
	toolsOnce.Do(func() {
		// Under TestMain's directory, which it removes.
		dir := filepath.Join(filepath.Dir(rocedBin), "tools")
		toolsDir = dir
		if err := os.Chmod(filepath.Dir(rocedBin), 0o755); err != nil {
			toolsErr = err
			return
		}
		build := exec.Command("go", "build", "-o", dir+"/", "../roce-pingpong", "../roce-perftest", "../rping-go")
		if out, err := build.CombinedOutput(); err != nil {
			toolsErr = fmt.Errorf("building the tools: %v\n%s", err, out)
		}
	})
	if toolsErr != nil {
		t.Fatal(toolsErr)
	}
	return toolsDir
}

// toolProc is one run of a tool.
type toolProc struct {
	name   string
	cmd    *exec.Cmd
	out    *syncbuf.Buffer
	errb   *syncbuf.Buffer
	done   chan struct{}
	runErr error
}

// startTool runs bin with args, as uid/gid when uid is nonzero, with the
// attach socket in its environment. It is killed (by PID) at cleanup.
func startTool(t *testing.T, name, bin string, sock string, uid, gid uint32, args ...string) *toolProc {
	t.Helper()
	p := &toolProc{name: name, out: &syncbuf.Buffer{}, errb: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), "GOROCE_ROCED_SOCKET="+sock)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.errb
	if uid != 0 {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() { p.runErr = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the run to end and returns its error.
func (p *toolProc) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.done:
		return p.runErr
	case <-time.After(fleetDeadline):
		t.Fatalf("%s did not finish in %v\nstdout:\n%s\nstderr:\n%s", p.name, fleetDeadline, p.out, p.errb)
		return nil
	}
}

var qpnLine = regexp.MustCompile(`local address:.*QPN (0x[0-9a-f]+)`)

// qpns are the local QPNs the tool printed.
func (p *toolProc) qpns() []uint32 {
	var out []uint32
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	for sc.Scan() {
		if m := qpnLine.FindStringSubmatch(sc.Text()); m != nil {
			n, _ := strconv.ParseUint(m[1], 0, 32)
			out = append(out, uint32(n))
		}
	}
	return out
}

// tcpListening reports whether some socket listens on TCP port (IPv4 or
// IPv6), from /proc/net/tcp{,6}: a server tool is ready for its client.
func tcpListening(port int) bool {
	want := fmt.Sprintf(":%04X ", port)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) > 3 && strings.HasSuffix(fs[1]+" ", want) && fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// pair is a responder on the second address and its client on the
// first, both attached.
type pair struct {
	srv, cli *toolProc
}

// fleetRun describes one client's run: the tool and its arguments (both
// sides get them, the client also the server's address).
type fleetRun struct {
	name string
	bin  string
	args []string
}

// startPair starts r's responder on srvAddr (as root), waits until it
// listens, and starts its client on cliAddr as uid.
func startPair(t *testing.T, dir, sock string, r fleetRun, cliAddr, srvAddr netip.Addr, port uint16, uid uint32) pair {
	t.Helper()
	tcp := strconv.Itoa(freeTCPPort(t))
	common := append([]string{"--roce-port", strconv.Itoa(int(port)), "-p", tcp, "--timeout", "60s"}, r.args[1:]...)
	bin := filepath.Join(dir, r.bin)
	srv := startTool(t, r.name+" responder", bin, sock, 0, 0, append([]string{r.args[0], "-d", srvAddr.String()}, common...)...)
	deadline := time.Now().Add(fleetDeadline)
	n, _ := strconv.Atoi(tcp)
	for !tcpListening(n) {
		select {
		case <-srv.done:
			t.Fatalf("%s responder exited before listening: %v\n%s%s", r.name, srv.runErr, srv.out, srv.errb)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s responder did not listen on TCP %s in %v", r.name, tcp, fleetDeadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cli := startTool(t, r.name, bin, sock, uid, fleetGID, append([]string{r.args[0], "-d", cliAddr.String()}, append(common, srvAddr.String())...)...)
	return pair{srv: srv, cli: cli}
}

// devices fetches roced's /debug/devices.
func devices(t *testing.T, p *daemonProc) []devapi.Device {
	t.Helper()
	code, body := httpGet(t, "http://"+p.metrics+devapi.Path)
	if code != 200 {
		t.Fatalf("%s: HTTP %d: %s", devapi.Path, code, body)
	}
	var devs []devapi.Device
	if err := json.Unmarshal(body, &devs); err != nil {
		t.Fatalf("%s: %v", devapi.Path, err)
	}
	return devs
}

// processes returns the processes attached to addr.
func processes(t *testing.T, p *daemonProc, addr netip.Addr) ([]devapi.Process, []devapi.QP) {
	for _, d := range devices(t, p) {
		if d.Addr == addr.String() {
			return d.Processes, d.QPs
		}
	}
	return nil, nil
}

// TestSharedFleet is the acceptance run on one host: roced serves
// two loopback addresses; eight client processes (roce-pingpong rc, srq
// and ud, roce-perftest) attach to the first, half of them under a second
// uid when the test runs as root, and run against responders attached to
// the second. Every run passes its data checks, the clients' QPN blocks are
// disjoint, a bind beside roced is EADDRINUSE, a client killed with
// SIGKILL mid-run leaves the others alone and its QPNs' datagrams are
// counted as dropped (never delivered elsewhere), a restarted client gets a
// fresh block and passes, and a uid outside the socket's group cannot
// attach.
func TestSharedFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 20 processes")
	}
	dir := tools(t)
	root := os.Geteuid() == 0
	addrs := testAddrs(2)
	cliAddr, srvAddr := addrs[0], addrs[1]
	port := freeUDPPort(t, addrs...)
	sockDir, err := os.MkdirTemp("", "roced-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	if err := os.Chmod(sockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "roced.sock")
	args := []string{"-bind", cliAddr.String(), "-bind", srvAddr.String(), "-port", strconv.Itoa(int(port)),
		"-pingpong=false", "-ud-pingpong=false", "-socket", sock, "-socket-mode", "0660"}
	if root {
		args = append(args, "-socket-group", strconv.Itoa(fleetGID))
	}
	d := startDaemon(t, args...)

	// A bind that bypasses roced: the address is the steered group's.
	if c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(cliAddr, port))); !errors.Is(err, syscall.EADDRINUSE) {
		if c != nil {
			c.Close()
		}
		t.Errorf("a plain bind to %v:%d beside roced: %v, want EADDRINUSE", cliAddr, port, err)
	}

	runs := []fleetRun{
		{"rc", "roce-pingpong", []string{"rc", "-n", "300", "-c"}},
		{"rc-big", "roce-pingpong", []string{"rc", "-n", "100", "-s", "65536", "-c"}},
		{"srq", "roce-pingpong", []string{"srq", "-n", "300", "-q", "4", "-c"}},
		{"srq-small", "roce-pingpong", []string{"srq", "-n", "200", "-q", "2", "-s", "64", "-c"}},
		{"ud", "roce-pingpong", []string{"ud", "-n", "300", "-s", "1000", "-c"}},
		{"ud-small", "roce-pingpong", []string{"ud", "-n", "300", "-s", "256", "-c"}},
		{"write_bw", "roce-perftest", []string{"write_bw", "-n", "500", "-s", "65536"}},
		{"send_lat", "roce-perftest", []string{"send_lat", "-n", "300"}},
	}
	uidOf := func(i int) uint32 {
		if root && i%2 == 1 {
			return fleetUID
		}
		return 0
	}
	// The victim: a long pingpong, killed mid-run.
	victim := startPair(t, dir, sock, fleetRun{"victim", "roce-pingpong", []string{"rc", "-n", "100000000", "-s", "1024", "--timeout", "15s"}},
		cliAddr, srvAddr, port, 0)
	var pairs []pair
	for i, r := range runs {
		pairs = append(pairs, startPair(t, dir, sock, r, cliAddr, srvAddr, port, uidOf(i)))
	}

	// Mid-run: the victim's QP is in RTS on the first address.
	var victimProc devapi.Process
	waitForIn(t, fleetDeadline, "the victim's QP to reach RTS", func() bool {
		procs, qps := processes(t, d, cliAddr)
		for _, q := range qps {
			if q.PID == victim.cli.cmd.Process.Pid && q.State == "RTS" {
				for _, p := range procs {
					if p.PID == q.PID {
						victimProc = p
						return true
					}
				}
			}
		}
		return false
	})
	procs, _ := processes(t, d, cliAddr)
	checkDisjoint(t, procs)
	if root {
		uids := map[uint32]bool{}
		for _, p := range procs {
			uids[p.UID] = true
		}
		t.Logf("%d processes attached to %v under uids %v", len(procs), cliAddr, uids)
	}
	before := value(t, d.scrape(t), "roce_steer_drops_total", "reason", "no_owner")
	if err := victim.cli.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.cli.done
	// roced sees the session end and frees the block into quarantine.
	waitForIn(t, fleetDeadline, "roced to drop the killed client", func() bool {
		procs, _ := processes(t, d, cliAddr)
		for _, p := range procs {
			if p.PID == victim.cli.cmd.Process.Pid {
				return false
			}
		}
		return true
	})
	// Datagrams for the dead process's QPNs: the kernel steers them to its
	// block's socket, which roced holds and drains.
	const probes = 20
	sendProbes(t, cliAddr, netip.AddrPortFrom(cliAddr, port), victimProc.FirstQPN, probes)
	waitForIn(t, fleetDeadline, "roced to count the dead block's datagrams", func() bool {
		return value(t, d.scrape(t), "roce_steer_drops_total", "reason", "no_owner") >= before+probes
	})

	for i, p := range pairs {
		for _, side := range []*toolProc{p.cli, p.srv} {
			if err := side.wait(t); err != nil {
				t.Errorf("%s (uid %d): %v\nstdout:\n%s\nstderr:\n%s", side.name, uidOf(i), err, side.out, side.errb)
			}
		}
	}
	// The victim's responder loses its peer: it fails (retry exceeded, or
	// its timeout) rather than hanging.
	if err := victim.srv.wait(t); err == nil {
		t.Errorf("the killed client's responder exited 0:\n%s", victim.srv.out)
	} else {
		t.Logf("the killed client's responder: %v: %s", err, lastLine(victim.srv.errb.String()))
	}

	// A restarted client gets a fresh block and passes.
	again := startPair(t, dir, sock, fleetRun{"restarted", "roce-pingpong", []string{"rc", "-n", "200", "-c"}}, cliAddr, srvAddr, port, uidOf(1))
	for _, side := range []*toolProc{again.cli, again.srv} {
		if err := side.wait(t); err != nil {
			t.Errorf("%s: %v\n%s%s", side.name, err, side.out, side.errb)
		}
	}
	vfirst, vlast := victimProc.FirstQPN, victimProc.LastQPN
	for _, q := range again.cli.qpns() {
		if q >= vfirst && q <= vlast {
			t.Errorf("the restarted client got QPN %#x in the killed client's block [%#x, %#x]", q, vfirst, vlast)
		}
	}
	// Clients' QPNs, as they printed them, are in blocks of their own.
	owner := map[uint32]string{}
	for _, p := range append(pairs, again) {
		for _, q := range p.cli.qpns() {
			b := q >> 16 // the default 256 blocks of 65536 QPNs
			if o, ok := owner[b]; ok && o != p.cli.name {
				t.Errorf("%s's QPN %#x is in the block of %s", p.cli.name, q, o)
			}
			owner[b] = p.cli.name
		}
	}
	mfs := d.scrape(t)
	if m := value(t, mfs, "roce_steer_misrouted_total"); m != 0 {
		t.Errorf("roce_steer_misrouted_total = %v: a process received a datagram of another's block", m)
	}

	if root {
		stranger := startTool(t, "stranger", filepath.Join(dir, "roce-pingpong"), sock, strangerUID, strangerUID,
			"rc", "-d", cliAddr.String(), "--roce-port", strconv.Itoa(int(port)), "-p", strconv.Itoa(freeTCPPort(t)), "--timeout", "10s")
		err := stranger.wait(t)
		if err == nil || !strings.Contains(stranger.errb.String(), "did not let this process attach") {
			t.Errorf("a uid outside the socket's group: %v, stderr %q; want a refusal", err, stranger.errb)
		}
	} else {
		t.Log("not root: every client runs under this uid; the second uid and the refusal are not tested")
	}
}

// checkDisjoint fails the test if two processes' QPN blocks overlap.
func checkDisjoint(t *testing.T, procs []devapi.Process) {
	t.Helper()
	for i, a := range procs {
		if a.FirstQPN > a.LastQPN {
			t.Errorf("pid %d: empty block [%#x, %#x]", a.PID, a.FirstQPN, a.LastQPN)
		}
		for _, b := range procs[i+1:] {
			if a.FirstQPN <= b.LastQPN && b.FirstQPN <= a.LastQPN {
				t.Errorf("pids %d and %d hold overlapping blocks [%#x, %#x] and [%#x, %#x]",
					a.PID, b.PID, a.FirstQPN, a.LastQPN, b.FirstQPN, b.LastQPN)
			}
		}
	}
}

// sendProbes sends n well-formed SEND ONLY packets for qpn to to.
func sendProbes(t *testing.T, from netip.Addr, to netip.AddrPort, qpn uint32, n int) {
	t.Helper()
	var pkts [][]byte
	for i := range n {
		f := bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: qpn + uint32(i), PSN: bth.PSN(i)}
		pkts = append(pkts, bth.Append(nil, &f, make([]byte, 64)))
	}
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, p := range pkts {
		if _, err := c.WriteToUDPAddrPort(p, to); err != nil {
			t.Fatalf("probe %d: %v", i, err)
		}
	}
}

// waitForIn is waitFor with its own bound.
func waitForIn(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestKilledServerDREQ: an attached rping-go server killed with SIGKILL
// mid-run sends nothing, but roced, which held its CM state, sends its
// peer a DREQ: the attached rping-go client sees the disconnect and exits
// at once, instead of retrying into retry-exceeded.
func TestKilledServerDREQ(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes")
	}
	dir := tools(t)
	addr := testAddrs(1)[0]
	port := freeUDPPort(t, addr)
	sock := filepath.Join(t.TempDir(), "roced.sock")
	d := startDaemon(t, "-bind", addr.String(), "-port", strconv.Itoa(int(port)), "-pingpong=false", "-ud-pingpong=false",
		"-rping=false", "-socket", sock)
	rp := filepath.Join(dir, "rping-go")
	cmPort := strconv.Itoa(freeTCPPort(t))
	common := []string{"-a", addr.String(), "-p", cmPort, "--udp-port", strconv.Itoa(int(port))}
	srv := startTool(t, "rping-go -s", rp, sock, 0, 0, append([]string{"-s", "-V"}, common...)...)
	// The server listens once roced routes its service: wait for it among
	// the attached processes with a listener.
	waitForIn(t, fleetDeadline, "the rping server's listen", func() bool {
		procs, _ := processes(t, d, addr)
		for _, p := range procs {
			if p.PID == srv.cmd.Process.Pid && p.Listeners > 0 {
				return true
			}
		}
		return false
	})
	cli := startTool(t, "rping-go -c", rp, sock, 0, 0, append([]string{"-c", "-V", "-C", "0", "-I", addr.String()}, common...)...)
	waitRTS(t, d, addr, cli)
	if err := srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-srv.done
	// roced sees the process's socket close at once and sends the DREQ;
	// retry-exceeded would take the QP's 7 retries of a 4.096 us x 2^14
	// timeout (0.5 s) at least.
	waitFails(t, cli, "its server's SIGKILL", killed)
}

// TestRocedKilledUnderClient: roced killed with SIGKILL while an attached
// roce-pingpong runs against roced's own responder: the client fails at
// once (DEVICE_FATAL: its QPs go to the error state) instead of hanging;
// a roced started again on the same socket and address serves, and a new
// client passes.
func TestRocedKilledUnderClient(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes")
	}
	dir := tools(t)
	addr := testAddrs(1)[0]
	port := freeUDPPort(t, addr)
	tcp := strconv.Itoa(freeTCPPort(t))
	sock := filepath.Join(t.TempDir(), "roced.sock")
	args := []string{"-bind", addr.String(), "-port", strconv.Itoa(int(port)), "-pingpong-port", tcp,
		"-ud-pingpong=false", "-rping=false", "-socket", sock}
	d := startDaemon(t, args...)
	pp := filepath.Join(dir, "roce-pingpong")
	client := func(name string, iters string) *toolProc {
		return startTool(t, name, pp, sock, 0, 0, "rc", "-d", addr.String(), "--roce-port", strconv.Itoa(int(port)),
			"-p", tcp, "-n", iters, "-c", "--timeout", "60s", addr.String())
	}
	cli := client("pingpong before the kill", "100000000")
	waitRTS(t, d, addr, cli)
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-d.exited
	waitFails(t, cli, "roced's SIGKILL", killed)
	startDaemon(t, args...)
	again := client("pingpong after the restart", "200")
	if err := again.wait(t); err != nil {
		t.Errorf("a client of the restarted roced: %v\n%s%s", err, again.out, again.errb)
	}
}

// waitRTS waits until p, attached to d's addr, has a QP in RTS: mid-run.
func waitRTS(t *testing.T, d *daemonProc, addr netip.Addr, p *toolProc) {
	t.Helper()
	waitForIn(t, fleetDeadline, p.name+"'s QP to reach RTS", func() bool {
		select {
		case <-p.done:
			t.Fatalf("%s ended before its peer went away: %v\n%s%s", p.name, p.runErr, p.out, p.errb)
		default:
		}
		_, qps := processes(t, d, addr)
		for _, q := range qps {
			if q.PID == p.cmd.Process.Pid && q.State == "RTS" {
				return true
			}
		}
		return false
	})
}

// waitFails waits for p to end, failing, after what happened at since.
// Bound: 20 s, far under p's own --timeout and room for a loaded host; the
// events it waits for take milliseconds.
func waitFails(t *testing.T, p *toolProc, what string, since time.Time) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not end within 20 s of %s\n%s%s", p.name, what, p.out, p.errb)
	}
	t.Logf("%s ended %v after %s: %v: %s", p.name, time.Since(since), what, p.runErr, lastLine(p.errb.String()))
	if p.runErr == nil {
		t.Errorf("%s exited 0 after %s", p.name, what)
	}
}

// TestProcessSeriesInPIDNamespaces: two attached processes outside roced's
// pid namespace (pods without hostPID, beside a roced pod) both read as pid 0
// through SO_PEERCRED; their per-process series stay apart by QPN block, and
// /metrics gathers without a duplicate-series error.
func TestProcessSeriesInPIDNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a new pid namespace needs root")
	}
	dir := tools(t)
	addrs := testAddrs(1)
	port := freeUDPPort(t, addrs...)
	sock := filepath.Join(t.TempDir(), "roced.sock")
	// roced in a pid namespace of its own: its clients' pids mean nothing
	// there, and SO_PEERCRED gives it 0 for each.
	d := startDaemonCmd(t, func(args []string) *exec.Cmd {
		c := exec.Command(rocedBin, args...)
		c.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
		return c
	}, http.DefaultClient, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false", "-ud-pingpong=false",
		"-rping=false", "-socket", sock)
	for range 2 {
		// A responder waiting for its TCP client stays attached.
		startTool(t, "pingpong responder", filepath.Join(dir, "roce-pingpong"), sock, 0, 0,
			"rc", "-d", addrs[0].String(), "--roce-port", strconv.Itoa(int(port)), "-p", strconv.Itoa(freeTCPPort(t)), "--timeout", "60s")
	}
	var series map[string]bool
	waitFor(t, "two per-process series", func() bool {
		series = map[string]bool{}
		for _, m := range d.scrape(t)["roce_process_queue_pairs"].GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			series[l["pid"]+"/"+l["block"]] = true
		}
		return len(series) == 2
	})
	for k := range series {
		if !strings.HasPrefix(k, "0/") {
			t.Errorf("series %s: want pid 0 (a client in another pid namespace)", k)
		}
	}
	if code, body := httpGet(t, "http://"+d.metrics+"/metrics"); code != 200 || strings.Contains(string(body), "error gathering") {
		t.Errorf("/metrics: %d %s", code, body)
	}
	if strings.Contains(d.stderr.String(), "collected before") {
		t.Errorf("roced reported a duplicate series:\n%s", d.stderr.String())
	}
}

// TestDepartedCountedOnce: a process that leaves stays in roced's
// device-wide totals once: its last report moves from the attached
// processes to the departed sum at one instant, so roced's list of
// processes, up to reportEvery old, neither counts it twice nor lists it.
func TestDepartedCountedOnce(t *testing.T) {
	addr := testAddrs(1)[0]
	port := freeUDPPort(t, addr)
	sock := filepath.Join(t.TempDir(), "roced.sock")
	d := startDaemon(t, "-bind", addr.String(), "-port", strconv.Itoa(int(port)), "-pingpong=false", "-ud-pingpong=false",
		"-rping=false", "-socket", sock)
	dev, err := roce.Open(addr, roce.WithPort(port), roce.WithRoced(sock))
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	procs, _ := processes(t, d, addr)
	if !dev.Attached() || len(procs) != 1 {
		t.Fatalf("attached %v, %d processes", dev.Attached(), len(procs))
	}
	// Datagrams for QPNs of its block that no QP has: its unknown_qp.
	const probes = 10
	sendProbes(t, addr, netip.AddrPortFrom(addr, port), procs[0].FirstQPN+0x100, probes)
	waitForIn(t, fleetDeadline, "the process's unknown_qp", func() bool { return dev.Stats().UnknownQP == probes })
	total := func(mfs map[string]*dto.MetricFamily) float64 {
		v := value(t, mfs, "roce_unknown_qp_total")
		if v > probes {
			t.Fatalf("roce_unknown_qp_total = %v, want %d", v, probes)
		}
		return v
	}
	waitForIn(t, fleetDeadline, "roced's report of it", func() bool { return total(d.scrape(t)) == probes })
	dev.Close()
	waitForIn(t, fleetDeadline, "roced to drop the process", func() bool {
		mfs := d.scrape(t)
		if v := total(mfs); v != probes {
			t.Fatalf("roce_unknown_qp_total = %v after the process left, want %d", v, probes)
		}
		return value(t, mfs, "roce_attached_processes") == 0
	})
}
