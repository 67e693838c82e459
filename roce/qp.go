package roce

import (
	"fmt"
	"net/netip"
	"sync"
	"syscall"

	"github.com/goroce/goroce/internal/core/attach"
	"github.com/goroce/goroce/internal/core/transport"
	"github.com/goroce/goroce/internal/core/verbs"
)

// QPInitAttr holds the creation attributes of a QP (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Type     QPType // qp_type: QPTypeRC, QPTypeUC or QPTypeUD
	SendCQ   *CQ    // send_cq: completions of send WRs
	RecvCQ   *CQ    // recv_cq: completions of receive WRs (may be SendCQ)
	SRQ      *SRQ   // srq, optional: receive from this SRQ instead of an own receive queue
	Cap      QPCap  // cap: queue sizes, checked against the device limits
	SQSigAll bool   // sq_sig_all: every send WR completes signaled, whatever its flags
}

// QP is a queue pair (struct ibv_qp), a handle on the engine's QP that holds the CQ,
// SRQ and PD references (destroying them is EBUSY while the QP lives).
type QP struct {
	pd   *PD
	qp   *transport.QP
	qpn  uint32
	obj  string
	init QPInitAttr

	// mu guards: closed.
	mu     sync.Mutex
	closed bool

	mcast map[netip.Addr]bool // the groups attached; Device.mcMu guards
}

// CreateQP is ibv_create_qp; the QP starts in RESET. EINVAL for a missing CQ, a CQ or
// SRQ of another device or PD, a type other than RC, UC and UD, or caps above the
// device limits (max_qp_wr, max_sge, max_inline_data); ENOMEM when max_qp QPs exist.
// Query reports the actual caps.
func (pd *PD) CreateQP(attr QPInitAttr) (*QP, error) {
	const op = "ibv_create_qp"
	d := pd.dev
	obj := d.obj("pd", pd.id)
	if err := d.checkQPInit(op, obj, pd, &attr); err != nil {
		return nil, err
	}
	ti := transport.QPInitAttr{
		Type:     attr.Type,
		SendCQ:   attr.SendCQ.queue(),
		RecvCQ:   attr.RecvCQ.queue(),
		Cap:      verbs.QPCap(attr.Cap),
		SQSigAll: attr.SQSigAll,
		PD:       pd.id,
	}
	if attr.SRQ != nil {
		ti.SRQ = attr.SRQ.q
	}
	// The engine's checks first, so that a bad attribute is EINVAL even at max_qp.
	if err := d.eng.CheckQPInit(&ti); err != nil {
		return nil, wrapErr(op, obj, -1, err)
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	if !reserve(&d.nQP, d.limits.MaxQP) {
		pd.release()
		return nil, newErr(op, obj, syscall.ENOMEM, "max_qp %d reached", d.limits.MaxQP)
	}
	if err := d.charge(attach.KindQP, op, obj); err != nil {
		d.nQP.Add(-1)
		pd.release()
		return nil, err
	}
	// The engine attaches the QP to its CQs and SRQ (their Close: EBUSY).
	tq, err := d.eng.CreateQP(&ti)
	if err != nil {
		d.uncharge(attach.KindQP)
		d.nQP.Add(-1)
		pd.release()
		return nil, wrapErr(op, obj, -1, err)
	}
	q := &QP{pd: pd, qp: tq, qpn: tq.QPN(), init: attr}
	q.obj = fmt.Sprintf("qp %#x", q.qpn)
	d.objMu.Lock()
	d.qps[q.qpn] = q
	d.objMu.Unlock()
	return q, nil
}

// checkQPInit checks what only roce knows: the CQs and SRQ are of this device and PD.
func (d *Device) checkQPInit(op, obj string, pd *PD, a *QPInitAttr) error {
	switch {
	case a.SendCQ != nil && a.SendCQ.dev != d || a.RecvCQ != nil && a.RecvCQ.dev != d:
		return newErr(op, obj, syscall.EINVAL, "CQ belongs to another device")
	case a.SRQ != nil && a.SRQ.pd != pd:
		return newErr(op, obj, syscall.EINVAL, "SRQ belongs to another PD")
	}
	return nil
}

// QPN returns the QP number: the peer's DestQPN (RemoteQPN for UD).
func (q *QP) QPN() uint32 { return q.qpn }

func (q *QP) Type() QPType { return q.init.Type }

func (q *QP) InitAttr() QPInitAttr { return q.init }

func (q *QP) PD() *PD { return q.pd }

// Modify is ibv_modify_qp. It changes nothing on failure: EINVAL for an illegal
// transition, a missing required or a forbidden attribute for the transition and QP
// type (IBA 11.2.4.2, as libibverbs and rxe), or a value out of range (path MTU above
// max_mtu, max_rd_atomic or max_dest_rd_atomic above the device's, a P_Key index but 0,
// a port but 1, an address vector checkAV refuses, unknown access flags).
func (q *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	const op = "ibv_modify_qp"
	d := q.pd.dev
	if d.closed.Load() {
		return closedErr(op, q.obj)
	}
	if attr == nil {
		return newErr(op, q.obj, syscall.EINVAL, "nil attr")
	}
	a := *attr
	if err := d.checkQPAttr(op, q.obj, &a, mask); err != nil {
		return err
	}
	return wrapErr(op, q.obj, -1, q.qp.Modify(&a, mask))
}

// checkQPAttr checks what needs roce: the AV against the GID table, the access flags.
func (d *Device) checkQPAttr(op, obj string, a *QPAttr, mask QPAttrMask) error {
	if mask&QPAttrAV != 0 {
		if err := d.checkAV(op, obj, &a.AV, false); err != nil {
			return err
		}
	}
	if mask&QPAttrAccessFlags != 0 {
		acc, err := checkQPAccess(op, obj, a.AccessFlags)
		if err != nil {
			return err
		}
		a.AccessFlags = acc
	}
	return nil
}

// Query is ibv_query_qp: the QP's current attributes, state and caps included.
func (q *QP) Query() (QPAttr, error) {
	const op = "ibv_query_qp"
	if q.pd.dev.closed.Load() {
		return QPAttr{}, closedErr(op, q.obj)
	}
	a, _ := q.qp.Query()
	return a, nil
}

// State returns the QP's current state (Query().State).
func (q *QP) State() (QPState, error) {
	a, err := q.Query()
	return a.State, err
}

// PostSend is ibv_post_send: it queues the WRs in order up to the first bad one and
// returns how many it queued and an error whose Index is the bad WR (bad_wr). EINVAL
// for an opcode the QP type lacks, too many SGEs, inline data above max_inline_data, or
// a QP not in RTS (SQD and SQE queue); ENOMEM when the send queue is full. Data-path
// failures arrive as completions.
func (q *QP) PostSend(wrs []SendWR) (int, error) {
	if q.pd.dev.closed.Load() {
		return 0, closedErr("ibv_post_send", q.obj)
	}
	n, err := q.qp.PostSend(wrs)
	if err != nil {
		return n, wrapErr("ibv_post_send", q.obj, n, err)
	}
	return n, nil
}

// PostRecv is ibv_post_recv, with PostSend's (n, error) convention. EINVAL for a QP
// with an SRQ (post to the SRQ) or too many SGEs, ENOMEM when the queue is full.
func (q *QP) PostRecv(wrs []RecvWR) (int, error) {
	const op = "ibv_post_recv"
	if q.pd.dev.closed.Load() {
		return 0, closedErr(op, q.obj)
	}
	if q.init.SRQ != nil {
		if len(wrs) == 0 {
			return 0, nil
		}
		e := newErr(op, q.obj, syscall.EINVAL, "QP receives from an SRQ; use SRQ.PostRecv")
		e.Index = 0
		return 0, e
	}
	n, err := q.qp.PostRecv(wrs)
	if err != nil {
		return n, wrapErr(op, q.obj, n, err)
	}
	return n, nil
}

// Close is ibv_destroy_qp: outstanding WRs are discarded without completions, as in C,
// except that a UD QP in RTS first sends the datagrams posted to it, as a NIC would have
// by then; then the QP's CQs, SRQ and PD may be destroyed.
func (q *QP) Close() error {
	const op = "ibv_destroy_qp"
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return newClosedObjErr(op, q.obj, "qp")
	}
	d := q.pd.dev
	if err := q.qp.Destroy(); err != nil && !d.closed.Load() {
		return wrapErr(op, q.obj, -1, err)
	}
	q.closed = true
	d.forgetAllMcast(q) // the engine detached it from its groups
	d.objMu.Lock()
	delete(d.qps, q.qpn)
	d.objMu.Unlock()
	d.nQP.Add(-1)
	d.uncharge(attach.KindQP)
	q.pd.release()
	return nil
}
