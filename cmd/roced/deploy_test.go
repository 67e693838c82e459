package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
