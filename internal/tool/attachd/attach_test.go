package attachd

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/cm/rping"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/steer"
	"github.com/goroce/goroce/roce"
)

// daemon is roced's sharing of one address, in the test's process: the
// server, the steered group, roced's own device on block 0 and its CM.
type daemon struct {
	srv  *Server
	dev  *Device
	own  *roce.Device
	home *cm.Manager
	addr netip.AddrPort
	sock string
}

func startDaemon(t *testing.T, addr netip.AddrPort, cfg Config) *daemon {
	t.Helper()
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(t.TempDir(), "roced.sock")
	}
	srv, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := srv.Share(addr)
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	l, err := d.Link(link.Config{})
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	gl, conn := gsi.Wrap(l)
	own, err := roce.OpenLink(gl, roce.WithMTU(roce.MTU1024))
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	r := d.StartCM(conn)
	home := cm.NewManager(r.Home(), cm.ManagerConfig{})
	go srv.Serve()
	dm := &daemon{srv: srv, dev: d, own: own, home: home, addr: d.Group().LocalAddr(), sock: cfg.Socket}
	t.Cleanup(func() {
		home.Close()
		own.Close()
		srv.Close()
	})
	return dm
}

// attachGSI opens an attached device with its CM.
func (dm *daemon) attachGSI(t *testing.T) (*roce.Device, *cm.Manager) {
	t.Helper()
	dev, conn, err := gsi.Open(dm.addr.Addr(), dm.addr.Port(), roce.WithRoced(dm.sock))
	if err != nil {
		t.Fatal(err)
	}
	if !dev.Attached() {
		dev.Close()
		t.Fatal("the device did not attach")
	}
	mgr := cm.NewManager(conn, cm.ManagerConfig{})
	t.Cleanup(func() { mgr.Close(); dev.Close() })
	return dev, mgr
}

func TestAttachRping(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	dm := startDaemon(t, netip.AddrPortFrom(lo, 0), Config{})
	devA, mgrA := dm.attachGSI(t)
	devB, mgrB := dm.attachGSI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc := netip.AddrPortFrom(lo, 7174)
	l, err := mgrA.Listen(svc, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The listen is A's alone: B cannot take it.
	if _, err := mgrB.Listen(svc, 0); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listen on %v from another process: %v, want EADDRINUSE", svc, err)
	}
	served := make(chan error, 1)
	go func() { served <- rping.Serve(ctx, devA, l, rping.Options{}) }()
	if err := rping.Client(ctx, devB, mgrB, netip.AddrPortFrom(lo, 0), svc, rping.Options{Count: 10, Validate: true}); err != nil {
		t.Fatalf("rping client: %v", err)
	}
	qa, qb := devA.QPs(), devB.QPs()
	t.Logf("A's QPs %+v, B's %+v", qa, qb)
	l.Close()
	cancel()
	<-served
}

// stop is roced's exit: its sessions end and its sockets close.
func (dm *daemon) stop() {
	dm.home.Close()
	dm.own.Close()
	dm.srv.Close()
}

// waitEvent waits for an async event of type typ on dev.
func waitEvent(t *testing.T, dev *roce.Device, typ roce.EventType, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev := <-dev.Events():
			if ev.Type == typ {
				return
			}
		case <-deadline:
			t.Fatalf("no %v within %v", typ, within)
		}
	}
}

// TestRocedRestart: roced's exit is DEVICE_FATAL for every attached
// device (their QPs go to the error state and their work fails rather
// than hangs), their sockets close, and a roced started again on the same
// socket and address serves new attaches. The rping client's disconnect
// waits for a DREP that cannot come (QP1 left with roced) until its
// Timeout, which the test shortens.
func TestRocedRestart(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	sock := filepath.Join(t.TempDir(), "roced.sock")
	dm := startDaemon(t, netip.AddrPortFrom(lo, 0), Config{Socket: sock})
	devA, mgrA := dm.attachGSI(t)
	devB, mgrB := dm.attachGSI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	svc := netip.AddrPortFrom(lo, 7175)
	l, err := mgrA.Listen(svc, 0)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- rping.Serve(ctx, devA, l, rping.Options{Timeout: 3 * time.Second}) }()
	pinged := make(chan error, 1)
	go func() {
		pinged <- rping.Client(ctx, devB, mgrB, netip.AddrPortFrom(lo, 0), svc, rping.Options{Validate: true, Timeout: 3 * time.Second})
	}()
	// Mid-run: B's QP is in RTS.
	for rts := false; !rts; {
		select {
		case err := <-pinged:
			t.Fatalf("rping ended before roced stopped: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		for _, q := range devB.QPs() {
			rts = rts || q.State == roce.QPSRTS
		}
	}
	stopped := time.Now()
	dm.stop()
	// The bound: the session's end reaches the client at once; the event
	// follows the socket's close through the engine's reader.
	waitEvent(t, devB, roce.EventDeviceFatal, 10*time.Second)
	waitEvent(t, devA, roce.EventDeviceFatal, 10*time.Second)
	t.Logf("DEVICE_FATAL on both devices %v after roced stopped", time.Since(stopped))
	select {
	case err := <-pinged:
		if err == nil {
			t.Error("rping client: nil error after roced stopped, want a failure")
		} else {
			t.Logf("rping client %v after roced stopped: %v", time.Since(stopped), err)
		}
	case <-ctx.Done():
		t.Fatal("the rping client hangs after roced stopped")
	}
	for _, q := range devB.QPs() {
		if q.State != roce.QPSErr {
			t.Errorf("QP %#x is %v after DEVICE_FATAL, want ERR", q.QPN, q.State)
		}
	}
	l.Close()
	cancel()
	<-served
	t.Logf("server ended %v after roced stopped", time.Since(stopped))

	// roced again, on the same socket and address: the old sockets are
	// closed, so its group binds, and a new process attaches.
	dm2 := startDaemon(t, dm.addr, Config{Socket: sock})
	devC, _ := dm2.attachGSI(t)
	if !devC.Attached() {
		t.Fatal("no attach after the restart")
	}
	t.Logf("attached again %v after roced stopped", time.Since(stopped))
}

// TestConnectEndsSession: a process that connects its steered socket (to
// take one peer's datagrams whatever their QPN) has the connect undone and
// its session ended on roced's next tick: its device sees DEVICE_FATAL.
func TestConnectEndsSession(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	dm := startDaemon(t, netip.AddrPortFrom(lo, 0), Config{})
	dev, _ := dm.attachGSI(t)
	cls := dm.srv.Clients()
	if len(cls) != 1 {
		t.Fatalf("%d clients, want 1", len(cls))
	}
	// The process's socket and roced's copy are one socket.
	sock := dm.dev.Group().Socket(cls[0].Block)
	if err := steer.Control(sock, func(fd int) error {
		return unix.Connect(fd, &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}})
	}); err != nil {
		t.Fatal(err)
	}
	// Bound: one drain tick (drainEvery) plus the session's end, with margin.
	waitEvent(t, dev, roce.EventDeviceFatal, 50*drainEvery)
	if v := dm.dev.Violations(); v != 1 {
		t.Errorf("violations = %d, want 1", v)
	}
	if err := steer.Control(sock, func(fd int) error { _, err := unix.Getpeername(fd); return err }); err == nil {
		t.Error("the socket is still connected")
	}
}
