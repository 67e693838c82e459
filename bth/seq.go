package bth

// Transport is the transport service of an opcode: its top 3 bits.
type Transport uint8

// Transports a RoCEv2 peer meets (RD is not supported).
const (
	TransportRC  Transport = 0x00
	TransportUC  Transport = 0x20
	TransportUD  Transport = 0x60
	TransportCNP Transport = 0x80
)

// Transport returns o's transport service.
func (o Opcode) Transport() Transport { return Transport(o & 0xE0) }

// Op is the operation a requester segments into packets (or, for
// OpReadResponse, a responder).
type Op uint8

// Operations of MessageOpcode.
const (
	OpSend         Op = iota // SEND
	OpSendImm                // SEND with immediate (ImmDt on the last packet)
	OpSendInv                // SEND with invalidate (IETH on the last packet; RC only)
	OpWrite                  // RDMA WRITE (RETH on the first packet)
	OpWriteImm               // RDMA WRITE with immediate
	OpReadResponse           // RDMA READ response (RC only)
	OpRead                   // RDMA READ request (RC only; one packet)
	OpCompareSwap            // ATOMIC CMP_SWAP (RC only; one packet)
	OpFetchAdd               // ATOMIC FETCH_ADD (RC only; one packet)
	OpFlush                  // FLUSH (RC only; one packet)
	OpAtomicWrite            // ATOMIC WRITE (RC only; one packet)
	numOps
)

// opFamily is, per Op, the opcode-table family bit its packets carry and the
// trailer (ImmDt or IETH) its last packet carries.
var opFamily = [numOps]struct{ family, trailer uint32 }{
	OpSend:         {fSend, 0},
	OpSendImm:      {fSend, fImm},
	OpSendInv:      {fSend, fInv},
	OpWrite:        {fWrite, 0},
	OpWriteImm:     {fWrite, fImm},
	OpReadResponse: {fReadResp, 0},
	OpRead:         {fReadReq, 0},
	OpCompareSwap:  {fCmpSwap, 0},
	OpFetchAdd:     {fFetchAdd, 0},
	OpFlush:        {fFlush, 0},
	OpAtomicWrite:  {fAtomicWrite, 0},
}

// Packet positions in a message, the index of msgOpcodes' last dimension.
const (
	posFirst = iota
	posMiddle
	posLast
	posOnly
)

// msgOpcodes[transport>>5][op][position] is derived from the opcode table
// at init: the opcode of the transport whose family is op's, whose position
// is position, and whose trailer is op's (FIRST and MIDDLE packets carry
// none).
var msgOpcodes [8][numOps][4]struct {
	o  Opcode
	ok bool
}

func init() {
	for o := range 256 {
		in := &opTable[o]
		var pos int
		switch {
		case in.flags&fFirst != 0:
			pos = posFirst
		case in.flags&fMiddle != 0:
			pos = posMiddle
		case in.flags&fLast != 0:
			pos = posLast
		case in.flags&fOnly != 0:
			pos = posOnly
		default:
			continue
		}
		trailer := in.flags & (fImm | fInv)
		for op, fam := range opFamily {
			if in.flags&fam.family == 0 {
				continue
			}
			if trailer == fam.trailer || trailer == 0 && (pos == posFirst || pos == posMiddle) {
				msgOpcodes[o>>5][op][pos] = struct {
					o  Opcode
					ok bool
				}{Opcode(o), true}
			}
		}
	}
}

// MessageOpcode returns the opcode of a packet of a message: first and last
// say whether the packet starts and ends it (both for a single-packet
// message; the rxe_req.c next_opcode analogue). ok is false when the
// transport does not offer op at that position (UD only sends single
// packets; UC has no invalidate, READ or atomics; READ and atomic requests
// are single packets). The answer comes from the opcode table.
func MessageOpcode(t Transport, op Op, first, last bool) (o Opcode, ok bool) {
	if op >= numOps {
		return 0, false
	}
	pos := posMiddle
	switch {
	case first && last:
		pos = posOnly
	case first:
		pos = posFirst
	case last:
		pos = posLast
	}
	e := msgOpcodes[t>>5&7][op][pos]
	return e.o, e.ok
}

// ValidSequence reports whether request opcode next may follow request
// opcode prev on the same RC or UC QP (IBA 9.8.3, rxe_resp.c
// check_op_seq): inside a SEND only SEND MIDDLE/LAST may follow, inside a
// WRITE only WRITE MIDDLE/LAST, and outside a message no MIDDLE or LAST may
// start one. Outside a message means prev is not a FIRST or MIDDLE: before
// the first packet pass any other opcode (an ONLY, or an invalid one such
// as 0xFF). A violation is a NAK invalid request on RC and a silent drop of
// the message on UC.
func ValidSequence(prev, next Opcode) bool {
	if !next.IsRequest() {
		return false
	}
	if !prev.has(fFirst | fMiddle) {
		return next.Starts()
	}
	fam := opTable[prev].flags & (fSend | fWrite)
	return !next.Starts() && prev.Transport() == next.Transport() && opTable[next].flags&fam != 0
}
