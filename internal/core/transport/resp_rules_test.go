package transport

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// The responder's rules, one row each, packet in and packets out on a wire
// (no link, no second engine). A row is named after the rule it checks: the
// IBA compliance statement where the rxe source cites one (C9-88, C9-92,
// C9-94, C9-105, C9-148), else the IBA responder error class rxe_resp.c
// assigns (class B: NAK, QP stays; class C: NAK, QP to ERR; UC class D:
// silent drop) and the rxe check that finds it.

// rulePkt is one request from the peer: its header fields, with PSNs as
// offsets from the QP's expected PSN and, in a RETH or AtomicETH with R_Key
// ruleKey, the VA as an offset into the row's MR; and its payload size.
type rulePkt struct {
	f bth.Fields
	n int
}

// ruleKey stands for the R_Key of a rule row's MR.
const ruleKey = 0xAAAA0000

func req(op bth.Opcode, psn, n int) rulePkt {
	return rulePkt{f: bth.Fields{Opcode: op, PSN: bth.PSN(psn)}, n: n}
}

func (p rulePkt) ackReq() rulePkt { p.f.AckReq = true; return p }

func (p rulePkt) reth(rkey uint32, off uint64, n uint32) rulePkt {
	p.f.RETH = bth.RETH{VA: off, RKey: rkey, DMALen: n}
	return p
}

func (p rulePkt) ieth(rkey uint32) rulePkt { p.f.IETH = rkey; return p }

// winKey is the rkey of the memory window rows bind over the row's MR.
const winKey = 0xBBBB0007

// bindWindow binds winKey over mr (through the fake memory's BindMW) to the
// QP qpn, as a type 2B window.
func bindWindow(t *testing.T, w *wire, mr *Region, qpn uint32) {
	t.Helper()
	w.mem.bindQP = true
	if err := w.mem.BindMW(&MWBind{NewRKey: winKey, MRLKey: mr.LKey, Addr: mr.Addr, Length: 4096,
		Access: verbs.AccessRemoteWrite, QPN: qpn, PD: 1}); err != nil {
		t.Fatal(err)
	}
}

func (p rulePkt) atomic(rkey uint32, off, add uint64) rulePkt {
	p.f.Atomic = bth.AtomicETH{VA: off, RKey: rkey, SwapAdd: add}
	return p
}

// wantPkt is one packet the QP must emit: opcode, PSN offset, AETH syndrome
// (for opcodes with an AETH) and, when msn >= 0, the AETH MSN.
type wantPkt struct {
	op  bth.Opcode
	psn int
	syn uint8
	msn int
}

var (
	ack     = bth.ACKSyndrome(bth.CreditInvalid)
	nakSeq  = bth.NAKSyndrome(bth.NAKPSNSeqErr)
	nakInv  = bth.NAKSyndrome(bth.NAKInvalidRequest)
	nakAcc  = bth.NAKSyndrome(bth.NAKRemoteAccess)
	nakOp   = bth.NAKSyndrome(bth.NAKRemoteOpErr)
	rnrMin1 = bth.RNRSyndrome(1)
)

func out(op bth.Opcode, psn int, syn uint8) wantPkt { return wantPkt{op, psn, syn, -1} }

// wantWC is a receive completion: status, opcode and byte count.
type wantWC struct {
	status verbs.WCStatus
	op     verbs.WCOpcode
	n      uint32
}

type respRule struct {
	name   string
	typ    verbs.QPType // RC when 0
	access verbs.Access // QP access flags; all when 0
	recv   []int        // receive WRs to post first, by buffer size (-1: a buffer without local write)
	setup  func(w *wire)
	steps  [][]rulePkt // each delivered in one shard step
	want   []wantPkt
	wcs    []wantWC
	state  verbs.QPState // RTS when 0
	event  verbs.EventType
	check  func(t *testing.T, w *wire, mr *Region)
}

var respRules = []respRule{
	{name: "C9-92 SEND FIRST shorter than the PMTU is class C (before a receive WR is taken)", recv: []int{4096},
		steps: [][]rulePkt{{req(bth.RCSendFirst, 0, 100)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakInv)}, wcs: []wantWC{{verbs.WCWRFlushErr, verbs.WCRecv, 0}}, state: verbs.QPSErr, event: verbs.EventQPReqErr},
	{name: "C9-92 WRITE LAST without payload is class C",
		steps: [][]rulePkt{{req(bth.RCWriteFirst, 0, 1024).reth(ruleKey, 0, 1024)}, {req(bth.RCWriteLast, 1, 0)}},
		want:  []wantPkt{out(bth.RCAck, 1, nakInv)}, state: verbs.QPSErr, event: verbs.EventQPReqErr},
	{name: "C9-92 SEND ONLY above the PMTU is class C, completing the receive WR in progress", recv: []int{4096},
		steps: [][]rulePkt{{req(bth.RCSendFirst, 0, 1024)}, {req(bth.RCSendLast, 1, 1025)}},
		want:  []wantPkt{out(bth.RCAck, 1, nakInv)}, wcs: []wantWC{{verbs.WCRemInvReqErr, verbs.WCRecv, 0}}, state: verbs.QPSErr},
	{name: "C9-94 READ of more than 2^31 bytes is class C",
		steps: [][]rulePkt{{req(bth.RCReadRequest, 0, 0).reth(ruleKey, 0, 1<<31+1)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakInv)}, state: verbs.QPSErr, event: verbs.EventQPReqErr},
	{name: "C9-88 zero-length READ names no memory: its R_Key is not checked",
		steps: [][]rulePkt{{req(bth.RCReadRequest, 0, 0).reth(0xdead, 1<<40, 0)}},
		want:  []wantPkt{{bth.RCReadResponseOnly, 0, ack, 1}}},
	{name: "C9-88 zero-length WRITE names no memory: its R_Key is not checked",
		steps: [][]rulePkt{{req(bth.RCWriteOnly, 0, 0).reth(0xdead, 1<<40, 0).ackReq()}},
		want:  []wantPkt{{bth.RCAck, 0, ack, 1}}},
	{name: "C9-105 duplicate SEND is acknowledged again and not executed", recv: []int{4096, 4096},
		steps: [][]rulePkt{{req(bth.RCSendOnly, 0, 64).ackReq()}, {req(bth.RCSendOnly, 0, 64).ackReq()}},
		want:  []wantPkt{out(bth.RCAck, 0, ack), out(bth.RCAck, 0, ack)}, wcs: []wantWC{{verbs.WCSuccess, verbs.WCRecv, 64}}},
	{name: "C9-105 duplicate WRITE is acknowledged with the last PSN taken",
		steps: [][]rulePkt{{req(bth.RCWriteOnly, 0, 8).reth(ruleKey, 0, 8), req(bth.RCWriteOnly, 1, 8).reth(ruleKey, 8, 8).ackReq()},
			{req(bth.RCWriteOnly, 0, 8).reth(ruleKey, 0, 8).ackReq()}},
		want: []wantPkt{out(bth.RCAck, 1, ack), out(bth.RCAck, 1, ack)}},
	{name: "C9-105 duplicate READ is answered again from memory",
		steps: [][]rulePkt{{req(bth.RCReadRequest, 0, 0).reth(ruleKey, 0, 2048)}, {req(bth.RCReadRequest, 0, 0).reth(ruleKey, 0, 2048)}},
		want: []wantPkt{out(bth.RCReadResponseFirst, 0, ack), out(bth.RCReadResponseLast, 1, ack),
			out(bth.RCReadResponseFirst, 0, ack), out(bth.RCReadResponseLast, 1, ack)}},
	{name: "C9-105 duplicate atomic is answered from its resource, not executed again",
		steps: [][]rulePkt{{req(bth.RCFetchAdd, 0, 0).atomic(ruleKey, 0, 5)}, {req(bth.RCFetchAdd, 0, 0).atomic(ruleKey, 0, 5)}},
		want:  []wantPkt{out(bth.RCAtomicAck, 0, ack), out(bth.RCAtomicAck, 0, ack)},
		check: func(t *testing.T, w *wire, mr *Region) {
			if v := binary.NativeEndian.Uint64(mr.Buf); v != 0x0706050403020100+5 {
				t.Errorf("memory %#x: the atomic did not run exactly once", v)
			}
		}},
	{name: "C9-148 a READ counts in the MSN when it executes", recv: []int{4096},
		steps: [][]rulePkt{{req(bth.RCReadRequest, 0, 0).reth(ruleKey, 0, 8), req(bth.RCSendOnly, 1, 8).ackReq()}},
		want:  []wantPkt{{bth.RCReadResponseOnly, 0, ack, 1}, {bth.RCAck, 1, ack, 2}}, wcs: []wantWC{{verbs.WCSuccess, verbs.WCRecv, 8}}},
	{name: "class B PSN ahead: one sequence NAK per gap, then the expected PSN executes", recv: []int{4096},
		steps: [][]rulePkt{{req(bth.RCSendOnly, 2, 8)}, {req(bth.RCSendOnly, 3, 8)}, {req(bth.RCSendOnly, 0, 8).ackReq()}},
		want:  []wantPkt{out(bth.RCAck, 0, nakSeq), out(bth.RCAck, 0, ack)}, wcs: []wantWC{{verbs.WCSuccess, verbs.WCRecv, 8}}},
	{name: "class B RNR NAK when no receive WR is posted; the retry executes",
		steps: [][]rulePkt{{req(bth.RCSendOnly, 0, 8).ackReq()}},
		want:  []wantPkt{out(bth.RCAck, 0, rnrMin1)},
		check: func(t *testing.T, w *wire, mr *Region) {
			rb := w.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite)
			w.recv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{rb.sge(0, 64)}})
			got := w.deliver(w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: wireRQPSN, AckReq: true}, filled(8, 1)))
			if len(got) != 1 || got[0].Opcode() != bth.RCAck || !got[0].AETH().IsACK() {
				t.Errorf("retry after the RNR NAK: %s", pktsString(got))
			}
		}},
	{name: "class C missing FIRST: a SEND MIDDLE outside a message",
		steps: [][]rulePkt{{req(bth.RCSendMiddle, 0, 1024)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakInv)}, state: verbs.QPSErr, event: verbs.EventQPReqErr},
	{name: "class C missing LAST: a WRITE FIRST inside a SEND", recv: []int{4096},
		steps: [][]rulePkt{{req(bth.RCSendFirst, 0, 1024)}, {req(bth.RCWriteFirst, 1, 1024).reth(ruleKey, 0, 2048)}},
		want:  []wantPkt{out(bth.RCAck, 1, nakInv)}, wcs: []wantWC{{verbs.WCRemInvReqErr, verbs.WCRecv, 0}}, state: verbs.QPSErr},
	{name: "class C unsupported opcode: a WRITE the QP's access flags do not allow", access: verbs.AccessRemoteRead,
		steps: [][]rulePkt{{req(bth.RCWriteOnly, 0, 8).reth(ruleKey, 0, 8)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakInv)}, state: verbs.QPSErr, event: verbs.EventQPReqErr},
	{name: "class C too many RDMA/atomic requests: a READ with max_dest_rd_atomic 0",
		setup: func(w *wire) { w.q.attr.MaxDestRDAtomic = 0 },
		steps: [][]rulePkt{{req(bth.RCReadRequest, 0, 0).reth(ruleKey, 0, 8)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakInv)}, state: verbs.QPSErr, event: verbs.EventQPReqErr},
	{name: "class C misaligned atomic",
		steps: [][]rulePkt{{req(bth.RCFetchAdd, 0, 0).atomic(ruleKey, 4, 1)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakInv)}, state: verbs.QPSErr, event: verbs.EventQPReqErr},
	{name: "class C R_Key violation: a WRITE beyond the MR",
		steps: [][]rulePkt{{req(bth.RCWriteOnly, 0, 16).reth(ruleKey, 8192-8, 16)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakAcc)}, state: verbs.QPSErr, event: verbs.EventQPAccessErr},
	{name: "class C receive WR too short: NAK invalid request, the WR completes LOC_LEN_ERR", recv: []int{16},
		steps: [][]rulePkt{{req(bth.RCSendOnly, 0, 100)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakInv)}, wcs: []wantWC{{verbs.WCLocLenErr, verbs.WCRecv, 0}}, state: verbs.QPSErr},
	{name: "class A receive WR without local write: NAK remote operational error, LOC_PROT_ERR", recv: []int{-1},
		steps: [][]rulePkt{{req(bth.RCSendOnly, 0, 100)}},
		want:  []wantPkt{out(bth.RCAck, 0, nakOp)}, wcs: []wantWC{{verbs.WCLocProtErr, verbs.WCRecv, 0}}, state: verbs.QPSErr},
	{name: "acknowledge: the AckReq requests of one step draw one cumulative ACK", recv: []int{64, 64, 64},
		steps: [][]rulePkt{{req(bth.RCSendOnly, 0, 8).ackReq(), req(bth.RCSendOnly, 1, 8).ackReq(), req(bth.RCSendOnly, 2, 8).ackReq()}},
		want:  []wantPkt{{bth.RCAck, 2, ack, 3}}, wcs: []wantWC{{verbs.WCSuccess, verbs.WCRecv, 8}, {verbs.WCSuccess, verbs.WCRecv, 8}, {verbs.WCSuccess, verbs.WCRecv, 8}}},
	{name: "acknowledge: a WRITE with immediate consumes a receive WR and completes it", recv: []int{0},
		steps: [][]rulePkt{{req(bth.RCWriteFirst, 0, 1024).reth(ruleKey, 0, 1030), req(bth.RCWriteLastImm, 1, 6).ackReq()}},
		want:  []wantPkt{{bth.RCAck, 1, ack, 1}}, wcs: []wantWC{{verbs.WCSuccess, verbs.WCRecvRDMAWithImm, 1030}}},

	{name: "IBA 10.6.7.2.5 SEND_WITH_INV invalidates a window bound to the QP: a WRITE through its rkey is then class C remote access",
		recv: []int{64}, check: func(t *testing.T, w *wire, mr *Region) {
			bindWindow(t, w, mr, w.q.qpn)
			got := w.deliverRule([]rulePkt{req(bth.RCWriteOnly, 0, 8).reth(winKey, mr.Addr, 8),
				req(bth.RCSendOnlyInv, 1, 8).ieth(winKey).ackReq()}, wireRQPSN, mr)
			checkPackets(t, got, []wantPkt{out(bth.RCAck, 1, ack)}, wireRQPSN)
			if wc := w.wcs(w.rcq); len(wc) != 1 || wc[0].Status != verbs.WCSuccess || wc[0].Flags&verbs.WCWithInv == 0 || wc[0].InvalidatedRKey != winKey {
				t.Fatalf("receive completions %v, want one success WITH_INV %#x", wc, winKey)
			}
			got = w.deliverRule([]rulePkt{req(bth.RCWriteOnly, 2, 8).reth(winKey, mr.Addr, 8)}, wireRQPSN, mr)
			checkPackets(t, got, []wantPkt{out(bth.RCAck, 2, nakAcc)}, wireRQPSN)
			if w.q.attr.State != verbs.QPSErr {
				t.Fatalf("state %v after the refused WRITE", w.q.attr.State)
			}
		}},
	{name: "rxe class J SEND_WITH_INV naming an rkey that cannot be invalidated: placed and acknowledged, the receive WR fails REM_INV_REQ_ERR, QP to ERR",
		recv:  []int{64},
		steps: [][]rulePkt{{req(bth.RCSendOnlyInv, 0, 8).ieth(ruleKey).ackReq()}},
		want:  []wantPkt{out(bth.RCAck, 0, ack)}, wcs: []wantWC{{verbs.WCRemInvReqErr, verbs.WCRecv, 0}}, state: verbs.QPSErr},
	{name: "IBA 10.6.7.2.4 a type 2B window answers only the QP it is bound to: any other QP gets class C remote access",
		check: func(t *testing.T, w *wire, mr *Region) {
			bindWindow(t, w, mr, w.q.qpn+1)
			got := w.deliverRule([]rulePkt{req(bth.RCWriteOnly, 0, 8).reth(winKey, mr.Addr, 8)}, wireRQPSN, mr)
			checkPackets(t, got, []wantPkt{out(bth.RCAck, 0, nakAcc)}, wireRQPSN)
			if w.q.attr.State != verbs.QPSErr {
				t.Fatalf("state %v after the refused WRITE", w.q.attr.State)
			}
		}},

	{name: "UC class D PSN gap: the message is dropped, the next ONLY resynchronizes", typ: verbs.QPTypeUC, recv: []int{4096, 4096},
		steps: [][]rulePkt{{req(bth.UCSendFirst, 0, 1024)}, {req(bth.UCSendLast, 2, 8)}, {req(bth.UCSendOnly, 5, 8)}},
		wcs:   []wantWC{{verbs.WCSuccess, verbs.WCRecv, 8}}},
	{name: "UC class D1 a FIRST inside a message starts a new one", typ: verbs.QPTypeUC, recv: []int{4096},
		steps: [][]rulePkt{{req(bth.UCSendFirst, 0, 1024)}, {req(bth.UCSendFirst, 1, 1024)}, {req(bth.UCSendLast, 2, 8)}},
		wcs:   []wantWC{{verbs.WCSuccess, verbs.WCRecv, 1032}}},
	{name: "UC class D missing FIRST: a MIDDLE outside a message is dropped", typ: verbs.QPTypeUC, recv: []int{4096},
		steps: [][]rulePkt{{req(bth.UCSendMiddle, 0, 1024)}, {req(bth.UCSendLast, 1, 8)}, {req(bth.UCSendOnly, 2, 8)}},
		wcs:   []wantWC{{verbs.WCSuccess, verbs.WCRecv, 8}}},
	{name: "UC class D no receive WR: the message is dropped without an RNR NAK", typ: verbs.QPTypeUC,
		steps: [][]rulePkt{{req(bth.UCSendOnly, 0, 8).ackReq()}}},
	{name: "UC class D R_Key violation: the WRITE is dropped silently", typ: verbs.QPTypeUC,
		steps: [][]rulePkt{{req(bth.UCWriteOnly, 0, 16).reth(ruleKey, 8192-8, 16)}}},
	{name: "UC class D length: a FIRST shorter than the PMTU is dropped", typ: verbs.QPTypeUC, recv: []int{4096},
		steps: [][]rulePkt{{req(bth.UCSendFirst, 0, 100)}, {req(bth.UCSendLast, 1, 8)}}},
	{name: "UC receive WR too short: the WR completes LOC_LEN_ERR and the QP fails", typ: verbs.QPTypeUC, recv: []int{16},
		steps: [][]rulePkt{{req(bth.UCSendOnly, 0, 100)}},
		wcs:   []wantWC{{verbs.WCLocLenErr, verbs.WCRecv, 0}}, state: verbs.QPSErr},
}

func TestResponderRules(t *testing.T) {
	for _, rule := range respRules {
		t.Run(rule.name, func(t *testing.T) {
			typ := rule.typ
			if typ == 0 {
				typ = verbs.QPTypeRC
			}
			o := rcOpts{access: rule.access}
			if o.access != 0 {
				o.access |= verbs.AccessLocalWrite
			}
			w := newWire(t, typ, o)
			mr := w.mem.reg(1, seq8(8192), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
			for i, size := range rule.recv {
				acc := verbs.AccessLocalWrite
				if size < 0 {
					size, acc = 4096, 0
				}
				rb := w.mem.reg(1, make([]byte, max(size, 1)), acc)
				wr := verbs.RecvWR{WRID: uint64(i + 1)}
				if size > 0 {
					wr.SGL = []verbs.SGE{rb.sge(0, size)}
				}
				w.recv(wr)
			}
			if rule.setup != nil {
				rule.setup(w)
			}
			var got []bth.Packet
			for _, step := range rule.steps {
				got = append(got, w.deliverRule(step, wireRQPSN, mr)...)
			}
			checkPackets(t, got, rule.want, wireRQPSN)
			checkWCs(t, w.wcs(w.rcq), rule.wcs)
			if want := max(rule.state, verbs.QPSRTS); w.q.attr.State != want {
				t.Errorf("state %v, want %v", w.q.attr.State, want)
			}
			if rule.event != 0 && (len(w.events) != 1 || w.events[0].Type != rule.event) {
				t.Errorf("events %v, want one %v", w.events, rule.event)
			}
			if rule.check != nil {
				rule.check(t, w, mr)
			}
		})
	}
}

// deliverRule delivers pkts in one shard step: PSNs are offsets from base,
// and a RETH or AtomicETH with R_Key ruleKey names mr (VA an offset into it).
func (w *wire) deliverRule(pkts []rulePkt, base bth.PSN, mr *Region) []bth.Packet {
	items := make([]rxItem, len(pkts))
	for i, p := range pkts {
		f := p.f
		f.PSN = base.Add(int(f.PSN))
		if f.RETH.RKey == ruleKey {
			f.RETH.RKey, f.RETH.VA = mr.RKey, mr.Addr+f.RETH.VA
		}
		if f.Atomic.RKey == ruleKey {
			f.Atomic.RKey, f.Atomic.VA = mr.RKey, mr.Addr+f.Atomic.VA
		}
		items[i] = w.packet(f, filled(p.n, 0x5A))
	}
	return w.deliver(items...)
}

// checkPackets compares emitted packets with want (PSNs relative to base).
func checkPackets(t *testing.T, got []bth.Packet, want []wantPkt, base bth.PSN) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		g, w := got[i], want[i]
		ok = g.Opcode() == w.op && g.PSN() == base.Add(w.psn) && g.DestQP() == wirePeerQPN &&
			(!w.op.HasAETH() || g.AETH().Syndrome == w.syn) && (w.msn < 0 || g.AETH().MSN == uint32(w.msn))
	}
	if !ok {
		t.Errorf("emitted %s, want %v", pktsString(got), want)
	}
}

// checkWCs compares completions with want.
func checkWCs(t *testing.T, got []verbs.WC, want []wantWC) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		ok = got[i].Status == want[i].status && (got[i].Status != verbs.WCSuccess || got[i].Opcode == want[i].op && got[i].ByteLen == want[i].n)
	}
	if !ok {
		s := ""
		for _, w := range got {
			s += wcString(w) + " "
		}
		t.Errorf("completions %s, want %v", s, want)
	}
}

func (w wantPkt) String() string { return fmt.Sprintf("%v@%+d/%#x", w.op, w.psn, w.syn) }

// seq8 is n bytes counting up from 0, so the first 8 are the little-endian
// 0x0706050403020100.
func seq8(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}
