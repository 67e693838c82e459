package main

/*
#include <errno.h>
#include <stdint.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/cgo"
	"syscall"
)

// debug, from GOROCE_VERBS_DEBUG=1, writes every failing verb's whole error to
// stderr: an errno alone does not say which rule a C program broke.
var debug = os.Getenv("GOROCE_VERBS_DEBUG") == "1"

// errno is what a C caller sees for err: its syscall.Errno, ENODEV for a verb on a
// closed device, EIO for anything else (an engine fault that has no errno).
func errno(err error) C.int {
	if err == nil {
		return 0
	}
	if debug {
		fmt.Fprintf(os.Stderr, "goroce: %v\n", err)
	}
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return C.int(e)
	}
	if errors.Is(err, net.ErrClosed) {
		return C.ENODEV
	}
	return C.EIO
}

// object returns the Go object behind handle h, or nil when h is 0 or names an
// object of another type: a C caller that passes a wrong pointer gets EINVAL,
// not a crash of the engine.
func object[T any](h C.uintptr_t) T {
	var zero T
	if h == 0 {
		return zero
	}
	v, ok := handleValue(cgo.Handle(h))
	if !ok {
		return zero
	}
	t, _ := v.(T)
	return t
}

// handleValue is cgo.Handle.Value without its panic on a handle that was deleted.
func handleValue(h cgo.Handle) (v any, ok bool) {
	defer func() {
		if recover() != nil {
			v, ok = nil, false
		}
	}()
	return h.Value(), true
}

// newHandle returns the handle a C struct keeps for v.
func newHandle(v any) C.uintptr_t { return C.uintptr_t(cgo.NewHandle(v)) }

// deleteHandle ends h; the object is no longer reachable from C.
func deleteHandle(h C.uintptr_t) { cgo.Handle(h).Delete() }
