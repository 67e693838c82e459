// Package link moves RoCEv2 datagrams between the transport engine and the
// network. It is the analogue of wireguard-go's conn package: a small Link
// interface (batch read, batch write, close), one real implementation over a
// UDP socket (UDP), a pcap Tap that wraps any Link, and a shared pool of
// datagram buffers. It never looks inside the BTH. Test doubles (an in-memory
// pipe and a lossy wrapper) live in linktest.
//
// # Socket
//
// ListenUDP binds one unconnected UDP socket to the device's exact IP and
// port 4791 (RoCEv2Port): rxe checks that RC packets come from the address in
// the peer's GID, so a wildcard bind is refused. Reads and writes use
// recvmmsg/sendmmsg through syscall.RawConn, so blocking goes through the Go
// netpoller and Close unblocks a reader with net.ErrClosed. The mmsghdr,
// iovec, sockaddr and control-message storage is pooled per call and points
// at the caller's buffers, so steady-state I/O does not allocate
// (TestUDPZeroAlloc).
//
// SourcePort opens further send-only sockets on the same address, one per
// extra UDP source port (rxe varies the source port per QP for ECMP
// entropy), with the same options and a minimal receive buffer; WriteBatch
// sends each run of messages with one Message.SrcPort through its socket.
// Config.MaxSourcePorts bounds them (64 by default), and a port another
// socket holds is refused: the caller then sends from the bound port.
//
// Why not golang.org/x/net/ipv4.PacketConn.ReadBatch: on Linux it allocates a
// net.IP and a *net.UDPAddr for every datagram received, and its
// ControlMessage parser allocates again for PKTINFO
// (BenchmarkXNetReadBatch shows the count). The mmsghdr code here is the same
// system call with netip.AddrPort values instead.
//
// Socket options (set before bind):
//
//	IPv4: IP_MTU_DISCOVER=IP_PMTUDISC_DO, IP_PKTINFO, IP_RECVTOS
//	IPv6: IPV6_MTU_DISCOVER=IPV6_PMTUDISC_DO, IPV6_RECVPKTINFO,
//	      IPV6_RECVTCLASS, UDP_NO_CHECK6_RX (+ UDP_NO_CHECK6_TX if asked)
//	both: SO_RCVBUFFORCE/SO_SNDBUFFORCE, falling back to SO_RCVBUF/SO_SNDBUF
//
// # IPv4 Identification and the ICRC
//
// The RoCEv2 ICRC is a CRC-32 over the IP header with only TOS, TTL and the
// header checksum masked, so the IPv4 Identification and the flags are
// covered. A UDP socket can neither choose the ID it sends nor see the ID it
// receives. On send, Linux picks the ID in ip_select_ident_segs: a connected
// socket uses a per-socket counter, but an unconnected socket whose packets
// carry DF (and do not ignore it) gets ID 0. IP_PMTUDISC_DO sets DF and does
// not ignore it. So every IPv4 datagram this package sends carries ID 0,
// flags DF, fragment offset 0, and the engine computes the ICRC with exactly
// those values. TestIPv4IDZeroOnWire captures on lo with an AF_PACKET socket
// and asserts ID 0 and DF for datagrams sent to another address.
//
// The other half, verifying the ICRC of received IPv4 packets, is not the
// link's job: rxe sends hashed IDs the socket never sees. The engine solves
// for the 16-bit ID (the CRC is linear in it) or skips the check by policy;
// Message carries the addresses and TOS it needs. IPv6 has no ID, and the
// fields that vary in flight (traffic class, flow label, hop limit) are
// masked, so IPv6 ICRCs verify exactly.
//
// UDP GSO is not used. With GSO the kernel builds the segments' IPv4 headers
// itself and their IDs are not guaranteed to be 0, which would break the
// ICRC; segments must also be equal-sized, which a WRITE FIRST with its RETH
// is not. Enable it only after a capture proves the IDs.
//
// # Buffers
//
// GetBuffer and PutBuffer share fixed *[MaxDatagram]byte arrays (PutBuffer
// does not allocate). A buffer has exactly one owner; a Link never keeps a
// Message's buffer after the call returns.
package link
