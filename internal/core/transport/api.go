package transport

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/verbserr"
	"github.com/goroce/goroce/link"
)

// Access is a set of memory and QP access flags (enum ibv_access_flags).
type Access uint32

// Access flags with their libibverbs values.
const (
	AccessLocalWrite      Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite     Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead      Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic    Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	AccessMWBind          Access = 1 << 4 // IBV_ACCESS_MW_BIND
	AccessZeroBased       Access = 1 << 5 // IBV_ACCESS_ZERO_BASED
	AccessFlushGlobal     Access = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL
	AccessFlushPersistent Access = 1 << 9 // IBV_ACCESS_FLUSH_PERSISTENT
)

// Region is a registered memory region as the engine sees it: the bytes, the
// I/O virtual address of Buf[0], the protection domain and the access rights.
// Buffer ownership: Buf belongs to the user; the engine reads and writes it
// only while executing a work request, like a NIC doing DMA.
type Region struct {
	PD     uint32
	Addr   uint64 // iova of Buf[0]
	Buf    []byte
	Access Access
	LKey   uint32
	RKey   uint32
	// QPN, when not 0, is the only QP that may use the region: a type 2B
	// memory window is bound to the QP that bound it (IBA 10.6.7.2.4).
	QPN uint32
}

// slice returns the bytes [addr, addr+n) of r, or nil when the range is not
// inside the region (the mr_check_range analogue). n == 0 yields an empty,
// non-nil slice for any addr inside or at the end of the region.
func (r *Region) slice(addr uint64, n uint64) []byte {
	if addr < r.Addr {
		return nil
	}
	off := addr - r.Addr
	size := uint64(len(r.Buf))
	if off > size || n > size-off {
		return nil
	}
	return r.Buf[off : off+n : off+n]
}

// Memory resolves memory keys for the engine. roce implements it with its
// PD/MR registry; tests use a fake. LocalRegion and RemoteRegion return nil
// for an unknown key; the engine performs the PD, QP, access-flag and range
// checks itself, so an implementation only looks the key up. BindMW and
// Invalidate execute the local operations of a send queue (BIND_MW,
// LOCAL_INV) and the invalidation a SEND_WITH_INV asks for, and return an
// error when a rule of the IBA forbids them; the engine turns that into the
// completion status. Every method is called from shard goroutines
// concurrently.
type Memory interface {
	LocalRegion(lkey uint32) *Region
	RemoteRegion(rkey uint32) *Region
	BindMW(b *MWBind) error
	Invalidate(rkey, qpn, pd uint32) error
}

// MWBind is a memory window bind as a send queue executes it (rxe_bind_mw):
// the window named by its current rkey gets the key byte of NewRKey and
// grants Access to [Addr, Addr+Length) of the MR named by MRLKey (nothing when
// Length is 0). QPN and PD are the executing QP's.
type MWBind struct {
	MWRKey, NewRKey, MRLKey uint32
	Addr, Length            uint64
	Access                  Access
	QPN, PD                 uint32
}

// QPType is the transport service of a QP (enum ibv_qp_type).
type QPType uint8

// QP types with their libibverbs values.
const (
	QPTypeRC QPType = 2 // IBV_QPT_RC
	QPTypeUC QPType = 3 // IBV_QPT_UC
	QPTypeUD QPType = 4 // IBV_QPT_UD
)

// String returns the libibverbs name without prefix.
func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is the state of a QP (enum ibv_qp_state).
type QPState uint8

// QP states with their libibverbs values.
const (
	QPSReset QPState = iota // IBV_QPS_RESET
	QPSInit                 // IBV_QPS_INIT
	QPSRTR                  // IBV_QPS_RTR
	QPSRTS                  // IBV_QPS_RTS
	QPSSQD                  // IBV_QPS_SQD
	QPSSQE                  // IBV_QPS_SQE
	QPSErr                  // IBV_QPS_ERR
	numQPStates
)

var qpStateNames = [numQPStates]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the IBV_QPS_ name without prefix.
func (s QPState) String() string {
	if s < numQPStates {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// MTU is a path MTU code (enum ibv_mtu).
type MTU uint8

// MTU codes with their libibverbs values.
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

// MTUFromBytes is the inverse of Bytes: the code for 256, 512, 1024, 2048 or
// 4096 bytes, and 0 (no valid code) for any other value.
func MTUFromBytes(n int) MTU {
	for m := MTU256; m <= MTU4096; m++ {
		if m.Bytes() == n {
			return m
		}
	}
	return 0
}

// AddressVector says how to reach a peer (the rxe_av analogue): an RC QP
// copies it at RTR, a UD send WR carries one per WR. Every packet sent under
// it carries its TrafficClass, HopLimit (0: the link's default) and, over
// IPv6, FlowLabel (0: the kernel's choice) in the IP header.
type AddressVector struct {
	DGID         netip.Addr // peer IP (IPv4 or IPv6)
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	SrcPort      uint16 // 0: derive as rxe does (rdma_get_udp_sport)
	IsGlobal     bool
}

// QPCap holds the queue sizes of a QP (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInlineData uint32
}

// QPInitAttr holds the creation attributes of a QP (struct ibv_qp_init_attr).
// PD is the protection domain number memory accesses are checked against.
type QPInitAttr struct {
	Type     QPType
	SendCQ   *cq.Queue
	RecvCQ   *cq.Queue
	SRQ      *srq.Queue
	Cap      QPCap
	SQSigAll bool
	PD       uint32
}

// QPAttrMask selects the attributes Modify changes (enum ibv_qp_attr_mask).
// The values are libibverbs'.
type QPAttrMask uint32

// Attribute mask bits with their libibverbs values.
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

// QPAttr holds the modifiable attributes of a QP (struct ibv_qp_attr).
type QPAttr struct {
	State, CurState  QPState
	EnSQDAsyncNotify bool
	AccessFlags      Access
	PKeyIndex        uint16
	QKey             uint32
	AV               AddressVector
	PathMTU          MTU
	Timeout          uint8 // ack timeout: 4.096 µs × 2^Timeout, 0 = none
	RetryCnt         uint8 // 7 = infinite (as rxe)
	RNRRetry         uint8 // 7 = infinite
	RQPSN, SQPSN     uint32
	MaxRDAtomic      uint8 // max_rd_atomic: outstanding READ/atomic as requester
	MaxDestRDAtomic  uint8 // max_dest_rd_atomic: responder resources
	MinRNRTimer      uint8
	DestQPN          uint32
	Cap              QPCap
	PortNum          uint8
}

// WROpcode is the operation of a send work request (enum ibv_wr_opcode).
type WROpcode uint8

// Send WR opcodes with their libibverbs values.
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

// Send flags with their libibverbs values.
const (
	SendFence     SendFlags = 1 << 0 // IBV_SEND_FENCE
	SendSignaled  SendFlags = 1 << 1 // IBV_SEND_SIGNALED
	SendSolicited SendFlags = 1 << 2 // IBV_SEND_SOLICITED
	SendInline    SendFlags = 1 << 3 // IBV_SEND_INLINE
)

// SendWR is a send work request (struct ibv_send_wr). The slice replaces the
// next pointer. For SendInline the SGEs are copied at post time and, as
// libibverbs documents, neither their PD nor their access flags are checked;
// Go has no raw addresses, so an SGE still names its bytes by a registered
// lkey (an unknown lkey or range is EINVAL at post time).
type SendWR struct {
	WRID       uint64
	Opcode     WROpcode
	Flags      SendFlags
	SGL        []srq.SGE
	Imm        uint32 // immediate data (host order; big-endian on the wire)
	InvRKey    uint32 // SEND_WITH_INV: rkey the peer invalidates
	RemoteAddr uint64 // RDMA and atomic: remote VA
	RKey       uint32
	CompareAdd uint64 // atomic compare (CMP_AND_SWP) or addend (FETCH_AND_ADD)
	Swap       uint64
	AH         *AddressVector // UD: destination
	RemoteQPN  uint32         // UD: destination QP
	RemoteQKey uint32         // UD: Q_Key; high bit set takes the QP's Q_Key
	BindMW     MWBindWR       // BIND_MW: the window and the binding
	Flush      FlushWR        // FLUSH: placement, selectivity and length (RemoteAddr, RKey name the memory)
}

// FlushWR is what a FLUSH work request asks for (ibv_wr_flush's type, level
// and len): the placement types (FlushGlobal, FlushPersistent), the
// selectivity (FlushRange: [RemoteAddr, RemoteAddr+Length); FlushMR: the
// whole memory region RKey names).
type FlushWR struct {
	Type   uint8
	Level  uint8
	Length uint32
}

// MWBindWR is the bind a BIND_MW work request asks for (wr.bind_mw, in the flat
// form rxe's kernel WR has): the window by its current rkey, the rkey it is to
// have (only the key byte, the low 8 bits, changes), and the MR range and
// rights it is to grant. Length 0 unbinds a type 1 window.
type MWBindWR struct {
	MWRKey       uint32 // the window (mw->rkey)
	RKey         uint32 // the rkey after the bind (bind_mw.rkey)
	MRLKey       uint32 // the MR (bind_info.mr->lkey)
	Addr, Length uint64 // bind_info.addr, bind_info.length
	Access       Access // bind_info.mw_access_flags
}

// EventType is an asynchronous event (enum ibv_event_type).
type EventType uint8

// Event types with their libibverbs values.
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

// Event is an asynchronous event raised by the engine. It names its object.
type Event struct {
	Type EventType
	QPN  uint32
	CQ   *cq.Queue
	SRQ  *srq.Queue
}

// Clock gives the engine the time and its timers. Timers only kick shards,
// so a fake clock (or testing/synctest's virtual time) drives every
// retransmission deterministically.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer a Clock returns (the subset of *time.Timer the engine uses).
type Timer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Config configures an Engine.
type Config struct {
	Link      link.Link
	Memory    Memory
	Stats     *Stats      // nil: a private Stats
	Shards    int         // 0: GOMAXPROCS
	Clock     Clock       // nil: the real clock
	OnEvent   func(Event) // async events; called from shard goroutines, must not block
	LocalAddr netip.Addr  // source address of our packets (the GID); zero: Link.LocalAddr
	MaxQPWR   int         // device max_qp_wr (0: 16384)
	MaxSGE    int         // device max_sge (0: 32)
	MaxInline int         // device max_inline_data (0: 256)
	// MaxRDAtomic and MaxDestRDAtomic are the device's max_qp_init_rd_atom and
	// max_qp_rd_atom, the limits of a QP's max_rd_atomic and max_dest_rd_atomic
	// (0: 128 each).
	MaxRDAtomic, MaxDestRDAtomic int
	// NoGSO turns segment trains off: every packet goes to the Link as a
	// datagram of its own, never as a train (link.Message.SegSize) the
	// Link sends as UDP GSO. For comparison, or to rule GSO out.
	NoGSO bool
	// NoGRO reads the Link with one-datagram buffers, so UDP GRO is never
	// turned on and every datagram arrives on its own.
	NoGRO bool
	// RunToCompletion makes the goroutine that has the work do it when the
	// QP's shard is idle: PostSend sends its packets itself, and a reader
	// runs the responder and completer for what it read, instead of handing
	// either to the shard goroutine (rtc.go). It saves the wake-ups that
	// dominate a small message's latency; the shard goroutines still take
	// whatever finds its shard busy.
	RunToCompletion bool
	// PortMTU is the port's active MTU (0: MTU1024, what rxe derives from a
	// 1500-byte Ethernet). A UD QP has no path MTU of its own: its messages
	// may be up to this size.
	PortMTU MTU
	// RetryRate and RetryBurst are the device-wide budget of retransmission
	// timeouts acted on, a token bucket (0: 10000 per second, 1000 deep;
	// RetryRate < 0: unlimited). A timeout without a token waits for one.
	RetryRate, RetryBurst int
	// CC is congestion control (DCQCN, package dcqcn). The zero value is
	// off: the traffic class goes on the wire as given, CE marks are only
	// counted, CNPs are ignored and nothing is paced, as rxe does.
	CC dcqcn.Config
}

// newErr is the error of verb op on QP qpn (0 when there is no QP yet): the
// verbs' one error type, roce.Error.
func newErr(op string, qpn uint32, errno syscall.Errno, format string, args ...any) *verbserr.Error {
	return verbserr.Newf("transport", op, qpObj(qpn), errno, format, args...)
}

// closedErr is the error of a verb after Engine.Close; it matches net.ErrClosed.
func closedErr(op string, qpn uint32) *verbserr.Error {
	return verbserr.New("transport", op, qpObj(qpn), syscall.EINVAL, "engine closed").With(errClosed)
}

// adoptErr hands an error of cq or srq up as the error of verb op on QP qpn.
func adoptErr(err error, op string, qpn uint32) error {
	return verbserr.Adopt(err, "transport", op, qpObj(qpn), -1)
}

// qpObj names QP qpn as the error messages of every layer do.
func qpObj(qpn uint32) string {
	if qpn == 0 {
		return ""
	}
	return fmt.Sprintf("qp %#x", qpn)
}

var errClosed = net.ErrClosed
