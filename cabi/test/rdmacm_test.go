package cabitest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// rdmacmPair runs a stock rdma_cm server on serverAddr and its client on
// clientAddr. The client connects by address, so no TCP port is shared; it is
// retried while the server is not listening yet.
func rdmacmPair(t *testing.T, timeout time.Duration, prog string, server, client []string) (srv, cli string) {
	t.Helper()
	return rdmacmPairOn(t, timeout, prog, serverAddr, clientAddr, nil, server, client)
}

// perftestRejected is how perftest's rdma_cm client reports a REJECTED CM
// event (RDMA_CM_EVENT_REJECTED is 8), as a client gets from a server whose
// device answers before the program listens: it is run again like the others.
const perftestRejected = "Unexpected CM event bl blka 8\n"

// rdmacmPairOn is rdmacmPair with the devices on the addresses given and env
// added to both programs.
func rdmacmPairOn(t *testing.T, timeout time.Duration, prog, sAddr, cAddr string, env, server, client []string) (srv, cli string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s := commandEnv(ctx, t, sAddr, env, prog, server...)
	var so lockedBuf
	s.Stdout, s.Stderr = &so, &so
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Wait() }()
	var co []byte
	var cerr error
	for {
		co, cerr = commandEnv(ctx, t, cAddr, env, prog, client...).CombinedOutput()
		refused := strings.Contains(string(co), "REJECTED") || strings.Contains(string(co), "Connection refused") ||
			strings.Contains(string(co), "rejected") || strings.Contains(string(co), perftestRejected)
		if cerr == nil || !refused || ctx.Err() != nil || len(done) > 0 {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
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
		t.Errorf("%s server did not end:\n%s", filepath.Base(prog), so.String())
		<-done
	}
	return so.String(), string(co)
}

// TestRping runs the stock rping, server and client, and checks every line the
// client prints for each ping.
func TestRping(t *testing.T) {
	for _, size := range []int{64, 4096} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			port := freePort(t)
			srv, cli := rdmacmPair(t, 60*time.Second, tool(t, "rping"),
				[]string{"-s", "-a", serverAddr, "-p", port, "-C", "10", "-S", fmt.Sprint(size)},
				[]string{"-c", "-a", serverAddr, "-p", port, "-C", "10", "-S", fmt.Sprint(size), "-v"})
			var pings []string
			for _, l := range strings.Split(cli, "\n") {
				if strings.HasPrefix(l, "ping data: ") {
					pings = append(pings, l)
				}
			}
			if len(pings) != 10 {
				t.Fatalf("client printed %d pings, want 10:\n%s", len(pings), cli)
			}
			for i, l := range pings {
				if !strings.HasPrefix(l, fmt.Sprintf("ping data: rdma-ping-%d: ", i)) {
					t.Errorf("ping %d: %q", i, l)
				}
			}
			checkStats(t, "server", srv)
			checkStats(t, "client", cli)
		})
	}
}

// TestRdmacmTools runs the stock ucmatose, udaddy, rdma_server/rdma_client and
// cmtime, server and client on goroce's librdmacm.
func TestRdmacmTools(t *testing.T) {
	for _, c := range []struct {
		prog, want     string
		server, client []string
	}{
		{"ucmatose", "test complete", []string{"-b", serverAddr, "-C", "10"}, []string{"-s", serverAddr, "-C", "10"}},
		// udaddy's -p is the port space: it keeps its default port.
		{"udaddy", "test complete", []string{"-b", serverAddr, "-C", "10"}, []string{"-s", serverAddr, "-C", "10"}},
		{"rdma_server", "rdma_client: end 0", nil, nil},
	} {
		t.Run(c.prog, func(t *testing.T) {
			port := freePort(t)
			prog, server, client := c.prog, c.server, c.client
			if prog == "ucmatose" {
				server, client = append(server, "-p", port), append(client, "-p", port)
			}
			if c.prog == "rdma_server" {
				server = []string{"-s", serverAddr, "-p", port}
				client = []string{"-s", serverAddr, "-p", port}
			}
			var srv, cli string
			if c.prog == "rdma_server" {
				srv, cli = rdmacmServerClient(t, tool(t, "rdma_server"), tool(t, "rdma_client"), server, client)
			} else {
				srv, cli = rdmacmPair(t, 60*time.Second, tool(t, prog), server, client)
			}
			if !strings.Contains(cli, c.want) {
				t.Errorf("client did not print %q:\n%s\nserver:\n%s", c.want, cli, srv)
			}
		})
	}
}

// rdmacmServerClient is rdmacmPair for a server and client of two programs.
func rdmacmServerClient(t *testing.T, server, client string, sargs, cargs []string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := command(ctx, t, serverAddr, server, sargs...)
	var so lockedBuf
	s.Stdout, s.Stderr = &so, &so
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	var co []byte
	for ctx.Err() == nil {
		co, _ = command(ctx, t, clientAddr, client, cargs...).CombinedOutput()
		if !strings.Contains(string(co), "refused") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := s.Wait(); err != nil {
		t.Errorf("%s: %v\n%s", filepath.Base(server), err, so.String())
	}
	return so.String(), string(co)
}

var cmtimeConnect = regexp.MustCompile(`connect\s*:\s*([0-9.]+)`)

// TestCmtime opens and closes 100 connections at once with the stock cmtime.
// Its server serves until killed.
func TestCmtime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	port := freePort(t)
	s := command(ctx, t, serverAddr, tool(t, "cmtime"), "-b", serverAddr, "-p", port)
	var so lockedBuf
	s.Stdout, s.Stderr = &so, &so
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		s.Process.Kill()
		s.Wait()
	}()
	var out []byte
	var err error
	for ctx.Err() == nil {
		out, err = command(ctx, t, clientAddr, tool(t, "cmtime"), "-s", serverAddr, "-p", port, "-c", "100").CombinedOutput()
		if err == nil || !strings.Contains(string(out), "REJECTED") {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || !cmtimeConnect.Match(out) || strings.Contains(string(out), "error:") {
		t.Fatalf("cmtime client: %v\n%s\nserver:\n%s", err, out, so.String())
	}
	t.Logf("%s", out)
}

// TestPerftestRdmacm runs perftest through rdma_cm (-R).
func TestPerftestRdmacm(t *testing.T) {
	for _, c := range []struct {
		test string
		args []string
	}{
		{"write_bw", []string{"-n", "200", "-q", "2"}},
		{"send_lat", []string{"-n", "200"}},
		{"read_bw", []string{"-n", "200"}},
		{"send_bw", []string{"-n", "200", "-c", "UD"}},
		{"atomic_lat", []string{"-n", "200"}},
	} {
		t.Run(c.test+strings.Join(c.args, ""), func(t *testing.T) {
			port := freePort(t)
			args := append([]string{"-R", "-d", "goroce0", "-x", "1", "-F", "-p", port}, c.args...)
			if !strings.HasPrefix(c.test, "write_") {
				// Sleeping on events (perftest refuses -e for WRITE): two
				// busy pollers on a loaded 2-core host take turns slowly.
				args = append(args, "-e")
			}
			_, cli := rdmacmPair(t, 90*time.Second, tool(t, "ib_"+c.test), args, append(args, serverAddr))
			if !strings.Contains(cli, "#bytes") {
				t.Errorf("client printed no results:\n%s", cli)
			}
		})
	}
}

// TestCMErrors runs cabi's cm-errors: a connect to a port nobody listens on is
// REJECTED with reason 8 (invalid service ID), one to an address that never
// answers is UNREACHABLE with -ETIMEDOUT (GOROCE_CM_RETRIES=1 makes it give up
// in about 13 s instead of a minute), a reject's private data reaches the
// client, an unread event goes with its id, and a reader of a destroyed channel
// sleeps.
func TestCMErrors(t *testing.T) {
	bin := filepath.Join(cabiDir(t), "bin", "cm-errors")
	run := func(t *testing.T, addr string, env []string, args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := command(ctx, t, addr, bin, args...)
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("cm-errors %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	t.Run("noport", func(t *testing.T) {
		// A listener of another port makes the CM of serverAddr answer.
		port := freePort(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s := command(ctx, t, serverAddr, bin, "-t", "reject-server", "-b", serverAddr, "-p", port)
		var so lockedBuf
		s.Stdout = &so
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			s.Process.Kill()
			s.Wait()
		}()
		waitFor(t, &so, "listening")
		other := freePort(t)
		if out := run(t, clientAddr, nil, "-t", "noport", "-a", serverAddr, "-p", other); !strings.Contains(out, "RDMA_CM_EVENT_REJECTED status 8") {
			t.Errorf("want REJECTED status 8:\n%s", out)
		}
	})
	t.Run("reject", func(t *testing.T) {
		port := freePort(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s := command(ctx, t, serverAddr, bin, "-t", "reject-server", "-b", serverAddr, "-p", port)
		var so lockedBuf
		s.Stdout = &so
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, &so, "listening")
		out := run(t, clientAddr, nil, "-t", "reject", "-a", serverAddr, "-p", port)
		if !strings.Contains(out, "RDMA_CM_EVENT_REJECTED status 28 private_data no thanks") {
			t.Errorf("want REJECTED status 28 with the private data:\n%s", out)
		}
		if err := s.Wait(); err != nil {
			t.Errorf("reject-server: %v\n%s", err, so.String())
		}
	})
	t.Run("withdraw", func(t *testing.T) {
		// An id destroyed with an event unread: the channel must not poll
		// readable for it (a thread in rdma_get_cm_event would wake to
		// nothing, and rping's, after its program closed the channel, to
		// EBADF).
		if out := run(t, clientAddr, nil, "-t", "withdraw", "-a", serverAddr); !strings.Contains(out, "cm-errors withdraw: quiet") {
			t.Errorf("want a quiet channel:\n%s", out)
		}
	})
	t.Run("late-reader", func(t *testing.T) {
		// rdma_get_cm_event entered after the program destroyed the channel
		// sleeps, as a reader that came a moment earlier does: rping's event
		// thread loops back into it while rping's main thread tears down, and
		// on a loaded host came too late, read a closed fd and exited 255.
		if out := run(t, clientAddr, nil, "-t", "late-reader", "-a", serverAddr); !strings.Contains(out, "cm-errors late-reader: blocked") {
			t.Errorf("want the late reader asleep:\n%s", out)
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		// 127.0.0.99 is local, but no goroce device is there: nobody answers.
		out := run(t, clientAddr, []string{"GOROCE_CM_RETRIES=1"}, "-t", "unreachable", "-a", "127.0.0.99", "-p", freePort(t))
		if !strings.Contains(out, "RDMA_CM_EVENT_UNREACHABLE status -110") {
			t.Errorf("want UNREACHABLE status -110 (ETIMEDOUT):\n%s", out)
		}
	})
}

// TestMckey runs the stock mckey: a receiver with two ids, each with a UD QP
// attached to the group, and a sender, which posts its ten SENDs unsignaled
// and destroys its QP at once: every datagram must still reach both QPs.
func TestMckey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	group := fmt.Sprintf("239.42.%d.%d", os.Getpid()>>8&255, os.Getpid()&255)
	mckey := tool(t, "mckey")
	// Line-buffered, so its "joined" lines say when the sender may start.
	r := command(ctx, t, serverAddr, tool(t, "stdbuf"), "-oL", mckey, "-m", group, "-b", serverAddr, "-c", "2", "-C", "10", "-S", "100")
	var ro lockedBuf
	r.Stdout, r.Stderr = &ro, &ro
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Wait() }()
	defer func() {
		if len(done) == 0 {
			r.Process.Kill()
			<-done
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); strings.Count(ro.String(), "joined dgid") < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) || len(done) > 0 {
			t.Fatalf("receiver did not join twice:\n%s", ro.String())
		}
	}
	so, err := command(ctx, t, clientAddr, mckey, "-m", group, "-b", clientAddr, "-s", "-C", "10", "-S", "100").CombinedOutput()
	if err != nil || !strings.Contains(string(so), "data transfers complete") {
		t.Fatalf("sender: %v\n%s", err, so)
	}
	select {
	case err = <-done:
		done <- err // nothing left to kill
	case <-ctx.Done():
		t.Fatalf("receiver did not get all 10 datagrams on both QPs:\n%s", ro.String())
	}
	if err != nil || !strings.Contains(ro.String(), "data transfers complete") {
		t.Errorf("receiver: %v\n%s", err, ro.String())
	}
}
