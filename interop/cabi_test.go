package interop

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/interop/labtest"
)

// The rows of this file run Debian's own binaries (ibverbs-utils, perftest), not
// rebuilt, on goroce's libibverbs.so.1 (cabi/): on the host side of the lab with
// LD_LIBRARY_PATH=cabi/lib and GOROCE_DEVICES naming the host address, against
// rxe in the guests.

var cabiOnce struct {
	sync.Once
	dir string // cabi/, built
	err error
}

// cabiDir builds cabi (bash cabi/build.sh) once per test binary and returns its
// directory; GOROCE_CABI names one already built.
func cabiDir(t *testing.T) string {
	t.Helper()
	cabiOnce.Do(func() {
		if d := os.Getenv("GOROCE_CABI"); d != "" {
			cabiOnce.dir = d
			return
		}
		d, err := filepath.Abs("../cabi")
		if err != nil {
			cabiOnce.err = err
			return
		}
		if out, err := exec.Command("bash", filepath.Join(d, "build.sh")).CombinedOutput(); err != nil {
			cabiOnce.err = fmt.Errorf("cabi/build.sh: %v\n%s", err, out)
			return
		}
		cabiOnce.dir = d
	})
	if cabiOnce.err != nil {
		t.Fatal(cabiOnce.err)
	}
	return cabiOnce.dir
}

// stockTool returns the path of a stock binary on the host, failing t when its
// package is not installed (interop/run.sh installs them).
func stockTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed on the host (apt-get install ibverbs-utils perftest): %v", name, err)
	}
	return p
}

// cabiCommand is prog with args on goroce's libibverbs, on the device at addr,
// printing goroce's counters when it closes the device.
func cabiCommand(dir, addr, prog string, args ...string) (string, []string) {
	return "/usr/bin/env", append([]string{
		"LD_LIBRARY_PATH=" + filepath.Join(dir, "lib"),
		"GOROCE_DEVICES=" + addr,
		"GOROCE_STATS=1",
		prog,
	}, args...)
}

// cabiPingpong is goroce's side of a pingpong row played by the stock
// ibv_*_pingpong itself on cabi's libibverbs.
func cabiPingpong(t *testing.T, dir string) ppOurs {
	return ppOurs{tool: "ibv_*_pingpong on goroce libibverbs", who: "stock pingpong on goroce",
		command: func(c ppCase, addr, gid string, port int) (string, []string) {
			prog := stockTool(t, "ibv_"+c.mode+"_pingpong")
			args := []string{"-d", "goroce0", "-g", gid, "-p", strconv.Itoa(port), "-n", strconv.Itoa(c.iters),
				"-s", strconv.Itoa(c.size), "-c"}
			if c.events {
				args = append(args, "-e")
			}
			if c.qps > 0 {
				args = append(args, "-q", strconv.Itoa(c.qps))
			}
			if c.mtu > 0 {
				args = append(args, "-m", strconv.Itoa(c.mtu))
			}
			return cabiCommand(dir, addr, prog, args...)
		}}
}

// TestCABIPingpong runs the stock ibv_{rc,uc,ud,srq}_pingpong on goroce's
// libibverbs against the same tools on rxe, both ways, with buffer validation
// (-c), busy-polling and with completion events (-e), with the checks of
// TestPingpong.
func TestCABIPingpong(t *testing.T) {
	lab := labtest.Open(t)
	ours := cabiPingpong(t, cabiDir(t))
	g := lab.Guest(t, "a")
	const n = 200
	var cases []ppCase
	for _, s := range []int{1, 4096, 65536} {
		cases = append(cases, ppCase{mode: "rc", size: s, iters: n}, ppCase{mode: "rc", size: s, iters: n, events: true})
	}
	cases = append(cases,
		ppCase{mode: "uc", size: 4096, iters: n},
		ppCase{mode: "ud", size: 1, iters: n},
		ppCase{mode: "ud", size: 1024, iters: n, events: true},
		ppCase{mode: "srq", size: 4096, iters: n, qps: 4, events: true},
	)
	for _, c := range cases {
		for _, dir := range []direction{oursToRxe, rxeToOurs} {
			t.Run(c.name()+"/"+dirShort(dir), func(t *testing.T) { runPingpong(t, lab, g, ours, c, dir) })
		}
	}
}

// TestCABIPingpongMTU4096 is TestCABIPingpong with rxe's active MTU at 4096.
func TestCABIPingpongMTU4096(t *testing.T) {
	lab := labtest.Open(t)
	ours := cabiPingpong(t, cabiDir(t))
	g := lab.Guest(t, "a")
	withMTU4096(t, lab, g)
	for _, c := range []ppCase{
		{mode: "rc", size: 65536, iters: 200, mtu: 4096},
		{mode: "ud", size: 4096, iters: 200, events: true},
	} {
		for _, dir := range []direction{oursToRxe, rxeToOurs} {
			t.Run(c.name()+"/"+dirShort(dir), func(t *testing.T) { runPingpong(t, lab, g, ours, c, dir) })
		}
	}
}

// withMTU4096 raises the lab's netdev MTU to 9000 (rxe's active MTU 4096) until t ends.
func withMTU4096(t *testing.T, lab *labtest.Lab, g *labtest.Guest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old := lab.MTU
	if err := lab.SetMTU(ctx, 9000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := lab.SetMTU(ctx, old); err != nil {
			t.Errorf("restore MTU %d: %v", old, err)
		}
	})
	if mtu, err := g.ActiveMTU(ctx); err != nil || mtu != 4096 {
		t.Fatalf("rxe active MTU after netdev MTU 9000 = %d, %v; want 4096", mtu, err)
	}
}

// devinfoFields reads ibv_devinfo -v's "name: value" lines into a map; the GID
// lines are keyed "GID[i]".
func devinfoFields(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || k == "" || strings.ContainsAny(k, " \t") && !strings.HasPrefix(k, "GID[") {
			continue
		}
		k = strings.ReplaceAll(k, " ", "")
		m[k] = strings.TrimSpace(v)
	}
	return m
}

// TestCABIDevinfo runs the stock ibv_devices and ibv_devinfo -v on goroce's
// libibverbs and checks that goroce0 shows every field rxe0 shows, the port as
// rxe's, and the RoCEv2 GID of the host address.
func TestCABIDevinfo(t *testing.T) {
	lab := labtest.Open(t)
	dir := cabiDir(t)
	g := lab.Guest(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := func(prog string, args ...string) string {
		bin, a := cabiCommand(dir, lab.HostIP.String(), stockTool(t, prog), args...)
		out, err := lab.Command(ctx, bin, a...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", prog, err, out)
		}
		return string(out)
	}
	if out := run("ibv_devices"); !strings.Contains(out, "goroce0") {
		t.Errorf("ibv_devices lists no goroce0:\n%s", out)
	}
	ours := run("ibv_devinfo", "-v")
	r, err := g.Run(ctx, "ibv_devinfo -v -d rxe0")
	if err != nil || r.RC != 0 {
		t.Fatalf("ibv_devinfo in guest %s: %v %s", g.Name, err, r.Out)
	}
	of, rf := devinfoFields(ours), devinfoFields(r.Out)
	var missing []string
	for k := range rf {
		if _, ok := of[k]; !ok && !strings.HasPrefix(k, "GID[") {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("goroce0 lacks fields rxe0 shows: %v", missing)
	}
	for _, k := range []string{"transport", "state", "link_layer", "active_width", "active_speed", "phys_state",
		"active_mtu", "max_vl_num", "pkey_tbl_len", "port_cap_flags", "atomic_cap"} {
		if of[k] != rf[k] {
			t.Errorf("%s: goroce0 %q, rxe0 %q", k, of[k], rf[k])
		}
	}
	if want := "::ffff:" + lab.HostIP.String() + ", RoCE v2"; of["GID[1]"] != want {
		t.Errorf("GID[1] = %q, want %q", of["GID[1]"], want)
	}
	t.Logf("goroce0:\n%s", ours)
}

// errnoDifferences are the rows of verbs-errno where goroce answers otherwise
// than rxe, and why goroce's answer is the one the man pages ask for.
var errnoDifferences = map[string]string{
	// rxe's provider takes any opcode on a UD QP and fails the WR later; goroce
	// refuses it at post time, as ibv_post_send(3) allows and mlx5 does.
	"post_send_rdma_write_on_ud": "EINVAL at post (rxe: taken, then failed)",
	// rxe 6.1 fails a UD send longer than the path MTU with a local QP operation
	// error; goroce with a local length error, the status for a message that does
	// not fit.
	"post_send_ud_above_mtu": "LOC_LEN_ERR (rxe 6.1: LOC_QP_OP_ERR)",
	// Index 255 is past goroce's two-entry table (EINVAL, as the kernel answers past
	// its table) but an empty entry of rxe's 1024 (ENODATA).
	"create_ah_bad_sgid_index": "past the table (rxe: empty entry)",
}

// verbsErrnoRows runs cabi's verbs-errno and returns row → what it got, and its
// exit status.
func verbsErrnoRows(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && strings.HasPrefix(f[1], "got=") {
			m[f[0]] = strings.TrimPrefix(f[1], "got=")
		}
	}
	return m
}

// TestCABIVerbsErrno runs cabi's verbs-errno table (invalid arguments of every
// verb) on goroce's libibverbs and, the same binary, on rxe in the guest, and
// compares the answers row by row.
func TestCABIVerbsErrno(t *testing.T) {
	lab := labtest.Open(t)
	dir := cabiDir(t)
	g := lab.Guest(t, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	prog := filepath.Join(dir, "bin", "verbs-errno")
	bin, args := cabiCommand(dir, lab.HostIP.String(), prog, "-d", "goroce0", "-g", "1")
	out, err := lab.Command(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Errorf("verbs-errno on goroce: %v\n%s", err, out)
	}
	ours := verbsErrnoRows(string(out))
	exe, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	// The guest image has no verbs-errno: the binary travels in the command line.
	cmd := fmt.Sprintf("echo %s | base64 -d > /tmp/verbs-errno && chmod +x /tmp/verbs-errno && /tmp/verbs-errno -d rxe0 -g %d",
		base64.StdEncoding.EncodeToString(exe), g.GIDIndex)
	r, err := g.Run(ctx, cmd)
	if err != nil {
		t.Fatalf("verbs-errno in guest %s: %v", g.Name, err)
	}
	rxe := verbsErrnoRows(r.Out)
	if len(rxe) == 0 || len(ours) != len(rxe) {
		t.Fatalf("verbs-errno rows: goroce %d, rxe %d\ngoroce:\n%s\nrxe:\n%s", len(ours), len(rxe), out, r.Out)
	}
	names := make([]string, 0, len(ours))
	for k := range ours {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		why, known := errnoDifferences[k]
		switch {
		case ours[k] != rxe[k] && !known:
			t.Errorf("%s: goroce %s, rxe %s", k, ours[k], rxe[k])
		case ours[k] == rxe[k] && known:
			t.Errorf("%s: goroce and rxe now agree (%s): drop it from errnoDifferences", k, ours[k])
		case known:
			t.Logf("%s: goroce %s, rxe %s: %s", k, ours[k], rxe[k], why)
		}
	}
	t.Logf("goroce:\n%s", out)
}
