// Package verbserr holds the one error type of the verbs: cq, srq and
// transport return it, and roce re-exports it as roce.Error. It lives below
// all four so that an error raised by a lower package can be handed up
// unchanged except for what only the upper package knows (the verb the user
// called and the name the user knows the object by), and so that its
// message names the verb and the object once.
package verbserr

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
)

// Error is the error every verb returns. Its cause is always a syscall.Errno,
// so errors.Is(err, syscall.EINVAL) works the way a C caller compares errno,
// and errors.As gives the verb, the object, the failing work request and the
// rule that was broken.
type Error struct {
	// Op is the libibverbs call the failing method mirrors, e.g. "ibv_modify_qp".
	Op string
	// Obj names the object the verb acted on, e.g. "qp 0x11"; it may be empty.
	Obj string
	// Index is, for a batch post (PostSend, PostRecv), the index of the work
	// request that was refused: the Go form of bad_wr. It is -1 otherwise.
	Index int
	// Errno is the errno a C caller would see.
	Errno syscall.Errno
	// Detail says which rule was broken; it may be empty.
	Detail string

	pkg  string // the package that returns it: the message's prefix
	also error  // a further cause errors.Is matches (net.ErrClosed, an overrun sentinel, a foreign error adopted)
}

// New returns an error of package pkg (the message's prefix) for verb op on
// object obj, with no failing WR.
func New(pkg, op, obj string, errno syscall.Errno, detail string) *Error {
	return &Error{pkg: pkg, Op: op, Obj: obj, Index: -1, Errno: errno, Detail: detail}
}

// Newf is New with a formatted detail.
func Newf(pkg, op, obj string, errno syscall.Errno, format string, args ...any) *Error {
	return New(pkg, op, obj, errno, fmt.Sprintf(format, args...))
}

// With makes cause a further cause of e, which errors.Is then matches as well
// as the errno (net.ErrClosed for a verb on a closed object), and returns e.
func (e *Error) With(cause error) *Error {
	e.also = cause
	return e
}

// Error formats as "roce: ibv_post_send qp 0x11 wr[3]: cannot allocate
// memory: send queue full (max_send_wr 16)": package, verb, object, failing
// WR, errno text, detail; each part that is empty is left out.
func (e *Error) Error() string {
	var b strings.Builder
	if e.pkg != "" {
		b.WriteString(e.pkg)
		b.WriteString(": ")
	}
	b.WriteString(e.Op)
	if e.Obj != "" {
		b.WriteByte(' ')
		b.WriteString(e.Obj)
	}
	if e.Index >= 0 {
		b.WriteString(" wr[")
		b.WriteString(strconv.Itoa(e.Index))
		b.WriteByte(']')
	}
	b.WriteString(": ")
	b.WriteString(e.Errno.Error())
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	return b.String()
}

// Unwrap returns the errno and, when there is one, the further cause.
func (e *Error) Unwrap() []error {
	if e.also != nil {
		return []error{e.Errno, e.also}
	}
	return []error{e.Errno}
}

// Adopt hands err up to package pkg, which returns it from verb op on the
// object it calls obj: an *Error from a lower package keeps its errno, detail
// and causes and takes pkg, op and obj (and index, when it is not -1) in a
// copy, since the lower package may return the same error again. Any other
// error becomes an *Error with its errno (EIO when it has none, which would be
// a bug below), its text as the detail and itself as a further cause.
func Adopt(err error, pkg, op, obj string, index int) error {
	if err == nil {
		return nil
	}
	var low *Error
	if !errors.As(err, &low) {
		errno := syscall.EIO
		errors.As(err, &errno)
		return &Error{pkg: pkg, Op: op, Obj: obj, Index: index, Errno: errno, Detail: err.Error(), also: err}
	}
	e := *low
	e.pkg, e.Op, e.Obj = pkg, op, obj
	if index >= 0 {
		e.Index = index
	}
	return &e
}
