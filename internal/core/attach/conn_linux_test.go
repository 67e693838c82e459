//go:build linux

package attach

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/testsupport/nettest"
)

// TestReceivedSocketNotPolled: a socket received from roced is a plain File,
// whatever its O_NONBLOCK (roced's open file, which an earlier holder's
// reader set non-blocking): its reader polls a duplicate of its own, and a
// second registration in epoll is a second event for every datagram.
func TestReceivedSocketNotPolled(t *testing.T) {
	conns := connPair(t)
	defer conns[0].Close()
	defer conns[1].Close()
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// NewFile polls the non-blocking socket: the control that InEpoll sees it.
	sent := os.NewFile(uintptr(sock), "sent")
	defer sent.Close()
	if in, err := nettest.InEpoll(sock); err != nil || !in {
		t.Fatalf("the sender's pollable File: in epoll %v (%v), want true", in, err)
	}
	if err := conns[0].Send(&Msg{Type: TOK, Seq: 1}, sent); err != nil {
		t.Fatal(err)
	}
	_, files, err := conns[1].Recv()
	if err != nil || len(files) != 1 {
		t.Fatalf("Recv: %d files, %v", len(files), err)
	}
	defer files[0].Close()
	rc, err := files[0].SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var in bool
	var ierr error
	if err := rc.Control(func(fd uintptr) { in, ierr = nettest.InEpoll(int(fd)) }); err != nil || ierr != nil || in {
		t.Fatalf("the received socket: in epoll %v (%v, %v), want false", in, err, ierr)
	}
}
