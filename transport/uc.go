package transport

import (
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cq"
)

// ucDrop abandons the message in progress and drops packets until the next
// FIRST or ONLY (IBA 9.7.5.2.x, rxe drop_msg): UC never NAKs. A receive WR
// taken for the abandoned SEND stays with the QP for the next message.
func (q *QP) ucDrop() {
	q.ucAbandon()
	q.resp.dropping = true
}

// ucAbandon forgets a partial SEND or WRITE; bytes already placed stay.
func (q *QP) ucAbandon() {
	q.resp.opcode = noOpcode
	q.resp.off = 0
	q.resp.woff, q.resp.wlen = 0, 0
}

// ucFail is an IBA class D responder error on a UC QP (the receive WR
// cannot hold the message or names bad memory): the WR completes with
// status and the QP moves to ERR.
func (q *QP) ucFail(now time.Time, status cq.Status) {
	if q.resp.haveWR {
		q.resp.haveWR = false
		q.pushWC(q.init.RecvCQ, &cq.WorkCompletion{WRID: q.resp.wr.WRID, Status: status, Opcode: cq.OpRecv, QPNum: q.qpn}, false)
	}
	q.toError(now)
}

// ucRequest is the UC responder for one inbound SEND or WRITE packet. There
// are no ACKs, duplicates or retries: a PSN gap inside a message, a packet
// out of the opcode sequence, a bad R_Key or length, or no receive WR (RNR)
// silently drops the whole message, and the responder resynchronizes at the
// next FIRST or ONLY whatever its PSN.
func (q *QP) ucRequest(now time.Time, pkt *bth.Packet) {
	op := pkt.Opcode()
	p := pkt.PSN()
	start := op.Starts()
	if p != q.resp.psn {
		q.e.stats.OutOfSequence.Add(1)
	}
	switch {
	case start:
		q.ucAbandon() // a lost LAST: the partial message is gone
		q.resp.dropping = false
	case q.resp.dropping || p != q.resp.psn || !bth.ValidSequence(q.resp.opcode, op):
		q.resp.psn = p.Add(1)
		q.ucDrop()
		return
	}
	q.resp.psn = p.Add(1)
	end := op.Ends()
	data := pkt.Payload()
	n := uint32(len(data))
	if ((op.IsFirst() || op.IsMiddle()) && n != q.pmtu) || (op.IsLast() && (n == 0 || n > q.pmtu)) ||
		(op.IsOnly() && n > q.pmtu) {
		q.ucDrop()
		return
	}
	switch {
	case op.IsSend():
		if op.NeedsRecvWR() && !q.takeRecvWR() {
			q.ucDrop() // RNR: UC drops the message
			return
		}
		if st := q.scatter(q.resp.wr.SGL, q.resp.off, data); st != cq.Success {
			q.ucFail(now, st)
			return
		}
		q.resp.off += n
		q.resp.opcode = op
		if end {
			wc := cq.WorkCompletion{WRID: q.resp.wr.WRID, Status: cq.Success, Opcode: cq.OpRecv,
				ByteLen: q.resp.off, QPNum: q.qpn, SrcQP: q.attr.DestQPN}
			if op.HasImm() {
				wc.ImmData = pkt.Imm()
				wc.Flags |= cq.FlagWithImm
			}
			q.resp.haveWR = false
			q.resp.off = 0
			q.pushWC(q.init.RecvCQ, &wc, pkt.SE())
		}
	case op.IsWrite():
		if q.attr.AccessFlags&AccessRemoteWrite == 0 {
			q.ucDrop()
			return
		}
		if start {
			reth := pkt.RETH()
			if reth.DMALen > 1<<31 || (op.IsOnly() && n != reth.DMALen) || n > reth.DMALen {
				q.ucDrop()
				return
			}
			q.resp.wrkey, q.resp.wva, q.resp.woff, q.resp.wlen = reth.RKey, reth.VA, 0, reth.DMALen
		} else if rem := q.resp.wlen - q.resp.woff; n > rem || (op.IsLast() && n != rem) {
			q.ucDrop()
			return
		}
		// The R_Key is resolved again for every packet, as on RC (writeTarget).
		dst, ok := q.writeTarget()
		if !ok {
			q.ucDrop()
			return
		}
		if op.NeedsRecvWR() && !q.takeRecvWR() {
			q.ucDrop()
			return
		}
		copy(dst, data)
		q.resp.woff += n
		q.resp.opcode = op
		if end {
			wlen := q.resp.wlen
			q.resp.woff, q.resp.wlen = 0, 0
			if op.HasImm() {
				wc := cq.WorkCompletion{WRID: q.resp.wr.WRID, Status: cq.Success, Opcode: cq.OpRecvRDMAWithImm,
					ByteLen: wlen, ImmData: pkt.Imm(), Flags: cq.FlagWithImm, QPNum: q.qpn, SrcQP: q.attr.DestQPN}
				q.resp.haveWR = false
				q.pushWC(q.init.RecvCQ, &wc, pkt.SE())
			}
		}
	default:
		q.ucDrop()
	}
}
