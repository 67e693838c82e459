// Package cabitest runs Debian's own RDMA binaries (ibverbs-utils, perftest) and
// cabi's C tests on goroce's libibverbs.so.1, two processes talking over
// loopback addresses. It needs cabi/build.sh to have run; the interop suite runs
// the same binaries against rxe.
package cabitest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// cabiDir is cabi/, where build.sh put lib/ and bin/.
func cabiDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "lib", "libibverbs.so.1")); err != nil {
		t.Fatalf("cabi is not built (run bash cabi/build.sh): %v", err)
	}
	return d
}

// tool is the path of a stock binary.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is not installed (apt-get install ibverbs-utils perftest): %v", name, err)
	}
	return p
}

// command runs prog on goroce's libibverbs with the device on addr.
func command(ctx context.Context, t *testing.T, addr, prog string, args ...string) *exec.Cmd {
	return commandEnv(ctx, t, addr, nil, prog, args...)
}

// commandEnv is command with more environment variables.
func commandEnv(ctx context.Context, t *testing.T, addr string, env []string, prog string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(append(os.Environ(),
		"LD_LIBRARY_PATH="+filepath.Join(cabiDir(t), "lib"),
		"GOROCE_DEVICES="+addr,
		"GOROCE_STATS=1"), env...)
	return cmd
}

// freePort returns a TCP port nobody listens on now, for a stock tool's exchange.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// The two devices of a pair: every 127.0.0.x address is local, and each process
// owns the UDP port 4791 of its own.
const serverAddr, clientAddr = "127.0.0.42", "127.0.0.43"

// pair runs a stock server and client (the client connects to the server's TCP
// port on 127.0.0.1, retrying until the server listens) and returns both outputs.
func pair(t *testing.T, timeout time.Duration, prog string, server, client []string) (srv, cli string) {
	t.Helper()
	return pairOn(t, timeout, prog, serverAddr, clientAddr, nil, server, client)
}

// pairOn is pair with the server's and the client's devices on the addresses
// given, and env added to both.
func pairOn(t *testing.T, timeout time.Duration, prog, sAddr, cAddr string, env, server, client []string) (srv, cli string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s := commandEnv(ctx, t, sAddr, env, prog, server...)
	var so bytes.Buffer
	s.Stdout, s.Stderr = &so, &so
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	var co []byte
	var cerr error
	for {
		c := commandEnv(ctx, t, cAddr, env, prog, append(client, "127.0.0.1")...)
		co, cerr = c.CombinedOutput()
		refused := bytes.Contains(co, []byte("Couldn't connect")) || bytes.Contains(co, []byte("Unable to init the socket connection"))
		if cerr == nil || !refused || ctx.Err() != nil || len(done) > 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	if cerr != nil {
		t.Errorf("%s client: %v\n%s", filepath.Base(prog), cerr, co)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s server: %v\n%s", filepath.Base(prog), err, so.String())
		}
	case <-ctx.Done():
		t.Errorf("%s server did not end", filepath.Base(prog))
		<-done
	}
	return so.String(), string(co)
}

// stats reads the "stats: k=v ..." line GOROCE_STATS prints.
func stats(out string) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "stats: ")
		if !ok {
			continue
		}
		for _, kv := range strings.Fields(rest) {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
	}
	return m
}

// checkStats fails t unless out has goroce's counters with no error counted.
func checkStats(t *testing.T, who, out string) {
	t.Helper()
	st := stats(out)
	if len(st) == 0 {
		t.Errorf("%s printed no goroce counters:\n%s", who, out)
		return
	}
	// unknown_qp is not checked: the two programs tear down on their own, and an
	// ACK the peer flushes as it closes may find this side's QP destroyed.
	for _, k := range []string{"icrc_err", "malformed", "retry_exceeded", "rnr_retry_exceeded",
		"tx_errors", "cq_overruns", "bad_pkey", "bad_qkey", "bad_source"} {
		if v := st[k]; v != "0" {
			t.Errorf("%s: goroce counted %s=%s", who, k, v)
		}
	}
}

var summary = regexp.MustCompile(`(\d+) iters in [0-9.]+ seconds`)

// TestPingpong runs ibv_{rc,uc,ud,srq}_pingpong between two processes, with
// buffer validation, polling and sleeping on completion events, and through the
// extended send API (-N).
func TestPingpong(t *testing.T) {
	for _, c := range []struct {
		mode string
		args []string
	}{
		{"rc", []string{"-s", "1"}},
		{"rc", []string{"-s", "65536", "-e"}},
		{"rc", []string{"-s", "4096", "-m", "4096"}},
		{"rc", []string{"-s", "4096", "-N"}},
		{"uc", []string{"-s", "4096", "-e"}},
		{"ud", []string{"-s", "1024"}},
		{"ud", []string{"-s", "2048", "-e"}},
		{"srq", []string{"-s", "4096", "-q", "4", "-e"}},
	} {
		t.Run(c.mode+strings.Join(c.args, ""), func(t *testing.T) {
			port := freePort(t)
			args := append([]string{"-d", "goroce0", "-g", "1", "-n", "100", "-c", "-p", port}, c.args...)
			srv, cli := pair(t, 60*time.Second, tool(t, "ibv_"+c.mode+"_pingpong"), args, args)
			for _, side := range []struct{ who, out string }{{"server", srv}, {"client", cli}} {
				m := summary.FindStringSubmatch(side.out)
				if m == nil || m[1] != "100" {
					t.Errorf("%s: no summary of 100 iterations:\n%s", side.who, side.out)
				}
				if strings.Contains(side.out, "invalid data") {
					t.Errorf("%s found invalid data:\n%s", side.who, side.out)
				}
				checkStats(t, side.who, side.out)
			}
		})
	}
}

// TestPerftest runs perftest's bandwidth and latency tests between two processes.
func TestPerftest(t *testing.T) {
	for _, c := range []struct {
		test   string
		args   []string
		server []string // the server's only
	}{
		{"write_bw", []string{"-s", "65536", "-n", "500"}, nil},
		{"write_bw", []string{"-s", "4096", "-n", "200", "-q", "4"}, nil},
		{"write_bw", []string{"-s", "4096", "-n", "200", "-b"}, nil},
		{"send_bw", []string{"-s", "4096", "-n", "500"}, nil},
		{"read_bw", []string{"-s", "65536", "-n", "200"}, nil},
		{"atomic_bw", []string{"-n", "500"}, nil},
		{"send_lat", []string{"-s", "64", "-n", "500", "-e"}, nil},
		{"write_lat", []string{"-s", "64", "-n", "500"}, nil},
		{"read_lat", []string{"-s", "64", "-n", "500", "-e"}, nil},
		{"atomic_lat", []string{"-n", "500", "-A", "CMP_AND_SWAP", "-e"}, nil},
		{"send_bw", []string{"-s", "1024", "-n", "200", "-c", "UD"}, nil},
		{"send_lat", []string{"-a", "-n", "5"}, nil},
		// A busy-polling client answers at once, and a server sleeping on
		// events takes both CQs' events from one completion channel (perftest
		// 4.5): it waited for good once a reply overtook the ACK of the message
		// it answered (transport's pollSlice).
		{"send_lat", []string{"-s", "64", "-n", "500"}, []string{"-e"}},
	} {
		name := c.test + strings.Join(c.args, "")
		if c.server != nil {
			name += "/server" + strings.Join(c.server, "")
		}
		t.Run(name, func(t *testing.T) {
			port := freePort(t)
			args := append([]string{"-d", "goroce0", "-x", "1", "-F", "-p", port}, c.args...)
			srv, cli := pair(t, 120*time.Second, tool(t, "ib_"+c.test), append(c.server, args...), args)
			if !strings.Contains(cli, "#bytes") {
				t.Errorf("client printed no results:\n%s", cli)
			}
			checkStats(t, "server", srv)
			checkStats(t, "client", cli)
		})
	}
}

// TestDevinfo checks ibv_devices and ibv_devinfo -v on the two devices
// GOROCE_DEVICES names.
func TestDevinfo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := command(ctx, t, serverAddr+","+clientAddr, tool(t, "ibv_devices")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "goroce0") || !strings.Contains(string(out), "goroce1") {
		t.Errorf("ibv_devices: %v\n%s", err, out)
	}
	out, err = command(ctx, t, serverAddr+","+clientAddr, tool(t, "ibv_devinfo"), "-v", "-d", "goroce1").CombinedOutput()
	if err != nil {
		t.Fatalf("ibv_devinfo: %v\n%s", err, out)
	}
	for _, want := range []string{"hca_id:\tgoroce1", "state:\t\t\tPORT_ACTIVE (4)", "link_layer:\t\tEthernet",
		"GID[  1]:\t\t::ffff:" + clientAddr + ", RoCE v2"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ibv_devinfo -v has no %q:\n%s", want, out)
		}
	}
}

// TestCPrograms runs cabi's own C tests: the errno of every verb's invalid
// arguments (verbs-errno) and fork() (verbs-fork).
func TestCPrograms(t *testing.T) {
	for _, prog := range []string{"verbs-errno", "verbs-fork", "verbs-events"} {
		t.Run(prog, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, err := command(ctx, t, serverAddr, filepath.Join(cabiDir(t), "bin", prog)).CombinedOutput()
			if err != nil {
				t.Errorf("%s: %v\n%s", prog, err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// TestSymbols checks that libibverbs.so.1 and librdmacm.so.1 export exactly
// the symbols, with their versions, of Debian 12's (the .symbols files).
func TestSymbols(t *testing.T) {
	d := cabiDir(t)
	for _, lib := range []struct{ so, prefix, ref string }{
		{"libibverbs.so.1", "IBVERBS", "verbs/libibverbs.symbols"},
		{"librdmacm.so.1", "RDMACM", "rdmacm/librdmacm.symbols"},
	} {
		t.Run(lib.so, func(t *testing.T) {
			out, err := exec.Command("objdump", "-T", filepath.Join(d, "lib", lib.so)).Output()
			if err != nil {
				t.Fatalf("objdump: %v", err)
			}
			var got []string
			for _, line := range strings.Split(string(out), "\n") {
				f := strings.Fields(line)
				if len(f) < 7 || f[2] == "*UND*" || !strings.Contains(line, " D") {
					continue
				}
				ver, name := f[len(f)-2], f[len(f)-1]
				if name == ver || !strings.HasPrefix(strings.Trim(ver, "()"), lib.prefix) {
					continue // a version's own definition, or another library's symbol
				}
				if strings.HasPrefix(ver, "(") {
					got = append(got, name+"@"+strings.Trim(ver, "()"))
				} else {
					got = append(got, name+"@@"+ver)
				}
			}
			ref, err := os.ReadFile(filepath.Join(d, lib.ref))
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, l := range strings.Split(string(ref), "\n") {
				if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
					want = append(want, l)
				}
			}
			sort.Strings(got)
			sort.Strings(want)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("exported symbols differ from Debian 12's:\ngot  %d: %v\nwant %d: %v", len(got), got, len(want), want)
			}
		})
	}
}

// lockedBuf is a bytes.Buffer a process writes while a test reads it.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits until b holds s: the server said it is ready.
func waitFor(t *testing.T, b *lockedBuf, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(b.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("never printed %q:\n%s", s, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
