package roce

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/goroce/goroce/cq"
	"github.com/goroce/goroce/srq"
)

// Error is the error every verb returns. Its cause is always a syscall.Errno, so
// errors.Is(err, syscall.EINVAL) works the way a C caller compares errno, and
// errors.As(err, &e) gives the verb, the object and, for batch posts, the index of
// the work request that failed (the Go form of bad_wr).
type Error struct {
	Op     string        // libibverbs call, e.g. "ibv_modify_qp"
	Obj    string        // object the verb acted on, e.g. "qp 0x11"; may be empty
	Index  int           // index of the failing WR in a batch post, -1 otherwise
	Err    syscall.Errno // the errno a C caller would see
	Detail string        // what exactly was wrong; may be empty

	closed bool // the object or device was closed; the error also matches net.ErrClosed
}

// Error formats as "roce: ibv_modify_qp qp 0x11: invalid argument: RTR requires DestQPN".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("roce: ")
	b.WriteString(e.Op)
	if e.Obj != "" {
		b.WriteByte(' ')
		b.WriteString(e.Obj)
	}
	if e.Index >= 0 {
		fmt.Fprintf(&b, " wr[%d]", e.Index)
	}
	b.WriteString(": ")
	if e.Err == errnoClosed && e.closed {
		b.WriteString("device closed")
	} else {
		b.WriteString(e.Err.Error())
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is net.ErrClosed and the verb failed because its
// Device (errno ENODEV) or its object was closed, so shutdown code can test one
// condition.
func (e *Error) Is(target error) bool {
	return target == net.ErrClosed && e.closed
}

// errnoClosed is the errno of every verb called after Device.Close.
const errnoClosed = syscall.ENODEV

func newErr(op, obj string, errno syscall.Errno, format string, args ...any) *Error {
	e := &Error{Op: op, Obj: obj, Index: -1, Err: errno}
	if len(args) == 0 {
		e.Detail = format
	} else {
		e.Detail = fmt.Sprintf(format, args...)
	}
	return e
}

func closedErr(op, obj string) *Error {
	return &Error{Op: op, Obj: obj, Index: -1, Err: errnoClosed, closed: true}
}

// wrapErr converts an error from cq, srq, transport or link into an *Error. The lower
// packages wrap a syscall.Errno as well; anything else (which would be a bug below us)
// becomes EIO so the caller still sees an errno. index is the failing WR, or -1.
func wrapErr(op, obj string, index int, err error) error {
	if err == nil {
		return nil
	}
	var re *Error
	if errors.As(err, &re) {
		return re
	}
	closed := errors.Is(err, net.ErrClosed)
	var ce *cq.Error
	if errors.As(err, &ce) {
		return &Error{Op: op, Obj: obj, Index: index, Err: ce.Err, Detail: ce.Detail, closed: closed}
	}
	var se *srq.Error
	if errors.As(err, &se) {
		if index < 0 {
			index = se.Index
		}
		return &Error{Op: op, Obj: obj, Index: index, Err: se.Err, Detail: se.Detail, closed: closed}
	}
	errno := syscall.EIO
	var en syscall.Errno
	if errors.As(err, &en) {
		errno = en
	}
	detail := err.Error()
	// Lower packages format as "pkg: ...: <errno text>" or "pkg: ...: <errno text>: detail";
	// drop the errno text we print ourselves so it does not appear twice.
	detail = strings.Replace(detail, ": "+errno.Error(), "", 1)
	detail = strings.TrimSuffix(detail, errno.Error())
	detail = strings.TrimSuffix(detail, ": ")
	if detail == errno.Error() {
		detail = ""
	}
	return &Error{Op: op, Obj: obj, Index: index, Err: errno, Detail: detail, closed: closed}
}
