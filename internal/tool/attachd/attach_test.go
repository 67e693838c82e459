package attachd

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/cm/rping"
	"github.com/goroce/goroce/link"
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

func startDaemon(t *testing.T, addr netip.Addr, cfg Config) *daemon {
	t.Helper()
	if cfg.Socket == "" {
		cfg.Socket = filepath.Join(t.TempDir(), "roced.sock")
	}
	srv, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, err := srv.Share(netip.AddrPortFrom(addr, 0))
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
	dm := startDaemon(t, lo, Config{})
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
