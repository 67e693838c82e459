// Command rocedump is tcpdump for RoCEv2: it reads a pcap or pcapng file, or
// captures live, and prints one line per RoCEv2 packet (UDP port 4791), with
// every BTH and extension header field, the IB CM message of a MAD, and
// whether the ICRC verifies.
//
// Usage:
//
//	rocedump [-t...] [-#] [-c COUNT] [--tsv] -r FILE [FILTER]    read a capture ("-r -": stdin)
//	rocedump [-t...] [-#] [-c COUNT] [--tsv] -i IFACE [FILTER]   capture live (root)
//
// The options are tcpdump's: -r, -i, -c (stop after COUNT packets), and the
// timestamps, by default the time of day; -t none, -tt seconds since the
// epoch, -ttt the delta from the previous packet, -tttt date and time, -ttttt
// the delta from the first packet. -# prints the frame number first, as tshark
// numbers frames. "rocedump FILE" and "-tsv" of earlier versions still work.
//
// FILTER is an expression over the packets: qpn N (destination QP, or UD's
// source QP), psn N or psn N-M (an inclusive range, wrapping past 2^24), op
// NAME (RC_SEND_ONLY, or send_only for RC's, UC's and UD's, or the opcode's
// number), a class (send, write, read, read_request, read_response, atomic,
// atomic_ack, ack, nak, cnp, cm, request, response, rc, uc, ud), and not, and,
// or and parentheses; adjacent primitives are joined by and.
//
// A line shows the addresses and ports, the opcode, the BTH fields, then each
// extension header with every value labelled by its meaning (the RETH's va,
// rkey and dma-len; payload for the bytes the packet carries), and for a MAD
// to or from QP1 the CM message as tshark names it (ConnectRequest,
// ConnectReply, ReadyToUse, ConnectReject, MsgRcptAck, DisconnectRequest,
// DisconnectReply, ServiceIDResReq, ServiceIDResReqResp) with its transaction
// and communication IDs, service ID (and rdma_cm port), QPN, starting PSN,
// and rdma_cm's private-data header; package cm decodes it.
//
// Live capture (-i) opens an AF_PACKET socket on the interface with a classic
// BPF program that keeps UDP port 4791 in the kernel (no libpcap, no cgo); it
// needs root or CAP_NET_RAW and says so without. On loopback each packet is
// shown once, as it arrives. It runs until COUNT packets, ^C or SIGTERM.
//
// With --tsv it prints a header line, then tab-separated columns
//
//	frame src dst sport dport opcode opname dqp psn ackreq se pad pkey syndrome msn qkey srcqp va rkey dmalen imm icrc icrc_ok
//	time cm_msg cm_tid cm_comm_id cm_remote_comm_id cm_service_id cm_qpn cm_psn cm_status cm_cma_src cm_cma_dst
//
// numbers in decimal except dqp, va, rkey, qkey, icrc and the CM identifiers in
// 0x-hex; icrc is the four trailer bytes in wire order (as tshark shows them);
// a column is empty when its header is absent; va and rkey come from the RETH
// or the AtomicETH; icrc_ok is 1 or 0; time is seconds since the epoch;
// cm_status is a REJ's reason or a SIDR_REP's status; cm_cma_src is rdma_cm's
// source address:port and cm_cma_dst its destination address. For IPv4 the
// ICRC is checked with the IP Identification recorded in the capture.
//
// A UDP GSO super-datagram, which a capture on the sending host (or on a
// bridge it crosses whole) holds as one frame of several packets end to end,
// is split as the receiver splits it: at the segment size where the next
// packet's BTH (same QP and P_Key) begins and the first packet's ICRC holds,
// the last segment possibly shorter. Each packet prints on its own line with
// the frame's number, its ICRC checked with the ID the kernel gives segment
// k (the frame's ID plus k) and its own lengths.
//
// Link types (LINKTYPE_* numbers, per interface in pcapng files):
//
//	1                      Ethernet, with 802.1Q, 802.1ad and 0x9100 VLAN tags
//	113, 276               Linux cooked capture v1 and v2 (tcpdump -i any)
//	0, 108                 BSD loopback NULL and LOOP (AF_INET; AF_INET6 10, 24, 28, 30)
//	101, 12, 14, 228, 229  raw IP (LINKTYPE_RAW, DLT_RAW of BSDs and OpenBSD, IPv4, IPv6)
//
// IPv6 extension headers (hop-by-hop, routing, destination options,
// fragment, AH, ...) are followed to UDP. IPv4 options and IPv6 extension
// headers are covered by the ICRC as captured, with the fixed headers'
// variant fields masked. A first IP fragment prints a malformed line; later
// fragments are skipped. Frames are numbered by their record in the file,
// as tshark numbers them, and frames that are not UDP port 4791 are
// skipped. Frames of any other link type are counted and reported, one
// line per link type, on stderr.
// A malformed RoCE packet prints a line with the parse error ("malformed: ..."
// in the opname column of --tsv) and icrc_ok 0. The exit status is 1 if the
// input cannot be read, or has frames but none of a supported link type, and
// 2 for a bad command line.
package main
