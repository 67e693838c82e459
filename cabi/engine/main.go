// Command engine is the Go half of goroce's libibverbs: built with
// -buildmode=c-shared into libgoroce.so, it runs the verbs of package roce for
// the C half (cabi/verbs), which lays out rdma-core's ABI and is what programs
// link against as libibverbs.so.1.
//
// The split: C owns every struct a program can see and every pointer it holds;
// Go owns the verbs objects, reached through a runtime/cgo.Handle stored next to
// the C struct (include/goroce_verbs.h). Each exported function is one verb on
// one handle. It returns 0 or an errno, never panics on a bad argument, and
// reads the program's WR lists and registered memory in place: an MR is a Go
// slice over the program's own bytes (unsafe.Slice), so the engine reads and
// writes them as a NIC would, with no bounce copy.
//
// Devices are the local addresses listed in GOROCE_DEVICES (device i is
// goroce<i>); a process opens each address once, however many ibv_context a
// program opens on it.
package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#include "goroce_verbs.h"
*/
import "C"

func main() {}
