package verbs

import "strconv"

// WCStatus is the status of a work completion (enum ibv_wc_status).
type WCStatus uint8

// Completion status values, in ibv_wc_status order.
const (
	WCSuccess        WCStatus = iota // IBV_WC_SUCCESS
	WCLocLenErr                      // IBV_WC_LOC_LEN_ERR
	WCLocQPOpErr                     // IBV_WC_LOC_QP_OP_ERR
	WCLocEECOpErr                    // IBV_WC_LOC_EEC_OP_ERR
	WCLocProtErr                     // IBV_WC_LOC_PROT_ERR
	WCWRFlushErr                     // IBV_WC_WR_FLUSH_ERR
	WCMWBindErr                      // IBV_WC_MW_BIND_ERR
	WCBadRespErr                     // IBV_WC_BAD_RESP_ERR
	WCLocAccessErr                   // IBV_WC_LOC_ACCESS_ERR
	WCRemInvReqErr                   // IBV_WC_REM_INV_REQ_ERR
	WCRemAccessErr                   // IBV_WC_REM_ACCESS_ERR
	WCRemOpErr                       // IBV_WC_REM_OP_ERR
	WCRetryExcErr                    // IBV_WC_RETRY_EXC_ERR
	WCRNRRetryExcErr                 // IBV_WC_RNR_RETRY_EXC_ERR
	WCLocRDDViolErr                  // IBV_WC_LOC_RDD_VIOL_ERR
	WCRemInvRDReqErr                 // IBV_WC_REM_INV_RD_REQ_ERR
	WCRemAbortErr                    // IBV_WC_REM_ABORT_ERR
	WCInvEECNErr                     // IBV_WC_INV_EECN_ERR
	WCInvEECStateErr                 // IBV_WC_INV_EEC_STATE_ERR
	WCFatalErr                       // IBV_WC_FATAL_ERR
	WCRespTimeoutErr                 // IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr                     // IBV_WC_GENERAL_ERR
)

// statusText is ibv_wc_status_str(3)'s text, so logs read as C programs' do.
var statusText = [...]string{
	WCSuccess:        "success",
	WCLocLenErr:      "local length error",
	WCLocQPOpErr:     "local QP operation error",
	WCLocEECOpErr:    "local EE context operation error",
	WCLocProtErr:     "local protection error",
	WCWRFlushErr:     "Work Request Flushed Error",
	WCMWBindErr:      "memory management operation error",
	WCBadRespErr:     "bad response error",
	WCLocAccessErr:   "local access error",
	WCRemInvReqErr:   "remote invalid request error",
	WCRemAccessErr:   "remote access error",
	WCRemOpErr:       "remote operation error",
	WCRetryExcErr:    "transport retry counter exceeded",
	WCRNRRetryExcErr: "RNR retry counter exceeded",
	WCLocRDDViolErr:  "local RDD violation error",
	WCRemInvRDReqErr: "remote invalid RD request",
	WCRemAbortErr:    "aborted error",
	WCInvEECNErr:     "invalid EE context number",
	WCInvEECStateErr: "invalid EE context state",
	WCFatalErr:       "fatal error",
	WCRespTimeoutErr: "response timeout error",
	WCGeneralErr:     "general error",
}

// String returns the ibv_wc_status_str text, or "unknown" as libibverbs
// does for a value it does not know.
func (s WCStatus) String() string {
	if int(s) < len(statusText) {
		return statusText[s]
	}
	return "unknown"
}

// WCOpcode is the operation a completion is for (enum ibv_wc_opcode).
// Receive opcodes have bit 7 set (IBV_WC_RECV).
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend            WCOpcode = 0   // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = 1   // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = 3   // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // IBV_WC_FETCH_ADD
	WCBindMW          WCOpcode = 5   // IBV_WC_BIND_MW
	WCLocalInv        WCOpcode = 6   // IBV_WC_LOCAL_INV
	WCFlush           WCOpcode = 8   // IBV_WC_FLUSH
	WCAtomicWrite     WCOpcode = 9   // IBV_WC_ATOMIC_WRITE
	WCRecv            WCOpcode = 128 // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
)

// IsRecv reports whether the opcode is a receive-side completion.
func (o WCOpcode) IsRecv() bool { return o&WCRecv != 0 }

var wcOpcodeNames = map[WCOpcode]string{WCSend: "SEND", WCRDMAWrite: "RDMA_WRITE", WCRDMARead: "RDMA_READ",
	WCCompSwap: "COMP_SWAP", WCFetchAdd: "FETCH_ADD", WCBindMW: "BIND_MW", WCLocalInv: "LOCAL_INV",
	WCFlush: "FLUSH", WCAtomicWrite: "ATOMIC_WRITE", WCRecv: "RECV", WCRecvRDMAWithImm: "RECV_RDMA_WITH_IMM"}

// String returns the IBV_WC_ name without its prefix, e.g. "RECV".
func (o WCOpcode) String() string {
	if s, ok := wcOpcodeNames[o]; ok {
		return s
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// WCFlags are the wc_flags of a completion (enum ibv_wc_flags).
type WCFlags uint32

// Completion flags.
const (
	WCGRH      WCFlags = 1 << 0 // IBV_WC_GRH: the first 40 bytes of a UD receive buffer hold a GRH
	WCWithImm  WCFlags = 1 << 1 // IBV_WC_WITH_IMM: ImmData is valid
	WCIPCsumOK WCFlags = 1 << 2 // IBV_WC_IP_CSUM_OK
	WCWithInv  WCFlags = 1 << 3 // IBV_WC_WITH_INV: InvalidatedRKey is valid
)

// WC is a work completion (struct ibv_wc), a plain value: a CQ copies it in
// and Poll copies it out. Unless Status is WCSuccess only WRID, Status,
// QPNum and VendorErr are valid.
type WC struct {
	WRID      uint64   // wr_id of the work request that completed
	Status    WCStatus // status
	Opcode    WCOpcode // opcode; a receive's has the WCRecv bit
	VendorErr uint32   // vendor_err
	// ByteLen is the number of bytes transferred (byte_len): for a receive,
	// the message's length, with the 40-byte GRH area on a UD QP.
	ByteLen uint32
	// ImmData is imm_data, valid with WCWithImm: a number in host order,
	// decoded big-endian from the wire.
	ImmData         uint32
	InvalidatedRKey uint32  // invalidated_rkey a SEND_WITH_INV named, valid with WCWithInv
	QPNum           uint32  // qp_num: the local QP
	SrcQP           uint32  // src_qp: the sending QP of a UD receive
	Flags           WCFlags // wc_flags
	PKeyIndex       uint16  // pkey_index of a UD receive
	SLID            uint16  // slid, 0 on RoCE
	SL              uint8   // sl
	DLIDPathBits    uint8   // dlid_path_bits, 0 on RoCE
}
