package attachd

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestPeerBufConnected: a UDP socket has no peer until connect(2), then has
// one until an AF_UNSPEC connect undoes it; police's check allocates nothing.
func TestPeerBufConnected(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	var p peerBuf
	if p.connected(fd) {
		t.Fatal("unconnected socket reported connected")
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}, Port: 9}); err != nil {
		t.Fatal(err)
	}
	if !p.connected(fd) {
		t.Fatal("connected socket reported unconnected")
	}
	if n := testing.AllocsPerRun(100, func() { p.connected(fd) }); n != 0 {
		t.Errorf("connected allocates %v times per call", n)
	}
	disconnect(fd)
	if p.connected(fd) {
		t.Fatal("socket still connected after disconnect")
	}
}
