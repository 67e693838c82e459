package bth

import "time"

// RETH is the RDMA Extended Transport Header (IBA 9.3.3): the remote
// address, key and total length of an RDMA WRITE (FIRST/ONLY) or READ
// request. 16 bytes.
type RETH struct {
	VA     uint64 // remote virtual address
	RKey   uint32 // remote key of the target MR
	DMALen uint32 // length of the whole message in bytes
}

// AETH is the ACK Extended Transport Header (IBA 9.3.5): a syndrome and the
// responder's 24-bit Message Sequence Number. 4 bytes.
//
// Syndrome bits 6..5 select the kind: 00 ACK (low 5 bits = credit code),
// 01 RNR NAK (low 5 bits = RNR timer code), 11 NAK (low 5 bits = NAK code);
// 10 is reserved. Bit 7 is reserved and zero.
type AETH struct {
	Syndrome uint8
	MSN      uint32 // 24 bits
}

// NAK codes carried in the low 5 bits of a NAK syndrome (IBA Table 44).
const (
	NAKPSNSeqErr        = 0 // PSN sequence error: retransmit from the AETH's PSN
	NAKInvalidRequest   = 1
	NAKRemoteAccess     = 2
	NAKRemoteOpErr      = 3
	NAKInvalidRDRequest = 4
)

// CreditInvalid is the ACK credit code meaning "no credit count" (rxe always
// sends it: syndrome 0x1F).
const CreditInvalid = 0x1F

const (
	synKindMask = 0x60
	synACK      = 0x00
	synRNR      = 0x20
	synNAK      = 0x60
	synLow      = 0x1F
)

// IsACK reports whether a is a positive acknowledgement.
func (a AETH) IsACK() bool { return a.Syndrome&0xE0 == synACK }

// IsRNRNAK reports whether a is a Receiver Not Ready NAK.
func (a AETH) IsRNRNAK() bool { return a.Syndrome&0xE0 == synRNR }

// IsNAK reports whether a is a NAK (sequence error, invalid request,
// remote access or operational error, invalid RD request). RNR NAKs are
// reported by IsRNRNAK, not here.
func (a AETH) IsNAK() bool { return a.Syndrome&0xE0 == synNAK }

// NAKCode returns the NAK code (NAKPSNSeqErr...); meaningful when IsNAK.
func (a AETH) NAKCode() uint8 { return a.Syndrome & synLow }

// RNRTimer returns the 5-bit RNR timer code; meaningful when IsRNRNAK.
// RNRTimerDuration converts it to a delay.
func (a AETH) RNRTimer() uint8 { return a.Syndrome & synLow }

// Credit returns the 5-bit credit code; meaningful when IsACK.
// CreditInvalid (0x1F) means no credit information.
func (a AETH) Credit() uint8 { return a.Syndrome & synLow }

// ACKSyndrome returns the syndrome of an ACK with the given credit code.
func ACKSyndrome(credit uint8) uint8 { return synACK | credit&synLow }

// RNRSyndrome returns the syndrome of an RNR NAK with the given timer code.
func RNRSyndrome(timer uint8) uint8 { return synRNR | timer&synLow }

// NAKSyndrome returns the syndrome of a NAK with the given NAK code.
func NAKSyndrome(code uint8) uint8 { return synNAK | code&synLow }

// rnrTimerMicros is IBA Table 45: RNR NAK timer field encoding, in µs.
var rnrTimerMicros = [32]uint32{
	655360, 10, 20, 30, 40, 60, 80, 120,
	160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720,
	40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimerDuration returns the minimum delay an RNR NAK with timer code
// code asks for (IBA Table 45; code 0 is the longest, 655.36 ms). Only the
// low 5 bits of code are used.
func RNRTimerDuration(code uint8) time.Duration {
	return time.Duration(rnrTimerMicros[code&synLow]) * time.Microsecond
}

// creditCounts is IBA Table 46: the end-to-end credit code encoding.
var creditCounts = [31]uint16{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// CreditCount returns the number of receive WQEs an ACK credit code
// advertises (IBA Table 46); ok is false for CreditInvalid.
func CreditCount(code uint8) (n int, ok bool) {
	code &= synLow
	if code == CreditInvalid {
		return 0, false
	}
	return int(creditCounts[code]), true
}

// DETH is the Datagram Extended Transport Header (IBA 9.3.2) of UD
// packets: the Q_Key and the sender's QP number. 8 bytes (Q_Key, one
// reserved byte, 24-bit SrcQP).
type DETH struct {
	QKey  uint32
	SrcQP uint32 // 24 bits
}

// FETH is the FLUSH Extended Transport Header (IBA 1.5 A19.4.1; rxe
// feth_init): one 32-bit word whose bits 3..0 are the placement type and bits
// 5..4 the selectivity level, the rest reserved.
type FETH struct {
	PlacementType uint8 // FlushGlobal | FlushPersistent
	Selectivity   uint8 // FlushRange or FlushMR
}

// FETH placement types (bits of PlacementType) and selectivity levels, with
// the values of libibverbs' ibv_placement_type and ibv_selectivity_level.
const (
	FlushGlobal     = 1 << 0 // IBV_FLUSH_GLOBAL: global visibility
	FlushPersistent = 1 << 1 // IBV_FLUSH_PERSISTENT: persistence
	FlushRange      = 0      // IBV_FLUSH_RANGE: the RETH's range
	FlushMR         = 1      // IBV_FLUSH_MR: the whole memory region
)

// AtomicETH is the Atomic Extended Transport Header (IBA 9.3.4) of
// COMPARE_SWAP and FETCH_ADD. 28 bytes.
type AtomicETH struct {
	VA      uint64 // remote address, 8-byte aligned
	RKey    uint32
	SwapAdd uint64 // swap value (COMPARE_SWAP) or addend (FETCH_ADD)
	Compare uint64 // compare value (COMPARE_SWAP only)
}

// AtomicAckETH is the Atomic ACK Extended Transport Header (IBA 9.3.6): the
// original value at the remote address before the atomic. 8 bytes.
type AtomicAckETH struct {
	Orig uint64
}

// PadCount returns the number of pad bytes (0..3) that align a payload of
// n bytes to 4 bytes (IBA 9.2: BTH PadCnt).
func PadCount(n int) int { return -n & 3 }
