package kubernetes

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// repoRoot is the main module's directory, which holds cmd/.
const repoRoot = "../.."

// fieldAddr stands for an address the downward API fills in (status.hostIP,
// status.podIP): one from TEST-NET-1, which parses like the node's would.
const fieldAddr = "192.0.2.1"

// binDir holds the binaries buildTools built for this test process
// (TestMain removes it); built names those already there.
var (
	binDir string
	built  = map[string]bool{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "goroce-deploy-bin")
	if err != nil {
		panic(err)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildTools builds cmd/NAME of the main module for each name not built yet,
// with the go command running these tests, and returns the directory that
// holds them.
func buildTools(t *testing.T, names ...string) string {
	t.Helper()
	args := []string{"build", "-o", binDir + string(filepath.Separator)}
	for _, n := range names {
		if !built[n] {
			args = append(args, "./cmd/"+n)
		}
	}
	if len(args) == 3 {
		return binDir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute) // a cold build on a loaded 2-core host
	defer cancel()
	cmd := exec.CommandContext(ctx, goCommand(), args...)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, n := range names {
		built[n] = true
	}
	return binDir
}

// goCommand is the go command of this toolchain, else the one on PATH.
func goCommand() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// expandArgs substitutes $(VAR) in args as the kubelet does, from the
// container's env; a downward API address field becomes addr.
func expandArgs(t *testing.T, c container, addr string) []string {
	t.Helper()
	out := make([]string, len(c.c.Args))
	for i, a := range c.c.Args {
		out[i] = varRef.ReplaceAllStringFunc(a, func(ref string) string {
			e, _ := c.env(varRef.FindStringSubmatch(ref)[1])
			switch {
			case e.ValueFrom == nil:
				return e.Value
			case e.ValueFrom.FieldRef != nil && strings.HasPrefix(e.ValueFrom.FieldRef.FieldPath, "status.") && strings.HasSuffix(e.ValueFrom.FieldRef.FieldPath, "IP"):
				return addr
			}
			t.Fatalf("%v: $(%s) comes from %+v, which this test cannot stand in for", c, e.Name, e.ValueFrom)
			return ""
		})
	}
	return out
}

// result is what a run printed and how it ended.
type result struct {
	code           int
	stdout, stderr string
}

// runTool runs bin with args, bounded in time.
func runTool(t *testing.T, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%s: %v", bin, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %q did not end within a minute", bin, args)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
}

// TestToolFlags: every goroce binary a manifest runs is built from cmd/, and
// it takes the manifest's args: run with them and -h, each binary parses
// every flag and value before it prints its usage, so the run must look
// exactly like a bare -h. A misspelt flag or a value of the wrong type exits
// with an error instead.
func TestToolFlags(t *testing.T) {
	cs := containersOf(podsOf(loadManifests(t, ".")))
	var names []string
	for _, c := range cs {
		if n := c.tool(); n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		t.Fatal("no manifest runs a goroce binary")
	}
	bin := buildTools(t, names...)
	for _, c := range cs {
		if c.tool() == "" {
			continue
		}
		exe := filepath.Join(bin, c.tool())
		want := runTool(t, exe, "-h")
		args := expandArgs(t, c, fieldAddr)
		if got := runTool(t, exe, append(args, "-h")...); got != want {
			t.Errorf("%v: %s %s -h exits %d, stderr %q; a bare -h exits %d, stderr %q",
				c, c.tool(), strings.Join(args, " "), got.code, firstLine(got.stderr), want.code, firstLine(want.stderr))
		}
		if !strings.Contains(want.stdout+want.stderr, "-") {
			t.Errorf("%v: %s -h printed no usage", c, c.tool())
		}
	}
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

// TestToolFlagsCatchTypos: the check above fails a misspelt flag and a bad
// value for each binary the manifests run, so it is not vacuous.
func TestToolFlagsCatchTypos(t *testing.T) {
	bin := buildTools(t, "roced", "rping-go")
	tests := []struct {
		tool string
		args []string
	}{
		{"roced", []string{"-bind=192.0.2.1", "-sokcet=/run/goroce/roced.sock"}},
		{"roced", []string{"-attach-max=many"}},
		{"roced", []string{"-bind=not-an-address"}},
		{"rping-go", []string{"-c", "-a", fieldAddr, "-Z"}},
	}
	for _, tt := range tests {
		exe := filepath.Join(bin, tt.tool)
		if got, want := runTool(t, exe, append(tt.args, "-h")...), runTool(t, exe, "-h"); got == want {
			t.Errorf("%s %q -h looks like a bare -h", tt.tool, tt.args)
		}
	}
}

// TestDockerfile: every ./cmd/ path the Dockerfile builds is a main package
// of the repository, every binary the manifests run is one it builds and
// installs in toolDir, its Go image is at least the go.mod's Go version, and
// the runtime image has the shell the manifests' other commands need.
func TestDockerfile(t *testing.T) {
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	text := string(df)
	built := map[string]bool{}
	for _, m := range regexp.MustCompile(`\./cmd/([A-Za-z0-9_-]+)`).FindAllStringSubmatch(text, -1) {
		built[m[1]] = true
		if !isMainPackage(t, filepath.Join(repoRoot, "cmd", m[1])) {
			t.Errorf("Dockerfile builds ./cmd/%s, which is not a main package of the repository", m[1])
		}
	}
	if len(built) == 0 {
		t.Fatal("Dockerfile builds nothing under ./cmd/")
	}
	if !regexp.MustCompile(`(?m)^COPY --from=\S+ /out/ ` + regexp.QuoteMeta(toolDir) + `$`).MatchString(text) {
		t.Errorf("Dockerfile does not copy the built binaries to %s", toolDir)
	}
	var shell []string
	for _, c := range containersOf(podsOf(loadManifests(t, "."))) {
		switch {
		case c.tool() != "":
			if !built[c.tool()] {
				t.Errorf("%v runs %s, which the Dockerfile does not build", c, c.tool())
			}
		case len(c.c.Command) > 0:
			shell = append(shell, c.c.Command[0])
		}
	}
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(text, -1)
	if len(froms) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a build and a runtime stage", len(froms))
	}
	goImage := regexp.MustCompile(`^golang:(\d+\.\d+)`).FindStringSubmatch(froms[0][1])
	modGo := goDirective(t, filepath.Join(repoRoot, "go.mod"))
	if goImage == nil || !versionAtLeast(goImage[1], modGo) {
		t.Errorf("Dockerfile builds FROM %s; go.mod needs Go %s", froms[0][1], modGo)
	}
	if runtime := froms[len(froms)-1][1]; len(shell) > 0 && !strings.HasPrefix(runtime, "debian:") {
		t.Errorf("manifests run %v, which the runtime image %s may not have", shell, runtime)
	}
}

// isMainPackage reports whether dir has a non-test Go file of package main.
func isMainPackage(t *testing.T, dir string) bool {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "package ") {
				fh.Close()
				if line == "package main" {
					return true
				}
				break
			}
		}
		fh.Close()
	}
	return false
}

// goDirective is the major.minor of go.mod's go line.
func goDirective(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s has no go line", path)
	}
	return string(m[1])
}

// versionAtLeast compares two major.minor versions.
func versionAtLeast(have, need string) bool {
	parse := func(s string) (int, int) {
		maj, min, _ := strings.Cut(s, ".")
		a, _ := strconv.Atoi(maj)
		b, _ := strconv.Atoi(min)
		return a, b
	}
	hm, hn := parse(have)
	nm, nn := parse(need)
	return hm > nm || hm == nm && hn >= nn
}
