package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/tool/devapi"
)

func freePort(t *testing.T, network string) int {
	t.Helper()
	switch network {
	case "udp":
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.LocalAddr().(*net.UDPAddr).Port
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// build compiles a command of the module into dir.
func build(t *testing.T, dir, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, "../"+pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

func runDevinfo(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestAgainstRoced starts a real roced (a subprocess on 127.0.0.61), keeps a
// roce-pingpong client talking to its pingpong responder, and reads the
// device, its GIDs, the QP of the session and the counters through every
// mode, as text and as JSON.
func TestAgainstRoced(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs roced")
	}
	dir := t.TempDir()
	roced, pingpong := build(t, dir, "roced"), build(t, dir, "roce-pingpong")
	udp, tcp, metrics := freePort(t, "udp"), freePort(t, "tcp"), freePort(t, "tcp")
	addr := fmt.Sprintf("127.0.0.61:%d", metrics)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	daemon := exec.CommandContext(ctx, roced, "-bind", "127.0.0.61", "-port", fmt.Sprint(udp), "-metrics", addr,
		"-pingpong-port", fmt.Sprint(tcp), "-ud-pingpong=false", "-rping=false", "-source-ports", "0")
	var derr bytes.Buffer
	daemon.Stderr = &derr
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { daemon.Process.Kill(); daemon.Wait() }()
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("roced not ready: %s", derr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A client that keeps the session busy while the QP is looked at.
	client := exec.CommandContext(ctx, pingpong, "rc", "127.0.0.61", "-d", "127.0.0.62", "-p", fmt.Sprint(tcp),
		"--roce-port", fmt.Sprint(udp), "-n", "10000000", "-s", "64")
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { client.Process.Kill(); client.Wait() }()

	code, out, errs := runDevinfo(t, "-a", addr)
	if code != 0 {
		t.Fatalf("devices: exit %d %s", code, errs)
	}
	for _, want := range []string{"hca_id:\tgoroce(127.0.0.61)\n", "\ttransport:\t\t\tInfiniBand (0)\n", "\tphys_port_cnt:\t\t\t1\n",
		"\t\tport:\t1\n", "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n", "\t\t\tmax_mtu:\t\t4096 (5)\n", "\t\t\tactive_mtu:\t\t1024 (3)\n",
		"\t\t\tlink_layer:\t\tEthernet\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("devices lacks %q:\n%s", want, out)
		}
	}
	_, out, _ = runDevinfo(t, "-a", addr, "-v")
	if !strings.Contains(out, "GID[  1]:\t\t0000:0000:0000:0000:0000:ffff:7f00:003d, RoCE v2\n") || !strings.Contains(out, "\tmax_qp:") {
		t.Errorf("devices -v:\n%s", out)
	}
	_, out, _ = runDevinfo(t, "-a", "http://"+addr+"/", "gids")
	if !strings.Contains(out, "0000:0000:0000:0000:0000:ffff:7f00:003d") || !strings.Contains(out, "127.0.0.61") {
		t.Errorf("gids:\n%s", out)
	}

	// The session's RC QP, in RTS, talking to the client.
	var qpLine string
	for qpLine == "" {
		_, out, _ = runDevinfo(t, "-a", addr, "qp")
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, " type RC state RTS ") && strings.Contains(l, " peer 127.0.0.62") {
				qpLine = l
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("no RC QP in RTS:\n%s\nroced: %s", out, derr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.HasPrefix(qpLine, "link goroce(127.0.0.61)/1 lqpn ") || !strings.Contains(qpLine, " rqpn ") || !strings.Contains(qpLine, " sq-psn ") {
		t.Errorf("qp: %q", qpLine)
	}
	code, out, _ = runDevinfo(t, "-a", addr, "-json", "qp")
	var qps []qpRow
	if err := json.Unmarshal([]byte(out), &qps); code != 0 || err != nil || len(qps) == 0 || qps[0].Link != "goroce(127.0.0.61)/1" {
		t.Errorf("qp --json: %v %q", err, out)
	}

	_, out, _ = runDevinfo(t, "-a", addr, "stat")
	if !strings.HasPrefix(out, "link goroce(127.0.0.61)/1 packets_tx_send ") || !strings.Contains(out, " icrc_errors 0") {
		t.Errorf("stat: %q", out)
	}
	code, out, _ = runDevinfo(t, "-a", addr, "--json", "stat")
	var stats []statRow
	if err := json.Unmarshal([]byte(out), &stats); code != 0 || err != nil || len(stats) != 1 || stats[0].Counters["packets_rx_send"] == 0 {
		t.Errorf("stat --json: %v %q", err, out)
	}
	code, out, _ = runDevinfo(t, "-a", addr, "--json")
	var devs []devapi.Device
	if err := json.Unmarshal([]byte(out), &devs); code != 0 || err != nil || len(devs) != 1 || devs[0].Addr != "127.0.0.61" || len(devs[0].Ports) != 1 {
		t.Errorf("--json: %v %q", err, out)
	}
	if code, _, errs := runDevinfo(t, "-a", addr, "-d", "127.0.0.99"); code != 1 || !strings.Contains(errs, "no such device") {
		t.Errorf("-d unknown: exit %d %q", code, errs)
	}
	if code, out, _ := runDevinfo(t, "-a", addr, "-d", "127.0.0.61", "gids"); code != 0 || !strings.Contains(out, "127.0.0.61") {
		t.Errorf("-d by address: exit %d %q", code, out)
	}
}

func TestCommandLine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"frob"}, 2, `unknown "frob"`},
		{[]string{"qp", "stat"}, 2, "too many arguments"},
		{[]string{"-x"}, 2, "unknown option: -x"},
		{[]string{"-a", "127.0.0.1:1"}, 1, "no roced at http://127.0.0.1:1"},
	} {
		code, _, errs := runDevinfo(t, tt.args...)
		if code != tt.code || !strings.Contains(errs, tt.msg) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%q: exit %d, %q; want %d and %q", tt.args, code, errs, tt.code, tt.msg)
		}
	}
	if code, out, _ := runDevinfo(t, "-h"); code != 0 || !strings.Contains(out, "show_gids") {
		t.Errorf("-h: %d %q", code, out)
	}
	if code, out, _ := runDevinfo(t, "-version"); code != 0 || !strings.HasPrefix(out, "roce-devinfo ") {
		t.Errorf("-version: %d %q", code, out)
	}
}
