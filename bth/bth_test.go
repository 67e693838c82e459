package bth_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
)

func TestOpcodeTable(t *testing.T) {
	type row struct {
		op                                           bth.Opcode
		name                                         string
		hdr                                          int
		req, first, middle, last, only, payload, imm bool
		exts                                         string // R=RETH A=AETH D=DETH T=AtomicETH K=AtomicAckETH I=IETH F=FETH
	}
	rows := []row{
		{bth.RCSendFirst, "RC_SEND_FIRST", 12, true, true, false, false, false, true, false, ""},
		{bth.RCSendMiddle, "RC_SEND_MIDDLE", 12, true, false, true, false, false, true, false, ""},
		{bth.RCSendLast, "RC_SEND_LAST", 12, true, false, false, true, false, true, false, ""},
		{bth.RCSendLastImm, "RC_SEND_LAST_WITH_IMMEDIATE", 16, true, false, false, true, false, true, true, ""},
		{bth.RCSendOnly, "RC_SEND_ONLY", 12, true, false, false, false, true, true, false, ""},
		{bth.RCSendOnlyImm, "RC_SEND_ONLY_WITH_IMMEDIATE", 16, true, false, false, false, true, true, true, ""},
		{bth.RCWriteFirst, "RC_RDMA_WRITE_FIRST", 28, true, true, false, false, false, true, false, "R"},
		{bth.RCWriteMiddle, "RC_RDMA_WRITE_MIDDLE", 12, true, false, true, false, false, true, false, ""},
		{bth.RCWriteLast, "RC_RDMA_WRITE_LAST", 12, true, false, false, true, false, true, false, ""},
		{bth.RCWriteLastImm, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, true, false, false, true, false, true, true, ""},
		{bth.RCWriteOnly, "RC_RDMA_WRITE_ONLY", 28, true, false, false, false, true, true, false, "R"},
		{bth.RCWriteOnlyImm, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, true, false, false, false, true, true, true, "R"},
		{bth.RCReadRequest, "RC_RDMA_READ_REQUEST", 28, true, false, false, false, true, false, false, "R"},
		{bth.RCReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", 16, false, true, false, false, false, true, false, "A"},
		{bth.RCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", 12, false, false, true, false, false, true, false, ""},
		{bth.RCReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", 16, false, false, false, true, false, true, false, "A"},
		{bth.RCReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", 16, false, false, false, false, true, true, false, "A"},
		{bth.RCAck, "RC_ACKNOWLEDGE", 16, false, false, false, false, true, false, false, "A"},
		{bth.RCAtomicAck, "RC_ATOMIC_ACKNOWLEDGE", 24, false, false, false, false, true, false, false, "AK"},
		{bth.RCCompareSwap, "RC_COMPARE_SWAP", 40, true, false, false, false, true, false, false, "T"},
		{bth.RCFetchAdd, "RC_FETCH_ADD", 40, true, false, false, false, true, false, false, "T"},
		{bth.RCSendLastInv, "RC_SEND_LAST_WITH_INVALIDATE", 16, true, false, false, true, false, true, false, "I"},
		{bth.RCSendOnlyInv, "RC_SEND_ONLY_WITH_INVALIDATE", 16, true, false, false, false, true, true, false, "I"},
		{bth.RCFlush, "RC_FLUSH", 32, true, false, false, false, true, false, false, "FR"},
		{bth.RCAtomicWrite, "RC_ATOMIC_WRITE", 28, true, false, false, false, true, true, false, "R"},
		{bth.UCSendFirst, "UC_SEND_FIRST", 12, true, true, false, false, false, true, false, ""},
		{bth.UCSendMiddle, "UC_SEND_MIDDLE", 12, true, false, true, false, false, true, false, ""},
		{bth.UCSendLast, "UC_SEND_LAST", 12, true, false, false, true, false, true, false, ""},
		{bth.UCSendLastImm, "UC_SEND_LAST_WITH_IMMEDIATE", 16, true, false, false, true, false, true, true, ""},
		{bth.UCSendOnly, "UC_SEND_ONLY", 12, true, false, false, false, true, true, false, ""},
		{bth.UCSendOnlyImm, "UC_SEND_ONLY_WITH_IMMEDIATE", 16, true, false, false, false, true, true, true, ""},
		{bth.UCWriteFirst, "UC_RDMA_WRITE_FIRST", 28, true, true, false, false, false, true, false, "R"},
		{bth.UCWriteMiddle, "UC_RDMA_WRITE_MIDDLE", 12, true, false, true, false, false, true, false, ""},
		{bth.UCWriteLast, "UC_RDMA_WRITE_LAST", 12, true, false, false, true, false, true, false, ""},
		{bth.UCWriteLastImm, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", 16, true, false, false, true, false, true, true, ""},
		{bth.UCWriteOnly, "UC_RDMA_WRITE_ONLY", 28, true, false, false, false, true, true, false, "R"},
		{bth.UCWriteOnlyImm, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", 32, true, false, false, false, true, true, true, "R"},
		{bth.UDSendOnly, "UD_SEND_ONLY", 20, true, false, false, false, true, true, false, "D"},
		{bth.UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", 24, true, false, false, false, true, true, true, "D"},
		{bth.CNP, "CNP", 28, false, false, false, false, true, false, false, ""},
	}
	seen := map[bth.Opcode]bool{}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			o := r.op
			seen[o] = true
			has := func(c byte) bool {
				for i := range len(r.exts) {
					if r.exts[i] == c {
						return true
					}
				}
				return false
			}
			got := fmt.Sprint(o.Valid(), o.String(), o.HeaderLen(), o.IsRequest(), o.IsFirst(), o.IsMiddle(), o.IsLast(), o.IsOnly(),
				o.HasPayload(), o.HasImm(), o.HasRETH(), o.HasAETH(), o.HasDETH(), o.HasAtomicETH(), o.HasAtomicAckETH(), o.HasIETH(), o.HasFETH())
			want := fmt.Sprint(true, r.name, r.hdr, r.req, r.first, r.middle, r.last, r.only,
				r.payload, r.imm, has('R'), has('A'), has('D'), has('T'), has('K'), has('I'), has('F'))
			if got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
			n := 0
			for _, b := range []bool{o.IsFirst(), o.IsMiddle(), o.IsLast(), o.IsOnly()} {
				if b {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d of first/middle/last/only set", n)
			}
		})
	}
	for i := range 256 {
		o := bth.Opcode(i)
		if !seen[o] && (o.Valid() || o.HeaderLen() != 0 || o.String() != fmt.Sprintf("OPCODE_0x%02x", i)) {
			t.Errorf("opcode %#02x: Valid %v HeaderLen %d String %q", i, o.Valid(), o.HeaderLen(), o)
		}
	}
}

func TestPSN(t *testing.T) {
	tests := []struct {
		p, q          bth.PSN
		diff          int32
		before, after bool
	}{
		{0, 0, 0, false, false},
		{1, 0, 1, false, true},
		{0, 1, -1, true, false},
		{0, 0xFFFFFF, 1, false, true}, // wrap: 0 follows 2^24-1
		{0xFFFFFF, 0, -1, true, false},
		{0x7FFFFF, 0, 0x7FFFFF, false, true},
		{0x800000, 0, 0x800000, false, true}, // exactly half: reported forward
		{0, 0x800000, 0x800000, false, true},
		{0x800001, 0, -0x7FFFFF, true, false},
		{5, 0xFFFFF0, 21, false, true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%#x-%#x", uint32(tt.p), uint32(tt.q)), func(t *testing.T) {
			if d := tt.p.Diff(tt.q); d != tt.diff {
				t.Errorf("Diff = %d, want %d", d, tt.diff)
			}
			if b := tt.p.Before(tt.q); b != tt.before {
				t.Errorf("Before = %v", b)
			}
			if a := tt.p.After(tt.q); a != tt.after {
				t.Errorf("After = %v", a)
			}
		})
	}
	adds := []struct {
		p    bth.PSN
		n    int
		want bth.PSN
	}{
		{0xFFFFFF, 1, 0}, {0, -1, 0xFFFFFF}, {0xFFFFF0, 0x20, 0x10}, {3, 1 << 24, 3}, {3, -(1 << 24) - 4, 0xFFFFFF}, {10, 0, 10},
	}
	for _, a := range adds {
		if got := a.p.Add(a.n); got != a.want {
			t.Errorf("%#x.Add(%d) = %#x, want %#x", uint32(a.p), a.n, uint32(got), uint32(a.want))
		}
	}
	wins := []struct {
		p, start bth.PSN
		n        int
		want     bool
	}{
		{5, 5, 1, true}, {6, 5, 1, false}, {4, 5, 10, false}, {0, 0xFFFFFE, 3, true}, {1, 0xFFFFFE, 3, false},
		{0xFFFFFE, 0xFFFFFE, 0, false}, {7, 8, 1 << 24, true}, {7, 8, -1, false}, {0x10, 0xFFFFF0, 128, true},
	}
	for _, w := range wins {
		if got := w.p.InWindow(w.start, w.n); got != w.want {
			t.Errorf("%#x.InWindow(%#x, %d) = %v", uint32(w.p), uint32(w.start), w.n, got)
		}
	}
}

func TestAETH(t *testing.T) {
	tests := []struct {
		syn           uint8
		ack, rnr, nak bool
		low           uint8
		name          string
	}{
		{0x1F, true, false, false, 0x1F, "ACK no credit (rxe)"},
		{0x00, true, false, false, 0, "ACK credit 0"},
		{0x2C, false, true, false, 12, "RNR NAK timer 12"},
		{0x20, false, true, false, 0, "RNR NAK timer 0 (655 ms)"},
		{0x60, false, false, true, bth.NAKPSNSeqErr, "NAK PSN sequence error"},
		{0x61, false, false, true, bth.NAKInvalidRequest, "NAK invalid request"},
		{0x62, false, false, true, bth.NAKRemoteAccess, "NAK remote access"},
		{0x63, false, false, true, bth.NAKRemoteOpErr, "NAK remote operational"},
		{0x64, false, false, true, bth.NAKInvalidRDRequest, "NAK invalid RD request"},
		{0x40, false, false, false, 0, "reserved kind 10"},
		{0x9F, false, false, false, 0x1F, "reserved bit 7 set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := bth.AETH{Syndrome: tt.syn, MSN: 7}
			if a.IsACK() != tt.ack || a.IsRNRNAK() != tt.rnr || a.IsNAK() != tt.nak {
				t.Errorf("ack/rnr/nak = %v/%v/%v", a.IsACK(), a.IsRNRNAK(), a.IsNAK())
			}
			if a.NAKCode() != tt.low || a.RNRTimer() != tt.low || a.Credit() != tt.low {
				t.Errorf("low bits %d/%d/%d, want %d", a.NAKCode(), a.RNRTimer(), a.Credit(), tt.low)
			}
		})
	}
	for v := range uint8(32) {
		if s := bth.ACKSyndrome(v); !(bth.AETH{Syndrome: s}).IsACK() || (bth.AETH{Syndrome: s}).Credit() != v {
			t.Errorf("ACKSyndrome(%d) = %#x", v, s)
		}
		if s := bth.RNRSyndrome(v); !(bth.AETH{Syndrome: s}).IsRNRNAK() || (bth.AETH{Syndrome: s}).RNRTimer() != v {
			t.Errorf("RNRSyndrome(%d) = %#x", v, s)
		}
		if s := bth.NAKSyndrome(v); !(bth.AETH{Syndrome: s}).IsNAK() || (bth.AETH{Syndrome: s}).NAKCode() != v {
			t.Errorf("NAKSyndrome(%d) = %#x", v, s)
		}
	}
	if bth.ACKSyndrome(bth.CreditInvalid) != 0x1F || bth.NAKSyndrome(bth.NAKPSNSeqErr) != 0x60 || bth.RNRSyndrome(12) != 0x2C {
		t.Error("well-known syndromes wrong")
	}
}

func TestRNRTimerDuration(t *testing.T) {
	// IBA Table 45, in milliseconds.
	ms := []float64{655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92,
		2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52}
	for code, m := range ms {
		want := time.Duration(m*1000+0.5) * time.Microsecond
		if got := bth.RNRTimerDuration(uint8(code)); got != want {
			t.Errorf("code %d: %v, want %v", code, got, want)
		}
	}
	if bth.RNRTimerDuration(32+12) != bth.RNRTimerDuration(12) {
		t.Error("only the low 5 bits should count")
	}
	if n, ok := bth.CreditCount(0x1F); ok || n != 0 {
		t.Error("credit 0x1F is invalid")
	}
	if n, ok := bth.CreditCount(30); !ok || n != 32768 {
		t.Errorf("credit 30 = %d", n)
	}
}

func TestPadCount(t *testing.T) {
	for n, want := range []int{0, 3, 2, 1, 0, 3} {
		if got := bth.PadCount(n); got != want {
			t.Errorf("PadCount(%d) = %d", n, got)
		}
		if got := bth.PacketLen(bth.RCSendOnly, n); got != 12+n+want+4 {
			t.Errorf("PacketLen(SEND_ONLY, %d) = %d", n, got)
		}
	}
	if bth.PacketLen(0x15, 0) != 0 {
		t.Error("PacketLen of an invalid opcode should be 0")
	}
}

func TestParseErrors(t *testing.T) {
	ok := func(op bth.Opcode, n int) []byte {
		f := bth.Fields{Opcode: op, PKey: 0xFFFF, DestQP: 0x11}
		return bth.Append(nil, &f, make([]byte, n))
	}
	mod := func(b []byte, f func([]byte)) []byte { f(b); return b }
	tests := []struct {
		name string
		b    []byte
		err  error
	}{
		{"empty", nil, bth.ErrTruncated},
		{"11 bytes", make([]byte, 11), bth.ErrTruncated},
		{"BTH without ICRC", ok(bth.RCSendOnly, 0)[:12], bth.ErrTruncated},
		{"RETH cut", ok(bth.RCWriteFirst, 0)[:20], bth.ErrTruncated},
		{"ACK missing ICRC byte", ok(bth.RCAck, 0)[:19], bth.ErrTruncated},
		{"TVer 1", mod(ok(bth.RCSendOnly, 4), func(b []byte) { b[1] |= 1 }), bth.ErrBadTVer},
		{"TVer checked before length", []byte{4, 0x0F, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, bth.ErrBadTVer},
		{"opcode 0x15", mod(ok(bth.RCSendOnly, 4), func(b []byte) { b[0] = 0x15 }), bth.ErrUnknownOpcode},
		{"RD opcode", mod(ok(bth.RCSendOnly, 4), func(b []byte) { b[0] = 0x44 }), bth.ErrUnknownOpcode},
		{"opcode 0x1e", mod(ok(bth.RCSendOnly, 32), func(b []byte) { b[0] = 0x1E }), bth.ErrUnknownOpcode},
		{"FLUSH with a payload", mod(ok(bth.RCSendOnly, 32), func(b []byte) { b[0] = 0x1C }), bth.ErrUnexpectedPayload},
		{"pad 3, payload 0", mod(ok(bth.RCSendOnly, 0), func(b []byte) { b[1] |= 0x30 }), bth.ErrPadOverrun},
		{"pad 3, 2 bytes left", mod(append(ok(bth.RCSendOnly, 0), 0, 0), func(b []byte) { b[1] |= 0x30 }), bth.ErrPadOverrun},
		{"pad 2, 2 bytes left", mod(append(ok(bth.RCSendOnly, 0), 0, 0), func(b []byte) { b[1] |= 0x20 }), nil},
		{"ACK with payload", append(ok(bth.RCAck, 0), 0, 0, 0, 0), bth.ErrUnexpectedPayload},
		{"ACK with pad", mod(ok(bth.RCAck, 0), func(b []byte) { b[1] |= 0x10 }), bth.ErrPadOverrun},
		{"READ request with payload", append(ok(bth.RCReadRequest, 0), 1), bth.ErrUnexpectedPayload},
		{"CNP short", ok(bth.CNP, 0)[:31], bth.ErrTruncated},
		{"valid SEND ONLY", ok(bth.RCSendOnly, 5), nil},
		{"valid WRITE MIDDLE 0 bytes", ok(bth.RCWriteMiddle, 0), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := bth.Parse(tt.b)
			if !errors.Is(err, tt.err) {
				t.Errorf("Parse = %v, want %v", err, tt.err)
			}
		})
	}
}

// TestTruncation feeds every prefix of every golden vector to Parse: below
// the header+ICRC length it must be ErrTruncated; above, either a valid
// packet with a shorter payload or ErrPadOverrun / ErrUnexpectedPayload-free
// success; never a panic.
func TestTruncation(t *testing.T) {
	for _, v := range goldenVectors() {
		b := v.build()
		min := v.f.Opcode.HeaderLen() + bth.ICRCLen
		for i := range len(b) {
			p, err := bth.Parse(b[:i])
			switch {
			case i < min:
				if !errors.Is(err, bth.ErrTruncated) {
					t.Errorf("%s[:%d]: %v, want ErrTruncated", v.name, i, err)
				}
			case i-min < int(b[1]>>4&3):
				if !errors.Is(err, bth.ErrPadOverrun) {
					t.Errorf("%s[:%d]: %v, want ErrPadOverrun", v.name, i, err)
				}
			default:
				if err != nil {
					t.Errorf("%s[:%d]: %v", v.name, i, err)
				} else if len(p.Payload()) != i-min-p.PadCount() {
					t.Errorf("%s[:%d]: payload %d", v.name, i, len(p.Payload()))
				}
			}
		}
	}
}

func TestAppendReusesBuffer(t *testing.T) {
	f := bth.Fields{Opcode: bth.RCWriteFirst, DestQP: 0x1FFFFFF, PSN: 0x1FFFFFF, RETH: bth.RETH{VA: 1, RKey: 2, DMALen: 3}}
	dirty := make([]byte, 3, 100)
	for i := range dirty[:cap(dirty)] {
		dirty[:cap(dirty)][i] = 0xEE
	}
	b := bth.Append(dirty, &f, []byte{9})
	if &b[0] != &dirty[0] || len(b) != 3+bth.PacketLen(f.Opcode, 1) {
		t.Fatal("Append did not append in place")
	}
	p, err := bth.Parse(b[3:])
	if err != nil {
		t.Fatal(err)
	}
	if p.DestQP() != 0xFFFFFF || p.PSN() != 0xFFFFFF || p.PadCount() != 3 {
		t.Errorf("24-bit truncation: %#x %#x", p.DestQP(), uint32(p.PSN()))
	}
	for _, c := range b[len(b)-7:] { // pad + ICRC must be cleared
		if c != 0 {
			t.Fatalf("stale bytes in pad/ICRC: %x", b[len(b)-7:])
		}
	}
	if b[3+4]&0x3F != 0 || b[3+8]&0x7F != 0 {
		t.Error("reserved bits not cleared")
	}
}

func TestAppendPanicsOnMisuse(t *testing.T) {
	for _, f := range []bth.Fields{{Opcode: 0x15}, {Opcode: bth.RCAck}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%v: no panic", f.Opcode)
				}
			}()
			bth.Append(nil, &f, []byte{1})
		}()
	}
}

func TestSolveIPv4ID(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		f := bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xFFFF, DestQP: rng.Uint32(), PSN: bth.PSN(rng.Uint32())}
		b := bth.Append(nil, &f, make([]byte, rng.IntN(4097)))
		env := bth.Envelope{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
			IPID: uint16(rng.Uint32()), DF: i%2 == 0, SrcPort: uint16(rng.Uint32()), DstPort: 4791}
		bth.PutICRC(&env, b)
		if id, ok := bth.SolveIPv4ID(&env, b); !ok || id != env.IPID {
			t.Fatalf("case %d: got %#x %v, want %#x", i, id, ok, env.IPID)
		}
	}
	// A corrupted packet is rejected unless by 2^-16 luck; count false accepts.
	env := env4
	accepted := 0
	for i := range 2000 {
		f := bth.Fields{Opcode: bth.RCSendOnly, PSN: bth.PSN(i)}
		b := bth.Append(nil, &f, make([]byte, 64))
		bth.PutICRC(&env, b)
		b[20] ^= byte(1 + i%255)
		if _, ok := bth.SolveIPv4ID(&env, b); ok {
			accepted++
		}
	}
	if accepted > 2 {
		t.Errorf("%d of 2000 corrupted packets accepted", accepted)
	}
	if _, ok := bth.SolveIPv4ID(&env6, make([]byte, 32)); ok {
		t.Error("IPv6 envelope solved")
	}
	if _, ok := bth.SolveIPv4ID(&env4, make([]byte, 15)); ok {
		t.Error("short packet solved")
	}
}

func TestICRCDetectsChanges(t *testing.T) {
	f := bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, PSN: 1}
	b := bth.Append(nil, &f, seq(33))
	for _, env := range []bth.Envelope{env4, env6} {
		bth.PutICRC(&env, b)
		if !bth.CheckICRC(&env, b) {
			t.Fatal("fresh ICRC does not check")
		}
		// Masked fields: FECN/BECN/reserved byte 4.
		b[4] = 0xC0
		if !bth.CheckICRC(&env, b) {
			t.Error("BTH byte 4 must be masked")
		}
		b[4] = 0
		for _, i := range []int{0, 1, 2, 5, 8, 11, 12, len(b) - 5} {
			b[i] ^= 0x01
			if bth.CheckICRC(&env, b) {
				t.Errorf("flip in byte %d not detected", i)
			}
			b[i] ^= 0x01
		}
		for _, mut := range []func(e *bth.Envelope){
			func(e *bth.Envelope) { e.SrcPort++ },
			func(e *bth.Envelope) { e.DstPort++ },
			func(e *bth.Envelope) { e.Src = e.Src.Next() },
			func(e *bth.Envelope) { e.Dst = e.Dst.Next() },
		} {
			e := env
			mut(&e)
			if bth.CheckICRC(&e, b) {
				t.Error("envelope change not detected")
			}
		}
	}
	e := env4
	e.IPID++
	if bth.CheckICRC(&e, b) {
		t.Error("IPv4 ID change not detected")
	}
	e = env6
	e.IPID++
	e.DF = true
	bth.PutICRC(&env6, b)
	if !bth.CheckICRC(&e, b) {
		t.Error("IPv6 must ignore IPID and DF")
	}
	if bth.CheckICRC(&env4, b[:15]) {
		t.Error("short packet checks")
	}
}

func TestEnvelopeMappedAddresses(t *testing.T) {
	f := bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11}
	b := bth.Append(nil, &f, seq(8))
	bth.PutICRC(&env4, b)
	mapped := env4
	mapped.Src = netip.AddrFrom16(env4.Src.As16())
	mapped.Dst = netip.AddrFrom16(env4.Dst.As16())
	if !mapped.Src.Is4In6() || !bth.CheckICRC(&mapped, b) {
		t.Error("IPv4-mapped envelope must hash as IPv4")
	}
	if id, ok := bth.SolveIPv4ID(&mapped, b); !ok || id != env4.IPID {
		t.Error("SolveIPv4ID with mapped addresses")
	}
}
