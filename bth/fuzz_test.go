package bth_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
)

// canonical returns b with everything Append writes as zero cleared:
// reserved BTH and DETH bits, CNP reserved bytes, pad bytes and the ICRC.
func canonical(p bth.Packet) []byte {
	b := bytes.Clone(p.Bytes())
	b[4] &= 0xC0
	b[8] &= 0x80
	op := p.Opcode()
	if op.HasDETH() {
		b[bth.BTHLen+4] = 0
	}
	if op == bth.CNP {
		clear(b[bth.BTHLen:op.HeaderLen()])
	}
	if op.HasFETH() { // FETH bits 31..6 are reserved (the FETH follows the BTH)
		clear(b[bth.BTHLen : bth.BTHLen+3])
		b[bth.BTHLen+3] &= 0x3F
	}
	clear(b[len(b)-bth.ICRCLen-p.PadCount():])
	return b
}

func FuzzParse(f *testing.F) {
	for _, v := range goldenVectors() {
		f.Add(v.build())
	}
	sendOnly := func(n int) []byte {
		fl := bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11}
		return bth.Append(nil, &fl, make([]byte, n))
	}
	// PadCnt 3 with no payload: pad beyond payload.
	f.Add([]byte{0x04, 0x30, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 1, 0, 0, 0, 0})
	// RETH-sized bytes after a WRITE MIDDLE: read as payload, not a RETH.
	f.Add([]byte{0x07, 0, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 0, 0, 0, 0})
	// TVer 1.
	f.Add([]byte{0x04, 0x01, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 1, 0, 0, 0, 0})
	// Exactly header + ICRC: a zero-length SEND ONLY.
	f.Add(sendOnly(0))
	// 4 KiB + 1 payload: PadCnt 3.
	f.Add(sendOnly(4097))
	// Reserved bits set everywhere (byte 4, byte 8, DETH reserved byte).
	f.Add([]byte{0x64, 0x40, 0xFF, 0xFF, 0x3F, 0, 0, 1, 0x7F, 0, 0, 1, 0x80, 1, 0, 0, 0xAA, 0, 0, 1, 0, 0, 0, 0})
	// Non-canonical pad: 1-byte payload with PadCnt 0.
	f.Add([]byte{0x04, 0, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 1, 0x42, 0, 0, 0, 0})
	// FLUSH with every reserved FETH bit set.
	f.Add([]byte{0x1C, 0, 0xFF, 0xFF, 0, 0, 0, 0x11, 0x80, 0, 0, 1, 0xFF, 0xFF, 0xFF, 0xFF,
		0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 9, 0, 0, 0, 64, 0, 0, 0, 0})
	// ATOMIC WRITE with 7 bytes of payload instead of 8.
	f.Add([]byte{0x1D, 0x10, 0xFF, 0xFF, 0, 0, 0, 0x11, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 9, 0, 0, 0, 8,
		1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0})
	// ACK with a trailing payload byte.
	f.Add([]byte{0x11, 0, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 1, 0x1F, 0, 0, 1, 9, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := bth.Parse(b)
		if err != nil {
			return
		}
		op := p.Opcode()
		if p.HeaderLen() != op.HeaderLen() || !op.Valid() || p.TVer() != 0 {
			t.Fatalf("header len %d, table %d", p.HeaderLen(), op.HeaderLen())
		}
		if p.HeaderLen()+len(p.Payload())+p.PadCount()+bth.ICRCLen != len(b) {
			t.Fatal("lengths do not add up")
		}
		fl := p.Fields()
		out := bth.Append(nil, &fl, p.Payload())
		if p.PadCount() == bth.PadCount(len(p.Payload())) {
			if !bytes.Equal(out, canonical(p)) {
				t.Fatalf("round trip\n got %x\nwant %x", out, canonical(p))
			}
			return
		}
		// Non-canonical pad: Append normalises it; the fields survive.
		q, err := bth.Parse(out)
		if err != nil {
			t.Fatal(err)
		}
		if q.Fields() != fl || !bytes.Equal(q.Payload(), p.Payload()) {
			t.Fatal("fields changed through Append")
		}
	})
}

func FuzzPSN(f *testing.F) {
	f.Add(uint32(0), uint32(0xFFFFFF), 1)
	f.Add(uint32(0x800000), uint32(0), -5)
	f.Add(uint32(0x123456), uint32(0x123457), 1<<24)
	f.Fuzz(func(t *testing.T, a, b uint32, n int) {
		p, q := bth.PSN(a&bth.PSNMask), bth.PSN(b&bth.PSNMask)
		if n > 1<<30 || n < -(1<<30) {
			n %= 1 << 30
		}
		if p.Add(n).Add(-n) != p || p.Add(n) > bth.PSNMask {
			t.Fatalf("Add(%d) not invertible", n)
		}
		d := q.Diff(p)
		if d <= -(1<<23) || d > 1<<23 {
			t.Fatalf("Diff %d out of range", d)
		}
		if p.Add(int(d)) != q {
			t.Fatalf("p + (q-p) != q")
		}
		if d != 1<<23 {
			if p.Diff(q) != -d {
				t.Fatal("Diff not antisymmetric")
			}
			if p.Before(q) != q.After(p) || p.After(q) != q.Before(p) {
				t.Fatal("Before/After disagree")
			}
		}
		if (p == q) != (d == 0) || (p.Before(q) && p.After(q)) {
			t.Fatal("ordering inconsistent")
		}
		w := n & 0xFFFF
		k := int(uint32(n) >> 16 & 0xFFFF)
		if p.Add(k).InWindow(p, w) != (k < w) {
			t.Fatalf("InWindow(p+%d, p, %d)", k, w)
		}
	})
}

func FuzzICRC(f *testing.F) {
	f.Add([]byte("hello"), uint16(0), uint16(4791), false, uint8(3))
	f.Add(make([]byte, 1024), uint16(0xB6AF), uint16(55410), true, uint8(200))
	f.Fuzz(func(t *testing.T, payload []byte, id, sport uint16, v6 bool, flip uint8) {
		env := bth.Envelope{Src: netip.AddrFrom4([4]byte{10, 0, 0, 1}), Dst: netip.AddrFrom4([4]byte{10, 0, 0, 2}),
			IPID: id, DF: true, SrcPort: sport, DstPort: 4791}
		if v6 {
			env.Src, env.Dst = netip.IPv6Loopback(), netip.MustParseAddr("fd00::9")
		}
		bth.ICRC(&env, payload) // arbitrary input must not panic
		fl := bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xFFFF, DestQP: uint32(sport), PSN: bth.PSN(id)}
		b := bth.Append(nil, &fl, payload)
		bth.PutICRC(&env, b)
		if !bth.CheckICRC(&env, b) {
			t.Fatal("fresh ICRC does not check")
		}
		if got, ok := bth.SolveIPv4ID(&env, b); !v6 && (!ok || got != id) {
			t.Fatalf("SolveIPv4ID = %#x %v, want %#x", got, ok, id)
		}
		// Any single-bit error outside the masked BTH byte 4 is detected.
		i := int(flip) % len(b)
		if i == 4 {
			return
		}
		b[i] ^= 1 << (flip % 8)
		if bth.CheckICRC(&env, b) {
			t.Fatalf("bit flip at byte %d not detected", i)
		}
	})
}
