package transport

import (
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// requester turns send WQEs into request packets (rxe_req.c). Owner shard only.
type requester struct {
	psn       bth.PSN // PSN of the next packet
	maxPSN    bth.PSN // first PSN never sent: anything before it is a retransmission
	idx       uint64  // absolute index of the WQE being sent
	off       uint32  // bytes of that WQE already sent
	noAck     int     // packets sent since the last AckReq
	needRetry bool    // rewind to the completer's PSN before sending (go-back-N)
	// probing: the retransmission timer expired and nothing was
	// acknowledged since, so only the oldest unacknowledged packet is sent
	// (with AckReq), not the window; an answer ends it (see retry.go).
	probing bool
}

// wireOps is the bth operation each send WR opcode is carried by.
var wireOps = [...]bth.Op{
	verbs.WRSend:              bth.OpSend,
	verbs.WRSendWithImm:       bth.OpSendImm,
	verbs.WRSendWithInv:       bth.OpSendInv,
	verbs.WRRDMAWrite:         bth.OpWrite,
	verbs.WRRDMAWriteWithImm:  bth.OpWriteImm,
	verbs.WRRDMARead:          bth.OpRead,
	verbs.WRAtomicCmpAndSwp:   bth.OpCompareSwap,
	verbs.WRAtomicFetchAndAdd: bth.OpFetchAdd,
	verbs.WRLocalInv:          0xFF, // not carried on the wire
	verbs.WRBindMW:            0xFF,
	verbs.WRFlush:             bth.OpFlush,
	verbs.WRAtomicWrite:       bth.OpAtomicWrite,
}

// transports is the BTH transport of each QP type.
var transports = [...]bth.Transport{verbs.QPTypeRC: bth.TransportRC, verbs.QPTypeUC: bth.TransportUC, verbs.QPTypeUD: bth.TransportUD}

// nextOpcode picks the opcode of the packet that carries bytes [off,
// off+pmtu) of w's message from the opcode table (rxe next_opcode):
// FIRST/MIDDLE carry exactly pmtu bytes, LAST and ONLY the rest; READ and
// atomic requests are one packet. last reports whether the packet ends the
// message.
func (q *QP) nextOpcode(w *sendWQE, off uint32) (o bth.Opcode, last bool) {
	first, last := off == 0, w.length-off <= q.pmtu
	if w.isReadOrAtomic() || q.typ == verbs.QPTypeUD {
		first, last = true, true
	}
	o, _ = bth.MessageOpcode(transports[q.typ], wireOps[w.wr.Opcode], first, last)
	return o, last
}

// rdAtomicOutstanding counts READ/atomic WQEs sent and not yet completed.
func (q *QP) rdAtomicOutstanding() int {
	n := 0
	for i := q.comp.idx; i < q.req.idx; i++ {
		if q.sq.slot(i).isReadOrAtomic() {
			n++
		}
	}
	return n
}

// rewind is req_retry: go back to the oldest unacknowledged PSN and resend
// from there, regenerating packets from the WQEs (nothing sent is kept).
func (q *QP) rewind() {
	q.req.needRetry = false
	tail := q.sq.loadTail()
	for i := q.comp.idx; i < tail; i++ {
		w := q.sq.slot(i)
		if w.state == wqePosted {
			break
		}
		if w.isLocalOp() {
			continue // executed once, never again
		}
		if i == q.comp.idx && q.comp.psn.After(w.firstPSN) && !q.comp.psn.After(w.lastPSN) {
			w.state = wqeProcessing
			continue
		}
		w.state = wqePosted
	}
	q.req.idx = q.comp.idx
	q.req.psn = q.comp.psn
	q.req.off = 0
	q.req.noAck = 0
	if q.req.idx < tail {
		w := q.sq.slot(q.req.idx)
		if w.state == wqeProcessing {
			q.req.off = uint32(q.req.psn.Diff(w.firstPSN)) * q.pmtu
		}
	}
}

// runRequester emits what the send queue, the window, fences, the
// rd_atomic limit and a timeout probe allow, at most limit packets. It
// returns how many it emitted, and more when it stopped at limit with
// packets still to send.
func (q *QP) runRequester(now time.Time, limit int) (sent int, more bool) {
	st := q.attr.State
	if st != verbs.QPSRTS && st != verbs.QPSSQD {
		return 0, false
	}
	if q.req.needRetry {
		if !q.comp.rnrAt.IsZero() {
			return 0, false // RNR timer still running
		}
		q.rewind()
	}
	tail := q.sq.loadTail()
	for q.req.idx < tail && q.attr.State != verbs.QPSErr {
		w := q.sq.slot(q.req.idx)
		if w.isLocalOp() {
			idx := q.req.idx
			if !q.runLocalOp(now, w) {
				return sent, false
			}
			if q.req.idx == idx { // not moved on by the completion
				q.req.idx++
			}
			continue
		}
		if w.state == wqePosted && !q.startWQE(now, w) {
			return sent, false
		}
		if q.typ == verbs.QPTypeRC && (q.req.psn.Diff(q.comp.psn) >= maxUnackedPSNs || q.req.probing && q.req.psn != q.comp.psn) {
			return sent, false // window full, or the timeout probe is out
		}
		if sent == limit {
			return sent, true
		}
		done, ok := q.sendPacket(now, w)
		if !ok {
			return sent, false
		}
		sent++
		if done {
			w.state = wqePending
			q.req.idx++
			q.req.off = 0
			if q.typ != verbs.QPTypeRC {
				q.completeSent(now)
			}
		}
	}
	return sent, false
}

// startWQE begins sending w, a posted WQE, and reports whether the requester
// may: not in SQD, not while a fence or max_rd_atomic holds it back, and not
// a UD message above the port MTU (which fails).
func (q *QP) startWQE(now time.Time, w *sendWQE) bool {
	if q.attr.State == verbs.QPSSQD {
		return false // SQD: finish what started, begin nothing new
	}
	if q.typ == verbs.QPTypeRC {
		out := q.rdAtomicOutstanding()
		if w.wr.Flags&verbs.SendFence != 0 && out > 0 {
			return false
		}
		if w.isReadOrAtomic() && out >= max(int(q.attr.MaxRDAtomic), 1) {
			return false
		}
	}
	w.firstPSN = q.req.psn
	w.lastPSN = q.req.psn.Add(int(numPackets(w.wr.Opcode, w.length, q.pmtu)) - 1)
	w.state = wqeProcessing
	w.sentAt = now
	q.req.off = 0
	if q.typ == verbs.QPTypeUD && w.length > q.pmtu {
		// A UD message above the port MTU (an SGE of length 0 means
		// 2^31 bytes) is not sent. C10-93.1.1 allows faking success,
		// which rxe does, but then the datagram vanishes without a
		// trace; a local length error tells the application.
		q.failWQE(now, w, verbs.WCLocLenErr)
		return false
	}
	return true
}

// gather returns the n bytes at offset off of w's message: a direct view of
// registered memory when they lie in one SGE, else a copy into the shard's
// scratch buffer, valid until the next gather on the shard.
// ok is false on a local protection error.
func (q *QP) gather(w *sendWQE, off, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	if w.wr.Flags&verbs.SendInline != 0 {
		return w.inline[off : off+n], true
	}
	var out []byte
	pos := uint32(0)
	for _, sg := range w.wr.SGL {
		size := sg.Size()
		if off >= pos+size {
			pos += size
			continue
		}
		start := off - pos
		take := min(size-start, n)
		r := q.e.cfg.Memory.LocalRegion(sg.LKey)
		if r == nil || r.PD != q.init.PD {
			return nil, false
		}
		b := r.slice(sg.Addr+uint64(start), uint64(take))
		if b == nil {
			return nil, false
		}
		if out == nil && take == n {
			return b, true
		}
		if out == nil {
			out = q.sh.scratch[:0]
		}
		out = append(out, b...)
		n -= take
		off += take
		pos += size
		if n == 0 {
			return out, true
		}
	}
	return nil, false
}

// scatter copies data into sgl at byte offset off, checking each SGE's lkey,
// PD and LOCAL_WRITE (the responder and completer receive paths). It returns
// LocLenErr when the SGEs are too short and LocProtErr on a bad key.
func (q *QP) scatter(sgl []verbs.SGE, off uint32, data []byte) verbs.WCStatus {
	pos := uint32(0)
	for _, sg := range sgl {
		if len(data) == 0 {
			return verbs.WCSuccess
		}
		size := sg.Size()
		if off >= pos+size {
			pos += size
			continue
		}
		start := off - pos
		take := min(size-start, uint32(len(data)))
		r := q.e.cfg.Memory.LocalRegion(sg.LKey)
		if r == nil || r.PD != q.init.PD || r.Access&verbs.AccessLocalWrite == 0 {
			return verbs.WCLocProtErr
		}
		b := r.slice(sg.Addr+uint64(start), uint64(take))
		if b == nil {
			return verbs.WCLocProtErr
		}
		copy(b, data[:take])
		data = data[take:]
		off += take
		pos += size
	}
	if len(data) > 0 {
		return verbs.WCLocLenErr
	}
	return verbs.WCSuccess
}

// sendPacket builds and queues the next packet of w at req.psn. done reports
// that the message is fully sent; ok is false when w failed locally.
func (q *QP) sendPacket(now time.Time, w *sendWQE) (done, ok bool) {
	f := bth.Fields{PKey: 0xFFFF, PSN: q.req.psn, DestQP: q.attr.DestQPN}
	av := &q.attr.AV
	var payload []byte
	var n uint32
	consumed := 1
	switch q.typ {
	case verbs.QPTypeUD:
		f.Opcode, _ = q.nextOpcode(w, 0)
		f.Imm = w.wr.Imm
		qkey := w.wr.RemoteQKey
		if qkey&0x80000000 != 0 {
			qkey = q.attr.QKey // C10-15: high bit set takes the QP's Q_Key
		}
		f.DETH = bth.DETH{QKey: qkey, SrcQP: q.qpn}
		f.DestQP = w.wr.RemoteQPN
		f.SE = w.wr.Flags&verbs.SendSolicited != 0
		av = &w.av
		n = w.length
		done = true
	default:
		var last bool
		f.Opcode, last = q.nextOpcode(w, q.req.off)
		done = last
		switch w.wr.Opcode {
		case verbs.WRRDMARead:
			rem := w.length - q.req.off
			f.RETH = bth.RETH{VA: w.wr.RemoteAddr + uint64(q.req.off), RKey: w.wr.RKey, DMALen: rem}
			consumed = int(w.lastPSN.Diff(q.req.psn)) + 1
		case verbs.WRAtomicCmpAndSwp:
			f.Atomic = bth.AtomicETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.Swap, Compare: w.wr.CompareAdd}
		case verbs.WRAtomicFetchAndAdd:
			f.Atomic = bth.AtomicETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
		case verbs.WRFlush:
			f.FETH = bth.FETH{PlacementType: w.wr.Flush.Type, Selectivity: w.wr.Flush.Level}
			f.RETH = bth.RETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: w.wr.Flush.Length}
		case verbs.WRAtomicWrite:
			f.RETH = bth.RETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: 8}
			payload = w.value[:]
		default:
			n = min(w.length-q.req.off, q.pmtu)
			if f.Opcode.HasRETH() {
				f.RETH = bth.RETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: w.length}
			}
			if f.Opcode.HasImm() {
				f.Imm = w.wr.Imm
			}
			if f.Opcode.HasIETH() {
				f.IETH = w.wr.InvRKey
			}
			// SE goes on the last packet of a SEND or WRITE with immediate:
			// the packets that complete a receive WR.
			if last && w.wr.Flags&verbs.SendSolicited != 0 && (f.Opcode.IsSend() || f.Opcode.HasImm()) {
				f.SE = true
			}
		}
		q.req.noAck++
		if q.typ == verbs.QPTypeRC && (last || q.req.noAck >= maxPktsPerAck || q.req.probing) {
			f.AckReq = true // a probe asks for the ACK that ends probing
			q.req.noAck = 0
		}
	}
	if n > 0 {
		var good bool
		payload, good = q.gather(w, q.req.off, n)
		if !good {
			q.failWQE(now, w, verbs.WCLocProtErr)
			return false, false
		}
	}
	q.emit(&f, payload, av)
	if q.req.psn.Before(q.req.maxPSN) {
		q.e.cfg.Stats.Retransmits.Add(1)
		q.cnt.retransmits.Add(1)
	}
	q.req.psn = q.req.psn.Add(consumed)
	if q.req.psn.After(q.req.maxPSN) || q.typ != verbs.QPTypeRC {
		q.req.maxPSN = q.req.psn
	}
	q.req.off += n
	if f.AckReq && q.typ == verbs.QPTypeRC && q.rto > 0 && q.comp.rtoAt.IsZero() {
		q.comp.rtoAt = now.Add(q.rtoInterval())
	}
	return done, true
}
