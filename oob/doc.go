// Package oob implements the out-of-band TCP exchanges the stock rdma-core and perftest
// tools use to swap queue pair addresses before any RoCE packet is sent, so that goroce
// programs (cmd/roce-pingpong, the cmd/roced responders) can pair with the real tools.
//
// ibv_rc_pingpong, ibv_uc_pingpong and ibv_ud_pingpong (libibverbs/examples in rdma-core)
// connect to TCP port 18515 and swap one 52-byte text record, "LID:QPN:PSN:GID" plus a
// NUL (see Dest). The client writes its record, the server moves its QP to RTR/RTS and
// answers with its own, and the client closes the exchange with "done\x00".
// ibv_srq_pingpong does the same with 256 records each way, of which only the first
// num_qp are real. ClientExchange and ServerExchange implement both shapes.
//
// The package only moves bytes: it neither opens devices nor touches QPs. The server
// side hands the peer's records to a callback that connects the QPs and returns the
// local records, which is the order the stock server keeps.
package oob
