package transport

import (
	"slices"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// The rules of the send queue's local operations (BIND_MW, LOCAL_INV: rxe
// rxe_do_local_ops and its completer), one row each, on a wire: the QP posts
// the WRs, each step's packets and the send completions are checked.

func bindWR(id uint64, flags verbs.SendFlags) verbs.SendWR {
	return verbs.SendWR{WRID: id, Opcode: verbs.WRBindMW, Flags: verbs.SendSignaled | flags,
		BindMW: verbs.MWBindWR{MWRKey: 0x300, RKey: 0x301, Length: 8, Access: verbs.AccessRemoteWrite}}
}

type localOpRule struct {
	name     string
	typ      verbs.QPType // RC when 0
	failBind bool
	wrs      []verbs.SendWR
	first    []wantPkt        // the first transmission
	binds    int              // BindMW calls after it
	resp     [][]rulePkt      // responses, each group in one step (RC)
	after    []wantPkt        // packets emitted while the responses are delivered
	wcs      []verbs.WCStatus // send completions, in order
	ops      []verbs.WCOpcode // their opcodes, where the status is success
	state    verbs.QPState    // RTS when 0
	check    func(t *testing.T, w *wire)
}

var localOpRules = []localOpRule{
	{name: "a bind with nothing outstanding executes and completes at once with IBV_WC_BIND_MW",
		wrs: []verbs.SendWR{bindWR(1, 0)}, binds: 1,
		wcs: []verbs.WCStatus{verbs.WCSuccess}, ops: []verbs.WCOpcode{verbs.WCBindMW},
		check: func(t *testing.T, w *wire) {
			b := w.mem.binds[0]
			if b.QPN != w.q.qpn || b.PD != 1 || b.MWRKey != 0x300 || b.NewRKey != 0x301 || b.Length != 8 {
				t.Errorf("bind %+v", b)
			}
		}},
	{name: "a local operation consumes no PSN",
		wrs:   []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8), bindWR(2, 0), sendWR(3, verbs.WRSend, 0, 8)},
		first: []wantPkt{out(bth.RCSendOnly, 0, 0), out(bth.RCSendOnly, 1, 0)}, binds: 1,
		resp: [][]rulePkt{{resp(bth.RCAck, 1, ack, 0)}},
		wcs:  []verbs.WCStatus{verbs.WCSuccess, verbs.WCSuccess, verbs.WCSuccess}, ops: []verbs.WCOpcode{verbs.WCSend, verbs.WCBindMW, verbs.WCSend}},
	{name: "a local operation executes once the WRs before it are sent, and completes after them",
		wrs:   []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8), bindWR(2, 0)},
		first: []wantPkt{out(bth.RCSendOnly, 0, 0)}, binds: 1,
		resp: [][]rulePkt{{resp(bth.RCAck, 0, ack, 0)}},
		wcs:  []verbs.WCStatus{verbs.WCSuccess, verbs.WCSuccess}, ops: []verbs.WCOpcode{verbs.WCSend, verbs.WCBindMW}},
	{name: "IBV_SEND_FENCE holds a local operation until every WR before it has completed",
		wrs:   []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8), bindWR(2, verbs.SendFence), sendWR(3, verbs.WRSend, 0, 8)},
		first: []wantPkt{out(bth.RCSendOnly, 0, 0)}, binds: 0,
		resp:  [][]rulePkt{{resp(bth.RCAck, 0, ack, 0)}},
		after: []wantPkt{out(bth.RCSendOnly, 1, 0)},
		wcs:   []verbs.WCStatus{verbs.WCSuccess, verbs.WCSuccess}, ops: []verbs.WCOpcode{verbs.WCSend, verbs.WCBindMW},
		check: func(t *testing.T, w *wire) {
			if len(w.mem.binds) != 1 {
				t.Errorf("%d binds after the fence lifted", len(w.mem.binds))
			}
		}},
	{name: "a refused bind stops the requester and completes MW_BIND_ERR after the WRs before it; the QP fails",
		failBind: true,
		wrs:      []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8), bindWR(2, 0), sendWR(3, verbs.WRSend, 0, 8)},
		first:    []wantPkt{out(bth.RCSendOnly, 0, 0)}, binds: 1,
		resp: [][]rulePkt{{resp(bth.RCAck, 0, ack, 0)}},
		wcs:  []verbs.WCStatus{verbs.WCSuccess, verbs.WCMWBindErr, verbs.WCWRFlushErr}, state: verbs.QPSErr},
	{name: "a refused LOCAL_INV completes LOC_QP_OP_ERR and the QP fails",
		wrs: []verbs.SendWR{{WRID: 1, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvRKey: 0x999}},
		wcs: []verbs.WCStatus{verbs.WCLocQPOpErr}, state: verbs.QPSErr,
		check: func(t *testing.T, w *wire) {
			if len(w.mem.invalidated) != 1 || w.mem.invalidated[0] != 0x999 {
				t.Errorf("invalidations %#x", w.mem.invalidated)
			}
		}},
	{name: "LOCAL_INV of a bound window: its rkey resolves no more, IBV_WC_LOCAL_INV",
		wrs: []verbs.SendWR{bindWR(1, 0), {WRID: 2, Opcode: verbs.WRLocalInv, Flags: verbs.SendSignaled, InvRKey: 0x301}}, binds: 1,
		wcs: []verbs.WCStatus{verbs.WCSuccess, verbs.WCSuccess}, ops: []verbs.WCOpcode{verbs.WCBindMW, verbs.WCLocalInv},
		check: func(t *testing.T, w *wire) {
			if w.mem.RemoteRegion(0x301) != nil {
				t.Error("the invalidated rkey still resolves")
			}
		}},
	{name: "a go-back-N retry does not execute a local operation again",
		wrs:   []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8), bindWR(2, 0), sendWR(3, verbs.WRSend, 0, 8)},
		first: []wantPkt{out(bth.RCSendOnly, 0, 0), out(bth.RCSendOnly, 1, 0)}, binds: 1,
		resp:  [][]rulePkt{{resp(bth.RCAck, 0, nakSeq, 0)}},
		after: []wantPkt{out(bth.RCSendOnly, 0, 0), out(bth.RCSendOnly, 1, 0)},
		check: func(t *testing.T, w *wire) {
			if len(w.mem.binds) != 1 {
				t.Errorf("%d binds after the retry", len(w.mem.binds))
			}
		}},
	{name: "UC: local operations complete in order behind the sends, which nothing acknowledges",
		typ:   verbs.QPTypeUC,
		wrs:   []verbs.SendWR{sendWR(1, verbs.WRSend, 0, 8), bindWR(2, 0), sendWR(3, verbs.WRSend, 0, 8)},
		first: []wantPkt{out(bth.UCSendOnly, 0, 0), out(bth.UCSendOnly, 1, 0)}, binds: 1,
		wcs: []verbs.WCStatus{verbs.WCSuccess, verbs.WCSuccess, verbs.WCSuccess}, ops: []verbs.WCOpcode{verbs.WCSend, verbs.WCBindMW, verbs.WCSend}},
}

func TestLocalOpRules(t *testing.T) {
	for _, rule := range localOpRules {
		t.Run(rule.name, func(t *testing.T) {
			typ := rule.typ
			if typ == 0 {
				typ = verbs.QPTypeRC
			}
			w := newWire(t, typ, rcOpts{timeout: 10})
			w.mem.failBind = rule.failBind
			buf := w.mem.reg(1, make([]byte, 8192), verbs.AccessLocalWrite|verbs.AccessMWBind)
			for _, wr := range rule.wrs {
				// The table's SGEs hold offsets into buf; rewrite a copy, since every
				// run (-count, -cpu) reads the same table.
				wr.SGL = slices.Clone(wr.SGL)
				for i := range wr.SGL {
					wr.SGL[i] = buf.sge(int(wr.SGL[i].Addr), int(wr.SGL[i].Length))
				}
				if wr.Opcode == verbs.WRBindMW {
					wr.BindMW.MRLKey, wr.BindMW.Addr = buf.LKey, buf.Addr
				}
				w.post(wr)
			}
			checkPackets(t, w.step(), rule.first, wireSQPSN)
			if len(w.mem.binds) != rule.binds {
				t.Errorf("%d binds after the first transmission, want %d", len(w.mem.binds), rule.binds)
			}
			var got []bth.Packet
			for _, group := range rule.resp {
				got = append(got, w.deliverRule(group, wireSQPSN, nil)...)
			}
			checkPackets(t, got, rule.after, wireSQPSN)
			wcs := w.wcs(w.scq)
			ok := len(wcs) == len(rule.wcs)
			for i := 0; ok && i < len(wcs); i++ {
				ok = wcs[i].Status == rule.wcs[i] && wcs[i].WRID == uint64(i+1) &&
					(i >= len(rule.ops) || wcs[i].Opcode == rule.ops[i])
			}
			if !ok {
				t.Errorf("send completions %v, want %v %v", wcs, rule.wcs, rule.ops)
			}
			if want := max(rule.state, verbs.QPSRTS); w.q.attr.State != want {
				t.Errorf("state %v, want %v", w.q.attr.State, want)
			}
			if rule.check != nil {
				rule.check(t, w)
			}
		})
	}
}
