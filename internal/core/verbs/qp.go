package verbs

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/goroce/goroce/bth"
)

// QPType is the transport service of a QP (enum ibv_qp_type).
type QPType uint8

// QP types.
const (
	QPTypeRC QPType = 2 // IBV_QPT_RC
	QPTypeUC QPType = 3 // IBV_QPT_UC
	QPTypeUD QPType = 4 // IBV_QPT_UD
)

var qpTypeNames = [...]string{QPTypeRC: "RC", QPTypeUC: "UC", QPTypeUD: "UD"}

// String returns the libibverbs name without prefix.
func (t QPType) String() string {
	if int(t) < len(qpTypeNames) && qpTypeNames[t] != "" {
		return qpTypeNames[t]
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is the state of a QP (enum ibv_qp_state).
type QPState uint8

// QP states.
const (
	QPSReset QPState = iota // IBV_QPS_RESET
	QPSInit                 // IBV_QPS_INIT
	QPSRTR                  // IBV_QPS_RTR
	QPSRTS                  // IBV_QPS_RTS
	QPSSQD                  // IBV_QPS_SQD
	QPSSQE                  // IBV_QPS_SQE
	QPSErr                  // IBV_QPS_ERR
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the IBV_QPS_ name without prefix.
func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// MTU is a path MTU code (enum ibv_mtu).
type MTU uint8

// MTU codes.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUFromBytes returns the code of 256, 512, 1024, 2048 or 4096 bytes, and 0
// (no valid code) for any other n.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// AddressVector says how to reach a peer (struct ibv_ah_attr with its struct
// ibv_global_route): the attributes of an AH, of an RC or UC QP's path
// (QPAttr.AV, copied at RTR) and of a UD send (SendWR.AH). Every packet sent
// under it carries its traffic class, hop limit and IPv6 flow label in the IP
// header, as an IB packet carries them in its GRH.
type AddressVector struct {
	// DGID is the peer's GID as an IP address (grh.dgid): IPv4 (or
	// IPv4-mapped) for a device on IPv4, IPv6 for one on IPv6.
	DGID      netip.Addr
	SGIDIndex uint8 // grh.sgid_index: the local GID the packets leave from
	// HopLimit is the IP TTL or hop limit (grh.hop_limit); 0 leaves it to the
	// kernel (its default TTL, or the link's multicast TTL for a group).
	// Linux's RoCE stack replaces a unicast AV's hop limit with the route's
	// (64 where ibv_rc_pingpong asks 1); goroce sends what the AV says.
	HopLimit     uint8
	TrafficClass uint8 // grh.traffic_class: DSCP and ECN, the IPv4 TOS or IPv6 traffic class
	// FlowLabel is the 20-bit IPv6 flow label (grh.flow_label), 0 leaving it
	// to the kernel (rxe sends 0); a connected QP derives its UDP source port
	// from it when it is not 0, as rxe does.
	FlowLabel uint32
	SrcPort   uint16 // the UDP source port, which C has no field for; 0 derives it as rxe does (rdma_get_udp_sport)
	IsGlobal  bool   // is_global: a GRH is present, which RoCE requires
}

// QPCap holds the queue sizes of a QP (struct ibv_qp_cap): asked for at
// creation, reported by Query. The receive sizes are not used with an SRQ.
type QPCap struct {
	MaxSendWR     uint32 // max_send_wr, 1 to max_qp_wr
	MaxRecvWR     uint32 // max_recv_wr, 1 to max_qp_wr
	MaxSendSGE    uint32 // max_send_sge, up to max_sge; 0 means 1
	MaxRecvSGE    uint32 // max_recv_sge, up to max_sge; 0 means 1
	MaxInlineData uint32 // max_inline_data: the largest SendInline payload in bytes
}

// QPAttrMask selects the attributes Modify changes (enum ibv_qp_attr_mask).
type QPAttrMask uint32

// Attribute mask bits.
const (
	QPAttrState            QPAttrMask = 1 << 0  // IBV_QP_STATE
	QPAttrCurState         QPAttrMask = 1 << 1  // IBV_QP_CUR_STATE
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2  // IBV_QP_EN_SQD_ASYNC_NOTIFY
	QPAttrAccessFlags      QPAttrMask = 1 << 3  // IBV_QP_ACCESS_FLAGS
	QPAttrPKeyIndex        QPAttrMask = 1 << 4  // IBV_QP_PKEY_INDEX
	QPAttrPort             QPAttrMask = 1 << 5  // IBV_QP_PORT
	QPAttrQKey             QPAttrMask = 1 << 6  // IBV_QP_QKEY
	QPAttrAV               QPAttrMask = 1 << 7  // IBV_QP_AV
	QPAttrPathMTU          QPAttrMask = 1 << 8  // IBV_QP_PATH_MTU
	QPAttrTimeout          QPAttrMask = 1 << 9  // IBV_QP_TIMEOUT
	QPAttrRetryCnt         QPAttrMask = 1 << 10 // IBV_QP_RETRY_CNT
	QPAttrRNRRetry         QPAttrMask = 1 << 11 // IBV_QP_RNR_RETRY
	QPAttrRQPSN            QPAttrMask = 1 << 12 // IBV_QP_RQ_PSN
	QPAttrMaxQPRDAtomic    QPAttrMask = 1 << 13 // IBV_QP_MAX_QP_RD_ATOMIC
	QPAttrAltPath          QPAttrMask = 1 << 14 // IBV_QP_ALT_PATH
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15 // IBV_QP_MIN_RNR_TIMER
	QPAttrSQPSN            QPAttrMask = 1 << 16 // IBV_QP_SQ_PSN
	QPAttrMaxDestRDAtomic  QPAttrMask = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC
	QPAttrPathMigState     QPAttrMask = 1 << 18 // IBV_QP_PATH_MIG_STATE
	QPAttrCap              QPAttrMask = 1 << 19 // IBV_QP_CAP
	QPAttrDestQPN          QPAttrMask = 1 << 20 // IBV_QP_DEST_QPN
)

var qpAttrMaskNames = [...]string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS",
	"PKEY_INDEX", "PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN",
	"MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC",
	"PATH_MIG_STATE", "CAP", "DEST_QPN"}

// String lists the IBV_QP_ names of the bits in m, joined by "|".
func (m QPAttrMask) String() string {
	var names []string
	for i, n := range qpAttrMaskNames {
		if m&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if rest := m &^ (1<<len(qpAttrMaskNames) - 1); rest != 0 {
		names = append(names, "0x"+strconv.FormatUint(uint64(rest), 16))
	}
	if len(names) == 0 {
		return "0"
	}
	return strings.Join(names, "|")
}

// QPAttr holds the attributes of a QP (struct ibv_qp_attr): the input of
// Modify, whose QPAttrMask says which fields count, and the output of Query.
type QPAttr struct {
	State            QPState // qp_state; from Query, the current state
	CurState         QPState // cur_qp_state: the state the caller believes the QP is in
	EnSQDAsyncNotify bool    // en_sqd_async_notify: SQ_DRAINED once the QP in SQD has drained
	AccessFlags      Access  // qp_access_flags: the remote operations a peer may do
	PKeyIndex        uint16  // pkey_index; the table has one entry, 0xffff at index 0
	QKey             uint32  // qkey of a UD QP
	AV               AddressVector
	PathMTU          MTU // path_mtu of an RC or UC QP; a UD QP uses the port's active MTU
	// Timeout is the local ACK timeout, 4.096 µs × 2^Timeout; 0 waits for
	// ever.
	Timeout uint8
	// RetryCnt and RNRRetry are how often a request is sent again after a
	// timeout or sequence NAK, and after an RNR NAK: 0 to 7, 7 for ever as
	// on rxe.
	RetryCnt, RNRRetry uint8
	RQPSN, SQPSN       uint32 // rq_psn and sq_psn: the first PSNs the responder expects and the requester sends
	MaxRDAtomic        uint8  // max_rd_atomic: READs and atomics outstanding as requester
	MaxDestRDAtomic    uint8  // max_dest_rd_atomic: READs and atomics served at once as responder
	MinRNRTimer        uint8  // min_rnr_timer: the RNR NAK timer code the responder sends
	DestQPN            uint32 // dest_qp_num of an RC or UC QP
	Cap                QPCap  // cap; Query reports the actual sizes
	PortNum            uint8  // port_num; the device has port 1 only
}

// EventType is the type of an asynchronous event (enum ibv_event_type).
type EventType uint8

// Event types.
const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
)

// QPInfo is a snapshot of one QP for debugging (roced's /debug/qps).
type QPInfo struct {
	QPN, DestQPN uint32
	Type         QPType
	State        QPState
	Peer         netip.Addr // the DGID of the QP's path
	// SrcPort is the UDP source port the QP's packets leave from: rxe's port
	// for this QP when the link can send from it, else the device's own.
	SrcPort     uint16
	NextPSN     bth.PSN // the requester's next PSN
	AckedPSN    bth.PSN // the oldest PSN not yet acknowledged
	ExpectedPSN bth.PSN // the responder's expected PSN
	MSN         uint32
	SendQueued  int // send WRs not yet completed
	TxPackets   uint64
	RxPackets   uint64
	Retransmits uint64
	Timeouts    uint64
	// Backoff counts consecutive retransmission timeouts without progress:
	// the QP's timer runs at its timeout << Backoff.
	Backoff uint8
	// CCRate and CCTargetRate are the DCQCN rate the QP is paced at and the
	// one its recovery heads for, bit/s (the line rate until a CNP limits
	// it); CCAlpha is DCQCN's α in 1/1024 and CCCuts the rate cuts so far.
	// All are 0 when the device runs without congestion control.
	CCRate, CCTargetRate uint64
	CCAlpha              uint32
	CCCuts               uint64
}
