package roce

import (
	"fmt"
	"net"
	"syscall"

	"github.com/goroce/goroce/internal/core/verbserr"
)

// Error is the error every verb returns, here and in cq, srq and transport
// (internal/core/verbserr). Its cause is always a syscall.Errno, so errors.Is(err,
// syscall.EINVAL) works as a C caller compares errno; a verb on a closed device or a
// destroyed object also matches net.ErrClosed. errors.As(err, &e) gives its fields:
//
//	Op     string        // the libibverbs call, e.g. "ibv_modify_qp"
//	Obj    string        // the object the verb acted on, e.g. "qp 0x11"; may be empty
//	Index  int           // the refused WR of a batch post (bad_wr); -1 otherwise
//	Errno  syscall.Errno // the errno a C caller would see
//	Detail string        // which rule was broken; may be empty
type Error = verbserr.Error

const errnoClosed = syscall.ENODEV

func newErr(op, obj string, errno syscall.Errno, format string, args ...any) *Error {
	if len(args) == 0 {
		return verbserr.New("roce", op, obj, errno, format)
	}
	return verbserr.New("roce", op, obj, errno, fmt.Sprintf(format, args...))
}

// closedErr is a verb's error after Device.Close: ENODEV, matching net.ErrClosed.
func closedErr(op, obj string) *Error {
	return newErr(op, obj, errnoClosed, "device closed").With(net.ErrClosed)
}

// newClosedObjErr: a verb on a destroyed object, EINVAL (a freed pointer in C),
// net.ErrClosed.
func newClosedObjErr(op, obj, kind string) *Error {
	return newErr(op, obj, syscall.EINVAL, "%s destroyed", kind).With(net.ErrClosed)
}

// wrapErr makes an error of cq, srq, transport or link the error of verb op on obj;
// index is the failing WR, or -1 to keep the lower package's. A foreign error (a bug
// below) keeps its errno or becomes EIO.
func wrapErr(op, obj string, index int, err error) error {
	return verbserr.Adopt(err, "roce", op, obj, index)
}
