// Command roce-pingpong is ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and
// ibv_srq_pingpong on goroce: it speaks their TCP out-of-band exchange and their RoCEv2
// traffic, so either side can be the stock rdma-core tool.
//
// Usage:
//
//	roce-pingpong MODE -d ADDR [flags]           serve (wait for a client)
//	roce-pingpong MODE -d ADDR [flags] SERVER    connect to SERVER
//
// MODE is rc, uc, ud or srq. The flags are the stock tools' where they make sense:
//
//	-p PORT    TCP port of the exchange (18515)
//	-d ADDR    local IP address the device binds (UDP 4791); the stock -d names a device
//	-s SIZE    message size (4096; ud 2048, at most the active MTU)
//	-m MTU     path MTU, 256..4096 (1024; not ud)
//	-r DEPTH   receives posted at a time (500)
//	-n ITERS   exchanges (1000; srq: in total over all QPs)
//	-l SL      service level (accepted; RoCEv2 without VLANs has no use for it)
//	-e         wait for completion events (always done: see below)
//	-g INDEX   local GID index (default: the device's RoCEv2 GID, 1 for IPv4)
//	-q NUM     srq: number of QPs (16, at most 256)
//	-c         validate every received buffer
//
// and some of its own: -timeout (give up after this long), -loss P (drop a share P of
// the datagrams this side sends, for loss tests), -seed, -pcap FILE, -roce-port,
// -linger, and -stats (print the engine's counters to stderr at exit, as one
// "stats: name=value ..." line).
//
// Unlike the stock tools it never busy-polls the CQ: it sleeps on the completion
// channel between polls, with or without -e, so a run does not burn a CPU. It prints
// the stock summary lines ("N bytes in S seconds = X Mbit/sec", "N iters in S seconds =
// U usec/iter") and exits 1 on any failure.
package main
