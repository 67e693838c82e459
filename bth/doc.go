// Package bth is the RoCEv2 wire format: the InfiniBand Base Transport
// Header (BTH), its extension headers, the opcode table, 24-bit PSN
// arithmetic and the invariant CRC (ICRC). It imports only the standard
// library and is the leaf every other package builds on.
//
// A RoCEv2 packet is a UDP datagram to port 4791 (IBA Annex 17) whose
// payload is
//
//	BTH (12) | [DETH 8] [RETH 16] [AtomicETH 28] [AETH 4] [AtomicAckETH 8] [ImmDt 4] [IETH 4] | payload | pad 0-3 | ICRC 4
//
// with the extension headers present according to the opcode, in that
// order (IBA 9.2-9.3). There is no LRH or GRH: the IP header plays the GRH.
//
// # Base Transport Header (IBA 9.2)
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad| TVer  |            P_Key              |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B|  resv6    |                  DestQP (24)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|   resv7     |                    PSN (24)                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	S = solicited event, M = MigReq, Pad = PadCnt, TVer = 0 (else dropped),
//	F/B = FECN/BECN (RoCEv2 congestion; masked in the ICRC), A = AckReq.
//
// # Extension headers (IBA 9.3)
//
//	DETH (9.3.2, UD):        | Q_Key (32) | resv8 | SrcQP (24) |
//	RETH (9.3.3, WRITE FIRST/ONLY, READ request):
//	                         | VA (64) | R_Key (32) | DMA length (32) |
//	AtomicETH (9.3.4, COMPARE_SWAP, FETCH_ADD):
//	                         | VA (64) | R_Key (32) | Swap/Add (64) | Compare (64) |
//	AETH (9.3.5, ACK, atomic ACK, read response FIRST/LAST/ONLY):
//	                         |r|kind(2)|value(5)| MSN (24) |
//	                         kind 00 ACK (value = credit code, 0x1F none),
//	                         01 RNR NAK (value = timer code, IBA Table 45),
//	                         11 NAK (value = NAK code: 0 PSN sequence error,
//	                         1 invalid request, 2 remote access, 3 remote
//	                         operational, 4 invalid RD request)
//	AtomicAckETH (9.3.6):    | original remote data (64) |
//	ImmDt (9.3.7):           | immediate data (32) |
//	IETH (9.3.8, SEND with invalidate): | R_Key (32) |
//	CNP (Annex 17.9.3):      BTH opcode 0x81 with BECN, then 16 reserved bytes.
//
// All multi-byte fields are big-endian except the ICRC trailer, which is
// stored little-endian (as rxe does; verified on every captured packet).
//
// # ICRC (IBA Annex 17.3.3)
//
// CRC-32 (IEEE 802.3, as hash/crc32.ChecksumIEEE) over 8 bytes of 0xFF, the
// IP header (IPv4 TOS, TTL, checksum; or IPv6 traffic class, flow label, hop
// limit: all set to ones), the UDP header (checksum set to ones), the BTH
// (byte 4 set to ones) and everything after it up to the trailer. The IPv4
// Identification is covered, so a UDP socket that cannot read it recovers it
// with SolveIPv4ID. One exception, for rxe: its ICRC of an RC FLUSH (Linux
// 6.2 and later) runs over the packet's headers a second time, unmasked
// (its opcode table gives FLUSH no payload offset). ICRC and PutICRC compute
// that for FLUSH, so rxe takes goroce's; the checks accept it and IBA's
// (IBAICRC).
//
// # Use
//
// Receive: PeekDestQP finds the owner of a datagram without parsing it.
// Parse the UDP payload (no allocation; the Packet is a view over the
// caller's buffer), check the ICRC with AcceptICRC (one CRC pass; from a UDP
// socket, which cannot see the IPv4 Identification, an IPv4 packet is
// accepted with probability 2^-16 when corrupted; CheckICRC when the whole
// IP header is known; AcceptICRCPlace also copies a payload to where it
// lands in the same pass), then read fields through the Packet. Parse errors are
// sentinels (ErrTruncated, ErrPadOverrun, ErrBadTVer, ErrUnknownOpcode,
// ErrUnexpectedPayload) for per-cause drop counters. The opcode table says
// what a packet does (IsSend, IsWrite, IsReadRequest, IsAtomic, NeedsRecvWR,
// Starts, Ends, IsResponse, ...); responders check request ordering with
// ValidSequence and PSNs with the PSN methods (24-bit serial arithmetic). A UD
// receive buffer starts with the GRH area PutGRH fills.
//
// Send: pick the opcode with MessageOpcode, fill a Fields, Append into a
// buffer of PacketLen bytes (no allocation), then PutICRC. Append writes
// reserved bits, pad and the ICRC as zero, so Append(p.Fields(),
// p.Payload()) plus PutICRC reproduces every packet rxe sends. The UDP source
// port is rxe's: QPSourcePort for a new QP (UD, QP1), ConnectedSourcePort for
// RC and UC.
package bth
