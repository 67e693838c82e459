package srq

import (
	"net"
	"syscall"

	"github.com/goroce/goroce/internal/core/verbserr"
)

// newError is the error of verb op on the queue (a *roce.Error: errors.As
// with it gives Op, Index, Errno and Detail).
func newError(op string, errno syscall.Errno, detail string) *verbserr.Error {
	return verbserr.New("srq", op, "srq", errno, detail)
}

func closedError(op string) *verbserr.Error {
	return newError(op, syscall.EINVAL, "srq destroyed").With(net.ErrClosed)
}

// errorStateError is what every verb but Close returns after SetError. EIO
// is what a device in catastrophic error returns from its verbs (mlx5 does
// so from post_srq_recv after a fatal error), and the page on
// ibv_query_srq(3) only says they fail.
func errorStateError(op string) *verbserr.Error {
	return newError(op, syscall.EIO, "srq in error state (SRQ_ERR)")
}
