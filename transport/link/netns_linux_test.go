//go:build linux

package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// needRoot skips a test that needs root (network namespaces, AF_PACKET), or
// fails it under CI, where every test must run.
func needRoot(t *testing.T, why string) {
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

// netns is a network namespace a test created; it is deleted at cleanup.
type netns struct {
	t    *testing.T
	name string
}

// newNetns creates a network namespace with lo up.
func newNetns(t *testing.T) *netns {
	t.Helper()
	needRoot(t, "a test network namespace")
	if _, err := exec.LookPath("ip"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("iproute2's ip is needed for a test network namespace: %v", err)
		}
		t.Skipf("iproute2's ip is needed for a test network namespace: %v", err)
	}
	ns := &netns{t: t, name: fmt.Sprintf("goroce-link-%d-%d", os.Getpid(), netnsSeq.Add(1))}
	ns.ip("netns", "add", ns.name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns.name).Run() })
	ns.ip("-n", ns.name, "link", "set", "lo", "up")
	// No duplicate address detection on the namespace's devices: their IPv6
	// (the link-local address too) works as soon as they are up.
	ns.in(t, func() error {
		for _, conf := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+conf+"/accept_dad", []byte("0"), 0); err != nil {
				return err
			}
		}
		return nil
	})
	return ns
}

// ip runs iproute2 and fails the test on error.
func (ns *netns) ip(args ...string) {
	ns.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		ns.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

// in runs f on a goroutine whose thread has entered the namespace: sockets
// f opens belong to it (and stay usable from any goroutine). The thread is
// never returned to the runtime's pool, so no other goroutine runs there.
// An error from f fails the test.
func (ns *netns) in(t *testing.T, f func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := os.Open(filepath.Join("/run/netns", ns.name))
		if err != nil {
			errc <- err
			return
		}
		defer fd.Close()
		if err := unix.Setns(int(fd.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns.name, err)
			return
		}
		errc <- f()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// listen opens a UDP link in the namespace, closed at t's cleanup.
func (ns *netns) listen(t *testing.T, addr string, cfg Config) *UDP {
	t.Helper()
	var u *UDP
	ns.in(t, func() (err error) {
		u, err = ListenUDP(netip.MustParseAddrPort(addr), cfg)
		return err
	})
	t.Cleanup(func() { u.Close() })
	return u
}

// sniff opens a sniffer on interface ifindex of the namespace.
func (ns *netns) sniff(t *testing.T, ifindex int) *sniffer {
	t.Helper()
	var s *sniffer
	ns.in(t, func() (err error) {
		s, err = openSniffer(t, ifindex)
		return err
	})
	return s
}

// vethPair links two namespaces with a veth pair (names a in ns, b in
// peer), brings both up and gives them the addresses (CIDR notation).
func vethPair(ns, peer *netns, a, b string, addrsA, addrsB []string) {
	ns.t.Helper()
	ns.ip("link", "add", a, "netns", ns.name, "type", "veth", "peer", "name", b, "netns", peer.name)
	for _, c := range []struct {
		ns    *netns
		dev   string
		addrs []string
	}{{ns, a, addrsA}, {peer, b, addrsB}} {
		for _, ad := range c.addrs {
			args := []string{"-n", c.ns.name, "addr", "add", ad, "dev", c.dev}
			if strings.Contains(ad, ":") {
				args = append(args, "nodad") // usable at once
			}
			c.ns.ip(args...)
		}
		c.ns.ip("-n", c.ns.name, "link", "set", c.dev, "up")
	}
	ns.waitUp(a)
	peer.waitUp(b)
}

// waitUp waits until dev's operational state is UP: until the kernel's link
// watcher has seen the carrier (it may take a second), the device drops
// what is sent through it.
func (ns *netns) waitUp(dev string) {
	ns.t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		out, err := exec.Command("ip", "-n", ns.name, "-o", "link", "show", "dev", dev).Output()
		if err == nil && bytes.Contains(out, []byte(" state UP ")) {
			return
		}
	}
	ns.t.Fatalf("%s in %s did not come up", dev, ns.name)
}

// ethtoolFeature switches a netdev feature by its ethtool name (like
// `ethtool -K dev tx-udp-segmentation off`) through SIOCETHTOOL. Call it
// inside the device's namespace.
func ethtoolFeature(dev, feature string, on bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	const (
		gssetInfo   = 0x37 // ETHTOOL_GSSET_INFO
		gstrings    = 0x1b // ETHTOOL_GSTRINGS
		sfeatures   = 0x3b // ETHTOOL_SFEATURES
		ssFeatures  = 4    // ETH_SS_FEATURES
		gstringLen  = 32   // ETH_GSTRING_LEN
		ifreqLen    = 40   // struct ifreq
		ifrDataAt   = 16   // ifr_data
		setInfoSize = 20   // cmd, reserved, sset_mask, data[1]
	)
	ioctl := func(p unsafe.Pointer) error {
		var ifr [ifreqLen]byte
		copy(ifr[:unix.IFNAMSIZ-1], dev)
		*(*uintptr)(unsafe.Pointer(&ifr[ifrDataAt])) = uintptr(p)
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr[0]))); e != 0 {
			return e
		}
		return nil
	}
	info := make([]byte, 24)
	binary.NativeEndian.PutUint32(info[0:], gssetInfo)
	binary.NativeEndian.PutUint64(info[8:], 1<<ssFeatures)
	if err := ioctl(unsafe.Pointer(&info[0])); err != nil {
		return fmt.Errorf("ETHTOOL_GSSET_INFO %s: %w", dev, err)
	}
	n := int(binary.NativeEndian.Uint32(info[16:]))
	names := make([]byte, 12+gstringLen*n)
	binary.NativeEndian.PutUint32(names[0:], gstrings)
	binary.NativeEndian.PutUint32(names[4:], ssFeatures)
	binary.NativeEndian.PutUint32(names[8:], uint32(n))
	if err := ioctl(unsafe.Pointer(&names[0])); err != nil {
		return fmt.Errorf("ETHTOOL_GSTRINGS %s: %w", dev, err)
	}
	bit := -1
	for i := 0; i < n; i++ {
		s := names[12+gstringLen*i : 12+gstringLen*(i+1)]
		if string(s[:max(0, bytes.IndexByte(s, 0))]) == feature {
			bit = i
		}
	}
	if bit < 0 {
		return fmt.Errorf("%s has no feature %q", dev, feature)
	}
	blocks := (n + 31) / 32
	req := make([]uint32, 2+2*blocks)
	req[0], req[1] = sfeatures, uint32(blocks)
	req[2+2*(bit/32)] = 1 << (bit % 32) // valid
	if on {
		req[3+2*(bit/32)] = 1 << (bit % 32) // requested
	}
	if err := ioctl(unsafe.Pointer(&req[0])); err != nil {
		return fmt.Errorf("ETHTOOL_SFEATURES %s %s: %w", dev, feature, err)
	}
	return nil
}

// sniffer is an AF_PACKET socket that sees the IP packets an interface
// sends (PACKET_OUTGOING), as they leave: after software segmentation, with
// the headers the kernel wrote.
type sniffer struct {
	t  *testing.T
	fd int
}

// sniff opens a sniffer on interface ifindex of the test's namespace.
func sniff(t *testing.T, ifindex int) *sniffer {
	t.Helper()
	needRoot(t, "an AF_PACKET capture")
	s, err := openSniffer(t, ifindex)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openSniffer opens a sniffer in the calling thread's namespace, closed at
// cleanup.
func openSniffer(t *testing.T, ifindex int) (*sniffer, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		return nil, fmt.Errorf("bind AF_PACKET to interface %d: %w", ifindex, err)
	}
	// Room for a few hundred datagrams: on lo each is seen twice.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20); err != nil {
		return nil, err
	}
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, err
	}
	return &sniffer{t: t, fd: fd}, nil
}

// wirePacket is one captured IP packet, split at the UDP payload.
type wirePacket struct {
	ipUDP   []byte // IP header (with options or extension headers) and UDP header
	payload []byte
}

func (p wirePacket) is6() bool { return p.ipUDP[0]>>4 == 6 }

// ipv4ID returns the IPv4 Identification.
func (p wirePacket) ipv4ID() uint16 { return binary.BigEndian.Uint16(p.ipUDP[4:6]) }

// tos returns the TOS byte or the IPv6 traffic class.
func (p wirePacket) tos() uint8 {
	if p.is6() {
		return uint8(binary.BigEndian.Uint16(p.ipUDP[0:2]) >> 4)
	}
	return p.ipUDP[1]
}

// ttl returns the TTL or hop limit.
func (p wirePacket) ttl() uint8 {
	if p.is6() {
		return p.ipUDP[7]
	}
	return p.ipUDP[8]
}

// flowLabel returns the IPv6 flow label.
func (p wirePacket) flowLabel() uint32 { return binary.BigEndian.Uint32(p.ipUDP[0:4]) & 0xFFFFF }

// dstPort returns the UDP destination port.
func (p wirePacket) dstPort() uint16 {
	return binary.BigEndian.Uint16(p.ipUDP[len(p.ipUDP)-6:])
}

// ipv4ChecksumOK verifies the IPv4 header checksum.
func (p wirePacket) ipv4ChecksumOK() bool {
	ihl := int(p.ipUDP[0]&0x0f) * 4
	return fold(sum(0, p.ipUDP[:ihl])) == 0xffff
}

// collect returns the UDP packets to port (outgoing, in order) until n were
// seen or a quiet 300 ms passes after the deadline of 5 s.
func (s *sniffer) collect(port uint16, n int) []wirePacket {
	s.t.Helper()
	var got []wirePacket
	buf := make([]byte, 1<<17)
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		k, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			s.t.Fatalf("recvfrom AF_PACKET: %v", err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype != unix.PACKET_OUTGOING {
			continue
		}
		if p, ok := parseWire(buf[:k]); ok && p.dstPort() == port {
			got = append(got, p)
		}
	}
	return got
}

// parseWire splits an IPv4 or IPv6 (no extension headers) UDP packet.
func parseWire(b []byte) (wirePacket, bool) {
	if len(b) < 28 {
		return wirePacket{}, false
	}
	var hl int
	switch b[0] >> 4 {
	case 4:
		if b[9] != unix.IPPROTO_UDP {
			return wirePacket{}, false
		}
		hl = int(b[0]&0x0f) * 4
	case 6:
		if len(b) < 48 || b[6] != unix.IPPROTO_UDP {
			return wirePacket{}, false
		}
		hl = 40
	default:
		return wirePacket{}, false
	}
	if len(b) < hl+8 {
		return wirePacket{}, false
	}
	return wirePacket{ipUDP: bytes.Clone(b[:hl+8]), payload: bytes.Clone(b[hl+8:])}, true
}
