package bth

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
)

// TestICRCParts: a packet built as headers (AppendHeaders), payload and tail
// (pad and trailer) is byte for byte the packet Append builds, and its ICRC
// over the three pieces is the ICRC over the whole, for both families, any
// IPv4 ID, and payloads that need each pad count; an RC FLUSH's is rxe's.
func TestICRCParts(t *testing.T) {
	envs := []Envelope{
		{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), DF: true, SrcPort: 50000, DstPort: 4791},
		{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), IPID: 7, DF: true, SrcPort: 50000, DstPort: 4791},
		{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"), SrcPort: 50000, DstPort: 4791},
	}
	fields := []Fields{
		{Opcode: RCSendMiddle, PKey: 0xFFFF, DestQP: 0x11, PSN: 5},
		{Opcode: RCWriteFirst, PKey: 0xFFFF, DestQP: 0x11, PSN: 6, RETH: RETH{VA: 0x1000, RKey: 9, DMALen: 9000}},
		{Opcode: RCReadResponseLast, PKey: 0xFFFF, DestQP: 0x11, PSN: 7, AETH: AETH{MSN: 3}},
		{Opcode: UDSendOnlyImm, PKey: 0xFFFF, DestQP: 0x11, PSN: 8, DETH: DETH{QKey: 1, SrcQP: 2}, Imm: 3},
		// No payload: its ICRC is rxe's (see ICRC) over the pieces as over the whole.
		{Opcode: RCFlush, PKey: 0xFFFF, DestQP: 0x11, PSN: 9, FETH: FETH{PlacementType: 1}, RETH: RETH{VA: 0x1000, RKey: 9, DMALen: 64}},
	}
	for _, env := range envs {
		for _, f := range fields {
			sizes := []int{1, 2, 3, 4, 1021, 4096}
			if f.Opcode == RCFlush {
				sizes = []int{0}
			}
			for _, n := range sizes {
				t.Run(fmt.Sprintf("%v/%v/%d/id%d", env.Src, f.Opcode, n, env.IPID), func(t *testing.T) {
					payload := make([]byte, n)
					for i := range payload {
						payload[i] = byte(i*7 + 1)
					}
					whole := Append(nil, &f, payload)
					hdr := AppendHeaders(nil, &f, n)
					tail := whole[len(hdr)+n:]
					if !bytes.Equal(whole[:len(hdr)], hdr) || len(tail) != PadCount(n)+ICRCLen {
						t.Fatalf("headers %x, tail %d bytes; Append made %x", hdr, len(tail), whole[:len(hdr)])
					}
					if got, want := ICRCParts(&env, hdr, payload, tail), ICRC(&env, whole); got != want {
						t.Fatalf("ICRC over pieces %#x, over the packet %#x", got, want)
					}
				})
			}
		}
	}
}
