package transport

import (
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
)

// requester turns send WQEs into request packets (rxe_req.c); it moves the
// send window's next end. Owner shard only.
type requester struct {
	q     *QP
	noAck int // packets sent since the last AckReq
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

// nextOpcode picks the opcode of the packet carrying bytes [off, off+pmtu) of
// w's message (rxe next_opcode): FIRST and MIDDLE carry exactly pmtu bytes;
// READ and atomic requests are one packet. last: the packet ends the message.
func (req *requester) nextOpcode(w *sendWQE, off uint32) (o bth.Opcode, last bool) {
	q := req.q
	first, last := off == 0, w.length-off <= q.pmtu
	if w.isReadOrAtomic() || q.typ == verbs.QPTypeUD {
		first, last = true, true
	}
	o, _ = bth.MessageOpcode(transports[q.typ], wireOps[w.wr.Opcode], first, last)
	return o, last
}

// rdAtomicOutstanding counts READ/atomic WQEs sent and not yet completed, up
// to limit: the window can hold a whole send queue, and the callers only ask
// whether the count reached a bound.
func (req *requester) rdAtomicOutstanding(limit int) int {
	q := req.q
	n := 0
	for i := q.win.head; i < q.win.next && n < limit; i++ {
		if q.sq.slot(i).isReadOrAtomic() {
			n++
		}
	}
	return n
}

// rewind is req_retry: resend from the oldest unacknowledged PSN, regenerating
// the packets from the WQEs (nothing sent is kept).
func (req *requester) rewind() {
	q := req.q
	tail := q.sq.loadTail()
	inHead := false
	for i := q.win.head; i < tail; i++ {
		w := q.sq.slot(i)
		if w.state == wqePosted {
			break
		}
		if w.isLocalOp() {
			continue // executed once, never again
		}
		if i == q.win.head && q.win.ackedInside(w.firstPSN, w.lastPSN) {
			w.state = wqeProcessing
			inHead = true
			continue
		}
		w.state = wqePosted
	}
	var first bth.PSN
	if inHead {
		first = q.sq.slot(q.win.head).firstPSN
	}
	q.win.goBack(inHead, first, q.pmtu)
	req.noAck = 0
}

// run emits up to limit packets, as the send queue, window, fences,
// max_rd_atomic and a probe allow; more: it stopped at limit.
func (req *requester) run(now time.Time, limit int) (sent int, more bool) {
	q := req.q
	st := q.attr.State
	if st != verbs.QPSRTS && st != verbs.QPSSQD {
		return 0, false
	}
	if q.win.needRetry {
		if q.comp.rnrWaiting() {
			return 0, false
		}
		req.rewind()
	}
	held := false
	if h := req.holdAt(limit); h < limit {
		limit, held = h, true
	}
	tail := q.sq.loadTail()
	for q.win.next < tail && q.attr.State != verbs.QPSErr {
		w := q.sq.slot(q.win.next)
		if w.isLocalOp() {
			idx := q.win.next
			if !req.runLocalOp(now, w) {
				return sent, false
			}
			if q.win.next == idx { // not moved on by the completion
				q.win.next++
			}
			continue
		}
		if w.state == wqePosted && !req.startWQE(now, w) {
			return sent, false
		}
		if q.typ == verbs.QPTypeRC && q.win.full() {
			return sent, false // window full, or the timeout probe is out
		}
		if sent == limit {
			return sent, !held // a held tail waits for an ACK's turn (holdAt)
		}
		res := req.sendPacket(now, w)
		if res == pktFailed {
			return sent, false
		}
		sent++
		if res == pktLast {
			w.state = wqePending
			q.win.nextWQE()
			if q.typ != verbs.QPTypeRC {
				q.comp.completeSent(now)
			}
		}
	}
	return sent, false
}

// Holding a short tail. Every GSO datagram costs the kernel a pass through its
// send path, the loopback or driver, and the receiver's socket, whatever it
// carries: on a 2-core host a lone 4112-byte datagram cost as much CPU as 14
// more segments in a full one (BenchmarkRawUDPGather). A stream that posts 16
// one-packet SENDs at a time sent them as a datagram of 15 and one of 1. So,
// as Nagle's rule holds a short TCP segment while earlier data is
// unacknowledged, an RC turn that would empty the send queue sends whole
// datagrams only while two datagrams' worth is in flight: the rest, fewer
// packets than a datagram holds, joins the next post, or goes in the turn an
// ACK gives the QP once less is in flight. Two, not one: the ACK of the first
// datagram then returns while the second is still out, so the link does not
// idle (with one, 64-byte streams lost 6 %). It waits for at most the ACKs of
// what is in flight (every packet it applies to asks for one), and never when
// nothing is: a request whose answer the program waits for goes at once.

// holdAt returns how many of up to limit packets the turn sends: limit, or,
// when the send queue holds fewer, the whole datagrams of what it holds. It
// applies to RC QPs in RTS with GSO, sending new one-packet messages of one
// datagram size (SEND, WRITE, with immediate or invalidate), none partly sent,
// with two datagrams' worth or more in flight and the window open for all.
func (req *requester) holdAt(limit int) int {
	q := req.q
	if q.typ != verbs.QPTypeRC || q.attr.State != verbs.QPSRTS || !q.e.offloads.GSO ||
		q.win.needRetry || q.win.probing || q.win.nextOff != 0 {
		return limit
	}
	tail := q.sq.loadTail()
	avail, size := 0, 0
	for i := q.win.next; i < tail; i++ {
		w := q.sq.slot(i)
		if w.isLocalOp() || w.isReadOrAtomic() || w.length > q.pmtu {
			return limit
		}
		o, _ := req.nextOpcode(w, 0)
		n := o.HeaderLen() + int(w.length) + bth.ICRCLen
		if size != 0 && n != size {
			return limit
		}
		size = n
		if avail++; avail >= limit {
			return limit
		}
	}
	g := link.GSOSegments(size)
	inFlight := int(q.win.nextPSN.Diff(q.win.headPSN))
	if avail == 0 || inFlight < 2*g || inFlight+avail > maxUnackedPSNs {
		return limit
	}
	return avail - avail%g
}

// startWQE starts w, a posted WQE, unless in SQD, held back by a fence or
// max_rd_atomic, or a UD message above the port MTU (which fails).
func (req *requester) startWQE(now time.Time, w *sendWQE) bool {
	q := req.q
	if q.attr.State == verbs.QPSSQD {
		return false // SQD: finish what started, begin nothing new
	}
	// Only a fenced WQE or a READ/atomic waits on the READs/atomics in
	// flight; a SEND or WRITE does not look at them.
	if q.typ == verbs.QPTypeRC {
		if w.wr.Flags&verbs.SendFence != 0 && req.rdAtomicOutstanding(1) > 0 {
			return false
		}
		if lim := max(int(q.attr.MaxRDAtomic), 1); w.isReadOrAtomic() && req.rdAtomicOutstanding(lim) >= lim {
			return false
		}
	}
	w.firstPSN = q.win.nextPSN
	w.lastPSN = q.win.nextPSN.Add(int(numPackets(w.wr.Opcode, w.length, q.pmtu)) - 1)
	w.state = wqeProcessing
	w.sentAt = now
	q.win.nextOff = 0
	if q.typ == verbs.QPTypeUD && w.length > q.pmtu {
		// Not sent (an SGE of length 0 means 2^31 bytes). C10-93.1.1 allows
		// faking success, as rxe does, but the datagram would vanish without a
		// trace.
		q.comp.failWQE(now, w, verbs.WCLocLenErr)
		return false
	}
	return true
}

// gather returns n bytes at offset off of w's message: a view of registered
// memory within one SGE, else a copy in the shard's scratch buffer (valid
// until its next gather); false on a local protection error.
func (req *requester) gather(w *sendWQE, off, n uint32) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	if w.wr.Flags&verbs.SendInline != 0 {
		return w.inline[off : off+n], true
	}
	q := req.q
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

// pktResult is what sending one packet of a WQE came to.
type pktResult uint8

const (
	pktMore   pktResult = iota // sent; the message has more packets
	pktLast                    // sent the message's last packet
	pktFailed                  // the WQE failed locally: nothing sent
)

// sendPacket emits w's next packet, at the window's next PSN.
func (req *requester) sendPacket(now time.Time, w *sendWQE) pktResult {
	q := req.q
	var p outPacket
	if q.typ == verbs.QPTypeUD {
		p = req.udPacket(w)
	} else {
		p = req.connectedPacket(w)
	}
	payload := p.payload
	if p.n > 0 {
		var good bool
		if payload, good = req.gather(w, q.win.nextOff, p.n); !good {
			q.comp.failWQE(now, w, verbs.WCLocProtErr)
			return pktFailed
		}
	}
	q.emit(&p.f, payload, p.av)
	if q.win.sent(p.consumed, p.n, q.typ == verbs.QPTypeRC) {
		q.e.cfg.Stats.Retransmits.Add(1)
		q.cnt.retransmits.Add(1)
	}
	if p.f.AckReq && q.typ == verbs.QPTypeRC {
		q.comp.armRTO(now)
	}
	if p.last {
		return pktLast
	}
	return pktMore
}

// outPacket is a request packet before its payload is gathered: n bytes at the
// window's next offset, or payload as it is.
type outPacket struct {
	f        bth.Fields
	av       *verbs.AddressVector
	payload  []byte
	n        uint32
	consumed int // PSNs the packet takes
	last     bool
}

func (req *requester) udPacket(w *sendWQE) outPacket {
	q := req.q
	f := bth.Fields{PKey: 0xFFFF, PSN: q.win.nextPSN, DestQP: w.wr.RemoteQPN, Imm: w.wr.Imm,
		SE: w.wr.Flags&verbs.SendSolicited != 0}
	f.Opcode, _ = req.nextOpcode(w, 0)
	qkey := w.wr.RemoteQKey
	if qkey&0x80000000 != 0 {
		qkey = q.attr.QKey // C10-15: high bit set takes the QP's Q_Key
	}
	f.DETH = bth.DETH{QKey: qkey, SrcQP: q.qpn}
	return outPacket{f: f, av: &w.av, n: w.length, consumed: 1, last: true}
}

// connectedPacket is an RC or UC WQE's next packet, with AckReq on an RC
// message's last packet, every maxPktsPerAck packets and on a probe.
func (req *requester) connectedPacket(w *sendWQE) outPacket {
	q := req.q
	p := outPacket{f: bth.Fields{PKey: 0xFFFF, PSN: q.win.nextPSN, DestQP: q.attr.DestQPN}, av: &q.attr.AV, consumed: 1}
	f, off := &p.f, q.win.nextOff
	f.Opcode, p.last = req.nextOpcode(w, off)
	wr := &w.wr
	switch wr.Opcode {
	case verbs.WRRDMARead:
		f.RETH = bth.RETH{VA: wr.RemoteAddr + uint64(off), RKey: wr.RKey, DMALen: w.length - off}
		p.consumed = int(w.lastPSN.Diff(q.win.nextPSN)) + 1
	case verbs.WRAtomicCmpAndSwp:
		f.Atomic = bth.AtomicETH{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.Swap, Compare: wr.CompareAdd}
	case verbs.WRAtomicFetchAndAdd:
		f.Atomic = bth.AtomicETH{VA: wr.RemoteAddr, RKey: wr.RKey, SwapAdd: wr.CompareAdd}
	case verbs.WRFlush:
		f.FETH = bth.FETH{PlacementType: wr.Flush.Type, Selectivity: wr.Flush.Level}
		f.RETH = bth.RETH{VA: wr.RemoteAddr, RKey: wr.RKey, DMALen: wr.Flush.Length}
	case verbs.WRAtomicWrite:
		f.RETH = bth.RETH{VA: wr.RemoteAddr, RKey: wr.RKey, DMALen: 8}
		p.payload = w.value[:]
	default:
		p.n = min(w.length-off, q.pmtu)
		if f.Opcode.HasRETH() {
			f.RETH = bth.RETH{VA: wr.RemoteAddr, RKey: wr.RKey, DMALen: w.length}
		}
		if f.Opcode.HasImm() {
			f.Imm = wr.Imm
		}
		if f.Opcode.HasIETH() {
			f.IETH = wr.InvRKey
		}
		// SE goes on the packet that completes a receive WR.
		f.SE = p.last && wr.Flags&verbs.SendSolicited != 0 && (f.Opcode.IsSend() || f.Opcode.HasImm())
	}
	req.noAck++
	if q.typ == verbs.QPTypeRC && (p.last || req.noAck >= maxPktsPerAck || q.win.probing) {
		f.AckReq = true
		req.noAck = 0
	}
	return p
}
