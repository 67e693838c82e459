package tryit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testsupport/syncbuf"
)

// jobUp bounds how long a background line may take to come up on a loaded
// host; a quiet one takes well under a second.
const jobUp = 60 * time.Second

// section is the README heading whose first shell block the test runs.
const section = "## Try it on one machine"

// commands returns the lines of the first ```sh block after section.
func commands(t *testing.T, readme string) []string {
	t.Helper()
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n"+section+"\n")
	if !ok {
		t.Fatalf("README has no %q", section)
	}
	_, block, ok := strings.Cut(rest, "```sh\n")
	if !ok {
		t.Fatalf("%s has no sh block", section)
	}
	block, _, _ = strings.Cut(block, "```")
	var cmds []string
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			cmds = append(cmds, l)
		}
	}
	return cmds
}

// job is a command the block runs in the background (a line ending in &).
type job struct {
	line   string
	cmd    *exec.Cmd
	out    syncbuf.Buffer
	done   chan error
	waited bool
	err    error
}

// upLine is what a background job prints once it serves, for the tools
// that open more than one listener: roced announces its endpoints after it
// bound every one of them (its metrics listener comes before its pingpong
// and rping responders).
var upLine = map[string]string{"roced": "roced: serving RoCEv2 on "}

// TestTryItOnOneMachine runs the section's commands in order, as a user types
// them: go install, then each line in a fresh network namespace (its own
// loopback, so roced's default ports are free), a background line started with
// a short pause for it to come up, kill %N ending job N. Every line must exit 0,
// and so must every background job by the end.
func TestTryItOnOneMachine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every command")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root, and the test needs a network namespace of its own")
		}
		t.Skip("needs root for a network namespace of its own")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	cmds := commands(t, filepath.Join(root, "README.md"))
	if len(cmds) < 5 || cmds[0] != "go install ./cmd/..." {
		t.Fatalf("the block must start with go install ./cmd/...: %q", cmds)
	}
	// What the section states: every tool on roced's address, none told
	// to bind another.
	for _, line := range cmds[1:] {
		if f := strings.Fields(line); slices.Contains(f, "-d") || slices.Contains(f, "-I") {
			t.Errorf("%q names an address of its own: the section runs every tool on roced's", line)
		}
	}
	gobin := t.TempDir()
	// roced's attach socket and its clients' are the test's own, not the
	// host's /run/goroce, which the namespace shares.
	sock := filepath.Join(t.TempDir(), "roced.sock")
	env := append(os.Environ(), "GOBIN="+gobin, "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"GOROCE_ROCED_SOCKET="+sock)
	removeStaleNamespaces()
	ns := fmt.Sprintf("goroce-tryit-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v %s", err, out)
	}

	// listening reports whether a TCP socket listens on port in the namespace.
	listening := func(port string) bool {
		out, err := exec.Command("ip", "netns", "exec", ns, "ss", "-Hltn").Output()
		if err != nil {
			t.Fatalf("ss -Hltn in the namespace: %v", err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) >= 4 && strings.HasSuffix(f[3], ":"+port) {
				return true
			}
		}
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	inNS := func(line string) *exec.Cmd {
		c := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "sh", "-c", "exec "+line)
		c.Env = env
		c.Dir = root
		// A process group of its own: ip netns exec may fork, and a signal for
		// the job must reach the tool, as the shell's kill %N does.
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
		c.WaitDelay = 5 * time.Second
		return c
	}
	var jobs []*job
	defer func() {
		for _, j := range jobs {
			if !j.waited {
				syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
				<-j.done
			}
		}
	}()
	outputs := map[string]string{}
	for _, line := range cmds {
		switch {
		case line == "go install ./cmd/...":
			c := exec.CommandContext(ctx, "go", "install", "./cmd/...")
			c.Env, c.Dir = env, root
			if out, err := c.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
		case strings.HasPrefix(line, "kill %"):
			var n int
			if _, err := fmt.Sscanf(line, "kill %%%d", &n); err != nil || n < 1 || n > len(jobs) {
				t.Fatalf("%q: no such job", line)
			}
			j := jobs[n-1]
			syscall.Kill(-j.cmd.Process.Pid, syscall.SIGTERM)
			if err := wait(j, 30*time.Second); err != nil {
				t.Errorf("%s (SIGTERM): %v\n%s", j.line, err, j.out.String())
			}
		case strings.HasSuffix(line, "&"):
			j := &job{line: strings.TrimSpace(strings.TrimSuffix(line, "&")), done: make(chan error, 1)}
			j.cmd = inNS(j.line)
			j.cmd.Stdout, j.cmd.Stderr = &j.out, &j.out
			if err := j.cmd.Start(); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			go func() { j.done <- j.cmd.Wait() }()
			jobs = append(jobs, j)
			// A typist's pause: the server comes up. On a loaded machine that
			// can take longer than a pause, so wait for what says it is up: its
			// announcement, or its listener on the TCP port of its -p.
			var up func() bool
			f := strings.Fields(j.line)
			if want, ok := upLine[f[0]]; ok {
				up = func() bool { return strings.Contains(j.out.String(), want) }
			} else if i := slices.Index(f, "-p"); i >= 0 && i+1 < len(f) {
				up = func() bool { return listening(f[i+1]) }
			} else {
				t.Fatalf("%q: cannot tell when it is up (no announcement known, no -p)", line)
			}
			for deadline := time.Now().Add(jobUp); !up(); time.Sleep(50 * time.Millisecond) {
				if len(j.done) > 0 || time.Now().After(deadline) {
					t.Fatalf("%s: not up after %v (exited: %v)\n%s", j.line, jobUp, len(j.done) > 0, j.out.String())
				}
			}
		default:
			out, err := inNS(line).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", line, err, out)
			}
			outputs[line] = string(out)
			t.Logf("$ %s\n%s", line, out)
		}
	}
	for _, j := range jobs {
		if err := wait(j, 30*time.Second); err != nil {
			t.Errorf("%s: %v\n%s", j.line, err, j.out.String())
		}
	}
	// The lines did what the README says they do.
	for line, want := range map[string]string{
		"roce-pingpong rc -n 100 127.0.0.1": "100 iters in",
		"rping-go -c -a 127.0.0.1 -C 10 -v": "ping data: rdma-ping-9: ",
		"roce-devinfo":                      "hca_id:\tgoroce(127.0.0.1)",
		"roce-devinfo stat":                 "link goroce(127.0.0.1)/1 packets_tx_send ",
	} {
		if out, ran := outputs[line]; ran && !strings.Contains(out, want) {
			t.Errorf("%s printed no %q:\n%s", line, want, out)
		}
	}

	// Every command answers -version with its name and build.
	bins, _ := filepath.Glob(filepath.Join(gobin, "*"))
	if len(bins) < 6 {
		t.Errorf("go install made %q", bins)
	}
	for _, bin := range bins {
		out, err := exec.Command(bin, "-version").CombinedOutput()
		if name := filepath.Base(bin); err != nil || !strings.HasPrefix(string(out), name+" ") || strings.Count(string(out), "\n") != 1 {
			t.Errorf("%s -version: %v %q", name, err, out)
		}
	}
}

// wait waits up to d for j to exit and returns its error; a job waited for
// before returns the same error again.
func wait(j *job, d time.Duration) error {
	if j.waited {
		return j.err
	}
	select {
	case j.err = <-j.done:
	case <-time.After(d):
		syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL)
		<-j.done
		j.err = fmt.Errorf("still running after %v", d)
	}
	j.waited = true
	return j.err
}

// removeStaleNamespaces deletes the namespaces of runs of this test whose
// process is gone (a run killed by a timeout cannot delete its own).
func removeStaleNamespaces() {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		var pid int
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(f[0], "goroce-tryit-") {
			continue
		}
		if _, err := fmt.Sscanf(f[0], "goroce-tryit-%d", &pid); err == nil && syscall.Kill(pid, 0) == syscall.ESRCH {
			exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}
