package bth_test

import (
	"testing"

	"github.com/goroce/goroce/bth"
)

func pmtuPacket(tb testing.TB, n int) []byte {
	tb.Helper()
	f := bth.Fields{Opcode: bth.RCSendMiddle, MigReq: true, PKey: 0xFFFF, DestQP: 0x11, PSN: 77}
	b := bth.Append(nil, &f, seq(n))
	bth.PutICRC(&env4, b)
	return b
}

func TestZeroAlloc(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	b := pmtuPacket(t, 4096)
	payload := seq(4096)
	f := bth.Fields{Opcode: bth.RCWriteFirst, PKey: 0xFFFF, DestQP: 0x11, RETH: bth.RETH{VA: 1, RKey: 2, DMALen: 3}}
	buf := make([]byte, 0, bth.PacketLen(f.Opcode, len(payload)))
	var sink uint32
	cases := map[string]func(){
		"Parse": func() {
			p, err := bth.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			sink += p.DestQP() + uint32(len(p.Payload())) + p.Fields().DestQP
		},
		"Append": func() { buf = bth.Append(buf[:0], &f, payload) },
		"ICRC":   func() { sink += bth.ICRC(&env4, b) },
		"ICRCv6": func() { sink += bth.ICRC(&env6, b) },
		"CheckICRC": func() {
			if !bth.CheckICRC(&env4, b) {
				t.Fatal("bad ICRC")
			}
		},
		"AcceptICRCPlace": func() {
			if !bth.AcceptICRCPlace(&env4, b, bth.BTHLen, payload) {
				t.Fatal("bad ICRC")
			}
		},
		"SolveIPv4ID": func() {
			id, _ := bth.SolveIPv4ID(&env4, b)
			sink += uint32(id)
		},
		"AcceptICRC": func() {
			if !bth.AcceptICRC(&env4, b) {
				t.Fatal("refused")
			}
		},
	}
	for name, fn := range cases {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocs/op", name, n)
		}
	}
	_ = sink
}

// BenchmarkParseVerify4K is the receive fast path for a 4 KiB-MTU packet:
// Parse plus a full ICRC check.
func BenchmarkParseVerify4K(b *testing.B) {
	pkt := pmtuPacket(b, 4096)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		p, err := bth.Parse(pkt)
		if err != nil || !bth.CheckICRC(&env4, p.Bytes()) {
			b.Fatal("bad packet")
		}
	}
}

// BenchmarkParse is Parse alone on a 4 KiB-MTU packet.
func BenchmarkParse(b *testing.B) {
	pkt := pmtuPacket(b, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bth.Parse(pkt); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendICRC4K is the send path: headers, payload copy and ICRC.
func BenchmarkAppendICRC4K(b *testing.B) {
	payload := seq(4096)
	f := bth.Fields{Opcode: bth.RCSendMiddle, PKey: 0xFFFF, DestQP: 0x11}
	buf := make([]byte, 0, bth.PacketLen(f.Opcode, len(payload)))
	b.SetBytes(int64(cap(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = bth.Append(buf[:0], &f, payload)
		bth.PutICRC(&env4, buf)
	}
}

// BenchmarkAcceptICRC4K is the receive-side ICRC check through a UDP socket
// that cannot see the IPv4 ID, for a packet sent with a nonzero ID (as rxe
// sends): one CRC pass and the ID solve.
func BenchmarkAcceptICRC4K(b *testing.B) {
	pkt := pmtuPacket(b, 4096)
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		if !bth.AcceptICRC(&env4, pkt) {
			b.Fatal("refused")
		}
	}
}

// BenchmarkSolveIPv4ID64 is the same for a small (ACK-sized) packet, where
// the solver's fixed cost dominates.
func BenchmarkSolveIPv4ID64(b *testing.B) {
	pkt := pmtuPacket(b, 64)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := bth.SolveIPv4ID(&env4, pkt); !ok {
			b.Fatal("no ID")
		}
	}
}
