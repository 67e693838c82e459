package srq

import (
	"net"
	"strconv"
	"strings"
	"syscall"
)

// Error is the error every verb in this package returns. Its cause is always
// a syscall.Errno, so errors.Is(err, syscall.ENOMEM) holds, just as the C
// verbs return an errno value.
type Error struct {
	// Op is the libibverbs call the failing method mirrors, e.g. "ibv_modify_srq".
	Op string
	// Obj names the object, e.g. "srq".
	Obj string
	// Index is, for PostRecv, the index of the WR that failed (the Go form
	// of bad_wr); -1 otherwise.
	Index int
	// Err is the errno the C verb would return.
	Err syscall.Errno
	// Detail says which rule was broken.
	Detail string
	// closed marks errors from a destroyed queue; they also match net.ErrClosed.
	closed bool
}

// Error reads "srq: ibv_post_srq_recv srq: wr 3: cannot allocate memory: srq full (max_wr 16)".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("srq: ")
	b.WriteString(e.Op)
	if e.Obj != "" {
		b.WriteString(" ")
		b.WriteString(e.Obj)
	}
	b.WriteString(": ")
	if e.Index >= 0 {
		b.WriteString("wr ")
		b.WriteString(strconv.Itoa(e.Index))
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns the errno, plus net.ErrClosed for a destroyed queue.
func (e *Error) Unwrap() []error {
	if e.closed {
		return []error{e.Err, net.ErrClosed}
	}
	return []error{e.Err}
}

func newError(op string, errno syscall.Errno, detail string) *Error {
	return &Error{Op: op, Obj: "srq", Index: -1, Err: errno, Detail: detail}
}

func closedError(op string) *Error {
	return &Error{Op: op, Obj: "srq", Index: -1, Err: syscall.EINVAL, Detail: "srq destroyed", closed: true}
}

// errorStateError is what every verb but Close returns after SetError. EIO
// is what a device in catastrophic error returns from its verbs (mlx5 does
// so from post_srq_recv after a fatal error), and the page on
// ibv_query_srq(3) only says they fail.
func errorStateError(op string) *Error {
	return newError(op, syscall.EIO, "srq in error state (SRQ_ERR)")
}
