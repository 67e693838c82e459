package main

/*
#include "goroce_verbs.h"
*/
import "C"

import (
	"net/netip"
	"sync"
	"unsafe"

	"github.com/goroce/goroce/roce"
)

// qp is an ibv_qp: the roce QP and the scratch its posts convert C WR lists
// into, reused from post to post so the data path allocates nothing.
type qp struct {
	ctx     *devContext
	pd      *pd
	qp      *roce.QP
	element C.uintptr_t

	sendMu sync.Mutex // guards send
	send   sendScratch
	recvMu sync.Mutex // guards recv
	recv   recvScratch
}

// cqOf is the cq behind a struct ibv_cq pointer, nil for none or a foreign one.
func cqOf(p *C.struct_ibv_cq) *cq {
	if p == nil {
		return nil
	}
	return object[*cq]((*C.struct_gr_cq)(unsafe.Pointer(p)).h)
}

// srqOf is the srq behind a struct ibv_srq pointer.
func srqOf(p *C.struct_ibv_srq) *srq {
	if p == nil {
		return nil
	}
	return object[*srq]((*C.struct_gr_srq)(unsafe.Pointer(p)).h)
}

// gr_create_qp is ibv_create_qp: a QP in RESET on the CQs and SRQ named in a,
// whose cap it updates with the actual sizes. element is the C struct async
// events name.
//
//export gr_create_qp
func gr_create_qp(pdH C.uintptr_t, a *C.struct_ibv_qp_init_attr, element C.uintptr_t, h *C.uintptr_t, qpn *C.uint32_t) C.int {
	p := object[*pd](pdH)
	if p == nil {
		return C.EINVAL
	}
	switch a.qp_type {
	case C.IBV_QPT_RC, C.IBV_QPT_UC, C.IBV_QPT_UD:
	default:
		// RAW_PACKET, XRC and driver QPs need hardware goroce does not emulate.
		return C.EOPNOTSUPP
	}
	scq, rcq := cqOf(a.send_cq), cqOf(a.recv_cq)
	if scq == nil || rcq == nil {
		return C.EINVAL
	}
	init := roce.QPInitAttr{
		Type:     roce.QPType(a.qp_type),
		SendCQ:   scq.cq,
		RecvCQ:   rcq.cq,
		SQSigAll: a.sq_sig_all != 0,
		Cap: roce.QPCap{
			MaxSendWR:     uint32(a.cap.max_send_wr),
			MaxRecvWR:     uint32(a.cap.max_recv_wr),
			MaxSendSGE:    uint32(a.cap.max_send_sge),
			MaxRecvSGE:    uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data),
		},
	}
	if a.srq != nil {
		s := srqOf(a.srq)
		if s == nil {
			return C.EINVAL
		}
		init.SRQ = s.srq
	}
	q, err := p.pd.CreateQP(init)
	if err != nil {
		return errno(err)
	}
	attr, err := q.Query()
	if err != nil {
		q.Close()
		return errno(err)
	}
	putCap(&a.cap, attr.Cap)
	o := &qp{ctx: p.ctx, pd: p, qp: q, element: element}
	p.ctx.own(q, element)
	*qpn = C.uint32_t(q.QPN())
	*h = newHandle(o)
	return 0
}

func putCap(c *C.struct_ibv_qp_cap, g roce.QPCap) {
	c.max_send_wr = C.uint32_t(g.MaxSendWR)
	c.max_recv_wr = C.uint32_t(g.MaxRecvWR)
	c.max_send_sge = C.uint32_t(g.MaxSendSGE)
	c.max_recv_sge = C.uint32_t(g.MaxRecvSGE)
	c.max_inline_data = C.uint32_t(g.MaxInlineData)
}

//export gr_destroy_qp
func gr_destroy_qp(h C.uintptr_t) C.int {
	o := object[*qp](h)
	if o == nil {
		return C.EINVAL
	}
	if err := o.qp.Close(); err != nil {
		return errno(err)
	}
	o.ctx.disown(o.qp)
	o.send.release()
	deleteHandle(h)
	return 0
}

// getAV converts struct ibv_ah_attr.
func getAV(a *C.struct_ibv_ah_attr) roce.AddressVector {
	return roce.AddressVector{
		DGID:         netip.AddrFrom16(*(*[16]byte)(unsafe.Pointer(&a.grh.dgid))),
		SGIDIndex:    uint8(a.grh.sgid_index),
		HopLimit:     uint8(a.grh.hop_limit),
		TrafficClass: uint8(a.grh.traffic_class),
		FlowLabel:    uint32(a.grh.flow_label),
		IsGlobal:     a.is_global != 0,
	}
}

// putAV writes av as struct ibv_ah_attr on port 1.
func putAV(a *C.struct_ibv_ah_attr, av roce.AddressVector) {
	*a = C.struct_ibv_ah_attr{}
	if av.DGID.IsValid() {
		*(*[16]byte)(unsafe.Pointer(&a.grh.dgid)) = av.DGID.As16()
	}
	a.grh.sgid_index = C.uint8_t(av.SGIDIndex)
	a.grh.hop_limit = C.uint8_t(av.HopLimit)
	a.grh.traffic_class = C.uint8_t(av.TrafficClass)
	a.grh.flow_label = C.uint32_t(av.FlowLabel)
	if av.IsGlobal {
		a.is_global = 1
	}
	a.port_num = 1
}

// gr_modify_qp is ibv_modify_qp: all of the attributes mask names, or none.
//
//export gr_modify_qp
func gr_modify_qp(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask C.int) C.int {
	o := object[*qp](h)
	if o == nil {
		return C.EINVAL
	}
	attr := roce.QPAttr{
		State:            roce.QPState(a.qp_state),
		CurState:         roce.QPState(a.cur_qp_state),
		EnSQDAsyncNotify: a.en_sqd_async_notify != 0,
		AccessFlags:      roce.Access(a.qp_access_flags),
		PKeyIndex:        uint16(a.pkey_index),
		QKey:             uint32(a.qkey),
		AV:               getAV(&a.ah_attr),
		PathMTU:          roce.MTU(a.path_mtu),
		Timeout:          uint8(a.timeout),
		RetryCnt:         uint8(a.retry_cnt),
		RNRRetry:         uint8(a.rnr_retry),
		RQPSN:            uint32(a.rq_psn),
		SQPSN:            uint32(a.sq_psn),
		MaxRDAtomic:      uint8(a.max_rd_atomic),
		MaxDestRDAtomic:  uint8(a.max_dest_rd_atomic),
		MinRNRTimer:      uint8(a.min_rnr_timer),
		DestQPN:          uint32(a.dest_qp_num),
		PortNum:          uint8(a.port_num),
		Cap: roce.QPCap{
			MaxSendWR:     uint32(a.cap.max_send_wr),
			MaxRecvWR:     uint32(a.cap.max_recv_wr),
			MaxSendSGE:    uint32(a.cap.max_send_sge),
			MaxRecvSGE:    uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data),
		},
	}
	return errno(o.qp.Modify(&attr, roce.QPAttrMask(mask)))
}

// gr_query_qp is ibv_query_qp: every attribute (the mask only says what the
// caller needs) and the creation attributes the C half does not keep itself.
//
//export gr_query_qp
func gr_query_qp(h C.uintptr_t, a *C.struct_ibv_qp_attr, init *C.struct_ibv_qp_init_attr) C.int {
	o := object[*qp](h)
	if o == nil {
		return C.EINVAL
	}
	g, err := o.qp.Query()
	if err != nil {
		return errno(err)
	}
	*a = C.struct_ibv_qp_attr{}
	a.qp_state = uint32(g.State)
	a.cur_qp_state = uint32(g.State)
	a.path_mtu = uint32(g.PathMTU)
	a.qkey = C.uint32_t(g.QKey)
	a.rq_psn = C.uint32_t(g.RQPSN)
	a.sq_psn = C.uint32_t(g.SQPSN)
	a.dest_qp_num = C.uint32_t(g.DestQPN)
	a.qp_access_flags = C.uint(g.AccessFlags)
	putCap(&a.cap, g.Cap)
	putAV(&a.ah_attr, g.AV)
	a.pkey_index = C.uint16_t(g.PKeyIndex)
	if g.EnSQDAsyncNotify {
		a.en_sqd_async_notify = 1
	}
	a.max_rd_atomic = C.uint8_t(g.MaxRDAtomic)
	a.max_dest_rd_atomic = C.uint8_t(g.MaxDestRDAtomic)
	a.min_rnr_timer = C.uint8_t(g.MinRNRTimer)
	a.port_num = C.uint8_t(g.PortNum)
	a.timeout = C.uint8_t(g.Timeout)
	a.retry_cnt = C.uint8_t(g.RetryCnt)
	a.rnr_retry = C.uint8_t(g.RNRRetry)
	ia := o.qp.InitAttr()
	init.qp_type = uint32(ia.Type)
	init.sq_sig_all = 0
	if ia.SQSigAll {
		init.sq_sig_all = 1
	}
	putCap(&init.cap, g.Cap)
	return 0
}

//export gr_attach_mcast
func gr_attach_mcast(h C.uintptr_t, gid *C.union_ibv_gid, lid C.uint16_t) C.int {
	o := object[*qp](h)
	if o == nil {
		return C.EINVAL
	}
	return errno(o.qp.AttachMcast(roce.GID(*(*[16]byte)(unsafe.Pointer(gid))), uint16(lid)))
}

//export gr_detach_mcast
func gr_detach_mcast(h C.uintptr_t, gid *C.union_ibv_gid, lid C.uint16_t) C.int {
	o := object[*qp](h)
	if o == nil {
		return C.EINVAL
	}
	return errno(o.qp.DetachMcast(roce.GID(*(*[16]byte)(unsafe.Pointer(gid))), uint16(lid)))
}
