package cq

import (
	"net"
	"strings"
	"syscall"
)

// Error is the error every verb in this package returns. Its cause is always
// a syscall.Errno, so errors.Is(err, syscall.EINVAL) holds, just as the C
// verbs return an errno value.
type Error struct {
	// Op is the libibverbs call the failing method mirrors, e.g. "ibv_resize_cq".
	Op string
	// Obj names the object, e.g. "cq".
	Obj string
	// Err is the errno the C verb would return.
	Err syscall.Errno
	// Detail says which rule was broken.
	Detail string
	// sentinel is an extra cause (ErrOverrun, net.ErrClosed) or nil.
	sentinel error
}

// Error reads "cq: ibv_resize_cq cq: invalid argument: cqe 5 below 7 completions held".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("cq: ")
	b.WriteString(e.Op)
	if e.Obj != "" {
		b.WriteString(" ")
		b.WriteString(e.Obj)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns the errno and, when set, the sentinel (ErrOverrun or
// net.ErrClosed), so errors.Is matches either.
func (e *Error) Unwrap() []error {
	if e.sentinel != nil {
		return []error{e.Err, e.sentinel}
	}
	return []error{e.Err}
}

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

func newError(op string, errno syscall.Errno, detail string) *Error {
	return &Error{Op: op, Obj: "cq", Err: errno, Detail: detail}
}

func closedError(op string) *Error {
	return &Error{Op: op, Obj: "cq", Err: syscall.EINVAL, Detail: "cq destroyed", sentinel: net.ErrClosed}
}
