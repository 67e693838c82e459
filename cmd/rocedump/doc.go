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
// A malformed RoCE packet prints a line with the parse error in the opname
// column ("malformed: ...") and icrc_ok 0. The exit status is 1 if the file
// cannot be read, or if it has frames but none of a supported link type.
package main
