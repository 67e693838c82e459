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

// sniff opens a sniffer on interface ifindex of the test's namespace. A
// port other than 0 keeps only UDP datagrams to it, filtered in the kernel:
// on a loopback that other tests flood, the socket's queue would otherwise
// fill with their traffic and drop ours.
func sniff(t *testing.T, ifindex int, port uint16) *sniffer {
	t.Helper()
	needRoot(t, "an AF_PACKET capture")
	s, err := openSniffer(t, ifindex)
	if err != nil {
		t.Fatal(err)
	}
	if port != 0 {
		if err := s.onlyUDPPort(port); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// onlyUDPPort attaches a classic BPF filter that passes IPv4 and IPv6 (no
// extension headers) UDP datagrams to port, then empties what the socket
// queued before the filter.
func (s *sniffer) onlyUDPPort(port uint16) error {
	const (
		ldbAbs  = unix.BPF_LD | unix.BPF_B | unix.BPF_ABS
		ldhAbs  = unix.BPF_LD | unix.BPF_H | unix.BPF_ABS
		ldhInd  = unix.BPF_LD | unix.BPF_H | unix.BPF_IND
		ldxMsh  = unix.BPF_LDX | unix.BPF_B | unix.BPF_MSH
		rsh     = unix.BPF_ALU | unix.BPF_RSH | unix.BPF_K
		jeq     = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret     = unix.BPF_RET | unix.BPF_K
		udp     = unix.IPPROTO_UDP
		keepAll = 0x40000
	)
	prog := []unix.SockFilter{
		{Code: ldbAbs, K: 0},                       // 0: version nibble
		{Code: rsh, K: 4},                          // 1
		{Code: jeq, K: 4, Jt: 0, Jf: 5},            // 2: IPv4, else 8
		{Code: ldbAbs, K: 9},                       // 3: protocol
		{Code: jeq, K: udp, Jt: 0, Jf: 9},          // 4: else drop
		{Code: ldxMsh, K: 0},                       // 5: X = IPv4 header length
		{Code: ldhInd, K: 2},                       // 6: UDP destination port
		{Code: jeq, K: uint32(port), Jt: 5, Jf: 6}, // 7: keep or drop
		{Code: jeq, K: 6, Jt: 0, Jf: 5},            // 8: IPv6, else drop
		{Code: ldbAbs, K: 6},                       // 9: next header
		{Code: jeq, K: udp, Jt: 0, Jf: 3},          // 10: else drop
		{Code: ldhAbs, K: 42},                      // 11: UDP destination port
		{Code: jeq, K: uint32(port), Jt: 0, Jf: 1}, // 12
		{Code: ret, K: keepAll},                    // 13: keep
		{Code: ret, K: 0},                          // 14: drop
	}
	if err := unix.SetsockoptSockFprog(s.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}); err != nil {
		return fmt.Errorf("SO_ATTACH_FILTER: %w", err)
	}
	buf := make([]byte, 1<<17)
	for {
		if _, _, err := unix.Recvfrom(s.fd, buf, unix.MSG_DONTWAIT); err != nil {
			return nil
		}
	}
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
