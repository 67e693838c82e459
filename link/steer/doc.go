// Package steer shares one RoCEv2 address and port among processes by
// destination QPN, in the kernel, before any process reads a datagram.
//
// # The group
//
// Listen binds one UDP socket per QPN block (a power of two of them,
// DefaultBlocks) to the address and port, all with SO_REUSEPORT, in block
// order, and attaches a classic BPF program to the group through socket 0.
// For every datagram to the address, the kernel's UDP lookup
// (__udp4_lib_lookup / udp4_lib_lookup2, and their IPv6 twins) finds the
// group and calls reuseport_select_sock, which runs the program through
// run_bpf_filter: the skb is pulled past the UDP header, so offset 0 is the
// first byte of the BTH, and the program's return value indexes the group's
// socks[] array. The program (Program) is four instructions:
//
//	A = load32(payload[4])      BTH bytes 4..7: reserved byte and DestQP
//	A &= 0xFFFFFF               DestQP
//	A >>= 24 - log2(blocks)     the block
//	return A
//
// A datagram shorter than 8 payload bytes fails the load, the program
// returns 0, and it reaches block 0 (roced's own, which counts it as
// malformed). The index is always below the number of blocks, so the
// kernel's fall-back (reuseport_select_sock_by_hash when run_bpf_filter
// returns no socket) never runs while every socket is open.
//
// Classic BPF indexes sockets by their position in socks[], and
// reuseport_detach_sock fills the hole a closing member leaves with the last
// member: a group whose members come and go reorders itself. So the Group
// creates every socket itself and keeps its own copy for its whole life; a
// process is handed a duplicate (SCM_RIGHTS), and its exit closes only that
// duplicate. Listen also refuses (EADDRINUSE) to bind while any socket
// holds the port, instead of silently joining a stale member of an earlier
// group (same uid, SO_REUSEPORT) and shifting every index.
//
// eBPF (SO_ATTACH_REUSEPORT_EBPF with a REUSEPORT_SOCKARRAY map) would index
// by map slot rather than position and drop a datagram for an empty slot,
// but needs CAP_BPF (or CAP_SYS_ADMIN) to load; the fixed group gives cBPF
// the same stability without privilege, so roced uses cBPF. The cost of the
// program is four instructions per datagram in softirq context, next to a
// socket lookup and an skb clone only for a shared skb: bench/README.md
// measures attached against owned devices.
//
// # Who can do what
//
// The kernel lets a socket join a reuseport group only if it has
// SO_REUSEPORT and the same effective uid as the group's sockets
// (udp_lib_lport_inuse, udp_reuseport_add_sock): another uid's bind is
// EADDRINUSE, as is any bind without SO_REUSEPORT. A process of roced's own
// uid could join; run roced under a uid of its own.
//
// A process holding a member (TestMemberPowers records each):
//   - cannot attach a program through it: Lock sets SO_LOCK_FILTER, which
//     __get_filter checks (EPERM);
//   - can detach the group's program (SO_DETACH_REUSEPORT_BPF does not check
//     the lock): selection falls back to the hash over all members until
//     Attach puts the program back, which roced does on every drain tick;
//   - can connect(2) its member: UDP lookup then prefers it (a higher score)
//     for datagrams from that one peer, whatever their QPN, and marks the
//     group has_conns. roced undoes a connect on its tick and ends the
//     session of the process that did it.
//
// # GRO
//
// udp_gro_receive coalesces datagrams of one 4-tuple into a train only for a
// socket with UDP_GRO enabled (or a device with rx-gro-list on, which is
// off by default): it looks the socket up once, with the train's first
// segment, and udp_gro_receive_segment appends later segments of the same
// flow whatever their payload. The kernel therefore steers a whole train
// by its first segment's DestQP. A peer that sends to two processes' QPNs
// from one source port can land a segment of one process's block in the
// other's socket. Two rules keep that from reaching a wrong QP: goroce's
// own senders never put two 4096-QPN DestQP ranges in one train, and the
// receiving side (package internal/core/attach, Link) drops and counts
// every segment outside its block (roce_steer_misrouted_total). Where even
// the bytes must not reach another process, roced -attach-gro=false keeps
// GRO off on the handed-out sockets (and rx-gro-list must stay off).
package steer
