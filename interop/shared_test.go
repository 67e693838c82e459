package interop

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/interop/labtest"
)

// TestSharedCM runs the connection manager both ways between the stock tools
// in a guest and goroce programs that share the host's address with roced:
// roced owns the address and QP1, and rping-go and roce-perftest attach to
// it (their -d/-a/-I is roced's address), so their CM MADs go through
// roced's router. Both directions of rping and of perftest write_bw -R,
// and stock ucmatose and udaddy clients against an attached program with
// its own listener.
func TestSharedCM(t *testing.T) {
	lab := labtest.Open(t)
	g := lab.Guest(t, "a")
	sock := filepath.Join(t.TempDir(), "roced.sock")
	p := startRoced(t, lab, "-pingpong=false", "-ud-pingpong=false", "-rping=false", "-socket", sock)
	t.Setenv("GOROCE_ROCED_SOCKET", sock) // the programs below attach through it
	host := lab.HostIP.String()
	rp := toolBin(t, "GOROCE_RPING", "cmd/rping-go")
	attached := func(t *testing.T, comm string, before int) {
		t.Helper()
		if n := strings.Count(p.stderr.String(), "msg=attached"); n <= before {
			t.Errorf("%s did not attach to roced:\n%s", comm, tail(p.stderr.String(), 10))
		}
	}

	t.Run("rxe rping client -> attached rping-go", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		n0 := strings.Count(p.stderr.String(), "msg=attached")
		port := fmt.Sprint(lab.Port(7174) + 11)
		srv := lab.Command(ctx, rp, "-s", "-V", "-v", "-a", host, "-p", port, "-C", fmt.Sprint(rpingCount))
		var so, se bytes.Buffer
		srv.Stdout, srv.Stderr = &so, &se
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- srv.Wait() }()
		// The stock client retries until the server's listen is up.
		var res labtest.Result
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			var err error
			res, err = g.Run(ctx, stockRping(fmt.Sprintf("-c -V -v -a %s -p %s -C %d", host, port, rpingCount)))
			if err != nil {
				t.Fatal(err)
			}
			if res.RC == 0 || time.Now().After(deadline) {
				break
			}
		}
		if res.RC != 0 {
			t.Errorf("stock rping client exit %d:\n%s\nrping-go:\n%s%s", res.RC, tail(res.Out, 10), so.String(), se.String())
		}
		rpingLines(t, "rping -c", res.Out, "ping data: ")
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("rping-go -s: %v\n%s", err, se.String())
			}
		case <-time.After(30 * time.Second):
			srv.Process.Kill()
			t.Errorf("rping-go -s did not end after its client")
		}
		attached(t, "rping-go -s", n0)
	})

	t.Run("attached rping-go client -> rxe rping", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		n0 := strings.Count(p.stderr.String(), "msg=attached")
		port := fmt.Sprint(lab.Port(7174) + 12)
		job, err := g.Start(ctx, stockRping(fmt.Sprintf("-s -V -v -a %s -p %s -C %d", g.IP, port, rpingCount)))
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			out, err = lab.Command(ctx, rp, "-c", "-V", "-v", "-I", host, "-a", g.IP.String(), "-p", port,
				"-C", fmt.Sprint(rpingCount)).CombinedOutput()
			if err == nil || time.Now().After(deadline) || !strings.Contains(string(out), "REJECTED") && !strings.Contains(string(out), "UNREACHABLE") {
				break
			}
		}
		if err != nil {
			t.Errorf("attached rping-go -c: %v\n%s", err, out)
		}
		rpingLines(t, "rping-go -c", string(out), "ping data: ")
		srv, err := waitJob(job, 30*time.Second)
		if err != nil || srv.RC != 0 {
			t.Errorf("stock rping -s: %v rc %d\n%s", err, srv.RC, tail(srv.Out, 10))
		}
		attached(t, "rping-go -c", n0)
	})

	bin := toolBin(t, "GOROCE_PERFTEST", "cmd/roce-perftest")
	c := ptCase{test: "write_bw", size: 4096, iters: 100, extra: []string{"-R"}}
	for _, dir := range []ptDirection{ptOursToRxe, ptRxeToOurs} {
		t.Run("perftest -R "+dir.short(), func(t *testing.T) {
			n0 := strings.Count(p.stderr.String(), "msg=attached")
			runPerftest(t, lab, g, rocePerftest(bin), c, dir)
			attached(t, "roce-perftest", n0)
		})
	}
	// A program with its own listener: the ucmatose and udaddy peer (this
	// test binary, see runCMTool) opens the host's address and attaches.
	for _, tool := range []struct{ role, format, transport string }{
		{"ucmatose", "ucmatose -s %s -C %d -S %d", "RC (rdma_cm)"},
		{"udaddy", "udaddy -s %s -C %d -S %d", "UD (SIDR)"},
	} {
		t.Run(tool.role+" -> attached peer", func(t *testing.T) {
			n0 := strings.Count(p.stderr.String(), "msg=attached")
			min := uint64(cmtoolCount + 3)
			if tool.role == "udaddy" {
				min = cmtoolCount + 1
			}
			runCMTool(t, tool.role, tool.format, tool.transport, min)
			attached(t, tool.role+" peer", n0)
		})
	}
	m, _ := p.scrape(t)
	if v := m["roce_steer_misrouted_total"]; v != 0 {
		t.Errorf("roce_steer_misrouted_total = %v", v)
	}
}
