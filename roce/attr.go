package roce

import "math"

// DeviceCapFlags are ibv_device_attr's device_cap_flags, with libibverbs' bit values.
type DeviceCapFlags uint32

// Device capability bits this device can report.
const (
	DeviceResizeMaxWR    DeviceCapFlags = 1 << 0  // IBV_DEVICE_RESIZE_MAX_WR
	DeviceBadPKeyCntr    DeviceCapFlags = 1 << 1  // IBV_DEVICE_BAD_PKEY_CNTR
	DeviceBadQKeyCntr    DeviceCapFlags = 1 << 2  // IBV_DEVICE_BAD_QKEY_CNTR
	DeviceAutoPathMig    DeviceCapFlags = 1 << 4  // IBV_DEVICE_AUTO_PATH_MIG
	DeviceSysImageGUID   DeviceCapFlags = 1 << 10 // IBV_DEVICE_SYS_IMAGE_GUID
	DeviceRCRNRNAKGen    DeviceCapFlags = 1 << 12 // IBV_DEVICE_RC_RNR_NAK_GEN
	DeviceSRQResize      DeviceCapFlags = 1 << 13 // IBV_DEVICE_SRQ_RESIZE
	DeviceNChange        DeviceCapFlags = 1 << 14 // IBV_DEVICE_N_NOTIFY_CQ
	DeviceMemWindow      DeviceCapFlags = 1 << 17 // IBV_DEVICE_MEM_WINDOW
	DeviceMemMgtExt      DeviceCapFlags = 1 << 21 // IBV_DEVICE_MEM_MGT_EXTENSIONS
	DeviceMemWindow2B    DeviceCapFlags = 1 << 24 // IBV_DEVICE_MEM_WINDOW_TYPE_2B
	DeviceRCIPCsum       DeviceCapFlags = 1 << 25 // IBV_DEVICE_RC_IP_CSUM
	DeviceRawIPCsum      DeviceCapFlags = 1 << 26 // IBV_DEVICE_RAW_IP_CSUM
	DeviceManagedFlowSte DeviceCapFlags = 1 << 29 // IBV_DEVICE_MANAGED_FLOW_STEERING
)

// DeviceCapFlagsEx are device_cap_flags_ex: DeviceCapFlags and bits 32+ (IB_UVERBS_*).
type DeviceCapFlagsEx uint64

// Extended device capability bits this device reports, as rxe since Linux 6.2.
const (
	// DeviceFlushGlobal: FLUSH to global visibility (IB_UVERBS_DEVICE_FLUSH_GLOBAL).
	DeviceFlushGlobal DeviceCapFlagsEx = 1 << 38
	// DeviceFlushPersistent: FLUSH to persistence (IB_UVERBS_DEVICE_FLUSH_PERSISTENT),
	// reported as rxe does, though no MR can grant it (package doc, FLUSH and
	// ATOMIC_WRITE).
	DeviceFlushPersistent DeviceCapFlagsEx = 1 << 39
	// DeviceAtomicWrite: ATOMIC_WRITE (IB_UVERBS_DEVICE_ATOMIC_WRITE).
	DeviceAtomicWrite DeviceCapFlagsEx = 1 << 40
)

// AtomicCap is the atomic_cap of ibv_device_attr (enum ibv_atomic_cap).
type AtomicCap uint8

// Atomic capability levels.
const (
	AtomicNone AtomicCap = 0 // IBV_ATOMIC_NONE
	AtomicHCA  AtomicCap = 1 // IBV_ATOMIC_HCA: atomic within this device (what rxe reports)
	AtomicGlob AtomicCap = 2 // IBV_ATOMIC_GLOB
)

// DeviceAttr is what Device.Query returns (struct ibv_device_attr); each field keeps
// its C meaning, the max_ prefix dropped only where Go would stutter.
type DeviceAttr struct {
	FWVer          string         // fw_ver
	NodeGUID       uint64         // node_guid (host order; printed as the big-endian bytes)
	SysImageGUID   uint64         // sys_image_guid
	MaxMRSize      uint64         // max_mr_size: largest MR in bytes
	PageSizeCap    uint64         // page_size_cap
	VendorID       uint32         // vendor_id (0xffffff, as rxe)
	VendorPartID   uint32         // vendor_part_id
	HWVer          uint32         // hw_ver
	MaxQP          int            // max_qp
	MaxQPWR        int            // max_qp_wr: send and receive queue depth limit
	DeviceCapFlags DeviceCapFlags // device_cap_flags
	// DeviceCapFlagsEx: ibv_query_device_ex's device_cap_flags_ex.
	DeviceCapFlagsEx DeviceCapFlagsEx
	MaxSGE           int       // max_sge: SGEs per send or receive WR
	MaxSGERD         int       // max_sge_rd
	MaxCQ            int       // max_cq
	MaxCQE           int       // max_cqe: CQ size limit
	MaxMR            int       // max_mr
	MaxPD            int       // max_pd
	MaxQPRdAtom      int       // max_qp_rd_atom: outstanding READ/atomic as responder (max_dest_rd_atomic limit)
	MaxEECRdAtom     int       // max_ee_rd_atom
	MaxResRdAtom     int       // max_res_rd_atom
	MaxQPInitRdAtom  int       // max_qp_init_rd_atom: outstanding READ/atomic as requester (max_rd_atomic limit)
	MaxEECInitRdAt   int       // max_ee_init_rd_atom
	AtomicCap        AtomicCap // atomic_cap
	MaxEE            int       // max_ee
	MaxRDD           int       // max_rdd
	MaxMW            int       // max_mw
	MaxRawIPv6QP     int       // max_raw_ipv6_qp
	MaxRawEthyQP     int       // max_raw_ethy_qp
	MaxMcastGrp      int       // max_mcast_grp
	MaxMcastQPAttch  int       // max_mcast_qp_attach
	MaxTotalMcastQP  int       // max_total_mcast_qp_attach
	MaxAH            int       // max_ah
	MaxFMR           int       // max_fmr
	MaxMapPerFMR     int       // max_map_per_fmr
	MaxSRQ           int       // max_srq
	MaxSRQWR         int       // max_srq_wr
	MaxSRQSGE        int       // max_srq_sge
	MaxPKeys         int       // max_pkeys
	LocalCAAckDelay  uint8     // local_ca_ack_delay
	PhysPortCnt      uint8     // phys_port_cnt
	// MaxInlineData is the largest max_inline_data a QP may ask for. Not in
	// ibv_device_attr, where a too-large request just fails: here to size requests.
	MaxInlineData int
}

// Limits are the resource limits a Device enforces (WithLimits). A zero field keeps the
// default, which mirrors rxe (rxe_param.h) where that makes sense.
type Limits struct {
	MaxQP           int    // max_qp: QPs at once
	MaxQPWR         int    // max_qp_wr: send and receive queue depth
	MaxSGE          int    // max_sge: SGEs per send or receive WR
	MaxInlineData   int    // max_inline_data of a QP
	MaxCQ           int    // max_cq: CQs at once
	MaxCQE          int    // max_cqe: CQ size
	MaxMR           int    // max_mr: MRs at once
	MaxMRSize       uint64 // max_mr_size: bytes of one MR
	MaxMW           int    // max_mw: memory windows at once
	MaxPD           int    // max_pd: PDs at once
	MaxAH           int    // max_ah: AHs at once
	MaxSRQ          int    // max_srq: SRQs at once
	MaxSRQWR        int    // max_srq_wr: SRQ depth
	MaxSRQSGE       int    // max_srq_sge: SGEs per SRQ WR
	MaxQPRdAtom     int    // responder resources (max_dest_rd_atomic limit)
	MaxQPInitRdAtom int    // initiator depth (max_rd_atomic limit)
	// MaxMcastGrp is max_mcast_grp: multicast groups QPs are attached to at once.
	MaxMcastGrp int
	// MaxMcastQPAttach is max_mcast_qp_attach: QPs attached to one group.
	MaxMcastQPAttach int
	// MaxTotalMcastQPAttach is max_total_mcast_qp_attach: all attachments at once.
	MaxTotalMcastQPAttach int
	// NoSRQResize turns off IBV_DEVICE_SRQ_RESIZE: SRQ resizes fail with ENOSYS.
	NoSRQResize bool
}

// DefaultLimits are the limits of a Device opened without WithLimits.
var DefaultLimits = Limits{
	MaxQP:           1 << 16,
	MaxQPWR:         1 << 14,
	MaxSGE:          32,
	MaxInlineData:   256,
	MaxCQ:           1 << 14,
	MaxCQE:          (1 << 15) - 1,
	MaxMR:           1 << 18,
	MaxMRSize:       math.MaxInt64,
	MaxMW:           1<<19 - 1,
	MaxPD:           1 << 16,
	MaxAH:           1 << 15,
	MaxSRQ:          1 << 16,
	MaxSRQWR:        1 << 14,
	MaxSRQSGE:       27,
	MaxQPRdAtom:     128,
	MaxQPInitRdAtom: 128,
	// rxe: RXE_MAX_MCAST_GRP, RXE_MAX_MCAST_QP_ATTACH and their product.
	MaxMcastGrp:           8192,
	MaxMcastQPAttach:      56,
	MaxTotalMcastQPAttach: 8192 * 56,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	set := func(v *int, w int) {
		if w > 0 {
			*v = w
		}
	}
	set(&d.MaxQP, l.MaxQP)
	set(&d.MaxQPWR, l.MaxQPWR)
	set(&d.MaxSGE, l.MaxSGE)
	set(&d.MaxInlineData, l.MaxInlineData)
	set(&d.MaxCQ, l.MaxCQ)
	set(&d.MaxCQE, l.MaxCQE)
	set(&d.MaxMR, l.MaxMR)
	set(&d.MaxMW, l.MaxMW)
	set(&d.MaxPD, l.MaxPD)
	set(&d.MaxAH, l.MaxAH)
	set(&d.MaxSRQ, l.MaxSRQ)
	set(&d.MaxSRQWR, l.MaxSRQWR)
	set(&d.MaxSRQSGE, l.MaxSRQSGE)
	set(&d.MaxQPRdAtom, l.MaxQPRdAtom)
	set(&d.MaxQPInitRdAtom, l.MaxQPInitRdAtom)
	set(&d.MaxMcastGrp, l.MaxMcastGrp)
	set(&d.MaxMcastQPAttach, l.MaxMcastQPAttach)
	set(&d.MaxTotalMcastQPAttach, l.MaxTotalMcastQPAttach)
	if l.MaxMRSize > 0 {
		d.MaxMRSize = l.MaxMRSize
	}
	d.NoSRQResize = l.NoSRQResize
	return d
}

func (l Limits) deviceAttr(guid uint64) DeviceAttr {
	flags := DeviceBadPKeyCntr | DeviceBadQKeyCntr | DeviceSysImageGUID | DeviceRCRNRNAKGen | DeviceNChange |
		DeviceMemWindow | DeviceMemWindow2B
	if !l.NoSRQResize {
		flags |= DeviceSRQResize
	}
	return DeviceAttr{
		FWVer:            "0.0.0",
		NodeGUID:         guid,
		SysImageGUID:     guid,
		MaxMRSize:        l.MaxMRSize,
		PageSizeCap:      0xfffff000,
		VendorID:         0xffffff,
		MaxQP:            l.MaxQP,
		MaxQPWR:          l.MaxQPWR,
		DeviceCapFlags:   flags,
		DeviceCapFlagsEx: DeviceCapFlagsEx(flags) | DeviceFlushGlobal | DeviceFlushPersistent | DeviceAtomicWrite,
		MaxSGE:           l.MaxSGE,
		MaxSGERD:         l.MaxSGE,
		MaxCQ:            l.MaxCQ,
		MaxCQE:           l.MaxCQE,
		MaxMR:            l.MaxMR,
		MaxMW:            l.MaxMW,
		MaxPD:            l.MaxPD,
		MaxQPRdAtom:      l.MaxQPRdAtom,
		MaxResRdAtom:     l.MaxQPRdAtom * l.MaxQP,
		MaxQPInitRdAtom:  l.MaxQPInitRdAtom,
		AtomicCap:        AtomicHCA,
		MaxAH:            l.MaxAH,
		MaxSRQ:           l.MaxSRQ,
		MaxSRQWR:         l.MaxSRQWR,
		MaxSRQSGE:        l.MaxSRQSGE,
		MaxPKeys:         1,
		LocalCAAckDelay:  15,
		PhysPortCnt:      1,
		MaxInlineData:    l.MaxInlineData,
		MaxMcastGrp:      l.MaxMcastGrp,
		MaxMcastQPAttch:  l.MaxMcastQPAttach,
		MaxTotalMcastQP:  l.MaxTotalMcastQPAttach,
	}
}

// PortState is the state of a port (enum ibv_port_state).
type PortState uint8

// Port states with their libibverbs values.
const (
	PortNop         PortState = 0 // IBV_PORT_NOP
	PortDown        PortState = 1 // IBV_PORT_DOWN
	PortInit        PortState = 2 // IBV_PORT_INIT
	PortArmed       PortState = 3 // IBV_PORT_ARMED
	PortActive      PortState = 4 // IBV_PORT_ACTIVE
	PortActiveDefer PortState = 5 // IBV_PORT_ACTIVE_DEFER
)

// String returns the name ibv_devinfo prints, e.g. "PORT_ACTIVE".
func (s PortState) String() string {
	switch s {
	case PortNop:
		return "PORT_NOP"
	case PortDown:
		return "PORT_DOWN"
	case PortInit:
		return "PORT_INIT"
	case PortArmed:
		return "PORT_ARMED"
	case PortActive:
		return "PORT_ACTIVE"
	case PortActiveDefer:
		return "PORT_ACTIVE_DEFER"
	}
	return "PORT_UNKNOWN"
}

// PortAttr is what Device.QueryPort returns (struct ibv_port_attr), for RoCE.
type PortAttr struct {
	State        PortState // state: ACTIVE, or DOWN once the link died
	MaxMTU       MTU       // max_mtu: the largest path MTU a QP may use (4096)
	ActiveMTU    MTU       // active_mtu: derived from the interface MTU, as rxe does
	GIDTblLen    int       // gid_tbl_len: populated GID entries (see GIDIndexRoCEv2)
	PortCapFlags uint32    // port_cap_flags
	MaxMsgSz     uint32    // max_msg_sz
	PKeyTblLen   int       // pkey_tbl_len (1: the default P_Key 0xffff)
	LID          uint16    // always 0 on RoCE
	LinkLayer    uint8     // IBV_LINK_LAYER_ETHERNET (2)
}

// LinkLayerEthernet is IBV_LINK_LAYER_ETHERNET, the link layer of every RoCE port.
const LinkLayerEthernet = 2

// DefaultPKey is the only P_Key in the table (index 0), the full-membership default.
const DefaultPKey = 0xffff

// maxMsgSize is max_msg_sz, 2 GiB, the SGE length limit (rxe's RXE_PORT_MAX_MSG_SZ).
const maxMsgSize = 1 << 31
