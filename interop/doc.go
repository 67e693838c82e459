// Package interop holds the tests that prove goroce interoperates with Linux soft-RoCE
// (rdma_rxe) and the stock rdma-core tools, against real kernels booted by interop/lab.
// They skip unless GOROCE_INTEROP=1; interop/run.sh sets it, boots the lab, runs them and
// always tears the lab down. See README.md in this directory.
package interop
