package transport

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// responder executes inbound requests (rxe_resp.c): checkPSN, then respChecks,
// each returning what is wrong (respErr); a failure goes to rcFailed or, on
// UC, to ucFailed (uc.go). Owner shard only.
type responder struct {
	q       *QP
	psn     bth.PSN // expected PSN
	msn     uint32  // messages completed (24 bits on the wire)
	sentNAK bool    // one PSN-sequence NAK per gap

	// opcode is the last request executed (bth.ValidSequence); noOpcode
	// outside a message.
	opcode   bth.Opcode
	dropping bool         // UC: dropping until the next FIRST/ONLY
	wr       verbs.RecvWR // receive WR taken for the current message
	haveWR   bool
	off      uint32 // bytes placed into wr

	// The current WRITE as its RETH, never as a slice of the MR: writeTarget
	// resolves the key again for every packet.
	wrkey uint32 // RETH R_Key of the current WRITE
	wva   uint64 // RETH VA of the current WRITE
	woff  uint32 // bytes placed so far
	wlen  uint32 // RETH DMA length

	// Responder resources: saved READ/atomic requests (saveResource).
	res     []rdResource
	resNext int

	// A positive ACK held until the end of the step (sendAck).
	ackPending bool
	ackPSN     bth.PSN
	ackMSN     uint32

	read readReply // the READ response going out
	held []rxItem  // requests waiting behind read (see hold)
	req  request   // the request being checked (onRequest)

	// placed: the packet onRequest is given had its payload placed while its
	// ICRC was checked (placeTarget).
	placed bool
}

// noOpcode is the responder's opcode outside any message: not a FIRST or
// MIDDLE, so bth.ValidSequence lets only a FIRST or ONLY follow.
const noOpcode bth.Opcode = 0xFF

// newResponder is q's initial responder, keeping the storage of res and wr.
func newResponder(q *QP, res []rdResource, wr verbs.RecvWR) responder {
	return responder{q: q, res: res, wr: wr, opcode: noOpcode}
}

// endWR completes the receive WR in progress, if any, with status.
func (rs *responder) endWR(status verbs.WCStatus) {
	if rs.haveWR {
		rs.haveWR = false
		rs.q.pushWC(rs.q.init.RecvCQ, &verbs.WC{WRID: rs.wr.WRID, Status: status, Opcode: verbs.WCRecv, QPNum: rs.q.qpn}, false)
	}
}

// rdResource is a READ or atomic accepted, kept so that a duplicate is
// answered again without executing twice (rxe resp_res).
type rdResource struct {
	valid       bool
	atomic      bool
	empty       bool // a FLUSH or ATOMIC_WRITE: answered by an empty READ RESPONSE
	first, last bth.PSN
	va          uint64
	rkey        uint32
	length      uint32
	orig        uint64
}

// verdict is the outcome of the PSN check of a request (rxe check_psn).
type verdict uint8

const (
	verdictExpected  verdict = iota // the next PSN: execute
	verdictDuplicate                // behind: replay or re-ACK, do not execute
	verdictAhead                    // a gap: NAK once, drop
)

func (v verdict) String() string {
	return [...]string{"expected", "duplicate", "ahead"}[v]
}

// checkPSN classifies the PSN p of a request against the expected PSN.
func checkPSN(expected, p bth.PSN) verdict {
	switch d := p.Diff(expected); {
	case d > 0:
		return verdictAhead
	case d < 0:
		return verdictDuplicate
	}
	return verdictExpected
}

// atomicMu serializes remote atomics, like rxe's atomic_ops_lock, so QPs on
// different shards never interleave a read-modify-write.
var atomicMu sync.Mutex

// remoteRegion resolves an rkey for a remote access (rxe check_rkey): it must
// exist, belong to the QP's PD (a type 2B window: be bound to this QP) and
// grant want.
func (rs *responder) remoteRegion(rkey uint32, want verbs.Access) *Region {
	q := rs.q
	r := q.e.cfg.Memory.RemoteRegion(rkey)
	if r == nil || r.PD != q.init.PD || (r.QPN != 0 && r.QPN != q.qpn) || r.Access&want != want {
		return nil
	}
	return r
}

// remoteRange is remoteRegion for the bytes [va, va+n), which it must cover.
func (rs *responder) remoteRange(rkey uint32, va uint64, n uint32, want verbs.Access) []byte {
	if r := rs.remoteRegion(rkey, want); r != nil {
		return r.slice(va, uint64(n))
	}
	return nil
}

// flushAccess is the access a FLUSH's placement types need, of the QP and the
// memory (rxe check_qp_attr_access, check_rkey).
func flushAccess(f bth.FETH) verbs.Access {
	var a verbs.Access
	if f.PlacementType&bth.FlushGlobal != 0 {
		a |= verbs.AccessFlushGlobal
	}
	if f.PlacementType&bth.FlushPersistent != 0 {
		a |= verbs.AccessFlushPersistent
	}
	return a
}

// request is an inbound RC or UC request being checked and executed.
type request struct {
	pkt  bth.Packet
	op   bth.Opcode
	psn  bth.PSN
	data []byte // payload
	mem  []byte // the remote bytes checkRKey resolved for a WRITE packet or an atomic

	placed bool // data is in mem already (placeTarget)
}

// respErr is what a responder check found wrong (rxe's RESPST_ERR_* and
// DUPLICATE states); respOK lets the next check run.
type respErr uint8

const (
	respOK          respErr = iota
	errDuplicate            // PSN behind the expected one
	errPSNAhead             // PSN ahead of the expected one: packets were lost
	errOpSequence           // a MIDDLE or LAST without its FIRST, or a message cut short
	errOpNotAllowed         // the QP's access flags do not allow the operation
	errNoResources          // a READ or atomic with max_dest_rd_atomic 0
	errLength               // packet or DMA length out of the rules
	errMisaligned           // an atomic's address is not 8-byte aligned
	errRKey                 // the R_Key, PD, access or range is wrong
	errRNR                  // no receive WR posted
	errRecvProt             // the receive WR names memory it may not write
	errRecvLen              // the receive WR is too short for the message
	errInvalidate           // SEND_WITH_INV names an rkey that cannot be invalidated
)

// respFailure says what a failed check does. RC: a class C error NAKs with
// nak, completes the receive WR in progress with status and moves the QP to
// ERR (errDuplicate, errPSNAhead, errRNR: rcFailed). UC: see ucFailed.
var respFailure = [...]struct {
	nak     uint8
	status  verbs.WCStatus
	ucFatal bool
}{
	errOpSequence:   {bth.NAKInvalidRequest, verbs.WCRemInvReqErr, false},
	errOpNotAllowed: {bth.NAKInvalidRequest, verbs.WCRemInvReqErr, false},
	errNoResources:  {bth.NAKInvalidRequest, verbs.WCRemInvReqErr, false},
	errLength:       {bth.NAKInvalidRequest, verbs.WCRemInvReqErr, false},
	errMisaligned:   {bth.NAKInvalidRequest, verbs.WCRemInvReqErr, false},
	errRKey:         {bth.NAKRemoteAccess, verbs.WCRemAccessErr, false},
	errRecvProt:     {bth.NAKRemoteOpErr, verbs.WCLocProtErr, true},
	errRecvLen:      {bth.NAKInvalidRequest, verbs.WCLocLenErr, true},
	errInvalidate:   {bth.NAKInvalidRequest, verbs.WCRemInvReqErr, true}, // RC answers it in invalidateFailed
}

// respChecks is the pipeline after the PSN check, in rxe_resp.c's order
// (check_op_seq, check_op_valid and check_resource, check_length, check_rkey,
// execute).
var respChecks = [...]func(*responder, *request) respErr{
	(*responder).checkOpSequence,
	(*responder).checkOpAllowed,
	(*responder).checkLength,
	(*responder).checkRKey,
	(*responder).execute,
}

// takesRequests reports whether the QP's state lets the responder act on
// requests (RTR and the states after it, before ERR).
func (rs *responder) takesRequests() bool {
	switch rs.q.attr.State {
	case verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD, verbs.QPSSQE:
		return true
	}
	return false
}

func (rs *responder) onRequest(now time.Time, pkt *bth.Packet, it *rxItem) {
	q := rs.q
	placed := rs.placed
	rs.placed = false
	if !rs.takesRequests() {
		return
	}
	if q.attr.State == verbs.QPSRTR && !q.commEst {
		q.commEst = true
		q.e.event(Event{Type: verbs.EventCommEst, QPN: q.qpn})
	}
	if q.typ == verbs.QPTypeUD {
		rs.udReceive(pkt, it)
		return
	}
	// The request lives in the QP, for this call only: the checks are called
	// through a table, so a local would escape.
	r := &rs.req
	*r = request{pkt: *pkt, op: pkt.Opcode(), psn: pkt.PSN(), data: pkt.Payload(), placed: placed}
	err := rs.checkPSN(r)
	for i := 0; err == respOK && i < len(respChecks); i++ {
		err = respChecks[i](rs, r)
	}
	switch {
	case err != respOK && q.typ == verbs.QPTypeUC:
		rs.ucFailed(now, err)
	case err != respOK:
		rs.rcFailed(now, r, err)
	case q.typ == verbs.QPTypeRC && r.pkt.AckReq() && (r.op.IsSend() || r.op.IsWrite()):
		rs.sendAck(bth.ACKSyndrome(bth.CreditInvalid), r.psn) // rxe acknowledge
	}
	*r = request{}
}

// checkPSN is rxe check_psn. RC: behind is a duplicate, ahead a loss. UC has
// no duplicates or retries: a FIRST or ONLY is taken at any PSN (it
// resynchronizes the responder), any other packet only at the expected PSN of
// a message not being dropped.
func (rs *responder) checkPSN(r *request) respErr {
	q := rs.q
	if q.typ == verbs.QPTypeUC {
		expected := rs.psn
		if r.psn != expected {
			q.e.cfg.Stats.OutOfSequence.Add(1)
		}
		rs.psn = r.psn.Add(1)
		switch {
		case r.op.Starts():
			rs.dropping = false
		case rs.dropping || r.psn != expected:
			return errPSNAhead
		}
		return respOK
	}
	switch checkPSN(rs.psn, r.psn) {
	case verdictAhead:
		q.e.cfg.Stats.OutOfSequence.Add(1)
		return errPSNAhead
	case verdictDuplicate:
		q.e.cfg.Stats.DuplicateRequests.Add(1)
		return errDuplicate
	}
	rs.sentNAK = false
	return respOK
}

// checkOpSequence is rxe check_op_seq (bth.ValidSequence): inside a SEND only
// SEND MIDDLE or LAST, inside a WRITE only WRITE MIDDLE or LAST, outside a
// message no MIDDLE or LAST. On UC a FIRST or ONLY abandons a partial message
// (rxe's class D1 error); the bytes it placed stay.
func (rs *responder) checkOpSequence(r *request) respErr {
	q := rs.q
	if q.typ == verbs.QPTypeUC && r.op.Starts() {
		rs.ucAbandon()
	}
	if !bth.ValidSequence(rs.opcode, r.op) {
		return errOpSequence
	}
	return respOK
}

// checkOpAllowed is rxe check_op_valid and check_resource: the QP's access
// flags must allow the operation, and a READ or atomic needs responder
// resources (haveRDResources).
func (rs *responder) checkOpAllowed(r *request) respErr {
	q := rs.q
	var want verbs.Access
	switch {
	case r.op.IsWrite() || r.op.IsAtomicWrite():
		want = verbs.AccessRemoteWrite
	case r.op.IsReadRequest():
		want = verbs.AccessRemoteRead
	case r.op.IsAtomic():
		want = verbs.AccessRemoteAtomic
	case r.op.IsFlush():
		want = flushAccess(r.pkt.FETH())
	}
	if q.attr.AccessFlags&want != want {
		return errOpNotAllowed
	}
	if (r.op.IsReadRequest() || r.op.IsAtomic() || r.op.IsAtomicWrite()) && !rs.haveRDResources() {
		return errNoResources
	}
	return respOK
}

// checkLength: FIRST and MIDDLE packets carry exactly the path MTU, LAST
// packets 1 to PMTU bytes, ONLY packets up to PMTU (C9-92); a RETH's DMA
// length is at most 2^31 (C9-94); and a WRITE's packets add up to its DMA
// length (rxe check_rkey's length part).
func (rs *responder) checkLength(r *request) respErr {
	q := rs.q
	n, op := uint32(len(r.data)), r.op
	if ((op.IsFirst() || op.IsMiddle()) && n != q.pmtu) || (op.IsLast() && (n == 0 || n > q.pmtu)) ||
		(op.IsOnly() && n > q.pmtu) {
		return errLength
	}
	if op.HasRETH() && r.pkt.RETH().DMALen > 1<<31 {
		return errLength
	}
	if op.IsAtomicWrite() && (n != 8 || r.pkt.RETH().DMALen != 8) {
		// rxe's check_rkey lets any length matching the DMA length through and
		// then writes 8 bytes; an ATOMIC_WRITE is exactly 8.
		return errLength
	}
	if !op.IsWrite() {
		return respOK
	}
	if op.Starts() {
		if l := r.pkt.RETH().DMALen; (op.IsOnly() && n != l) || n > l {
			return errLength
		}
	} else if rem := rs.wlen - rs.woff; n > rem || (op.IsLast() && n != rem) {
		return errLength
	}
	return respOK
}

// checkRKey is rxe check_rkey: the R_Key of a WRITE (writeTarget), READ or
// atomic must exist, belong to the QP's PD, grant the access and cover the
// range, except for a zero-length READ or WRITE (C9-88). An atomic's address
// must be 8-byte aligned.
func (rs *responder) checkRKey(r *request) respErr {
	switch {
	case r.op.IsWrite():
		if r.op.Starts() {
			reth := r.pkt.RETH()
			rs.wrkey, rs.wva, rs.woff, rs.wlen = reth.RKey, reth.VA, 0, reth.DMALen
		}
		dst, ok := rs.writeTarget()
		if !ok {
			return errRKey
		}
		r.mem = dst
	case r.op.IsReadRequest():
		if reth := r.pkt.RETH(); reth.DMALen > 0 && rs.remoteRange(reth.RKey, reth.VA, reth.DMALen, verbs.AccessRemoteRead) == nil {
			return errRKey
		}
	case r.op.IsAtomic():
		ae := r.pkt.AtomicETH()
		if ae.VA&7 != 0 {
			return errMisaligned
		}
		if r.mem = rs.remoteRange(ae.RKey, ae.VA, 8, verbs.AccessRemoteAtomic); r.mem == nil {
			return errRKey
		}
	case r.op.IsAtomicWrite():
		// rxe checks the R_Key and range first, the alignment (IBA A19.4.2)
		// when it executes (rxe_mr_do_atomic_write).
		reth := r.pkt.RETH()
		if r.mem = rs.remoteRange(reth.RKey, reth.VA, 8, verbs.AccessRemoteWrite); r.mem == nil {
			return errRKey
		}
		if reth.VA&7 != 0 {
			return errMisaligned
		}
	case r.op.IsFlush():
		// The memory must grant the placement types; a FLUSH of the whole MR
		// names no range (rxe check_rkey: skip_check_range).
		reth, feth := r.pkt.RETH(), r.pkt.FETH()
		reg := rs.remoteRegion(reth.RKey, flushAccess(feth))
		if reg == nil || feth.Selectivity == bth.FlushRange && reg.slice(reth.VA, uint64(reth.DMALen)) == nil {
			return errRKey
		}
	}
	return respOK
}

// execute carries out a request that passed every check (rxe execute).
func (rs *responder) execute(r *request) respErr {
	switch {
	case r.op.IsSend():
		return rs.placeSend(r)
	case r.op.IsWrite():
		return rs.placeWrite(r)
	case r.op.IsReadRequest():
		rs.executeRead(r)
	case r.op.IsAtomic():
		rs.executeAtomic(r)
	case r.op.IsAtomicWrite(), r.op.IsFlush():
		rs.executeFlush(r)
	default:
		return errOpNotAllowed
	}
	return respOK
}

// executeFlush carries out an ATOMIC_WRITE (its 8 bytes stored at once, under
// atomicMu) or a FLUSH, saves it as a responder resource (oA19-14) and answers
// with an empty READ RESPONSE ONLY (rxe send_read_response_ack). A global
// FLUSH has nothing to wait for: every earlier request is placed already, in
// the process's own memory. A persistent one never gets here: no MR grants it
// (Go memory is not persistent memory).
func (rs *responder) executeFlush(r *request) {
	if r.op.IsAtomicWrite() {
		atomicMu.Lock()
		copy(r.mem, r.data[:8])
		atomicMu.Unlock()
	}
	rs.saveResource(rdResource{valid: true, empty: true, first: r.psn, last: r.psn})
	rs.msn++
	rs.advance(r, 1)
	rs.sendEmptyReadResponse(r.psn)
}

// placeSend copies a SEND packet into the receive WR (taken at the start of
// the message; none is RNR) and completes the WR at the end of the message.
func (rs *responder) placeSend(r *request) respErr {
	q := rs.q
	if r.op.NeedsRecvWR() && !rs.takeRecvWR() {
		return errRNR
	}
	if !r.placed {
		switch q.scatter(rs.wr.SGL, rs.off, r.data) {
		case verbs.WCSuccess:
		case verbs.WCLocProtErr:
			return errRecvProt
		default:
			return errRecvLen
		}
	}
	if r.op.HasIETH() && q.e.cfg.Memory.Invalidate(r.pkt.IETH(), q.qpn, q.init.PD) != nil {
		// Placed, but the rkey is not a bound type 2 window of this QP (rxe
		// invalidate_rkey).
		return errInvalidate
	}
	rs.off += uint32(len(r.data))
	rs.advance(r, 1)
	if !r.op.Ends() {
		return respOK
	}
	wc := verbs.WC{WRID: rs.wr.WRID, Status: verbs.WCSuccess, Opcode: verbs.WCRecv,
		ByteLen: rs.off, QPNum: q.qpn, SrcQP: q.attr.DestQPN}
	if r.op.HasImm() {
		wc.ImmData = r.pkt.Imm()
		wc.Flags |= verbs.WCWithImm
	}
	if r.op.HasIETH() {
		wc.InvalidatedRKey = r.pkt.IETH()
		wc.Flags |= verbs.WCWithInv
	}
	rs.haveWR = false
	rs.off = 0
	q.pushWC(q.init.RecvCQ, &wc, r.pkt.SE())
	return respOK
}

// placeWrite copies a WRITE packet into the memory checkRKey resolved. A WRITE
// with immediate consumes and completes a receive WR at its end (none is RNR).
func (rs *responder) placeWrite(r *request) respErr {
	q := rs.q
	if r.op.NeedsRecvWR() && !rs.takeRecvWR() {
		return errRNR
	}
	if !r.placed {
		copy(r.mem, r.data)
	}
	rs.woff += uint32(len(r.data))
	rs.advance(r, 1)
	if !r.op.Ends() {
		return respOK
	}
	wlen := rs.wlen
	rs.woff, rs.wlen = 0, 0
	if r.op.NeedsRecvWR() {
		wc := verbs.WC{WRID: rs.wr.WRID, Status: verbs.WCSuccess, Opcode: verbs.WCRecvRDMAWithImm,
			ByteLen: wlen, ImmData: r.pkt.Imm(), Flags: verbs.WCWithImm, QPNum: q.qpn, SrcQP: q.attr.DestQPN}
		rs.haveWR = false
		q.pushWC(q.init.RecvCQ, &wc, r.pkt.SE())
	}
	return respOK
}

// executeRead saves a READ as a responder resource, counts the message (its
// MSN is due at once, C9-148) and starts the reply.
func (rs *responder) executeRead(r *request) {
	q := rs.q
	reth := r.pkt.RETH()
	npk := int(numPackets(verbs.WRRDMARead, reth.DMALen, q.pmtu))
	rs.saveResource(rdResource{valid: true, first: r.psn, last: r.psn.Add(npk - 1), va: reth.VA, rkey: reth.RKey, length: reth.DMALen})
	rs.msn++
	rs.advance(r, npk)
	rs.startRead(r.psn, reth)
}

// executeAtomic performs an atomic under atomicMu, saves the original value
// for replays and answers with it.
func (rs *responder) executeAtomic(r *request) {
	ae := r.pkt.AtomicETH()
	atomicMu.Lock()
	orig := binary.NativeEndian.Uint64(r.mem)
	if r.op == bth.RCFetchAdd {
		binary.NativeEndian.PutUint64(r.mem, orig+ae.SwapAdd)
	} else if orig == ae.Compare {
		binary.NativeEndian.PutUint64(r.mem, ae.SwapAdd)
	}
	atomicMu.Unlock()
	rs.saveResource(rdResource{valid: true, atomic: true, first: r.psn, last: r.psn, va: ae.VA, rkey: ae.RKey, length: 8, orig: orig})
	rs.msn++
	rs.advance(r, 1)
	rs.sendAtomicAck(r.psn, orig)
}

// advance records an executed request of npk PSNs; a SEND or WRITE that ends
// its message counts in the MSN.
func (rs *responder) advance(r *request, npk int) {
	rs.opcode = r.op
	rs.psn = r.psn.Add(npk)
	if r.op.Ends() && (r.op.IsSend() || r.op.IsWrite()) {
		rs.msn++
	}
}

// rcFailed answers a failed RC request: a duplicate from the saved state
// (C9-105), a PSN gap with one sequence NAK and a missing receive WR with an
// RNR NAK (class B), anything else as a class C error.
func (rs *responder) rcFailed(now time.Time, r *request, err respErr) {
	q := rs.q
	switch err {
	case errDuplicate:
		rs.duplicate(now, &r.pkt)
	case errPSNAhead:
		if !rs.sentNAK {
			rs.sentNAK = true
			rs.sendAck(bth.NAKSyndrome(bth.NAKPSNSeqErr), rs.psn)
			q.e.cfg.Stats.NAKsSent[NAKPSNSeqErr].Add(1)
		}
	case errRNR:
		rs.sendRNR(r.psn)
	case errInvalidate:
		rs.invalidateFailed(now, r)
	default:
		f := respFailure[err]
		rs.classC(now, r.psn, f.nak, f.status)
	}
}

// invalidateFailed is rxe's RESPST_ERR_INVALIDATE_RKEY (class J): the data is
// placed and acknowledged (the requester's WR succeeds), but the receive WR
// completes with REM_INV_REQ_ERR and the QP moves to ERR.
func (rs *responder) invalidateFailed(now time.Time, r *request) {
	q := rs.q
	if r.pkt.AckReq() {
		rs.sendAck(bth.ACKSyndrome(bth.CreditInvalid), r.psn)
		rs.flushAck()
	}
	rs.endWR(verbs.WCRemInvReqErr) // placeSend took it
	q.toError(now)
}

// classC is an IBA class C/B responder error: NAK, complete the receive WR in
// progress with status, move the QP to ERR. With no WR to complete, exactly
// one affiliated event reports it instead, the one the IBA names for the NAK
// (classCEvent): remote access error: QP_ACCESS_ERR (Local Access Violation WQ
// Error); invalid request: QP_REQ_ERR; remote operational error: QP_FATAL.
func (rs *responder) classC(now time.Time, p bth.PSN, code uint8, status verbs.WCStatus) {
	q := rs.q
	rs.sendAck(bth.NAKSyndrome(code), p)
	q.e.cfg.Stats.NAKsSent[NAKKind(code)].Add(1)
	if rs.haveWR {
		rs.endWR(status)
	} else {
		q.e.event(Event{Type: classCEvent(code), QPN: q.qpn})
	}
	q.toError(now)
}

func classCEvent(code uint8) verbs.EventType {
	switch code {
	case bth.NAKRemoteAccess:
		return verbs.EventQPAccessErr
	case bth.NAKInvalidRequest:
		return verbs.EventQPReqErr
	}
	return verbs.EventQPFatal // NAKRemoteOpErr and anything else
}

// takeRecvWR takes a receive WR from the RQ or SRQ for the message starting
// now; false is RNR.
func (rs *responder) takeRecvWR() bool {
	q := rs.q
	if rs.haveWR {
		return true
	}
	if rs.wr.SGL == nil {
		// Allocated by the first receive: a QP that never receives costs none.
		rs.wr.SGL = make([]verbs.SGE, 0, q.e.cfg.MaxSGE)
	}
	var ok bool
	if q.srq != nil {
		ok = q.srq.Pop(&rs.wr)
	} else {
		ok = q.rq.Pop(&rs.wr)
	}
	rs.haveWR = ok
	rs.off = 0
	return ok
}

func (rs *responder) sendRNR(p bth.PSN) {
	q := rs.q
	rs.sendAck(bth.RNRSyndrome(q.attr.MinRNRTimer), p)
	q.e.cfg.Stats.NAKsSent[NAKRNR].Add(1)
}

// placeTarget returns where the payload of pkt, an RC request from the QP's
// peer that passed its P_Key check, lands if the responder takes it as the
// next packet of its current message: a WRITE MIDDLE or LAST into the bytes
// checkRKey resolves, a SEND MIDDLE or LAST into its receive WR's next bytes
// when they lie in one SGE, in sequence and of the length checkLength wants.
// Otherwise, or for a payload under placeMin, it returns nil. It changes
// nothing.
//
// The receive path places such a payload while it checks the packet's ICRC
// (bth.AcceptICRCPlace), one pass over the bytes where a check and then a
// copy would be two: the copy into the MR and the ICRC were a fifth of an
// RC WRITE's CPU per packet. A packet that fails the check, or is dropped
// after it, has then written only bytes of its own message that its own PSN
// has yet to place: the responder does not advance, so the packet that
// takes that PSN writes them again, and a message that never completes
// leaves its target undefined, which the verbs allow (a WRITE's target, a
// receive WR's buffer, is defined once the message completes).
func (rs *responder) placeTarget(pkt *bth.Packet) []byte {
	q := rs.q
	op := pkt.Opcode()
	switch op {
	case bth.RCWriteMiddle, bth.RCWriteLast, bth.RCSendMiddle, bth.RCSendLast:
	default:
		return nil
	}
	// The pipeline's own checks, those that change nothing for a MIDDLE or
	// LAST on RC (checkPSN counts and clears sentNAK, so its test is here).
	r := request{pkt: *pkt, op: op, psn: pkt.PSN(), data: pkt.Payload()}
	n := uint32(len(r.data))
	if q.typ != verbs.QPTypeRC || !rs.takesRequests() || n < placeMin || r.psn != rs.psn ||
		rs.checkOpSequence(&r) != respOK || rs.checkOpAllowed(&r) != respOK || rs.checkLength(&r) != respOK {
		return nil
	}
	if op.IsWrite() {
		if rs.checkRKey(&r) != respOK {
			return nil
		}
		return r.mem[:n]
	}
	if !rs.haveWR {
		return nil
	}
	return q.sglSpan(rs.wr.SGL, rs.off, n)
}

// placeMin is the shortest payload placed while its ICRC is checked: below
// it the two passes cost no more than one.
const placeMin = 256

// writeTarget resolves the current WRITE's R_Key again for the bytes still to
// be placed, [wva+woff, wva+wlen), as rxe check_rkey does per packet: so once
// ibv_dereg_mr unregistered the key and Engine.Barrier returned, no later
// packet lands in the buffer. false is a remote access violation. A
// zero-length WRITE resolves nothing (C9-88); the slice is used within this
// step only.
func (rs *responder) writeTarget() ([]byte, bool) {
	rem := rs.wlen - rs.woff
	if rem == 0 {
		return nil, true
	}
	b := rs.remoteRange(rs.wrkey, rs.wva+uint64(rs.woff), rem, verbs.AccessRemoteWrite)
	return b, b != nil
}
