// Command rocedump is tcpdump for RoCEv2: it reads a pcap or pcapng file and
// prints one line per RoCEv2 packet (UDP port 4791), with every BTH and
// extension header field and whether the ICRC verifies.
//
// Usage:
//
//	rocedump [-tsv] FILE
//
// With -tsv it prints a header line, then tab-separated columns
//
//	frame src dst sport dport opcode opname dqp psn ackreq se pad pkey syndrome msn qkey srcqp va rkey dmalen imm icrc icrc_ok
//
// numbers in decimal except dqp, va, rkey, qkey and icrc in 0x-hex; icrc is
// the four trailer bytes in wire order (as tshark shows them); a column is
// empty when its header is absent; va and rkey come from the RETH or the
// AtomicETH; icrc_ok is 1 or 0. For IPv4 the ICRC is checked with the IP
// Identification recorded in the capture.
//
// Link types: Ethernet (with 802.1Q/802.1ad tags), Linux cooked capture
// (SLL; not SLL2, whose link type number gopacket v1.1.19 cannot represent) and raw IP. Frames that are not UDP port 4791 are skipped.
// A malformed RoCE packet prints a line with the parse error in the opname
// column ("malformed: ...") and icrc_ok 0. The exit status is 1 if the file
// cannot be read.
package main
