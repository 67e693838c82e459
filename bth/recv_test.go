package bth_test

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
)

// TestAcceptICRC: IPv4 packets pass whatever ID they were sent with (a UDP
// socket cannot see it), IPv6 packets pass only exactly, and a corrupted
// packet passes only by 2^-16 luck.
func TestAcceptICRC(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		f := bth.Fields{Opcode: bth.RCWriteOnly, PKey: 0xFFFF, DestQP: rng.Uint32(), PSN: bth.PSN(rng.Uint32())}
		b := bth.Append(nil, &f, make([]byte, rng.IntN(4097)))
		env := env4
		if i%3 == 0 {
			env = env6
		}
		env.IPID = uint16(rng.Uint32())
		env.SrcPort = uint16(rng.Uint32())
		bth.PutICRC(&env, b)
		rx := env
		rx.IPID = 0 // what the receiver knows
		if !bth.AcceptICRC(&rx, b) {
			t.Fatalf("case %d (%v): correct packet refused", i, env.Src)
		}
		rx.SrcPort++
		if bth.AcceptICRC(&rx, b) && env.Src.Is6() {
			t.Fatalf("case %d: IPv6 packet with another source port accepted", i)
		}
	}
	accepted := 0
	for i := range 2000 {
		f := bth.Fields{Opcode: bth.RCSendOnly, PSN: bth.PSN(i)}
		b := bth.Append(nil, &f, make([]byte, 64))
		bth.PutICRC(&env4, b)
		b[20] ^= byte(1 + i%255)
		if bth.AcceptICRC(&env4, b) {
			accepted++
		}
		bth.PutICRC(&env6, b)
		b[21] ^= 1
		if bth.AcceptICRC(&env6, b) {
			t.Fatal("corrupted IPv6 packet accepted")
		}
	}
	if accepted > 2 {
		t.Errorf("%d of 2000 corrupted IPv4 packets accepted", accepted)
	}
	if bth.AcceptICRC(&env4, make([]byte, 15)) {
		t.Error("short packet accepted")
	}
}

// TestAcceptICRCPlace: the verdict is AcceptICRC's, for good and corrupted
// packets of both families and for every opcode kind (RC FLUSH included); the
// payload lands in the destination either way; a span outside the body
// leaves the destination alone.
func TestAcceptICRCPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	ops := []bth.Opcode{bth.RCWriteMiddle, bth.RCWriteLast, bth.RCWriteFirst, bth.RCSendOnly, bth.RCFlush, bth.UCWriteLast}
	for i := range 600 {
		f := bth.Fields{Opcode: ops[i%len(ops)], PKey: 0xFFFF, DestQP: rng.Uint32(), PSN: bth.PSN(rng.Uint32()),
			RETH: bth.RETH{VA: rng.Uint64(), RKey: rng.Uint32(), DMALen: 4096}}
		payload := make([]byte, rng.IntN(4097))
		if f.Opcode == bth.RCFlush {
			payload = nil // a FLUSH carries none; its ICRC is rxe's (AcceptICRC's path)
		}
		for j := range payload {
			payload[j] = byte(rng.Uint32())
		}
		b := bth.Append(nil, &f, payload)
		env := env4
		if i%3 == 0 {
			env = env6
		}
		env.IPID = uint16(rng.Uint32())
		bth.PutICRC(&env, b)
		rx := env
		rx.IPID = 0
		if i%4 == 1 {
			// after the BTH, so the packet still parses
			b[bth.BTHLen+rng.IntN(len(b)-bth.ICRCLen-bth.BTHLen+1)] ^= byte(1 + rng.IntN(255))
		}
		pkt, err := bth.Parse(b)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		off := len(b) - bth.ICRCLen - pkt.PadCount() - len(pkt.Payload())
		dst := make([]byte, len(pkt.Payload()))
		want := bth.AcceptICRC(&rx, b)
		if got := bth.AcceptICRCPlace(&rx, b, off, dst); got != want {
			t.Fatalf("case %d (%v, %v): AcceptICRCPlace %v, AcceptICRC %v", i, f.Opcode, env.Src, got, want)
		}
		if i%4 != 1 && !want {
			t.Fatalf("case %d (%v): correct packet refused", i, f.Opcode)
		}
		if string(dst) != string(pkt.Payload()) {
			t.Fatalf("case %d (%v): destination is not the payload", i, f.Opcode)
		}
	}
	b := pmtuPacket(t, 64)
	dst := []byte{1, 2, 3, 4}
	for _, off := range []int{bth.BTHLen - 1, len(b) - bth.ICRCLen - 3} {
		if !bth.AcceptICRCPlace(&env4, b, off, dst) || string(dst) != "\x01\x02\x03\x04" {
			t.Errorf("span at %d of %d bytes: verdict or destination wrong (%x)", off, len(b), dst)
		}
	}
	if bth.AcceptICRCPlace(&env4, make([]byte, 15), 12, nil) {
		t.Error("short packet accepted")
	}
}

func TestPeekDestQP(t *testing.T) {
	f := bth.Fields{Opcode: bth.UDSendOnly, DestQP: 0xABCDEF}
	b := bth.Append(nil, &f, nil)
	if qpn, ok := bth.PeekDestQP(b); !ok || qpn != 0xABCDEF {
		t.Errorf("PeekDestQP = %#x %v", qpn, ok)
	}
	if _, ok := bth.PeekDestQP(b[:bth.BTHLen+bth.ICRCLen-1]); ok {
		t.Error("PeekDestQP accepted a packet shorter than BTH plus ICRC")
	}
}

// TestSourcePorts checks rxe's source-port derivations against values
// computed from the kernel's formulas (and, for QP1, observed on the wire:
// rxe's CM MADs leave from 55410).
func TestSourcePorts(t *testing.T) {
	for qpn, want := range map[uint32]uint16{1: 55410, 0x11: 57236, 0x12: 63494, 0x13: 53368} {
		if got := bth.QPSourcePort(qpn); got != want {
			t.Errorf("QPSourcePort(%#x) = %d, want %d", qpn, got, want)
		}
	}
	for _, tt := range []struct {
		fl   uint32
		want uint16
	}{{0x14A64, 51809}, {0xbe60a, 58917}, {bth.CalcFlowLabel(0x11, 0x12), 49458}, {bth.CalcFlowLabel(0x26, 0x123), 60210}} {
		if got := bth.FlowLabelSourcePort(tt.fl); got != tt.want {
			t.Errorf("FlowLabelSourcePort(%#x) = %d, want %d", tt.fl, got, tt.want)
		}
	}
	if got := bth.ConnectedSourcePort(0x14A64, 0, 0); got != 51809 {
		t.Errorf("ConnectedSourcePort(flow label 0x14A64) = %d, want 51809", got)
	}
	if got := bth.ConnectedSourcePort(0, 0x11, 0x12); got != 49458 {
		t.Errorf("ConnectedSourcePort(0, 0x11, 0x12) = %d, want 49458", got)
	}
}

func TestPutGRH(t *testing.T) {
	var g [bth.GRHLen]byte
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	bth.PutGRH(&g, bth.GRHFields{Src: netip.AddrFrom16(src.As16()), Dst: dst, TrafficClass: 0x28}, 100)
	h := g[20:]
	for i := range 20 {
		if g[i] != 0 {
			t.Fatalf("IPv4 GRH byte %d = %#x, want the 20 leading zeros", i, g[i])
		}
	}
	if h[0] != 0x45 || h[1] != 0x28 || binary.BigEndian.Uint16(h[2:]) != 128 || binary.BigEndian.Uint16(h[6:]) != 0x4000 ||
		h[8] != 64 || h[9] != 17 || netip.AddrFrom4([4]byte(h[12:16])) != src || netip.AddrFrom4([4]byte(h[16:20])) != dst {
		t.Fatalf("IPv4 header % x", h)
	}
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	if uint16(sum+sum>>16) != 0xFFFF {
		t.Errorf("IPv4 header checksum does not verify: % x", h)
	}
	s6, d6 := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	bth.PutGRH(&g, bth.GRHFields{Src: s6, Dst: d6, TrafficClass: 0x28}, 100)
	if binary.BigEndian.Uint32(g[0:]) != 6<<28|0x28<<20 || binary.BigEndian.Uint16(g[4:]) != 108 || g[6] != 17 || g[7] != 64 ||
		netip.AddrFrom16([16]byte(g[8:24])) != s6 || netip.AddrFrom16([16]byte(g[24:40])) != d6 {
		t.Fatalf("IPv6 header % x", g)
	}
	// The hop limit and flow label as received.
	bth.PutGRH(&g, bth.GRHFields{Src: s6, Dst: d6, TrafficClass: 0xb9, HopLimit: 3, FlowLabel: 0xabcde}, 100)
	if binary.BigEndian.Uint32(g[0:]) != 6<<28|0xb9<<20|0xabcde || g[7] != 3 {
		t.Fatalf("IPv6 header % x", g[:8])
	}
	bth.PutGRH(&g, bth.GRHFields{Src: src, Dst: dst, TrafficClass: 0x69, HopLimit: 7}, 100)
	if g[21] != 0x69 || g[28] != 7 {
		t.Fatalf("IPv4 header % x", g[20:])
	}
}
