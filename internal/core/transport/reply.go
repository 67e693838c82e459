package transport

import (
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// haveRDResources reports whether the responder may accept a READ or an
// atomic. As in rxe (check_resource, RESPST_ERR_TOO_MANY_RDMA_ATM_REQ),
// only max_dest_rd_atomic == 0 refuses them: class C, NAK invalid request
// (a REM_INV_REQ_ERR cause: "insufficient buffering to receive a new RDMA
// or Atomic Operation request").
func (rs *responder) haveRDResources() bool { return rs.q.attr.MaxDestRDAtomic > 0 }

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
func (rs *responder) saveResource(r rdResource) {
	q := rs.q
	if len(rs.res) == 0 {
		// Allocated on first use: most QPs never answer a READ or atomic.
		rs.res = make([]rdResource, max(int(q.attr.MaxDestRDAtomic), 1))
	}
	rs.res[rs.resNext] = r
	rs.resNext = (rs.resNext + 1) % len(rs.res)
}

// duplicate answers a request behind the expected PSN without executing it
// again (rxe duplicate_request, C9-105): SEND/WRITE are re-ACKed, READ is
// replayed from memory for the requested sub-range, an atomic's saved result
// is sent again. A duplicate with no saved resource is dropped (class D).
// A replayed READ resolves its R_Key again (rxe_recheck_mr): if the MR was
// deregistered or no longer covers the range since the first execution, it
// is a remote access error and no memory is read.
func (rs *responder) duplicate(now time.Time, pkt *bth.Packet) {
	op := pkt.Opcode()
	p := pkt.PSN()
	switch {
	case op.IsSend() || op.IsWrite():
		rs.sendAck(bth.ACKSyndrome(bth.CreditInvalid), rs.psn.Add(-1))
	case op.IsReadRequest():
		reth := pkt.RETH()
		for i := range rs.res {
			r := &rs.res[i]
			if !r.valid || r.atomic || p.Before(r.first) || p.After(r.last) {
				continue
			}
			if reth.DMALen == 0 {
				// Names no memory (C9-88): nothing to check or read.
				rs.startRead(p, reth)
				return
			}
			if r.rkey != reth.RKey || reth.VA < r.va || uint64(reth.VA-r.va)+uint64(reth.DMALen) > uint64(r.length) {
				continue
			}
			if rs.remoteRange(reth.RKey, reth.VA, reth.DMALen, verbs.AccessRemoteRead) == nil {
				rs.classC(now, p, bth.NAKRemoteAccess, verbs.WCRemAccessErr)
				return
			}
			rs.startRead(p, reth)
			return
		}
	case op.IsAtomic():
		for i := range rs.res {
			r := &rs.res[i]
			if r.valid && r.atomic && r.first == p {
				rs.sendAtomicAck(p, r.orig)
				return
			}
		}
	case op.IsFlush() || op.IsAtomicWrite():
		for i := range rs.res {
			r := &rs.res[i]
			if r.valid && r.empty && r.first == p {
				rs.sendEmptyReadResponse(p)
				return
			}
		}
	}
}

// sendAck acknowledges PSN p with syndrome. A positive ACK is coalesced:
// it is held until flushAck, and a later one for a newer PSN replaces it
// (ACKs are cumulative). A NAK goes out at once, after any held ACK.
func (rs *responder) sendAck(syndrome uint8, p bth.PSN) {
	if (bth.AETH{Syndrome: syndrome}).IsACK() {
		rs.ackPending, rs.ackPSN, rs.ackMSN = true, p, rs.msn
		return
	}
	rs.flushAck()
	rs.putAck(syndrome, p, rs.msn)
}

// flushAck sends the held ACK, if any. The shard calls it once per batch
// (service), before the batch is written.
func (rs *responder) flushAck() {
	if rs.ackPending {
		rs.ackPending = false
		rs.putAck(bth.ACKSyndrome(bth.CreditInvalid), rs.ackPSN, rs.ackMSN)
	}
}

func (rs *responder) putAck(syndrome uint8, p bth.PSN, msn uint32) {
	q := rs.q
	f := bth.Fields{Opcode: bth.RCAck, PKey: 0xFFFF, DestQP: q.attr.DestQPN, PSN: p,
		AETH: bth.AETH{Syndrome: syndrome, MSN: msn}}
	q.emit(&f, nil, &q.attr.AV)
}

func (rs *responder) sendAtomicAck(p bth.PSN, orig uint64) {
	q := rs.q
	rs.flushAck()
	f := bth.Fields{Opcode: bth.RCAtomicAck, PKey: 0xFFFF, DestQP: q.attr.DestQPN, PSN: p,
		AETH:      bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid), MSN: rs.msn},
		AtomicAck: bth.AtomicAckETH{Orig: orig}}
	q.emit(&f, nil, &q.attr.AV)
}

// sendEmptyReadResponse answers a FLUSH or ATOMIC_WRITE at PSN p: an RDMA READ
// RESPONSE ONLY with an ACK AETH and no payload.
func (rs *responder) sendEmptyReadResponse(p bth.PSN) {
	q := rs.q
	rs.flushAck()
	f := bth.Fields{Opcode: bth.RCReadResponseOnly, PKey: 0xFFFF, DestQP: q.attr.DestQPN, PSN: p,
		AETH: bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid), MSN: rs.msn}}
	q.emit(&f, nil, &q.attr.AV)
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
func (rs *responder) startRead(p bth.PSN, reth bth.RETH) {
	q := rs.q
	rs.flushAck()
	npk := numPackets(verbs.WRRDMARead, reth.DMALen, q.pmtu)
	rs.read = readReply{active: true, first: p, next: p, last: p.Add(int(npk) - 1),
		rkey: reth.RKey, va: reth.VA, rem: reth.DMALen}
}

// replyRead emits up to limit packets of the READ reply in progress and
// returns how many. The R_Key is resolved again for the bytes this turn
// sends (rxe_recheck_mr): no region is kept across turns, so after
// ibv_dereg_mr and Engine.Barrier no later response reads the memory; the
// READ then ends with a remote access error NAK at the first PSN not sent.
func (rs *responder) replyRead(now time.Time, limit int) int {
	q := rs.q
	r := &rs.read
	if !r.active || limit <= 0 {
		return 0
	}
	var data []byte
	if n := min(uint64(r.rem), uint64(limit)*uint64(q.pmtu)); n > 0 {
		if data = rs.remoteRange(r.rkey, r.va, uint32(n), verbs.AccessRemoteRead); data == nil {
			r.active = false
			rs.classC(now, r.next, bth.NAKRemoteAccess, verbs.WCRemAccessErr)
			return 0
		}
	}
	used := 0
	for used < limit && r.active {
		chunk := data[:min(len(data), int(q.pmtu))]
		data = data[len(chunk):]
		f := bth.Fields{PKey: 0xFFFF, DestQP: q.attr.DestQPN, PSN: r.next,
			AETH: bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid), MSN: rs.msn}}
		f.Opcode, _ = bth.MessageOpcode(bth.TransportRC, bth.OpReadResponse, r.next == r.first, r.next == r.last)
		q.emit(&f, chunk, &q.attr.AV)
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
func (rs *responder) hold(it *rxItem) bool {
	q := rs.q
	if !rs.read.active || it.n == 0 || !bth.Opcode(it.bytes()[0]).IsRequest() {
		return false
	}
	if len(rs.held) >= maxHeld {
		q.e.cfg.Stats.RxQueueDrops.Add(1)
		it.release()
		return true
	}
	it.detach()
	rs.held = append(rs.held, *it)
	return true
}

// serveResponder continues the READ reply in progress within limit packets
// and, once it is out, executes the requests held behind it in order (one
// of which may start another reply). It returns the packets it emitted.
func (rs *responder) serveResponder(now time.Time, limit int) int {
	q := rs.q
	used := rs.replyRead(now, limit)
	i := 0
	for ; i < len(rs.held) && !rs.read.active; i++ {
		it := &rs.held[i]
		q.receive(now, it)
		it.release()
		*it = rxItem{}
		used += rs.replyRead(now, limit-used)
	}
	if i > 0 {
		rs.held = rs.held[:copy(rs.held, rs.held[i:])]
	}
	return used
}

// dropHeld abandons the READ reply in progress and the requests held behind
// it (the QP left RTR/RTS, was reset or destroyed).
func (rs *responder) dropHeld() {
	rs.read.active = false
	for i := range rs.held {
		rs.held[i].release()
		rs.held[i] = rxItem{}
	}
	rs.held = rs.held[:0]
}
