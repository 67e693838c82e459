package main

/*
#include "goroce_verbs.h"
*/
import "C"

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goroce/goroce/roce"
)

// channel is an ibv_comp_channel: the queue of CQs whose armed notification
// fired, behind the fd the program reads or polls.
type channel struct {
	q *eventQueue[C.uintptr_t] // elements: the gr_cq pointers
}

// channelQueueLen bounds a channel's queue. A CQ queues at most one event per
// ReqNotify, so the bound is only reached by a program that arms many CQs and
// never reads the channel; further events are dropped and counted.
const channelQueueLen = 1 << 16

//export gr_create_channel
func gr_create_channel(ctxH C.uintptr_t, h *C.uintptr_t, fd *C.int) C.int {
	if _, _, e := contextDevice(ctxH); e != 0 {
		return e
	}
	q, err := newEventQueue[C.uintptr_t](channelQueueLen)
	if err != nil {
		return errno(err)
	}
	*h = newHandle(&channel{q: q})
	*fd = C.int(q.fd)
	return 0
}

// gr_destroy_channel closes the channel's fd. The C half refuses it (EBUSY)
// while a CQ still uses the channel.
//
//export gr_destroy_channel
func gr_destroy_channel(h C.uintptr_t) C.int {
	ch := object[*channel](h)
	if ch == nil {
		return C.EINVAL
	}
	ch.q.close()
	deleteHandle(h)
	return 0
}

// gr_channel_pop is the second half of ibv_get_cq_event, after the read of the
// channel's fd: the CQ whose event that was, or ENOENT when it was withdrawn by
// the CQ's destruction meanwhile.
//
//export gr_channel_pop
func gr_channel_pop(h C.uintptr_t, cq *C.uintptr_t) C.int {
	ch := object[*channel](h)
	if ch == nil {
		return C.EINVAL
	}
	e, ok := ch.q.pop()
	if !ok {
		return C.ENOENT
	}
	*cq = e
	return 0
}

// cq is an ibv_cq: the roce CQ, the channel its events go to, and the C struct
// that names it there.
type cq struct {
	ctx     *devContext
	cq      *roce.CQ
	ch      *channel
	element C.uintptr_t

	emptySince atomic.Int64 // UnixNano of the first of the empty polls in a row; 0 after a completion
}

// gr_create_cq is ibv_create_cq. element is the C struct, which the channel
// (chH, 0 for none) and async events name; cqe gets the actual size.
//
//export gr_create_cq
func gr_create_cq(ctxH C.uintptr_t, want C.int, chH C.uintptr_t, element C.uintptr_t, h *C.uintptr_t, cqe *C.int) C.int {
	c, d, e := contextDevice(ctxH)
	if e != 0 {
		return e
	}
	var ch *channel
	if chH != 0 {
		if ch = object[*channel](chH); ch == nil {
			return C.EINVAL
		}
	}
	q, err := d.CreateCQ(int(want))
	if err != nil {
		return errno(err)
	}
	o := &cq{ctx: c, cq: q, ch: ch, element: element}
	if ch != nil {
		q.SetNotifyFunc(func() { ch.q.push(element) })
	}
	c.own(q, element)
	*cqe = C.int(q.CQE())
	*h = newHandle(o)
	return 0
}

// gr_destroy_cq is ibv_destroy_cq: EBUSY while a QP uses the CQ. Its unread
// events are withdrawn from its channel and the async fd.
//
//export gr_destroy_cq
func gr_destroy_cq(h C.uintptr_t) C.int {
	o := object[*cq](h)
	if o == nil {
		return C.EINVAL
	}
	if err := o.cq.Close(); err != nil {
		return errno(err)
	}
	o.cq.SetNotifyFunc(nil)
	if o.ch != nil {
		o.ch.q.withdraw(func(e C.uintptr_t) bool { return e == o.element })
	}
	o.ctx.disown(o.cq)
	deleteHandle(h)
	return 0
}

//export gr_resize_cq
func gr_resize_cq(h C.uintptr_t, want C.int, cqe *C.int) C.int {
	o := object[*cq](h)
	if o == nil {
		return C.EINVAL
	}
	n, err := o.cq.Resize(int(want))
	if err != nil {
		return errno(err)
	}
	*cqe = C.int(n)
	return 0
}

//export gr_req_notify_cq
func gr_req_notify_cq(h C.uintptr_t, solicitedOnly C.int) C.int {
	o := object[*cq](h)
	if o == nil {
		return C.EINVAL
	}
	return errno(o.cq.ReqNotify(solicitedOnly != 0))
}

// pollBatch is how many completions gr_poll_cq takes from the engine per call
// into it; a larger request loops.
const pollBatch = 32

// gr_poll_cq is ibv_poll_cq: up to n completions into wc, the number taken, or
// a negative errno (a CQ that overran, once its completions are drained). On an
// empty poll *yield says whether the C half should give the core up
// (a short sleep) before it returns, by roce's busy-poll policy
// (roce.CQ.ShouldYield): a program that waits for the answer to a request
// spins, which is what busy-polling is for.
//
//export gr_poll_cq
func gr_poll_cq(h C.uintptr_t, n C.int, wc *C.struct_ibv_wc, yield *C.int) C.int {
	o := object[*cq](h)
	if o == nil {
		return -C.EINVAL
	}
	if n <= 0 {
		return 0
	}
	got := pollCQ(o, n, wc)
	if got != 0 {
		o.emptySince.Store(0)
		return got
	}
	now := time.Now().UnixNano()
	since := o.emptySince.Load()
	if since == 0 {
		o.emptySince.Store(now)
		since = now
	}
	if o.cq.ShouldYield(time.Duration(now - since)) {
		*yield = 1
	}
	return got
}

// pollCQ takes up to n completions of o into wc (gr_poll_cq).
func pollCQ(o *cq, n C.int, wc *C.struct_ibv_wc) C.int {
	out := unsafe.Slice(wc, int(n))
	var buf [pollBatch]roce.WC
	total := 0
	for total < len(out) {
		k, err := o.cq.Poll(buf[:min(pollBatch, len(out)-total)])
		for i := 0; i < k; i++ {
			putWC(&out[total+i], &buf[i])
		}
		total += k
		if err != nil {
			if total > 0 {
				return C.int(total)
			}
			return -errno(err)
		}
		if k < pollBatch {
			break
		}
	}
	return C.int(total)
}

// putWC writes w as struct ibv_wc; imm_data travels in network order.
func putWC(c *C.struct_ibv_wc, w *roce.WC) {
	c.wr_id = C.uint64_t(w.WRID)
	c.status = uint32(w.Status)
	c.opcode = uint32(w.Opcode)
	c.vendor_err = C.uint32_t(w.VendorErr)
	c.byte_len = C.uint32_t(w.ByteLen)
	imm := (*uint32)(unsafe.Add(unsafe.Pointer(c), C.GR_OFF_WC_IMM))
	switch {
	case w.Flags&roce.WCWithImm != 0:
		*imm = hostToBig32(w.ImmData)
	case w.Flags&roce.WCWithInv != 0:
		*imm = w.InvalidatedRKey
	default:
		*imm = 0
	}
	c.qp_num = C.uint32_t(w.QPNum)
	c.src_qp = C.uint32_t(w.SrcQP)
	c.wc_flags = C.uint(w.Flags)
	c.pkey_index = C.uint16_t(w.PKeyIndex)
	c.slid = C.uint16_t(w.SLID)
	c.sl = C.uint8_t(w.SL)
	c.dlid_path_bits = C.uint8_t(w.DLIDPathBits)
}

// hostToBig32 is htobe32 on this little-endian machine's terms: the value whose
// memory holds v's bytes in network order.
func hostToBig32(v uint32) uint32 {
	var b [4]byte
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	return *(*uint32)(unsafe.Pointer(&b))
}

// bigToHost32 is be32toh.
func bigToHost32(v uint32) uint32 {
	b := (*[4]byte)(unsafe.Pointer(&v))
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
