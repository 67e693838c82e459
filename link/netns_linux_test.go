//go:build linux

package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/testsupport/nettest"
)

// needRoot, netns and vethPair are the shared test helpers of
// internal/testsupport/nettest.
var needRoot = nettest.NeedRoot

type netns = nettest.Netns

func newNetns(t *testing.T) *netns { return nettest.NewNetns(t) }

func vethPair(ns, peer *netns, a, b string, addrsA, addrsB []string) {
	nettest.VethPair(ns, peer, a, b, addrsA, addrsB)
}

// listen opens a UDP link in the namespace, closed at t's cleanup.
func listenIn(ns *netns, t *testing.T, addr string, cfg Config) *UDP {
	t.Helper()
	var u *UDP
	ns.In(t, func() (err error) {
		u, err = ListenUDP(netip.MustParseAddrPort(addr), cfg)
		return err
	})
	t.Cleanup(func() { u.Close() })
	return u
}

// sniff opens a sniffer on interface ifindex of the namespace.
func sniffIn(ns *netns, t *testing.T, ifindex int) *sniffer {
	t.Helper()
	var s *sniffer
	ns.In(t, func() (err error) {
		s, err = openSniffer(t, ifindex)
		return err
	})
	return s
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
