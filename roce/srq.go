package roce

import (
	"syscall"

	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/verbs"
)

// SRQInitAttr holds the creation attributes of an SRQ (struct ibv_srq_init_attr).
// Attr.Limit is ignored at creation, as ibv_create_srq(3) says; arm with Modify.
type SRQInitAttr struct {
	Attr SRQAttr // attr: MaxWR and MaxSGE; Limit is ignored
}

// SRQ is a shared receive queue (struct ibv_srq) for QPs of its PD.
type SRQ struct {
	pd  *PD
	q   *srq.Queue
	id  uint32
	obj string
}

// CreateSRQ is ibv_create_srq: MaxWR in [1, max_srq_wr] and MaxSGE in [1, max_srq_sge]
// (EINVAL); ENOMEM when max_srq SRQs exist. Query reports the actual sizes.
func (pd *PD) CreateSRQ(attr SRQInitAttr) (*SRQ, error) {
	const op = "ibv_create_srq"
	d := pd.dev
	obj := d.obj("pd", pd.id)
	if attr.Attr.MaxSGE == 0 {
		return nil, newErr(op, obj, syscall.EINVAL, "max_sge 0")
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	if !reserve(&d.nSRQ, d.limits.MaxSRQ) {
		pd.release()
		return nil, newErr(op, obj, syscall.ENOMEM, "max_srq %d reached", d.limits.MaxSRQ)
	}
	a := attr.Attr
	q, err := srq.New(&a, d.srqCaps())
	if err != nil {
		d.nSRQ.Add(-1)
		pd.release()
		return nil, wrapErr(op, obj, -1, err)
	}
	s := &SRQ{pd: pd, q: q, id: d.ids.Add(1)}
	s.obj = d.obj("srq", s.id)
	q.SetLimitHandler(s.limitReached)
	d.objMu.Lock()
	d.srqs[q] = s
	d.objMu.Unlock()
	return s, nil
}

func (d *Device) srqCaps() srq.Caps {
	return srq.Caps{MaxWR: uint32(d.limits.MaxSRQWR), MaxSGE: uint32(d.limits.MaxSRQSGE), Resize: !d.limits.NoSRQResize}
}

// limitReached raises SRQ_LIMIT_REACHED, once per arming (srq disarms the queue before
// calling it), on an engine shard or in Modify; it only counts and queues an event.
func (s *SRQ) limitReached() {
	s.pd.dev.eng.Stats().SRQLimitEvents.Add(1)
	s.pd.dev.emit(AsyncEvent{Type: EventSRQLimitReached, SRQ: s})
}

// Handle returns the SRQ's number (srq_num), used in error messages and events.
func (s *SRQ) Handle() uint32 { return s.id }

// PostRecv is ibv_post_srq_recv, with QP.PostSend's (n, error) convention (WRs before a
// bad one stay posted). EINVAL for more SGEs than max_sge, ENOMEM when the SRQ is full.
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	const op = "ibv_post_srq_recv"
	if s.pd.dev.closed.Load() {
		return 0, closedErr(op, s.obj)
	}
	n, err := s.q.PostRecv(wrs)
	if err != nil {
		return n, wrapErr(op, s.obj, n, err)
	}
	return n, nil
}

// Modify is ibv_modify_srq. SRQMaxWR resizes the queue (ENOSYS without
// IBV_DEVICE_SRQ_RESIZE; EINVAL below the WRs outstanding or above max_srq_wr);
// SRQLimit arms the limit event (0 disarms; EINVAL above max_wr). An invalid attribute
// changes nothing. The actual values are written back into attr.
func (s *SRQ) Modify(attr *SRQAttr, mask SRQAttrMask) error {
	const op = "ibv_modify_srq"
	if s.pd.dev.closed.Load() {
		return closedErr(op, s.obj)
	}
	if attr == nil {
		return newErr(op, s.obj, syscall.EINVAL, "nil attr")
	}
	return wrapErr(op, s.obj, -1, s.q.Modify((*verbs.SRQAttr)(attr), mask))
}

// Query is ibv_query_srq: max_wr, max_sge and the armed limit (0 when disarmed).
func (s *SRQ) Query() (SRQAttr, error) {
	const op = "ibv_query_srq"
	if s.pd.dev.closed.Load() {
		return SRQAttr{}, closedErr(op, s.obj)
	}
	a, err := s.q.Query()
	return SRQAttr(a), wrapErr(op, s.obj, -1, err)
}

// Close is ibv_destroy_srq: EBUSY, changing nothing, while a QP uses the SRQ.
func (s *SRQ) Close() error {
	const op = "ibv_destroy_srq"
	if err := s.q.Close(); err != nil {
		return wrapErr(op, s.obj, -1, err)
	}
	d := s.pd.dev
	d.nSRQ.Add(-1)
	d.objMu.Lock()
	delete(d.srqs, s.q)
	d.objMu.Unlock()
	s.pd.release()
	return nil
}
