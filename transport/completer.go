package transport

import (
	"encoding/binary"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cq"
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
func (q *QP) complete(now time.Time, w *sendWQE, status cq.Status) {
	// Everything needed from the slot is read first, and the slot is retired
	// before the completion becomes visible: once a user has polled a
	// completion, its send-queue slots must already be free for PostSend, as
	// with libibverbs (a PostSend right after Poll must not see ENOMEM).
	signal := status != cq.Success || w.wr.Flags&SendSignaled != 0 || q.init.SQSigAll
	wc := cq.WorkCompletion{WRID: w.wr.WRID, Status: status, Opcode: wcOpcode(w.wr.Opcode), QPNum: q.qpn}
	if status == cq.Success {
		wc.ByteLen = w.length
	}
	if status == cq.Success && q.typ == QPTypeRC && !w.sentAt.IsZero() {
		q.e.stats.ObserveLatency(now.Sub(w.sentAt))
	}
	if status == cq.Success && q.typ == QPTypeRC && w.lastPSN.Add(1).After(q.comp.psn) {
		// Everything up to the WQE's last PSN is acknowledged (rxe
		// do_complete/COMPST_UPDATE_COMP): a later rewind must restart
		// after it, never inside it or before it.
		q.comp.psn = w.lastPSN.Add(1)
	}
	w.state = wqeDone
	q.comp.idx++
	if q.req.idx < q.comp.idx {
		q.req.idx = q.comp.idx
	}
	q.sq.retire()
	if signal {
		q.pushWC(q.init.SendCQ, &wc, false)
	}
}

// completeSent completes UD/UC WQEs once sent: nothing acknowledges them.
func (q *QP) completeSent(now time.Time) {
	for q.comp.idx < q.req.idx {
		w := q.sq.slot(q.comp.idx)
		if w.state != wqePending {
			return
		}
		q.complete(now, w, cq.Success)
	}
}

// failWQE completes the head WQE with an error status and flushes the
// rest. An RC QP moves to ERR. A UD or UC QP moves to SQE (IBA 10.3.1.8):
// only its send queue has failed, so receives go on, and ibv_modify_qp back
// to RTS resumes sending.
func (q *QP) failWQE(now time.Time, w *sendWQE, status cq.Status) {
	if w == nil {
		w = q.head()
	}
	if w != nil && w.state != wqeDone && w == q.sq.slot(q.comp.idx) {
		q.complete(now, w, status)
	}
	if q.typ != QPTypeRC && q.attr.State != QPSErr {
		q.setState(QPSSQE)
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
	if q.comp.retryCnt == 0 {
		q.e.stats.RetryExceeded.Add(1)
		q.failWQE(now, nil, cq.RetryExcErr)
		return
	}
	if q.comp.retryCnt != 7 {
		q.comp.retryCnt--
	}
	if q.head() != nil {
		q.req.needRetry = true
		q.comp.retrying = true
	}
}

// onResponse is the completer for one inbound response packet.
func (q *QP) onResponse(now time.Time, pkt *bth.Packet) {
	switch q.attr.State {
	case QPSRTS, QPSSQD, QPSSQE:
	default:
		return
	}
	p := pkt.PSN()
	op := pkt.Opcode()
	var aeth bth.AETH
	if op.HasAETH() {
		aeth = pkt.AETH()
	}
	// Everything before p is implicitly acknowledged; a positive ACK also
	// acknowledges p itself (coalesced, cumulative ACKs).
	through := p.Add(-1)
	if op == bth.RCAck && aeth.IsACK() {
		through = p
	}
	progress := false
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
			return
		}
		q.complete(now, w, cq.Success)
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
	switch op {
	case bth.RCAck:
		switch {
		case aeth.IsACK():
		case aeth.IsRNRNAK():
			q.e.stats.NAKsRcvd[NAKRNR].Add(1)
			if p != q.comp.psn || w == nil {
				break // stale
			}
			if q.comp.rnrRetry == 0 {
				q.e.stats.RNRRetryExceeded.Add(1)
				q.failWQE(now, w, cq.RNRRetryExcErr)
				return
			}
			if q.comp.rnrRetry != 7 {
				q.comp.rnrRetry--
			}
			q.afterProgressNoTimer(progress)
			q.comp.rnrAt = now.Add(bth.RNRTimerDuration(aeth.RNRTimer()))
			q.comp.rtoAt = time.Time{}
			q.req.needRetry = true
			q.req.probing = false // the peer answers: go back N after the wait
			// The rest of the message is in flight and will draw a PSN
			// sequence NAK: the echo of this RNR NAK, not a new loss.
			q.comp.retrying = true
			return
		case aeth.IsNAK():
			code := aeth.NAKCode()
			if code <= bth.NAKInvalidRDRequest {
				q.e.stats.NAKsRcvd[NAKKind(code)].Add(1)
			}
			if p != q.comp.psn || w == nil {
				break // stale
			}
			switch code {
			case bth.NAKPSNSeqErr:
				// Ignored while an RNR wait or a retry is pending (retry).
				q.retry(now, false)
			case bth.NAKInvalidRequest:
				q.failWQE(now, w, cq.RemInvReqErr)
				return
			case bth.NAKRemoteAccess:
				q.failWQE(now, w, cq.RemAccessErr)
				return
			case bth.NAKRemoteOpErr:
				q.failWQE(now, w, cq.RemOpErr)
				return
			default:
				q.failWQE(now, w, cq.RemInvRDReqErr)
				return
			}
		}
	case bth.RCAtomicAck:
		if w == nil || !w.isAtomic() || p != q.comp.psn || p != w.firstPSN || w.state != wqePending {
			break // duplicate or stray
		}
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], pkt.AtomicAckETH().Orig)
		if st := q.scatter(w.wr.SGL, 0, b[:]); st != cq.Success {
			q.failWQE(now, w, cq.LocProtErr)
			return
		}
		q.comp.psn = p.Add(1)
		q.complete(now, w, cq.Success)
		progress = true
	case bth.RCReadResponseFirst, bth.RCReadResponseMiddle, bth.RCReadResponseLast, bth.RCReadResponseOnly:
		if w == nil || w.wr.Opcode != WRRDMARead || p.Before(w.firstPSN) || p.After(w.lastPSN) {
			break
		}
		if p != q.comp.psn {
			if p.After(q.comp.psn) && (!q.comp.gapSet || q.comp.gapPSN != q.comp.psn) {
				// A response was lost: ask again from the gap at once
				// instead of waiting for the timer.
				q.comp.gapSet, q.comp.gapPSN = true, q.comp.psn
				q.req.needRetry = true
			}
			break
		}
		off := uint32(p.Diff(w.firstPSN)) * q.pmtu
		data := pkt.Payload()
		isLast := p == w.lastPSN
		switch {
		case isLast && (op == bth.RCReadResponseLast || op == bth.RCReadResponseOnly):
			if uint32(len(data)) != w.length-off {
				q.failWQE(now, w, cq.BadRespErr)
				return
			}
		case !isLast && (op == bth.RCReadResponseFirst || op == bth.RCReadResponseMiddle):
			if uint32(len(data)) != q.pmtu {
				q.failWQE(now, w, cq.BadRespErr)
				return
			}
		default:
			q.failWQE(now, w, cq.BadRespErr)
			return
		}
		if st := q.scatter(w.wr.SGL, off, data); st != cq.Success {
			q.failWQE(now, w, cq.LocProtErr)
			return
		}
		q.comp.psn = p.Add(1)
		progress = true
		if isLast {
			q.complete(now, w, cq.Success)
		}
	}
	q.afterProgress(now, progress)
}

// afterProgress resets the retry counters and restarts or stops the
// retransmission timer after the completer advanced.
func (q *QP) afterProgress(now time.Time, progress bool) {
	if !progress || q.attr.State == QPSErr {
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
