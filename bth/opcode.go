package bth

import "strconv"

// Opcode is the BTH OpCode byte (IBA 9.2.1). The top 3 bits select the
// transport (RC 0x00, UC 0x20, RD 0x40, UD 0x60, CNP 0x80), the low 5 bits
// the operation.
type Opcode uint8

// Reliable Connected opcodes (IBA Table 38; rxe include/rdma/ib_pack.h).
const (
	RCSendFirst          Opcode = 0x00
	RCSendMiddle         Opcode = 0x01
	RCSendLast           Opcode = 0x02
	RCSendLastImm        Opcode = 0x03
	RCSendOnly           Opcode = 0x04
	RCSendOnlyImm        Opcode = 0x05
	RCWriteFirst         Opcode = 0x06
	RCWriteMiddle        Opcode = 0x07
	RCWriteLast          Opcode = 0x08
	RCWriteLastImm       Opcode = 0x09
	RCWriteOnly          Opcode = 0x0a
	RCWriteOnlyImm       Opcode = 0x0b
	RCReadRequest        Opcode = 0x0c
	RCReadResponseFirst  Opcode = 0x0d
	RCReadResponseMiddle Opcode = 0x0e
	RCReadResponseLast   Opcode = 0x0f
	RCReadResponseOnly   Opcode = 0x10
	RCAck                Opcode = 0x11
	RCAtomicAck          Opcode = 0x12
	RCCompareSwap        Opcode = 0x13
	RCFetchAdd           Opcode = 0x14
	RCSendLastInv        Opcode = 0x16
	RCSendOnlyInv        Opcode = 0x17
	// FLUSH and ATOMIC WRITE (IBA 1.5, Annex A19; rxe since Linux 6.2): both
	// are answered by an RDMA READ RESPONSE ONLY without payload.
	RCFlush       Opcode = 0x1c // BTH + FETH + RETH
	RCAtomicWrite Opcode = 0x1d // BTH + RETH + 8-byte payload
)

// Unreliable Connected opcodes: the SEND and WRITE families of RC, with
// transport bits 0x20.
const (
	UCSendFirst     Opcode = 0x20
	UCSendMiddle    Opcode = 0x21
	UCSendLast      Opcode = 0x22
	UCSendLastImm   Opcode = 0x23
	UCSendOnly      Opcode = 0x24
	UCSendOnlyImm   Opcode = 0x25
	UCWriteFirst    Opcode = 0x26
	UCWriteMiddle   Opcode = 0x27
	UCWriteLast     Opcode = 0x28
	UCWriteLastImm  Opcode = 0x29
	UCWriteOnly     Opcode = 0x2a
	UCWriteOnlyImm  Opcode = 0x2b
	UDSendOnly      Opcode = 0x64 // Unreliable Datagram SEND ONLY, with DETH.
	UDSendOnlyImm   Opcode = 0x65 // Unreliable Datagram SEND ONLY with immediate, with DETH.
	CNP             Opcode = 0x81 // RoCEv2 Congestion Notification Packet (Annex 17.9.3): BTH + 16 reserved bytes.
	cnpReservedSize        = 16
)

// Extension header sizes in bytes (IBA 9.3; rxe_hdr.h).
const (
	BTHLen          = 12
	RETHLen         = 16
	AETHLen         = 4
	DETHLen         = 8
	ImmDtLen        = 4
	IETHLen         = 4
	AtomicETHLen    = 28
	AtomicAckETHLen = 8
	FETHLen         = 4
	ICRCLen         = 4
)

// opcode property bits: the headers an opcode carries, and the operation
// masks of rxe's opcode table (rxe_opcode.c): what the packet does, where it
// sits in its message, and what the responder needs for it.
const (
	fValid uint32 = 1 << iota
	fRequest
	fFirst
	fMiddle
	fLast
	fOnly
	fPayload
	fImm
	fInv
	fRETH
	fAETH
	fDETH
	fAtomicETH
	fAtomicAckETH
	fCNP
	fSend      // SEND family (RC, UC, UD)
	fWrite     // RDMA WRITE family
	fReadReq   // RDMA READ request
	fReadResp  // RDMA READ response family
	fCmpSwap   // ATOMIC CMP_SWAP
	fFetchAdd  // ATOMIC FETCH_ADD
	fAck       // ACKNOWLEDGE (ACK, NAK, RNR NAK)
	fAtomicAck // ATOMIC ACKNOWLEDGE
	fRecvWR    // consumes a receive WR at the responder (rxe RXE_RWR_MASK)
	fFETH
	fFlush       // FLUSH
	fAtomicWrite // ATOMIC WRITE
)

// opInfo is one row of the opcode table: properties and the byte offset of
// each extension header (0 = absent; the BTH occupies bytes 0..11).
type opInfo struct {
	flags     uint32
	hdrLen    uint8
	deth      uint8
	reth      uint8
	atomic    uint8
	aeth      uint8
	atomicAck uint8
	imm       uint8
	ieth      uint8
	feth      uint8
	name      string
}

var opTable [256]opInfo

func init() {
	def := func(op Opcode, name string, flags uint32) {
		flags |= fValid
		in := opInfo{flags: flags, name: name}
		// Headers follow the BTH in this fixed order (IBA 9.2; rxe_opcode.c).
		off := uint8(BTHLen)
		place := func(f uint32, size uint8, dst *uint8) {
			if flags&f != 0 {
				*dst = off
				off += size
			}
		}
		place(fDETH, DETHLen, &in.deth)
		place(fFETH, FETHLen, &in.feth) // FLUSH: the FETH comes before the RETH
		place(fRETH, RETHLen, &in.reth)
		place(fAtomicETH, AtomicETHLen, &in.atomic)
		place(fAETH, AETHLen, &in.aeth)
		place(fAtomicAckETH, AtomicAckETHLen, &in.atomicAck)
		place(fImm, ImmDtLen, &in.imm)
		place(fInv, IETHLen, &in.ieth)
		if flags&fCNP != 0 {
			off += cnpReservedSize
		}
		in.hdrLen = off
		opTable[op] = in
	}
	const (
		req   = fRequest
		pl    = fPayload
		send  = req | pl | fSend
		write = req | pl | fWrite
		rwr   = fRecvWR
	)
	for _, base := range []Opcode{0x00, 0x20} {
		tp := "RC_"
		if base == 0x20 {
			tp = "UC_"
		}
		def(base+0x00, tp+"SEND_FIRST", send|fFirst|rwr)
		def(base+0x01, tp+"SEND_MIDDLE", send|fMiddle)
		def(base+0x02, tp+"SEND_LAST", send|fLast)
		def(base+0x03, tp+"SEND_LAST_WITH_IMMEDIATE", send|fLast|fImm)
		def(base+0x04, tp+"SEND_ONLY", send|fOnly|rwr)
		def(base+0x05, tp+"SEND_ONLY_WITH_IMMEDIATE", send|fOnly|fImm|rwr)
		def(base+0x06, tp+"RDMA_WRITE_FIRST", write|fFirst|fRETH)
		def(base+0x07, tp+"RDMA_WRITE_MIDDLE", write|fMiddle)
		def(base+0x08, tp+"RDMA_WRITE_LAST", write|fLast)
		def(base+0x09, tp+"RDMA_WRITE_LAST_WITH_IMMEDIATE", write|fLast|fImm|rwr)
		def(base+0x0a, tp+"RDMA_WRITE_ONLY", write|fOnly|fRETH)
		def(base+0x0b, tp+"RDMA_WRITE_ONLY_WITH_IMMEDIATE", write|fOnly|fRETH|fImm|rwr)
	}
	def(RCReadRequest, "RC_RDMA_READ_REQUEST", req|fReadReq|fOnly|fRETH)
	def(RCReadResponseFirst, "RC_RDMA_READ_RESPONSE_FIRST", pl|fReadResp|fFirst|fAETH)
	def(RCReadResponseMiddle, "RC_RDMA_READ_RESPONSE_MIDDLE", pl|fReadResp|fMiddle)
	def(RCReadResponseLast, "RC_RDMA_READ_RESPONSE_LAST", pl|fReadResp|fLast|fAETH)
	def(RCReadResponseOnly, "RC_RDMA_READ_RESPONSE_ONLY", pl|fReadResp|fOnly|fAETH)
	def(RCAck, "RC_ACKNOWLEDGE", fAck|fOnly|fAETH)
	def(RCAtomicAck, "RC_ATOMIC_ACKNOWLEDGE", fAtomicAck|fOnly|fAETH|fAtomicAckETH)
	def(RCCompareSwap, "RC_COMPARE_SWAP", req|fCmpSwap|fOnly|fAtomicETH)
	def(RCFetchAdd, "RC_FETCH_ADD", req|fFetchAdd|fOnly|fAtomicETH)
	def(RCSendLastInv, "RC_SEND_LAST_WITH_INVALIDATE", send|fLast|fInv)
	def(RCSendOnlyInv, "RC_SEND_ONLY_WITH_INVALIDATE", send|fOnly|fInv|rwr)
	def(RCFlush, "RC_FLUSH", req|fFlush|fOnly|fFETH|fRETH)
	def(RCAtomicWrite, "RC_ATOMIC_WRITE", req|pl|fAtomicWrite|fOnly|fRETH)
	def(UDSendOnly, "UD_SEND_ONLY", send|fOnly|fDETH|rwr)
	def(UDSendOnlyImm, "UD_SEND_ONLY_WITH_IMMEDIATE", send|fOnly|fDETH|fImm|rwr)
	// A CNP is neither a request nor a response of any QP; it only signals
	// congestion back to the sender. It counts as a complete (ONLY) packet.
	def(CNP, "CNP", fOnly|fCNP)
}

func (o Opcode) has(f uint32) bool { return opTable[o].flags&f != 0 }

// Valid reports whether o is an opcode this package can parse and build.
// RD opcodes and reserved values are not valid.
func (o Opcode) Valid() bool { return o.has(fValid) }

// String returns the ib_pack.h-style name, e.g. "RC_SEND_ONLY", or
// "OPCODE_0xNN" for an invalid opcode.
func (o Opcode) String() string {
	if n := opTable[o].name; n != "" {
		return n
	}
	return "OPCODE_0x" + strconv.FormatUint(uint64(o)|0x100, 16)[1:]
}

// HeaderLen returns the length of the BTH plus all extension headers o
// carries (and the 16 reserved bytes of a CNP), or 0 if o is not Valid.
func (o Opcode) HeaderLen() int { return int(opTable[o].hdrLen) }

// IsRequest reports whether o travels from requester to responder (SEND,
// WRITE, READ request, atomics, UD SEND). Responses (read responses, ACK,
// atomic ACK) and CNP report false.
func (o Opcode) IsRequest() bool { return o.has(fRequest) }

// IsFirst reports whether o is the FIRST packet of a multi-packet message.
func (o Opcode) IsFirst() bool { return o.has(fFirst) }

// IsMiddle reports whether o is a MIDDLE packet of a multi-packet message.
func (o Opcode) IsMiddle() bool { return o.has(fMiddle) }

// IsLast reports whether o is the LAST packet of a multi-packet message.
func (o Opcode) IsLast() bool { return o.has(fLast) }

// IsOnly reports whether o is a single-packet message (ONLY opcodes, READ
// request, ACK, atomics, CNP).
func (o Opcode) IsOnly() bool { return o.has(fOnly) }

// HasPayload reports whether o may carry a payload (possibly empty).
func (o Opcode) HasPayload() bool { return o.has(fPayload) }

// HasImm reports whether o carries ImmDt (4-byte immediate data).
func (o Opcode) HasImm() bool { return o.has(fImm) }

// HasRETH reports whether o carries a RETH (WRITE FIRST/ONLY, READ request,
// FLUSH, ATOMIC WRITE).
func (o Opcode) HasRETH() bool { return o.has(fRETH) }

// HasAETH reports whether o carries an AETH (ACK, atomic ACK, read
// response FIRST/LAST/ONLY).
func (o Opcode) HasAETH() bool { return o.has(fAETH) }

// HasDETH reports whether o carries a DETH (UD opcodes).
func (o Opcode) HasDETH() bool { return o.has(fDETH) }

// HasAtomicETH reports whether o carries an AtomicETH (COMPARE_SWAP, FETCH_ADD).
func (o Opcode) HasAtomicETH() bool { return o.has(fAtomicETH) }

// HasAtomicAckETH reports whether o carries an AtomicAckETH (ATOMIC_ACKNOWLEDGE).
func (o Opcode) HasAtomicAckETH() bool { return o.has(fAtomicAckETH) }

// HasIETH reports whether o carries an IETH (SEND with invalidate).
func (o Opcode) HasIETH() bool { return o.has(fInv) }

// HasFETH reports whether o carries a FETH (FLUSH).
func (o Opcode) HasFETH() bool { return o.has(fFETH) }

// IsRC reports whether o belongs to the Reliable Connected transport.
func (o Opcode) IsRC() bool { return o.Valid() && o&0xe0 == 0x00 }

// IsUC reports whether o belongs to the Unreliable Connected transport.
func (o Opcode) IsUC() bool { return o.Valid() && o&0xe0 == 0x20 }

// IsUD reports whether o belongs to the Unreliable Datagram transport.
func (o Opcode) IsUD() bool { return o.Valid() && o&0xe0 == 0x60 }

// IsResponse reports whether o travels from responder to requester: READ
// responses, ACKNOWLEDGE and ATOMIC ACKNOWLEDGE (rxe RXE_ACK_MASK: the
// opcodes the completer handles).
func (o Opcode) IsResponse() bool { return o.has(fReadResp | fAck | fAtomicAck) }

// Starts reports whether o begins a message: a FIRST or ONLY packet (rxe
// RXE_START_MASK).
func (o Opcode) Starts() bool { return o.has(fFirst | fOnly) }

// Ends reports whether o ends a message: a LAST or ONLY packet (rxe
// RXE_END_MASK).
func (o Opcode) Ends() bool { return o.has(fLast | fOnly) }

// IsSend reports whether o is a SEND packet of any transport.
func (o Opcode) IsSend() bool { return o.has(fSend) }

// IsWrite reports whether o is an RDMA WRITE packet (RC or UC).
func (o Opcode) IsWrite() bool { return o.has(fWrite) }

// IsReadRequest reports whether o is an RDMA READ request.
func (o Opcode) IsReadRequest() bool { return o.has(fReadReq) }

// IsReadResponse reports whether o is an RDMA READ response packet.
func (o Opcode) IsReadResponse() bool { return o.has(fReadResp) }

// IsAtomic reports whether o is an atomic request (CMP_SWAP, FETCH_ADD).
func (o Opcode) IsAtomic() bool { return o.has(fCmpSwap | fFetchAdd) }

// IsFlush reports whether o is a FLUSH request.
func (o Opcode) IsFlush() bool { return o.has(fFlush) }

// IsAtomicWrite reports whether o is an ATOMIC WRITE request.
func (o Opcode) IsAtomicWrite() bool { return o.has(fAtomicWrite) }

// IsAck reports whether o is an ACKNOWLEDGE (an ACK, NAK or RNR NAK by its
// AETH syndrome).
func (o Opcode) IsAck() bool { return o.has(fAck) }

// IsAtomicAck reports whether o is an ATOMIC ACKNOWLEDGE.
func (o Opcode) IsAtomicAck() bool { return o.has(fAtomicAck) }

// NeedsRecvWR reports whether the responder consumes a receive WR for o: a
// SEND that starts a message, and an RDMA WRITE with immediate that ends one
// (rxe RXE_RWR_MASK). Without one posted, RC answers with an RNR NAK.
func (o Opcode) NeedsRecvWR() bool { return o.has(fRecvWR) }
