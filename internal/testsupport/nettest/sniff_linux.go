//go:build linux

package nettest

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/bth"
)

// WirePacket is one RoCEv2 packet as an AF_PACKET socket saw it on an
// interface: the IP header fields the kernel sent and the BTH.
type WirePacket struct {
	Src, Dst netip.Addr
	TOS, TTL uint8  // IPv4 TOS / IPv6 traffic class; TTL / hop limit
	Flow     uint32 // IPv6 flow label
	DPort    uint16
	Opcode   bth.Opcode
	DestQP   uint32
}

// Sniffer captures the RoCEv2 packets to or from one UDP port on one
// interface until stopped.
type Sniffer struct {
	fd       int
	port     uint16
	done     chan struct{}
	stopping atomic.Bool
	mu       sync.Mutex
	pkts     []WirePacket
}

// Sniff starts capturing the datagrams to or from UDP port on the interface
// named ifname of the calling thread's network namespace (an AF_PACKET socket
// with a BPF port filter, which needs root: NeedRoot). A UDP GSO train is
// split into its segments, as its receiver does; on lo each datagram is kept
// once (the incoming copy).
func Sniff(t testing.TB, ifname string, port uint16) *Sniffer {
	t.Helper()
	NeedRoot(t, "an AF_PACKET capture")
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		t.Fatal(err)
	}
	const ethPAll = 0x0003
	// SOCK_RAW: frames start at the link-layer header (lo's is a 14-byte
	// Ethernet header), which PACKET_VNET_HDR needs.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(ethPAll)))
	if err != nil {
		t.Fatalf("AF_PACKET socket: %v", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(ethPAll), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		t.Fatalf("bind AF_PACKET to %s: %v", ifname, err)
	}
	// Only this port's datagrams reach the socket: other traffic on lo must
	// not fill its buffer and push ours out.
	prog, err := portFilter(port, ethHdrLen)
	if err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, prog); err != nil {
		unix.Close(fd)
		t.Fatalf("SO_ATTACH_FILTER: %v", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	// A virtio_net_hdr before each frame gives a UDP GSO super-packet's
	// segment size: lo never splits one, so the capture holds it whole, and
	// the sniffer splits it as the receiver does.
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1); err != nil {
		unix.Close(fd)
		t.Fatalf("PACKET_VNET_HDR: %v", err)
	}
	tv := unix.NsecToTimeval(int64(50 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	s := &Sniffer{fd: fd, port: port, done: make(chan struct{})}
	go s.run()
	return s
}

func (s *Sniffer) run() {
	defer close(s.done)
	buf := make([]byte, 65536)
	for {
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) && s.stopping.Load() {
				return // read dry after stop (the filter passes only this port)
			}
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		// lo shows every datagram twice (outgoing and incoming): keep one.
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		seg := 0
		if buf[1] == vnetGSOUDPL4 {
			seg = int(binary.LittleEndian.Uint16(buf[4:]))
		}
		if n < vnetHdrLen+ethHdrLen {
			continue
		}
		pkts := parseWire(buf[vnetHdrLen+ethHdrLen:n], s.port, seg)
		s.mu.Lock()
		s.pkts = append(s.pkts, pkts...)
		s.mu.Unlock()
	}
}

// Stop ends the capture once the socket is read dry and returns what it saw.
func (s *Sniffer) Stop() []WirePacket {
	s.stopping.Store(true)
	<-s.done
	unix.Close(s.fd)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pkts
}

// The virtio_net_hdr PACKET_VNET_HDR puts before each frame: flags, gso_type,
// hdr_len, gso_size (host order), csum_start, csum_offset.
const (
	vnetHdrLen   = 10
	vnetGSOUDPL4 = 5  // VIRTIO_NET_HDR_GSO_UDP_L4
	ethHdrLen    = 14 // lo's link-layer header
)

// parseWire decodes an IPv4 or IPv6 UDP datagram to or from port that holds
// BTHs: one, or for a UDP GSO super-packet (seg > 0) one per seg bytes of
// UDP payload, each with the super-packet's IP header fields.
func parseWire(b []byte, port uint16, seg int) []WirePacket {
	p, payload, ok := parseIPUDP(b, port)
	if !ok {
		return nil
	}
	if seg <= 0 {
		seg = len(payload)
	}
	var out []WirePacket
	for lo := 0; lo < len(payload); lo += seg {
		pkt, err := bth.Parse(payload[lo:min(lo+seg, len(payload))])
		if err != nil {
			continue
		}
		p.Opcode, p.DestQP = pkt.Opcode(), pkt.DestQP()
		out = append(out, p)
	}
	return out
}

// parseIPUDP decodes the IP and UDP headers of a datagram to or from port
// and returns its UDP payload.
func parseIPUDP(b []byte, port uint16) (WirePacket, []byte, bool) {
	var p WirePacket
	var udp []byte
	switch {
	case len(b) >= 20 && b[0]>>4 == 4:
		ihl := int(b[0]&0x0F) * 4
		if b[9] != unix.IPPROTO_UDP || len(b) < ihl+8 {
			return p, nil, false
		}
		p.Src, p.Dst = netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
		p.TOS, p.TTL = b[1], b[8]
		udp = b[ihl:]
	case len(b) >= 48 && b[0]>>4 == 6:
		if b[6] != unix.IPPROTO_UDP {
			return p, nil, false
		}
		w := binary.BigEndian.Uint32(b)
		p.TOS, p.Flow, p.TTL = uint8(w>>20), w&0xFFFFF, b[7]
		p.Src, p.Dst = netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40]))
		udp = b[40:]
	default:
		return p, nil, false
	}
	sport, dport := binary.BigEndian.Uint16(udp[0:]), binary.BigEndian.Uint16(udp[2:])
	if dport != port && sport != port {
		return p, nil, false
	}
	p.DPort = dport
	return p, udp[8:], true
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// portFilter is a classic BPF program for an AF_PACKET socket whose frames
// start l2 bytes before the IP header that accepts the IPv4 and IPv6 UDP
// datagrams from or to port.
func portFilter(port uint16, l2 uint32) (*unix.SockFprog, error) {
	const drop, accept = 15, 16 // instruction indexes
	skip := func(from, to int) uint8 { return uint8(to - from - 1) }
	p := uint32(port)
	raw, err := bpf.Assemble([]bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: l2, Size: 1},
		/* 1 */ bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 4},
		/* 2 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 4, SkipFalse: skip(2, 7)},
		/* 3 */ bpf.LoadAbsolute{Off: l2 + 9, Size: 1}, // IPv4 protocol
		/* 4 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_UDP, SkipFalse: skip(4, drop)},
		/* 5 */ bpf.LoadMemShift{Off: l2}, // X = IPv4 header length
		/* 6 */ bpf.Jump{Skip: uint32(skip(6, 11))},
		/* 7 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 6, SkipFalse: skip(7, drop)},
		/* 8 */ bpf.LoadAbsolute{Off: l2 + 6, Size: 1}, // IPv6 next header
		/* 9 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.IPPROTO_UDP, SkipFalse: skip(9, drop)},
		/* 10 */ bpf.LoadConstant{Dst: bpf.RegX, Val: 40},
		/* 11 */ bpf.LoadIndirect{Off: l2, Size: 2}, // UDP source port
		/* 12 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: p, SkipTrue: skip(12, accept)},
		/* 13 */ bpf.LoadIndirect{Off: l2 + 2, Size: 2}, // UDP destination port
		/* 14 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: p, SkipTrue: skip(14, accept), SkipFalse: skip(14, drop)},
		/* 15 */ bpf.RetConstant{Val: 0},
		/* 16 */ bpf.RetConstant{Val: 1 << 16},
	})
	if err != nil {
		return nil, err
	}
	f := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		f[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}, nil
}
