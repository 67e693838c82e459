package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/internal/core/verbserr"
)

// QP is a queue pair. PostSend and PostRecv are safe from any goroutine; all
// protocol state is written by the owner shard only (package doc,
// Concurrency).
type QP struct {
	e    *Engine
	sh   *shard
	qpn  uint32
	typ  verbs.QPType
	init QPInitAttr // immutable after CreateQP
	rq   *srq.Queue // own receive queue; nil when init.SRQ is set
	srq  *srq.Queue
	sq   sendQueue

	mcastGone bool // Engine.mcMu guards: destroyed, attaches no more groups

	state  atomic.Uint32 // mirror of attr.State for the posting verbs
	queued atomic.Bool   // on the shard's ready list
	fatal  atomic.Bool   // a CQ this QP feeds overran: move to ERR
	cnt    qpCounters

	// Owner shard only.
	attr        verbs.QPAttr
	pmtu        uint32
	rto         time.Duration
	sport       uint16 // rxe's source port for this QP
	wport       uint16 // the source port its packets leave from: sport, or 0 for the link's own
	destroyed   bool
	touchedMark bool
	commEst     bool
	lastWQE     bool
	sqdNotified bool
	win         sendWindow // shared by req and comp
	req         requester
	comp        completer
	resp        responder
	timer       Timer
	timerAt     time.Time
	cc          *qpCC // congestion control; nil when the device's is off
}

// qpCounters are per-QP statistics for the debug dump.
type qpCounters struct {
	txPackets, rxPackets, retransmits, timeouts atomic.Uint64
}

// CreateQP is ibv_create_qp: a QP in RESET with the next free QPN (from 0x11,
// as rxe), attached to its CQs and SRQ until Destroy. The SRQ's limit handler
// is left to whoever created the SRQ (roce raises SRQ_LIMIT_REACHED); it fires
// on the shard whose Pop crossed the limit.
func (e *Engine) CreateQP(init *QPInitAttr) (*QP, error) { return e.CreateQPWithNum(init, 0) }

// CreateQPWithNum is CreateQP with a chosen QPN (non-zero), for the GSI QP 1
// that the connection manager needs (a UD QP with Q_Key 0x80010000). QPN 0
// picks the next free number. A QPN in use is EBUSY.
func (e *Engine) CreateQPWithNum(init *QPInitAttr, qpn uint32) (*QP, error) {
	const op = "ibv_create_qp"
	if e.closed.Load() {
		return nil, closedErr(op, qpn)
	}
	if e.fatal.Load() {
		return nil, newErr(op, qpn, syscall.EIO, "device fatal error: its link is gone")
	}
	if err := e.CheckQPInit(init); err != nil {
		return nil, err
	}
	if qpn > maxQPN {
		return nil, newErr(op, qpn, syscall.EINVAL, "QPN above 24 bits")
	}
	c := init.Cap
	q := &QP{e: e, typ: init.Type, init: *init, srq: init.SRQ}
	q.initCC()
	if q.init.Cap.MaxSendSGE == 0 {
		q.init.Cap.MaxSendSGE = 1
	}
	if q.init.Cap.MaxRecvSGE == 0 {
		q.init.Cap.MaxRecvSGE = 1
	}
	if init.SRQ == nil {
		rq, err := srq.New(&verbs.SRQAttr{MaxWR: c.MaxRecvWR, MaxSGE: q.init.Cap.MaxRecvSGE},
			srq.Caps{MaxWR: uint32(e.cfg.MaxQPWR), MaxSGE: uint32(e.cfg.MaxSGE)})
		if err != nil {
			return nil, adoptErr(err, op, qpn)
		}
		q.rq = rq
	} else {
		q.init.Cap.MaxRecvWR, q.init.Cap.MaxRecvSGE = 0, 0
	}
	q.sq.init(int(c.MaxSendWR), int(q.init.Cap.MaxSendSGE), int(c.MaxInlineData))
	q.req, q.comp, q.resp = requester{q: q}, completer{q: q}, newResponder(q, nil, verbs.RecvWR{})
	q.attr.Cap = q.init.Cap
	q.attr.PortNum = 1
	q.attr.PathMTU = verbs.MTU1024
	if q.typ == verbs.QPTypeUD {
		// UD cannot set IBV_QP_PATH_MTU: its limit is the port's active MTU.
		q.attr.PathMTU = e.cfg.PortMTU
	}
	q.pmtu = uint32(q.attr.PathMTU.Bytes())

	e.mu.Lock()
	if qpn == 0 {
		if qpn = e.qps.alloc(); qpn == 0 {
			e.mu.Unlock()
			return nil, newErr(op, 0, syscall.ENOMEM, "no free QPN")
		}
	} else if e.qps.lookup(qpn) != nil {
		e.mu.Unlock()
		return nil, newErr(op, qpn, syscall.EBUSY, "QPN in use")
	}
	q.qpn = qpn
	q.setSourcePort(bth.QPSourcePort(qpn), true)
	q.sh = e.shardFor(qpn)
	e.qps.insert(qpn, q)
	e.mu.Unlock()
	init.SendCQ.Attach()
	init.RecvCQ.Attach()
	if init.SRQ != nil {
		init.SRQ.Attach()
	}
	return q, nil
}

// CheckQPInit checks ibv_create_qp's attributes against the device limits, the
// one place these rules live (rxe_qp_chk_init, rxe_qp_chk_cap); with an SRQ
// the receive caps are ignored. roce runs it before reserving max_qp.
func (e *Engine) CheckQPInit(init *QPInitAttr) error {
	const op = "ibv_create_qp"
	if init == nil {
		return newErr(op, 0, syscall.EINVAL, "nil init attributes")
	}
	switch init.Type {
	case verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD:
	default:
		return newErr(op, 0, syscall.EINVAL, "QP type %v not supported", init.Type)
	}
	c, hasSRQ := init.Cap, init.SRQ != nil
	switch {
	case init.SendCQ == nil || init.RecvCQ == nil:
		return newErr(op, 0, syscall.EINVAL, "send_cq and recv_cq are required")
	case c.MaxSendWR == 0 || int64(c.MaxSendWR) > int64(e.cfg.MaxQPWR):
		return newErr(op, 0, syscall.EINVAL, "max_send_wr %d not in [1..%d] (max_qp_wr)", c.MaxSendWR, e.cfg.MaxQPWR)
	case !hasSRQ && (c.MaxRecvWR == 0 || int64(c.MaxRecvWR) > int64(e.cfg.MaxQPWR)):
		return newErr(op, 0, syscall.EINVAL, "max_recv_wr %d not in [1..%d] (max_qp_wr)", c.MaxRecvWR, e.cfg.MaxQPWR)
	case int64(c.MaxSendSGE) > int64(e.cfg.MaxSGE):
		return newErr(op, 0, syscall.EINVAL, "max_send_sge %d above max_sge %d", c.MaxSendSGE, e.cfg.MaxSGE)
	case !hasSRQ && int64(c.MaxRecvSGE) > int64(e.cfg.MaxSGE):
		return newErr(op, 0, syscall.EINVAL, "max_recv_sge %d above max_sge %d", c.MaxRecvSGE, e.cfg.MaxSGE)
	case int64(c.MaxInlineData) > int64(e.cfg.MaxInline):
		return newErr(op, 0, syscall.EINVAL, "max_inline_data %d above %d", c.MaxInlineData, e.cfg.MaxInline)
	}
	return nil
}

func (q *QP) QPN() uint32 { return q.qpn }

// run executes fn on the owner shard and waits for it.
func (q *QP) run(op string, fn func(), closing bool) error {
	if q.e.closed.Load() && !closing || !q.sh.call(fn) {
		return closedErr(op, q.qpn)
	}
	return nil
}

// call runs fn on the shard between two slices and waits for it; false when
// the engine stopped first. On an idle shard fn runs here, under the token (no
// hand-off: this keeps creating and connecting QPs cheap); a busy shard runs
// it from its command channel after the current slice.
func (s *shard) call(fn func()) bool {
	select {
	case <-s.e.done:
		return false
	default:
	}
	if s.mu.TryLock() {
		fn()
		s.unlock()
		return true
	}
	done := make(chan struct{})
	select {
	case s.cmds <- func() { fn(); close(done) }:
	case <-s.e.done:
		return false
	}
	<-done
	return true
}

// Modify is ibv_modify_qp: the transition and mask are checked against the
// IBTA table and the values against the device (EINVAL), then every attribute
// is applied, or none. Not from an OnEvent callback: it runs on the shard.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	const op = "ibv_modify_qp"
	if attr == nil {
		return newErr(op, q.qpn, syscall.EINVAL, "nil attributes")
	}
	a := *attr
	var res error
	err := q.run(op, func() {
		if q.destroyed {
			res = newErr(op, q.qpn, syscall.EINVAL, "QP destroyed")
			return
		}
		res = q.modify(q.e.cfg.Clock.Now(), &a, mask)
	}, false)
	if err != nil {
		return err
	}
	return res
}

// checkAttr validates attribute values against the device (rxe_qp_chk_attr),
// the one place these rules live.
func (q *QP) checkAttr(a *verbs.QPAttr, mask verbs.QPAttrMask) string {
	switch {
	case mask&verbs.QPAttrCurState != 0 && a.CurState != q.attr.State:
		return "cur_qp_state " + a.CurState.String() + " is not the current state " + q.attr.State.String()
	case mask&verbs.QPAttrPathMTU != 0 && a.PathMTU.Bytes() == 0:
		return fmt.Sprintf("path_mtu %d outside [%d..%d]", a.PathMTU, verbs.MTU256, verbs.MTU4096)
	case mask&verbs.QPAttrPort != 0 && a.PortNum != 1:
		return fmt.Sprintf("port %d: the device has only port 1", a.PortNum)
	case mask&verbs.QPAttrPKeyIndex != 0 && a.PKeyIndex != 0:
		return fmt.Sprintf("pkey_index %d outside the P_Key table (1 entry)", a.PKeyIndex)
	case mask&verbs.QPAttrAV != 0 && !a.AV.DGID.IsValid():
		return "address vector without a destination GID"
	case mask&verbs.QPAttrTimeout != 0 && a.Timeout > 31:
		return "timeout above 31"
	case mask&verbs.QPAttrRetryCnt != 0 && a.RetryCnt > 7:
		return "retry_cnt above 7"
	case mask&verbs.QPAttrRNRRetry != 0 && a.RNRRetry > 7:
		return "rnr_retry above 7"
	case mask&verbs.QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return "min_rnr_timer above 31"
	case mask&verbs.QPAttrMaxQPRDAtomic != 0 && int(a.MaxRDAtomic) > q.e.cfg.MaxRDAtomic:
		return fmt.Sprintf("max_rd_atomic %d above max_qp_init_rd_atom %d", a.MaxRDAtomic, q.e.cfg.MaxRDAtomic)
	case mask&verbs.QPAttrMaxDestRDAtomic != 0 && int(a.MaxDestRDAtomic) > q.e.cfg.MaxDestRDAtomic:
		return fmt.Sprintf("max_dest_rd_atomic %d above max_qp_rd_atom %d", a.MaxDestRDAtomic, q.e.cfg.MaxDestRDAtomic)
	case mask&verbs.QPAttrDestQPN != 0 && a.DestQPN > maxQPN:
		return "dest_qp_num above 24 bits"
	}
	return ""
}

// modify validates then applies; owner shard only.
func (q *QP) modify(now time.Time, a *verbs.QPAttr, mask verbs.QPAttrMask) error {
	const op = "ibv_modify_qp"
	cur := q.attr.State
	next := cur
	if mask&verbs.QPAttrState != 0 {
		next = a.State
	}
	if ok, why := modifyOK(cur, next, q.typ, mask); !ok {
		return newErr(op, q.qpn, syscall.EINVAL, "%s", why)
	}
	if why := q.checkAttr(a, mask); why != "" {
		return newErr(op, q.qpn, syscall.EINVAL, "%s", why)
	}
	q.applyAttr(a, mask)
	if mask&verbs.QPAttrState == 0 || next == cur && next != verbs.QPSErr {
		return nil
	}
	switch next {
	case verbs.QPSReset:
		q.reset()
	case verbs.QPSErr:
		q.toError(now)
		return nil
	case verbs.QPSRTS:
		q.sqdNotified = false
	case verbs.QPSSQD:
		q.sqdNotified = false
	}
	q.setState(next)
	q.sh.wakeQP(q)
	return nil
}

// applyAttr sets the checked attributes mask selects, and what derives from
// them (rxe_qp_from_attr).
func (q *QP) applyAttr(a *verbs.QPAttr, mask verbs.QPAttrMask) {
	t := &q.attr
	if mask&verbs.QPAttrEnSQDAsyncNotify != 0 {
		t.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if mask&verbs.QPAttrAccessFlags != 0 {
		t.AccessFlags = a.AccessFlags
	}
	if mask&verbs.QPAttrPKeyIndex != 0 {
		t.PKeyIndex = a.PKeyIndex
	}
	if mask&verbs.QPAttrPort != 0 {
		t.PortNum = a.PortNum
	}
	if mask&verbs.QPAttrQKey != 0 {
		t.QKey = a.QKey
	}
	if mask&verbs.QPAttrAV != 0 {
		t.AV = a.AV
		t.AV.DGID = t.AV.DGID.Unmap()
	}
	if mask&verbs.QPAttrPathMTU != 0 {
		t.PathMTU = a.PathMTU
	}
	if mask&verbs.QPAttrTimeout != 0 {
		t.Timeout = a.Timeout
	}
	if mask&verbs.QPAttrRetryCnt != 0 {
		t.RetryCnt = a.RetryCnt
		q.comp.retryCnt = a.RetryCnt
	}
	if mask&verbs.QPAttrRNRRetry != 0 {
		t.RNRRetry = a.RNRRetry
		q.comp.rnrRetry = a.RNRRetry
	}
	if mask&verbs.QPAttrRQPSN != 0 {
		t.RQPSN = a.RQPSN & bth.PSNMask
		q.resp.psn = bth.PSN(t.RQPSN)
	}
	if mask&verbs.QPAttrMaxQPRDAtomic != 0 {
		t.MaxRDAtomic = a.MaxRDAtomic
	}
	if mask&verbs.QPAttrMaxDestRDAtomic != 0 {
		t.MaxDestRDAtomic = a.MaxDestRDAtomic
		q.resp.res = nil // sized by the first READ or atomic (saveResource)
		q.resp.resNext = 0
	}
	if mask&verbs.QPAttrMinRNRTimer != 0 {
		t.MinRNRTimer = a.MinRNRTimer
	}
	if mask&verbs.QPAttrSQPSN != 0 {
		t.SQPSN = a.SQPSN & bth.PSNMask
		q.win.startAt(q.win.head, bth.PSN(t.SQPSN))
	}
	if mask&verbs.QPAttrDestQPN != 0 {
		t.DestQPN = a.DestQPN
	}
	q.pmtu = uint32(t.PathMTU.Bytes())
	if t.Timeout != 0 {
		q.rto = time.Duration(4096<<t.Timeout) * time.Nanosecond
	} else {
		q.rto = 0
	}
	if mask&(verbs.QPAttrAV|verbs.QPAttrDestQPN) != 0 && q.typ != verbs.QPTypeUD {
		if t.AV.SrcPort != 0 {
			q.setSourcePort(t.AV.SrcPort, false)
		} else {
			q.setSourcePort(bth.ConnectedSourcePort(t.AV.FlowLabel, q.qpn, t.DestQPN), true)
		}
	}
}

func (q *QP) setState(s verbs.QPState) {
	q.attr.State = s
	q.state.Store(uint32(s))
}

// reset returns the QP to RESET: queues emptied without completions.
func (q *QP) reset() {
	if q.rq != nil {
		q.rq.Flush(nil)
	}
	q.sq.mu.Lock()
	tail := q.sq.tail.Load()
	q.sq.head.Store(tail)
	for i := range q.sq.slots {
		q.sq.slots[i].state = wqePosted
	}
	q.sq.mu.Unlock()
	q.resp.dropHeld()
	q.win.startAt(tail, 0)
	q.req, q.comp = requester{q: q}, completer{q: q}
	q.resp = newResponder(q, q.resp.res, q.resp.wr)
	q.commEst, q.lastWQE = false, false
	pm, cp := q.attr.PathMTU, q.attr.Cap
	q.attr = verbs.QPAttr{PathMTU: pm, Cap: cp, PortNum: 1}
	q.timerAt = time.Time{}
	if q.timer != nil {
		q.timer.Stop()
	}
	q.initCC()
	q.setState(verbs.QPSReset)
}

// toError moves the QP to ERR and flushes every outstanding WR with
// WR_FLUSH_ERR (again for WRs posted since); with an SRQ it raises
// QP_LAST_WQE_REACHED.
func (q *QP) toError(now time.Time) {
	if q.attr.State != verbs.QPSErr {
		q.setState(verbs.QPSErr)
		q.comp.rtoAt, q.comp.rnrAt = time.Time{}, time.Time{}
		q.resp.dropHeld()
	}
	qpn := q.qpn
	q.resp.endWR(verbs.WCWRFlushErr)
	if q.rq != nil {
		q.rq.Flush(func(wr *verbs.RecvWR) {
			q.pushWC(q.init.RecvCQ, &verbs.WC{WRID: wr.WRID, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: qpn}, false)
		})
	} else if !q.lastWQE {
		q.lastWQE = true
		q.e.event(Event{Type: verbs.EventQPLastWQEReached, QPN: qpn, SRQ: q.srq})
	}
	q.flushSQ(now)
}

// flushSQ completes every send WR not yet completed with WR_FLUSH_ERR.
func (q *QP) flushSQ(now time.Time) {
	tail := q.sq.loadTail()
	for q.win.head < tail {
		q.comp.complete(now, q.sq.slot(q.win.head), verbs.WCWRFlushErr)
	}
	q.win.flushed()
}

// scatter copies data into sgl from byte offset off, checking each SGE's lkey,
// PD and LOCAL_WRITE: LocLenErr when the SGEs are too short, LocProtErr on a
// bad key.
func (q *QP) scatter(sgl []verbs.SGE, off uint32, data []byte) verbs.WCStatus {
	pos := uint32(0)
	for _, sg := range sgl {
		if len(data) == 0 {
			return verbs.WCSuccess
		}
		size := sg.Size()
		if off >= pos+size {
			pos += size
			continue
		}
		start := off - pos
		take := min(size-start, uint32(len(data)))
		b := q.sgeBytes(sg, start, take)
		if b == nil {
			return verbs.WCLocProtErr
		}
		copy(b, data[:take])
		data = data[take:]
		off += take
		pos += size
	}
	if len(data) > 0 {
		return verbs.WCLocLenErr
	}
	return verbs.WCSuccess
}

// sgeBytes returns the n bytes from start of sg, which the QP may write
// (its PD's memory, with local write), or nil.
func (q *QP) sgeBytes(sg verbs.SGE, start, n uint32) []byte {
	r := q.e.cfg.Memory.LocalRegion(sg.LKey)
	if r == nil || r.PD != q.init.PD || r.Access&verbs.AccessLocalWrite == 0 {
		return nil
	}
	return r.slice(sg.Addr+uint64(start), uint64(n))
}

// sglSpan returns the bytes [off, off+n) of sgl when they lie in one SGE the
// QP may write, where scatter would place them; nil otherwise.
func (q *QP) sglSpan(sgl []verbs.SGE, off, n uint32) []byte {
	pos := uint32(0)
	for _, sg := range sgl {
		size := sg.Size()
		if off < pos+size {
			if off+n > pos+size {
				return nil
			}
			return q.sgeBytes(sg, off-pos, n)
		}
		pos += size
	}
	return nil
}

// pushWC posts a completion; an overrun raises CQ_ERR and moves every QP
// feeding the CQ to ERR, as a device does.
func (q *QP) pushWC(c *cq.Queue, wc *verbs.WC, solicited bool) {
	if s := q.sh; s.deferWC {
		s.wcs = append(s.wcs, deferredWC{q: q, c: c, wc: *wc, solicited: solicited})
		return
	}
	err := c.Push(wc, solicited)
	if err != nil && errors.Is(err, cq.ErrOverrun) {
		q.e.cfg.Stats.CQOverruns.Add(1)
		q.e.event(Event{Type: verbs.EventCQErr, CQ: c})
		q.e.failQPs(func(o *QP) bool { return o.init.SendCQ == c || o.init.RecvCQ == c })
	}
}

// Query is ibv_query_qp: the current attributes and the creation attributes.
func (q *QP) Query() (verbs.QPAttr, QPInitAttr) {
	var a verbs.QPAttr
	if err := q.run("ibv_query_qp", func() { a = q.attr }, false); err != nil {
		a = verbs.QPAttr{State: verbs.QPState(q.state.Load())}
	}
	a.CurState = a.State
	a.Cap = q.init.Cap
	return a, q.init
}

// Destroy is ibv_destroy_qp: the QP stops at once, its WRs are dropped without
// completions, its CQs and SRQ detached. A UD QP first sends what was posted
// (sendPosted).
func (q *QP) Destroy() error {
	const op = "ibv_destroy_qp"
	var already bool
	err := q.run(op, func() {
		already = q.destroyed
		if !already {
			q.sendPosted()
		}
		q.destroyed = true
		q.resp.dropHeld()
		if q.timer != nil {
			q.timer.Stop()
		}
	}, false)
	if err != nil {
		return err
	}
	if already {
		return newErr(op, q.qpn, syscall.EINVAL, "already destroyed")
	}
	e := q.e
	q.detachAll()
	e.mu.Lock()
	e.qps.remove(q)
	e.mu.Unlock()
	q.init.SendCQ.Detach()
	q.init.RecvCQ.Detach()
	if q.srq != nil {
		q.srq.Detach()
	}
	return nil
}

// sendPosted sends, on the shard, the datagrams a UD QP in RTS has been posted
// and not yet sent, with their completions: a NIC has sent them long before a
// destroy gets through, and programs count on it (rdmacm-utils' mckey posts its
// sends unsignaled and destroys the QP at once). Bounded: one packet per WR, at
// most the send queue's depth. An RC or UC QP's WRs are dropped: their messages
// could not finish without the QP.
func (q *QP) sendPosted() {
	if q.typ != verbs.QPTypeUD || q.attr.State != verbs.QPSRTS {
		return
	}
	s, now := q.sh, q.e.cfg.Clock.Now()
	s.deferWC = true
	for left := int(q.init.Cap.MaxSendWR); left > 0; {
		sent, more := q.req.run(now, min(left, slicePackets))
		s.flush()
		left -= sent
		if !more {
			break
		}
	}
	s.drainWC()
}

// PostSend is ibv_post_send: each WR is validated (validateSendWR) and queued,
// in order, up to the first bad one; it returns how many were queued and an
// error whose Index names the bad one (bad_wr). A full send queue is ENOMEM;
// before RTS EINVAL; in SQE and ERR the WRs complete with WR_FLUSH_ERR.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	const op = "ibv_post_send"
	if q.e.closed.Load() {
		return 0, closedErr(op, q.qpn)
	}
	st := verbs.QPState(q.state.Load())
	if st < verbs.QPSRTS {
		return 0, newErr(op, q.qpn, syscall.EINVAL, "QP in state %s", st)
	}
	behind := q.sq.outstanding()
	n := 0
	var err error
	q.sq.mu.Lock()
	for i := range wrs {
		if err = q.postOne(&wrs[i]); err != nil {
			if e, ok := err.(*verbserr.Error); ok {
				e.Index = i
			}
			break
		}
		n++
	}
	q.sq.mu.Unlock()
	if n > 0 {
		q.sh.readyQP(q)
		q.sh.posted(behind, n)
	}
	return n, err
}

func (q *QP) postOne(wr *verbs.SendWR) error {
	length, why := validateSendWR(q.typ, &q.init.Cap, wr)
	if why != "" {
		return newErr("ibv_post_send", q.qpn, syscall.EINVAL, "%s", why)
	}
	return q.enqueue(wr, length)
}

// sendOpcodes is the send WR opcodes each QP type allows, a bit each.
var sendOpcodes = [...]uint16{
	verbs.QPTypeRC: opSet(verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRSend, verbs.WRSendWithImm,
		verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd, verbs.WRSendWithInv,
		verbs.WRLocalInv, verbs.WRBindMW, verbs.WRFlush, verbs.WRAtomicWrite),
	verbs.QPTypeUC: opSet(verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRSend, verbs.WRSendWithImm,
		verbs.WRLocalInv, verbs.WRBindMW),
	verbs.QPTypeUD: opSet(verbs.WRSend, verbs.WRSendWithImm),
}

func opSet(ops ...verbs.WROpcode) (set uint16) {
	for _, op := range ops {
		set |= 1 << op
	}
	return set
}

// validateSendWR applies ibv_post_send's rules (rxe validate_send_wr): an
// opcode the QP type allows, a UD destination, no data for a local operation
// or FLUSH, FLUSH's placement and selectivity, at most max_send_sge SGEs and
// 2^31 bytes, an atomic's 8-byte buffer, inline data only for SEND and WRITE
// within max_inline_data. It returns the length, or why wr is refused.
func validateSendWR(typ verbs.QPType, c *verbs.QPCap, wr *verbs.SendWR) (length uint64, why string) {
	if int(typ) >= len(sendOpcodes) || sendOpcodes[typ]&(1<<wr.Opcode) == 0 {
		return 0, fmt.Sprintf("opcode %d not valid on a %v QP", wr.Opcode, typ)
	}
	if typ == verbs.QPTypeUD && (wr.AH == nil || !wr.AH.DGID.IsValid()) {
		return 0, "UD WR without an address handle"
	}
	inline := wr.Flags&verbs.SendInline != 0
	switch wr.Opcode {
	case verbs.WRLocalInv, verbs.WRBindMW, verbs.WRFlush, verbs.WRAtomicWrite:
		// No data for a local operation or FLUSH (rxe validate_send_wr for
		// BIND_MW); an ATOMIC_WRITE's 8 bytes are the WR's Swap.
		if len(wr.SGL) > 0 || inline {
			return 0, fmt.Sprintf("%s takes no SGEs and no inline data", wcOpcode(wr.Opcode))
		}
	}
	if f := wr.Flush; wr.Opcode == verbs.WRFlush &&
		(f.Type == 0 || f.Type&^(bth.FlushGlobal|bth.FlushPersistent) != 0 || f.Level > bth.FlushMR || f.Length > 1<<31) {
		return 0, fmt.Sprintf("FLUSH placement type %#x, selectivity level %d, length %d", f.Type, f.Level, f.Length)
	}
	if len(wr.SGL) > int(c.MaxSendSGE) {
		return 0, fmt.Sprintf("%d SGEs above max_send_sge %d", len(wr.SGL), c.MaxSendSGE)
	}
	for _, sg := range wr.SGL {
		length += uint64(sg.Size())
	}
	isAtomic := wr.Opcode == verbs.WRAtomicCmpAndSwp || wr.Opcode == verbs.WRAtomicFetchAndAdd
	switch {
	case length > 1<<31:
		return 0, fmt.Sprintf("message of %d bytes above 2^31", length)
	case isAtomic && length < 8:
		return 0, "atomic needs an 8-byte local buffer"
	case inline && (wr.Opcode == verbs.WRRDMARead || isAtomic):
		return 0, "inline data only for SEND and WRITE"
	case inline && length > uint64(c.MaxInlineData):
		return 0, fmt.Sprintf("%d inline bytes above max_inline_data %d", length, c.MaxInlineData)
	}
	return length, ""
}

// enqueue queues a valid wr (q.sq.mu held): ENOMEM when the queue is full,
// EINVAL when its inline data lies in no MR.
func (q *QP) enqueue(wr *verbs.SendWR, length uint64) error {
	const op = "ibv_post_send"
	s := &q.sq
	tail := s.tail.Load()
	if tail-s.head.Load() >= uint64(s.n) {
		return newErr(op, q.qpn, syscall.ENOMEM, "send queue full (max_send_wr %d)", s.n)
	}
	s.grow()
	w := s.slot(tail)
	w.wr = *wr
	w.sgl = append(w.sgl[:0], wr.SGL...)
	w.wr.SGL = w.sgl
	w.wr.AH = nil
	if wr.AH != nil {
		w.av = *wr.AH
		w.av.DGID = w.av.DGID.Unmap()
	}
	w.length = uint32(length)
	switch wr.Opcode {
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		w.length = 8
	case verbs.WRAtomicWrite:
		w.length = 8
		binary.NativeEndian.PutUint64(w.value[:], wr.Swap)
	case verbs.WRFlush:
		w.length = wr.Flush.Length
	}
	if wr.Flags&verbs.SendInline != 0 && !q.copyInline(w) {
		return newErr(op, q.qpn, syscall.EINVAL, "inline SGE outside any registered memory")
	}
	w.state = wqePosted
	s.tail.Store(tail + 1) // publishes w to the shard
	return nil
}

// copyInline copies w's data into w (IBV_SEND_INLINE), so the caller may reuse
// its buffer at once. Go has no raw pointers: the SGEs must still name
// registered memory, but its access rights are not checked.
func (q *QP) copyInline(w *sendWQE) bool {
	w.inline = w.inline[:0]
	for _, sg := range w.wr.SGL {
		r := q.e.cfg.Memory.LocalRegion(sg.LKey)
		var b []byte
		if r != nil {
			b = r.slice(sg.Addr, uint64(sg.Size()))
		}
		if b == nil {
			return false
		}
		w.inline = append(w.inline, b...)
	}
	return true
}

// PostRecv is ibv_post_recv on the QP's own receive queue: EINVAL with an SRQ
// (post there) and in RESET.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	const op = "ibv_post_recv"
	if q.e.closed.Load() {
		return 0, closedErr(op, q.qpn)
	}
	if q.rq == nil {
		return 0, newErr(op, q.qpn, syscall.EINVAL, "QP uses an SRQ")
	}
	st := verbs.QPState(q.state.Load())
	if st == verbs.QPSReset {
		return 0, newErr(op, q.qpn, syscall.EINVAL, "QP in state RESET")
	}
	n, err := q.rq.PostRecv(wrs)
	if err != nil {
		err = adoptErr(err, op, q.qpn)
	}
	if n > 0 {
		// Only ERR needs the shard, to flush the new WRs: a responder that
		// sent an RNR NAK waits for the requester's retry anyway.
		if verbs.QPState(q.state.Load()) == verbs.QPSErr {
			q.sh.wakeQP(q)
		}
	}
	return n, err
}

// sourcePortProbes bounds the ports a QP tries, rxe's own first, before it
// sends from the link's port. rxe's port is a 14-bit hash of the two QPNs, so
// processes sharing an address through roced (QPNs alike in each block, the
// peer's small) often derive one port; the second's bind is refused, and
// without the next ports its packets would all leave from 4791.
const sourcePortProbes = 8

// setSourcePort gives the QP rxe's source port p and sends from it when the
// link can (link.Link.SourcePort). When another socket holds p, a derived
// port (probe) moves to the next of rxe's range the link grants, at most
// sourcePortProbes in all: any source port is valid, and one of the QP's own
// keeps its flow apart. An explicit port (the address vector's) is p or
// the link's own.
func (q *QP) setSourcePort(p uint16, probe bool) {
	q.sport, q.wport = p, 0
	n := 1
	if probe {
		n = sourcePortProbes
	}
	for range n {
		if q.e.cfg.Link.SourcePort(p) {
			q.wport = p
			return
		}
		p = nextSourcePort(p)
	}
}

// nextSourcePort is the port after p in rxe's source port range,
// 0xC000-0xFFFF, wrapping around.
func nextSourcePort(p uint16) uint16 {
	if p < 0xC000 || p == 0xFFFF {
		return 0xC000
	}
	return p + 1
}

// srcPort is the UDP source port the QP's packets leave from.
func (q *QP) srcPort() uint16 {
	if q.wport != 0 {
		return q.wport
	}
	return q.e.port
}

// QPs returns a snapshot of every QP, for /debug/qps.
func (e *Engine) QPs() []verbs.QPInfo {
	if e.closed.Load() {
		return nil
	}
	// One command per shard: the snapshot waits at most one slice per shard,
	// however many QPs there are.
	byShard := make(map[*shard][]*QP)
	for _, q := range e.qps.all() {
		byShard[q.sh] = append(byShard[q.sh], q)
	}
	var out []verbs.QPInfo
	for s, qs := range byShard {
		var part []verbs.QPInfo
		if !s.call(func() {
			for _, q := range qs {
				part = append(part, verbs.QPInfo{QPN: q.qpn, Type: q.typ, State: q.attr.State, DestQPN: q.attr.DestQPN,
					Peer: q.attr.AV.DGID, SrcPort: q.srcPort(), NextPSN: q.win.nextPSN, AckedPSN: q.win.headPSN,
					ExpectedPSN: q.resp.psn, MSN: q.resp.msn, SendQueued: int(q.sq.loadTail() - q.win.head), Backoff: q.comp.backoff,
					TxPackets: q.cnt.txPackets.Load(), RxPackets: q.cnt.rxPackets.Load(),
					Retransmits: q.cnt.retransmits.Load(), Timeouts: q.cnt.timeouts.Load()})
				if c := q.cc; c != nil {
					in := &part[len(part)-1]
					in.CCRate, in.CCTargetRate, in.CCAlpha, in.CCCuts = c.rp.Rate(), c.rp.TargetRate(), c.rp.Alpha(), c.rp.Cuts()
				}
			}
		}) {
			continue
		}
		out = append(out, part...)
	}
	return out
}
