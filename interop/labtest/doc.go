// Package labtest drives the interop lab from Go tests: real Linux soft-RoCE (rdma_rxe)
// guests under QEMU on a bridge inside a network namespace of their own, booted by
// interop/lab (see interop/README.md).
//
// Open skips a test unless GOROCE_INTEROP=1, and fails it when that is set but the lab is
// not up, so CI never skips the interop suite silently. A Guest runs shell commands
// (Run, or Start for a background Job that is killed when its context ends) over the
// guest's command service, reached from inside the namespace by Lab.Dial; Counters reads
// rxe's hw_counters. Lab.Command starts a host-side program in the namespace, where it
// can bind the bridge address Lab.HostIP, and StartCapture records a pcap there.
package labtest
