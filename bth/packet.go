package bth

import (
	"encoding/binary"
	"errors"
)

// Parse errors. Each malformed packet is rejected with exactly one of them,
// so receivers can count drops by cause with errors.Is.
var (
	// ErrTruncated: shorter than the BTH, or than its opcode's headers plus ICRC.
	ErrTruncated = errors.New("bth: packet truncated")
	// ErrPadOverrun: the BTH pad count exceeds the bytes left for payload.
	ErrPadOverrun = errors.New("bth: pad count beyond payload")
	// ErrBadTVer: the BTH transport header version is not 0 (IBA 9.2; rxe
	// hdr_check drops such packets).
	ErrBadTVer = errors.New("bth: transport header version not 0")
	// ErrUnknownOpcode: the opcode is not in the RC, UC, UD or CNP table.
	ErrUnknownOpcode = errors.New("bth: unknown opcode")
	// ErrUnexpectedPayload: bytes between the headers and the ICRC of an
	// opcode that carries no payload (ACK, READ request, atomics, CNP).
	ErrUnexpectedPayload = errors.New("bth: payload on an opcode without payload")
)

// Packet is a read-only view over one RoCEv2 UDP payload: BTH, extension
// headers, payload, pad and the 4-byte ICRC trailer. It holds the caller's
// slice, copies nothing, and is only valid while that buffer is.
//
// Accessors do not bounds-check beyond what Parse verified: call them only
// on a Packet returned by Parse with a nil error. An accessor for a header
// the opcode does not carry returns the zero value.
type Packet struct {
	b []byte
}

// Parse validates b (a whole UDP payload including the ICRC trailer) and
// returns a view over it. It checks, in order: the BTH is present, TVer is 0,
// the opcode is known, the headers and ICRC fit, the pad fits, and that
// opcodes without payload carry none. It does not check the ICRC (see
// CheckICRC) and does not allocate.
func Parse(b []byte) (Packet, error) {
	if len(b) < BTHLen {
		return Packet{}, ErrTruncated
	}
	if b[1]&0x0F != 0 {
		return Packet{}, ErrBadTVer
	}
	in := &opTable[b[0]]
	if in.flags&fValid == 0 {
		return Packet{}, ErrUnknownOpcode
	}
	rest := len(b) - int(in.hdrLen) - ICRCLen
	if rest < 0 {
		return Packet{}, ErrTruncated
	}
	if int(b[1]>>4&3) > rest {
		return Packet{}, ErrPadOverrun
	}
	if rest > 0 && in.flags&fPayload == 0 {
		return Packet{}, ErrUnexpectedPayload
	}
	return Packet{b: b}, nil
}

// PeekDestQP returns the BTH DestQP of a UDP payload without parsing it, for
// demultiplexing before the owner of the QP checks the packet. ok is false
// when b is too short to be a RoCEv2 packet (BTH plus ICRC).
func PeekDestQP(b []byte) (qpn uint32, ok bool) {
	if len(b) < BTHLen+ICRCLen {
		return 0, false
	}
	return uint24(b[5:]), true
}

func (p Packet) info() *opInfo { return &opTable[p.b[0]] }

// Bytes returns the whole UDP payload the packet views, ICRC included.
func (p Packet) Bytes() []byte { return p.b }

// Opcode returns the BTH OpCode.
func (p Packet) Opcode() Opcode { return Opcode(p.b[0]) }

// SE reports the BTH Solicited Event bit.
func (p Packet) SE() bool { return p.b[1]&0x80 != 0 }

// MigReq reports the BTH MigReq bit (path migration; rxe always sets it).
func (p Packet) MigReq() bool { return p.b[1]&0x40 != 0 }

// PadCount returns the BTH PadCnt: pad bytes between payload and ICRC.
func (p Packet) PadCount() int { return int(p.b[1] >> 4 & 3) }

// TVer returns the transport header version (always 0 after Parse).
func (p Packet) TVer() uint8 { return p.b[1] & 0x0F }

// PKey returns the BTH partition key.
func (p Packet) PKey() uint16 { return binary.BigEndian.Uint16(p.b[2:]) }

// FECN reports the BTH Forward ECN bit.
func (p Packet) FECN() bool { return p.b[4]&0x80 != 0 }

// BECN reports the BTH Backward ECN bit (set in a CNP).
func (p Packet) BECN() bool { return p.b[4]&0x40 != 0 }

// DestQP returns the 24-bit destination QP number.
func (p Packet) DestQP() uint32 { return uint24(p.b[5:]) }

// AckReq reports the BTH AckReq bit.
func (p Packet) AckReq() bool { return p.b[8]&0x80 != 0 }

// PSN returns the 24-bit packet sequence number.
func (p Packet) PSN() PSN { return PSN(uint24(p.b[9:])) }

// HeaderLen returns the length of BTH plus extension headers.
func (p Packet) HeaderLen() int { return int(p.info().hdrLen) }

// RETH returns the RETH, or the zero RETH if the opcode has none.
func (p Packet) RETH() RETH {
	o := p.info().reth
	if o == 0 {
		return RETH{}
	}
	h := p.b[o:]
	return RETH{
		VA:     binary.BigEndian.Uint64(h),
		RKey:   binary.BigEndian.Uint32(h[8:]),
		DMALen: binary.BigEndian.Uint32(h[12:]),
	}
}

// FETH returns the FETH, or the zero FETH if the opcode has none. Reserved
// bits are ignored.
func (p Packet) FETH() FETH {
	w := p.u32at(p.info().feth)
	return FETH{PlacementType: uint8(w & 0xF), Selectivity: uint8(w >> 4 & 3)}
}

// AETH returns the AETH, or the zero AETH if the opcode has none.
func (p Packet) AETH() AETH {
	o := p.info().aeth
	if o == 0 {
		return AETH{}
	}
	return AETH{Syndrome: p.b[o], MSN: uint24(p.b[o+1:])}
}

// Imm returns the ImmDt value (big-endian on the wire, as rxe carries it),
// or 0 if the opcode has none.
func (p Packet) Imm() uint32 { return p.u32at(p.info().imm) }

// IETH returns the R_Key to invalidate, or 0 if the opcode has no IETH.
func (p Packet) IETH() uint32 { return p.u32at(p.info().ieth) }

func (p Packet) u32at(o uint8) uint32 {
	if o == 0 {
		return 0
	}
	return binary.BigEndian.Uint32(p.b[o:])
}

// DETH returns the DETH, or the zero DETH if the opcode has none.
func (p Packet) DETH() DETH {
	o := p.info().deth
	if o == 0 {
		return DETH{}
	}
	return DETH{QKey: binary.BigEndian.Uint32(p.b[o:]), SrcQP: uint24(p.b[o+5:])}
}

// AtomicETH returns the AtomicETH, or the zero value if the opcode has none.
func (p Packet) AtomicETH() AtomicETH {
	o := p.info().atomic
	if o == 0 {
		return AtomicETH{}
	}
	h := p.b[o:]
	return AtomicETH{
		VA:      binary.BigEndian.Uint64(h),
		RKey:    binary.BigEndian.Uint32(h[8:]),
		SwapAdd: binary.BigEndian.Uint64(h[12:]),
		Compare: binary.BigEndian.Uint64(h[20:]),
	}
}

// AtomicAckETH returns the AtomicAckETH, or the zero value if the opcode has none.
func (p Packet) AtomicAckETH() AtomicAckETH {
	o := p.info().atomicAck
	if o == 0 {
		return AtomicAckETH{}
	}
	return AtomicAckETH{Orig: binary.BigEndian.Uint64(p.b[o:])}
}

// Payload returns the payload without pad and ICRC (a sub-slice of the
// packet, not a copy).
func (p Packet) Payload() []byte {
	end := len(p.b) - ICRCLen - p.PadCount()
	return p.b[p.info().hdrLen:end:end]
}

// ICRC returns the trailer as the 32-bit CRC value (stored little-endian
// on the wire).
func (p Packet) ICRC() uint32 { return binary.LittleEndian.Uint32(p.b[len(p.b)-ICRCLen:]) }

// Fields returns every header field of the packet as a value that Append
// accepts, so Append(nil, &f, p.Payload()) rebuilds the packet (up to
// reserved bits, pad contents and the ICRC).
func (p Packet) Fields() Fields {
	return Fields{
		Opcode:    p.Opcode(),
		SE:        p.SE(),
		MigReq:    p.MigReq(),
		FECN:      p.FECN(),
		BECN:      p.BECN(),
		AckReq:    p.AckReq(),
		PKey:      p.PKey(),
		DestQP:    p.DestQP(),
		PSN:       p.PSN(),
		RETH:      p.RETH(),
		AETH:      p.AETH(),
		Imm:       p.Imm(),
		DETH:      p.DETH(),
		Atomic:    p.AtomicETH(),
		AtomicAck: p.AtomicAckETH(),
		IETH:      p.IETH(),
		FETH:      p.FETH(),
	}
}

func uint24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

func putUint24(b []byte, v uint32) {
	_ = b[2]
	b[0] = byte(v >> 16)
	b[1] = byte(v >> 8)
	b[2] = byte(v)
}
