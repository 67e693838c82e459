// Command roce-perftest runs the perftest benchmarks (ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat, ib_send_lat,
// ib_atomic_lat) on goroce: it speaks perftest's TCP exchange and its RoCEv2
// traffic, so either side can be the stock perftest tool (checked against
// perftest 4.5-0.17, version 6.06, in interop/).
//
// Usage:
//
//	roce-perftest TEST [OPTIONS]           serve (wait for a client)
//	roce-perftest TEST [OPTIONS] SERVER    connect to SERVER
//
// TEST is write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat, send_lat or
// atomic_lat (an ib_ prefix is accepted). The command line is perftest's: options
// and operands in any order, short options bundled or with attached values
// (-n10), long options with = or a separate value (--size=64, --iters 20). The
// options perftest has and goroce implements:
//
//	-d, --ib-dev      local IP address, or network interface, the device binds;
//	                  perftest's -d names an RDMA device. Without it each side
//	                  binds the address of its TCP connection.
//	-i, --ib-port     1 (a goroce device has one port)
//	-p, --port        TCP port of the exchange (18515)
//	-s, --size        message size, with perftest's K and M suffixes
//	-n, --iters       iterations (5000 for write_bw, else 1000)
//	-a, --all         every size from 2 to 2^23 (send over UD: to the MTU)
//	-D, --duration    run for this many seconds; -f, --margin: the unmeasured
//	                  seconds at each end (D/4)
//	-q, --qp          number of QPs (bw tests)
//	-b, --bidirectional  both ways at once (bw tests)
//	-c, --connection  RC, UC (send, write) or UD (send)
//	-R, --rdma_cm     connect through rdma_cm (RC): see below; -T, --tos with it
//	-l, --post_list   post the WRs in chains of this many, one ibv_post_send each,
//	                  only the last of a chain (or every -Q-th) signaled; -n must
//	                  be a multiple of it (bw tests)
//	--use-srq         the receiving side (send_bw's server, either side with -b
//	                  or in send_lat) draws every QP's receives from one SRQ of
//	                  -r WRs, -r/-q of them posted for each QP's region
//	-A, --atomic_type FETCH_AND_ADD (default) or CMP_AND_SWAP
//	-e, --events      sleep on the completion channel; without it the CQ is
//	                  busy-polled, and the polling goroutine receives the answer
//	                  itself (run to completion), as perftest on a NIC
//	--write_with_imm  write_bw's WRITEs carry immediate data: the server posts
//	                  receives (-r, 512) and counts the completions, as send_bw
//	-o, --outs        outstanding READs/atomics
//	-m, --mtu         path MTU; the lower of both sides' is used
//	-x, --gid-index   local GID index (default: the device's RoCEv2 GID)
//	-t, --tx-depth, -r, --rx-depth, -u, --qp-timeout, --tclass
//	--run_infinitely  a row every -D seconds until interrupted (bw tests)
//	--report_gbits, --report-both, -N, --noPeak, -U, -H, --output
//	-V, --version, -h, --help
//
// Accepted and ignored, because they change nothing here: -F, -Q, -I, -S,
// --odp, --use_hugepages, --use_old_post_send, --perform_warm_up, --mr_per_qp,
// --cpu_util, --latency_gap, --flow_label, --retry_count, --wait_destroy and
// --pkey_index 0. But in a post list, goroce asks for a completion of every WR.
// Refused with a one-line reason: the rdma_cm exchange alone (-z), -R over UD
// or UC, multicast, dual port, raw Ethernet, XRC/DC/SRD, receive post lists,
// rate limits, hardware counters, JSON output, CPU cycle reports and
// --dont_xchg_versions.
//
// goroce's own options: --roce-port (RoCEv2 UDP port, both sides must agree),
// --timeout (give up after this long; with --run_infinitely, the end of the run),
// --linger, --stats (print the engine's counters to stderr at exit, as one
// "stats: name=value ..." line), and --loss P with --seed (drop a share P of
// the datagrams this side sends, for loss tests).
//
// The exchange is the one of perftest's "ethernet" method: the version strings
// (goroce says 6.27, so a newer perftest skips its raw parameter struct), page
// and cache-line sizes, the MTU, one 108-byte record per QP, and 108-byte
// hand-shakes as barriers in the places and order each perftest main has them
// (the peer keeps the records of its last hand-shake per QP). Without -b the
// write, read and atomic bw servers are passive: the client's RDMA goes
// straight to the advertised buffer, and the server prints the client's report.
// ib_send_bw's receiver posts -r receives per QP before a hand-shake and
// counts their completions. write_lat writes back and forth, polling the last
// byte; read_lat and atomic_lat post one READ or atomic at a time; send_lat
// answers each SEND with one, and waits for each of its sends to complete
// before it waits for the next receive, as perftest (TX depth 1).
//
// With -R, as perftest, there is no TCP connection: the exchange goes over an RC
// connection rdma_cm makes on -p's port (the same steps, one SEND and one RECV
// each, the QP records as struct pingpong_dest in binary, no closing "done"), and
// after a hand-shake each test QP connects through rdma_cm on the same port
// (the CM on QP1, package cm), with perftest's responder resources and retry
// counts; another hand-shake follows. The server needs -d, the address it
// listens on.
//
// The atomic tests check that every atomic was executed exactly once. As the
// requester, each WR fetches into a word of its own: consecutive visits of one
// slot of the peer's buffer must fetch consecutive values (FETCH_AND_ADD adds
// 1; CMP_AND_SWAP compares and swaps 0, so a non-zero slot never changes). As
// the target, the adds found in the buffer must equal the atomic requests the
// engine executed, and CMP_AND_SWAP must have changed nothing.
//
// It prints perftest's banner (the dashed table), the address lines with the
// GID in perftest's decimal colon form, the header and one results row per size
// (MB/sec of 2^20 bytes, or Gb/sec, and Mpps; or the latency statistics in
// usec, computed as perftest does: half a round trip for write_lat and
// send_lat, a whole one for read_lat and atomic_lat, the two largest samples
// dropped). It exits 1 on any failure: an exchange error, a completion error, a
// failed atomic check or the timeout.
package main
