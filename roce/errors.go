package roce

import (
	"fmt"
	"net"
	"syscall"

	"github.com/goroce/goroce/internal/core/verbserr"
)

// Error is the error every verb returns, here and in the packages below roce (cq,
// srq, transport): one type, defined in internal/core/verbserr. Its cause is always a
// syscall.Errno, so errors.Is(err, syscall.EINVAL) works the way a C caller compares
// errno; a verb on a closed device or a destroyed object also matches net.ErrClosed.
// errors.As(err, &e) gives its fields:
//
//	Op     string        // the libibverbs call, e.g. "ibv_modify_qp"
//	Obj    string        // the object the verb acted on, e.g. "qp 0x11"; may be empty
//	Index  int           // the refused WR of a batch post (bad_wr); -1 otherwise
//	Errno  syscall.Errno // the errno a C caller would see
//	Detail string        // which rule was broken; may be empty
//
// It formats as "roce: ibv_modify_qp qp 0x11: invalid argument: illegal transition
// RESET->RTR", naming the verb and the object once.
type Error = verbserr.Error

// errnoClosed is the errno of every verb called after Device.Close.
const errnoClosed = syscall.ENODEV

func newErr(op, obj string, errno syscall.Errno, format string, args ...any) *Error {
	if len(args) == 0 {
		return verbserr.New("roce", op, obj, errno, format)
	}
	return verbserr.New("roce", op, obj, errno, fmt.Sprintf(format, args...))
}

// closedErr is the error of a verb after Device.Close: ENODEV, matching net.ErrClosed.
func closedErr(op, obj string) *Error {
	return newErr(op, obj, errnoClosed, "device closed").With(net.ErrClosed)
}

// newClosedObjErr is the error of a verb on a destroyed object: EINVAL (the handle is
// no longer valid, as libibverbs would see a freed pointer) that also matches
// net.ErrClosed.
func newClosedObjErr(op, obj, kind string) *Error {
	return newErr(op, obj, syscall.EINVAL, "%s destroyed", kind).With(net.ErrClosed)
}

// wrapErr hands an error from cq, srq, transport or link up as the error of verb op
// on obj, the name the user knows the object by; index is the failing WR, or -1 to
// keep the one the lower package found. The lower packages return the same type, so
// only verb, object and prefix change; anything else (which would be a bug below us)
// keeps its errno, or becomes EIO, so the caller still sees an errno.
func wrapErr(op, obj string, index int, err error) error {
	return verbserr.Adopt(err, "roce", op, obj, index)
}
