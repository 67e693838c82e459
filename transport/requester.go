package transport

import (
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/srq"
)

// requester turns send WQEs into request packets (rxe_req.c). Owner shard only.
type requester struct {
	psn       bth.PSN // PSN of the next packet
	maxPSN    bth.PSN // first PSN never sent: anything before it is a retransmission
	idx       uint64  // absolute index of the WQE being sent
	off       uint32  // bytes of that WQE already sent
	noAck     int     // packets sent since the last AckReq
	needRetry bool    // rewind to the completer's PSN before sending (go-back-N)
}

// nextOpcode picks the opcode of the packet that carries bytes [off,
// off+pmtu) of a length-byte message (rxe next_opcode_rc): FIRST/MIDDLE
// carry exactly pmtu bytes, LAST and ONLY the rest. last reports whether the
// packet ends the message.
func nextOpcode(op WROpcode, off, length, pmtu uint32) (o bth.Opcode, last bool) {
	first := off == 0
	last = length-off <= pmtu
	pick := func(f, m, l, only bth.Opcode) bth.Opcode {
		switch {
		case first && last:
			return only
		case first:
			return f
		case last:
			return l
		}
		return m
	}
	switch op {
	case WRSend:
		return pick(bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast, bth.RCSendOnly), last
	case WRSendWithImm:
		return pick(bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastImm, bth.RCSendOnlyImm), last
	case WRSendWithInv:
		return pick(bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLastInv, bth.RCSendOnlyInv), last
	case WRRDMAWrite:
		return pick(bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLast, bth.RCWriteOnly), last
	case WRRDMAWriteWithImm:
		return pick(bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLastImm, bth.RCWriteOnlyImm), last
	case WRRDMARead:
		return bth.RCReadRequest, true
	case WRAtomicCmpAndSwp:
		return bth.RCCompareSwap, true
	case WRAtomicFetchAndAdd:
		return bth.RCFetchAdd, true
	}
	return 0, true
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

// runRequester sends what the send queue, the window, fences and the
// rd_atomic limit allow.
func (q *QP) runRequester(now time.Time) {
	st := q.attr.State
	if st != QPSRTS && st != QPSSQD {
		return
	}
	if q.req.needRetry {
		if !q.comp.rnrAt.IsZero() {
			return // RNR timer still running
		}
		q.rewind()
	}
	tail := q.sq.loadTail()
	for q.req.idx < tail && q.attr.State != QPSErr {
		w := q.sq.slot(q.req.idx)
		if w.state == wqePosted {
			if st == QPSSQD {
				return // SQD: finish what started, begin nothing new
			}
			if q.typ == QPTypeRC {
				out := q.rdAtomicOutstanding()
				if w.wr.Flags&SendFence != 0 && out > 0 {
					return
				}
				if w.isReadOrAtomic() && out >= max(int(q.attr.MaxRDAtomic), 1) {
					return
				}
			}
			w.firstPSN = q.req.psn
			w.lastPSN = q.req.psn.Add(int(numPackets(w.wr.Opcode, w.length, q.pmtu)) - 1)
			w.state = wqeProcessing
			w.sentAt = now
			q.req.off = 0
			if q.typ == QPTypeUD && w.length > q.pmtu {
				// A UD message above the port MTU (an SGE of length 0 means
				// 2^31 bytes) is not sent. C10-93.1.1 allows faking success,
				// which rxe does, but then the datagram vanishes without a
				// trace; a local length error tells the application.
				q.failWQE(now, w, cq.LocLenErr)
				return
			}
		}
		if q.typ == QPTypeRC && q.req.psn.Diff(q.comp.psn) >= maxUnackedPSNs {
			return
		}
		done, ok := q.sendPacket(now, w)
		if !ok {
			return
		}
		if done {
			w.state = wqePending
			q.req.idx++
			q.req.off = 0
			if q.typ != QPTypeRC {
				q.completeSent(now)
			}
		}
	}
}

// gather returns the n bytes at offset off of w's message: a direct view of
// registered memory when they lie in one SGE, else a copy into q.scratch.
// ok is false on a local protection error.
func (q *QP) gather(w *sendWQE, off, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	if w.wr.Flags&SendInline != 0 {
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
		r := q.e.mem.LocalRegion(sg.LKey)
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
			out = q.scratch[:0]
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
func (q *QP) scatter(sgl []srq.SGE, off uint32, data []byte) cq.Status {
	pos := uint32(0)
	for _, sg := range sgl {
		if len(data) == 0 {
			return cq.Success
		}
		size := sg.Size()
		if off >= pos+size {
			pos += size
			continue
		}
		start := off - pos
		take := min(size-start, uint32(len(data)))
		r := q.e.mem.LocalRegion(sg.LKey)
		if r == nil || r.PD != q.init.PD || r.Access&AccessLocalWrite == 0 {
			return cq.LocProtErr
		}
		b := r.slice(sg.Addr+uint64(start), uint64(take))
		if b == nil {
			return cq.LocProtErr
		}
		copy(b, data[:take])
		data = data[take:]
		off += take
		pos += size
	}
	if len(data) > 0 {
		return cq.LocLenErr
	}
	return cq.Success
}

func sglSize(sgl []srq.SGE) uint64 {
	var n uint64
	for _, s := range sgl {
		n += uint64(s.Size())
	}
	return n
}

// sendPacket builds and queues the next packet of w at req.psn. done reports
// that the message is fully sent; ok is false when w failed locally.
func (q *QP) sendPacket(now time.Time, w *sendWQE) (done, ok bool) {
	f := bth.Fields{PKey: 0xFFFF, PSN: q.req.psn, DestQP: q.attr.DestQPN}
	dst := q.attr.AV.DGID
	var payload []byte
	var class OpClass
	var n uint32
	consumed := 1
	switch q.typ {
	case QPTypeUD:
		f.Opcode = bth.UDSendOnly
		if w.wr.Opcode == WRSendWithImm {
			f.Opcode = bth.UDSendOnlyImm
			f.Imm = w.wr.Imm
		}
		qkey := w.wr.RemoteQKey
		if qkey&0x80000000 != 0 {
			qkey = q.attr.QKey // C10-15: high bit set takes the QP's Q_Key
		}
		f.DETH = bth.DETH{QKey: qkey, SrcQP: q.qpn}
		f.DestQP = w.wr.RemoteQPN
		f.SE = w.wr.Flags&SendSolicited != 0
		dst = w.av.DGID
		n = w.length
		done = true
		class = ClassUD
	default:
		var last bool
		f.Opcode, last = nextOpcode(w.wr.Opcode, q.req.off, w.length, q.pmtu)
		done = last
		if q.typ == QPTypeUC {
			f.Opcode = ucOpcode(f.Opcode)
		}
		switch w.wr.Opcode {
		case WRRDMARead:
			rem := w.length - q.req.off
			f.RETH = bth.RETH{VA: w.wr.RemoteAddr + uint64(q.req.off), RKey: w.wr.RKey, DMALen: rem}
			consumed = int(w.lastPSN.Diff(q.req.psn)) + 1
			class = ClassReadRequest
		case WRAtomicCmpAndSwp:
			f.Atomic = bth.AtomicETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.Swap, Compare: w.wr.CompareAdd}
			class = ClassAtomic
		case WRAtomicFetchAndAdd:
			f.Atomic = bth.AtomicETH{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
			class = ClassAtomic
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
			isWrite := w.wr.Opcode == WRRDMAWrite || w.wr.Opcode == WRRDMAWriteWithImm
			if last && w.wr.Flags&SendSolicited != 0 && (!isWrite || w.wr.Opcode == WRRDMAWriteWithImm) {
				f.SE = true
			}
			class = ClassSend
			if isWrite {
				class = ClassWrite
			}
		}
		q.req.noAck++
		if q.typ == QPTypeRC && (last || q.req.noAck >= maxPktsPerAck) {
			f.AckReq = true
			q.req.noAck = 0
		}
	}
	if n > 0 {
		var good bool
		payload, good = q.gather(w, q.req.off, n)
		if !good {
			q.failWQE(now, w, cq.LocProtErr)
			return false, false
		}
	}
	buf := q.sh.txBuf()
	pkt := bth.Append(buf[:0], &f, payload)
	q.sh.xmit(q, buf, pkt, dst, class)
	q.cnt.txPackets.Add(1)
	if q.req.psn.Before(q.req.maxPSN) {
		q.e.stats.Retransmits.Add(1)
		q.cnt.retransmits.Add(1)
	}
	q.req.psn = q.req.psn.Add(consumed)
	if q.req.psn.After(q.req.maxPSN) || q.typ != QPTypeRC {
		q.req.maxPSN = q.req.psn
	}
	q.req.off += n
	if f.AckReq && q.typ == QPTypeRC && q.rto > 0 && q.comp.rtoAt.IsZero() {
		q.comp.rtoAt = now.Add(q.rto)
	}
	return done, true
}
