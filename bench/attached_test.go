//go:build linux

package bench

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/internal/tool/attachd"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/roce"
)

// attached is set by the -attached variants: rcPair's devices attach to a
// roced (its attach server, in this process) that serves both addresses,
// instead of binding them.
var attached bool

// attachNoGRO has the attach server tell its clients not to turn UDP GRO
// on (roced -attach-gro=false).
var attachNoGRO bool

// shareBoth starts roced's attach server for addrA and addrB on port and
// returns its socket; it stops at the benchmark's end. The grant lets the
// clients turn GRO on, as roced's default (-attach-gro).
func shareBoth(b *testing.B, port uint16) string {
	dir, err := os.MkdirTemp("", "bench-roced-")
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "roced.sock")
	srv, err := attachd.Listen(attachd.Config{Socket: sock, MTU: 5, NoGRO: attachNoGRO})
	if err != nil {
		os.RemoveAll(dir)
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close(); os.RemoveAll(dir) })
	for _, a := range []netip.Addr{addrA, addrB} {
		d, err := srv.Share(netip.AddrPortFrom(a, port))
		if err != nil {
			b.Fatal(err)
		}
		// roced's own device on block 0, whose QP1 the CM router needs.
		l, err := d.Link(link.Config{})
		if err != nil {
			b.Fatal(err)
		}
		gl, conn := gsi.Wrap(l)
		own, err := roce.OpenLink(gl, roce.WithMTU(roce.MTU4096))
		if err != nil {
			l.Close()
			b.Fatal(err)
		}
		b.Cleanup(func() { own.Close() })
		d.StartCM(conn)
	}
	go srv.Serve()
	return sock
}

// withAttached runs fn as the -attached variant, with GRO off on the
// clients' sockets when noGRO.
func withAttached(noGRO bool, fn func(b *testing.B)) func(b *testing.B) {
	return func(b *testing.B) {
		attached, attachNoGRO = true, noGRO
		defer func() { attached, attachNoGRO = false, false }()
		fn(b)
	}
}
