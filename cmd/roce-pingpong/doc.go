// Command roce-pingpong is ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and
// ibv_srq_pingpong on goroce: it speaks their TCP out-of-band exchange and their RoCEv2
// traffic, so either side can be the stock rdma-core tool.
//
// Usage:
//
//	roce-pingpong MODE [OPTIONS]           serve (wait for a client)
//	roce-pingpong MODE [OPTIONS] SERVER    connect to SERVER
//
// MODE is rc, uc, ud or srq. The command line is the stock tools' (getopt_long):
// options and operands in any order ("rc 127.0.0.1 -d 127.0.0.2 -n 10"), short
// options bundled (-ce) or with attached values (-n10), long options with = or a
// separate value (--ib-dev=lo, --size 64). The options are the stock tools':
//
//	-p, --port PORT       TCP port of the exchange (18515)
//	-d, --ib-dev ADDR     local IP address, or network interface, the device binds
//	                      (UDP 4791); the stock -d names an RDMA device. Without it
//	                      each side binds the address of its TCP connection.
//	-i, --ib-port PORT    1 (a goroce device has one port)
//	-s, --size SIZE       message size (4096; ud 2048, at most the active MTU)
//	-m, --mtu MTU         path MTU, 256..4096 (1024; not ud)
//	-r, --rx-depth DEPTH  receives posted at a time (500)
//	-n, --iters ITERS     exchanges (1000; srq: in total over all QPs)
//	-l, --sl SL           service level (accepted; RoCEv2 without VLANs has no use for it)
//	-e, --events          wait for completion events (always done: see below)
//	-g, --gid-idx INDEX   local GID index (default: the device's RoCEv2 GID, 1 for IPv4)
//	-q, --num-qp NUM      srq: number of QPs (16, at most 256)
//	-c, --chk             validate every received buffer
//
// -o/--odp, -O/--iodp, -P/--prefetch, -N/--new_send and -U/--allow-cc-unprotected
// are accepted and change nothing (Go memory is resident; there is one post-send
// API and no congestion control); -t/--ts (completion timestamps) and -j/--dm
// (device memory) are refused. goroce's own long options: --timeout (give up
// after this long), --loss P (drop a share P of the datagrams this side sends,
// for loss tests), --seed, --pcap FILE, --roce-port, --linger, --last-ack-wait,
// --stats (print the engine's counters to stderr at exit, as one
// "stats: name=value ..." line), --version and --help. A mistake prints one line
// and exits 1; the usage comes only with -h.
//
// Unlike the stock tools it never busy-polls the CQ: it sleeps on the completion
// channel between polls, with or without -e, so a run does not burn a CPU. It prints
// the stock summary lines ("N bytes in S seconds = X Mbit/sec", "N iters in S seconds =
// U usec/iter") and exits 1 on any failure.
package main
