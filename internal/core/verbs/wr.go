package verbs

// Access is a set of memory and QP access flags (enum ibv_access_flags).
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite  Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead   Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	AccessMWBind       Access = 1 << 4 // IBV_ACCESS_MW_BIND: memory windows may be bound to the MR (C10-73)
	// AccessZeroBased addresses a memory window by its offset, not its
	// address; only a type 2 window bound by a BIND_MW WR may be zero based
	// (o10-36.2.2), an MR may not, as on rxe.
	AccessZeroBased Access = 1 << 5 // IBV_ACCESS_ZERO_BASED
	// AccessOnDemand asks for on-demand paging, which the device does not
	// offer: RegMR fails with EOPNOTSUPP, as the kernel does without ODP.
	AccessOnDemand Access = 1 << 6 // IBV_ACCESS_ON_DEMAND
	// AccessHugeTLB promises huge pages behind an on-demand MR; rxe refuses
	// it with EOPNOTSUPP, and so does RegMR.
	AccessHugeTLB     Access = 1 << 7 // IBV_ACCESS_HUGETLB
	AccessFlushGlobal Access = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL: remote FLUSH with global-visibility placement
	// AccessFlushPersistent allows remote FLUSH with persistence placement,
	// which needs persistent memory, and Go memory never is: RegMR refuses
	// it with EINVAL, as rxe does for pages that are not pmem; a QP may carry
	// it.
	AccessFlushPersistent Access = 1 << 9  // IBV_ACCESS_FLUSH_PERSISTENT
	AccessRelaxedOrdering Access = 1 << 20 // IBV_ACCESS_RELAXED_ORDERING, the first optional flag
	// AccessOptionalRange is IBV_ACCESS_OPTIONAL_RANGE, bits 20 to 29: flags
	// a device may ignore. libibverbs strips them when the kernel cannot take
	// them, so a program that passes them still gets its MR; RegMR and Modify
	// accept and drop them the same way.
	AccessOptionalRange Access = (1<<30 - 1) &^ (1<<20 - 1)
)

// SGE is a scatter/gather element (struct ibv_sge): a range of registered
// memory.
type SGE struct {
	Addr uint64 // addr: the range's start in the MR's address space, MR.Addr() plus an offset
	// Length is length in bytes; 0 means 2^31 bytes, not none, as
	// ibv_post_srq_recv(3) says.
	Length uint32
	LKey   uint32 // lkey of the MR that holds the range
}

// Size returns the number of bytes the element describes: Length, or 2^31
// when Length is 0.
func (s SGE) Size() uint32 {
	if s.Length == 0 {
		return 1 << 31
	}
	return s.Length
}

// RecvWR is a receive work request (struct ibv_recv_wr). A post takes a
// slice of WRs, which replaces the next pointer.
type RecvWR struct {
	WRID uint64 // wr_id, returned in the completion
	// SGL is the scatter list (sg_list, num_sge): at most max_recv_sge
	// entries, or the SRQ's max_sge. Empty, the WR takes only a 0-byte
	// message. On a UD QP the first 40 bytes receive the GRH.
	SGL []SGE
}

// Size returns the largest message the WR can take: the sum of its SGE
// sizes.
func (wr *RecvWR) Size() uint64 {
	var n uint64
	for _, s := range wr.SGL {
		n += uint64(s.Size())
	}
	return n
}

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint8

// Send WR opcodes.
const (
	WRRDMAWrite         WROpcode = 0
	WRRDMAWriteWithImm  WROpcode = 1
	WRSend              WROpcode = 2
	WRSendWithImm       WROpcode = 3
	WRRDMARead          WROpcode = 4
	WRAtomicCmpAndSwp   WROpcode = 5
	WRAtomicFetchAndAdd WROpcode = 6
	WRLocalInv          WROpcode = 7
	WRBindMW            WROpcode = 8
	WRSendWithInv       WROpcode = 9
	WRFlush             WROpcode = 14 // RC only: answered by an empty READ RESPONSE
	WRAtomicWrite       WROpcode = 15 // RC only: 8 bytes written at once
)

// SendFlags are the send_flags of a send WR (enum ibv_send_flags).
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0 // IBV_SEND_FENCE: wait for earlier READs and atomics
	SendSignaled  SendFlags = 1 << 1 // IBV_SEND_SIGNALED: complete with a WC (every WR does with SQSigAll)
	SendSolicited SendFlags = 1 << 2 // IBV_SEND_SOLICITED: set the solicited event bit
	SendInline    SendFlags = 1 << 3 // IBV_SEND_INLINE: copy the data at post time
)

// SendWR is a send work request (struct ibv_send_wr). A post takes a slice of
// WRs, which replaces the next pointer; the fields of C's wr union are flat.
// Go has no raw addresses, so the SGEs of a SendInline WR still name
// registered memory, though neither its PD nor its access is checked.
type SendWR struct {
	WRID   uint64    // wr_id, returned in the completion
	Opcode WROpcode  // opcode; the QP type limits which are allowed
	Flags  SendFlags // send_flags
	// SGL is the gather list (sg_list, num_sge), at most max_send_sge
	// entries; for a READ or an atomic it is where the response lands (8
	// bytes for an atomic).
	SGL []SGE
	// Imm is imm_data of SEND_WITH_IMM and RDMA_WRITE_WITH_IMM, a number in
	// host order; it travels big-endian and arrives as WC.ImmData.
	Imm        uint32
	InvRKey    uint32 // invalidate_rkey: what SEND_WITH_INV asks the responder to invalidate
	RemoteAddr uint64 // wr.rdma.remote_addr, wr.atomic.remote_addr
	RKey       uint32 // wr.rdma.rkey, wr.atomic.rkey
	// CompareAdd is what ATOMIC_CMP_AND_SWP compares with, or what
	// ATOMIC_FETCH_AND_ADD adds (wr.atomic.compare_add).
	CompareAdd uint64
	// Swap is what ATOMIC_CMP_AND_SWP stores when the comparison holds
	// (wr.atomic.swap), and the 8 bytes ATOMIC_WRITE stores, in host order.
	Swap uint64
	// AH is the destination of a UD send (wr.ud.ah, AH.AV() in roce); it is
	// copied at post time.
	AH         *AddressVector
	RemoteQPN  uint32 // wr.ud.remote_qpn
	RemoteQKey uint32 // wr.ud.remote_qkey; with the high bit set the QP's own Q_Key is sent
	BindMW     MWBindWR
	Flush      FlushWR
}

// FlushWR is what a FLUSH work request asks for (ibv_wr_flush's type, level
// and len). RemoteAddr and RKey of the SendWR name the memory; the
// responder's QP and memory need AccessFlushGlobal or AccessFlushPersistent
// for the placement types asked.
type FlushWR struct {
	Type   uint8  // placement: bth.FlushGlobal, bth.FlushPersistent or both
	Level  uint8  // selectivity: bth.FlushRange ([RemoteAddr, RemoteAddr+Length)) or bth.FlushMR (the whole MR)
	Length uint32 // len; not used with FlushMR
}

// MWBindWR is the bind of a BIND_MW work request (wr.bind_mw, in the flat
// form of rxe's kernel WR). A type 2 window is bound this way, a type 1
// window through roce's QP.BindMW, which posts one.
type MWBindWR struct {
	MWRKey uint32 // the window's current rkey
	// RKey is the rkey the window has after the bind; only its key byte,
	// the low 8 bits, is taken. A peer holding the previous rkey is refused.
	RKey   uint32
	MRLKey uint32 // bind_info.mr->lkey: the MR, registered with AccessMWBind
	// Addr and Length are the window's range of the MR (bind_info.addr,
	// .length); Length 0 unbinds a type 1 window.
	Addr, Length uint64
	// Access are the rights the window grants (bind_info.mw_access_flags):
	// remote read, write, atomic, and for a type 2 window AccessZeroBased.
	Access Access
}
