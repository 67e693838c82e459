package cq

import "strconv"

// Status is the completion status of a work request (enum ibv_wc_status).
// The numeric values match libibverbs.
type Status uint8

// Completion status values, in ibv_wc_status order.
const (
	Success        Status = iota // IBV_WC_SUCCESS
	LocLenErr                    // IBV_WC_LOC_LEN_ERR
	LocQPOpErr                   // IBV_WC_LOC_QP_OP_ERR
	LocEECOpErr                  // IBV_WC_LOC_EEC_OP_ERR
	LocProtErr                   // IBV_WC_LOC_PROT_ERR
	WRFlushErr                   // IBV_WC_WR_FLUSH_ERR
	MWBindErr                    // IBV_WC_MW_BIND_ERR
	BadRespErr                   // IBV_WC_BAD_RESP_ERR
	LocAccessErr                 // IBV_WC_LOC_ACCESS_ERR
	RemInvReqErr                 // IBV_WC_REM_INV_REQ_ERR
	RemAccessErr                 // IBV_WC_REM_ACCESS_ERR
	RemOpErr                     // IBV_WC_REM_OP_ERR
	RetryExcErr                  // IBV_WC_RETRY_EXC_ERR
	RNRRetryExcErr               // IBV_WC_RNR_RETRY_EXC_ERR
	LocRDDViolErr                // IBV_WC_LOC_RDD_VIOL_ERR
	RemInvRDReqErr               // IBV_WC_REM_INV_RD_REQ_ERR
	RemAbortErr                  // IBV_WC_REM_ABORT_ERR
	InvEECNErr                   // IBV_WC_INV_EECN_ERR
	InvEECStateErr               // IBV_WC_INV_EEC_STATE_ERR
	FatalErr                     // IBV_WC_FATAL_ERR
	RespTimeoutErr               // IBV_WC_RESP_TIMEOUT_ERR
	GeneralErr                   // IBV_WC_GENERAL_ERR
)

// statusText is the text of ibv_wc_status_str(3), so logs read the same as
// those of C programs.
var statusText = [...]string{
	Success:        "success",
	LocLenErr:      "local length error",
	LocQPOpErr:     "local QP operation error",
	LocEECOpErr:    "local EE context operation error",
	LocProtErr:     "local protection error",
	WRFlushErr:     "Work Request Flushed Error",
	MWBindErr:      "memory management operation error",
	BadRespErr:     "bad response error",
	LocAccessErr:   "local access error",
	RemInvReqErr:   "remote invalid request error",
	RemAccessErr:   "remote access error",
	RemOpErr:       "remote operation error",
	RetryExcErr:    "transport retry counter exceeded",
	RNRRetryExcErr: "RNR retry counter exceeded",
	LocRDDViolErr:  "local RDD violation error",
	RemInvRDReqErr: "remote invalid RD request",
	RemAbortErr:    "aborted error",
	InvEECNErr:     "invalid EE context number",
	InvEECStateErr: "invalid EE context state",
	FatalErr:       "fatal error",
	RespTimeoutErr: "response timeout error",
	GeneralErr:     "general error",
}

// String returns the ibv_wc_status_str text, or "unknown" like libibverbs
// for a value it does not know.
func (s Status) String() string {
	if int(s) < len(statusText) {
		return statusText[s]
	}
	return "unknown"
}

// Opcode says which operation a completion is for (enum ibv_wc_opcode).
// Receive-side opcodes have bit 7 set, as in libibverbs (IBV_WC_RECV).
type Opcode uint8

// Completion opcodes with their libibverbs values.
const (
	OpSend            Opcode = 0   // IBV_WC_SEND
	OpRDMAWrite       Opcode = 1   // IBV_WC_RDMA_WRITE
	OpRDMARead        Opcode = 2   // IBV_WC_RDMA_READ
	OpCompSwap        Opcode = 3   // IBV_WC_COMP_SWAP
	OpFetchAdd        Opcode = 4   // IBV_WC_FETCH_ADD
	OpBindMW          Opcode = 5   // IBV_WC_BIND_MW
	OpLocalInv        Opcode = 6   // IBV_WC_LOCAL_INV
	OpFlush           Opcode = 8   // IBV_WC_FLUSH
	OpAtomicWrite     Opcode = 9   // IBV_WC_ATOMIC_WRITE
	OpRecv            Opcode = 128 // IBV_WC_RECV
	OpRecvRDMAWithImm Opcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
)

// IsRecv reports whether the opcode is a receive-side completion.
func (o Opcode) IsRecv() bool { return o&OpRecv != 0 }

// String returns the IBV_WC_ name without its prefix, e.g. "RECV".
func (o Opcode) String() string {
	switch o {
	case OpSend:
		return "SEND"
	case OpRDMAWrite:
		return "RDMA_WRITE"
	case OpRDMARead:
		return "RDMA_READ"
	case OpCompSwap:
		return "COMP_SWAP"
	case OpFetchAdd:
		return "FETCH_ADD"
	case OpBindMW:
		return "BIND_MW"
	case OpLocalInv:
		return "LOCAL_INV"
	case OpFlush:
		return "FLUSH"
	case OpAtomicWrite:
		return "ATOMIC_WRITE"
	case OpRecv:
		return "RECV"
	case OpRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// Flags are the wc_flags of a completion (enum ibv_wc_flags).
type Flags uint32

// Completion flags with their libibverbs values.
const (
	FlagGRH      Flags = 1 << 0 // IBV_WC_GRH: the first 40 bytes of a UD receive buffer hold a GRH
	FlagWithImm  Flags = 1 << 1 // IBV_WC_WITH_IMM: ImmData is valid
	FlagIPCsumOK Flags = 1 << 2 // IBV_WC_IP_CSUM_OK
	FlagWithInv  Flags = 1 << 3 // IBV_WC_WITH_INV: InvalidatedRKey is valid
)

// WorkCompletion is one entry of a completion queue (struct ibv_wc). It is a
// plain value: Push copies it in and Poll copies it out.
type WorkCompletion struct {
	WRID            uint64 // wr_id of the work request that completed
	Status          Status // status; only WRID, Status, QPNum and VendorErr are valid unless Success
	Opcode          Opcode // operation that completed
	VendorErr       uint32 // vendor_err
	ByteLen         uint32 // bytes transferred (receive side: message length, including the GRH area for UD)
	ImmData         uint32 // immediate data as a number, big-endian-decoded from the wire (valid with FlagWithImm)
	InvalidatedRKey uint32 // rkey invalidated by SEND_WITH_INV (valid with FlagWithInv)
	QPNum           uint32 // local QP number the completion belongs to
	SrcQP           uint32 // remote QP number (UD)
	Flags           Flags  // wc_flags
	PKeyIndex       uint16 // pkey_index
	SLID            uint16 // slid (0 on RoCE)
	SL              uint8  // sl
	DLIDPathBits    uint8  // dlid_path_bits (0 on RoCE)
}
