package roce

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
)

// TestErrorsFromEveryLayerNameVerbAndObjectOnce: an error raised in cq, srq or
// transport reaches the user as one *Error that names the verb the user called and
// the object as the user knows it, once, with its errno, failing WR and detail.
func TestErrorsFromEveryLayerNameVerbAndObjectOnce(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	c := must[*CQ](t)(d.CreateCQ(4))
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 1, MaxSGE: 1}}))
	qp := must[*QP](t)(pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: c, RecvCQ: c,
		Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}))
	qobj := fmt.Sprintf("qp %#x", qp.QPN())
	cases := []struct {
		name  string
		call  func() error
		want  string // the whole message
		errno syscall.Errno
		index int
	}{
		{"transport: illegal transition", func() error { return qp.Modify(&QPAttr{State: QPSRTR}, QPAttrState) },
			"roce: ibv_modify_qp " + qobj + ": invalid argument: illegal transition RESET->RTR", syscall.EINVAL, -1},
		{"transport: post before RTS", func() error { _, err := qp.PostSend([]SendWR{{Opcode: WRSend}}); return err },
			"roce: ibv_post_send " + qobj + " wr[0]: invalid argument: QP in state RESET", syscall.EINVAL, 0},
		{"cq: cqe below 1", func() error { _, err := c.Resize(0); return err },
			fmt.Sprintf("roce: ibv_resize_cq cq %#x: invalid argument: cqe 0 below 1", c.Handle()), syscall.EINVAL, -1},
		{"srq: full", func() error { _, err := s.PostRecv(make([]RecvWR, 2)); return err },
			fmt.Sprintf("roce: ibv_post_srq_recv srq %#x wr[1]: cannot allocate memory: queue full (max_wr 1)", s.Handle()), syscall.ENOMEM, 1},
		{"srq: limit above max_wr", func() error { return s.Modify(&SRQAttr{Limit: 2}, SRQLimit) },
			fmt.Sprintf("roce: ibv_modify_srq srq %#x: invalid argument: srq_limit 2 above max_wr 1", s.Handle()), syscall.EINVAL, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error %v,\nwant  %s", err, tc.want)
			}
			var e *Error
			if !errors.As(err, &e) || e.Errno != tc.errno || e.Index != tc.index || !errors.Is(err, tc.errno) {
				t.Fatalf("errors.As gave %+v", e)
			}
			if strings.Count(err.Error(), e.Op) != 1 || strings.Count(err.Error(), "ibv_") != 1 {
				t.Fatalf("%q names the verb more than once", err)
			}
		})
	}
}

// TestDestroyedObjectErrorsMatchErrClosed: a verb on a CQ or SRQ destroyed in a
// lower package still matches net.ErrClosed (and EINVAL) through roce.
func TestDestroyedObjectErrorsMatchErrClosed(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	c := must[*CQ](t)(d.CreateCQ(4))
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 1, MaxSGE: 1}}))
	noErr(t, c.Close())
	noErr(t, s.Close())
	errs := map[string]error{"CQ.Close": c.Close(), "CQ.ReqNotify": c.ReqNotify(false), "SRQ.Close": s.Close()}
	_, errs["CQ.Poll"] = c.Poll(make([]WC, 1))
	_, errs["SRQ.PostRecv"] = s.PostRecv([]RecvWR{{}})
	for name, err := range errs {
		if !errors.Is(err, net.ErrClosed) || !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s on a destroyed object: %v", name, err)
		}
	}
}
