package cq

import (
	"net"
	"syscall"

	"github.com/goroce/goroce/internal/core/verbserr"
)

// errOverrun is the type of ErrOverrun; a distinct type keeps the sentinel
// comparable by identity and unwrapping to ENOSPC.
type errOverrun struct{}

func (errOverrun) Error() string { return "completion queue overrun" }
func (errOverrun) Unwrap() error { return syscall.ENOSPC }

// ErrOverrun is wrapped by the error Push returns for the completion that did
// not fit: the CQ has overrun and is now in the error state. It unwraps to
// syscall.ENOSPC. The caller raises IBV_EVENT_CQ_ERR and moves the QPs
// feeding the CQ to the error state, as a real device does. Only the Push
// that overran returns it; later Pushes return syscall.EIO (the CQ is in the
// error state), so CQ_ERR is raised exactly once.
var ErrOverrun error = errOverrun{}

// newError is the error of verb op on the CQ (a *roce.Error: errors.As with
// it gives Op, Errno and Detail).
func newError(op string, errno syscall.Errno, detail string) *verbserr.Error {
	return verbserr.New("cq", op, "cq", errno, detail)
}

func closedError(op string) *verbserr.Error {
	return newError(op, syscall.EINVAL, "cq destroyed").With(net.ErrClosed)
}

func overrunError(op, detail string) *verbserr.Error {
	return newError(op, syscall.ENOSPC, detail).With(ErrOverrun)
}
