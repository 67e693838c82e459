package roce

import (
	"net/netip"

	"github.com/goroce/goroce/bth"
)

// The value types of the verbs API are declared twice: here, where a user reads them
// (go doc shows every field), and in the package below that stores them (cq keeps
// completions, srq receive WRs, transport send WRs and QP attributes). Both
// declarations of a type have the same fields in the same order, of the same types
// or of types that are such twins themselves, so each value is the other in memory
// and crossing the boundary copies nothing (see convert.go).

// SGE is a scatter/gather element (struct ibv_sge): a range of registered memory.
type SGE struct {
	// Addr is the start of the range in the MR's address space: MR.Addr() plus an
	// offset (addr).
	Addr uint64
	// Length is the length of the range in bytes; 0 means 2^31 bytes, not none
	// (length, as ibv_post_srq_recv(3) says).
	Length uint32
	// LKey is the local key of the MR that holds the range, MR.LKey() (lkey).
	LKey uint32
}

// RecvWR is a receive work request (struct ibv_recv_wr) for QP.PostRecv and
// SRQ.PostRecv. The slice of WRs a post takes replaces the next pointer.
type RecvWR struct {
	// WRID comes back in the completion (wr_id); it means nothing to the device.
	WRID uint64
	// SGL is the scatter list (sg_list, num_sge): at most max_recv_sge entries, or
	// the SRQ's max_sge. Empty, the WR takes only a 0-byte message. On a UD QP the
	// first 40 bytes receive the GRH.
	SGL []SGE
}

// SendWR is a send work request (struct ibv_send_wr) for QP.PostSend. The slice of
// WRs a post takes replaces the next pointer; the fields of C's wr union are flat.
type SendWR struct {
	// WRID comes back in the completion (wr_id).
	WRID uint64
	// Opcode is the operation (opcode); the QP type limits which are allowed.
	Opcode WROpcode
	// Flags are the send_flags: SendSignaled asks for a completion (every WR has
	// one on a QP created with SQSigAll), SendInline copies the data at post
	// time, SendFence waits for earlier READs and atomics, SendSolicited sets the
	// solicited event bit.
	Flags SendFlags
	// SGL is the gather list (sg_list, num_sge), at most max_send_sge entries; for
	// READ and atomics it is where the response lands (8 bytes for an atomic).
	SGL []SGE
	// Imm is the immediate data of SEND_WITH_IMM and RDMA_WRITE_WITH_IMM
	// (imm_data), a number in host order; it travels big-endian and arrives as
	// WC.ImmData.
	Imm uint32
	// InvRKey is the rkey SEND_WITH_INV asks the responder to invalidate
	// (invalidate_rkey).
	InvRKey uint32
	// RemoteAddr is the remote address of an RDMA or atomic operation
	// (wr.rdma.remote_addr, wr.atomic.remote_addr).
	RemoteAddr uint64
	// RKey is the remote key of that memory (wr.rdma.rkey, wr.atomic.rkey).
	RKey uint32
	// CompareAdd is the value ATOMIC_CMP_AND_SWP compares with, or the one
	// ATOMIC_FETCH_AND_ADD adds (wr.atomic.compare_add).
	CompareAdd uint64
	// Swap is the value ATOMIC_CMP_AND_SWP stores when the comparison holds
	// (wr.atomic.swap), and the 8 bytes ATOMIC_WRITE stores, in host byte order
	// (what wr_atomic_write's atomic_wr points to).
	Swap uint64
	// AH is the destination of a UD send, AH.AV() (wr.ud.ah). The engine copies it
	// at post time.
	AH *AddressVector
	// RemoteQPN is the destination QP of a UD send (wr.ud.remote_qpn).
	RemoteQPN uint32
	// RemoteQKey is the Q_Key of a UD send (wr.ud.remote_qkey); with its high bit
	// set the QP's own Q_Key is sent instead.
	RemoteQKey uint32
	// BindMW is the bind a BIND_MW WR executes (wr.bind_mw); see MWBindWR.
	BindMW MWBindWR
	// Flush is what a FLUSH WR asks for (ibv_wr_flush's type, level and len);
	// RemoteAddr and RKey name the memory.
	Flush FlushWR
}

// FlushWR is the FLUSH of a WRFlush work request: Type is FlushGlobal and/or
// FlushPersistent (the placement types), Level is FlushRange ([RemoteAddr,
// RemoteAddr+Length)) or FlushMR (the whole memory region RKey names, Length
// ignored). The responder's QP and memory need the matching AccessFlushGlobal
// or AccessFlushPersistent.
type FlushWR struct {
	// Type is the placement: FlushGlobal, FlushPersistent or both (type).
	Type uint8
	// Level is the selectivity: FlushRange or FlushMR (level).
	Level uint8
	// Length is the length of the range (len); with FlushMR it is not used.
	Length uint32
}

// FLUSH placement types and selectivity levels (enum ibv_placement_type,
// enum ibv_selectivity_level).
const (
	FlushGlobal     = bth.FlushGlobal     // IBV_FLUSH_GLOBAL
	FlushPersistent = bth.FlushPersistent // IBV_FLUSH_PERSISTENT
	FlushRange      = bth.FlushRange      // IBV_FLUSH_RANGE
	FlushMR         = bth.FlushMR         // IBV_FLUSH_MR
)

// MWBindWR is the bind of an IBV_WR_BIND_MW work request (wr.bind_mw: mw, rkey
// and bind_info, in the flat form rxe's kernel WR has). A type 2 window is bound
// this way; a type 1 window through QP.BindMW, which posts one.
type MWBindWR struct {
	// MWRKey names the window: its current rkey, MW.RKey().
	MWRKey uint32
	// RKey is the rkey the window has after the bind; only its key byte (the
	// low 8 bits) is taken, so IncRKey(mw.RKey()) is the usual value. A peer
	// holding the previous rkey is refused from then on.
	RKey uint32
	// MRLKey names the MR the window opens onto (bind_info.mr->lkey); the MR
	// must have been registered with AccessMWBind.
	MRLKey uint32
	// Addr and Length are the window's range of the MR (bind_info.addr,
	// .length). Length 0 unbinds a type 1 window.
	Addr, Length uint64
	// Access are the rights the window grants (bind_info.mw_access_flags):
	// remote read, write, atomic, and for a type 2 window AccessZeroBased.
	Access Access
}

// WC is a work completion (struct ibv_wc), as CQ.Poll returns it.
type WC struct {
	// WRID is the wr_id of the work request that completed.
	WRID uint64
	// Status is the outcome (status). Unless it is WCSuccess, only WRID, Status,
	// QPNum and VendorErr are valid.
	Status WCStatus
	// Opcode is the operation that completed (opcode); receive opcodes have the
	// WCRecv bit.
	Opcode WCOpcode
	// VendorErr is vendor_err.
	VendorErr uint32
	// ByteLen is the number of bytes transferred (byte_len): for a receive, the
	// length of the message, including the 40-byte GRH area on a UD QP.
	ByteLen uint32
	// ImmData is the immediate data (imm_data), valid with WCWithImm in Flags: a
	// number in host order, decoded big-endian from the wire.
	ImmData uint32
	// InvalidatedRKey is the rkey a SEND_WITH_INV named (invalidated_rkey), valid
	// with WCWithInv in Flags.
	InvalidatedRKey uint32
	// QPNum is the number of the local QP the completion belongs to (qp_num).
	QPNum uint32
	// SrcQP is the number of the sending QP of a UD receive (src_qp).
	SrcQP uint32
	// Flags are the wc_flags: WCGRH, WCWithImm, WCWithInv, WCIPCsumOK.
	Flags WCFlags
	// PKeyIndex is the P_Key index of a UD receive (pkey_index).
	PKeyIndex uint16
	// SLID is the source LID (slid), 0 on RoCE.
	SLID uint16
	// SL is the service level (sl).
	SL uint8
	// DLIDPathBits are the destination LID path bits (dlid_path_bits), 0 on RoCE.
	DLIDPathBits uint8
}

// AddressVector says how to reach a peer (struct ibv_ah_attr with its struct
// ibv_global_route): the attributes of CreateAH, QPAttr.AV, and SendWR.AH through
// AH.AV(). RoCE carries every packet in a GRH, so IsGlobal must be true.
type AddressVector struct {
	// DGID is the peer's GID as an IP address (grh.dgid): IPv4 (or IPv4-mapped)
	// for a device on IPv4, IPv6 for one on IPv6.
	DGID netip.Addr
	// SGIDIndex is the index of the local GID the packets leave from
	// (grh.sgid_index): Device.GIDIndex().
	SGIDIndex uint8
	// HopLimit is the IP TTL or hop limit (grh.hop_limit) every packet sent
	// under this AV carries; 0 leaves it to the kernel (its default TTL, or the
	// link's multicast TTL for a group). Linux's RoCE stack replaces a unicast
	// AV's hop limit with the route's (64 where ibv_rc_pingpong asks 1); goroce
	// sends what the AV says.
	HopLimit uint8
	// TrafficClass is the IP traffic class, DSCP and ECN (grh.traffic_class):
	// the IPv4 TOS byte or IPv6 traffic class of every packet sent under this
	// AV, as rxe sends it.
	TrafficClass uint8
	// FlowLabel is the IPv6 flow label, 20 bits (grh.flow_label), put in every
	// IPv6 packet sent under this AV (rxe sends 0; 0 here leaves it to the
	// kernel); a connected QP also derives its UDP source port from it when it
	// is not 0, as rxe does.
	FlowLabel uint32
	// SrcPort is the UDP source port; 0 derives it as rxe does
	// (rdma_get_udp_sport). It has no field in C.
	SrcPort uint16
	// IsGlobal says a GRH is present (is_global); it must be true on RoCE.
	IsGlobal bool
}

// AHAttr holds the attributes of an address handle (struct ibv_ah_attr): an
// AddressVector, whose fields go doc shows.
type AHAttr = AddressVector

// QPCap holds the queue sizes of a QP (struct ibv_qp_cap): requested in
// QPInitAttr.Cap, reported in QPAttr.Cap by Query.
type QPCap struct {
	// MaxSendWR is the depth of the send queue (max_send_wr), 1 to max_qp_wr.
	MaxSendWR uint32
	// MaxRecvWR is the depth of the receive queue (max_recv_wr), 1 to max_qp_wr;
	// not used with an SRQ.
	MaxRecvWR uint32
	// MaxSendSGE is the most SGEs of a send WR (max_send_sge), up to max_sge; 0
	// means 1.
	MaxSendSGE uint32
	// MaxRecvSGE is the most SGEs of a receive WR (max_recv_sge), up to max_sge;
	// 0 means 1; not used with an SRQ.
	MaxRecvSGE uint32
	// MaxInlineData is the largest payload of a SendInline WR in bytes
	// (max_inline_data), up to DeviceAttr.MaxInlineData.
	MaxInlineData uint32
}

// QPAttr holds the attributes of a QP (struct ibv_qp_attr): the input of Modify,
// whose QPAttrMask says which fields count, and the output of Query.
type QPAttr struct {
	// State is the state Modify moves to (qp_state, QPAttrState); from Query, the
	// current state.
	State QPState
	// CurState is the state the caller believes the QP is in (cur_qp_state,
	// QPAttrCurState); Modify fails when it is wrong.
	CurState QPState
	// EnSQDAsyncNotify asks for SQ_DRAINED once the QP in SQD has drained
	// (en_sqd_async_notify).
	EnSQDAsyncNotify bool
	// AccessFlags are the remote operations the QP lets a peer do
	// (qp_access_flags): AccessRemoteWrite, AccessRemoteRead, AccessRemoteAtomic.
	AccessFlags Access
	// PKeyIndex is the index of the QP's P_Key (pkey_index); the table has one
	// entry, 0xffff at index 0.
	PKeyIndex uint16
	// QKey is the Q_Key of a UD QP (qkey).
	QKey uint32
	// AV is the path to the peer of an RC or UC QP (ah_attr), set at RTR.
	AV AddressVector
	// PathMTU is the path MTU of an RC or UC QP (path_mtu), MTU256 to MTU4096; a
	// UD QP uses the port's active MTU.
	PathMTU MTU
	// Timeout is the local ACK timeout, 4.096 µs × 2^Timeout (timeout); 0 waits
	// for ever.
	Timeout uint8
	// RetryCnt is how often a request is sent again after a timeout or a
	// sequence NAK (retry_cnt), 0 to 7; 7 retries for ever, as on rxe.
	RetryCnt uint8
	// RNRRetry is how often a request is sent again after an RNR NAK
	// (rnr_retry), 0 to 7; 7 retries for ever.
	RNRRetry uint8
	// RQPSN is the first PSN the responder expects (rq_psn), 24 bits.
	RQPSN uint32
	// SQPSN is the first PSN the requester sends (sq_psn), 24 bits.
	SQPSN uint32
	// MaxRDAtomic is how many READs and atomics the QP has outstanding as
	// requester at most (max_rd_atomic), up to max_qp_init_rd_atom.
	MaxRDAtomic uint8
	// MaxDestRDAtomic is how many READs and atomics the QP serves at once as
	// responder (max_dest_rd_atomic), up to max_qp_rd_atom.
	MaxDestRDAtomic uint8
	// MinRNRTimer is the RNR NAK timer code the responder sends (min_rnr_timer),
	// 0 to 31.
	MinRNRTimer uint8
	// DestQPN is the peer QP of an RC or UC QP (dest_qp_num), 24 bits.
	DestQPN uint32
	// Cap are the queue sizes (cap); Query reports the actual ones.
	Cap QPCap
	// PortNum is the port (port_num); the device has port 1 only.
	PortNum uint8
}

// SRQAttr holds the attributes of an SRQ (struct ibv_srq_attr).
type SRQAttr struct {
	// MaxWR is the most WRs outstanding (max_wr), 1 to max_srq_wr; SRQMaxWR
	// resizes the SRQ to it.
	MaxWR uint32
	// MaxSGE is the most SGEs of a WR (max_sge), 1 to max_srq_sge; it cannot
	// change after CreateSRQ.
	MaxSGE uint32
	// Limit is the armed low watermark (srq_limit): SRQ_LIMIT_REACHED fires once
	// when fewer WRs remain outstanding, then the SRQ is disarmed (0).
	Limit uint32
}

// QPInfo is a debugging snapshot of one QP, from Device.QPs (roced serves it as
// /debug/qps).
type QPInfo struct {
	// QPN is the QP number.
	QPN uint32
	// Type is the QP's transport service.
	Type QPType
	// State is the QP's state.
	State QPState
	// DestQPN is the peer QP of an RC or UC QP.
	DestQPN uint32
	// Peer is the peer's address, the DGID of the QP's address vector.
	Peer netip.Addr
	// SrcPort is the UDP source port the QP's packets leave from: rxe's port for
	// this QP when the link can send from it, else the device's own.
	SrcPort uint16
	// NextPSN is the PSN of the next request the QP sends.
	NextPSN bth.PSN
	// AckedPSN is the oldest PSN not yet acknowledged.
	AckedPSN bth.PSN
	// ExpectedPSN is the PSN the responder expects next.
	ExpectedPSN bth.PSN
	// MSN is the responder's message sequence number.
	MSN uint32
	// SendQueued is the number of send WRs not yet completed.
	SendQueued int
	// TxPackets is the number of packets the QP sent.
	TxPackets uint64
	// RxPackets is the number of packets the QP received.
	RxPackets uint64
	// Retransmits is the number of packets the QP sent again.
	Retransmits uint64
	// Timeouts is the number of times the QP's retransmission timer expired.
	Timeouts uint64
	// Backoff is the number of consecutive retransmission timeouts without
	// progress: the QP's timer runs at its timeout << Backoff (at most 6).
	Backoff uint8
	// CCRate is the DCQCN rate the QP is paced at, bit/s: the line rate
	// until a CNP limits it. 0 when the device runs without congestion
	// control.
	CCRate uint64
	// CCTargetRate is the rate DCQCN's recovery heads for, bit/s.
	CCTargetRate uint64
	// CCAlpha is DCQCN's congestion estimate α, in units of 1/1024.
	CCAlpha uint32
	// CCCuts is the number of rate cuts CNPs have caused.
	CCCuts uint64
}
