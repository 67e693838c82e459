//go:build linux

// Package nettest holds what tests that touch real sockets share: the root
// check, network namespaces a test creates (and deletes) with veth pairs
// between them, so a test can use interfaces and addresses of its own without
// sending anything outside the machine, and an AF_PACKET capture (Sniff) of
// the RoCEv2 packets on an interface with their IP header fields. Only tests
// import it.
package nettest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// NeedRoot skips a test that needs root (network namespaces, AF_PACKET), or
// fails it under CI, where every test must run.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if unix.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s needs root, and CI=true runs every test", why)
	}
	t.Skipf("%s needs root", why)
}

var netnsSeq atomic.Uint32

// Netns is a network namespace a test created; it is deleted at cleanup.
type Netns struct {
	t    testing.TB
	Name string
}

// NewNetns creates a network namespace with lo up and IPv6 duplicate address
// detection off.
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	NeedRoot(t, "a test network namespace")
	if _, err := exec.LookPath("ip"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("iproute2's ip is needed for a test network namespace: %v", err)
		}
		t.Skipf("iproute2's ip is needed for a test network namespace: %v", err)
	}
	ns := &Netns{t: t, Name: fmt.Sprintf("goroce-test-%d-%d", os.Getpid(), netnsSeq.Add(1))}
	ns.IP("netns", "add", ns.Name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns.Name).Run() })
	ns.IP("-n", ns.Name, "link", "set", "lo", "up")
	// No duplicate address detection on the namespace's devices: their IPv6
	// (the link-local address too) works as soon as they are up.
	ns.In(t, func() error {
		for _, conf := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+conf+"/accept_dad", []byte("0"), 0); err != nil {
				return err
			}
		}
		return nil
	})
	return ns
}

// IP runs iproute2 and fails the test on error.
func (ns *Netns) IP(args ...string) {
	ns.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		ns.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

// In runs f on a goroutine whose thread has entered the namespace: sockets
// f opens belong to it (and stay usable from any goroutine). The thread is
// never returned to the runtime's pool, so no other goroutine runs there.
// An error from f fails the test.
func (ns *Netns) In(t testing.TB, f func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := os.Open(filepath.Join("/run/netns", ns.Name))
		if err != nil {
			errc <- err
			return
		}
		defer fd.Close()
		if err := unix.Setns(int(fd.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns.Name, err)
			return
		}
		errc <- f()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// VethPair links two namespaces with a veth pair (names a in ns, b in
// peer), brings both up and gives them the addresses (CIDR notation).
func VethPair(ns, peer *Netns, a, b string, addrsA, addrsB []string) {
	ns.t.Helper()
	ns.IP("link", "add", a, "netns", ns.Name, "type", "veth", "peer", "name", b, "netns", peer.Name)
	for _, c := range []struct {
		ns    *Netns
		dev   string
		addrs []string
	}{{ns, a, addrsA}, {peer, b, addrsB}} {
		for _, ad := range c.addrs {
			args := []string{"-n", c.ns.Name, "addr", "add", ad, "dev", c.dev}
			if strings.Contains(ad, ":") {
				args = append(args, "nodad") // usable at once
			}
			c.ns.IP(args...)
		}
		c.ns.IP("-n", c.ns.Name, "link", "set", c.dev, "up")
	}
	ns.WaitUp(a)
	peer.WaitUp(b)
}

// WaitUp waits until dev's operational state is UP: until the kernel's link
// watcher has seen the carrier (it may take a second), the device drops
// what is sent through it.
func (ns *Netns) WaitUp(dev string) {
	ns.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out, err := exec.Command("ip", "-n", ns.Name, "-o", "link", "show", "dev", dev).Output()
		if err == nil && bytes.Contains(out, []byte(" state UP ")) {
			return
		}
	}
	ns.t.Fatalf("%s in %s did not come up", dev, ns.Name)
}
