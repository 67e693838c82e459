package transport

import (
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/cq"
)

// udReceive delivers a UD SEND: Q_Key check (C10-15), the GRH area, then
// the payload, into the next receive WR. With no WR posted the datagram is
// dropped, as UD allows.
func (q *QP) udReceive(pkt *bth.Packet, it *rxItem) {
	deth := pkt.DETH()
	data := pkt.Payload()
	if deth.QKey != q.attr.QKey {
		q.e.stats.BadQKey.Add(1)
		return
	}
	if uint32(len(data)) > q.pmtu {
		q.e.stats.Malformed.Add(1)
		return
	}
	if !q.takeRecvWR() {
		return
	}
	var grh [bth.GRHLen]byte
	dst := it.local
	if !dst.IsValid() {
		dst = q.e.localAddr
	}
	bth.PutGRH(&grh, bth.GRHFields{Src: it.src.Addr(), Dst: dst, TrafficClass: it.tos, HopLimit: it.ttl, FlowLabel: it.flow},
		len(pkt.Bytes()))
	st := q.scatter(q.resp.wr.SGL, 0, grh[:])
	if st == cq.Success {
		st = q.scatter(q.resp.wr.SGL, bth.GRHLen, data)
	}
	wc := cq.WorkCompletion{WRID: q.resp.wr.WRID, Status: st, Opcode: cq.OpRecv, QPNum: q.qpn}
	if st == cq.Success {
		wc.ByteLen = uint32(bth.GRHLen + len(data))
		wc.SrcQP = deth.SrcQP
		wc.Flags = cq.FlagGRH
		if pkt.Opcode().HasImm() {
			wc.ImmData = pkt.Imm()
			wc.Flags |= cq.FlagWithImm
		}
	}
	q.resp.haveWR = false
	q.pushWC(q.init.RecvCQ, &wc, pkt.SE())
}
