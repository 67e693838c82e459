package main

/*
#include "goroce_verbs.h"
*/
import "C"

import (
	"unsafe"

	"github.com/goroce/goroce/roce"
)

// postChunk is how many WRs of a C list are converted and handed to the engine
// at once. A longer list is posted chunk by chunk, which keeps the scratch
// bounded and is what the list means: the WRs before a refused one are posted.
const postChunk = 64

// sendScratch holds a chunk of converted send WRs. Inline data is copied into
// a staging MR of the QP's PD, because a C program's inline bytes need not lie
// in registered memory while the engine's SGEs must; the engine copies inline
// data out at post time, so one slot per WR of a chunk is enough.
type sendScratch struct {
	wrs  [postChunk]roce.SendWR
	ptr  [postChunk]*C.struct_ibv_send_wr
	sges []roce.SGE

	inline    []byte   // postChunk slots of slot bytes
	slot      int      // max_inline_data of the QP
	inlineMR  *roce.MR // over inline
	inlineErr error    // why the staging MR could not be made, once
}

// release deregisters the staging MR with the QP.
func (s *sendScratch) release() {
	if s.inlineMR != nil {
		s.inlineMR.Close()
		s.inlineMR = nil
	}
}

// stage copies the bytes of sgl (raw process addresses) into inline slot i and
// returns the one SGE that names them there.
func (s *sendScratch) stage(q *qp, i int, sgl []C.struct_ibv_sge) (roce.SGE, error) {
	if s.inlineMR == nil {
		if s.inlineErr != nil {
			return roce.SGE{}, s.inlineErr
		}
		a, err := q.qp.Query()
		if err == nil {
			s.slot = max(int(a.Cap.MaxInlineData), 1)
			s.inline = make([]byte, postChunk*s.slot)
			s.inlineMR, err = q.pd.pd.RegMR(s.inline, roce.AccessLocalWrite)
		}
		if err != nil {
			s.inlineErr = err
			return roce.SGE{}, err
		}
	}
	dst := s.inline[i*s.slot : (i+1)*s.slot]
	n := 0
	for _, g := range sgl {
		l := int(g.length)
		if n+l > len(dst) {
			// Over max_inline_data: hand the engine the true length so it
			// refuses the WR with its own EINVAL.
			return roce.SGE{Addr: s.inlineMR.Addr() + uint64(i*s.slot), Length: uint32(n + l), LKey: s.inlineMR.LKey()}, nil
		}
		if l > 0 {
			copy(dst[n:], unsafe.Slice((*byte)(addrPointer(&g.addr)), l))
		}
		n += l
	}
	return roce.SGE{Addr: s.inlineMR.Addr() + uint64(i*s.slot), Length: uint32(n), LKey: s.inlineMR.LKey()}, nil
}

// addrPointer reads a C address held in a uint64 (an SGE's addr) as a pointer.
func addrPointer(a *C.uint64_t) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(a)) }

// sges views a C scatter/gather list.
func sges(p *C.struct_ibv_sge, n C.int) []C.struct_ibv_sge {
	if p == nil || n <= 0 {
		return nil
	}
	return unsafe.Slice(p, int(n))
}

// appendSGEs converts a C scatter/gather list onto dst.
func appendSGEs(dst []roce.SGE, l []C.struct_ibv_sge) []roce.SGE {
	for _, g := range l {
		dst = append(dst, roce.SGE{Addr: uint64(g.addr), Length: uint32(g.length), LKey: uint32(g.lkey)})
	}
	return dst
}

// sendWR converts w into out. It fails with EINVAL for a WR that names an AH
// or window that is not ours.
func (s *sendScratch) sendWR(q *qp, i int, w *C.struct_ibv_send_wr, out *roce.SendWR) C.int {
	*out = roce.SendWR{
		WRID:   uint64(w.wr_id),
		Opcode: roce.WROpcode(w.opcode),
		Flags:  roce.SendFlags(w.send_flags),
	}
	base := unsafe.Pointer(w)
	imm := *(*uint32)(unsafe.Add(base, C.GR_OFF_SWR_IMM))
	wr := unsafe.Add(base, C.GR_OFF_SWR_WR)
	switch out.Opcode {
	case roce.WRSendWithImm, roce.WRRDMAWriteWithImm:
		out.Imm = bigToHost32(imm)
	case roce.WRSendWithInv, roce.WRLocalInv:
		out.InvRKey = imm
	}
	switch out.Opcode {
	case roce.WRRDMAWrite, roce.WRRDMAWriteWithImm, roce.WRRDMARead, roce.WRFlush:
		r := (*C.struct_gr_wr_rdma)(wr)
		out.RemoteAddr, out.RKey = uint64(r.remote_addr), uint32(r.rkey)
	case roce.WRAtomicCmpAndSwp, roce.WRAtomicFetchAndAdd, roce.WRAtomicWrite:
		a := (*C.struct_gr_wr_atomic)(wr)
		out.RemoteAddr, out.RKey = uint64(a.remote_addr), uint32(a.rkey)
		out.CompareAdd, out.Swap = uint64(a.compare_add), uint64(a.swap)
	case roce.WRBindMW:
		b := (*C.struct_gr_wr_bind_mw)(unsafe.Add(base, C.GR_OFF_SWR_BIND))
		if b.mw == nil {
			return C.EINVAL
		}
		out.BindMW = roce.MWBindWR{
			MWRKey: uint32(b.mw.rkey),
			RKey:   uint32(b.rkey),
			Addr:   uint64(b.bind_info.addr),
			Length: uint64(b.bind_info.length),
			Access: roce.Access(b.bind_info.mw_access_flags),
		}
		if b.bind_info.mr != nil {
			out.BindMW.MRLKey = uint32(b.bind_info.mr.lkey)
		}
	}
	if q.qp.Type() == roce.QPTypeUD {
		u := (*C.struct_gr_wr_ud)(wr)
		if u.ah == nil {
			return C.EINVAL
		}
		ah := object[*roce.AH]((*C.struct_gr_ah)(unsafe.Pointer(u.ah)).h)
		if ah == nil {
			return C.EINVAL
		}
		out.AH, out.RemoteQPN, out.RemoteQKey = ah.AV(), uint32(u.remote_qpn), uint32(u.remote_qkey)
	}
	l := sges(w.sg_list, w.num_sge)
	if out.Flags&roce.SendInline != 0 && len(l) > 0 {
		g, err := s.stage(q, i, l)
		if err != nil {
			return errno(err)
		}
		k := len(s.sges)
		s.sges = append(s.sges, g)
		out.SGL = s.sges[k : k+1 : k+1]
		return 0
	}
	k := len(s.sges)
	s.sges = appendSGEs(s.sges, l)
	out.SGL = s.sges[k:len(s.sges):len(s.sges)]
	return 0
}

// gr_post_send is ibv_post_send: it posts the list from wr on, and on failure
// sets bad to the WR refused (those before it are posted) and returns its errno.
//
//export gr_post_send
func gr_post_send(h C.uintptr_t, wr *C.struct_ibv_send_wr, bad **C.struct_ibv_send_wr) C.int {
	o := object[*qp](h)
	if o == nil {
		*bad = wr
		return C.EINVAL
	}
	o.sendMu.Lock()
	defer o.sendMu.Unlock()
	s := &o.send
	for wr != nil {
		n := 0
		s.sges = s.sges[:0]
		for ; wr != nil && n < postChunk; wr = wr.next {
			if e := s.sendWR(o, n, wr, &s.wrs[n]); e != 0 {
				if k, err := o.qp.PostSend(s.wrs[:n]); err != nil {
					*bad = s.ptr[k]
					return errno(err)
				}
				*bad = wr
				return e
			}
			s.ptr[n] = wr
			n++
		}
		k, err := o.qp.PostSend(s.wrs[:n])
		clear(s.wrs[:n])
		if err != nil {
			*bad = s.ptr[k]
			return errno(err)
		}
	}
	return 0
}

// recvScratch holds a chunk of converted receive WRs.
type recvScratch struct {
	wrs  [postChunk]roce.RecvWR
	ptr  [postChunk]*C.struct_ibv_recv_wr
	sges []roce.SGE
}

// receiver is a roce QP or SRQ: what a receive list is posted to.
type receiver interface {
	PostRecv([]roce.RecvWR) (int, error)
}

// post converts and posts the list from wr on to r.
func (s *recvScratch) post(wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr, r receiver) C.int {
	for wr != nil {
		n := 0
		s.sges = s.sges[:0]
		for ; wr != nil && n < postChunk; wr = wr.next {
			k := len(s.sges)
			s.sges = appendSGEs(s.sges, sges(wr.sg_list, wr.num_sge))
			s.wrs[n] = roce.RecvWR{WRID: uint64(wr.wr_id), SGL: s.sges[k:len(s.sges):len(s.sges)]}
			s.ptr[n] = wr
			n++
		}
		k, err := r.PostRecv(s.wrs[:n])
		clear(s.wrs[:n])
		if err != nil {
			*bad = s.ptr[k]
			return errno(err)
		}
	}
	return 0
}

//export gr_post_recv
func gr_post_recv(h C.uintptr_t, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	o := object[*qp](h)
	if o == nil {
		*bad = wr
		return C.EINVAL
	}
	o.recvMu.Lock()
	defer o.recvMu.Unlock()
	return o.recv.post(wr, bad, o.qp)
}

//export gr_post_srq_recv
func gr_post_srq_recv(h C.uintptr_t, wr *C.struct_ibv_recv_wr, bad **C.struct_ibv_recv_wr) C.int {
	o := object[*srq](h)
	if o == nil {
		*bad = wr
		return C.EINVAL
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.recv.post(wr, bad, o.srq)
}
