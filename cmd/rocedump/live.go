package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// rocev2Filter is the classic BPF program attached to the capture socket: it
// keeps IPv4 and IPv6 UDP datagrams from or to port 4791 (IPv4: not later
// fragments; IPv6: UDP right after the fixed header) and drops everything else
// in the kernel. The socket is SOCK_DGRAM, so offsets start at the IP header;
// the version nibble tells IPv4 from IPv6 (what is neither is dropped, and
// extract checks every frame again with its EtherType).
var rocev2Filter = []bpf.Instruction{
	/* 0 */ bpf.LoadAbsolute{Off: 0, Size: 1},
	/* 1 */ bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xF0},
	/* 2 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x60, SkipTrue: 10}, // IPv6: 13
	/* 3 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0x40, SkipFalse: 16}, // neither: drop
	// IPv4
	/* 4 */ bpf.LoadAbsolute{Off: 9, Size: 1},
	/* 5 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 17, SkipFalse: 14}, // not UDP: drop
	/* 6 */ bpf.LoadAbsolute{Off: 6, Size: 2},
	/* 7 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1FFF, SkipTrue: 12}, // a later fragment: drop
	/* 8 */ bpf.LoadMemShift{Off: 0}, // X = the IPv4 header length
	/* 9 */ bpf.LoadIndirect{Off: 0, Size: 2}, // source port
	/* 10 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: rocePort, SkipTrue: 8}, // accept
	/* 11 */ bpf.LoadIndirect{Off: 2, Size: 2}, // destination port
	/* 12 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: rocePort, SkipTrue: 6, SkipFalse: 7},
	// IPv6
	/* 13 */ bpf.LoadAbsolute{Off: 6, Size: 1},
	/* 14 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: 17, SkipFalse: 5}, // not UDP: drop
	/* 15 */ bpf.LoadAbsolute{Off: 40, Size: 2},
	/* 16 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: rocePort, SkipTrue: 2},
	/* 17 */ bpf.LoadAbsolute{Off: 42, Size: 2},
	/* 18 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: rocePort, SkipFalse: 1},
	/* 19 */ bpf.RetConstant{Val: 1 << 18}, // accept: the whole datagram
	/* 20 */ bpf.RetConstant{Val: 0}, // drop
}

// errNeedRoot is the reason a live capture cannot start without privilege.
var errNeedRoot = errors.New("live capture needs root or CAP_NET_RAW (it opens an AF_PACKET socket)")

// live captures RoCEv2 datagrams on one interface.
type live struct {
	fd       int
	loopback bool
	buf      []byte
}

// htons converts v to network byte order.
func htons(v uint16) uint16 {
	return binary.NativeEndian.Uint16(binary.BigEndian.AppendUint16(nil, v))
}

// openLive opens an AF_PACKET socket on iface with rocev2Filter attached.
func openLive(iface string) (*live, error) {
	ifc, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("-i %s: %w", iface, err)
	}
	prog, err := bpf.Assemble(rocev2Filter)
	if err != nil {
		return nil, err
	}
	// Protocol 0 receives nothing until bind, so no frame slips past the filter.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			return nil, fmt.Errorf("-i %s: %w: %v", iface, errNeedRoot, err)
		}
		return nil, fmt.Errorf("-i %s: socket(AF_PACKET): %w", iface, err)
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("-i %s: SO_ATTACH_FILTER: %w", iface, err)
	}
	// A receive timeout lets the capture loop notice ^C and -c.
	tv := unix.NsecToTimeval(int64(100 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("-i %s: SO_RCVTIMEO: %w", iface, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifc.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("-i %s: bind: %w", iface, err)
	}
	return &live{fd: fd, loopback: ifc.Flags&net.FlagLoopback != 0, buf: make([]byte, 1<<18)}, nil
}

func (l *live) Close() error { return unix.Close(l.fd) }

// next returns the next captured datagram and when it arrived, or ctx's error.
// On a loopback interface every packet passes twice, leaving and arriving;
// like libpcap it keeps the arrival only.
func (l *live) next(ctx context.Context) (datagram, time.Time, error) {
	for {
		if err := ctx.Err(); err != nil {
			return datagram{}, time.Time{}, err
		}
		n, from, err := unix.Recvfrom(l.fd, l.buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return datagram{}, time.Time{}, fmt.Errorf("capture: %w", err)
		}
		ts := time.Now()
		sll, ok := from.(*unix.SockaddrLinklayer)
		if !ok || l.loopback && sll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		data := append([]byte(nil), l.buf[:min(n, len(l.buf))]...)
		d, err := fromEtherType(htons(sll.Protocol), data)
		if err != nil {
			continue
		}
		return d, ts, nil
	}
}
