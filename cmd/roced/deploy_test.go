package main

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSystemdUnit: deploy/roced.service passes `systemd-analyze verify` with its
// ExecStart pointed at the binary under test (skipped where systemd is absent).
func TestSystemdUnit(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	unit, err := os.ReadFile(filepath.Join("..", "..", "deploy", "roced.service"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(unit), "ExecStart=/usr/local/bin/roced ") {
		t.Fatal("unit has no ExecStart=/usr/local/bin/roced")
	}
	unit = []byte(strings.ReplaceAll(string(unit), "/usr/local/bin/roced", rocedBin))
	path := filepath.Join(t.TempDir(), "roced.service")
	if err := os.WriteFile(path, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sa, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestPrometheusSampleConfig: deploy/prometheus.yml passes `promtool check config`.
func TestPrometheusSampleConfig(t *testing.T) {
	promtool := needTool(t, "promtool")
	out, err := exec.Command(promtool, "check", "config", filepath.Join("..", "..", "deploy", "prometheus.yml")).CombinedOutput()
	if err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
	}
}

// TestAlertRules: deploy/roced-alerts.yml passes `promtool check rules`, and its
// unit tests (deploy/roced-alerts.test.yml) pass `promtool test rules`.
func TestAlertRules(t *testing.T) {
	promtool := needTool(t, "promtool")
	deploy := filepath.Join("..", "..", "deploy")
	for _, args := range [][]string{{"check", "rules", "roced-alerts.yml"}, {"test", "rules", "roced-alerts.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = deploy
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestDeployNamesExportedSeries: every roce_, go_ and process_ series the Grafana
// dashboard and the alert rules query is one roced exports, so a rename cannot
// leave a panel or an alert silently empty.
func TestDeployNamesExportedSeries(t *testing.T) {
	addrs := testAddrs(1)
	port := freeUDPPort(t, addrs...)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)))
	mfs := p.scrape(t)
	rules, err := os.ReadFile(filepath.Join("..", "..", "deploy", "roced-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`\b(?:roce|go|process)_[a-z0-9_]+\b`)
	for _, src := range append(dashboardExprs(t), string(rules)) {
		for _, n := range names.FindAllString(src, -1) {
			base := n
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if _, ok := mfs[strings.TrimSuffix(n, suffix)]; ok {
					base = strings.TrimSuffix(n, suffix)
				}
			}
			if _, ok := mfs[base]; !ok {
				t.Errorf("%s is queried but not exported", n)
			}
		}
	}
}

// TestSdNotify: started as systemd's Type=notify starts it, roced sends READY=1 (with
// a STATUS) once it serves, WATCHDOG=1 every half $WATCHDOG_USEC while healthy, and
// STOPPING=1 on SIGTERM.
func TestSdNotify(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addrs := testAddrs(1)
	port := freeUDPPort(t, addrs...)
	p := startDaemonCmd(t, func(args []string) *exec.Cmd {
		c := exec.Command(rocedBin, args...)
		c.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock, "WATCHDOG_USEC=200000")
		return c
	}, http.DefaultClient, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false", "-ud-pingpong=false")
	read := func() string {
		t.Helper()
		buf := make([]byte, 512)
		ln.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := ln.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}
	if got := read(); !strings.HasPrefix(got, "READY=1\nSTATUS=serving RoCEv2 on "+addrs[0].String()) {
		t.Errorf("first notification %q, want READY=1 and a STATUS", got)
	}
	for range 3 {
		if got := read(); got != "WATCHDOG=1" {
			t.Errorf("notification %q, want WATCHDOG=1", got)
		}
	}
	p.stop(10 * time.Second)
	for {
		got := read()
		if got == "STOPPING=1" {
			break
		}
		if got != "WATCHDOG=1" {
			t.Fatalf("notification %q while stopping", got)
		}
	}
}
