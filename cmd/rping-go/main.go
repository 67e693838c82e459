// Command rping-go is rping (rdma-core librdmacm/examples/rping.c) on
// goroce: it connects through the connection manager over QP1, exactly as
// rdma_cm does on RoCEv2, so it talks to the stock rping on a Linux rxe
// host in either role.
//
//	rping-go -s [-vVd] [-S size] [-C count] -a addr [-p port] [-P]
//	rping-go -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]
//
// Each ping: the client SENDs its start buffer's address, rkey and size; the
// server RDMA READs it and SENDs "go ahead"; the client SENDs its sink
// buffer; the server RDMA WRITEs the data back and SENDs "go ahead"; with -V
// the client compares. -v prints each ping as rping does ("ping data: ..."
// on the client, "server ping data: ..." on the server). The exit status is
// 0 only when every ping completed (and validated with -V); a -V mismatch
// exits 255 and other failures 1.
//
// Unlike the kernel's rdma_cm, a goroce device binds one IP address, so the
// server needs -a. --udp-port changes the RoCEv2 UDP port (4791) for tests.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
