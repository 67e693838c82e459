package transport

import "github.com/goroce/goroce/bth"

// sendWindow is the go-back-N state the requester and the completer share: the
// send queue from head (the oldest WQE not completed, at headPSN, the oldest
// PSN not acknowledged: the completer's end) to next (the WQE the requester
// sends, nextOff bytes into it, at nextPSN). Every rule that reads one end for
// the other, or moves both, is a method here.
type sendWindow struct {
	head    uint64  // absolute index of the oldest WQE not completed (the send queue's head)
	headPSN bth.PSN // the oldest PSN not acknowledged
	next    uint64  // absolute index of the WQE the requester sends
	nextOff uint32  // bytes of it already sent
	nextPSN bth.PSN // the PSN of the requester's next packet
	maxPSN  bth.PSN // the first PSN never sent: anything before it is a retransmission
	// needRetry makes the requester go back to head before it sends again.
	needRetry bool
	// probing: a timeout and no acknowledgement since: only the oldest
	// unacknowledged packet goes out, with AckReq (retry.go).
	probing bool
}

// startAt empties the window at send queue index idx and PSN psn (sq_psn sets
// the PSN, RESET the index).
func (w *sendWindow) startAt(idx uint64, psn bth.PSN) {
	*w = sendWindow{head: idx, next: idx, headPSN: psn, nextPSN: psn, maxPSN: psn}
}

// full reports whether an RC requester must wait: 128 PSNs are
// unacknowledged (rxe RXE_MAX_UNACKED_PSNS), or a timeout probe is out.
func (w *sendWindow) full() bool {
	return w.nextPSN.Diff(w.headPSN) >= maxUnackedPSNs || w.probing && w.nextPSN != w.headPSN
}

// sent records a packet of n bytes and consumed PSNs (a READ request takes one
// per response) and reports whether it was a retransmission; only RC resends.
func (w *sendWindow) sent(consumed int, n uint32, rc bool) (retransmit bool) {
	retransmit = w.nextPSN.Before(w.maxPSN)
	w.nextPSN = w.nextPSN.Add(consumed)
	if w.nextPSN.After(w.maxPSN) || !rc {
		w.maxPSN = w.nextPSN
	}
	w.nextOff += n
	return retransmit
}

func (w *sendWindow) nextWQE() {
	w.next++
	w.nextOff = 0
}

// ghost reports whether a response names PSN p, never sent: a QPN's old
// incarnation (its process exited, the peer still resends), or a forgery.
func (w *sendWindow) ghost(p bth.PSN) bool { return !p.Before(w.maxPSN) }

// clampSent is p, but not past maxPSN: nothing acknowledges a PSN never sent.
func (w *sendWindow) clampSent(p bth.PSN) bth.PSN {
	if p.After(w.maxPSN) {
		return w.maxPSN
	}
	return p
}

// ack moves headPSN forward to p and reports whether it moved.
func (w *sendWindow) ack(p bth.PSN) bool {
	if !p.After(w.headPSN) {
		return false
	}
	w.headPSN = p
	return true
}

// retireHead removes the completed WQE at head. A requester that had only
// restarted it after a rewind (a probe stops after one packet) moves on too:
// the next WQE starts at the next unacknowledged PSN, never at one of the
// completed WQE's, which the peer would take for duplicates.
func (w *sendWindow) retireHead() {
	w.head++
	if w.next < w.head {
		w.next, w.nextOff = w.head, 0
		if w.nextPSN.Before(w.headPSN) {
			w.nextPSN = w.headPSN
		}
	}
}

// flushed puts the requester at head once every WQE was flushed.
func (w *sendWindow) flushed() { w.next, w.nextOff = w.head, 0 }

// goBack is req_retry's arithmetic: resend from headPSN, into the head WQE
// (first PSN first, pmtu bytes a packet) when the ACKs stopped inside it.
func (w *sendWindow) goBack(inHead bool, first bth.PSN, pmtu uint32) {
	w.needRetry = false
	w.next, w.nextPSN, w.nextOff = w.head, w.headPSN, 0
	if inHead {
		w.nextOff = uint32(w.nextPSN.Diff(first)) * pmtu
	}
}

// ackedInside reports whether the ACKs stopped inside the WQE of PSNs first to
// last, so that a resend starts in its middle.
func (w *sendWindow) ackedInside(first, last bth.PSN) bool {
	return w.headPSN.After(first) && !w.headPSN.After(last)
}

// busy reports whether the requester has started a WQE the completer has not
// completed.
func (w *sendWindow) busy() bool { return w.next != w.head }
