// Package link moves RoCEv2 datagrams between the transport engine and the
// network. It is the analogue of wireguard-go's conn package: a small Link
// interface (batch read, batch write, close) with optional extras (Receivers
// for several receive paths, Multicaster for IP groups), one real
// implementation over UDP sockets (UDP), a pcap Tap that wraps any Link, an
// in-memory Pipe for tests, and shared pools of datagram and train buffers.
// It never looks inside the BTH. A seeded lossy wrapper lives in
// link/impair.
//
// # Sockets
//
// ListenUDP binds an unconnected UDP socket to the device's exact IP and
// port 4791 (RoCEv2Port): rxe checks that RC packets come from the address in
// the peer's GID, so a wildcard bind is refused. Reads and writes use
// recvmmsg/sendmmsg through syscall.RawConn, so blocking goes through the Go
// netpoller and Close unblocks a reader with net.ErrClosed. The mmsghdr,
// iovec, sockaddr and control-message storage is pooled per call and points
// at the caller's buffers, so steady-state I/O does not allocate
// (TestUDPZeroAlloc: plain datagrams, trains with gather lists and header
// fields, GRO reads).
//
// SourcePort opens further send-only sockets on the same address, one per
// extra UDP source port (rxe varies the source port per QP for ECMP
// entropy), with the same options and a minimal receive buffer; WriteBatch
// sends each run of messages with one Message.SrcPort through its socket.
// Config.MaxSourcePorts bounds them (64 by default), and a port another
// socket holds is refused: the caller then sends from the bound port. Those
// sockets stay out of the Go netpoller (unpolledSock): the poller watches a
// socket for writability too, and every datagram the kernel frees after a
// send would queue it an event nobody waits for. A sender whose socket
// buffer is full waits in poll(2) instead.
//
// Network namespaces: the link remembers the namespace of the thread that
// called ListenUDP (an open /proc/thread-self/ns/net), and opens the sockets
// of SourcePort and JoinGroup there, from whatever goroutine calls them, so
// a link opened in a namespace (a test's, on a locked thread) stays whole.
//
// Why not golang.org/x/net/ipv4.PacketConn.ReadBatch: on Linux it allocates a
// net.IP and a *net.UDPAddr for every datagram received, and its
// ControlMessage parser allocates again for PKTINFO
// (BenchmarkXNetReadBatch shows the count). The mmsghdr code here is the same
// system call with netip.AddrPort values instead.
//
// Socket options (set before bind):
//
//	IPv4: IP_MTU_DISCOVER=IP_PMTUDISC_DO, IP_PKTINFO, IP_RECVTOS, IP_RECVTTL,
//	      IP_MULTICAST_IF (the address's interface), IP_MULTICAST_TTL
//	IPv6: IPV6_MTU_DISCOVER=IPV6_PMTUDISC_DO, IPV6_RECVPKTINFO,
//	      IPV6_RECVTCLASS, IPV6_RECVHOPLIMIT, IPV6_FLOWINFO (receive the
//	      flow label), IPV6_FLOWINFO_SEND, IPV6_MULTICAST_IF,
//	      IPV6_MULTICAST_HOPS, UDP_NO_CHECK6_RX (+ UDP_NO_CHECK6_TX if asked)
//	both: SO_RCVBUFFORCE/SO_SNDBUFFORCE, falling back to SO_RCVBUF/SO_SNDBUF;
//	      SO_REUSEPORT with Config.Readers > 1; UDP_GRO on a reader once it
//	      is read with MaxTrain buffers
//
// # Several readers (SO_REUSEPORT)
//
// With Config.Readers = N > 1 the link binds N sockets to the same address
// and port with SO_REUSEPORT (the first one also sends). The kernel picks
// the socket of each datagram by a hash of its 4-tuple, so the per-QP source
// ports of RoCE peers spread QPs over the sockets while every flow stays on
// one (in order). ReceiveFuncs returns one function per socket, each meant
// for its own goroutine (wireguard-go's ReceiveFunc idea); ReadBatch is the
// first. A caller that reads only ReadBatch must keep Readers at 1: what the
// kernel puts on an unread socket is lost. TestReadersSpreadFlows shows 32
// flows over 2 sockets, each flow on one socket, nothing lost or doubled.
// Readers = 1 binds without SO_REUSEPORT, so the port stays exclusive.
//
// # Per-datagram IP header fields
//
// Message.TOS (DSCP<<2 | ECN), Message.TTL (TTL / hop limit) and, for IPv6,
// Message.FlowLabel set the IP header of each datagram sent. TOS and TTL go
// in IP_TOS / IP_TTL or IPV6_TCLASS / IPV6_HOPLIMIT control messages, added
// only when the value differs from the socket's default (TOS 0, the
// kernel's default TTL, Config.MulticastTTL for a group), so the common
// datagram carries no control message at all (TestTxControlOnlyWhenAsked).
// ECN: ECT(0) is TOS 0b10 in the low bits; Linux keeps a UDP sender's ECN
// bits. The flow label rides in sin6_flowinfo with IPV6_FLOWINFO_SEND, and
// Linux only sends labels the socket holds a lease for (IPV6_FLOWLABEL_MGR):
// each sending socket leases a label on its first use, shared
// (IPV6_FL_S_ANY), for its lifetime. The kernel bounds leases (32 per socket
// without CAP_NET_ADMIN, 4096 per host); a refused lease is logged once and
// the datagram goes out with the kernel's own label (counted in
// Counters.FlowLabelRefused). FlowLabel 0 leaves the label to the kernel
// (a hash of the flow when net.ipv6.auto_flowlabels is on).
//
// On read, Message.TOS, TTL and FlowLabel report the header as the kernel
// saw it (IP_RECVTOS / IPV6_RECVTCLASS, IP_RECVTTL / IPV6_RECVHOPLIMIT,
// IPV6_FLOWINFO), CE marks included, so a UD receiver can fill its GRH and a
// congestion notification point can see CE. The ICRC masks TOS, TTL and
// the flow label, so none of this changes an ICRC; TestHeaderFieldsPerMessage
// captures on lo and checks the fields on the wire, and that IPv4 datagrams
// still carry ID 0, DF and a valid header checksum.
//
// # IPv4 Identification and the ICRC
//
// The RoCEv2 ICRC is a CRC-32 over the IP header with only TOS, TTL and the
// header checksum masked, so the IPv4 Identification and the flags are
// covered. A UDP socket can neither choose the ID it sends nor see the ID it
// receives. On send, Linux picks the ID in ip_select_ident_segs: a connected
// socket uses a per-socket counter, but an unconnected socket whose packets
// carry DF (and do not ignore it) gets ID 0. IP_PMTUDISC_DO sets DF and does
// not ignore it. So every IPv4 datagram this package sends alone carries ID
// 0, flags DF, fragment offset 0, and the engine computes the ICRC with
// exactly those values. TestIPv4IDZeroOnWire captures on lo with an
// AF_PACKET socket and asserts ID 0 and DF for datagrams sent to another
// address.
//
// The other half, verifying the ICRC of received IPv4 packets, is not the
// link's job: rxe sends hashed IDs the socket never sees. The engine solves
// for the 16-bit ID (the CRC is linear in it) or skips the check by policy;
// Message carries the addresses and TOS it needs. IPv6 has no ID, and the
// fields that vary in flight (traffic class, flow label, hop limit) are
// masked, so IPv6 ICRCs verify exactly.
//
// # GSO trains
//
// A Message with SegSize set is a train: consecutive datagrams of SegSize
// bytes (the last may be shorter) to one destination from one source port
// with the same header fields, given as Buf or as a gather list (Pieces: for
// example header, registered-memory slice and ICRC of each segment, sent
// with no copy). The link sends a train as UDP GSO super-datagrams: one
// sendmmsg entry with a UDP_SEGMENT control message (gso_size = SegSize),
// the kernel building each segment's IP and UDP headers. Limits: at most
// GSOMaxSegments (64, UDP_MAX_SEGMENTS of the first GSO kernels; 6.x allows
// 128) segments and GSOMaxBytes (65507) of payload per super-datagram, and
// the kernel's UIO_MAXIOV (1024) iovecs per entry; a longer train is split
// into super-datagrams of exactly GSOSegments(SegSize) segments (15 for
// 4112-byte segments). A train of one segment is sent as a plain datagram.
//
// The IPv4 ID of a segment (measured): in one super-datagram sent from our
// unconnected DF socket, segment i gets ID i. udp_sendmsg builds one header
// with ID 0 (ip_select_ident_segs, as above), and when the super-datagram is
// split in software (__udp_gso_segment via inet_gso_segment: a device
// without UDP segmentation offload, a receiver without UDP_GRO, a qdisc),
// inet_gso_segment numbers the copies id, id+1, ...; UDP has no fixed-ID
// flag. Each super-datagram starts at 0 again. TestGSOSegmentIDsOnWire
// proves it on a path that really segments: a veth pair between two test
// namespaces with tx-udp-segmentation switched off (ethtool ioctl), captured
// with AF_PACKET on the sending veth: a 60-segment train of 1200-byte
// segments leaves as IDs 0..53 then 0..5 (two super-datagrams), every
// header checksum valid, and every segment's ICRC, computed by the test with
// TrainIPv4ID, verifies over the header on the wire; with the offload on,
// the same capture sees two super-datagrams, so it tells the cases apart.
// (On lo the super-datagram is never split before a tap, so lo proves
// nothing about segment IDs.) GSOSegmentIPv4ID states the rule and
// TrainIPv4ID applies the split: the engine computes the ICRC of segment j
// of a train with TrainIPv4ID(SegSize, j). A NIC with hardware UDP
// segmentation builds the headers itself; no test here covers hardware.
//
// Fallbacks. GSO is not used when Config.NoGSO is set, with ZeroChecksum6
// on IPv6 (the kernel refuses UDP_SEGMENT without a checksum), or on a
// kernel without UDP_SEGMENT (before 4.18, found at ListenUDP). Where the
// kernel refuses a super-datagram on send (EIO: no checksum offload before
// 6.11, an IPsec route; EINVAL: no checksum, too many segments;
// ENOPROTOOPT), the link turns GSO off for its lifetime, logs once
// (Config.Logger, silent by default), counts (Counters.GSOFallbacks) and
// sends the rest of the train, and every train after it, one datagram per
// segment (Counters.GSOFallbackSegments). Sent alone, an IPv4 segment gets
// ID 0 instead of TrainIPv4ID, so the link re-keys its ICRC: the CRC is
// affine in its input, so changing the ID from a to b changes the ICRC by
// a constant that depends only on a^b and the datagram's length
// (ICRCIDDelta). The re-keyed trailer goes out from the link's own storage;
// the caller's bytes are not written. TestGSOFallback forces the refusal
// with SO_NO_CHECK (EINVAL) and checks, by capture, ID 0 and a verifying
// ICRC on every datagram, one log line and the counters. UDP.GSO reports
// whether trains currently go out with GSO.
//
// # GRO
//
// A reader turns UDP_GRO on for its socket the first time it is read with
// every buffer of capacity MaxTrain (64 KiB, GetTrainBuffer), unless
// Config.NoGRO. From then on the kernel hands a coalesced run of datagrams
// of one flow (same size but the last, same header fields) as one message:
// Buf holds the train and SegSize its segment size (from the UDP_GRO control
// message), and Message.Segment(i) reslices segment i with no copy
// (TestGROTrain: a GSO train on lo arrives whole and splits back byte for
// byte). On lo only GSO trains coalesce; a NIC with GRO coalesces separate
// datagrams too. The kernel coalesces only datagrams whose TOS, TTL and
// flow label agree, so the message's header fields hold for every segment.
// Reads with smaller buffers never turn GRO on and get one datagram per
// message, so a caller that passes MaxDatagram buffers (the engine today) is
// unaffected; a train arriving at a GRO socket read with small buffers is
// dropped and counted in Truncated.
//
// Split by reslicing, not by copying into the caller's buffers: splitting
// costs nothing but the slices, where copying each segment into its own
// MaxDatagram buffer costs a copy per datagram (BenchmarkGROSplit; its
// numbers are in bench/README.md). The reader that keeps a train must keep
// its MaxTrain buffer until every segment is consumed.
//
// # Whole trains
//
// A train sent to a loopback address reaches a receiver that reads with GRO
// as the one GSO datagram it left as: one trip through the kernel, every
// segment in one read. WholeTrains (the optional WholeTrainer interface)
// reports that for a destination, and the engine then lets an ACK ride as
// a train's shorter last segment behind the reply it must reach the peer
// before, which the receiving engine handles first. The link answers true
// for a loopback address while it sends GSO and reads with GRO itself,
// taking the peer (a program on this host at this link's port, which rxe's
// kernel socket cannot share) to read as it does. Elsewhere a network may
// deliver the segments apart, so no other address qualifies. A Pipe answers
// by its peer's GRO; Tap, and the links of cm/gsi and internal/core/attach, by
// the link they wrap.
//
// # Multicast
//
// A socket bound to the device's unicast address never receives datagrams
// sent to a group. JoinGroup opens one socket per group, bound to group:port
// with SO_REUSEADDR (other devices and processes may join the same group on
// the same port) and joined on the device's interface (Interface) with
// IP_MULTICAST_ALL off, and returns its ReceiveFunc; LeaveGroup closes it,
// ending that function with net.ErrClosed. The net package cannot bind a
// group address (it binds the wildcard instead), so the socket is made with
// raw system calls. Sending to a group needs no extra socket: the sending
// sockets carry IP_MULTICAST_IF (the device's interface) and
// IP_MULTICAST_TTL / IPV6_MULTICAST_HOPS (Config.MulticastTTL, 1 by
// default), and IP_MULTICAST_LOOP (the kernel's default) loops a copy to
// members on the same host. Tested on lo (IPv4) and across a veth pair in
// two test namespaces (IPv4, IPv6 site- and link-local scope groups).
//
// # Buffers
//
// GetBuffer and PutBuffer share fixed *[MaxDatagram]byte arrays, GetTrainBuffer
// and PutTrainBuffer *[MaxTrain]byte ones (Put does not allocate). A buffer
// has exactly one owner; a Link never keeps a Message's buffer after the
// call returns.
//
// # Switches
//
// Config, all off by default: NoGSO (trains go out one datagram per
// segment), NoGRO (never turn UDP_GRO on), Readers (SO_REUSEPORT receive
// sockets, 1 by default), MulticastTTL (1 by default), ZeroChecksum6 (IPv6
// UDP checksum 0 as rxe sends; turns GSO off), Logger (nil is silent),
// BatchSize, SocketBuffer, MaxSourcePorts. GRO is on only for readers that
// pass MaxTrain buffers, so the caller decides per receive path.
//
// # Counters
//
// UDP.Counters snapshots what the link did: truncated datagrams, GSO
// super-datagrams and their segments, GSO refusals and segments sent alone,
// GRO trains and their segments, refused flow labels.
//
// # Test doubles
//
// Pipe (NewPipe) joins two in-memory ends: trains arrive segment by segment,
// or whole once the reader passes MaxTrain buffers (as GRO); header fields
// pass through (TTL 0 arriving as 64); PipeConfig.Readers spreads source
// ports over several receive functions; JoinGroup works between the two
// ends (and loops back). Wrap any Link in NewTap for a pcap Wireshark opens:
// a train is recorded segment by segment with the IPv4 IDs TrainIPv4ID gives.
package link
