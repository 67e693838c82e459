package cabitest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sharedAddr is the address roced serves in TestSharedDevice: both programs of
// a pair attach to it, so their QPs share one GID.
const sharedAddr = "127.0.0.44"

// TestSharedDevice runs unmodified programs on one host through one roced
// (perftest, ibv_rc_pingpong, and rping over rdma_cm):
// roced owns sharedAddr (UDP 4791, QP1, the QPN blocks), and the server and
// the client of each pair open the same device, each attaching with its own
// block and steered socket, as two processes share one rxe device.
func TestSharedDevice(t *testing.T) {
	dir := t.TempDir()
	roced := filepath.Join(dir, "roced")
	build := exec.Command("go", "build", "-o", roced, "./cmd/roced")
	build.Dir = filepath.Dir(cabiDir(t))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building roced: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "roced.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := exec.CommandContext(ctx, roced, "-bind", sharedAddr, "-socket", sock, "-metrics", "",
		"-pingpong=false", "-ud-pingpong=false", "-rping=false")
	var log lockedBuf
	d.Stdout, d.Stderr = &log, &log
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		d.Process.Signal(os.Interrupt)
		d.Wait()
		if t.Failed() {
			t.Logf("roced:\n%s", log.String())
		}
	}()
	waitFor(t, &log, "serving RoCEv2 on "+sharedAddr)
	env := []string{"GOROCE_ROCED_SOCKET=" + sock}
	attached := func() int { return strings.Count(log.String(), "msg=attached") }

	t.Run("rping", func(t *testing.T) {
		// rdma_cm through roced: QP1 is roced's, which hands the REQ to the
		// process that listens on the port and the REP to the one that dialed.
		before := attached()
		port := freePort(t)
		srv, cli := rdmacmPairOn(t, 60*time.Second, tool(t, "rping"), sharedAddr, sharedAddr, env,
			[]string{"-s", "-a", sharedAddr, "-p", port, "-C", "10", "-S", "4096"},
			[]string{"-c", "-a", sharedAddr, "-p", port, "-C", "10", "-S", "4096", "-v", "-V"})
		if n := strings.Count(cli, "ping data: rdma-ping-"); n != 10 {
			t.Errorf("client printed %d pings, want 10:\n%s", n, cli)
		}
		checkStats(t, "server", srv)
		checkStats(t, "client", cli)
		if n := attached() - before; n < 2 {
			t.Errorf("roced logged %d attachments for the pair, want both programs", n)
		}
	})
	for _, c := range []struct {
		prog string
		args []string
	}{
		{"ib_write_bw", []string{"-d", "goroce0", "-x", "1", "-F", "-s", "1048576", "-n", "200"}},
		{"ib_send_bw", []string{"-d", "goroce0", "-x", "1", "-F", "-s", "4096", "-n", "500"}},
		{"ibv_rc_pingpong", []string{"-d", "goroce0", "-g", "1", "-n", "100", "-s", "4096", "-c"}},
	} {
		t.Run(c.prog, func(t *testing.T) {
			before := attached()
			args := append(append([]string{}, c.args...), "-p", freePort(t))
			srv, cli := pairOn(t, 120*time.Second, tool(t, c.prog), sharedAddr, sharedAddr, env, args, args)
			if strings.HasPrefix(c.prog, "ib_") && !strings.Contains(cli, "#bytes") {
				t.Errorf("client printed no results:\n%s", cli)
			}
			if m := summary.FindStringSubmatch(cli); strings.HasPrefix(c.prog, "ibv_") && (m == nil || m[1] != "100") {
				t.Errorf("client: no summary of 100 iterations:\n%s", cli)
			}
			checkStats(t, "server", srv)
			checkStats(t, "client", cli)
			// Both processes attached (the client may attach again to
			// retry its TCP connect, so at least two).
			if n := attached() - before; n < 2 {
				t.Errorf("roced logged %d attachments for the pair, want both programs", n)
			}
		})
	}
}
