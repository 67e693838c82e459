package transport

import (
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
)

// Local operations: BIND_MW and LOCAL_INV act on the device's memory keys and
// send nothing (rxe_do_local_ops). The requester executes one when it reaches
// it, after the WRs before it were sent (completed, if it is fenced). It takes
// no PSN and completes once every WR before it has, keeping completions in
// send-queue order. A failed one stops the requester; once the WRs before it
// complete, it completes with its error (IBV_WC_MW_BIND_ERR,
// IBV_WC_LOC_QP_OP_ERR) and the QP fails, as in rxe.

func (w *sendWQE) isLocalOp() bool {
	return w.wr.Opcode == verbs.WRBindMW || w.wr.Opcode == verbs.WRLocalInv
}

// runLocalOp executes w, the local operation at the window's next WQE, unless
// in SQD or fenced behind incomplete WRs, and reports whether the requester
// may go past it.
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

// completeLocalOps completes the executed local operations at the send queue's
// head; a failed one fails the QP.
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
