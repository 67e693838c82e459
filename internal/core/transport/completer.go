package transport

import (
	"encoding/binary"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// completer retires send WQEs from ACKs, NAKs, read responses and atomic
// ACKs, and drives retries (rxe_comp.c). Owner shard only.
type completer struct {
	psn      bth.PSN // oldest PSN not yet acknowledged
	idx      uint64  // absolute index of the oldest WQE not completed (= sq.head)
	retryCnt uint8   // retries left; 7 = infinite
	rnrRetry uint8   // RNR retries left; 7 = infinite
	rtoAt    time.Time
	rnrAt    time.Time
	gapPSN   bth.PSN // comp.psn for which a read-response gap already triggered a retry
	gapSet   bool
	// retrying: a go-back-N retry (or an RNR wait) was started and nothing
	// has been acknowledged since (rxe comp.started_retry). Until then a
	// NAK or implicit NAK is most likely the echo of packets sent before
	// the rewind: it neither costs a retry nor starts another; only the
	// retransmission timer does.
	retrying bool
	// backoff is the number of consecutive retransmission timeouts (capped
	// at maxBackoff): the timer runs rto << backoff. Progress resets it.
	backoff uint8
	// reserved: a timeout is waiting for the device retry budget's token
	// it reserved, due at rtoAt.
	reserved bool
}

// head returns the oldest started, uncompleted WQE, or nil.
func (q *QP) head() *sendWQE {
	if q.comp.idx > q.req.idx || q.comp.idx >= q.sq.loadTail() {
		return nil
	}
	w := q.sq.slot(q.comp.idx)
	if w.state == wqePosted || w.state == wqeDone {
		return nil
	}
	return w
}

// complete retires the WQE at the head, posting a completion when the WR
// is signaled, the QP signals all WRs, or the status is an error (IBA
// 10.7.3.1, rxe do_complete).
func (q *QP) complete(now time.Time, w *sendWQE, status verbs.WCStatus) {
	// Everything needed from the slot is read first, and the slot is retired
	// before the completion becomes visible: once a user has polled a
	// completion, its send-queue slots must already be free for PostSend, as
	// with libibverbs (a PostSend right after Poll must not see ENOMEM).
	signal := status != verbs.WCSuccess || w.wr.Flags&verbs.SendSignaled != 0 || q.init.SQSigAll
	wc := verbs.WC{WRID: w.wr.WRID, Status: status, Opcode: wcOpcode(w.wr.Opcode), QPNum: q.qpn}
	if status == verbs.WCSuccess {
		wc.ByteLen = w.length
	}
	if status == verbs.WCSuccess && q.typ == verbs.QPTypeRC && !w.sentAt.IsZero() {
		q.e.cfg.Stats.ObserveLatency(now.Sub(w.sentAt))
	}
	local := w.isLocalOp()
	if status == verbs.WCSuccess && q.typ == verbs.QPTypeRC && !local && w.lastPSN.Add(1).After(q.comp.psn) {
		// Everything up to the WQE's last PSN is acknowledged (rxe
		// do_complete/COMPST_UPDATE_COMP): a later rewind must restart
		// after it, never inside it or before it.
		q.comp.psn = w.lastPSN.Add(1)
	}
	w.state = wqeDone
	q.comp.idx++
	if q.req.idx < q.comp.idx {
		// The requester had started w again after a rewind (a timeout probe
		// stops it after the first WQE's packet), and the answer to w's
		// first transmission completed it. The requester moves on with the
		// completer: the next WQE starts at the next PSN, never at one of
		// w's, or its packets would carry another WQE's PSNs and the peer's
		// responder would take them for w's duplicates.
		q.req.idx = q.comp.idx
		q.req.off = 0
		if q.req.psn.Before(q.comp.psn) {
			q.req.psn = q.comp.psn
		}
	}
	q.sq.retire()
	if signal {
		q.pushWC(q.init.SendCQ, &wc, false)
	}
	if status == verbs.WCSuccess && !local {
		q.completeLocalOps(now) // local operations waiting behind w
	}
}

// completeSent completes UD/UC WQEs once sent: nothing acknowledges them.
func (q *QP) completeSent(now time.Time) {
	for q.comp.idx < q.req.idx {
		w := q.sq.slot(q.comp.idx)
		if w.state != wqePending {
			return
		}
		if w.isLocalOp() {
			q.completeLocalOps(now)
			continue
		}
		q.complete(now, w, verbs.WCSuccess)
	}
}

// failWQE completes the head WQE with an error status and flushes the
// rest. An RC QP moves to ERR. A UD or UC QP moves to SQE (IBA 10.3.1.8):
// only its send queue has failed, so receives go on, and ibv_modify_qp back
// to RTS resumes sending.
func (q *QP) failWQE(now time.Time, w *sendWQE, status verbs.WCStatus) {
	if w == nil {
		w = q.head()
	}
	if w != nil && w.state != wqeDone && w == q.sq.slot(q.comp.idx) {
		q.complete(now, w, status)
	}
	if q.typ != verbs.QPTypeRC && q.attr.State != verbs.QPSErr {
		q.setState(verbs.QPSSQE)
		q.flushSQ(now)
		return
	}
	q.toError(now)
}

func (q *QP) resetRetries() {
	q.comp.retryCnt = q.attr.RetryCnt
	q.comp.rnrRetry = q.attr.RNRRetry
	q.comp.retrying = false
	q.comp.backoff = 0
	q.comp.reserved = false
	q.req.probing = false
}

// retryPending reports that a retry is already asked for or under way: the
// requester has yet to rewind, waits on the RNR timer, or rewound and
// nothing was acknowledged since.
func (q *QP) retryPending() bool {
	return q.req.needRetry || !q.comp.rnrAt.IsZero() || q.comp.retrying
}

// retry is rxe's COMPST_ERROR_RETRY: spend one retry (7 = infinite) and ask
// the requester to go back to comp.psn, or fail with RETRY_EXC_ERR. A NAK
// or implicit NAK (timeout false) while a retry is pending is ignored, as
// rxe does with started_retry: it costs nothing and restarts nothing.
func (q *QP) retry(now time.Time, timeout bool) {
	if !timeout && q.retryPending() {
		return
	}
	if !spendRetry(&q.comp.retryCnt) {
		q.e.cfg.Stats.RetryExceeded.Add(1)
		q.failWQE(now, nil, verbs.WCRetryExcErr)
		return
	}
	if q.head() != nil {
		q.req.needRetry = true
		q.comp.retrying = true
	}
}

// onResponse is the completer for one inbound response packet (rxe
// rxe_completer): retire what it acknowledges, then act on its kind.
func (q *QP) onResponse(now time.Time, pkt *bth.Packet) {
	switch q.attr.State {
	case verbs.QPSRTS, verbs.QPSSQD, verbs.QPSSQE:
	default:
		return
	}
	if !pkt.PSN().Before(q.req.maxPSN) {
		// A response to a PSN never sent is a ghost: the old incarnation of a
		// QPN (a process that exited, its peer still resending to the same
		// address and QPN) or a forged packet. Acting on it would retire WQEs
		// whose packets may never have arrived.
		q.e.cfg.Stats.GhostResponses.Add(1)
		return
	}
	progress, ok := q.retireAcked(now, pkt)
	if !ok {
		return
	}
	w := q.head()
	switch op := pkt.Opcode(); {
	case op.IsAck():
		ok = q.onAck(now, pkt, w, progress)
	case op.IsAtomicAck():
		progress, ok = q.onAtomicAck(now, pkt, w, progress)
	case op.IsReadResponse():
		progress, ok = q.onReadResponse(now, pkt, w, progress)
	}
	if ok {
		q.afterProgress(now, progress)
	}
}

// retireAcked completes the WQEs pkt acknowledges and moves the oldest
// unacknowledged PSN. Everything before pkt's PSN is implicitly
// acknowledged; a positive ACK also acknowledges its PSN itself (coalesced,
// cumulative ACKs). progress reports that something was acknowledged; ok is
// false when a READ or atomic whose response was lost started a retry and
// the packet needs nothing more.
func (q *QP) retireAcked(now time.Time, pkt *bth.Packet) (progress, ok bool) {
	p := pkt.PSN()
	through := p.Add(-1)
	if pkt.Opcode().IsAck() && pkt.AETH().IsACK() {
		through = p
	}
	for {
		w := q.head()
		if w == nil || w.state != wqePending || w.lastPSN.After(through) {
			break
		}
		if w.isReadOrAtomic() {
			// Its response was lost but later requests were answered: read
			// again (rxe: COMPST_ERROR_RETRY). complete moved comp.psn past
			// the WQEs just acknowledged, so the requester goes back to this
			// READ/atomic's own first PSN. The progress is accounted first:
			// it ends any earlier retry, and this one starts afresh.
			q.afterProgress(now, progress)
			q.retry(now, false)
			return progress, false
		}
		q.complete(now, w, verbs.WCSuccess)
		progress = true
	}
	// The expected PSN moves past everything acknowledged, but never into a READ
	// or atomic at the head: only its own responses may advance it there. A READ
	// response that implicitly acknowledges the WRITE before it (no separate ACK,
	// as rxe coalesces) must still find comp.psn at the READ's first PSN. Nor does
	// it move past the last PSN of a WQE the requester is still (re)sending,
	// which only an ACK after its last packet completes (rxe completes only
	// pending WQEs): after a timeout probe, the peer may acknowledge a whole
	// message of which only the first packet went out again. And nothing
	// acknowledges a PSN never sent.
	w := q.head()
	next := through.Add(1)
	switch {
	case w == nil:
		// Nothing started is outstanding: the oldest WQE, if any, was
		// rewound and is to be sent again (or the queue is empty and every
		// PSN acknowledged). An answer to its earlier transmission moves
		// nothing: comp.psn stays at the WQE's first PSN until it is sent
		// and answered, as rxe ignores responses while its head WQE is
		// posted.
		next = q.comp.psn
	case w.isReadOrAtomic() && next.After(w.firstPSN):
		next = w.firstPSN
	case w.state != wqePending && next.After(w.lastPSN):
		next = w.lastPSN
	}
	if next.After(q.req.maxPSN) {
		next = q.req.maxPSN
	}
	if next.After(q.comp.psn) {
		q.comp.psn = next
		progress = true
	}
	return progress, true
}

// onAck handles an ACKNOWLEDGE: a positive ACK has done its work in
// retireAcked; an RNR NAK for the oldest unacknowledged PSN waits the RNR
// timer and goes back N (spending an RNR retry, 7: infinite); a PSN
// sequence NAK goes back N; any other NAK fails the WQE (class C at the
// peer). A NAK for another PSN is stale. ok is false when the QP's timers
// were set here (RNR) or it failed.
func (q *QP) onAck(now time.Time, pkt *bth.Packet, w *sendWQE, progress bool) (ok bool) {
	aeth := pkt.AETH()
	if aeth.IsACK() {
		return true
	}
	if aeth.IsRNRNAK() {
		q.e.cfg.Stats.NAKsRcvd[NAKRNR].Add(1)
	} else if code := aeth.NAKCode(); aeth.IsNAK() && code <= bth.NAKInvalidRDRequest {
		q.e.cfg.Stats.NAKsRcvd[NAKKind(code)].Add(1)
	}
	if pkt.PSN() != q.comp.psn || w == nil {
		return true // stale
	}
	switch {
	case aeth.IsRNRNAK():
		q.onRNR(now, w, aeth, progress)
		return false
	case !aeth.IsNAK():
		return true
	case aeth.NAKCode() == bth.NAKPSNSeqErr:
		// What the NAK acknowledged ends any earlier retry first, so the one
		// it starts stands: a second NAK before any further progress is its
		// echo and is ignored (rxe started_retry).
		q.afterProgress(now, progress)
		q.retry(now, false)
		return false
	}
	q.failWQE(now, w, nakStatus(aeth.NAKCode()))
	return false
}

// nakStatus is the completion status of a WQE the peer NAKed with code.
func nakStatus(code uint8) verbs.WCStatus {
	switch code {
	case bth.NAKInvalidRequest:
		return verbs.WCRemInvReqErr
	case bth.NAKRemoteAccess:
		return verbs.WCRemAccessErr
	case bth.NAKRemoteOpErr:
		return verbs.WCRemOpErr
	}
	return verbs.WCRemInvRDReqErr
}

// spendRetry takes one retry from *left (7: infinite) and reports false when
// none was left.
func spendRetry(left *uint8) bool {
	if *left == 0 {
		return false
	}
	if *left != 7 {
		*left--
	}
	return true
}

// onRNR waits the peer's RNR timer before going back N, spending an RNR
// retry (7: infinite), or fails the WQE when none is left.
func (q *QP) onRNR(now time.Time, w *sendWQE, aeth bth.AETH, progress bool) {
	if !spendRetry(&q.comp.rnrRetry) {
		q.e.cfg.Stats.RNRRetryExceeded.Add(1)
		q.failWQE(now, w, verbs.WCRNRRetryExcErr)
		return
	}
	q.afterProgressNoTimer(progress)
	q.comp.rnrAt = now.Add(bth.RNRTimerDuration(aeth.RNRTimer()))
	q.comp.rtoAt = time.Time{}
	q.req.needRetry = true
	q.req.probing = false // the peer answers: go back N after the wait
	// The rest of the message is in flight and will draw a PSN
	// sequence NAK: the echo of this RNR NAK, not a new loss.
	q.comp.retrying = true
}

// onAtomicAck completes the atomic at the head with the original value the
// peer returned, written into the WQE's buffer. Duplicates and strays are
// ignored.
func (q *QP) onAtomicAck(now time.Time, pkt *bth.Packet, w *sendWQE, progress bool) (bool, bool) {
	p := pkt.PSN()
	if w == nil || !w.isAtomic() || p != q.comp.psn || p != w.firstPSN || w.state != wqePending {
		return progress, true // duplicate or stray
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], pkt.AtomicAckETH().Orig)
	if st := q.scatter(w.wr.SGL, 0, b[:]); st != verbs.WCSuccess {
		q.failWQE(now, w, verbs.WCLocProtErr)
		return progress, false
	}
	q.comp.psn = p.Add(1)
	q.complete(now, w, verbs.WCSuccess)
	return true, true
}

// onReadResponse places a READ response for the READ at the head: in PSN
// order (a gap asks for the rest again at once, instead of waiting for the
// timer), FIRST and MIDDLE carrying exactly the path MTU and the LAST or
// ONLY the rest (else BAD_RESP_ERR); the LAST completes the READ.
func (q *QP) onReadResponse(now time.Time, pkt *bth.Packet, w *sendWQE, progress bool) (bool, bool) {
	if w != nil && (w.wr.Opcode == verbs.WRFlush || w.wr.Opcode == verbs.WRAtomicWrite) {
		return q.onFlushResponse(now, pkt, w, progress)
	}
	p := pkt.PSN()
	if w == nil || w.wr.Opcode != verbs.WRRDMARead || p.Before(w.firstPSN) || p.After(w.lastPSN) {
		return progress, true
	}
	if p != q.comp.psn {
		if p.After(q.comp.psn) && (!q.comp.gapSet || q.comp.gapPSN != q.comp.psn) {
			q.comp.gapSet, q.comp.gapPSN = true, q.comp.psn
			q.req.needRetry = true
		}
		return progress, true
	}
	off := uint32(p.Diff(w.firstPSN)) * q.pmtu
	data := pkt.Payload()
	isLast, op := p == w.lastPSN, pkt.Opcode()
	if isLast != op.Ends() || (isLast && uint32(len(data)) != w.length-off) || (!isLast && uint32(len(data)) != q.pmtu) {
		q.failWQE(now, w, verbs.WCBadRespErr)
		return progress, false
	}
	if st := q.scatter(w.wr.SGL, off, data); st != verbs.WCSuccess {
		q.failWQE(now, w, verbs.WCLocProtErr)
		return progress, false
	}
	q.comp.psn = p.Add(1)
	if isLast {
		q.complete(now, w, verbs.WCSuccess)
	}
	return true, true
}

// onFlushResponse completes the FLUSH or ATOMIC_WRITE at the head: the
// responder answers either with an RDMA READ RESPONSE ONLY without payload
// (rxe send_read_response_ack; rxe_comp.c check_ack). Anything else for its
// PSN is BAD_RESP_ERR; duplicates and strays are ignored.
func (q *QP) onFlushResponse(now time.Time, pkt *bth.Packet, w *sendWQE, progress bool) (bool, bool) {
	p := pkt.PSN()
	if p != q.comp.psn || p != w.firstPSN || w.state != wqePending {
		return progress, true
	}
	if pkt.Opcode() != bth.RCReadResponseOnly || len(pkt.Payload()) != 0 {
		q.failWQE(now, w, verbs.WCBadRespErr)
		return progress, false
	}
	q.comp.psn = p.Add(1)
	q.complete(now, w, verbs.WCSuccess)
	return true, true
}

// afterProgress resets the retry counters and restarts or stops the
// retransmission timer after the completer advanced.
func (q *QP) afterProgress(now time.Time, progress bool) {
	if !progress || q.attr.State == verbs.QPSErr {
		return
	}
	q.resetRetries()
	q.comp.gapSet = false
	if q.head() != nil && q.rto > 0 {
		q.comp.rtoAt = now.Add(q.rtoInterval())
	} else {
		q.comp.rtoAt = time.Time{}
	}
}

func (q *QP) afterProgressNoTimer(progress bool) {
	if progress {
		q.comp.retryCnt = q.attr.RetryCnt
		q.comp.gapSet = false
		q.comp.retrying = false
		q.comp.backoff = 0
		q.comp.reserved = false
	}
}
