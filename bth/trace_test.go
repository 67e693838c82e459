package bth_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/internal/tracetest"
)

// TestTraces checks every RoCEv2 packet captured from real rxe: it parses,
// each field equals tshark's decode, the ICRC recomputes from the pcap's IP
// header, the IPv4 ID is recoverable from the trailer alone, and
// Append(Fields) rebuilds the packet byte for byte.
func TestTraces(t *testing.T) {
	total := 0
	for _, name := range tracetest.Names(t) {
		t.Run(name, func(t *testing.T) {
			frames := tracetest.Frames(t, name)
			rows := tracetest.Summary(t, name)
			if len(frames) != len(rows) {
				t.Fatalf("%d RoCE frames in pcap, tshark decoded %d", len(frames), len(rows))
			}
			for _, fr := range frames {
				row, ok := rows[fr.No]
				if !ok {
					t.Fatalf("frame %d: not RoCE for tshark", fr.No)
				}
				checkTraceFrame(t, fr, row)
				total++
			}
		})
	}
	if total < 1000 {
		t.Errorf("checked only %d packets; traces missing?", total)
	}
}

func checkTraceFrame(t *testing.T, fr tracetest.Frame, row tracetest.Row) {
	t.Helper()
	p, err := bth.Parse(fr.UDP)
	if err != nil {
		t.Fatalf("frame %d: Parse: %v", fr.No, err)
	}
	op := p.Opcode()
	errorf := func(col string, got any) {
		t.Helper()
		t.Errorf("frame %d (%v): %s = %v, tshark %q", fr.No, op, col, got, row[col])
	}
	// want compares a present header field with tshark's column; absent
	// headers must have an empty column.
	want := func(col string, present bool, got uint64) {
		t.Helper()
		s := row[col]
		if !present {
			if s != "" {
				errorf(col, "absent")
			}
			return
		}
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil || v != got {
			errorf(col, got)
		}
	}
	b2u := func(b bool) uint64 {
		if b {
			return 1
		}
		return 0
	}
	want("opcode", true, uint64(op))
	want("dqp", true, uint64(p.DestQP()))
	want("psn", true, uint64(p.PSN()))
	want("ackreq", true, b2u(p.AckReq()))
	want("se", true, b2u(p.SE()))
	want("pad", true, uint64(p.PadCount()))
	want("pkey", true, uint64(p.PKey()))
	want("aeth_syn", op.HasAETH(), uint64(p.AETH().Syndrome))
	want("msn", op.HasAETH(), uint64(p.AETH().MSN))
	want("qkey", op.HasDETH(), uint64(p.DETH().QKey))
	want("srcqp", op.HasDETH(), uint64(p.DETH().SrcQP))
	want("reth_va", op.HasRETH(), p.RETH().VA)
	want("reth_rkey", op.HasRETH(), uint64(p.RETH().RKey))
	want("reth_len", op.HasRETH(), uint64(p.RETH().DMALen))
	want("imm", op.HasImm(), uint64(p.Imm()))
	if got := "0x" + hex.EncodeToString(fr.UDP[len(fr.UDP)-4:]); got != row["icrc"] {
		errorf("icrc", got)
	}
	if got := fmt.Sprintf("0x%04x", fr.Env.IPID); fr.IPv4 != nil && got != row["ipid"] {
		errorf("ipid", got)
	}
	if len(p.Payload())+p.HeaderLen()+p.PadCount()+bth.ICRCLen != len(fr.UDP) {
		t.Errorf("frame %d: lengths do not add up", fr.No)
	}

	if !bth.CheckICRC(&fr.Env, fr.UDP) {
		t.Errorf("frame %d: ICRC %#08x, trailer %#08x", fr.No, bth.ICRC(&fr.Env, fr.UDP), p.ICRC())
	}
	if fr.IPv4 != nil {
		hdr := append(append([]byte(nil), fr.IPv4.Contents...), fr.Layer.Contents...)
		if got := bth.ICRCOverHeaders(hdr, fr.UDP); got != p.ICRC() {
			t.Errorf("frame %d: ICRCOverHeaders %#08x, trailer %#08x", fr.No, got, p.ICRC())
		}
	}
	if fr.IPv4 != nil {
		env := fr.Env
		env.IPID ^= 0x5a5a // the solver must not look at it
		id, ok := bth.SolveIPv4ID(&env, fr.UDP)
		if !ok || id != fr.Env.IPID {
			t.Errorf("frame %d: SolveIPv4ID = %#04x, %v; pcap %#04x", fr.No, id, ok, fr.Env.IPID)
		}
	}

	f := p.Fields()
	b := bth.Append(nil, &f, p.Payload())
	bth.PutICRC(&fr.Env, b)
	if !bytes.Equal(b, fr.UDP) {
		t.Errorf("frame %d: rebuilt packet differs\n got %x\nwant %x", fr.No, b, fr.UDP)
	}
}
