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
)

// MessageOpcode returns the opcode of a packet of a message: first and last
// say whether the packet starts and ends it (both for a single-packet
// message; the rxe_req.c next_opcode analogue). ok is false when the
// transport does not offer op (UD only sends single packets; UC has no
// invalidate or read).
func MessageOpcode(t Transport, op Op, first, last bool) (o Opcode, ok bool) {
	// Offsets of FIRST, MIDDLE, LAST, ONLY within each family.
	var fam [4]Opcode
	switch op {
	case OpSend:
		fam = [4]Opcode{RCSendFirst, RCSendMiddle, RCSendLast, RCSendOnly}
	case OpSendImm:
		fam = [4]Opcode{RCSendFirst, RCSendMiddle, RCSendLastImm, RCSendOnlyImm}
	case OpSendInv:
		fam = [4]Opcode{RCSendFirst, RCSendMiddle, RCSendLastInv, RCSendOnlyInv}
	case OpWrite:
		fam = [4]Opcode{RCWriteFirst, RCWriteMiddle, RCWriteLast, RCWriteOnly}
	case OpWriteImm:
		fam = [4]Opcode{RCWriteFirst, RCWriteMiddle, RCWriteLastImm, RCWriteOnlyImm}
	case OpReadResponse:
		fam = [4]Opcode{RCReadResponseFirst, RCReadResponseMiddle, RCReadResponseLast, RCReadResponseOnly}
	default:
		return 0, false
	}
	i := 1 // middle
	switch {
	case first && last:
		i = 3
	case first:
		i = 0
	case last:
		i = 2
	}
	o = fam[i]
	switch t {
	case TransportRC:
		return o, true
	case TransportUC:
		if op == OpSendInv || op == OpReadResponse {
			return 0, false
		}
		return o | Opcode(TransportUC), true
	case TransportUD:
		if i != 3 {
			return 0, false
		}
		switch op {
		case OpSend:
			return UDSendOnly, true
		case OpSendImm:
			return UDSendOnlyImm, true
		}
	}
	return 0, false
}

// ValidSequence reports whether request opcode next may follow request
// opcode prev on the same RC or UC QP (IBA 9.8.3, rxe_resp.c
// check_op_seq): inside a SEND only SEND MIDDLE/LAST may follow, inside a
// WRITE only WRITE MIDDLE/LAST, and outside a message no MIDDLE or LAST may
// start. Pass any ONLY opcode (e.g. RCSendOnly) as prev before the first
// packet. A violation is a NAK invalid request on RC and a silent drop of
// the message on UC.
func ValidSequence(prev, next Opcode) bool {
	if prev.Transport() != next.Transport() || !next.IsRequest() {
		return false
	}
	sendFam := func(o Opcode) bool { return o&0x1F <= 0x05 || o&0x1F == 0x16 || o&0x1F == 0x17 }
	writeFam := func(o Opcode) bool { return o&0x1F >= 0x06 && o&0x1F <= 0x0B }
	inMessage := prev.IsFirst() || prev.IsMiddle()
	cont := next.IsMiddle() || next.IsLast()
	switch {
	case !inMessage:
		return !cont
	case sendFam(prev):
		return cont && sendFam(next)
	case writeFam(prev):
		return cont && writeFam(next)
	}
	return false
}
