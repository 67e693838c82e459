package labtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// EnvEnable is the environment variable that turns the interop tests on. interop/run.sh
// sets it; with it set, a lab that is not up is a test failure, not a skip.
const EnvEnable = "GOROCE_INTEROP"

// EnvLabEnv names the lab.env file of the lane to test (interop/run/DIST/lab.env, written
// by `interop/lab up`). The default is interop/run/lab.env, found from the test's working
// directory, which names the lanes that are up: then EnvDist picks one, else the first.
const EnvLabEnv = "GOROCE_LAB_ENV"

// EnvDist picks the lane (a Debian suite: bookworm, trixie) when EnvLabEnv names no lane.
const EnvDist = "GOROCE_LAB_DIST"

// Lab is one lane of a running interop lab: a bridge in the lab's network namespace, the
// host side of that bridge, and the rxe guests of one kernel generation on it. Lanes share
// nothing but the namespace, so tests of two lanes can run at the same time.
type Lab struct {
	NS     string     // network namespace name
	Dist   string     // the guests' Debian suite
	Kernel string     // the guests' kernel release (uname -r)
	Gen    Gen        // its generation, major.minor
	Bridge string     // the lane's bridge in NS; captures of host traffic go here
	HostIP netip.Addr // host side of the bridge; our engine binds here
	MTU    int        // netdev MTU the lab booted with
	Accel  string     // qemu accelerator (tcg or kvm)
	Dir    string     // the interop/ directory (lab script, run/)

	lane     string // lane number: its taps are labtap<lane><guest>
	execPort int
	guests   map[string]*Guest
}

// Guest is one rxe guest. Its device is always rxe0, port 1.
type Guest struct {
	Name     string
	IP       netip.Addr
	GIDIndex int        // index of the IPv4-mapped RoCEv2 GID (1 on every boot so far)
	GID      netip.Addr // that GID, ::ffff:a.b.c.d
	GID0     netip.Addr // GID index 0, the fe80:: link-local GID (RoCEv2 over IPv6)
	lab      *Lab
}

// Open returns the running lab. Unless GOROCE_INTEROP=1 it skips the test, saying how to
// run it; with GOROCE_INTEROP=1 a missing or unreadable lab fails the test.
func Open(tb testing.TB) *Lab {
	tb.Helper()
	if os.Getenv(EnvEnable) != "1" {
		tb.Skipf("interop test against a real rxe: skipped unless %s=1 (run interop/run.sh, which boots the lab)", EnvEnable)
	}
	l, err := Load(os.Getenv(EnvLabEnv))
	if err != nil {
		tb.Fatalf("%s=1 but the lab is not usable: %v", EnvEnable, err)
	}
	return l
}

// Load reads the lab.env file of a lane. An empty path means interop/run/lab.env,
// searched upwards from the working directory; a file that lists the lanes (rather than
// describing one) leads to the lane $GOROCE_LAB_DIST names, or the first.
func Load(path string) (*Lab, error) {
	if path == "" {
		p, err := findLabEnv()
		if err != nil {
			return nil, err
		}
		path = p
	}
	kv, err := readEnv(path)
	if err != nil {
		return nil, err
	}
	if _, ok := kv["GOROCE_LAB_DIST"]; !ok && kv["GOROCE_LAB_DISTS"] != "" {
		dists := strings.Fields(kv["GOROCE_LAB_DISTS"])
		dist := os.Getenv(EnvDist)
		if dist == "" {
			dist = dists[0]
		} else if !slices.Contains(dists, dist) {
			return nil, fmt.Errorf("labtest: %s=%s, but the lanes up are %v", EnvDist, dist, dists)
		}
		path = filepath.Join(filepath.Dir(path), dist, "lab.env")
		if kv, err = readEnv(path); err != nil {
			return nil, err
		}
	}
	abs, _ := filepath.Abs(path)
	l := &Lab{NS: kv["GOROCE_LAB_NS"], Dist: kv["GOROCE_LAB_DIST"], Kernel: kv["GOROCE_LAB_KERNEL"],
		Bridge: kv["GOROCE_LAB_BR"], Accel: kv["GOROCE_LAB_ACCEL"], lane: kv["GOROCE_LAB_LANE"],
		Dir:    filepath.Dir(filepath.Dir(filepath.Dir(abs))), // interop/run/DIST/lab.env
		guests: map[string]*Guest{}}
	if l.NS == "" || l.Dist == "" || l.Bridge == "" || l.lane == "" {
		return nil, fmt.Errorf("labtest: %s: not a lane's lab.env (GOROCE_LAB_NS, _DIST, _BR, _LANE)", path)
	}
	if l.Gen = GenOf(l.Kernel); l.Gen == "" {
		return nil, fmt.Errorf("labtest: %s: kernel release %q", path, l.Kernel)
	}
	if l.HostIP, err = netip.ParseAddr(kv["GOROCE_LAB_HOST_IP"]); err != nil {
		return nil, fmt.Errorf("labtest: %s: host IP: %w", path, err)
	}
	if l.execPort, err = strconv.Atoi(kv["GOROCE_LAB_EXEC_PORT"]); err != nil {
		return nil, fmt.Errorf("labtest: %s: exec port: %w", path, err)
	}
	if l.MTU, err = strconv.Atoi(kv["GOROCE_LAB_MTU"]); err != nil {
		return nil, fmt.Errorf("labtest: %s: MTU: %w", path, err)
	}
	for _, name := range strings.Fields(kv["GOROCE_LAB_GUESTS"]) {
		p := "GOROCE_LAB_" + strings.ToUpper(name) + "_"
		g := &Guest{Name: name, lab: l}
		var e1, e2, e3, e4 error
		g.IP, e1 = netip.ParseAddr(kv[p+"IP"])
		g.GIDIndex, e2 = strconv.Atoi(kv[p+"GID_INDEX"])
		g.GID, e3 = ParseSysfsGID(kv[p+"GID"])
		g.GID0, e4 = ParseSysfsGID(kv[p+"GID0"])
		if err := errors.Join(e1, e2, e3, e4); err != nil {
			return nil, fmt.Errorf("labtest: %s: guest %s: %w", path, name, err)
		}
		l.guests[name] = g
	}
	if len(l.guests) == 0 {
		return nil, fmt.Errorf("labtest: %s: no guests", path)
	}
	return l, nil
}

// readEnv reads a lab.env file: KEY=VALUE lines, values optionally in double quotes.
func readEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("labtest: %w (is the lab up? interop/lab up)", err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok {
			kv[k] = strings.Trim(v, `"`)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("labtest: read %s: %w", path, err)
	}
	return kv, nil
}

func findLabEnv() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		for _, p := range []string{filepath.Join(dir, "run", "lab.env"), filepath.Join(dir, "interop", "run", "lab.env")} {
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("labtest: no interop/run/lab.env (is the lab up? interop/lab up)")
		}
		dir = parent
	}
}

// ParseSysfsGID parses a GID as sysfs prints it: eight groups of four hex digits.
func ParseSysfsGID(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() {
		return netip.Addr{}, fmt.Errorf("bad GID %q", s)
	}
	return a, nil
}

// Guest returns the named guest (a, b, ...). It fails the test if there is none.
func (l *Lab) Guest(tb testing.TB, name string) *Guest {
	tb.Helper()
	g, ok := l.guests[name]
	if !ok {
		tb.Fatalf("labtest: no guest %q in the lab (booted: %v)", name, l.GuestNames())
	}
	return g
}

// GuestNames returns the guests' names in order.
func (l *Lab) GuestNames() []string {
	var n []string
	for k := range l.guests {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Dial opens a TCP connection from inside the lab's network namespace. The socket is
// created on a thread that has joined the namespace and keeps it after the thread leaves,
// so the caller's process stays where it is.
func (l *Lab) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return l.DialNetwork(ctx, "tcp", addr)
}

// DialNetwork is Dial for any network net.Dialer knows ("udp" too).
func (l *Lab) DialNetwork(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		c, err, restored := l.dialInNS(ctx, network, addr)
		if restored {
			runtime.UnlockOSThread()
		} // else: the goroutine exits locked and the runtime retires the thread
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

func (l *Lab) dialInNS(ctx context.Context, network, addr string) (c net.Conn, err error, restored bool) {
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, err, true
	}
	defer orig.Close()
	target, err := os.Open(filepath.Join("/run/netns", l.NS))
	if err != nil {
		return nil, fmt.Errorf("labtest: netns %s: %w", l.NS, err), true
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("labtest: setns %s: %w", l.NS, err), true
	}
	c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
	restored = unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil
	return c, err, restored
}

// Command returns a command that runs name inside the lab's network namespace
// (ip netns exec). ip execs the program in place, so cmd.Process is the program itself;
// a cancelled ctx sends it SIGTERM, then SIGKILL after 3 s.
func (l *Lab) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", l.NS, name}, args...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 3 * time.Second
	return cmd
}

// SetMTU changes the netdev MTU of the lane: its bridge, its taps and every guest's eth0.
// rxe follows the netdev (active MTU 4096 from netdev MTU 4200 up, 1024 at 1500). Other
// lanes keep theirs.
func (l *Lab) SetMTU(ctx context.Context, mtu int) error {
	out, err := exec.CommandContext(ctx, "ip", "-n", l.NS, "-o", "link", "show").Output()
	if err != nil {
		return fmt.Errorf("labtest: list links in %s: %w", l.NS, err)
	}
	var links []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 1 {
			name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
			if l.isTap(name) || name == l.Bridge {
				links = append(links, name)
			}
		}
	}
	// Raise: taps first, then the bridge; lowering works in the same order.
	sort.Slice(links, func(i, j int) bool { return l.isTap(links[i]) && !l.isTap(links[j]) })
	for _, dev := range links {
		if b, err := exec.CommandContext(ctx, "ip", "-n", l.NS, "link", "set", dev, "mtu", strconv.Itoa(mtu)).CombinedOutput(); err != nil {
			return fmt.Errorf("labtest: set mtu %d on %s: %v: %s", mtu, dev, err, b)
		}
	}
	for _, g := range l.guests {
		if r, err := g.Run(ctx, fmt.Sprintf("/sbin/ip link set eth0 mtu %d", mtu)); err != nil || r.RC != 0 {
			return fmt.Errorf("labtest: guest %s mtu %d: %v %s", g.Name, mtu, err, r.Out)
		}
	}
	l.MTU = mtu
	return nil
}

// Port returns the TCP port the lane uses where a tool's default is base: base itself in
// lane 0, base+100*L in lane L. The stock tools listen on every address, and so do ours, so
// two lanes running the same tool at once need two ports.
func (l *Lab) Port(base int) int {
	n, _ := strconv.Atoi(l.lane)
	return base + 100*n
}

// RunDir is the lane's directory of runtime files (interop/run/DIST): captures and logs.
func (l *Lab) RunDir() string { return filepath.Join(l.Dir, "run", l.Dist) }

// Tap returns the name of guest name's tap on the lane's bridge.
func (l *Lab) Tap(name string) string { return "labtap" + l.lane + name }

// isTap reports whether link is the tap of one of the lane's guests.
func (l *Lab) isTap(link string) bool {
	for name := range l.guests {
		if link == l.Tap(name) {
			return true
		}
	}
	return false
}

// ActiveMTU returns the guest's rxe0 port active MTU in bytes (ibv_devinfo).
func (g *Guest) ActiveMTU(ctx context.Context) (int, error) {
	r, err := g.Run(ctx, "ibv_devinfo -d rxe0 | awk '/active_mtu/{print $2; exit}'")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(r.Out))
}

// HostLinkLocal turns IPv6 on for the host side of the bridge (the lab boots with it
// off) and returns the bridge's fe80:: address, zoned to the bridge, once duplicate
// address detection is over (at most 10 s). It is the host's address for RoCEv2 over
// IPv6, GID index 0 on rxe.
func (l *Lab) HostLinkLocal(ctx context.Context) (netip.Addr, error) {
	br := l.Bridge
	if b, err := exec.CommandContext(ctx, "ip", "netns", "exec", l.NS, "sysctl", "-qw",
		"net.ipv6.conf."+br+".disable_ipv6=0").CombinedOutput(); err != nil {
		return netip.Addr{}, fmt.Errorf("labtest: enable IPv6 on %s: %v: %s", br, err, b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.CommandContext(ctx, "ip", "-n", l.NS, "-6", "-o", "addr", "show", "dev", br, "scope", "link").Output()
		if err != nil {
			return netip.Addr{}, fmt.Errorf("labtest: ip -6 addr on %s: %w", br, err)
		}
		f := strings.Fields(string(out))
		for i := 0; i+1 < len(f); i++ {
			if f[i] != "inet6" || strings.Contains(string(out), "tentative") {
				continue
			}
			p, err := netip.ParsePrefix(f[i+1])
			if err == nil {
				return p.Addr().WithZone(br), nil
			}
		}
		if time.Now().After(deadline) {
			return netip.Addr{}, fmt.Errorf("labtest: no usable link-local address on %s: %q", br, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
