//go:build linux

package link

import (
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// netnsOf is the network namespace a link's sockets live in. The sockets a
// link opens after ListenUDP (SourcePort, JoinGroup) must be made there
// too, whatever thread the caller runs on: a program (or test) that entered
// another namespace on a locked thread to open the link may call them from
// elsewhere.
type netnsOf struct {
	f        *os.File // nil if /proc was unreadable: use the caller's namespace
	dev, ino uint64
}

// currentNetns opens the calling thread's namespace. The caller must have
// its thread locked if it may differ from the process's.
func currentNetns() netnsOf {
	f, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return netnsOf{}
	}
	var st unix.Stat_t
	if unix.Fstat(int(f.Fd()), &st) != nil {
		f.Close()
		return netnsOf{}
	}
	return netnsOf{f: f, dev: st.Dev, ino: st.Ino}
}

// do runs open in the namespace: on this thread if it is already there,
// else on a thread that enters it and is then retired.
func (n netnsOf) do(open func() error) error {
	if n.f == nil {
		return open()
	}
	runtime.LockOSThread()
	var st unix.Stat_t
	if unix.Stat("/proc/thread-self/ns/net", &st) == nil && st.Dev == n.dev && st.Ino == n.ino {
		defer runtime.UnlockOSThread()
		return open()
	}
	runtime.UnlockOSThread()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- open()
	}()
	return <-errc
}

func (n netnsOf) close() {
	if n.f != nil {
		n.f.Close()
	}
}
