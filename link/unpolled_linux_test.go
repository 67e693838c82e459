//go:build linux

package link

import (
	"errors"
	"net"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// datagramPair is a connected pair of non-blocking Unix datagram sockets: a
// writer to the first finds EAGAIN once the second's queue is full, as a
// UDP sender does when its send buffer is.
func datagramPair(t *testing.T) (w, r int) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[1]) })
	return fds[0], fds[1]
}

// fill writes datagrams to fd until the kernel refuses one.
func fill(t *testing.T, fd int) int {
	t.Helper()
	for n := 0; ; n++ {
		if _, err := unix.Write(fd, []byte("x")); err == unix.EAGAIN {
			return n
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

// sendOne is a Write function that sends one datagram, false on EAGAIN; it
// closes refused at the first EAGAIN.
func sendOne(refused chan struct{}, serr *error) func(fd uintptr) bool {
	var once sync.Once
	return func(fd uintptr) bool {
		_, err := unix.Write(int(fd), []byte("y"))
		if err == unix.EAGAIN {
			once.Do(func() { close(refused) })
			return false
		}
		*serr = err
		return true
	}
}

func TestUnpolledSockWaitsForRoom(t *testing.T) {
	w, r := datagramPair(t)
	s := &unpolledSock{fd: w}
	defer s.Close()
	queued := fill(t, w)
	if queued == 0 {
		t.Fatal("the queue took no datagram")
	}
	refused := make(chan struct{})
	var serr error
	done := make(chan error, 1)
	go func() { done <- s.Write(sendOne(refused, &serr)) }()
	// The writer is refused until the reader drains: read only after it has
	// been refused, so the wait is what lets it through.
	select {
	case <-refused:
	case err := <-done:
		t.Fatalf("Write returned %v before any room was made", err)
	}
	buf := make([]byte, 8)
	for range queued {
		if _, err := unix.Read(r, buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil || serr != nil {
		t.Fatalf("Write = %v, send = %v", err, serr)
	}
	if n, err := unix.Read(r, buf); err != nil || string(buf[:n]) != "y" {
		t.Fatalf("after the drain read %q, %v; want the waiting writer's datagram", buf[:n], err)
	}
}

func TestUnpolledSockCloseEndsAWaitingWrite(t *testing.T) {
	w, _ := datagramPair(t)
	s := &unpolledSock{fd: w}
	fill(t, w)
	refused := make(chan struct{})
	var serr error
	done := make(chan error, 1)
	go func() { done <- s.Write(sendOne(refused, &serr)) }()
	<-refused
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v, want net.ErrClosed", err)
	}
}

func TestUnpolledSockClosed(t *testing.T) {
	w, _ := datagramPair(t)
	s := &unpolledSock{fd: w}
	called := false
	if err := s.Control(func(uintptr) { called = true }); err != nil || !called {
		t.Fatalf("Control = %v, ran %v", err, called)
	}
	if err := s.Read(func(uintptr) bool { return true }); err == nil {
		t.Fatal("Read on a send-only socket succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := s.Control(func(uintptr) { t.Error("Control ran after Close") }); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Control after Close = %v", err)
	}
	if err := s.Write(func(uintptr) bool { t.Error("Write ran after Close"); return true }); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v", err)
	}
}
