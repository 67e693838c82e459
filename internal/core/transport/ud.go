package transport

import (
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// udReceive delivers a UD SEND after the Q_Key check (C10-15): the GRH area,
// then the payload. With no receive WR the datagram is dropped, as UD allows.
func (rs *responder) udReceive(pkt *bth.Packet, it *rxItem) {
	q := rs.q
	deth := pkt.DETH()
	data := pkt.Payload()
	if deth.QKey != q.attr.QKey {
		q.e.cfg.Stats.BadQKey.Add(1)
		return
	}
	if uint32(len(data)) > q.pmtu {
		q.e.cfg.Stats.Malformed.Add(1)
		return
	}
	if !rs.takeRecvWR() {
		return
	}
	var grh [bth.GRHLen]byte
	dst := it.local
	if !dst.IsValid() {
		dst = q.e.cfg.LocalAddr
	}
	bth.PutGRH(&grh, bth.GRHFields{Src: it.src.Addr(), Dst: dst, TrafficClass: it.tos, HopLimit: it.ttl, FlowLabel: it.flow},
		len(pkt.Bytes()))
	st := q.scatter(rs.wr.SGL, 0, grh[:])
	if st == verbs.WCSuccess {
		st = q.scatter(rs.wr.SGL, bth.GRHLen, data)
	}
	wc := verbs.WC{WRID: rs.wr.WRID, Status: st, Opcode: verbs.WCRecv, QPNum: q.qpn}
	if st == verbs.WCSuccess {
		wc.ByteLen = uint32(bth.GRHLen + len(data))
		wc.SrcQP = deth.SrcQP
		wc.Flags = verbs.WCGRH
		if pkt.Opcode().HasImm() {
			wc.ImmData = pkt.Imm()
			wc.Flags |= verbs.WCWithImm
		}
	}
	rs.haveWR = false
	q.pushWC(q.init.RecvCQ, &wc, pkt.SE())
}
