// Package attach is the protocol between roced and the processes that share
// one of its addresses, and the client's side of it.
//
// # Transport
//
// A SOCK_SEQPACKET Unix socket (roced's -socket; clients read
// $GOROCE_ROCED_SOCKET, else DefaultSocket; "none" never attaches). One
// packet is one message of at most MaxMessage bytes: an 8-byte header
// (Version, Type, two flag bytes, a big-endian Seq) and the type's fields,
// big-endian, strings and byte strings length-prefixed (see Msg for which
// type carries what). The decoder refuses a short, long, unknown or
// trailing-byte message with EPROTO, EMSGSIZE, EOPNOTSUPP or
// EPROTONOSUPPORT (another Version) and never panics
// (FuzzDecode). Descriptors travel as SCM_RIGHTS; only Grant carries one.
//
// # Who may attach
//
// connect(2) on the socket needs write permission on its file, so the
// file's owner, group and mode (roced's -socket-mode, -socket-group) decide
// who may attach; roced learns each process's pid, uid and gid from
// SO_PEERCRED, which the kernel fills in and the process cannot forge, and
// counts quotas per uid.
//
// # A session
//
//	client                          roced
//	Hello{Addr, Port, Name}  →
//	                         ←      Grant{Block, First, Last, CommIDs, Flags, MTU} + fd
//	                         ←      Error{Errno, Text}   (refused: ENODEV not served,
//	                                EUSERS full, ESHUTDOWN stopping)
//	MADOut{to, MAD}          →      sent from QP1 if the MAD is the client's
//	                         ←      MADIn{from, MAD}     a CM MAD routed to the client
//	Claim{ServiceID, UD}     →      ← OK | Error (EADDRINUSE: another process listens)
//	Release{ServiceID, UD}   →
//	Charge{Kind, Delta}      →      ← OK | Error (EDQUOT)
//	                         ←      Query
//	Report{Body}             →      the client's counters and QPs (JSON, Report)
//
// The fd of Grant is the block's socket of the address's steered group
// (package link/steer): the kernel delivers to it exactly the datagrams
// whose BTH DestQP lies in [First, Last]. The client opens its engine on it
// with QPNs from that range (Link drops and counts anything else) and
// communication IDs under CommIDs, so roced routes replies by ID. roced
// routes REQ and SIDR_REQ by service ID (Claim), the rest by communication
// ID or request ID; a MAD no live process owns is dropped and counted.
//
// # When the session ends
//
// The session is the attachment: a process that exits, is killed or
// closes its device ends it, and roced then releases its block (quarantined
// for a while so late datagrams are dropped, not handed to the next
// process), its listens and its charges, and sends a DREQ for each of its
// connections. When roced exits or restarts, every client's session ends:
// the attached device raises IBV_EVENT_DEVICE_FATAL, its QPs go to the
// error state (QP_FATAL, WRs flushed), and it closes the block's socket.
// Established QPs do not survive a roced restart: roced owned QP1, the CM
// state and the group, and a new roced cannot bind its group while any
// member of the old one is open. A client opens its device again (roce.Open)
// once roced is back.
package attach
