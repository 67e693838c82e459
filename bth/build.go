package bth

import (
	"encoding/binary"
	"slices"
)

// Fields holds every header field Append can write. Only the headers the
// Opcode carries are used; the rest are ignored. DestQP, PSN, AETH.MSN and
// DETH.SrcQP are truncated to 24 bits.
type Fields struct {
	Opcode                         Opcode
	SE, MigReq, FECN, BECN, AckReq bool
	PKey                           uint16
	DestQP                         uint32
	PSN                            PSN
	RETH                           RETH
	AETH                           AETH
	Imm                            uint32
	DETH                           DETH
	Atomic                         AtomicETH
	AtomicAck                      AtomicAckETH
	IETH                           uint32
	FETH                           FETH
}

// PacketLen returns the UDP payload length of a packet with opcode op and
// payloadLen payload bytes: headers, payload, pad and ICRC. It returns 0 if
// op is not Valid.
func PacketLen(op Opcode, payloadLen int) int {
	h := op.HeaderLen()
	if h == 0 {
		return 0
	}
	return h + payloadLen + PadCount(payloadLen) + ICRCLen
}

// Append appends a whole packet to dst: BTH and extension headers from f,
// payload, zero pad (PadCnt derived from len(payload)) and 4 zero ICRC
// bytes (fill them with PutICRC). Reserved bits are written as zero and
// TVer as 0. It does not allocate when cap(dst)-len(dst) >=
// PacketLen(f.Opcode, len(payload)).
//
// Append panics if f.Opcode is not Valid, or if payload is non-empty for an
// opcode without payload: both are programming errors, not wire input.
func Append(dst []byte, f *Fields, payload []byte) []byte {
	start := len(dst)
	dst = AppendHeaders(dst, f, len(payload))
	h := len(dst) - start
	n := h + len(payload) + PadCount(len(payload)) + ICRCLen
	dst = slices.Grow(dst, n-h)[:start+n]
	b := dst[start:]
	copy(b[h:], payload)
	clear(b[h+len(payload):])
	return dst
}

// AppendHeaders appends the BTH and extension headers of a packet with
// payloadLen payload bytes (PadCnt derived from it), without the payload,
// pad and ICRC: for a packet sent as a gather list of headers, payload and
// tail (pad and ICRC; see ICRCParts). It panics as Append does.
func AppendHeaders(dst []byte, f *Fields, payloadLen int) []byte {
	in := &opTable[f.Opcode]
	if in.flags&fValid == 0 {
		panic("bth: Append with invalid opcode " + f.Opcode.String())
	}
	if payloadLen > 0 && in.flags&fPayload == 0 {
		panic("bth: Append with payload for " + f.Opcode.String())
	}
	pad := PadCount(payloadLen)
	n := int(in.hdrLen)
	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	b := dst[start:]

	b[0] = byte(f.Opcode)
	b[1] = byte(pad) << 4
	if f.SE {
		b[1] |= 0x80
	}
	if f.MigReq {
		b[1] |= 0x40
	}
	binary.BigEndian.PutUint16(b[2:], f.PKey)
	b[4] = 0
	if f.FECN {
		b[4] |= 0x80
	}
	if f.BECN {
		b[4] |= 0x40
	}
	putUint24(b[5:], f.DestQP)
	b[8] = 0
	if f.AckReq {
		b[8] = 0x80
	}
	putUint24(b[9:], uint32(f.PSN))

	if o := in.deth; o != 0 {
		binary.BigEndian.PutUint32(b[o:], f.DETH.QKey)
		b[o+4] = 0
		putUint24(b[o+5:], f.DETH.SrcQP)
	}
	if o := in.feth; o != 0 {
		binary.BigEndian.PutUint32(b[o:], uint32(f.FETH.Selectivity&3)<<4|uint32(f.FETH.PlacementType&0xF))
	}
	if o := in.reth; o != 0 {
		binary.BigEndian.PutUint64(b[o:], f.RETH.VA)
		binary.BigEndian.PutUint32(b[o+8:], f.RETH.RKey)
		binary.BigEndian.PutUint32(b[o+12:], f.RETH.DMALen)
	}
	if o := in.atomic; o != 0 {
		binary.BigEndian.PutUint64(b[o:], f.Atomic.VA)
		binary.BigEndian.PutUint32(b[o+8:], f.Atomic.RKey)
		binary.BigEndian.PutUint64(b[o+12:], f.Atomic.SwapAdd)
		binary.BigEndian.PutUint64(b[o+20:], f.Atomic.Compare)
	}
	if o := in.aeth; o != 0 {
		b[o] = f.AETH.Syndrome
		putUint24(b[o+1:], f.AETH.MSN)
	}
	if o := in.atomicAck; o != 0 {
		binary.BigEndian.PutUint64(b[o:], f.AtomicAck.Orig)
	}
	if o := in.imm; o != 0 {
		binary.BigEndian.PutUint32(b[o:], f.Imm)
	}
	if o := in.ieth; o != 0 {
		binary.BigEndian.PutUint32(b[o:], f.IETH)
	}
	if in.flags&fCNP != 0 {
		clear(b[BTHLen:in.hdrLen])
	}
	return dst
}
