package transport

import "github.com/goroce/goroce/internal/core/verbs"

// qpTransition is a cell of the IBTA modify-QP table (IBA 11.2.4.2, Table 91;
// the kernel's qp_state_table): whether the transition is legal and, per QP
// type, which attributes it requires and allows.
type qpTransition struct {
	valid bool
	req   [3]verbs.QPAttrMask // indexed by typeIndex: RC, UC, UD
	opt   [3]verbs.QPAttrMask
}

func typeIndex(t verbs.QPType) int {
	switch t {
	case verbs.QPTypeRC:
		return 0
	case verbs.QPTypeUC:
		return 1
	default:
		return 2
	}
}

// per builds a per-type mask array in RC, UC, UD order.
func per(rc, uc, ud verbs.QPAttrMask) [3]verbs.QPAttrMask { return [3]verbs.QPAttrMask{rc, uc, ud} }

// numQPStates is the number of QP states, RESET to ERR.
const numQPStates = verbs.QPSErr + 1

var qpStateTable = func() (t [numQPStates][numQPStates]qpTransition) {
	ok := qpTransition{valid: true}
	for s := verbs.QPSReset; s < numQPStates; s++ {
		t[s][verbs.QPSReset] = ok // any state may go to RESET and to ERR
		t[s][verbs.QPSErr] = ok
	}
	const (
		pkey   = verbs.QPAttrPKeyIndex
		port   = verbs.QPAttrPort
		qkey   = verbs.QPAttrQKey
		access = verbs.QPAttrAccessFlags
		cur    = verbs.QPAttrCurState
		alt    = verbs.QPAttrAltPath
		mig    = verbs.QPAttrPathMigState
		rnrMin = verbs.QPAttrMinRNRTimer
	)
	t[verbs.QPSReset][verbs.QPSInit] = qpTransition{valid: true,
		req: per(pkey|port|access, pkey|port|access, pkey|port|qkey)}
	t[verbs.QPSInit][verbs.QPSInit] = qpTransition{valid: true,
		opt: per(pkey|port|access, pkey|port|access, pkey|port|qkey)}
	t[verbs.QPSInit][verbs.QPSRTR] = qpTransition{valid: true,
		req: per(verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|verbs.QPAttrMaxDestRDAtomic|rnrMin,
			verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN, 0),
		opt: per(alt|access|pkey, alt|access|pkey, pkey|qkey)}
	t[verbs.QPSRTR][verbs.QPSRTS] = qpTransition{valid: true,
		req: per(verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|verbs.QPAttrMaxQPRDAtomic,
			verbs.QPAttrSQPSN, verbs.QPAttrSQPSN),
		opt: per(cur|alt|access|rnrMin|mig, cur|alt|access|mig, cur|qkey)}
	t[verbs.QPSRTS][verbs.QPSRTS] = qpTransition{valid: true,
		opt: per(cur|access|alt|mig|rnrMin, cur|access|alt|mig, cur|qkey)}
	t[verbs.QPSRTS][verbs.QPSSQD] = qpTransition{valid: true,
		opt: per(verbs.QPAttrEnSQDAsyncNotify, verbs.QPAttrEnSQDAsyncNotify, verbs.QPAttrEnSQDAsyncNotify)}
	t[verbs.QPSSQD][verbs.QPSRTS] = qpTransition{valid: true,
		opt: per(cur|alt|access|rnrMin|mig, cur|alt|access|mig, cur|qkey)}
	t[verbs.QPSSQD][verbs.QPSSQD] = qpTransition{valid: true,
		opt: per(port|verbs.QPAttrAV|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrMaxQPRDAtomic|
			verbs.QPAttrMaxDestRDAtomic|alt|access|pkey|rnrMin|mig,
			verbs.QPAttrAV|alt|access|pkey|mig, pkey|qkey)}
	// SQE exists only for unreliable services; RC has no legal SQE->RTS.
	t[verbs.QPSSQE][verbs.QPSRTS] = qpTransition{valid: true, opt: per(0, cur|access, cur|qkey)}
	return t
}()

// modifyOK is ib_modify_qp_is_ok: it reports whether moving a QP of type typ
// from cur to next with mask is legal, and if not, why.
func modifyOK(cur, next verbs.QPState, typ verbs.QPType, mask verbs.QPAttrMask) (bool, string) {
	if cur >= numQPStates || next >= numQPStates {
		return false, "state out of range"
	}
	if mask&verbs.QPAttrCurState != 0 && cur != verbs.QPSRTR && cur != verbs.QPSRTS && cur != verbs.QPSSQD && cur != verbs.QPSSQE {
		return false, "CUR_STATE only allowed from RTR, RTS, SQD or SQE"
	}
	tr := &qpStateTable[cur][next]
	if !tr.valid || (typ == verbs.QPTypeRC && cur == verbs.QPSSQE && next == verbs.QPSRTS) {
		return false, "illegal transition " + cur.String() + "->" + next.String()
	}
	i := typeIndex(typ)
	if missing := tr.req[i] &^ mask; missing != 0 {
		return false, "missing required attributes " + missing.String()
	}
	if extra := mask &^ (tr.req[i] | tr.opt[i] | verbs.QPAttrState); extra != 0 {
		return false, "attributes not allowed in this transition " + extra.String()
	}
	return true, ""
}
