//go:build linux

package bench

import (
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/tool/attachd"
)

// attached is set by the -attached variants: rcPair's devices attach to a
// roced (its attach server, in this process) that serves both addresses,
// instead of binding them.
var attached bool

// shareBoth starts roced's attach server for addrA and addrB on port and
// returns its socket; it stops at the benchmark's end. The grant lets the
// clients turn GRO on, as roced's default (-attach-gro).
func shareBoth(b *testing.B, port uint16) string {
	dir, err := os.MkdirTemp("", "bench-roced-")
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "roced.sock")
	srv, err := attachd.Listen(attachd.Config{Socket: sock, MTU: 5})
	if err != nil {
		os.RemoveAll(dir)
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close(); os.RemoveAll(dir) })
	for _, a := range []netip.Addr{addrA, addrB} {
		if _, err := srv.Share(netip.AddrPortFrom(a, port)); err != nil {
			b.Fatal(err)
		}
	}
	go srv.Serve()
	return sock
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// withAttached runs fn as the -attached variant.
func withAttached(fn func(b *testing.B)) func(b *testing.B) {
	return func(b *testing.B) {
		attached = true
		defer func() { attached = false }()
		fn(b)
	}
}
