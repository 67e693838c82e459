package transport

import (
	"net/netip"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/core/verbs"
)

// qpCC is a QP's congestion control (package dcqcn): the notification point
// answering CE marks with CNPs, and the reaction point whose rate paces the
// QP's budgeted packets. nil when the device's is off.
type qpCC struct {
	np     dcqcn.NP
	rp     dcqcn.RP
	pacer  dcqcn.Pacer
	rate   uint64    // the pacer's rate, bit/s
	cuts   uint64    // rp's cuts already counted in Stats.RateCuts
	wakeAt time.Time // the pacer holds the QP until then (zero: not held)
}

// initCC gives the QP fresh congestion state: on creation and on RESET.
func (q *QP) initCC() {
	if !q.e.cfg.CC.Enabled {
		return
	}
	q.cc = new(qpCC)
	q.cc.rp.Init(&q.e.cfg.CC.Params, q.e.cfg.CC.LineRate)
}

// maxPacket bounds the QP's packets: a path MTU of payload and the largest
// headers.
func (q *QP) maxPacket() int { return int(q.pmtu) + 64 }

// syncCC runs the reaction point's events due by now and sets the pacer to its
// rate (the line rate while no CNP limits the QP).
func (q *QP) syncCC(now time.Time) {
	c := q.cc
	c.rp.Advance(now)
	if n := c.rp.Cuts(); n != c.cuts {
		q.e.cfg.Stats.RateCuts.Add(n - c.cuts)
		c.cuts = n
	}
	if r := c.rp.Rate(); r != c.rate {
		c.rate = r
		c.pacer.SetRate(now, r, q.e.cfg.CC.Burst(r, q.maxPacket()))
	}
}

// paceLimit is how many of limit budgeted packets the pacer lets the QP emit
// now: none while it holds the QP (its timer wakes the QP at wakeAt), else
// enough to spend the credit (the last may overdraw).
func (q *QP) paceLimit(now time.Time, limit int) int {
	c := q.cc
	if c == nil || limit <= 0 {
		return limit
	}
	q.syncCC(now)
	credit, next := c.pacer.Credit(now)
	if credit == 0 {
		c.wakeAt = next
		return 0
	}
	c.wakeAt = time.Time{}
	pkt := q.maxPacket()
	if credit >= limit*pkt {
		return limit
	}
	return (credit + pkt - 1) / pkt
}

// chargeCC charges the pacer with the budgeted packets (not ACKs) the QP
// emitted in its turn, out[start:], and reports whether the pacer holds it.
func (q *QP) chargeCC(now time.Time, start int) (held bool) {
	c := q.cc
	if c == nil {
		return false
	}
	n := 0
	for _, p := range q.sh.out[start:] {
		if p.q == q && !bth.Opcode(p.buf[0]).IsAck() {
			n += p.n
		}
	}
	if n > 0 {
		c.pacer.Sent(n)
		c.rp.OnSent(now, n)
	}
	if credit, next := c.pacer.Credit(now); credit == 0 {
		c.wakeAt = next
		return true
	}
	return false
}

// onCNP is a CNP for this QP: a rate cut, or only counted with CC off.
func (q *QP) onCNP(now time.Time) {
	q.e.cfg.Stats.CNPsRcvd.Add(1)
	if q.cc == nil {
		q.e.cfg.Stats.CNPsIgnored.Add(1)
		return
	}
	q.cc.rp.OnCNP(now)
	q.syncCC(now)
}

// onCE answers a CE-marked packet that passed the QP's checks with a CNP to
// its sender, at most one per min_time_between_cnps; a UD sender is the
// packet's source and DETH SrcQP.
func (q *QP) onCE(now time.Time, pkt *bth.Packet, src netip.Addr) {
	q.e.cfg.Stats.ECNMarked.Add(1)
	if q.cc == nil || !q.cc.np.OnCE(now, q.e.cfg.CC.Params.CNPInterval()) {
		return
	}
	f := bth.Fields{Opcode: bth.CNP, BECN: true, PKey: 0xFFFF, DestQP: q.attr.DestQPN}
	av := q.attr.AV // its path's hop limit and flow label; packetTOS sets cnp_dscp
	if q.typ == verbs.QPTypeUD {
		f.DestQP = pkt.DETH().SrcQP
		av = verbs.AddressVector{DGID: src}
	}
	q.emit(&f, nil, &av)
	q.e.cfg.Stats.CNPsSent.Add(1)
}

// packetTOS is the TOS (traffic class) a packet with opcode op leaves with,
// from its QP's or AH's traffic class: as given with CC off (rxe); on, data
// gets its DSCP with ECT(0), ACKs and NAKs its DSCP with Not-ECT (no switch
// may mark feedback for the reverse direction), CNPs cnp_dscp, Not-ECT.
func (e *Engine) packetTOS(op bth.Opcode, tclass uint8) uint8 {
	switch {
	case !e.cfg.CC.Enabled:
		return tclass
	case op == bth.CNP:
		return e.cfg.CC.Params.CNPTOS()
	case op.IsAck():
		return dcqcn.DataTOS(tclass, false) &^ dcqcn.CE
	}
	return dcqcn.DataTOS(tclass, true)
}

// ccDeadline is when the pacer lets a held QP go, or zero.
func (q *QP) ccDeadline() time.Time {
	if q.cc == nil {
		return time.Time{}
	}
	return q.cc.wakeAt
}
