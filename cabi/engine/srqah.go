package main

/*
#include "goroce_verbs.h"
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/goroce/goroce/roce"
)

// srq is an ibv_srq.
type srq struct {
	ctx     *devContext
	srq     *roce.SRQ
	element C.uintptr_t

	mu   sync.Mutex // guards recv
	recv recvScratch
}

// gr_create_srq is ibv_create_srq; a's attr gets the actual sizes (its
// srq_limit is ignored at creation, as the man page says).
//
//export gr_create_srq
func gr_create_srq(pdH C.uintptr_t, a *C.struct_ibv_srq_attr, element C.uintptr_t, h *C.uintptr_t) C.int {
	p := object[*pd](pdH)
	if p == nil {
		return C.EINVAL
	}
	s, err := p.pd.CreateSRQ(roce.SRQInitAttr{Attr: roce.SRQAttr{MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge)}})
	if err != nil {
		return errno(err)
	}
	got, err := s.Query()
	if err != nil {
		s.Close()
		return errno(err)
	}
	a.max_wr, a.max_sge = C.uint32_t(got.MaxWR), C.uint32_t(got.MaxSGE)
	o := &srq{ctx: p.ctx, srq: s, element: element}
	p.ctx.own(s, element)
	*h = newHandle(o)
	return 0
}

//export gr_destroy_srq
func gr_destroy_srq(h C.uintptr_t) C.int {
	o := object[*srq](h)
	if o == nil {
		return C.EINVAL
	}
	if err := o.srq.Close(); err != nil {
		return errno(err)
	}
	o.ctx.disown(o.srq)
	deleteHandle(h)
	return 0
}

//export gr_modify_srq
func gr_modify_srq(h C.uintptr_t, a *C.struct_ibv_srq_attr, mask C.int) C.int {
	o := object[*srq](h)
	if o == nil {
		return C.EINVAL
	}
	attr := roce.SRQAttr{MaxWR: uint32(a.max_wr), MaxSGE: uint32(a.max_sge), Limit: uint32(a.srq_limit)}
	return errno(o.srq.Modify(&attr, roce.SRQAttrMask(mask)))
}

//export gr_query_srq
func gr_query_srq(h C.uintptr_t, a *C.struct_ibv_srq_attr) C.int {
	o := object[*srq](h)
	if o == nil {
		return C.EINVAL
	}
	g, err := o.srq.Query()
	if err != nil {
		return errno(err)
	}
	a.max_wr, a.max_sge, a.srq_limit = C.uint32_t(g.MaxWR), C.uint32_t(g.MaxSGE), C.uint32_t(g.Limit)
	return 0
}

//export gr_create_ah
func gr_create_ah(pdH C.uintptr_t, a *C.struct_ibv_ah_attr, h *C.uintptr_t) C.int {
	p := object[*pd](pdH)
	if p == nil {
		return C.EINVAL
	}
	ah, err := p.pd.CreateAH(getAV(a))
	if err != nil {
		return errno(err)
	}
	*h = newHandle(ah)
	return 0
}

//export gr_destroy_ah
func gr_destroy_ah(h C.uintptr_t) C.int {
	ah := object[*roce.AH](h)
	if ah == nil {
		return C.EINVAL
	}
	if err := ah.Close(); err != nil {
		return errno(err)
	}
	deleteHandle(h)
	return 0
}

// gr_init_ah_from_wc is ibv_init_ah_from_wc: the address vector that answers the
// sender of wc, whose GRH area (40 bytes) is grh.
//
//export gr_init_ah_from_wc
func gr_init_ah_from_wc(ctxH C.uintptr_t, port C.uint8_t, wc *C.struct_ibv_wc, grh unsafe.Pointer, a *C.struct_ibv_ah_attr) C.int {
	_, d, e := contextDevice(ctxH)
	if e != 0 {
		return e
	}
	if wc == nil || a == nil || port != 1 {
		return C.EINVAL
	}
	w := getWC(wc)
	var g []byte
	if grh != nil {
		g = unsafe.Slice((*byte)(grh), roce.GRHLen)
	}
	av, err := d.InitAHFromWC(&w, g)
	if err != nil {
		return errno(err)
	}
	putAV(a, av)
	a.dlid, a.sl, a.src_path_bits = wc.slid, wc.sl, wc.dlid_path_bits
	return 0
}

// getWC converts struct ibv_wc back, for ibv_init_ah_from_wc.
func getWC(c *C.struct_ibv_wc) roce.WC {
	w := roce.WC{
		WRID:         uint64(c.wr_id),
		Status:       roce.WCStatus(c.status),
		Opcode:       roce.WCOpcode(c.opcode),
		VendorErr:    uint32(c.vendor_err),
		ByteLen:      uint32(c.byte_len),
		QPNum:        uint32(c.qp_num),
		SrcQP:        uint32(c.src_qp),
		Flags:        roce.WCFlags(c.wc_flags),
		PKeyIndex:    uint16(c.pkey_index),
		SLID:         uint16(c.slid),
		SL:           uint8(c.sl),
		DLIDPathBits: uint8(c.dlid_path_bits),
	}
	imm := *(*uint32)(unsafe.Add(unsafe.Pointer(c), C.GR_OFF_WC_IMM))
	if w.Flags&roce.WCWithImm != 0 {
		w.ImmData = bigToHost32(imm)
	} else if w.Flags&roce.WCWithInv != 0 {
		w.InvalidatedRKey = imm
	}
	return w
}
