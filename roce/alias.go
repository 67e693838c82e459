package roce

import (
	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/transport"
)

// The enumerations of the verbs API are defined by the lowest package that stores
// them (cq owns completion statuses, srq the SRQ mask, transport QP states, opcodes
// and flags); roce names them and their values again so users import one package.
// The structs users fill in and read are roce's own: see types.go.

// WCStatus is the status of a work completion (enum ibv_wc_status).
type WCStatus = cq.Status

// WCOpcode is the opcode of a work completion (enum ibv_wc_opcode).
type WCOpcode = cq.Opcode

// WCFlags are the wc_flags of a work completion (enum ibv_wc_flags).
type WCFlags = cq.Flags

// SRQAttrMask selects the SRQ attributes Modify changes (enum ibv_srq_attr_mask).
type SRQAttrMask = srq.AttrMask

// QPAttrMask selects the QP attributes Modify changes (enum ibv_qp_attr_mask).
type QPAttrMask = transport.QPAttrMask

// QPType is the transport service of a QP (enum ibv_qp_type).
type QPType = transport.QPType

// QPState is the state of a QP (enum ibv_qp_state).
type QPState = transport.QPState

// MTU is a path MTU code (enum ibv_mtu).
type MTU = transport.MTU

// Access is a set of access flags (enum ibv_access_flags).
type Access = transport.Access

// WROpcode is the operation of a send WR (enum ibv_wr_opcode).
type WROpcode = transport.WROpcode

// SendFlags are the send_flags of a send WR (enum ibv_send_flags).
type SendFlags = transport.SendFlags

// EventType is the type of an async event (enum ibv_event_type).
type EventType = transport.EventType

// Completion status values (enum ibv_wc_status).
const (
	WCSuccess        = cq.Success
	WCLocLenErr      = cq.LocLenErr
	WCLocQPOpErr     = cq.LocQPOpErr
	WCLocEECOpErr    = cq.LocEECOpErr
	WCLocProtErr     = cq.LocProtErr
	WCWRFlushErr     = cq.WRFlushErr
	WCMWBindErr      = cq.MWBindErr
	WCBadRespErr     = cq.BadRespErr
	WCLocAccessErr   = cq.LocAccessErr
	WCRemInvReqErr   = cq.RemInvReqErr
	WCRemAccessErr   = cq.RemAccessErr
	WCRemOpErr       = cq.RemOpErr
	WCRetryExcErr    = cq.RetryExcErr
	WCRNRRetryExcErr = cq.RNRRetryExcErr
	WCLocRDDViolErr  = cq.LocRDDViolErr
	WCRemInvRDReqErr = cq.RemInvRDReqErr
	WCRemAbortErr    = cq.RemAbortErr
	WCInvEECNErr     = cq.InvEECNErr
	WCInvEECStateErr = cq.InvEECStateErr
	WCFatalErr       = cq.FatalErr
	WCRespTimeoutErr = cq.RespTimeoutErr
	WCGeneralErr     = cq.GeneralErr
)

// Completion opcodes (enum ibv_wc_opcode).
const (
	WCSend            = cq.OpSend
	WCRDMAWrite       = cq.OpRDMAWrite
	WCRDMARead        = cq.OpRDMARead
	WCCompSwap        = cq.OpCompSwap
	WCFetchAdd        = cq.OpFetchAdd
	WCBindMW          = cq.OpBindMW
	WCLocalInv        = cq.OpLocalInv
	WCFlush           = cq.OpFlush
	WCAtomicWrite     = cq.OpAtomicWrite
	WCRecv            = cq.OpRecv
	WCRecvRDMAWithImm = cq.OpRecvRDMAWithImm
)

// Completion flags (enum ibv_wc_flags).
const (
	WCGRH      = cq.FlagGRH
	WCWithImm  = cq.FlagWithImm
	WCIPCsumOK = cq.FlagIPCsumOK
	WCWithInv  = cq.FlagWithInv
)

// SRQ attribute mask bits (enum ibv_srq_attr_mask).
const (
	SRQMaxWR = srq.AttrMaxWR
	SRQLimit = srq.AttrLimit
)

// Access flags (enum ibv_access_flags).
const (
	AccessLocalWrite   = transport.AccessLocalWrite
	AccessRemoteWrite  = transport.AccessRemoteWrite
	AccessRemoteRead   = transport.AccessRemoteRead
	AccessRemoteAtomic = transport.AccessRemoteAtomic
)

// QP types (enum ibv_qp_type).
const (
	QPTypeRC = transport.QPTypeRC
	QPTypeUC = transport.QPTypeUC
	QPTypeUD = transport.QPTypeUD
)

// QP states (enum ibv_qp_state).
const (
	QPSReset = transport.QPSReset
	QPSInit  = transport.QPSInit
	QPSRTR   = transport.QPSRTR
	QPSRTS   = transport.QPSRTS
	QPSSQD   = transport.QPSSQD
	QPSSQE   = transport.QPSSQE
	QPSErr   = transport.QPSErr
)

// Path MTU codes (enum ibv_mtu).
const (
	MTU256  = transport.MTU256
	MTU512  = transport.MTU512
	MTU1024 = transport.MTU1024
	MTU2048 = transport.MTU2048
	MTU4096 = transport.MTU4096
)

// MTUFromBytes returns the path MTU code of n bytes, or 0 when n is not 256,
// 512, 1024, 2048 or 4096.
func MTUFromBytes(n int) MTU { return transport.MTUFromBytes(n) }

// QP attribute mask bits (enum ibv_qp_attr_mask).
const (
	QPAttrState            = transport.QPAttrState
	QPAttrCurState         = transport.QPAttrCurState
	QPAttrEnSQDAsyncNotify = transport.QPAttrEnSQDAsyncNotify
	QPAttrAccessFlags      = transport.QPAttrAccessFlags
	QPAttrPKeyIndex        = transport.QPAttrPKeyIndex
	QPAttrPort             = transport.QPAttrPort
	QPAttrQKey             = transport.QPAttrQKey
	QPAttrAV               = transport.QPAttrAV
	QPAttrPathMTU          = transport.QPAttrPathMTU
	QPAttrTimeout          = transport.QPAttrTimeout
	QPAttrRetryCnt         = transport.QPAttrRetryCnt
	QPAttrRNRRetry         = transport.QPAttrRNRRetry
	QPAttrRQPSN            = transport.QPAttrRQPSN
	QPAttrMaxQPRDAtomic    = transport.QPAttrMaxQPRDAtomic
	QPAttrAltPath          = transport.QPAttrAltPath
	QPAttrMinRNRTimer      = transport.QPAttrMinRNRTimer
	QPAttrSQPSN            = transport.QPAttrSQPSN
	QPAttrMaxDestRDAtomic  = transport.QPAttrMaxDestRDAtomic
	QPAttrPathMigState     = transport.QPAttrPathMigState
	QPAttrCap              = transport.QPAttrCap
	QPAttrDestQPN          = transport.QPAttrDestQPN
)

// Send WR opcodes (enum ibv_wr_opcode).
const (
	WRRDMAWrite         = transport.WRRDMAWrite
	WRRDMAWriteWithImm  = transport.WRRDMAWriteWithImm
	WRSend              = transport.WRSend
	WRSendWithImm       = transport.WRSendWithImm
	WRRDMARead          = transport.WRRDMARead
	WRAtomicCmpAndSwp   = transport.WRAtomicCmpAndSwp
	WRAtomicFetchAndAdd = transport.WRAtomicFetchAndAdd
	WRLocalInv          = transport.WRLocalInv
	WRBindMW            = transport.WRBindMW
	WRSendWithInv       = transport.WRSendWithInv
	WRFlush             = transport.WRFlush
	WRAtomicWrite       = transport.WRAtomicWrite
)

// Send flags (enum ibv_send_flags).
const (
	SendFence     = transport.SendFence
	SendSignaled  = transport.SendSignaled
	SendSolicited = transport.SendSolicited
	SendInline    = transport.SendInline
)

// Async event types (enum ibv_event_type).
const (
	EventCQErr            = transport.EventCQErr
	EventQPFatal          = transport.EventQPFatal
	EventQPReqErr         = transport.EventQPReqErr
	EventQPAccessErr      = transport.EventQPAccessErr
	EventCommEst          = transport.EventCommEst
	EventSQDrained        = transport.EventSQDrained
	EventDeviceFatal      = transport.EventDeviceFatal
	EventPortActive       = transport.EventPortActive
	EventPortErr          = transport.EventPortErr
	EventSRQErr           = transport.EventSRQErr
	EventSRQLimitReached  = transport.EventSRQLimitReached
	EventQPLastWQEReached = transport.EventQPLastWQEReached
)
