package roce

import (
	"fmt"
	"math/bits"
	"syscall"
	"testing"
	"time"
)

// ibtaTable is the modify-QP table of IBA 11.2.4.2 (libibverbs / the kernel's
// qp_state_table), written out here independently of the engine's copy so the test
// checks the engine against the spec. req and opt are per QP type. ALT_PATH and
// PATH_MIG_STATE (automatic path migration) are left out: RoCE has no alternate path.
type ibtaCell struct{ req, opt map[QPType]QPAttrMask }

func ibtaTable() map[[2]QPState]ibtaCell {
	const (
		pkey   = QPAttrPKeyIndex
		port   = QPAttrPort
		qkey   = QPAttrQKey
		access = QPAttrAccessFlags
		cur    = QPAttrCurState
		rnr    = QPAttrMinRNRTimer
	)
	both := func(rc, ud QPAttrMask) map[QPType]QPAttrMask {
		return map[QPType]QPAttrMask{QPTypeRC: rc, QPTypeUD: ud}
	}
	t := map[[2]QPState]ibtaCell{}
	for _, s := range []QPState{QPSReset, QPSInit, QPSRTR, QPSRTS, QPSSQD, QPSSQE, QPSErr} {
		t[[2]QPState{s, QPSReset}] = ibtaCell{both(0, 0), both(0, 0)}
		t[[2]QPState{s, QPSErr}] = ibtaCell{both(0, 0), both(0, 0)}
	}
	t[[2]QPState{QPSReset, QPSInit}] = ibtaCell{both(pkey|port|access, pkey|port|qkey), both(0, 0)}
	t[[2]QPState{QPSInit, QPSInit}] = ibtaCell{both(0, 0), both(pkey|port|access, pkey|port|qkey)}
	t[[2]QPState{QPSInit, QPSRTR}] = ibtaCell{
		both(QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRDAtomic|rnr, 0),
		both(access|pkey, pkey|qkey)}
	t[[2]QPState{QPSRTR, QPSRTS}] = ibtaCell{
		both(QPAttrSQPSN|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRDAtomic, QPAttrSQPSN),
		both(cur|access|rnr, cur|qkey)}
	t[[2]QPState{QPSRTS, QPSRTS}] = ibtaCell{both(0, 0), both(cur|access|rnr, cur|qkey)}
	t[[2]QPState{QPSRTS, QPSSQD}] = ibtaCell{both(0, 0), both(QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify)}
	t[[2]QPState{QPSSQD, QPSRTS}] = ibtaCell{both(0, 0), both(cur|access|rnr, cur|qkey)}
	// SQE -> RTS resumes a UD (or UC) send queue after a local send error; an RC QP
	// never enters SQE, so its half of the cell is never exercised.
	t[[2]QPState{QPSSQE, QPSRTS}] = ibtaCell{both(0, 0), both(0, cur|qkey)}
	t[[2]QPState{QPSSQD, QPSSQD}] = ibtaCell{both(0, 0), both(
		port|QPAttrAV|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRDAtomic|QPAttrMaxDestRDAtomic|access|pkey|rnr,
		pkey|qkey)}
	return t
}

// allAttrs are the mask bits the table test adds and removes (STATE is always set).
var allAttrs = []QPAttrMask{QPAttrCurState, QPAttrEnSQDAsyncNotify, QPAttrAccessFlags, QPAttrPKeyIndex,
	QPAttrPort, QPAttrQKey, QPAttrAV, QPAttrPathMTU, QPAttrTimeout, QPAttrRetryCnt, QPAttrRNRRetry,
	QPAttrRQPSN, QPAttrMaxQPRDAtomic, QPAttrMinRNRTimer, QPAttrSQPSN, QPAttrMaxDestRDAtomic, QPAttrDestQPN}

// validAttr returns attribute values that are each acceptable on their own, so that
// only the mask decides legality.
func validAttr(to QPState) QPAttr {
	return QPAttr{
		State:           to,
		CurState:        0, // set per case
		AccessFlags:     AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead,
		PKeyIndex:       0,
		PortNum:         1,
		QKey:            0x11111111,
		AV:              AddressVector{DGID: addrB, SGIDIndex: 1, HopLimit: 64, IsGlobal: true},
		PathMTU:         MTU1024,
		Timeout:         14,
		RetryCnt:        7,
		RNRRetry:        7,
		RQPSN:           0x123,
		SQPSN:           0x456,
		MaxRDAtomic:     1,
		MaxDestRDAtomic: 1,
		MinRNRTimer:     12,
		DestQPN:         0x22,
	}
}

// path is how the test brings a fresh QP to each starting state.
var path = map[QPState][]QPState{
	QPSReset: {},
	QPSInit:  {QPSInit},
	QPSRTR:   {QPSInit, QPSRTR},
	QPSRTS:   {QPSInit, QPSRTR, QPSRTS},
	QPSSQD:   {QPSInit, QPSRTR, QPSRTS, QPSSQD},
	QPSErr:   {QPSErr},
}

func maskFor(tbl map[[2]QPState]ibtaCell, from, to QPState, typ QPType) QPAttrMask {
	return tbl[[2]QPState{from, to}].req[typ] | QPAttrState
}

func driveTo(t testing.TB, qp *QP, typ QPType, target QPState) {
	t.Helper()
	tbl := ibtaTable()
	from := QPSReset
	for _, s := range path[target] {
		a := validAttr(s)
		noErr(t, qp.Modify(&a, maskFor(tbl, from, s, typ)))
		from = s
	}
	if st := must[QPState](t)(qp.State()); st != target {
		t.Fatalf("drove QP to %v, Query says %v", target, st)
	}
}

type transitionCase struct {
	name  string
	mask  QPAttrMask
	legal bool
}

// transitionCases lists, for one (from, to, type): the required set alone, the
// required set plus each optional attribute, the required set minus each required
// attribute, and the required set plus each attribute that is neither.
func transitionCases(from, to QPState, typ QPType) []transitionCase {
	cell, ok := ibtaTable()[[2]QPState{from, to}]
	req, opt := cell.req[typ], cell.opt[typ]
	var cs []transitionCase
	cs = append(cs, transitionCase{"required only", req | QPAttrState, ok})
	if !ok {
		return cs
	}
	for _, b := range allAttrs {
		name := fmt.Sprintf("bit %d", bits.TrailingZeros32(uint32(b)))
		switch {
		case req&b != 0:
			cs = append(cs, transitionCase{"missing " + name, (req &^ b) | QPAttrState, false})
		case opt&b != 0:
			cs = append(cs, transitionCase{"optional " + name, req | b | QPAttrState, true})
		default:
			cs = append(cs, transitionCase{"forbidden " + name, req | b | QPAttrState, false})
		}
	}
	return cs
}

// driveToSQE brings a fresh UD QP to SQE the only way a QP gets there: through RTS
// and a local send error (a message above the port's active MTU completes with
// LOC_LEN_ERR), and takes that completion off c.
func driveToSQE(t *testing.T, pd *PD, qp *QP, c *CQ) {
	t.Helper()
	driveTo(t, qp, QPTypeUD, QPSRTS)
	pa := must[PortAttr](t)(pd.dev.QueryPort(1))
	buf := make([]byte, 2*pa.ActiveMTU.Bytes())
	mr := must[*MR](t)(pd.RegMR(buf, AccessLocalWrite))
	defer mr.Close()
	ah := must[*AH](t)(pd.CreateAH(AHAttr{DGID: addrB, SGIDIndex: uint8(pd.dev.GIDIndex()), HopLimit: 64, IsGlobal: true}))
	defer ah.Close()
	_ = must[int](t)(qp.PostSend([]SendWR{{WRID: 99, Opcode: WRSend, Flags: SendSignaled,
		SGL: []SGE{{Addr: mr.Addr(), Length: uint32(len(buf)), LKey: mr.LKey()}}, AH: ah.AV(), RemoteQPN: 0x22, RemoteQKey: 0x11111111}}))
	if wc := pollN(t, c, 1, 5*time.Second)[0]; wc.WRID != 99 || wc.Status != WCLocLenErr {
		t.Fatalf("oversize UD send: %+v (%v), want LOC_LEN_ERR", wc, wc.Status)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if st := must[QPState](t)(qp.State()); st == QPSSQE {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("QP in %v after a local send error, want SQE", st)
		}
	}
}

// TestModifyQPTransitionTable runs every transition × attribute mask case for RC and
// UD through the roce API: legal ones succeed and reach the target state; illegal ones
// fail with EINVAL and Query shows the QP exactly as before. SQE is a starting state
// for UD only: an RC QP never enters it (its send errors move it to ERR).
func TestModifyQPTransitionTable(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	c := must[*CQ](t)(d.CreateCQ(256))
	states := []QPState{QPSReset, QPSInit, QPSRTR, QPSRTS, QPSSQD, QPSSQE, QPSErr}
	var legal, illegal int
	for _, typ := range []QPType{QPTypeRC, QPTypeUD} {
		for _, from := range states {
			if from == QPSSQE && typ != QPTypeUD {
				continue
			}
			for _, to := range states {
				for _, tc := range transitionCases(from, to, typ) {
					name := fmt.Sprintf("%v/%v->%v/%s", typ, from, to, tc.name)
					t.Run(name, func(t *testing.T) {
						qp := must[*QP](t)(pd.CreateQP(QPInitAttr{Type: typ, SendCQ: c, RecvCQ: c,
							Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}))
						defer qp.Close()
						if from == QPSSQE {
							driveToSQE(t, pd, qp, c)
						} else {
							driveTo(t, qp, typ, from)
						}
						before := must[QPAttr](t)(qp.Query())
						a := validAttr(to)
						a.CurState = from
						err := qp.Modify(&a, tc.mask)
						after := must[QPAttr](t)(qp.Query())
						if tc.legal {
							legal++
							if err != nil {
								t.Fatalf("mask %v: %v", tc.mask, err)
							}
							if after.State != to {
								t.Fatalf("state %v after modify, want %v", after.State, to)
							}
							return
						}
						illegal++
						wantErrno(t, err, syscall.EINVAL)
						if after != before {
							t.Fatalf("failed modify changed the QP:\nbefore %+v\nafter  %+v", before, after)
						}
					})
				}
			}
		}
	}
	t.Logf("%d legal and %d illegal transition cases", legal, illegal)
}

func TestModifyQPAttributeRanges(t *testing.T) {
	d := pipeDevice(t, WithLimits(Limits{MaxQPRdAtom: 4, MaxQPInitRdAtom: 4}))
	pd := must[*PD](t)(d.AllocPD())
	c := must[*CQ](t)(d.CreateCQ(16))
	tbl := ibtaTable()
	tests := []struct {
		name string
		from QPState
		to   QPState
		mod  func(a *QPAttr)
	}{
		{"port other than 1", QPSReset, QPSInit, func(a *QPAttr) { a.PortNum = 2 }},
		{"pkey index outside table", QPSReset, QPSInit, func(a *QPAttr) { a.PKeyIndex = 1 }},
		{"unknown access flag", QPSReset, QPSInit, func(a *QPAttr) { a.AccessFlags |= 1 << 10 }},
		{"zero-based is no QP access flag", QPSReset, QPSInit, func(a *QPAttr) { a.AccessFlags |= AccessZeroBased }},
		{"path mtu code 0", QPSInit, QPSRTR, func(a *QPAttr) { a.PathMTU = 0 }},
		{"path mtu code 6", QPSInit, QPSRTR, func(a *QPAttr) { a.PathMTU = 6 }},
		{"av without grh", QPSInit, QPSRTR, func(a *QPAttr) { a.AV.IsGlobal = false }},
		{"av from default gid", QPSInit, QPSRTR, func(a *QPAttr) { a.AV.SGIDIndex = 0 }},
		{"max_dest_rd_atomic above device", QPSInit, QPSRTR, func(a *QPAttr) { a.MaxDestRDAtomic = 5 }},
		{"max_rd_atomic above device", QPSRTR, QPSRTS, func(a *QPAttr) { a.MaxRDAtomic = 5 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			qp := must[*QP](t)(pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: c, RecvCQ: c,
				Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}))
			defer qp.Close()
			driveTo(t, qp, QPTypeRC, tc.from)
			before := must[QPAttr](t)(qp.Query())
			a := validAttr(tc.to)
			tc.mod(&a)
			wantErrno(t, qp.Modify(&a, maskFor(tbl, tc.from, tc.to, QPTypeRC)), syscall.EINVAL)
			if after := must[QPAttr](t)(qp.Query()); after != before {
				t.Fatalf("failed modify changed the QP")
			}
		})
	}
}
