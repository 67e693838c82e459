package transport

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/srq"
	"github.com/goroce/goroce/transport/link"
)

// responder executes inbound requests: it checks PSN, opcode sequence,
// access, resources, length and keys, places data, completes receive WRs and
// acknowledges (rxe_resp.c). Owner shard only.
type responder struct {
	psn     bth.PSN // expected PSN
	msn     uint32  // messages completed (24 bits on the wire)
	sentNAK bool    // one PSN-sequence NAK per gap

	// opcode is the last request executed, for the opcode sequence check
	// (bth.ValidSequence); noOpcode when no message is in progress.
	opcode   bth.Opcode
	dropping bool       // UC: dropping until the next FIRST/ONLY
	wr       srq.RecvWR // receive WR taken for the current message
	haveWR   bool
	off      uint32 // bytes placed into wr

	// The current WRITE is kept as its R_Key and addresses, never as a
	// slice of the MR: the key is resolved again for every packet
	// (writeTarget), so once ibv_dereg_mr has unregistered it and
	// Engine.Barrier has returned, no later packet of the message can land
	// in the buffer (rxe check_rkey does the same lookup_mr per packet).
	wrkey uint32 // RETH R_Key of the current WRITE
	wva   uint64 // RETH VA of the current WRITE
	woff  uint32 // bytes placed so far
	wlen  uint32 // RETH DMA length

	// Responder resources (max_dest_rd_atomic saved READ/atomic requests),
	// a ring reused oldest first; see saveResource.
	res     []rdResource
	resNext int

	// A positive ACK waits here until the end of the receive batch, so a
	// burst of requests is answered by one cumulative ACK. Anything else the
	// responder sends (NAK, READ response, atomic ACK) sends it first.
	ackPending bool
	ackPSN     bth.PSN
	ackMSN     uint32

	read readReply // the READ response going out
	held []rxItem  // requests waiting behind read (see hold)
}

// noOpcode is the responder's opcode outside any message: not a FIRST or
// MIDDLE, so bth.ValidSequence lets only a FIRST or ONLY follow.
const noOpcode bth.Opcode = 0xFF

// newResponder is a responder in its initial state that keeps the resource
// ring and receive-WR storage of res and wr.
func newResponder(res []rdResource, wr srq.RecvWR) responder {
	return responder{res: res, wr: wr, opcode: noOpcode}
}

// rdResource is a responder resource: a READ or atomic accepted, kept so a
// duplicate request is answered again without executing twice (rxe
// resp_res).
type rdResource struct {
	valid       bool
	atomic      bool
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

// atomicMu serializes remote atomics, like rxe's global atomic_ops_lock, so
// two QPs on different shards never interleave a read-modify-write.
var atomicMu sync.Mutex

// remoteRange resolves an rkey for a remote access (rxe check_rkey): the key
// must exist, belong to the QP's PD, grant want, and cover [va, va+n).
func (q *QP) remoteRange(rkey uint32, va uint64, n uint32, want Access) []byte {
	r := q.e.mem.RemoteRegion(rkey)
	if r == nil || r.PD != q.init.PD || r.Access&want != want {
		return nil
	}
	return r.slice(va, uint64(n))
}

// onRequest is the responder for one inbound request packet.
func (q *QP) onRequest(now time.Time, pkt *bth.Packet, it *rxItem) {
	switch q.attr.State {
	case QPSRTR, QPSRTS, QPSSQD, QPSSQE:
	default:
		return
	}
	if q.attr.State == QPSRTR && !q.commEst {
		q.commEst = true
		q.e.event(Event{Type: EventCommEst, QPN: q.qpn})
	}
	switch q.typ {
	case QPTypeUD:
		q.udReceive(pkt, it)
		return
	case QPTypeUC:
		q.ucRequest(now, pkt)
		return
	}
	p := pkt.PSN()
	switch checkPSN(q.resp.psn, p) {
	case verdictAhead:
		q.e.stats.OutOfSequence.Add(1)
		if !q.resp.sentNAK {
			q.resp.sentNAK = true
			q.sendAck(bth.NAKSyndrome(bth.NAKPSNSeqErr), q.resp.psn)
			q.e.stats.NAKsSent[NAKPSNSeqErr].Add(1)
		}
		return
	case verdictDuplicate:
		q.e.stats.DuplicateRequests.Add(1)
		q.duplicate(now, pkt)
		return
	}
	q.resp.sentNAK = false
	q.execute(now, pkt)
}

// classC is an IBA class C/B responder error: NAK, complete the receive WR
// in progress with status, and move the QP to ERR. With no receive WR to
// complete, the responder reports the error with the affiliated
// asynchronous error the IBA names for the NAK instead: remote access error
// -> Local Access Violation Work Queue Error (QP_ACCESS_ERR), invalid
// request -> Local Invalid Request Work Queue Error (QP_REQ_ERR), remote
// operational error -> Local Work Queue Catastrophic Error (QP_FATAL).
// Exactly one such event; none when a WR completes with the status.
func (q *QP) classC(now time.Time, p bth.PSN, code uint8, status cq.Status) {
	q.sendAck(bth.NAKSyndrome(code), p)
	q.e.stats.NAKsSent[NAKKind(code)].Add(1)
	if q.resp.haveWR {
		q.resp.haveWR = false
		q.pushWC(q.init.RecvCQ, &cq.WorkCompletion{WRID: q.resp.wr.WRID, Status: status, Opcode: cq.OpRecv, QPNum: q.qpn}, false)
	} else {
		q.e.event(Event{Type: classCEvent(code), QPN: q.qpn})
	}
	q.toError(now)
}

// classCEvent is the affiliated asynchronous event for a class C error
// NAKed with code when no receive WR reports it.
func classCEvent(code uint8) EventType {
	switch code {
	case bth.NAKRemoteAccess:
		return EventQPAccessErr
	case bth.NAKInvalidRequest:
		return EventQPReqErr
	}
	return EventQPFatal // NAKRemoteOpErr and anything else
}

// takeRecvWR fetches a receive WR from the RQ or SRQ for the message that
// starts now; false means none is posted (RNR).
func (q *QP) takeRecvWR() bool {
	if q.resp.haveWR {
		return true
	}
	if q.resp.wr.SGL == nil {
		// Room for any WR the queue can hold, allocated by the first
		// receive: a QP that never receives costs none of it.
		q.resp.wr.SGL = make([]srq.SGE, 0, q.e.maxSGE)
	}
	var ok bool
	if q.srq != nil {
		ok = q.srq.Pop(&q.resp.wr)
	} else {
		ok = q.rq.Pop(&q.resp.wr)
	}
	q.resp.haveWR = ok
	q.resp.off = 0
	return ok
}

func (q *QP) sendRNR(p bth.PSN) {
	q.sendAck(bth.RNRSyndrome(q.attr.MinRNRTimer), p)
	q.e.stats.NAKsSent[NAKRNR].Add(1)
}

// execute runs the responder pipeline for the expected PSN.
func (q *QP) execute(now time.Time, pkt *bth.Packet) {
	op := pkt.Opcode()
	p := pkt.PSN()
	// Opcode sequence (rxe check_op_seq).
	if !bth.ValidSequence(q.resp.opcode, op) {
		q.classC(now, p, bth.NAKInvalidRequest, cq.RemInvReqErr)
		return
	}
	// QP access rights (rxe check_op_valid).
	var want Access
	switch {
	case op.IsWrite():
		want = AccessRemoteWrite
	case op.IsReadRequest():
		want = AccessRemoteRead
	case op.IsAtomic():
		want = AccessRemoteAtomic
	}
	if q.attr.AccessFlags&want != want {
		q.classC(now, p, bth.NAKInvalidRequest, cq.RemInvReqErr)
		return
	}
	// Length (rxe check_length): FIRST/MIDDLE exactly PMTU, LAST 1..PMTU,
	// ONLY up to PMTU.
	data := pkt.Payload()
	n := uint32(len(data))
	if ((op.IsFirst() || op.IsMiddle()) && n != q.pmtu) || (op.IsLast() && (n == 0 || n > q.pmtu)) ||
		(op.IsOnly() && n > q.pmtu) {
		q.classC(now, p, bth.NAKInvalidRequest, cq.RemInvReqErr)
		return
	}
	switch {
	case op.IsSend():
		if op.NeedsRecvWR() && !q.takeRecvWR() {
			q.sendRNR(p)
			return
		}
		if st := q.scatter(q.resp.wr.SGL, q.resp.off, data); st != cq.Success {
			code := uint8(bth.NAKInvalidRequest)
			if st == cq.LocProtErr {
				code = bth.NAKRemoteOpErr
			}
			q.classC(now, p, code, st)
			return
		}
		q.resp.off += n
		q.resp.opcode = op
		q.resp.psn = p.Add(1)
		if op.Ends() {
			q.resp.msn++
			wc := cq.WorkCompletion{WRID: q.resp.wr.WRID, Status: cq.Success, Opcode: cq.OpRecv,
				ByteLen: q.resp.off, QPNum: q.qpn, SrcQP: q.attr.DestQPN}
			if op.HasImm() {
				wc.ImmData = pkt.Imm()
				wc.Flags |= cq.FlagWithImm
			}
			if op.HasIETH() {
				wc.InvalidatedRKey = pkt.IETH()
				wc.Flags |= cq.FlagWithInv
			}
			q.resp.haveWR = false
			q.pushWC(q.init.RecvCQ, &wc, pkt.SE())
		}
		if pkt.AckReq() {
			q.sendAck(bth.ACKSyndrome(bth.CreditInvalid), p)
		}
	case op.IsWrite():
		if op.Starts() {
			reth := pkt.RETH()
			if reth.DMALen > 1<<31 || (op.IsOnly() && n != reth.DMALen) || n > reth.DMALen {
				q.classC(now, p, bth.NAKInvalidRequest, cq.RemInvReqErr)
				return
			}
			q.resp.wrkey, q.resp.wva, q.resp.woff, q.resp.wlen = reth.RKey, reth.VA, 0, reth.DMALen
		} else if rem := q.resp.wlen - q.resp.woff; n > rem || (op.IsLast() && n != rem) {
			q.classC(now, p, bth.NAKInvalidRequest, cq.RemInvReqErr)
			return
		}
		dst, ok := q.writeTarget()
		if !ok {
			q.classC(now, p, bth.NAKRemoteAccess, cq.RemAccessErr)
			return
		}
		if op.NeedsRecvWR() && !q.takeRecvWR() {
			q.sendRNR(p)
			return
		}
		copy(dst, data)
		q.resp.woff += n
		q.resp.opcode = op
		q.resp.psn = p.Add(1)
		if op.Ends() {
			q.resp.msn++
			if op.HasImm() {
				wc := cq.WorkCompletion{WRID: q.resp.wr.WRID, Status: cq.Success, Opcode: cq.OpRecvRDMAWithImm,
					ByteLen: q.resp.wlen, ImmData: pkt.Imm(), Flags: cq.FlagWithImm, QPNum: q.qpn, SrcQP: q.attr.DestQPN}
				q.resp.haveWR = false
				q.pushWC(q.init.RecvCQ, &wc, pkt.SE())
			}
		}
		if pkt.AckReq() {
			q.sendAck(bth.ACKSyndrome(bth.CreditInvalid), p)
		}
	case op.IsReadRequest():
		if !q.haveRDResources() {
			q.classC(now, p, bth.NAKInvalidRequest, cq.RemInvReqErr)
			return
		}
		reth := pkt.RETH()
		if reth.DMALen > 1<<31 {
			q.classC(now, p, bth.NAKInvalidRequest, cq.RemInvReqErr)
			return
		}
		// A zero-length READ names no memory: its R_Key and VA are not
		// checked (C9-88, rxe check_rkey).
		if reth.DMALen > 0 && q.remoteRange(reth.RKey, reth.VA, reth.DMALen, AccessRemoteRead) == nil {
			q.classC(now, p, bth.NAKRemoteAccess, cq.RemAccessErr)
			return
		}
		npk := numPackets(WRRDMARead, reth.DMALen, q.pmtu)
		q.saveResource(rdResource{valid: true, first: p, last: p.Add(int(npk) - 1), va: reth.VA, rkey: reth.RKey, length: reth.DMALen})
		q.resp.msn++
		q.resp.opcode = op
		q.resp.psn = p.Add(int(npk))
		q.startRead(p, reth)
	case op.IsAtomic():
		if !q.haveRDResources() {
			q.classC(now, p, bth.NAKInvalidRequest, cq.RemInvReqErr)
			return
		}
		ae := pkt.AtomicETH()
		if ae.VA&7 != 0 {
			q.classC(now, p, bth.NAKInvalidRequest, cq.RemInvReqErr)
			return
		}
		b := q.remoteRange(ae.RKey, ae.VA, 8, AccessRemoteAtomic)
		if b == nil {
			q.classC(now, p, bth.NAKRemoteAccess, cq.RemAccessErr)
			return
		}
		atomicMu.Lock()
		orig := binary.NativeEndian.Uint64(b)
		if op == bth.RCFetchAdd {
			binary.NativeEndian.PutUint64(b, orig+ae.SwapAdd)
		} else if orig == ae.Compare {
			binary.NativeEndian.PutUint64(b, ae.SwapAdd)
		}
		atomicMu.Unlock()
		q.saveResource(rdResource{valid: true, atomic: true, first: p, last: p, va: ae.VA, rkey: ae.RKey, length: 8, orig: orig})
		q.resp.msn++
		q.resp.opcode = op
		q.resp.psn = p.Add(1)
		q.sendAtomicAck(p, orig)
	default:
		q.classC(now, p, bth.NAKInvalidRequest, cq.RemInvReqErr)
	}
}

// writeTarget resolves the R_Key of the current WRITE again for the bytes
// still to be placed, [wva+woff, wva+wlen), as rxe check_rkey does for
// every WRITE packet: the key must still exist, belong to the QP's PD, grant
// remote write and cover the range. false is a remote access violation.
// Nothing is resolved when no byte is left (a zero-length WRITE names no
// memory: C9-88), and the slice returned is used within this step only.
func (q *QP) writeTarget() ([]byte, bool) {
	rem := q.resp.wlen - q.resp.woff
	if rem == 0 {
		return nil, true
	}
	b := q.remoteRange(q.resp.wrkey, q.resp.wva+uint64(q.resp.woff), rem, AccessRemoteWrite)
	return b, b != nil
}

// haveRDResources reports whether the responder may accept a READ or an
// atomic. As in rxe (check_resource, RESPST_ERR_TOO_MANY_RDMA_ATM_REQ),
// only max_dest_rd_atomic == 0 refuses them: class C, NAK invalid request
// (a REM_INV_REQ_ERR cause: "insufficient buffering to receive a new RDMA
// or Atomic Operation request").
func (q *QP) haveRDResources() bool { return q.attr.MaxDestRDAtomic > 0 }

// saveResource keeps r in the responder resource ring, reusing the oldest
// entry. The responder does not count READs/atomics "in use": it executes
// each one completely (the whole READ response goes out in the step that
// accepts the request), and it cannot see which the requester has
// completed. Keeping within max_dest_rd_atomic is the requester's job (its
// max_rd_atomic), as in rxe: check_resource leaves it to the requester and
// recycles the resource queue, and rxe_prepare_res takes the next slot
// unconditionally. A compliant requester never retries a request older than
// its last max_rd_atomic ones, so the ring still holds every resource a
// duplicate can name; a request recycled out of the ring is a class D
// duplicate and is dropped (duplicate).
func (q *QP) saveResource(r rdResource) {
	if len(q.resp.res) == 0 {
		// Allocated on first use: most QPs never answer a READ or atomic.
		q.resp.res = make([]rdResource, max(int(q.attr.MaxDestRDAtomic), 1))
	}
	q.resp.res[q.resp.resNext] = r
	q.resp.resNext = (q.resp.resNext + 1) % len(q.resp.res)
}

// duplicate answers a request behind the expected PSN without executing it
// again (rxe duplicate_request, C9-105): SEND/WRITE are re-ACKed, READ is
// replayed from memory for the requested sub-range, an atomic's saved result
// is sent again. A duplicate with no saved resource is dropped (class D).
// A replayed READ resolves its R_Key again (rxe_recheck_mr): if the MR was
// deregistered or no longer covers the range since the first execution, it
// is a remote access error and no memory is read.
func (q *QP) duplicate(now time.Time, pkt *bth.Packet) {
	op := pkt.Opcode()
	p := pkt.PSN()
	switch {
	case op.IsSend() || op.IsWrite():
		q.sendAck(bth.ACKSyndrome(bth.CreditInvalid), q.resp.psn.Add(-1))
	case op.IsReadRequest():
		reth := pkt.RETH()
		for i := range q.resp.res {
			r := &q.resp.res[i]
			if !r.valid || r.atomic || p.Before(r.first) || p.After(r.last) {
				continue
			}
			if reth.DMALen == 0 {
				// Names no memory (C9-88): nothing to check or read.
				q.startRead(p, reth)
				return
			}
			if r.rkey != reth.RKey || reth.VA < r.va || uint64(reth.VA-r.va)+uint64(reth.DMALen) > uint64(r.length) {
				continue
			}
			if q.remoteRange(reth.RKey, reth.VA, reth.DMALen, AccessRemoteRead) == nil {
				q.classC(now, p, bth.NAKRemoteAccess, cq.RemAccessErr)
				return
			}
			q.startRead(p, reth)
			return
		}
	case op.IsAtomic():
		for i := range q.resp.res {
			r := &q.resp.res[i]
			if r.valid && r.atomic && r.first == p {
				q.sendAtomicAck(p, r.orig)
				return
			}
		}
	}
}

// sendAck acknowledges PSN p with syndrome. A positive ACK is coalesced:
// it is held until flushAck, and a later one for a newer PSN replaces it
// (ACKs are cumulative). A NAK goes out at once, after any held ACK.
func (q *QP) sendAck(syndrome uint8, p bth.PSN) {
	if (bth.AETH{Syndrome: syndrome}).IsACK() {
		q.resp.ackPending, q.resp.ackPSN, q.resp.ackMSN = true, p, q.resp.msn
		return
	}
	q.flushAck()
	q.putAck(syndrome, p, q.resp.msn)
}

// flushAck sends the held ACK, if any. The shard calls it once per batch
// (service), before the batch is written.
func (q *QP) flushAck() {
	if q.resp.ackPending {
		q.resp.ackPending = false
		q.putAck(bth.ACKSyndrome(bth.CreditInvalid), q.resp.ackPSN, q.resp.ackMSN)
	}
}

func (q *QP) putAck(syndrome uint8, p bth.PSN, msn uint32) {
	f := bth.Fields{Opcode: bth.RCAck, PKey: 0xFFFF, DestQP: q.attr.DestQPN, PSN: p,
		AETH: bth.AETH{Syndrome: syndrome, MSN: msn}}
	q.emit(&f, nil, q.attr.AV.DGID)
}

func (q *QP) sendAtomicAck(p bth.PSN, orig uint64) {
	q.flushAck()
	f := bth.Fields{Opcode: bth.RCAtomicAck, PKey: 0xFFFF, DestQP: q.attr.DestQPN, PSN: p,
		AETH:      bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid), MSN: q.resp.msn},
		AtomicAck: bth.AtomicAckETH{Orig: orig}}
	q.emit(&f, nil, q.attr.AV.DGID)
}

// readReply is a READ response in progress (rxe's resp.res in
// READ_REPLY): the responses for PSNs next..last, carrying rem bytes from va
// under rkey. It goes out over the QP's turns (a 2 GiB READ is half a
// million packets), and requests that arrive meanwhile wait behind it (hold),
// so every response still leaves in PSN order.
type readReply struct {
	active            bool
	first, next, last bth.PSN // first is where this reply (or replay) starts
	rkey              uint32
	va                uint64
	rem               uint32
}

// maxHeld bounds the requests a QP keeps behind a READ reply. A compliant
// requester has at most 128 PSNs outstanding; anything above is dropped
// (counted as a receive queue drop) and the requester sends it again.
const maxHeld = 256

// startRead begins the responses to a READ of reth's range from PSN p,
// after any ACK held back: the QP's next turns send them.
func (q *QP) startRead(p bth.PSN, reth bth.RETH) {
	q.flushAck()
	npk := numPackets(WRRDMARead, reth.DMALen, q.pmtu)
	q.resp.read = readReply{active: true, first: p, next: p, last: p.Add(int(npk) - 1),
		rkey: reth.RKey, va: reth.VA, rem: reth.DMALen}
}

// replyRead emits up to limit packets of the READ reply in progress and
// returns how many. The R_Key is resolved again for the bytes this turn
// sends (rxe_recheck_mr): no region is kept across turns, so after
// ibv_dereg_mr and Engine.Barrier no later response reads the memory; the
// READ then ends with a remote access error NAK at the first PSN not sent.
func (q *QP) replyRead(now time.Time, limit int) int {
	r := &q.resp.read
	if !r.active || limit <= 0 {
		return 0
	}
	var data []byte
	if n := min(uint64(r.rem), uint64(limit)*uint64(q.pmtu)); n > 0 {
		if data = q.remoteRange(r.rkey, r.va, uint32(n), AccessRemoteRead); data == nil {
			r.active = false
			q.classC(now, r.next, bth.NAKRemoteAccess, cq.RemAccessErr)
			return 0
		}
	}
	used := 0
	for used < limit && r.active {
		chunk := data[:min(len(data), int(q.pmtu))]
		data = data[len(chunk):]
		f := bth.Fields{PKey: 0xFFFF, DestQP: q.attr.DestQPN, PSN: r.next,
			AETH: bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid), MSN: q.resp.msn}}
		f.Opcode, _ = bth.MessageOpcode(bth.TransportRC, bth.OpReadResponse, r.next == r.first, r.next == r.last)
		q.emit(&f, chunk, q.attr.AV.DGID)
		used++
		r.va += uint64(len(chunk))
		r.rem -= uint32(len(chunk))
		r.active = r.next != r.last
		r.next = r.next.Add(1)
	}
	return used
}

// hold keeps the request it for later when a READ reply of q is still going
// out (rxe leaves it at the head of req_pkts), and reports whether it took
// the datagram. Over maxHeld it drops it.
func (q *QP) hold(it *rxItem) bool {
	if !q.resp.read.active || it.n == 0 || !bth.Opcode(it.buf[0]).IsRequest() {
		return false
	}
	if len(q.resp.held) >= maxHeld {
		q.e.stats.RxQueueDrops.Add(1)
		link.PutBuffer(it.buf)
		return true
	}
	q.resp.held = append(q.resp.held, *it)
	return true
}

// serveResponder continues the READ reply in progress within limit packets
// and, once it is out, executes the requests held behind it in order (one
// of which may start another reply). It returns the packets it emitted.
func (q *QP) serveResponder(now time.Time, limit int) int {
	used := q.replyRead(now, limit)
	i := 0
	for ; i < len(q.resp.held) && !q.resp.read.active; i++ {
		it := &q.resp.held[i]
		q.receive(now, it)
		link.PutBuffer(it.buf)
		*it = rxItem{}
		used += q.replyRead(now, limit-used)
	}
	if i > 0 {
		q.resp.held = q.resp.held[:copy(q.resp.held, q.resp.held[i:])]
	}
	return used
}

// dropHeld abandons the READ reply in progress and the requests held behind
// it (the QP left RTR/RTS, was reset or destroyed).
func (q *QP) dropHeld() {
	q.resp.read.active = false
	for i := range q.resp.held {
		link.PutBuffer(q.resp.held[i].buf)
		q.resp.held[i] = rxItem{}
	}
	q.resp.held = q.resp.held[:0]
}

// udReceive delivers a UD SEND: Q_Key check (C10-15), the GRH area, then
// the payload, into the next receive WR. With no WR posted the datagram is
// dropped, as UD allows.
func (q *QP) udReceive(pkt *bth.Packet, it *rxItem) {
	deth := pkt.DETH()
	data := pkt.Payload()
	if deth.QKey != q.attr.QKey {
		q.e.stats.BadQKey.Add(1)
		return
	}
	if uint32(len(data)) > q.pmtu {
		q.e.stats.Malformed.Add(1)
		return
	}
	if !q.takeRecvWR() {
		return
	}
	var grh [bth.GRHLen]byte
	dst := it.local
	if !dst.IsValid() {
		dst = q.e.localAddr
	}
	bth.PutGRH(&grh, it.src.Addr(), dst, it.tos, len(pkt.Bytes()))
	st := q.scatter(q.resp.wr.SGL, 0, grh[:])
	if st == cq.Success {
		st = q.scatter(q.resp.wr.SGL, bth.GRHLen, data)
	}
	wc := cq.WorkCompletion{WRID: q.resp.wr.WRID, Status: st, Opcode: cq.OpRecv, QPNum: q.qpn}
	if st == cq.Success {
		wc.ByteLen = uint32(bth.GRHLen + len(data))
		wc.SrcQP = deth.SrcQP
		wc.Flags = cq.FlagGRH
		if pkt.Opcode().HasImm() {
			wc.ImmData = pkt.Imm()
			wc.Flags |= cq.FlagWithImm
		}
	}
	q.resp.haveWR = false
	q.pushWC(q.init.RecvCQ, &wc, pkt.SE())
}
