package transport

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/core/verbs"
)

// classOf is an opcode's counting class; UC counts with RC.
func classOf(op bth.Opcode) OpClass {
	switch {
	case op == bth.CNP:
		return ClassCNP
	case op.IsUD():
		return ClassUD
	case op.IsSend():
		return ClassSend
	case op.IsWrite():
		return ClassWrite
	case op.IsReadRequest():
		return ClassReadRequest
	case op.IsReadResponse():
		return ClassReadResponse
	case op.IsAck():
		return ClassAck
	case op.IsAtomicAck():
		return ClassAtomicAck
	case op.IsAtomic():
		return ClassAtomic
	}
	return ClassOther
}

// sameAddr compares IP addresses, ignoring IPv4 mapping and the zone, which a
// socket adds to an IPv6 link-local source (fe80::1%br0) but which says where
// a packet arrived, not who sent it.
func sameAddr(a, b netip.Addr) bool {
	return a.Unmap().WithZone("") == b.Unmap().WithZone("")
}

// receive checks an inbound datagram for q (parse, ICRC, P_Key, transport,
// source) and hands it to the responder or completer (rxe_rcv_pkt). Owner
// shard only.
func (q *QP) receive(now time.Time, it *rxItem) {
	e := q.e
	b := it.bytes()
	pkt, err := bth.Parse(b)
	if err != nil {
		e.cfg.Stats.Malformed.Add(1)
		return
	}
	src := it.src.Addr().Unmap()
	dst := it.local.Unmap()
	if !dst.IsValid() {
		dst = e.cfg.LocalAddr
	}
	env := bth.Envelope{Src: src, Dst: dst, DF: true, SrcPort: it.src.Port(), DstPort: e.port}
	// The P_Key and source checks are counted after the ICRC's, but a packet
	// they drop must place nothing (responder.placeTarget).
	pkeyOK := pkt.PKey()&0x7FFF == 0x7FFF // the default partition, either membership
	fromPeer := !q.attr.AV.DGID.IsValid() || sameAddr(src, q.attr.AV.DGID)
	var to []byte
	if pkeyOK && fromPeer {
		to = q.resp.placeTarget(&pkt)
	}
	if to != nil {
		// the payload lands as it is checked
		if !bth.AcceptICRCPlace(&env, b, pkt.HeaderLen(), to) {
			e.cfg.Stats.ICRCErrors.Add(1)
			return
		}
		q.resp.placed = true
	} else if !bth.AcceptICRC(&env, b) {
		e.cfg.Stats.ICRCErrors.Add(1)
		return
	}
	op := pkt.Opcode()
	class := classOf(op)
	e.cfg.Stats.RcvdPackets[class].Add(1)
	e.cfg.Stats.RcvdBytes[class].Add(uint64(len(b)))
	q.cnt.rxPackets.Add(1)
	if !pkeyOK {
		e.cfg.Stats.BadPKey.Add(1)
		return
	}
	switch q.typ {
	case verbs.QPTypeUD:
		if !op.IsUD() && op != bth.CNP {
			e.cfg.Stats.Malformed.Add(1)
			return
		}
	case verbs.QPTypeRC, verbs.QPTypeUC:
		if (q.typ == verbs.QPTypeRC && !op.IsRC()) || (q.typ == verbs.QPTypeUC && !op.IsUC()) {
			if op != bth.CNP {
				e.cfg.Stats.Malformed.Add(1)
				return
			}
		}
		if !fromPeer { // rxe check_addr: a connected packet comes from the QP's peer
			e.cfg.Stats.BadSource.Add(1)
			return
		}
	}
	if op == bth.CNP {
		q.onCNP(now)
		return
	}
	if dcqcn.IsCE(it.tos) {
		q.onCE(now, &pkt, src)
	}
	if op.IsRequest() {
		q.resp.onRequest(now, &pkt, it)
	} else {
		q.comp.onResponse(now, &pkt)
	}
}

// service runs what a QP needs after packets, posts or timers: the error
// transition, timers, its turn, SQD drain, the timer re-arm. Owner shard only.
func (q *QP) service(now time.Time) {
	q.resp.flushAck()
	if q.fatal.Load() && q.attr.State != verbs.QPSErr {
		// A CQ it feeds overran: IBA's Local Work Queue Catastrophic Error.
		q.e.event(Event{Type: verbs.EventQPFatal, QPN: q.qpn})
		q.toError(now)
	}
	if q.attr.State == verbs.QPSErr {
		q.toError(now) // flush WRs posted since
		return
	}
	if q.attr.State == verbs.QPSSQE {
		q.flushSQ(now) // send WRs posted in SQE are flushed; receives go on
	}
	if !q.timerAt.IsZero() && !now.Before(q.timerAt) {
		q.timerAt = time.Time{}
	}
	q.comp.onTimer(now)
	q.takeTurn(now)
	q.resp.flushAck() // requests held behind a READ reply may have been acknowledged
	if q.attr.State == verbs.QPSSQD && !q.sqdNotified && q.comp.head() == nil && !q.win.busy() {
		q.sqdNotified = true
		if q.attr.EnSQDAsyncNotify {
			q.e.event(Event{Type: verbs.EventSQDrained, QPN: q.qpn})
		}
	}
	q.syncTimer(now)
}

// takeTurn emits the QP's budgeted packets for this turn, READ responses (and
// the requests held behind them) first; a QP with more queues itself again.
func (q *QP) takeTurn(now time.Time) {
	limit := q.paceLimit(now, q.sh.turn())
	start := len(q.sh.out)
	used := q.resp.serveResponder(now, limit)
	sent, more := q.req.run(now, limit-used)
	q.sh.spend(used + sent)
	held := q.chargeCC(now, start) // the pacer's timer wakes it instead
	if (more || q.resp.read.active) && !held {
		q.e.cfg.Stats.TurnsYielded.Add(1)
		q.sh.wakeQP(q)
	}
}

// nextDeadline is the earliest armed timer (retransmit, RNR, pacer), or zero.
func (q *QP) nextDeadline() time.Time {
	d := time.Time{}
	for _, t := range [...]time.Time{q.comp.rtoAt, q.comp.rnrAt, q.ccDeadline()} {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	return d
}

// syncTimer has the QP's timer fire by its earliest deadline. The timer only
// wakes the QP; service checks the deadlines, so an early firing is harmless.
func (q *QP) syncTimer(now time.Time) {
	d := q.nextDeadline()
	if d.IsZero() {
		return
	}
	if !q.timerAt.IsZero() && !d.Before(q.timerAt) {
		return
	}
	q.timerAt = d
	wait := d.Sub(now)
	if wait < 0 {
		wait = 0
	}
	if q.timer == nil {
		q.timer = q.e.cfg.Clock.AfterFunc(wait, func() { q.sh.wakeQP(q) })
	} else {
		q.timer.Reset(wait)
	}
}
