package transport

// qpTransition is one cell of the IBTA modify-QP table: whether the
// transition is legal and, per QP type, which attributes it requires and
// which it allows (IBA 11.2.4.2, Table 91; the kernel's qp_state_table in
// drivers/infiniband/core/verbs.c).
type qpTransition struct {
	valid bool
	req   [3]QPAttrMask // indexed by typeIndex: RC, UC, UD
	opt   [3]QPAttrMask
}

func typeIndex(t QPType) int {
	switch t {
	case QPTypeRC:
		return 0
	case QPTypeUC:
		return 1
	default:
		return 2
	}
}

// per builds a per-type mask array in RC, UC, UD order.
func per(rc, uc, ud QPAttrMask) [3]QPAttrMask { return [3]QPAttrMask{rc, uc, ud} }

var qpStateTable = func() (t [numQPStates][numQPStates]qpTransition) {
	ok := qpTransition{valid: true}
	for s := QPSReset; s < numQPStates; s++ {
		t[s][QPSReset] = ok // any state may go to RESET and to ERR
		t[s][QPSErr] = ok
	}
	const (
		pkey   = QPAttrPKeyIndex
		port   = QPAttrPort
		qkey   = QPAttrQKey
		access = QPAttrAccessFlags
		cur    = QPAttrCurState
		alt    = QPAttrAltPath
		mig    = QPAttrPathMigState
		rnrMin = QPAttrMinRNRTimer
	)
	t[QPSReset][QPSInit] = qpTransition{valid: true,
		req: per(pkey|port|access, pkey|port|access, pkey|port|qkey)}
	t[QPSInit][QPSInit] = qpTransition{valid: true,
		opt: per(pkey|port|access, pkey|port|access, pkey|port|qkey)}
	t[QPSInit][QPSRTR] = qpTransition{valid: true,
		req: per(QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRDAtomic|rnrMin,
			QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN, 0),
		opt: per(alt|access|pkey, alt|access|pkey, pkey|qkey)}
	t[QPSRTR][QPSRTS] = qpTransition{valid: true,
		req: per(QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrSQPSN|QPAttrMaxQPRDAtomic,
			QPAttrSQPSN, QPAttrSQPSN),
		opt: per(cur|alt|access|rnrMin|mig, cur|alt|access|mig, cur|qkey)}
	t[QPSRTS][QPSRTS] = qpTransition{valid: true,
		opt: per(cur|access|alt|mig|rnrMin, cur|access|alt|mig, cur|qkey)}
	t[QPSRTS][QPSSQD] = qpTransition{valid: true,
		opt: per(QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify)}
	t[QPSSQD][QPSRTS] = qpTransition{valid: true,
		opt: per(cur|alt|access|rnrMin|mig, cur|alt|access|mig, cur|qkey)}
	t[QPSSQD][QPSSQD] = qpTransition{valid: true,
		opt: per(port|QPAttrAV|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRDAtomic|
			QPAttrMaxDestRDAtomic|alt|access|pkey|rnrMin|mig,
			QPAttrAV|alt|access|pkey|mig, pkey|qkey)}
	// SQE exists only for unreliable services; RC has no legal SQE->RTS.
	t[QPSSQE][QPSRTS] = qpTransition{valid: true, opt: per(0, cur|access, cur|qkey)}
	return t
}()

// modifyOK is ib_modify_qp_is_ok: it reports whether moving a QP of type typ
// from cur to next with mask is legal, and if not, why.
func modifyOK(cur, next QPState, typ QPType, mask QPAttrMask) (bool, string) {
	if cur >= numQPStates || next >= numQPStates {
		return false, "state out of range"
	}
	if mask&QPAttrCurState != 0 && cur != QPSRTR && cur != QPSRTS && cur != QPSSQD && cur != QPSSQE {
		return false, "CUR_STATE only allowed from RTR, RTS, SQD or SQE"
	}
	tr := &qpStateTable[cur][next]
	if !tr.valid || (typ == QPTypeRC && cur == QPSSQE && next == QPSRTS) {
		return false, "illegal transition " + cur.String() + "->" + next.String()
	}
	i := typeIndex(typ)
	if missing := tr.req[i] &^ mask; missing != 0 {
		return false, "missing required attributes " + missing.String()
	}
	if extra := mask &^ (tr.req[i] | tr.opt[i] | QPAttrState); extra != 0 {
		return false, "attributes not allowed in this transition " + extra.String()
	}
	return true, ""
}

var qpAttrMaskNames = [...]string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS",
	"PKEY_INDEX", "PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN",
	"MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC",
	"PATH_MIG_STATE", "CAP", "DEST_QPN"}

// String lists the IBV_QP_ names of the bits in m, joined by "|".
func (m QPAttrMask) String() string {
	s := ""
	for i, n := range qpAttrMaskNames {
		if m&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	if rest := m &^ (1<<len(qpAttrMaskNames) - 1); rest != 0 {
		if s != "" {
			s += "|"
		}
		s += "0x" + uitoa16(uint32(rest))
	}
	if s == "" {
		return "0"
	}
	return s
}

func uitoa16(v uint32) string {
	const digits = "0123456789abcdef"
	var b [8]byte
	i := len(b)
	for {
		i--
		b[i] = digits[v&15]
		v >>= 4
		if v == 0 {
			return string(b[i:])
		}
	}
}
