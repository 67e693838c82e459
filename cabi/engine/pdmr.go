package main

/*
#include "goroce_verbs.h"
*/
import "C"

import (
	"unsafe"

	"github.com/goroce/goroce/roce"
)

// pd is an ibv_pd: the roce PD and the context it belongs to.
type pd struct {
	ctx *devContext
	pd  *roce.PD
}

//export gr_alloc_pd
func gr_alloc_pd(ctxH C.uintptr_t, h *C.uintptr_t) C.int {
	c, d, e := contextDevice(ctxH)
	if e != 0 {
		return e
	}
	p, err := d.AllocPD()
	if err != nil {
		return errno(err)
	}
	*h = newHandle(&pd{ctx: c, pd: p})
	return 0
}

//export gr_dealloc_pd
func gr_dealloc_pd(h C.uintptr_t) C.int {
	p := object[*pd](h)
	if p == nil {
		return C.EINVAL
	}
	if err := p.pd.Close(); err != nil {
		return errno(err)
	}
	deleteHandle(h)
	return 0
}

// gr_reg_mr is ibv_reg_mr_iova2: the engine uses the program's bytes
// [addr, addr+length) in place, named by iova in SGEs and by peers.
//
//export gr_reg_mr
func gr_reg_mr(pdH C.uintptr_t, addr unsafe.Pointer, length C.size_t, iova C.uint64_t, access C.uint, h *C.uintptr_t, lkey, rkey *C.uint32_t) C.int {
	p := object[*pd](pdH)
	if p == nil {
		return C.EINVAL
	}
	if addr == nil || length == 0 {
		return C.EINVAL
	}
	buf := unsafe.Slice((*byte)(addr), int(length))
	mr, err := p.pd.RegMRIOVA(buf, uint64(iova), roce.Access(access))
	if err != nil {
		return errno(err)
	}
	*lkey, *rkey = C.uint32_t(mr.LKey()), C.uint32_t(mr.RKey())
	*h = newHandle(mr)
	return 0
}

// gr_dereg_mr is ibv_dereg_mr. An MR that memory windows are bound to is
// EBUSY and stays registered.
//
//export gr_dereg_mr
func gr_dereg_mr(h C.uintptr_t) C.int {
	mr := object[*roce.MR](h)
	if mr == nil {
		return C.EINVAL
	}
	if err := mr.Close(); err != nil {
		return errno(err)
	}
	deleteHandle(h)
	return 0
}

//export gr_alloc_mw
func gr_alloc_mw(pdH C.uintptr_t, typ C.int, h *C.uintptr_t, rkey *C.uint32_t) C.int {
	p := object[*pd](pdH)
	if p == nil {
		return C.EINVAL
	}
	mw, err := p.pd.AllocMW(roce.MWType(typ))
	if err != nil {
		return errno(err)
	}
	*rkey = C.uint32_t(mw.RKey())
	*h = newHandle(mw)
	return 0
}

//export gr_dealloc_mw
func gr_dealloc_mw(h C.uintptr_t) C.int {
	mw := object[*roce.MW](h)
	if mw == nil {
		return C.EINVAL
	}
	if err := mw.Close(); err != nil {
		return errno(err)
	}
	deleteHandle(h)
	return 0
}

// bindInfo converts struct ibv_mw_bind_info; ok is false for an MR that is no
// MR of ours.
func bindInfo(b *C.struct_ibv_mw_bind_info) (roce.MWBindInfo, bool) {
	info := roce.MWBindInfo{Addr: uint64(b.addr), Length: uint64(b.length), Access: roce.Access(b.mw_access_flags)}
	if b.mr != nil {
		info.MR = object[*roce.MR]((*C.struct_gr_mr)(unsafe.Pointer(b.mr)).h)
		if info.MR == nil {
			return info, false
		}
	}
	return info, true
}

// gr_bind_mw is ibv_bind_mw of a type 1 window; rkey gets the window's rkey
// once the bind has executed.
//
//export gr_bind_mw
func gr_bind_mw(qpH, mwH C.uintptr_t, b *C.struct_ibv_mw_bind, rkey *C.uint32_t) C.int {
	q, mw := object[*qp](qpH), object[*roce.MW](mwH)
	if q == nil || mw == nil {
		return C.EINVAL
	}
	info, ok := bindInfo(&b.bind_info)
	if !ok {
		return C.EINVAL
	}
	k, err := q.qp.BindMW(mw, roce.MWBind{WRID: uint64(b.wr_id), Flags: roce.SendFlags(b.send_flags), Info: info})
	if err != nil {
		return errno(err)
	}
	*rkey = C.uint32_t(k)
	return 0
}
