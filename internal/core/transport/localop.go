package transport

import (
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
)

// Local operations: BIND_MW and LOCAL_INV act on the device's memory keys and
// send nothing (rxe_do_local_ops). The requester executes one when it reaches
// it in the send queue, in order with the WRs around it: after the WRs before
// it were sent, not after they completed, unless it is fenced. It consumes no
// PSN; it completes when every WR before it has completed, so completions stay
// in send-queue order. A failed one stops the requester (nothing after it is
// sent); once the WRs before it complete, it completes with its error
// (IBV_WC_MW_BIND_ERR for a bind, IBV_WC_LOC_QP_OP_ERR for an invalidation) and
// the QP fails, as rxe's requester and completer do.

func (w *sendWQE) isLocalOp() bool {
	return w.wr.Opcode == verbs.WRBindMW || w.wr.Opcode == verbs.WRLocalInv
}

// runLocalOp executes w, a local operation at the window's next WQE, if it
// may start: not in SQD, and with SendFence only once every earlier WR has
// completed. It reports whether the requester may go on past it.
func (req *requester) runLocalOp(now time.Time, w *sendWQE) bool {
	q := req.q
	switch {
	case w.state == wqePending && w.status != verbs.WCSuccess:
		return false // failed: the requester stops here
	case w.state == wqePending:
		return true // executed before a rewind: not again
	case q.attr.State == verbs.QPSSQD:
		return false
	case w.wr.Flags&verbs.SendFence != 0 && q.win.busy():
		return false
	}
	w.state, w.status = wqePending, verbs.WCSuccess
	switch w.wr.Opcode {
	case verbs.WRBindMW:
		b := w.wr.BindMW
		err := q.e.cfg.Memory.BindMW(&MWBind{MWRKey: b.MWRKey, NewRKey: b.RKey, MRLKey: b.MRLKey, Addr: b.Addr,
			Length: b.Length, Access: b.Access, QPN: q.qpn, PD: q.init.PD})
		if err != nil {
			w.status = verbs.WCMWBindErr
		}
	case verbs.WRLocalInv:
		if q.e.cfg.Memory.Invalidate(w.wr.InvRKey, q.qpn, q.init.PD) != nil {
			w.status = verbs.WCLocQPOpErr
		}
	}
	if !q.win.busy() {
		q.comp.completeLocalOps(now)
	}
	return w.status == verbs.WCSuccess
}

// completeLocalOps completes the executed local operations at the head of the
// send queue: the WRs before them are complete. A failed one fails the QP.
func (c *completer) completeLocalOps(now time.Time) {
	q := c.q
	for q.win.head < q.sq.loadTail() {
		w := q.sq.slot(q.win.head)
		if !w.isLocalOp() || w.state != wqePending {
			return
		}
		if w.status != verbs.WCSuccess {
			c.failWQE(now, w, w.status)
			return
		}
		c.complete(now, w, verbs.WCSuccess)
	}
}
