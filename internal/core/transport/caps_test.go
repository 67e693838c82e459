package transport

import (
	"errors"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/verbs"
)

// TestCheckQPInit: the engine is the one layer that checks ibv_create_qp's type
// and caps against the device limits (rxe_qp_chk_init, rxe_qp_chk_cap); one row
// per rule.
func TestCheckQPInit(t *testing.T) {
	n := newNode(t, &nullLink{done: make(chan struct{})}, 1, func(c *Config) {
		c.MaxQPWR, c.MaxSGE, c.MaxInline = 16, 4, 64
	})
	defer n.close(t)
	s, err := srq.New(&verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}, srq.Caps{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	ok := QPInitAttr{Type: verbs.QPTypeRC, SendCQ: n.scq, RecvCQ: n.rcq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}}
	cases := []struct {
		name   string
		mod    func(a *QPInitAttr)
		detail string // "" when the attributes are good
	}{
		{"good", func(a *QPInitAttr) {}, ""},
		{"type other than RC, UC, UD", func(a *QPInitAttr) { a.Type = 9 }, "QP type QPType(9) not supported"},
		{"no send cq", func(a *QPInitAttr) { a.SendCQ = nil }, "send_cq and recv_cq are required"},
		{"no recv cq", func(a *QPInitAttr) { a.RecvCQ = nil }, "send_cq and recv_cq are required"},
		{"max_send_wr 0", func(a *QPInitAttr) { a.Cap.MaxSendWR = 0 }, "max_send_wr 0 not in [1..16] (max_qp_wr)"},
		{"max_send_wr above max_qp_wr", func(a *QPInitAttr) { a.Cap.MaxSendWR = 17 }, "max_send_wr 17 not in [1..16] (max_qp_wr)"},
		{"max_recv_wr 0", func(a *QPInitAttr) { a.Cap.MaxRecvWR = 0 }, "max_recv_wr 0 not in [1..16] (max_qp_wr)"},
		{"max_recv_wr above max_qp_wr", func(a *QPInitAttr) { a.Cap.MaxRecvWR = 1 << 31 }, "max_recv_wr 2147483648 not in [1..16] (max_qp_wr)"},
		{"max_send_sge above max_sge", func(a *QPInitAttr) { a.Cap.MaxSendSGE = 5 }, "max_send_sge 5 above max_sge 4"},
		{"max_recv_sge above max_sge", func(a *QPInitAttr) { a.Cap.MaxRecvSGE = 5 }, "max_recv_sge 5 above max_sge 4"},
		{"max_inline_data above the device's", func(a *QPInitAttr) { a.Cap.MaxInlineData = 65 }, "max_inline_data 65 above 64"},
		{"with an SRQ the receive caps are ignored (rxe_qp_chk_cap)", func(a *QPInitAttr) {
			a.SRQ, a.Cap.MaxRecvWR, a.Cap.MaxRecvSGE = s, 1<<20, 99
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := ok
			tc.mod(&a)
			err := n.e.CheckQPInit(&a)
			if tc.detail == "" {
				if err != nil {
					t.Fatalf("CheckQPInit = %v, want nil", err)
				}
				q, err := n.e.CreateQP(&a)
				if err != nil {
					t.Fatalf("CreateQP = %v after CheckQPInit passed", err)
				}
				if _, init := q.Query(); a.SRQ != nil && (init.Cap.MaxRecvWR != 0 || init.Cap.MaxRecvSGE != 0) {
					t.Fatalf("receive caps %+v kept on a QP with an SRQ", init.Cap)
				}
				if err := q.Destroy(); err != nil {
					t.Fatal(err)
				}
				return
			}
			want := "transport: ibv_create_qp: invalid argument: " + tc.detail
			if err == nil || err.Error() != want || !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("CheckQPInit = %v, want %s", err, want)
			}
			if _, cerr := n.e.CreateQP(&a); cerr == nil || cerr.Error() != want {
				t.Fatalf("CreateQP = %v, want the same error as CheckQPInit", cerr)
			}
		})
	}
}

// TestModifyChecksRDAtomicAgainstTheDevice: max_rd_atomic and max_dest_rd_atomic
// are checked against the limits the engine was configured with (the device's
// max_qp_init_rd_atom and max_qp_rd_atom), not a constant.
func TestModifyChecksRDAtomicAgainstTheDevice(t *testing.T) {
	n := newNode(t, &nullLink{done: make(chan struct{})}, 1, func(c *Config) { c.MaxRDAtomic, c.MaxDestRDAtomic = 2, 3 })
	defer n.close(t)
	q := n.createQP(t, verbs.QPTypeRC, rcOpts{})
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1}, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	rtr := verbs.QPAttr{State: verbs.QPSRTR, PathMTU: verbs.MTU1024, DestQPN: 0x12, AV: verbs.AddressVector{DGID: addrB.Addr()}, MaxDestRDAtomic: 4}
	rtrMask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN | verbs.QPAttrMaxDestRDAtomic | verbs.QPAttrMinRNRTimer
	err := q.Modify(&rtr, rtrMask)
	if err == nil || !errors.Is(err, syscall.EINVAL) || err.Error() != "transport: ibv_modify_qp "+qpObj(q.QPN())+": invalid argument: max_dest_rd_atomic 4 above max_qp_rd_atom 3" {
		t.Fatalf("max_dest_rd_atomic 4 = %v", err)
	}
	rtr.MaxDestRDAtomic = 3
	if err := q.Modify(&rtr, rtrMask); err != nil {
		t.Fatal(err)
	}
	rts := verbs.QPAttr{State: verbs.QPSRTS, MaxRDAtomic: 3}
	rtsMask := verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt | verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRDAtomic
	if err := q.Modify(&rts, rtsMask); err == nil || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("max_rd_atomic 3 above 2 = %v", err)
	}
	rts.MaxRDAtomic = 2
	if err := q.Modify(&rts, rtsMask); err != nil {
		t.Fatal(err)
	}
}
