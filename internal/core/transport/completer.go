package transport

import (
	"encoding/binary"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// completer retires send WQEs from ACKs, NAKs, READ responses and atomic ACKs
// and drives retries (rxe_comp.c); it moves the send window's head. Owner
// shard only.
type completer struct {
	q        *QP
	retryCnt uint8 // retries left; 7 = infinite
	rnrRetry uint8 // RNR retries left; 7 = infinite
	rtoAt    time.Time
	rnrAt    time.Time
	gapPSN   bth.PSN // the head PSN for which a read-response gap already triggered a retry
	gapSet   bool
	// retrying: a retry or RNR wait started and nothing was acknowledged since
	// (rxe comp.started_retry; see retry).
	retrying bool
	// backoff: consecutive timeouts, at most maxBackoff (retry.go).
	backoff uint8
	// reserved: a timeout waits for the token it reserved, due at rtoAt.
	reserved bool
}

// ackResult is what the completer made of a response so far, as respErr is for
// the responder; onResponse runs afterProgress unless a handler acted.
type ackResult uint8

const (
	ackNothing  ackResult = iota // nothing newly acknowledged
	ackProgress                  // the head PSN moved or WQEs completed
	ackActed                     // a retry, an RNR wait or a failure: the timers are set
)

// head returns the oldest started, uncompleted WQE, or nil.
func (c *completer) head() *sendWQE {
	q := c.q
	if q.win.head > q.win.next || q.win.head >= q.sq.loadTail() {
		return nil
	}
	w := q.sq.slot(q.win.head)
	if w.state == wqePosted || w.state == wqeDone {
		return nil
	}
	return w
}

// complete retires the head WQE, posting a completion when the WR is signaled,
// the QP signals all WRs, or the status is an error (IBA 10.7.3.1, rxe
// do_complete).
func (c *completer) complete(now time.Time, w *sendWQE, status verbs.WCStatus) {
	q := c.q
	// The slot is read, then retired before the completion becomes visible: as
	// with libibverbs, a PostSend right after the Poll that returned it must
	// find the slot free (no ENOMEM).
	signal := status != verbs.WCSuccess || w.wr.Flags&verbs.SendSignaled != 0 || q.init.SQSigAll
	wc := verbs.WC{WRID: w.wr.WRID, Status: status, Opcode: wcOpcode(w.wr.Opcode), QPNum: q.qpn}
	ok := status == verbs.WCSuccess
	if ok {
		wc.ByteLen = w.length
	}
	if ok && q.typ == verbs.QPTypeRC && !w.sentAt.IsZero() {
		q.e.cfg.Stats.ObserveLatency(now.Sub(w.sentAt))
	}
	local := w.isLocalOp()
	if ok && q.typ == verbs.QPTypeRC && !local {
		// Everything up to its last PSN is acknowledged (rxe
		// COMPST_UPDATE_COMP): a later rewind restarts after it.
		q.win.ack(w.lastPSN.Add(1))
	}
	w.state = wqeDone
	q.win.retireHead()
	q.sq.retire()
	if signal {
		q.pushWC(q.init.SendCQ, &wc, false)
	}
	if ok && !local {
		c.completeLocalOps(now) // local operations waiting behind w
	}
}

// completeSent completes UD/UC WQEs once sent: nothing acknowledges them.
func (c *completer) completeSent(now time.Time) {
	q := c.q
	for q.win.head < q.win.next {
		w := q.sq.slot(q.win.head)
		if w.state != wqePending {
			return
		}
		if w.isLocalOp() {
			c.completeLocalOps(now)
			continue
		}
		c.complete(now, w, verbs.WCSuccess)
	}
}

// failWQE completes the head WQE with an error status and flushes the rest. RC
// moves to ERR; UD and UC to SQE (IBA 10.3.1.8): receives go on, and
// ibv_modify_qp back to RTS resumes sending.
func (c *completer) failWQE(now time.Time, w *sendWQE, status verbs.WCStatus) {
	q := c.q
	if w == nil {
		w = c.head()
	}
	if w != nil && w.state != wqeDone && w == q.sq.slot(q.win.head) {
		c.complete(now, w, status)
	}
	if q.typ != verbs.QPTypeRC && q.attr.State != verbs.QPSErr {
		q.setState(verbs.QPSSQE)
		q.flushSQ(now)
		return
	}
	q.toError(now)
}

// resetRetries is progressed plus rnr_retry back and no probe.
func (c *completer) resetRetries() {
	c.progressed()
	c.rnrRetry = c.q.attr.RNRRetry
	c.q.win.probing = false
}

// progressed is what any acknowledgement resets: retry_cnt, the retry under
// way, the backoff and the token reserved.
func (c *completer) progressed() {
	c.retryCnt = c.q.attr.RetryCnt
	c.gapSet = false
	c.retrying = false
	c.backoff = 0
	c.reserved = false
}

// retryPending: the requester has yet to rewind, waits on the RNR timer, or
// rewound and nothing was acknowledged since.
func (c *completer) retryPending() bool {
	return c.q.win.needRetry || c.rnrWaiting() || c.retrying
}

// rnrWaiting reports whether the requester waits for the peer's RNR timer
// before it goes back.
func (c *completer) rnrWaiting() bool { return !c.rnrAt.IsZero() }

// retry is rxe's COMPST_ERROR_RETRY: spend one retry (7: infinite) and send
// the requester back to the head PSN, or fail with RETRY_EXC_ERR. While a
// retry is pending, a NAK or implicit NAK (timeout false) is most likely the
// echo of packets sent before the rewind: it costs nothing and restarts
// nothing (rxe started_retry); only the timer does.
func (c *completer) retry(now time.Time, timeout bool) {
	if !timeout && c.retryPending() {
		return
	}
	if !spendRetry(&c.retryCnt) {
		c.q.e.cfg.Stats.RetryExceeded.Add(1)
		c.failWQE(now, nil, verbs.WCRetryExcErr)
		return
	}
	if c.head() != nil {
		c.q.win.needRetry = true
		c.retrying = true
	}
}

// onResponse handles one inbound response (rxe_completer): retire what it
// acknowledges, then act on its kind.
func (c *completer) onResponse(now time.Time, pkt *bth.Packet) {
	q := c.q
	switch q.attr.State {
	case verbs.QPSRTS, verbs.QPSSQD, verbs.QPSSQE:
	default:
		return
	}
	if q.win.ghost(pkt.PSN()) {
		// Acting on a ghost (sendWindow.ghost) would retire WQEs whose packets
		// may never have arrived.
		q.e.cfg.Stats.GhostResponses.Add(1)
		return
	}
	res := c.retireAcked(now, pkt)
	if res == ackActed {
		return
	}
	w := c.head()
	switch op := pkt.Opcode(); {
	case op.IsAck():
		res = c.onAck(now, pkt, w, res)
	case op.IsAtomicAck():
		res = c.onAtomicAck(now, pkt, w, res)
	case op.IsReadResponse():
		res = c.onReadResponse(now, pkt, w, res)
	}
	if res != ackActed {
		c.afterProgress(now, res)
	}
}

// retireAcked completes the WQEs pkt acknowledges and moves the head PSN:
// everything before pkt's PSN is implicitly acknowledged, and a positive ACK
// (cumulative) acknowledges its own PSN too. It has acted when a READ or
// atomic whose response was lost started a retry.
//
// A WQE the requester is sending again after a timeout completes too once its
// last PSN is acknowledged: every packet of it went out before (a ghost is
// dropped first), and the peer has the whole message. rxe completes only a WQE
// whose last packet went out again and waits for one more ACK, which never
// comes when the peer's program exits after that ACK (a pingpong server's
// last message): its retries go on for good with retry_cnt 7.
func (c *completer) retireAcked(now time.Time, pkt *bth.Packet) ackResult {
	q := c.q
	res := ackNothing
	p := pkt.PSN()
	through := p.Add(-1)
	if pkt.Opcode().IsAck() && pkt.AETH().IsACK() {
		through = p
	}
	for {
		w := c.head()
		if w == nil || w.lastPSN.After(through) {
			break
		}
		if w.isReadOrAtomic() {
			// Its response was lost but later requests were answered: read
			// again (COMPST_ERROR_RETRY) from its first PSN, after accounting
			// the progress, which ends any earlier retry.
			c.afterProgress(now, res)
			c.retry(now, false)
			return ackActed
		}
		c.complete(now, w, verbs.WCSuccess)
		res = ackProgress
	}
	if q.win.ack(q.win.clampSent(c.ackedTo(through.Add(1)))) {
		res = ackProgress
	}
	return res
}

// ackedTo is how far the head PSN may move when everything before next is
// acknowledged: not into a READ or atomic at the head (only its own responses
// advance it there, even when one implicitly acknowledges the WRITE before
// it); and not at all with nothing started outstanding, as rxe ignores
// responses while its head WQE is posted.
func (c *completer) ackedTo(next bth.PSN) bth.PSN {
	w := c.head()
	switch {
	case w == nil:
		return c.q.win.headPSN
	case w.isReadOrAtomic() && next.After(w.firstPSN):
		return w.firstPSN
	}
	return next
}

// onAck handles an ACKNOWLEDGE beyond retireAcked: for the head PSN, an RNR
// NAK waits the RNR timer (onRNR), a PSN sequence NAK goes back N, any other
// NAK (class C at the peer) fails the WQE. A NAK for another PSN is stale.
func (c *completer) onAck(now time.Time, pkt *bth.Packet, w *sendWQE, res ackResult) ackResult {
	q := c.q
	aeth := pkt.AETH()
	if aeth.IsACK() {
		return res
	}
	if aeth.IsRNRNAK() {
		q.e.cfg.Stats.NAKsRcvd[NAKRNR].Add(1)
	} else if code := aeth.NAKCode(); aeth.IsNAK() && code <= bth.NAKInvalidRDRequest {
		q.e.cfg.Stats.NAKsRcvd[NAKKind(code)].Add(1)
	}
	if pkt.PSN() != q.win.headPSN || w == nil {
		return res // stale
	}
	switch {
	case aeth.IsRNRNAK():
		c.onRNR(now, w, aeth, res)
	case !aeth.IsNAK():
		return res
	case aeth.NAKCode() == bth.NAKPSNSeqErr:
		// Progress first, so that the retry this NAK starts stands (retry).
		c.afterProgress(now, res)
		c.retry(now, false)
	default:
		c.failWQE(now, w, nakStatus(aeth.NAKCode()))
	}
	return ackActed
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

// spendRetry takes a retry from *left (7: infinite); false when none was left.
func spendRetry(left *uint8) bool {
	if *left == 0 {
		return false
	}
	if *left != 7 {
		*left--
	}
	return true
}

// onRNR waits the peer's RNR timer before going back N, spending an RNR retry,
// or fails the WQE when none is left.
func (c *completer) onRNR(now time.Time, w *sendWQE, aeth bth.AETH, res ackResult) {
	if !spendRetry(&c.rnrRetry) {
		c.q.e.cfg.Stats.RNRRetryExceeded.Add(1)
		c.failWQE(now, w, verbs.WCRNRRetryExcErr)
		return
	}
	if res == ackProgress {
		c.progressed()
	}
	c.rnrAt = now.Add(bth.RNRTimerDuration(aeth.RNRTimer()))
	c.rtoAt = time.Time{}
	c.q.win.needRetry = true
	c.q.win.probing = false // the peer answers: go back N after the wait
	// The rest of the message in flight will draw a sequence NAK: an echo.
	c.retrying = true
}

// onAtomicAck completes the atomic at the head, writing the original value
// into its buffer; duplicates and strays are ignored.
func (c *completer) onAtomicAck(now time.Time, pkt *bth.Packet, w *sendWQE, res ackResult) ackResult {
	q := c.q
	p := pkt.PSN()
	if w == nil || !w.isAtomic() || p != q.win.headPSN || p != w.firstPSN || w.state != wqePending {
		return res // duplicate or stray
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], pkt.AtomicAckETH().Orig)
	if st := q.scatter(w.wr.SGL, 0, b[:]); st != verbs.WCSuccess {
		c.failWQE(now, w, verbs.WCLocProtErr)
		return ackActed
	}
	q.win.ack(p.Add(1))
	c.complete(now, w, verbs.WCSuccess)
	return ackProgress
}

// onReadResponse places a READ response for the READ at the head: in PSN
// order (a gap asks for the rest again at once, instead of waiting for the
// timer), FIRST and MIDDLE carrying exactly the path MTU and the LAST or
// ONLY the rest (else BAD_RESP_ERR); the LAST completes the READ.
func (c *completer) onReadResponse(now time.Time, pkt *bth.Packet, w *sendWQE, res ackResult) ackResult {
	q := c.q
	if w != nil && (w.wr.Opcode == verbs.WRFlush || w.wr.Opcode == verbs.WRAtomicWrite) {
		return c.onFlushResponse(now, pkt, w, res)
	}
	p := pkt.PSN()
	if w == nil || w.wr.Opcode != verbs.WRRDMARead || p.Before(w.firstPSN) || p.After(w.lastPSN) {
		return res
	}
	if p != q.win.headPSN {
		if p.After(q.win.headPSN) && (!c.gapSet || c.gapPSN != q.win.headPSN) {
			c.gapSet, c.gapPSN = true, q.win.headPSN
			q.win.needRetry = true
		}
		return res
	}
	off := uint32(p.Diff(w.firstPSN)) * q.pmtu
	data := pkt.Payload()
	isLast, op := p == w.lastPSN, pkt.Opcode()
	if isLast != op.Ends() || (isLast && uint32(len(data)) != w.length-off) || (!isLast && uint32(len(data)) != q.pmtu) {
		c.failWQE(now, w, verbs.WCBadRespErr)
		return ackActed
	}
	if st := q.scatter(w.wr.SGL, off, data); st != verbs.WCSuccess {
		c.failWQE(now, w, verbs.WCLocProtErr)
		return ackActed
	}
	q.win.ack(p.Add(1))
	if isLast {
		c.complete(now, w, verbs.WCSuccess)
	}
	return ackProgress
}

// onFlushResponse completes the FLUSH or ATOMIC_WRITE at the head from its
// empty RDMA READ RESPONSE ONLY (rxe check_ack); anything else for its PSN is
// BAD_RESP_ERR; duplicates and strays are ignored.
func (c *completer) onFlushResponse(now time.Time, pkt *bth.Packet, w *sendWQE, res ackResult) ackResult {
	q := c.q
	p := pkt.PSN()
	if p != q.win.headPSN || p != w.firstPSN || w.state != wqePending {
		return res
	}
	if pkt.Opcode() != bth.RCReadResponseOnly || len(pkt.Payload()) != 0 {
		c.failWQE(now, w, verbs.WCBadRespErr)
		return ackActed
	}
	q.win.ack(p.Add(1))
	c.complete(now, w, verbs.WCSuccess)
	return ackProgress
}

// afterProgress resets the retries and restarts or stops the retransmission
// timer after progress.
func (c *completer) afterProgress(now time.Time, res ackResult) {
	q := c.q
	if res != ackProgress || q.attr.State == verbs.QPSErr {
		return
	}
	c.resetRetries()
	if c.head() != nil && q.rto > 0 {
		c.rtoAt = now.Add(c.rtoInterval())
	} else {
		c.rtoAt = time.Time{}
	}
}

// armRTO starts the retransmission timer unless it runs already.
func (c *completer) armRTO(now time.Time) {
	if c.q.rto > 0 && c.rtoAt.IsZero() {
		c.rtoAt = now.Add(c.rtoInterval())
	}
}
