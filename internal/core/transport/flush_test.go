package transport

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// The rules of FLUSH and ATOMIC_WRITE (IBA 1.5 Annex A19, rxe_resp.c
// process_flush and atomic_write_reply, rxe_comp.c check_ack), one row each,
// on a wire.

func (p rulePkt) feth(placement, selectivity uint8) rulePkt {
	p.f.FETH = bth.FETH{PlacementType: placement, Selectivity: selectivity}
	return p
}

const (
	memWrite = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	qpFlush  = verbs.AccessRemoteWrite | verbs.AccessFlushGlobal | verbs.AccessFlushPersistent
)

type flushRule struct {
	name     string
	qpAccess verbs.Access // the QP's access flags (LOCAL_WRITE added)
	mrAccess verbs.Access // the target MR's (an rkey of ruleKey names it)
	steps    [][]rulePkt
	want     []wantPkt
	state    verbs.QPState // RTS when 0
	check    func(t *testing.T, w *wire, mr *Region)
}

var flushRules = []flushRule{
	{name: "A19 ATOMIC_WRITE stores its 8 bytes and is answered by an empty READ RESPONSE ONLY (MSN counted)",
		qpAccess: verbs.AccessRemoteWrite, mrAccess: memWrite,
		steps: [][]rulePkt{{req(bth.RCAtomicWrite, 0, 8).reth(ruleKey, 16, 8).ackReq()}},
		want:  []wantPkt{{bth.RCReadResponseOnly, 0, ack, 1}},
		check: func(t *testing.T, w *wire, mr *Region) {
			if !bytes.Equal(mr.Buf[16:24], filled(8, 0x5A)) || mr.Buf[24] != 24 || mr.Buf[15] != 15 {
				t.Errorf("memory % x: not exactly the 8 bytes written", mr.Buf[14:26])
			}
		}},
	{name: "oA19-14 a duplicate ATOMIC_WRITE is answered again and not executed again",
		qpAccess: verbs.AccessRemoteWrite, mrAccess: memWrite,
		steps: [][]rulePkt{{req(bth.RCAtomicWrite, 0, 8).reth(ruleKey, 16, 8).ackReq()}},
		want:  []wantPkt{{bth.RCReadResponseOnly, 0, ack, 1}},
		check: func(t *testing.T, w *wire, mr *Region) {
			clear(mr.Buf[16:24])
			got := w.deliverRule([]rulePkt{req(bth.RCAtomicWrite, 0, 8).reth(ruleKey, 16, 8).ackReq()}, wireRQPSN, mr)
			checkPackets(t, got, []wantPkt{{bth.RCReadResponseOnly, 0, ack, 1}}, wireRQPSN)
			if binary.NativeEndian.Uint64(mr.Buf[16:]) != 0 {
				t.Error("the duplicate wrote again")
			}
		}},
	{name: "class C length: an ATOMIC_WRITE is exactly 8 bytes",
		qpAccess: verbs.AccessRemoteWrite, mrAccess: memWrite,
		steps: [][]rulePkt{{req(bth.RCAtomicWrite, 0, 4).reth(ruleKey, 16, 4)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakInv)}, state: verbs.QPSErr},
	{name: "class C misaligned ATOMIC_WRITE (A19.4.2: 8-byte aligned)",
		qpAccess: verbs.AccessRemoteWrite, mrAccess: memWrite,
		steps: [][]rulePkt{{req(bth.RCAtomicWrite, 0, 8).reth(ruleKey, 20, 8)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakInv)}, state: verbs.QPSErr},
	{name: "class C unsupported opcode: ATOMIC_WRITE needs the QP's REMOTE_WRITE",
		qpAccess: verbs.AccessRemoteRead, mrAccess: memWrite,
		steps: [][]rulePkt{{req(bth.RCAtomicWrite, 0, 8).reth(ruleKey, 16, 8)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakInv)}, state: verbs.QPSErr},
	{name: "class C R_Key violation: ATOMIC_WRITE to memory without REMOTE_WRITE",
		qpAccess: verbs.AccessRemoteWrite, mrAccess: verbs.AccessRemoteRead,
		steps: [][]rulePkt{{req(bth.RCAtomicWrite, 0, 8).reth(ruleKey, 16, 8)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakAcc)}, state: verbs.QPSErr,
		check: func(t *testing.T, w *wire, mr *Region) {
			if !bytes.Equal(mr.Buf[:32], seq8(32)) {
				t.Error("a refused ATOMIC_WRITE changed the memory")
			}
		}},
	{name: "A19 FLUSH of a range with global placement: an empty READ RESPONSE ONLY",
		qpAccess: qpFlush, mrAccess: memWrite | verbs.AccessFlushGlobal,
		steps: [][]rulePkt{{req(bth.RCFlush, 0, 0).feth(bth.FlushGlobal, bth.FlushRange).reth(ruleKey, 0, 8192).ackReq()}},
		want:  []wantPkt{{bth.RCReadResponseOnly, 0, ack, 1}}},
	{name: "A19 FLUSH of the whole MR names no range (rxe skip_check_range)",
		qpAccess: qpFlush, mrAccess: memWrite | verbs.AccessFlushGlobal,
		steps: [][]rulePkt{{req(bth.RCFlush, 0, 0).feth(bth.FlushGlobal, bth.FlushMR).reth(ruleKey, 1<<40, 1<<20).ackReq()}},
		want:  []wantPkt{{bth.RCReadResponseOnly, 0, ack, 1}}},
	{name: "oA19-15 a duplicate FLUSH is answered again",
		qpAccess: qpFlush, mrAccess: memWrite | verbs.AccessFlushGlobal,
		steps: [][]rulePkt{{req(bth.RCFlush, 0, 0).feth(bth.FlushGlobal, bth.FlushRange).reth(ruleKey, 0, 64).ackReq()},
			{req(bth.RCFlush, 0, 0).feth(bth.FlushGlobal, bth.FlushRange).reth(ruleKey, 0, 64).ackReq()}},
		want: []wantPkt{{bth.RCReadResponseOnly, 0, ack, 1}, {bth.RCReadResponseOnly, 0, ack, 1}}},
	{name: "oA19-15 a duplicate FLUSH is answered by its PSN: rxe 6.12 retransmits a FLUSH with the RETH VA zeroed",
		qpAccess: qpFlush, mrAccess: memWrite | verbs.AccessFlushGlobal,
		steps: [][]rulePkt{{req(bth.RCFlush, 0, 0).feth(bth.FlushGlobal, bth.FlushRange).reth(ruleKey, 4096, 512).ackReq()}},
		want:  []wantPkt{{bth.RCReadResponseOnly, 0, ack, 1}},
		check: func(t *testing.T, w *wire, mr *Region) {
			// The rkey is the MR's own, not ruleKey, so VA 0 stays 0: outside the MR.
			dup := req(bth.RCFlush, 0, 0).feth(bth.FlushGlobal, bth.FlushRange).reth(mr.RKey, 0, 512).ackReq()
			got := w.deliverRule([]rulePkt{dup}, wireRQPSN, mr)
			checkPackets(t, got, []wantPkt{{bth.RCReadResponseOnly, 0, ack, 1}}, wireRQPSN)
		}},
	{name: "class C unsupported opcode: a FLUSH placement the QP's access flags do not allow",
		qpAccess: verbs.AccessRemoteWrite | verbs.AccessFlushGlobal, mrAccess: memWrite | verbs.AccessFlushGlobal,
		steps: [][]rulePkt{{req(bth.RCFlush, 0, 0).feth(bth.FlushPersistent, bth.FlushRange).reth(ruleKey, 0, 64)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakInv)}, state: verbs.QPSErr},
	{name: "class C R_Key violation: a persistent FLUSH of memory registered without FLUSH_PERSISTENT",
		qpAccess: qpFlush, mrAccess: memWrite | verbs.AccessFlushGlobal,
		steps: [][]rulePkt{{req(bth.RCFlush, 0, 0).feth(bth.FlushPersistent, bth.FlushRange).reth(ruleKey, 0, 64)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakAcc)}, state: verbs.QPSErr},
	{name: "class C R_Key violation: a FLUSH range past the MR",
		qpAccess: qpFlush, mrAccess: memWrite | verbs.AccessFlushGlobal,
		steps: [][]rulePkt{{req(bth.RCFlush, 0, 0).feth(bth.FlushGlobal, bth.FlushRange).reth(ruleKey, 8000, 193)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakAcc)}, state: verbs.QPSErr},
}

func TestFlushAndAtomicWriteResponderRules(t *testing.T) {
	for _, rule := range flushRules {
		t.Run(rule.name, func(t *testing.T) {
			w := newWire(t, verbs.QPTypeRC, rcOpts{access: rule.qpAccess | verbs.AccessLocalWrite})
			mr := w.mem.reg(1, seq8(8192), rule.mrAccess)
			var got []bth.Packet
			for _, step := range rule.steps {
				got = append(got, w.deliverRule(step, wireRQPSN, mr)...)
			}
			checkPackets(t, got, rule.want, wireRQPSN)
			if want := max(rule.state, verbs.QPSRTS); w.q.attr.State != want {
				t.Errorf("state %v, want %v", w.q.attr.State, want)
			}
			if rule.check != nil {
				rule.check(t, w, mr)
			}
		})
	}
}

// TestFlushAndAtomicWriteRequester: the packets a FLUSH and an ATOMIC_WRITE
// work request emit (rxe's FETH before the RETH; the 8 bytes after the RETH),
// and how an empty READ RESPONSE ONLY completes them (IBV_WC_FLUSH,
// IBV_WC_ATOMIC_WRITE), in PSN order.
func TestFlushAndAtomicWriteRequester(t *testing.T) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{timeout: 10})
	w.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRFlush, Flags: verbs.SendSignaled, RemoteAddr: 0x1000, RKey: 0x77,
		Flush: verbs.FlushWR{Type: bth.FlushGlobal | bth.FlushPersistent, Level: bth.FlushMR, Length: 64}},
		verbs.SendWR{WRID: 2, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled, RemoteAddr: 0x2008, RKey: 0x78, Swap: 0x1122334455667788})
	got := w.step()
	checkPackets(t, got, []wantPkt{out(bth.RCFlush, 0, 0), out(bth.RCAtomicWrite, 1, 0)}, wireSQPSN)
	if len(got) == 2 {
		f, a := got[0], got[1]
		if fe := f.FETH(); fe.PlacementType != 3 || fe.Selectivity != bth.FlushMR || f.RETH() != (bth.RETH{VA: 0x1000, RKey: 0x77, DMALen: 64}) || !f.AckReq() {
			t.Errorf("FLUSH %+v", f.Fields())
		}
		if a.RETH() != (bth.RETH{VA: 0x2008, RKey: 0x78, DMALen: 8}) || binary.NativeEndian.Uint64(a.Payload()) != 0x1122334455667788 || !a.AckReq() {
			t.Errorf("ATOMIC_WRITE %+v payload % x", a.Fields(), a.Payload())
		}
	}
	// An ACK for the ATOMIC_WRITE's PSN is an implicit NAK of the FLUSH before it
	// (its response never came): both are sent again.
	checkPackets(t, w.deliverRule([]rulePkt{resp(bth.RCAck, 1, ack, 0)}, wireSQPSN, nil),
		[]wantPkt{out(bth.RCFlush, 0, 0), out(bth.RCAtomicWrite, 1, 0)}, wireSQPSN)
	w.deliverRule([]rulePkt{resp(bth.RCReadResponseOnly, 0, ack, 0), resp(bth.RCReadResponseOnly, 1, ack, 0)}, wireSQPSN, nil)
	wcs := w.wcs(w.scq)
	if len(wcs) != 2 || wcs[0].Status != verbs.WCSuccess || wcs[0].Opcode != verbs.WCFlush || wcs[0].ByteLen != 64 ||
		wcs[1].Status != verbs.WCSuccess || wcs[1].Opcode != verbs.WCAtomicWrite || wcs[1].ByteLen != 8 {
		t.Fatalf("completions %v", wcs)
	}
	// A READ RESPONSE with data cannot answer an ATOMIC_WRITE: BAD_RESP_ERR.
	w.post(verbs.SendWR{WRID: 3, Opcode: verbs.WRAtomicWrite, Flags: verbs.SendSignaled, RemoteAddr: 0x2008, RKey: 0x78})
	w.step()
	w.deliverRule([]rulePkt{resp(bth.RCReadResponseOnly, 2, ack, 8)}, wireSQPSN, nil)
	if wcs := w.wcs(w.scq); len(wcs) != 1 || wcs[0].Status != verbs.WCBadRespErr {
		t.Fatalf("completions %v, want BAD_RESP_ERR", wcs)
	}
}

// TestFlushAndAtomicWritePostRules: ibv_post_send's checks (rxe: RC only, no
// data of their own, a valid placement type and selectivity level).
func TestFlushAndAtomicWritePostRules(t *testing.T) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{})
	uc := newWire(t, verbs.QPTypeUC, rcOpts{})
	buf := w.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite)
	for _, tc := range []struct {
		name string
		w    *wire
		wr   verbs.SendWR
	}{
		{"FLUSH on UC", uc, verbs.SendWR{Opcode: verbs.WRFlush, Flush: verbs.FlushWR{Type: bth.FlushGlobal}}},
		{"ATOMIC_WRITE on UC", uc, verbs.SendWR{Opcode: verbs.WRAtomicWrite}},
		{"FLUSH without a placement type", w, verbs.SendWR{Opcode: verbs.WRFlush}},
		{"FLUSH with an unknown placement type", w, verbs.SendWR{Opcode: verbs.WRFlush, Flush: verbs.FlushWR{Type: 4}}},
		{"FLUSH with an unknown selectivity level", w, verbs.SendWR{Opcode: verbs.WRFlush, Flush: verbs.FlushWR{Type: 1, Level: 2}}},
		{"FLUSH with SGEs", w, verbs.SendWR{Opcode: verbs.WRFlush, Flush: verbs.FlushWR{Type: 1}, SGL: []verbs.SGE{buf.sge(0, 8)}}},
		{"ATOMIC_WRITE with SGEs", w, verbs.SendWR{Opcode: verbs.WRAtomicWrite, SGL: []verbs.SGE{buf.sge(0, 8)}}},
	} {
		if _, err := tc.w.q.PostSend([]verbs.SendWR{tc.wr}); err == nil {
			t.Errorf("%s: posted", tc.name)
		}
	}
}
