package roce

import (
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// AHAttr holds the attributes of an address handle (struct ibv_ah_attr).
type AHAttr = AddressVector

// FLUSH placement types and selectivity levels, for FlushWR.
const (
	FlushGlobal     = bth.FlushGlobal     // IBV_FLUSH_GLOBAL
	FlushPersistent = bth.FlushPersistent // IBV_FLUSH_PERSISTENT
	FlushRange      = bth.FlushRange      // IBV_FLUSH_RANGE
	FlushMR         = bth.FlushMR         // IBV_FLUSH_MR
)

// WCStatus is the status of a work completion (enum ibv_wc_status).
type WCStatus = verbs.WCStatus

// WCOpcode is the opcode of a work completion (enum ibv_wc_opcode).
type WCOpcode = verbs.WCOpcode

// WCFlags are the wc_flags of a work completion (enum ibv_wc_flags).
type WCFlags = verbs.WCFlags

// SRQAttrMask selects the SRQ attributes Modify changes (enum ibv_srq_attr_mask).
type SRQAttrMask = verbs.SRQAttrMask

// QPAttrMask selects the QP attributes Modify changes (enum ibv_qp_attr_mask).
type QPAttrMask = verbs.QPAttrMask

// QPType is the transport service of a QP (enum ibv_qp_type).
type QPType = verbs.QPType

// QPState is the state of a QP (enum ibv_qp_state).
type QPState = verbs.QPState

// MTU is a path MTU code (enum ibv_mtu).
type MTU = verbs.MTU

// Access is a set of access flags (enum ibv_access_flags).
type Access = verbs.Access

// WROpcode is the operation of a send WR (enum ibv_wr_opcode).
type WROpcode = verbs.WROpcode

// SendFlags are the send_flags of a send WR (enum ibv_send_flags).
type SendFlags = verbs.SendFlags

// EventType is the type of an async event (enum ibv_event_type).
type EventType = verbs.EventType

// Completion status values (enum ibv_wc_status).
const (
	WCSuccess        = verbs.WCSuccess
	WCLocLenErr      = verbs.WCLocLenErr
	WCLocQPOpErr     = verbs.WCLocQPOpErr
	WCLocEECOpErr    = verbs.WCLocEECOpErr
	WCLocProtErr     = verbs.WCLocProtErr
	WCWRFlushErr     = verbs.WCWRFlushErr
	WCMWBindErr      = verbs.WCMWBindErr
	WCBadRespErr     = verbs.WCBadRespErr
	WCLocAccessErr   = verbs.WCLocAccessErr
	WCRemInvReqErr   = verbs.WCRemInvReqErr
	WCRemAccessErr   = verbs.WCRemAccessErr
	WCRemOpErr       = verbs.WCRemOpErr
	WCRetryExcErr    = verbs.WCRetryExcErr
	WCRNRRetryExcErr = verbs.WCRNRRetryExcErr
	WCLocRDDViolErr  = verbs.WCLocRDDViolErr
	WCRemInvRDReqErr = verbs.WCRemInvRDReqErr
	WCRemAbortErr    = verbs.WCRemAbortErr
	WCInvEECNErr     = verbs.WCInvEECNErr
	WCInvEECStateErr = verbs.WCInvEECStateErr
	WCFatalErr       = verbs.WCFatalErr
	WCRespTimeoutErr = verbs.WCRespTimeoutErr
	WCGeneralErr     = verbs.WCGeneralErr
)

// Completion opcodes (enum ibv_wc_opcode).
const (
	WCSend            = verbs.WCSend
	WCRDMAWrite       = verbs.WCRDMAWrite
	WCRDMARead        = verbs.WCRDMARead
	WCCompSwap        = verbs.WCCompSwap
	WCFetchAdd        = verbs.WCFetchAdd
	WCBindMW          = verbs.WCBindMW
	WCLocalInv        = verbs.WCLocalInv
	WCFlush           = verbs.WCFlush
	WCAtomicWrite     = verbs.WCAtomicWrite
	WCRecv            = verbs.WCRecv
	WCRecvRDMAWithImm = verbs.WCRecvRDMAWithImm
)

// Completion flags (enum ibv_wc_flags).
const (
	WCGRH      = verbs.WCGRH
	WCWithImm  = verbs.WCWithImm
	WCIPCsumOK = verbs.WCIPCsumOK
	WCWithInv  = verbs.WCWithInv
)

// SRQ attribute mask bits (enum ibv_srq_attr_mask).
const (
	SRQMaxWR = verbs.SRQMaxWR
	SRQLimit = verbs.SRQLimit
)

// Access flags (enum ibv_access_flags).
const (
	AccessLocalWrite      = verbs.AccessLocalWrite
	AccessRemoteWrite     = verbs.AccessRemoteWrite
	AccessRemoteRead      = verbs.AccessRemoteRead
	AccessRemoteAtomic    = verbs.AccessRemoteAtomic
	AccessMWBind          = verbs.AccessMWBind
	AccessZeroBased       = verbs.AccessZeroBased
	AccessOnDemand        = verbs.AccessOnDemand
	AccessHugeTLB         = verbs.AccessHugeTLB
	AccessFlushGlobal     = verbs.AccessFlushGlobal
	AccessFlushPersistent = verbs.AccessFlushPersistent
	AccessRelaxedOrdering = verbs.AccessRelaxedOrdering
	AccessOptionalRange   = verbs.AccessOptionalRange
)

// QP types (enum ibv_qp_type).
const (
	QPTypeRC = verbs.QPTypeRC
	QPTypeUC = verbs.QPTypeUC
	QPTypeUD = verbs.QPTypeUD
)

// QP states (enum ibv_qp_state).
const (
	QPSReset = verbs.QPSReset
	QPSInit  = verbs.QPSInit
	QPSRTR   = verbs.QPSRTR
	QPSRTS   = verbs.QPSRTS
	QPSSQD   = verbs.QPSSQD
	QPSSQE   = verbs.QPSSQE
	QPSErr   = verbs.QPSErr
)

// Path MTU codes (enum ibv_mtu).
const (
	MTU256  = verbs.MTU256
	MTU512  = verbs.MTU512
	MTU1024 = verbs.MTU1024
	MTU2048 = verbs.MTU2048
	MTU4096 = verbs.MTU4096
)

// MTUFromBytes returns the path MTU code of n bytes, 0 unless n is 256, ..., 4096.
func MTUFromBytes(n int) MTU { return verbs.MTUFromBytes(n) }

// QP attribute mask bits (enum ibv_qp_attr_mask).
const (
	QPAttrState            = verbs.QPAttrState
	QPAttrCurState         = verbs.QPAttrCurState
	QPAttrEnSQDAsyncNotify = verbs.QPAttrEnSQDAsyncNotify
	QPAttrAccessFlags      = verbs.QPAttrAccessFlags
	QPAttrPKeyIndex        = verbs.QPAttrPKeyIndex
	QPAttrPort             = verbs.QPAttrPort
	QPAttrQKey             = verbs.QPAttrQKey
	QPAttrAV               = verbs.QPAttrAV
	QPAttrPathMTU          = verbs.QPAttrPathMTU
	QPAttrTimeout          = verbs.QPAttrTimeout
	QPAttrRetryCnt         = verbs.QPAttrRetryCnt
	QPAttrRNRRetry         = verbs.QPAttrRNRRetry
	QPAttrRQPSN            = verbs.QPAttrRQPSN
	QPAttrMaxQPRDAtomic    = verbs.QPAttrMaxQPRDAtomic
	QPAttrAltPath          = verbs.QPAttrAltPath
	QPAttrMinRNRTimer      = verbs.QPAttrMinRNRTimer
	QPAttrSQPSN            = verbs.QPAttrSQPSN
	QPAttrMaxDestRDAtomic  = verbs.QPAttrMaxDestRDAtomic
	QPAttrPathMigState     = verbs.QPAttrPathMigState
	QPAttrCap              = verbs.QPAttrCap
	QPAttrDestQPN          = verbs.QPAttrDestQPN
)

// Send WR opcodes (enum ibv_wr_opcode).
const (
	WRRDMAWrite         = verbs.WRRDMAWrite
	WRRDMAWriteWithImm  = verbs.WRRDMAWriteWithImm
	WRSend              = verbs.WRSend
	WRSendWithImm       = verbs.WRSendWithImm
	WRRDMARead          = verbs.WRRDMARead
	WRAtomicCmpAndSwp   = verbs.WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd = verbs.WRAtomicFetchAndAdd
	WRLocalInv          = verbs.WRLocalInv
	WRBindMW            = verbs.WRBindMW
	WRSendWithInv       = verbs.WRSendWithInv
	WRFlush             = verbs.WRFlush
	WRAtomicWrite       = verbs.WRAtomicWrite
)

// Send flags (enum ibv_send_flags).
const (
	SendFence     = verbs.SendFence
	SendSignaled  = verbs.SendSignaled
	SendSolicited = verbs.SendSolicited
	SendInline    = verbs.SendInline
)

// Async event types (enum ibv_event_type).
const (
	EventCQErr            = verbs.EventCQErr
	EventQPFatal          = verbs.EventQPFatal
	EventQPReqErr         = verbs.EventQPReqErr
	EventQPAccessErr      = verbs.EventQPAccessErr
	EventCommEst          = verbs.EventCommEst
	EventSQDrained        = verbs.EventSQDrained
	EventDeviceFatal      = verbs.EventDeviceFatal
	EventPortActive       = verbs.EventPortActive
	EventPortErr          = verbs.EventPortErr
	EventSRQErr           = verbs.EventSRQErr
	EventSRQLimitReached  = verbs.EventSRQLimitReached
	EventQPLastWQEReached = verbs.EventQPLastWQEReached
)
