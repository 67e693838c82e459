package metrics

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreDoesNotImportPrometheus: only this package and the daemon depend on
// client_golang; the engine and the verbs API stay free of it.
func TestCoreDoesNotImportPrometheus(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	cmd := exec.Command(goTool, "list", "-deps", "./bth/...", "./link/...", "./dcqcn/...", "./internal/core/...", "./roce/...", "./cm/...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/prometheus/") {
			t.Errorf("a core package depends on %s", p)
		}
	}
}
