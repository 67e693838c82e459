package cm

import (
	"fmt"
	"syscall"
)

// errnoError is a sentinel error whose cause is a syscall.Errno, so callers
// can test either the sentinel or the errno, as every verb error can be.
type errnoError struct {
	msg   string
	errno syscall.Errno
}

func (e *errnoError) Error() string { return e.msg }
func (e *errnoError) Unwrap() error { return e.errno }

// Errors of the state machine and the Manager. Each unwraps to an errno.
var (
	// ErrTimeout: the peer did not answer a REQ, REP, DREQ or SIDR_REQ
	// within the CM response timeout, after every retry (ETIMEDOUT).
	ErrTimeout error = &errnoError{"cm: peer did not answer (CM response timeout, retries exhausted)", syscall.ETIMEDOUT}
	// ErrRejected: the peer answered with REJ (ECONNREFUSED). The concrete
	// error is a *RejectError carrying the reason.
	ErrRejected error = &errnoError{"cm: connection rejected", syscall.ECONNREFUSED}
	// ErrState: the operation is not valid in the communication ID's
	// current state (EINVAL).
	ErrState error = &errnoError{"cm: operation invalid in this state", syscall.EINVAL}
	// ErrUnknownID: no communication ID with that number (EINVAL).
	ErrUnknownID error = &errnoError{"cm: unknown communication ID", syscall.EINVAL}
	// ErrInUse: a listener already owns the service ID (EADDRINUSE).
	ErrInUse error = &errnoError{"cm: service ID already listened on", syscall.EADDRINUSE}
)

// RejectError reports a REJ from the peer. errors.Is(err, ErrRejected) and
// errors.Is(err, syscall.ECONNREFUSED) hold.
type RejectError struct {
	Reason      RejectReason
	PrivateData []byte // the REJ's private data (full 148 bytes)
}

// Error formats as "cm: connection rejected: invalid service ID (8)".
func (e *RejectError) Error() string {
	return fmt.Sprintf("cm: connection rejected: %v", e.Reason)
}

// Unwrap returns ErrRejected.
func (e *RejectError) Unwrap() error { return ErrRejected }
