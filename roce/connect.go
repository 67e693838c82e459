package roce

import "fmt"

// ConnectAttr is what a QP needs to go from RESET to RTS with one peer, gathered as
// ibv_rc_pingpong's pp_connect_ctx, perftest's ctx_connect and rdma_cm's
// rdma_init_qp_attr fill it in, so every program makes the same ibv_modify_qp calls
// with the same masks. Fields a QP type does not use are ignored: UD uses only QKey and
// SQPSN, UC no RC timers or depths.
type ConnectAttr struct {
	// INIT. The P_Key index is 0 and the port 1, the only ones a device has.
	AccessFlags Access // RC, UC: the remote access the QP grants (qp_access_flags)
	QKey        uint32 // UD

	// RTR.
	AV              AddressVector // RC, UC: the path to the peer (ah_attr)
	PathMTU         MTU           // RC, UC
	DestQPN         uint32        // RC, UC: the peer's QPN (dest_qp_num)
	RQPSN           uint32        // RC, UC: the first PSN the peer sends (rq_psn)
	MaxDestRDAtomic uint8         // RC: READs/atomics the QP answers at once
	MinRNRTimer     uint8         // RC: the RNR NAK timer code the QP asks for

	// RTS.
	SQPSN       uint32 // the first PSN the QP sends (sq_psn)
	Timeout     uint8  // RC: local ACK timeout code, 4.096 µs × 2^Timeout
	RetryCnt    uint8  // RC: 7 is infinite
	RNRRetry    uint8  // RC: 7 is infinite
	MaxRDAtomic uint8  // RC: READs/atomics the QP has outstanding at once
}

// Init is ibv_modify_qp to INIT with the attributes libibverbs requires for the QP's
// type: P_Key index 0, port 1, and a's access flags (RC, UC) or Q_Key (UD).
func (q *QP) Init(a *ConnectAttr) error {
	attr := QPAttr{State: QPSInit, PKeyIndex: 0, PortNum: 1}
	mask := QPAttrState | QPAttrPKeyIndex | QPAttrPort
	if q.Type() == QPTypeUD {
		attr.QKey = a.QKey
		mask |= QPAttrQKey
	} else {
		attr.AccessFlags = a.AccessFlags
		mask |= QPAttrAccessFlags
	}
	return q.modifyTo(&attr, mask)
}

// Connect moves the QP to RTS with a, through INIT first from RESET, then RTR and RTS,
// each with exactly the attributes and mask libibverbs requires for the QP's type (IBA
// 11.2.4.2). A QP already past INIT is EINVAL; an error leaves the QP in the last state
// reached.
func (q *QP) Connect(a *ConnectAttr) error {
	st, err := q.State()
	if err != nil {
		return err
	}
	if st == QPSReset {
		if err := q.Init(a); err != nil {
			return err
		}
	}
	rtr := QPAttr{State: QPSRTR}
	mask := QPAttrState
	if q.Type() != QPTypeUD {
		rtr.AV, rtr.PathMTU, rtr.DestQPN, rtr.RQPSN = a.AV, a.PathMTU, a.DestQPN, a.RQPSN
		mask |= QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
	}
	if q.Type() == QPTypeRC {
		rtr.MaxDestRDAtomic, rtr.MinRNRTimer = a.MaxDestRDAtomic, a.MinRNRTimer
		mask |= QPAttrMaxDestRDAtomic | QPAttrMinRNRTimer
	}
	if err := q.modifyTo(&rtr, mask); err != nil {
		return err
	}
	rts := QPAttr{State: QPSRTS, SQPSN: a.SQPSN}
	mask = QPAttrState | QPAttrSQPSN
	if q.Type() == QPTypeRC {
		rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRDAtomic = a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRDAtomic
		mask |= QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRDAtomic
	}
	return q.modifyTo(&rts, mask)
}

// modifyTo is Modify naming the target state in its error, as the stock tools do.
func (q *QP) modifyTo(attr *QPAttr, mask QPAttrMask) error {
	if err := q.Modify(attr, mask); err != nil {
		return fmt.Errorf("modify QP to %v: %w", attr.State, err)
	}
	return nil
}
