package transport

import (
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// haveRDResources reports whether the responder may accept a READ or atomic:
// as in rxe (check_resource), only max_dest_rd_atomic 0 refuses them, a class
// C invalid request ("insufficient buffering", a REM_INV_REQ_ERR cause).
func (rs *responder) haveRDResources() bool { return rs.q.attr.MaxDestRDAtomic > 0 }

// saveResource keeps r in the resource ring, replacing the oldest entry. The
// responder cannot see which READs and atomics the requester has completed, so
// it does not count resources in use: keeping within max_dest_rd_atomic is the
// requester's job (its max_rd_atomic), as in rxe, whose check_resource leaves
// it to the requester and whose rxe_prepare_res takes the next slot. A
// compliant requester retries none older than its last max_rd_atomic, so the
// ring holds every resource a duplicate can name; one recycled out of it is a
// class D duplicate, dropped.
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
// again (rxe duplicate_request, C9-105): SEND and WRITE are re-ACKed, a READ
// is replayed from memory for the requested range after resolving its R_Key
// again (rxe_recheck_mr: gone or too short is a remote access error), an
// atomic's saved result is resent. Without a saved resource: dropped (class
// D).
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

// sendAck acknowledges PSN p with syndrome. A positive ACK is held until
// flushAck, a newer one replacing it (ACKs are cumulative); a NAK goes out at
// once, after any held ACK.
func (rs *responder) sendAck(syndrome uint8, p bth.PSN) {
	if (bth.AETH{Syndrome: syndrome}).IsACK() {
		rs.ackPending, rs.ackPSN, rs.ackMSN = true, p, rs.msn
		return
	}
	rs.flushAck()
	rs.putAck(syndrome, p, rs.msn)
}

// flushAck sends the held ACK, if any; QP.service calls it before the slice's
// packets are written.
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

// sendEmptyReadResponse answers a FLUSH or ATOMIC_WRITE: an RDMA READ RESPONSE
// ONLY with an ACK AETH and no payload.
func (rs *responder) sendEmptyReadResponse(p bth.PSN) {
	q := rs.q
	rs.flushAck()
	f := bth.Fields{Opcode: bth.RCReadResponseOnly, PKey: 0xFFFF, DestQP: q.attr.DestQPN, PSN: p,
		AETH: bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid), MSN: rs.msn}}
	q.emit(&f, nil, &q.attr.AV)
}

// readReply is a READ reply in progress (rxe resp.res in READ_REPLY): PSNs
// next..last, rem bytes from va under rkey. It goes out over the QP's turns (a
// 2 GiB READ is half a million packets); requests that arrive meanwhile wait
// behind it (hold), so responses leave in PSN order.
type readReply struct {
	active            bool
	first, next, last bth.PSN // first is where this reply (or replay) starts
	rkey              uint32
	va                uint64
	rem               uint32
}

// maxHeld bounds the requests held behind a READ reply. A compliant requester
// has at most 128 PSNs outstanding; more are dropped (RxQueueDrops) and sent
// again.
const maxHeld = 256

// startRead begins the reply to a READ of reth's range at PSN p, after any
// held ACK; the QP's next turns send it.
func (rs *responder) startRead(p bth.PSN, reth bth.RETH) {
	q := rs.q
	rs.flushAck()
	npk := numPackets(verbs.WRRDMARead, reth.DMALen, q.pmtu)
	rs.read = readReply{active: true, first: p, next: p, last: p.Add(int(npk) - 1),
		rkey: reth.RKey, va: reth.VA, rem: reth.DMALen}
}

// replyRead emits up to limit packets of the READ reply and returns how many.
// It resolves the R_Key again for this turn's bytes (rxe_recheck_mr), so after
// ibv_dereg_mr and Engine.Barrier no response reads the memory: the READ ends
// with a remote access error NAK at the first PSN not sent.
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

// hold keeps request it while a READ reply of q is going out (rxe leaves it at
// the head of req_pkts), dropping it over maxHeld; true if it took it.
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

// serveResponder continues the READ reply within limit packets and, once it is
// out, executes the requests held behind it in order (one may start another
// reply). It returns the packets it emitted.
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

// dropHeld abandons the READ reply and the requests held behind it (the QP
// left RTR/RTS, was reset or destroyed).
func (rs *responder) dropHeld() {
	rs.read.active = false
	for i := range rs.held {
		rs.held[i].release()
		rs.held[i] = rxItem{}
	}
	rs.held = rs.held[:0]
}
