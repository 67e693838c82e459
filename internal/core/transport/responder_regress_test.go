package transport

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// capLink is a nullLink that keeps a copy of every packet written.
type capLink struct {
	nullLink
	mu   sync.Mutex
	sent [][]byte
}

func (l *capLink) WriteBatch(m []link.Message) (int, error) {
	l.mu.Lock()
	for i := range m {
		l.sent = append(l.sent, datagrams(&m[i])...)
	}
	l.mu.Unlock()
	return len(m), nil
}

// datagrams returns copies of the datagrams m carries: itself, or each
// segment of a train, as a Link that sends one by one splits it.
func datagrams(m *link.Message) [][]byte {
	out := make([][]byte, m.NumSegments())
	for i := range out {
		b := make([]byte, link.MaxDatagram)
		out[i] = b[:m.CopySegment(b, i)]
	}
	return out
}

// respRig drives one RC responder QP with hand-made request packets from a
// peer QP 0x77 at addrB and captures what it sends back.
type respRig struct {
	t *testing.T
	n *node
	l *capLink
	q *QP
}

const rigPeerQPN = 0x77

// rigPSN is the first request PSN the rig's QP expects.
const rigPSN = bth.PSN(0x123400 + rigPeerQPN)

func newRespRig(t *testing.T, maxDestRDAtomic uint8) *respRig {
	t.Helper()
	return newRespRigType(t, verbs.QPTypeRC, maxDestRDAtomic)
}

// newRespRigType is newRespRig for a QP of type typ (RC or UC; a UC QP takes
// no READ/atomic attributes).
func newRespRigType(t *testing.T, typ verbs.QPType, maxDestRDAtomic uint8) *respRig {
	t.Helper()
	l := &capLink{nullLink: nullLink{done: make(chan struct{})}}
	n := newNode(t, l, 1)
	t.Cleanup(func() { n.close(t) })
	q := n.createQP(t, typ, rcOpts{})
	if typ == verbs.QPTypeUC {
		for _, step := range []struct {
			a verbs.QPAttr
			m verbs.QPAttrMask
		}{
			{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
				verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
			{verbs.QPAttr{State: verbs.QPSRTR, AV: verbs.AddressVector{DGID: addrB.Addr()}, PathMTU: verbs.MTU1024, DestQPN: rigPeerQPN,
				RQPSN: uint32(rigPSN)}, verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN},
			{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x1000}, verbs.QPAttrState | verbs.QPAttrSQPSN},
		} {
			if err := q.Modify(&step.a, step.m); err != nil {
				t.Fatal(err)
			}
		}
		return &respRig{t: t, n: n, l: l, q: q}
	}
	must := func(a verbs.QPAttr, m verbs.QPAttrMask) {
		t.Helper()
		if err := q.Modify(&a, m); err != nil {
			t.Fatal(err)
		}
	}
	must(verbs.QPAttr{State: verbs.QPSInit, PortNum: 1,
		AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags)
	must(verbs.QPAttr{State: verbs.QPSRTR, AV: verbs.AddressVector{DGID: addrB.Addr()}, PathMTU: verbs.MTU1024, DestQPN: rigPeerQPN,
		RQPSN: uint32(rigPSN), MaxDestRDAtomic: maxDestRDAtomic, MinRNRTimer: 1},
		verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRDAtomic|verbs.QPAttrMinRNRTimer)
	must(verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 0x1000, MaxRDAtomic: 16},
		verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRDAtomic)
	return &respRig{t: t, n: n, l: l, q: q}
}

// feed delivers one request packet to the QP in one shard step.
func (r *respRig) feed(f bth.Fields, payload []byte) {
	r.t.Helper()
	q, peer := r.q, addrB
	f.PKey, f.DestQP = 0xFFFF, q.qpn
	buf := link.GetBuffer()
	pkt := bth.Append(buf[:0], &f, payload)
	env := bth.Envelope{Src: peer.Addr(), Dst: addrA.Addr(), DF: true, SrcPort: peer.Port(), DstPort: addrA.Port()}
	bth.PutICRC(&env, pkt)
	it := rxItem{buf: buf, n: len(pkt), src: peer, local: addrA.Addr(), qp: q}
	if err := q.run("feed", func() {
		now := r.n.e.cfg.Clock.Now()
		q.sh.budget = slicePackets // as a step starts
		q.receive(now, &it)
		q.service(now)
		q.sh.flush()
	}, false); err != nil {
		r.t.Fatal(err)
	}
}

// sent returns the packets sent since the last call.
func (r *respRig) sent() []bth.Packet {
	r.t.Helper()
	r.l.mu.Lock()
	raw := r.l.sent
	r.l.sent = nil
	r.l.mu.Unlock()
	out := make([]bth.Packet, 0, len(raw))
	for _, b := range raw {
		p, err := bth.Parse(b)
		if err != nil {
			r.t.Fatalf("responder sent a malformed packet: %v", err)
		}
		out = append(out, p)
	}
	return out
}

// expectNAK checks that exactly one packet, a NAK with code for PSN p, was sent.
func (r *respRig) expectNAK(code uint8, p bth.PSN) {
	r.t.Helper()
	pk := r.sent()
	if len(pk) != 1 || pk[0].Opcode() != bth.RCAck || !pk[0].AETH().IsNAK() ||
		pk[0].AETH().NAKCode() != code || pk[0].PSN() != p {
		r.t.Fatalf("sent %s, want one NAK code %d for PSN %#x", pktsString(pk), code, p)
	}
}

// expectRead checks that the packets sent are the READ responses for PSN p
// carrying want.
func (r *respRig) expectRead(p bth.PSN, want []byte) {
	r.t.Helper()
	pk := r.sent()
	var got []byte
	for i, x := range pk {
		if op := x.Opcode(); op < bth.RCReadResponseFirst || op > bth.RCReadResponseOnly || x.PSN() != p.Add(i) {
			r.t.Fatalf("sent %s, want READ responses from PSN %#x", pktsString(pk), p)
		}
		got = append(got, x.Payload()...)
	}
	if len(pk) == 0 || !bytes.Equal(got, want) {
		r.t.Fatalf("READ response: %d packets, %d bytes %x, want %d bytes %x", len(pk), len(got), got, len(want), want)
	}
}

func (r *respRig) state() verbs.QPState {
	a, _ := r.q.Query()
	return a.State
}

// errorEvents counts the QP error events raised (QP_FATAL, QP_REQ_ERR,
// QP_ACCESS_ERR) by type.
func (r *respRig) errorEvents() map[verbs.EventType]int {
	r.n.mu.Lock()
	defer r.n.mu.Unlock()
	m := map[verbs.EventType]int{}
	for _, ev := range r.n.events {
		switch ev.Type {
		case verbs.EventQPFatal, verbs.EventQPReqErr, verbs.EventQPAccessErr:
			if ev.QPN != r.q.qpn {
				r.t.Errorf("event %v names QP %#x, want %#x", ev.Type, ev.QPN, r.q.qpn)
			}
			m[ev.Type]++
		}
	}
	return m
}

func (r *respRig) expectOneEvent(want verbs.EventType) {
	r.t.Helper()
	if got := r.errorEvents(); len(got) != 1 || got[want] != 1 {
		r.t.Fatalf("QP error events %v, want exactly one of type %v", got, want)
	}
}

// unregister is ibv_dereg_mr as roce does it: the keys stop resolving,
// then Engine.Barrier.
func (r *respRig) unregister(mr *Region) {
	r.n.mem.mu.Lock()
	delete(r.n.mem.byL, mr.LKey)
	delete(r.n.mem.byR, mr.RKey)
	r.n.mem.mu.Unlock()
	r.n.e.Barrier()
}

// replace makes mr's keys resolve to the region nr (a re-registration),
// then Engine.Barrier.
func (r *respRig) replace(mr *Region, nr Region) {
	r.n.mem.mu.Lock()
	r.n.mem.byL[mr.LKey] = &nr
	r.n.mem.byR[mr.RKey] = &nr
	r.n.mem.mu.Unlock()
	r.n.e.Barrier()
}

func pktsString(pk []bth.Packet) string {
	var b bytes.Buffer
	for _, p := range pk {
		b.WriteString(p.Opcode().String())
		if p.Opcode().HasAETH() {
			b.WriteString("/")
			b.WriteString(map[bool]string{true: "NAK", false: "ACK"}[p.AETH().IsNAK()])
		}
		b.WriteString(" ")
	}
	return "[" + b.String() + "]"
}

func filled(n int, v byte) []byte { return bytes.Repeat([]byte{v}, n) }

// A multi-packet WRITE resolves its R_Key for every packet: once the MR is
// deregistered (or re-registered without remote write, or smaller) and
// Barrier has returned, no later packet lands in the buffer; the packet is a
// remote access error (class C) and the QP raises QP_ACCESS_ERR.
func TestRemoteWriteResolvesRKeyEveryPacket(t *testing.T) {
	cases := []struct {
		name   string
		change func(r *respRig, mr *Region)
		ok     bool
	}{
		{"still registered", func(r *respRig, mr *Region) {}, true},
		{"deregistered", func(r *respRig, mr *Region) { r.unregister(mr) }, false},
		{"remote write revoked", func(r *respRig, mr *Region) {
			nr := *mr
			nr.Access = verbs.AccessLocalWrite | verbs.AccessRemoteRead
			r.replace(mr, nr)
		}, false},
		{"region shrunk", func(r *respRig, mr *Region) {
			nr := *mr
			nr.Buf = mr.Buf[:1536]
			r.replace(mr, nr)
		}, false},
		{"other PD", func(r *respRig, mr *Region) {
			nr := *mr
			nr.PD = 2
			r.replace(mr, nr)
		}, false},
	}
	for _, tc := range cases {
		for _, next := range []bth.Opcode{bth.RCWriteMiddle, bth.RCWriteLast} {
			t.Run(tc.name+"/"+next.String(), func(t *testing.T) {
				r := newRespRig(t, 16)
				mr := r.n.mem.reg(1, make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
				dmaLen := uint32(2048)
				if next == bth.RCWriteMiddle {
					dmaLen = 3072
				}
				r.feed(bth.Fields{Opcode: bth.RCWriteFirst, PSN: rigPSN,
					RETH: bth.RETH{VA: mr.Addr, RKey: mr.RKey, DMALen: dmaLen}}, filled(1024, 1))
				if !bytes.Equal(mr.Buf[:1024], filled(1024, 1)) {
					t.Fatal("WRITE FIRST not placed")
				}
				tc.change(r, mr)
				r.sent()
				r.feed(bth.Fields{Opcode: next, PSN: rigPSN + 1, AckReq: true}, filled(1024, 2))
				if tc.ok {
					if !bytes.Equal(mr.Buf[1024:2048], filled(1024, 2)) {
						t.Fatal("WRITE packet not placed in a live MR")
					}
					if pk := r.sent(); len(pk) != 1 || pk[0].AETH().IsNAK() || pk[0].PSN() != rigPSN+1 {
						t.Fatalf("sent %s, want an ACK", pktsString(pk))
					}
					if s := r.state(); s != verbs.QPSRTS {
						t.Fatalf("state %v", s)
					}
					return
				}
				if !bytes.Equal(mr.Buf[1024:], make([]byte, 3072)) {
					t.Fatal("WRITE landed in the buffer after its key stopped resolving")
				}
				r.expectNAK(bth.NAKRemoteAccess, rigPSN+1)
				if s := r.state(); s != verbs.QPSErr {
					t.Fatalf("state %v, want ERR", s)
				}
				r.expectOneEvent(verbs.EventQPAccessErr)
				// Anything after is ignored in ERR.
				r.feed(bth.Fields{Opcode: bth.RCWriteLast, PSN: rigPSN + 2}, filled(1024, 3))
				if !bytes.Equal(mr.Buf[1024:], make([]byte, 3072)) {
					t.Fatal("memory changed in ERR")
				}
			})
		}
	}
}

// A READ is answered within the step that resolves its key; a replayed
// (duplicate) READ resolves the key again: after ibv_dereg_mr it reads
// nothing and is a remote access error (rxe_recheck_mr).
func TestReadReplayResolvesRKeyAgain(t *testing.T) {
	r := newRespRig(t, 16)
	mr := r.n.mem.reg(1, pattern(4096, 5), verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	read := func(p bth.PSN, off, n uint32) {
		r.feed(bth.Fields{Opcode: bth.RCReadRequest, PSN: p,
			RETH: bth.RETH{VA: mr.Addr + uint64(off), RKey: mr.RKey, DMALen: n}}, nil)
	}
	read(rigPSN, 0, 2048)
	r.expectRead(rigPSN, mr.Buf[:2048])
	read(rigPSN+1, 1024, 1024) // the second half again
	r.expectRead(rigPSN+1, mr.Buf[1024:2048])
	r.unregister(mr)
	read(rigPSN, 0, 2048)
	r.expectNAK(bth.NAKRemoteAccess, rigPSN) // and no READ response
	if s := r.state(); s != verbs.QPSErr {
		t.Fatalf("state %v, want ERR", s)
	}
	r.expectOneEvent(verbs.EventQPAccessErr)
}

// The same for a replay of the middle of a multi-packet READ.
func TestReadReplaySubrangeAfterDeregNAKsRemoteAccess(t *testing.T) {
	r := newRespRig(t, 16)
	mr := r.n.mem.reg(1, pattern(4096, 5), verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	r.feed(bth.Fields{Opcode: bth.RCReadRequest, PSN: rigPSN,
		RETH: bth.RETH{VA: mr.Addr, RKey: mr.RKey, DMALen: 3000}}, nil)
	r.expectRead(rigPSN, mr.Buf[:3000])
	r.unregister(mr)
	r.feed(bth.Fields{Opcode: bth.RCReadRequest, PSN: rigPSN + 1,
		RETH: bth.RETH{VA: mr.Addr + 1024, RKey: mr.RKey, DMALen: 1976}}, nil)
	r.expectNAK(bth.NAKRemoteAccess, rigPSN+1)
}

// C9-88 (rxe check_rkey): a zero-length RDMA READ or WRITE names no memory,
// so its R_Key and VA are not validated; WRITE WITH IMMEDIATE of length 0
// still consumes a receive WR and completes with the immediate.
func TestZeroLengthRDMASkipsRKeyCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		qa, qb := rcPair(t, a, b, rcOpts{})
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 50}}); err != nil {
			t.Fatal(err)
		}
		const bad, va = 0xdead, 0xbad0000
		wrs := []verbs.SendWR{
			{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RemoteAddr: va, RKey: bad},
			{WRID: 2, Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled, RemoteAddr: va, RKey: bad},
			{WRID: 3, Opcode: verbs.WRRDMAWriteWithImm, Flags: verbs.SendSignaled, RemoteAddr: va, RKey: bad, Imm: 0x1234},
		}
		if _, err := qa.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		for i, w := range waitWC(t, a.scq, 3, 10*time.Second) {
			if w.WRID != uint64(i+1) || w.Status != verbs.WCSuccess {
				t.Fatalf("completion %d: %s, want success", i, wcString(w))
			}
		}
		w := waitWC(t, b.rcq, 1, time.Second)[0]
		if w.WRID != 50 || w.Status != verbs.WCSuccess || w.Opcode != verbs.WCRecvRDMAWithImm || w.ByteLen != 0 ||
			w.ImmData != 0x1234 || w.Flags&verbs.WCWithImm == 0 {
			t.Fatalf("receive %s imm %#x, want RECV_RDMA_WITH_IMM len 0 imm 0x1234", wcString(w), w.ImmData)
		}
		for _, q := range []*QP{qa, qb} {
			if at, _ := q.Query(); at.State != verbs.QPSRTS {
				t.Fatalf("QP %#x in %v", q.QPN(), at.State)
			}
		}
		if n := b.e.Stats().Snapshot().NAKsSent[NAKRemoteAccess]; n != 0 {
			t.Fatalf("%d remote access NAKs", n)
		}
	})
}

// A duplicate zero-length READ is replayed without a key either.
func TestZeroLengthReadReplaySkipsRKeyCheck(t *testing.T) {
	r := newRespRig(t, 16)
	for i := 0; i < 2; i++ {
		r.feed(bth.Fields{Opcode: bth.RCReadRequest, PSN: rigPSN,
			RETH: bth.RETH{VA: 0xbad0000, RKey: 0xdead, DMALen: 0}}, nil)
		pk := r.sent()
		if len(pk) != 1 || pk[0].Opcode() != bth.RCReadResponseOnly || len(pk[0].Payload()) != 0 || pk[0].PSN() != rigPSN {
			t.Fatalf("try %d sent %s, want one empty READ RESPONSE ONLY", i, pktsString(pk))
		}
	}
	if s := r.state(); s != verbs.QPSRTS {
		t.Fatalf("state %v", s)
	}
}

// max_dest_rd_atomic 0 means no responder resources: a READ or an atomic is
// an invalid request (class C), as rxe check_resource decides
// (RESPST_ERR_TOO_MANY_RDMA_ATM_REQ).
func TestMaxDestRDAtomicZeroRefusesReadAndAtomic(t *testing.T) {
	for _, op := range []bth.Opcode{bth.RCReadRequest, bth.RCFetchAdd, bth.RCCompareSwap} {
		t.Run(op.String(), func(t *testing.T) {
			r := newRespRig(t, 0)
			mr := r.n.mem.reg(1, pattern(64, 3), verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
			before := append([]byte(nil), mr.Buf...)
			r.feed(bth.Fields{Opcode: op, PSN: rigPSN,
				RETH:   bth.RETH{VA: mr.Addr, RKey: mr.RKey, DMALen: 8},
				Atomic: bth.AtomicETH{VA: mr.Addr, RKey: mr.RKey, SwapAdd: 1, Compare: binary.NativeEndian.Uint64(before)}}, nil)
			r.expectNAK(bth.NAKInvalidRequest, rigPSN)
			if !bytes.Equal(mr.Buf, before) {
				t.Fatal("memory changed")
			}
			if s := r.state(); s != verbs.QPSErr {
				t.Fatalf("state %v, want ERR", s)
			}
			r.expectOneEvent(verbs.EventQPReqErr)
		})
	}
}

// The responder resources are a ring of max_dest_rd_atomic entries reused
// oldest first, as in rxe (rxe_prepare_res): a new READ/atomic is never
// refused for lack of a free resource (the requester's max_rd_atomic keeps
// it within the limit), duplicates within the last max_dest_rd_atomic are
// answered from the saved resources (an atomic is not executed again), and
// an older duplicate is dropped (class D) without an error.
func TestResponderResourcesRecycleOldest(t *testing.T) {
	r := newRespRig(t, 2)
	mr := r.n.mem.reg(1, pattern(4096, 7), verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	read := func(p bth.PSN, off uint32) {
		r.feed(bth.Fields{Opcode: bth.RCReadRequest, PSN: p,
			RETH: bth.RETH{VA: mr.Addr + uint64(off), RKey: mr.RKey, DMALen: 8}}, nil)
	}
	fadd := func(p bth.PSN) {
		r.feed(bth.Fields{Opcode: bth.RCFetchAdd, PSN: p,
			Atomic: bth.AtomicETH{VA: mr.Addr + 64, RKey: mr.RKey, SwapAdd: 5}}, nil)
	}
	for i := 0; i < 3; i++ { // one more than max_dest_rd_atomic
		read(rigPSN.Add(i), uint32(8*i))
		r.expectRead(rigPSN.Add(i), mr.Buf[8*i:8*i+8])
	}
	read(rigPSN+2, 16)
	r.expectRead(rigPSN+2, mr.Buf[16:24])
	read(rigPSN+1, 8)
	r.expectRead(rigPSN+1, mr.Buf[8:16])
	read(rigPSN, 0) // recycled: dropped
	if pk := r.sent(); len(pk) != 0 {
		t.Fatalf("duplicate of a recycled READ sent %s, want nothing", pktsString(pk))
	}
	orig := binary.NativeEndian.Uint64(mr.Buf[64:])
	fadd(rigPSN + 3)
	for try := 0; try < 2; try++ {
		pk := r.sent()
		if len(pk) != 1 || pk[0].Opcode() != bth.RCAtomicAck || pk[0].AtomicAckETH().Orig != orig || pk[0].PSN() != rigPSN+3 {
			t.Fatalf("sent %s, want ATOMIC ACK orig %#x", pktsString(pk), orig)
		}
		fadd(rigPSN + 3) // duplicate: answered from the resource
	}
	r.sent()
	if got := binary.NativeEndian.Uint64(mr.Buf[64:]); got != orig+5 {
		t.Fatalf("atomic executed %d times", (got-orig)/5)
	}
	read(rigPSN+1, 8) // the oldest when the atomic came: recycled, dropped
	if pk := r.sent(); len(pk) != 0 {
		t.Fatalf("duplicate of a recycled READ sent %s", pktsString(pk))
	}
	read(rigPSN+2, 16) // still in the window
	r.expectRead(rigPSN+2, mr.Buf[16:24])
	if s := r.state(); s != verbs.QPSRTS {
		t.Fatalf("state %v", s)
	}
	if ev := r.errorEvents(); len(ev) != 0 {
		t.Fatalf("QP error events %v", ev)
	}
	if r.n.e.Stats().Snapshot().NAKsSent[NAKInvalidReq] != 0 {
		t.Fatal("invalid request NAK sent")
	}
}

// A class C error with no receive WR to complete raises exactly one
// affiliated asynchronous error: remote access -> QP_ACCESS_ERR (Local
// Access Violation WQ Error), invalid request -> QP_REQ_ERR (Local Invalid
// Request WQ Error), remote operational error -> QP_FATAL (Local WQ
// Catastrophic Error).
func TestClassCWithoutRecvWRRaisesAffiliatedEvent(t *testing.T) {
	cases := []struct {
		name  string
		do    func(r *respRig, mr *Region)
		code  uint8
		event verbs.EventType
	}{
		{"remote access", func(r *respRig, mr *Region) {
			r.feed(bth.Fields{Opcode: bth.RCWriteOnly, PSN: rigPSN,
				RETH: bth.RETH{VA: mr.Addr, RKey: 0xdead, DMALen: 16}}, filled(16, 1))
		}, bth.NAKRemoteAccess, verbs.EventQPAccessErr},
		{"invalid request", func(r *respRig, mr *Region) {
			r.feed(bth.Fields{Opcode: bth.RCWriteMiddle, PSN: rigPSN}, filled(1024, 1))
		}, bth.NAKInvalidRequest, verbs.EventQPReqErr},
		{"remote operational", func(r *respRig, mr *Region) {
			q := r.q
			q.run("t", func() {
				q.resp.classC(r.n.e.cfg.Clock.Now(), rigPSN, bth.NAKRemoteOpErr, verbs.WCLocQPOpErr)
				q.sh.flush()
			}, false)
		}, bth.NAKRemoteOpErr, verbs.EventQPFatal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRespRig(t, 16)
			mr := r.n.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			tc.do(r, mr)
			r.expectNAK(tc.code, rigPSN)
			if s := r.state(); s != verbs.QPSErr {
				t.Fatalf("state %v, want ERR", s)
			}
			r.expectOneEvent(tc.event)
		})
	}
}

// When a class C error completes a receive WR with the error status, the
// completion reports it: no affiliated error event.
func TestClassCWithRecvWRRaisesNoEvent(t *testing.T) {
	r := newRespRig(t, 16)
	dst := r.n.mem.reg(1, make([]byte, 16), verbs.AccessLocalWrite)
	if _, err := r.q.PostRecv([]verbs.RecvWR{{WRID: 9, SGL: []verbs.SGE{dst.sge(0, 16)}}}); err != nil {
		t.Fatal(err)
	}
	r.feed(bth.Fields{Opcode: bth.RCSendOnly, PSN: rigPSN}, filled(100, 1))
	r.expectNAK(bth.NAKInvalidRequest, rigPSN)
	w := waitWC(t, r.n.rcq, 1, 10*time.Second)[0]
	if w.WRID != 9 || w.Status != verbs.WCLocLenErr {
		t.Fatalf("receive %s, want LOC_LEN_ERR", wcString(w))
	}
	if s := r.state(); s != verbs.QPSErr {
		t.Fatalf("state %v, want ERR", s)
	}
	if ev := r.errorEvents(); len(ev) != 0 {
		t.Fatalf("QP error events %v, want none", ev)
	}
}

// TestUCWriteResolvesRKeyEveryPacket: as on RC, a UC WRITE resolves its R_Key
// for every packet, so once the MR is deregistered the rest of the message is
// dropped (UC has no NAK) and never lands in the buffer.
func TestUCWriteResolvesRKeyEveryPacket(t *testing.T) {
	r := newRespRigType(t, verbs.QPTypeUC, 0)
	mr := r.n.mem.reg(1, make([]byte, 4096), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	r.feed(bth.Fields{Opcode: bth.UCWriteFirst, PSN: rigPSN,
		RETH: bth.RETH{VA: mr.Addr, RKey: mr.RKey, DMALen: 3072}}, filled(1024, 1))
	if !bytes.Equal(mr.Buf[:1024], filled(1024, 1)) {
		t.Fatal("UC WRITE FIRST not placed")
	}
	r.unregister(mr)
	r.feed(bth.Fields{Opcode: bth.UCWriteMiddle, PSN: rigPSN + 1}, filled(1024, 2))
	r.feed(bth.Fields{Opcode: bth.UCWriteLast, PSN: rigPSN + 2}, filled(1024, 3))
	if !bytes.Equal(mr.Buf[1024:], make([]byte, 3072)) {
		t.Fatal("UC WRITE landed in the buffer after its key stopped resolving")
	}
	if pk := r.sent(); len(pk) != 0 {
		t.Fatalf("UC responder sent %s, want nothing", pktsString(pk))
	}
}
