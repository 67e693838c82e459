package transport

import (
	"slices"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// The completer's rules (rxe_comp.c), one row each, on a wire: the QP posts
// send WRs, the requester emits them, the row feeds the peer's responses
// and checks what the QP emits again, its send completions and its state.
// PSNs are offsets from the QP's first request PSN.

type compRule struct {
	name  string
	wrs   []verbs.SendWR   // posted at the start; SGEs name the row's 8 KiB buffer by offset
	sent  int              // packets the first transmission emits
	resp  [][]rulePkt      // responses, each group in one shard step
	then  time.Duration    // time to let pass afterwards (then one step)
	want  []wantPkt        // packets emitted after the first transmission
	wcs   []verbs.WCStatus // send completions, in order
	state verbs.QPState    // RTS when 0
	check func(t *testing.T, w *wire, buf *Region)
}

func sendWR(id uint64, op verbs.WROpcode, off, n int) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: op, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: uint64(off), Length: uint32(n)}}}
}

func resp(op bth.Opcode, psn int, syn uint8, n int) rulePkt {
	return rulePkt{f: bth.Fields{Opcode: op, PSN: bth.PSN(psn), AETH: bth.AETH{Syndrome: syn}}, n: n}
}

var compRules = []compRule{
	{name: "ACKs are cumulative: one ACK retires every WQE through its PSN",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8), sendWR(2, verbs.WRSend, 0, 8), sendWR(3, verbs.WRSend, 0, 8)},
		sent: 3, resp: [][]rulePkt{{resp(bth.RCAck, 2, ack, 0)}},
		wcs: []verbs.WCStatus{verbs.WCSuccess, verbs.WCSuccess, verbs.WCSuccess}},
	{name: "a NAK implicitly acknowledges the PSNs before it",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8), sendWR(2, verbs.WRSend, 0, 8)},
		sent: 2, resp: [][]rulePkt{{resp(bth.RCAck, 1, nakSeq, 0)}},
		want: []wantPkt{out(bth.RCSendOnly, 1, 0)}, wcs: []verbs.WCStatus{verbs.WCSuccess}},
	{name: "PSN sequence NAK: go back N from the NAKed PSN",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 3000)},
		sent: 3, resp: [][]rulePkt{{resp(bth.RCAck, 1, nakSeq, 0)}},
		want: []wantPkt{out(bth.RCSendMiddle, 1, 0), out(bth.RCSendLast, 2, 0)}},
	{name: "a second sequence NAK before any progress is the echo of the first: no second rewind",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 3000)},
		sent: 3, resp: [][]rulePkt{{resp(bth.RCAck, 1, nakSeq, 0)}, {resp(bth.RCAck, 1, nakSeq, 0)}},
		want: []wantPkt{out(bth.RCSendMiddle, 1, 0), out(bth.RCSendLast, 2, 0)}},
	{name: "a NAK for a PSN already acknowledged is stale and ignored",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 3000)},
		sent: 3, resp: [][]rulePkt{{resp(bth.RCAck, 1, ack, 0)}, {resp(bth.RCAck, 1, nakSeq, 0)}}},
	{name: "an ACK for a PSN never sent is a ghost: nothing completes, the timer still resends",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8), sendWR(2, verbs.WRSend, 0, 8)},
		sent: 2, resp: [][]rulePkt{{resp(bth.RCAck, 2, ack, 0)}, {resp(bth.RCAck, 0x400000, ack, 0)}},
		check: func(t *testing.T, w *wire, buf *Region) {
			if n := w.q.e.cfg.Stats.GhostResponses.Load(); n != 2 {
				t.Errorf("ghost responses counted: %d, want 2", n)
			}
			if out := w.advance(w.q.rto); len(out) != 1 || out[0].PSN() != wireSQPSN {
				t.Errorf("after the timeout: %s, want the probe of the first PSN", pktsString(out))
			}
		}},
	{name: "a message sent again after a timeout completes on an ACK of its last PSN, and the rest of it is not resent",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 3000)},
		sent: 3,
		check: func(t *testing.T, w *wire, buf *Region) {
			if out := w.advance(w.q.rto); len(out) != 1 || out[0].PSN() != wireSQPSN {
				t.Fatalf("after the timeout: %s, want the probe of the first PSN", pktsString(out))
			}
			// The peer had the whole message; its ACK crossed the probe. It
			// may exit now, and nothing would answer a resent packet.
			if out := w.deliverRule([]rulePkt{resp(bth.RCAck, 2, ack, 0)}, wireSQPSN, nil); len(out) != 0 {
				t.Errorf("after the ACK of the last PSN: %s, want nothing", pktsString(out))
			}
			if wcs := w.wcs(w.scq); len(wcs) != 1 || wcs[0].Status != verbs.WCSuccess {
				t.Errorf("send completions %v, want one success", wcs)
			}
			if out := w.advance(4 * w.q.rto); len(out) != 0 {
				t.Errorf("later: %s, want nothing", pktsString(out))
			}
		}},
	{name: "a NAK for a PSN never sent is a ghost and ignored",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8)},
		sent: 1, resp: [][]rulePkt{{resp(bth.RCAck, 1, nakAcc, 0)}}},
	{name: "RNR NAK: wait the RNR timer, then go back N",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8)},
		sent: 1, resp: [][]rulePkt{{resp(bth.RCAck, 0, bth.RNRSyndrome(14), 0)}}, then: bth.RNRTimerDuration(14),
		want: []wantPkt{out(bth.RCSendOnly, 0, 0)}},
	{name: "NAK remote access error fails the WQE with REM_ACCESS_ERR and flushes the rest",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRRDMAWrite, 0, 8), sendWR(2, verbs.WRSend, 0, 8)},
		sent: 2, resp: [][]rulePkt{{resp(bth.RCAck, 0, nakAcc, 0)}},
		wcs: []verbs.WCStatus{verbs.WCRemAccessErr, verbs.WCWRFlushErr}, state: verbs.QPSErr},
	{name: "NAK invalid request fails the WQE with REM_INV_REQ_ERR",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8)},
		sent: 1, resp: [][]rulePkt{{resp(bth.RCAck, 0, nakInv, 0)}},
		wcs: []verbs.WCStatus{verbs.WCRemInvReqErr}, state: verbs.QPSErr},
	{name: "NAK remote operational error fails the WQE with REM_OP_ERR",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8)},
		sent: 1, resp: [][]rulePkt{{resp(bth.RCAck, 0, nakOp, 0)}},
		wcs: []verbs.WCStatus{verbs.WCRemOpErr}, state: verbs.QPSErr},
	{name: "READ responses are placed in order and the LAST completes the READ",
		wrs:  []verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: 0, Length: 1500}}, RKey: 9}},
		sent: 1, resp: [][]rulePkt{{resp(bth.RCReadResponseFirst, 0, ack, 1024), resp(bth.RCReadResponseLast, 1, ack, 476)}},
		wcs: []verbs.WCStatus{verbs.WCSuccess},
		check: func(t *testing.T, w *wire, buf *Region) {
			if string(buf.Buf[:1500]) != string(filled(1500, 0x5A)) {
				t.Error("READ data not placed")
			}
		}},
	{name: "a READ response gap asks again at once from the first PSN missing",
		wrs:  []verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: 0, Length: 3000}}, RKey: 9}},
		sent: 1, resp: [][]rulePkt{{resp(bth.RCReadResponseFirst, 0, ack, 1024)}, {resp(bth.RCReadResponseLast, 2, ack, 952)}},
		want: []wantPkt{out(bth.RCReadRequest, 1, 0)}},
	{name: "a READ response of the wrong length fails the READ with BAD_RESP_ERR",
		wrs:  []verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: 0, Length: 1500}}, RKey: 9}},
		sent: 1, resp: [][]rulePkt{{resp(bth.RCReadResponseFirst, 0, ack, 1000)}},
		wcs: []verbs.WCStatus{verbs.WCBadRespErr}, state: verbs.QPSErr},
	{name: "an ACK beyond a READ is an implicit NAK: the READ is requested again",
		wrs:  []verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: 0, Length: 8}}, RKey: 9}, sendWR(2, verbs.WRSend, 0, 8)},
		sent: 2, resp: [][]rulePkt{{resp(bth.RCAck, 1, ack, 0)}},
		want: []wantPkt{out(bth.RCReadRequest, 0, 0), out(bth.RCSendOnly, 1, 0)}},
	{name: "an atomic ACK writes the original value into the WQE's buffer and completes it",
		wrs:  []verbs.SendWR{{WRID: 1, Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendSignaled, SGL: []verbs.SGE{{Addr: 16, Length: 8}}, RKey: 9, CompareAdd: 1}},
		sent: 1, resp: [][]rulePkt{{{f: bth.Fields{Opcode: bth.RCAtomicAck, PSN: 0, AETH: bth.AETH{Syndrome: ack}, AtomicAck: bth.AtomicAckETH{Orig: 0x1122334455667788}}}}},
		wcs: []verbs.WCStatus{verbs.WCSuccess},
		check: func(t *testing.T, w *wire, buf *Region) {
			if got := buf.Buf[16:24]; got[0] != 0x88 || got[7] != 0x11 {
				t.Errorf("original value % x", got)
			}
		}},
	{name: "retry_cnt exhausted: RETRY_EXC_ERR at the timeout after retry_cnt retries",
		wrs:  []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8)},
		sent: 1,
		check: func(t *testing.T, w *wire, buf *Region) {
			w.q.comp.retryCnt, w.q.attr.RetryCnt = 1, 1
			rto := w.q.rto
			if out := w.advance(rto); len(out) != 1 {
				t.Fatalf("first timeout: %s, want one probe", pktsString(out))
			}
			w.advance(2 * rto)
			if wcs := w.wcs(w.scq); len(wcs) != 1 || wcs[0].Status != verbs.WCRetryExcErr || w.q.attr.State != verbs.QPSErr {
				t.Fatalf("after the last timeout: %v, state %v", wcs, w.q.attr.State)
			}
		}},
}

func TestCompleterRules(t *testing.T) {
	for _, rule := range compRules {
		t.Run(rule.name, func(t *testing.T) {
			w := newWire(t, verbs.QPTypeRC, rcOpts{timeout: 10})
			buf := w.mem.reg(1, make([]byte, 8192), verbs.AccessLocalWrite)
			for _, wr := range rule.wrs {
				// The table's SGEs hold offsets into buf; rewrite a copy, since every
				// run (-count, -cpu) reads the same table.
				wr.SGL = slices.Clone(wr.SGL)
				for i := range wr.SGL {
					wr.SGL[i] = buf.sge(int(wr.SGL[i].Addr), int(wr.SGL[i].Length))
				}
				w.post(wr)
			}
			if first := w.step(); len(first) != rule.sent {
				t.Fatalf("first transmission: %s, want %d packets", pktsString(first), rule.sent)
			}
			var got []bth.Packet
			for _, group := range rule.resp {
				got = append(got, w.deliverRule(group, wireSQPSN, nil)...)
			}
			if rule.then > 0 {
				got = append(got, w.advance(rule.then)...)
			}
			checkPackets(t, got, rule.want, wireSQPSN)
			var wcs []wantWC
			for _, st := range rule.wcs {
				wcs = append(wcs, wantWC{status: st})
			}
			gotWCs := w.wcs(w.scq)
			for i := range gotWCs {
				gotWCs[i].Opcode, gotWCs[i].ByteLen = 0, 0
			}
			checkWCs(t, gotWCs, wcs)
			if want := max(rule.state, verbs.QPSRTS); w.q.attr.State != want {
				t.Errorf("state %v, want %v", w.q.attr.State, want)
			}
			if rule.check != nil {
				rule.check(t, w, buf)
			}
		})
	}
}
