package verbserr

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"
)

func TestErrorFormat(t *testing.T) {
	withWR := New("roce", "ibv_post_send", "qp 0x12", syscall.ENOMEM, "send queue full")
	withWR.Index = 3
	cases := []struct {
		name string
		err  *Error
		want string
	}{
		{"verb object detail", New("roce", "ibv_modify_qp", "qp 0x11", syscall.EINVAL, "illegal transition RESET->RTR"),
			"roce: ibv_modify_qp qp 0x11: invalid argument: illegal transition RESET->RTR"},
		{"failing WR", withWR, "roce: ibv_post_send qp 0x12 wr[3]: cannot allocate memory: send queue full"},
		{"no object, no detail", New("roce", "ibv_alloc_pd", "", syscall.ENOMEM, ""), "roce: ibv_alloc_pd: cannot allocate memory"},
		{"formatted detail", Newf("cq", "ibv_resize_cq", "cq", syscall.EINVAL, "cqe %d below %d", 5, 7),
			"cq: ibv_resize_cq cq: invalid argument: cqe 5 below 7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Fatalf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestErrorMatchesErrnoAndFurtherCause(t *testing.T) {
	e := New("srq", "ibv_query_srq", "srq", syscall.EINVAL, "srq destroyed").With(net.ErrClosed)
	wrapped := fmt.Errorf("cleanup: %w", e)
	if !errors.Is(wrapped, syscall.EINVAL) || !errors.Is(wrapped, net.ErrClosed) || errors.Is(wrapped, syscall.ENOMEM) {
		t.Fatalf("errors.Is does not follow errno and cause: %v", wrapped)
	}
	var got *Error
	if !errors.As(wrapped, &got) || got.Op != "ibv_query_srq" || got.Obj != "srq" || got.Index != -1 ||
		got.Errno != syscall.EINVAL || got.Detail != "srq destroyed" {
		t.Fatalf("errors.As gave %+v", got)
	}
	if errors.Is(New("srq", "x", "", syscall.EINVAL, ""), net.ErrClosed) {
		t.Fatal("an error without a further cause matches net.ErrClosed")
	}
}

func TestAdoptNamesTheUpperVerbOnceAndLeavesTheLowerErrorAlone(t *testing.T) {
	low := New("srq", "ibv_post_srq_recv", "srq", syscall.ENOMEM, "queue full (max_wr 1)").With(net.ErrClosed)
	low.Index = 1
	up := Adopt(low, "roce", "ibv_post_recv", "qp 0x11", -1)
	if got, want := up.Error(), "roce: ibv_post_recv qp 0x11 wr[1]: cannot allocate memory: queue full (max_wr 1)"; got != want {
		t.Fatalf("adopted = %q, want %q", got, want)
	}
	if !errors.Is(up, syscall.ENOMEM) || !errors.Is(up, net.ErrClosed) {
		t.Fatalf("adopted error lost a cause: %v", up)
	}
	if low.Op != "ibv_post_srq_recv" || low.Obj != "srq" || low.Error() != "srq: ibv_post_srq_recv srq wr[1]: cannot allocate memory: queue full (max_wr 1)" {
		t.Fatalf("Adopt changed the lower error: %v", low)
	}
	if e := Adopt(low, "roce", "ibv_post_recv", "qp 0x11", 4).(*Error); e.Index != 4 {
		t.Fatalf("index %d, want the upper layer's 4", e.Index)
	}
	if Adopt(nil, "roce", "x", "", -1) != nil {
		t.Fatal("Adopt(nil) is not nil")
	}
}

func TestAdoptForeignErrorKeepsErrnoOrSaysEIO(t *testing.T) {
	sysErr := os.NewSyscallError("bind", syscall.EADDRINUSE)
	e := Adopt(sysErr, "roce", "ibv_open_device", "", -1).(*Error)
	if e.Errno != syscall.EADDRINUSE || !errors.Is(e, sysErr) || e.Detail != sysErr.Error() {
		t.Fatalf("adopted %+v", e)
	}
	plain := errors.New("no errno here")
	e = Adopt(plain, "roce", "ibv_open_device", "", -1).(*Error)
	if e.Errno != syscall.EIO || !errors.Is(e, plain) {
		t.Fatalf("adopted %+v", e)
	}
}
