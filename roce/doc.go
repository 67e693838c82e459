// Package roce is the verbs API of goroce: the objects an RDMA programmer knows from
// libibverbs (device, PD, MR, AH, CQ, SRQ, QP, async events) over a user-space RoCEv2
// engine that speaks UDP port 4791. It is what most programs import.
//
// roce is a facade over the library's core (internal/core): cq holds completion
// queues, srq receive queues, transport runs the QPs on the wire, and package link
// moves datagrams. The values a program fills in and reads (WC, SGE, RecvWR,
// SendWR, QPAttr, QPCap, AddressVector, SRQAttr, QPInfo, Stats) and the
// enumerations (QPState, WROpcode, WCStatus, ...) are declared once, in
// internal/core/verbs, and named here by aliases: `go doc ./internal/core/verbs
// SendWR` shows a struct's fields, and PostSend, PostRecv and Poll hand the values
// to the engine as they are. roce itself owns registration (PD, MR keys and the
// lkey/rkey registry the engine resolves keys through), address handles, reference
// counts between objects, device attributes, the GID table, and async event
// delivery.
//
// # Data flow
//
//	user goroutines                      engine (transport)                  wire
//	───────────────                      ──────────────────                  ────
//	QP.PostSend ──► send queue ──kick──► shard: requester ──► link.WriteBatch ──► UDP 4791
//	QP/SRQ.PostRecv ──► srq.Queue                                                 │
//	                       ▲                                                      ▼
//	                       └── Pop ◄── shard: responder ◄── demux by QPN ◄── link.ReadBatch
//	                                     │   │ RDMA WRITE/READ/ATOMIC
//	                                     │   └──► Memory (roce MR registry: rkey → []byte)
//	CQ.Poll ◄── cq.Queue ◄── Push ◄──────┘   completer (ACK/NAK, retries)
//	CQ.Notify ◄── one-shot, armed by ReqNotify
//	Device.Events ◄── CQ_ERR, QP_FATAL, COMM_EST, LAST_WQE_REACHED, SRQ_LIMIT_REACHED, ...
//
// # Verbs
//
// Every method says in its doc comment which libibverbs call it mirrors:
//
//	libibverbs                   Go
//	───────────────────────────  ───────────────────────────────────────────────
//	ibv_open_device              Open(addr, opts...) / OpenLink(link, opts...)
//	ibv_close_device             (*Device).Close()
//	ibv_query_device             (*Device).Query() (DeviceAttr, error)
//	ibv_query_port               (*Device).QueryPort(1) (PortAttr, error)
//	ibv_query_gid                (*Device).QueryGID(index) (GID, error)
//	ibv_query_pkey               (*Device).QueryPKey(index) (uint16, error)
//	ibv_get_async_event          (*Device).Events() <-chan AsyncEvent
//	ibv_ack_async_event          (none: nothing to acknowledge)
//	ibv_alloc_pd                 (*Device).AllocPD() (*PD, error)
//	ibv_dealloc_pd               (*PD).Close() error
//	ibv_reg_mr                   (*PD).RegMR(buf, access) (*MR, error)
//	ibv_reg_mr_iova              (*PD).RegMRIOVA(buf, iova, access) (*MR, error)
//	ibv_dereg_mr                 (*MR).Close() error
//	mr->lkey, mr->rkey, mr->addr (*MR).LKey(), RKey(), Addr(), Len()
//	ibv_alloc_mw                 (*PD).AllocMW(MWType1 | MWType2) (*MW, error)
//	ibv_bind_mw (type 1)         (*QP).BindMW(mw, MWBind) (rkey, error)
//	IBV_WR_BIND_MW (type 2)      SendWR{Opcode: WRBindMW, BindMW: mw.Bind(MWBindInfo)}
//	ibv_dealloc_mw               (*MW).Close() error
//	mw->rkey, ibv_inc_rkey       (*MW).RKey(), IncRKey(rkey)
//	ibv_create_ah                (*PD).CreateAH(AHAttr) (*AH, error)
//	ibv_destroy_ah               (*AH).Close() error
//	ibv_init_ah_from_wc          (*Device).InitAHFromWC(wc, grh) (AHAttr, error)
//	ibv_create_ah_from_wc        (*PD).CreateAHFromWC(wc, grh) (*AH, error)
//	ibv_attach_mcast             (*QP).AttachMcast(gid, lid) error
//	ibv_detach_mcast             (*QP).DetachMcast(gid, lid) error
//	ibv_create_cq                (*Device).CreateCQ(cqe) (*CQ, error)
//	ibv_destroy_cq               (*CQ).Close() error
//	ibv_poll_cq                  (*CQ).Poll(wc []WC) (int, error)
//	ibv_req_notify_cq            (*CQ).ReqNotify(solicitedOnly) error
//	ibv_get_cq_event             <-(*CQ).Notify()
//	ibv_ack_cq_events            (none)
//	poll + arm + poll + sleep    (*CQ).Wait(ctx, wc []WC) (int, error)
//	ibv_resize_cq                (*CQ).Resize(cqe) (int, error)
//	ibv_create_srq               (*PD).CreateSRQ(SRQInitAttr) (*SRQ, error)
//	ibv_destroy_srq              (*SRQ).Close() error
//	ibv_modify_srq               (*SRQ).Modify(*SRQAttr, SRQAttrMask) error
//	ibv_query_srq                (*SRQ).Query() (SRQAttr, error)
//	ibv_post_srq_recv            (*SRQ).PostRecv([]RecvWR) (int, error)
//	ibv_create_qp                (*PD).CreateQP(QPInitAttr) (*QP, error)
//	ibv_destroy_qp               (*QP).Close() error
//	ibv_modify_qp                (*QP).Modify(*QPAttr, QPAttrMask) error
//	ibv_query_qp                 (*QP).Query() (QPAttr, error), (*QP).InitAttr()
//	ibv_post_send                (*QP).PostSend([]SendWR) (int, error)
//	ibv_post_recv                (*QP).PostRecv([]RecvWR) (int, error)
//	qp->qp_num                   (*QP).QPN()
//	(rdma stat, per-QP dump)     (*Device).Stats(), (*Device).QPs()
//
// The linked lists of C (wr->next, sg_list/num_sge) are Go slices. bad_wr becomes the
// io.Writer convention: post verbs return how many WRs were queued and an error whose
// Index is the WR that was refused; the WRs before it stay queued.
//
// # GID table
//
// Index 0 is the default link-local GID (fe80::<node GUID>) and index 1 is the
// RoCEv2 GID of the address the device was opened on (::ffff:a.b.c.d for IPv4), the
// layout of rxe, so the usual "-g 1" (perftest "-x 1") selects RoCEv2 over IPv4 here
// as it does on rxe. The socket is bound only to the address, so a QP or AH must use
// index 1 (Device.GIDIndex); index 0 is refused with EINVAL. A device opened on an
// IPv6 link-local address has that address alone, at index 0.
//
// # Memory windows
//
// A memory window (AllocMW) gives a peer an rkey onto part of an MR, with its own
// rights, that can be moved or revoked without touching the MR; the MR needs
// AccessMWBind. Keys are index<<8 | key byte, as on rxe: a bind gives the window
// the next key byte (IncRKey), so a peer that kept an older rkey is refused. Type 1
// windows are bound with QP.BindMW and rebound or unbound (zero length) the same
// way; type 2 windows (type 2B) are bound by a BIND_MW work request to the QP that
// posts it, serve only that QP, and are freed again by LOCAL_INV or by a peer's
// SEND_WITH_INV naming their rkey, after which a WRITE through that rkey is a
// remote access error. Only such a window can be invalidated: an MR's rkey in a
// SEND_WITH_INV completes the receive with REM_INV_REQ_ERR and fails the QP, as
// on rxe, whose user MRs are no fast-registration MRs. Binds and invalidations
// run in send-queue order and complete with WCBindMW and WCLocalInv, or with
// WCMWBindErr and WCLocQPOpErr, after which the QP is in ERR. Where rxe is laxer
// than the IBA, goroce follows the IBA: an access through a window must stay within
// the window (rxe checks the MR's bounds), and a SEND_WITH_INV or LOCAL_INV must
// come from a QP of the window's PD and, for a bound type 2B window, from its QP.
//
// # FLUSH and ATOMIC_WRITE
//
// The IBA 1.5 operations rxe offers since Linux 6.2, on RC QPs: WRFlush (opcode
// 0x1c: a FETH with the placement types and selectivity, then a RETH) asks the
// responder to make earlier writes to a range, or to the whole MR, globally
// visible or persistent; WRAtomicWrite (0x1d: a RETH and 8 bytes) stores 8 bytes
// at once. Both are answered by an empty RDMA READ RESPONSE ONLY and complete
// with WCFlush and WCAtomicWrite; DeviceAttr.DeviceCapFlagsEx advertises
// DeviceFlushGlobal, DeviceFlushPersistent and DeviceAtomicWrite, as rxe. The
// responder needs the QP's AccessFlushGlobal
// or AccessFlushPersistent and the memory's (FLUSH), or REMOTE_WRITE
// (ATOMIC_WRITE, 8-byte aligned). Go memory is not persistent memory, so no MR
// carries AccessFlushPersistent (RegMR: EINVAL, as rxe for ordinary pages) and a
// persistent FLUSH is a remote access error.
//
// # UD multicast
//
// On RoCE a multicast GID is an IP multicast group: ::ffff:a.b.c.d for an IPv4
// group, the IPv6 group itself. QP.AttachMcast attaches a UD QP to it; the first
// QP of the device to attach joins the IP group on the device's interface (IGMP or
// MLD, as the kernel does for rdma_join_multicast), the last to detach leaves it. A
// UD send through an AH whose DGID is the group, with RemoteQPN McastQPN
// (0xFFFFFF), reaches every QP attached to the group on every member device, the
// sender's own included (the kernel's multicast loopback), each with its own copy,
// each checking the Q_Key as for any datagram. The datagram's IP header carries
// the AH's traffic class and hop limit (and flow label on IPv6), so rdma_cm's
// multicast AH sends with hop limit 64. Package cm/mcast maps an IP group to its
// MGID and joins it as rdma_join_multicast does on RoCE (no SA).
//
// # Errors
//
// Every verb returns *Error, whose cause is a syscall.Errno, so
// errors.Is(err, syscall.EINVAL) works as an errno comparison does in C; errors.As
// gives its Op, Obj, Index (bad_wr), Errno and Detail. It is the one error type of
// roce, cq, srq and transport: an error raised below roce reaches the user with the
// verb the user called and the object's name, once ("roce: ibv_modify_qp qp 0x11:
// invalid argument: illegal transition RESET->RTR"). The errno choices are fixed:
//
//	EINVAL  the caller's mistake: bad attribute or mask, illegal QP transition,
//	        missing or forbidden attribute for a transition, too many SGEs (not
//	        ENOMEM, as mlx5 since linux 24be409b), an opcode the QP type does not
//	        have, an SRQ limit above max_wr, a CQ resize below the completions held,
//	        a QP with an SRQ given to PostRecv, a verb on a destroyed object (which
//	        also matches net.ErrClosed).
//	ENOMEM  a resource is exhausted: a full send, receive or shared receive queue;
//	        max_qp, max_mr, max_mw, max_cq, max_pd, max_ah, max_srq or a multicast
//	        limit reached.
//	ENOSYS  not implemented by this device: SRQ resize when WithLimits turned it off,
//	        multicast on a link that cannot join IP groups (OpenLink).
//	EPERM   ibv_bind_mw with an MR of another PD than the window's.
//	EOPNOTSUPP  an access flag rxe does not support (ON_DEMAND, ZERO_BASED or
//	        HUGETLB on an MR).
//	EBUSY   destroying an object still in use: a PD with MRs, AHs, SRQs or QPs, a CQ
//	        or SRQ attached to a QP, an MR with memory windows bound to it.
//	ENODEV  the Device was closed. Such errors also match net.ErrClosed, so shutdown
//	        code can test one condition.
//
// Failures on the data path are not Go errors: they arrive as completion statuses
// (WCRemAccessErr, WCRetryExcErr, ...), async events and counters (Device.Stats).
//
// # Concurrency
//
// All verbs are safe for concurrent use. The engine never waits for the program: the
// Events channel is buffered and drops (and counts) what does not fit, and a CQ that
// overflows raises CQ_ERR instead of blocking.
package roce
