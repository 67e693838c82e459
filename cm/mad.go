package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// MAD geometry (IBA 13.4.2, 16.7). A CM MAD is always exactly MADLen bytes: a
// HeaderLen-byte common header followed by a BodyLen-byte CM payload.
const (
	MADLen    = 256
	HeaderLen = 24
	BodyLen   = MADLen - HeaderLen // 232
)

// Values of the MAD common header that the kernel MAD layer requires of CM
// traffic (mad.c validate_mad: base version 1, a class with an agent, and for
// the CM class only method Send for REQ..APR).
const (
	BaseVersion  = 1
	MgmtClassCM  = 0x07
	ClassVersion = 2
	MethodSend   = 0x03
)

// QP1 (the GSI QP) addressing on RoCE: every CM MAD is a UD SEND to DestQP 1
// with this Q_Key and P_Key (ib_verbs.h IB_QP1_QKEY, default partition).
const (
	GSIQPN  = 1
	GSIQKey = 0x80010000
	GSIPKey = 0xFFFF
)

// AttrID is the MAD attribute ID, which names the CM message (IBA Table 104;
// ib_cm.h CM_*_ATTR_ID).
type AttrID uint16

// CM attribute IDs.
const (
	AttrREQ     AttrID = 0x0010
	AttrMRA     AttrID = 0x0011
	AttrREJ     AttrID = 0x0012
	AttrREP     AttrID = 0x0013
	AttrRTU     AttrID = 0x0014
	AttrDREQ    AttrID = 0x0015
	AttrDREP    AttrID = 0x0016
	AttrSIDRREQ AttrID = 0x0017
	AttrSIDRREP AttrID = 0x0018
	AttrLAP     AttrID = 0x0019
	AttrAPR     AttrID = 0x001A
)

// String returns the message name, e.g. "REQ".
func (a AttrID) String() string {
	switch a {
	case AttrREQ:
		return "REQ"
	case AttrMRA:
		return "MRA"
	case AttrREJ:
		return "REJ"
	case AttrREP:
		return "REP"
	case AttrRTU:
		return "RTU"
	case AttrDREQ:
		return "DREQ"
	case AttrDREP:
		return "DREP"
	case AttrSIDRREQ:
		return "SIDR_REQ"
	case AttrSIDRREP:
		return "SIDR_REP"
	case AttrLAP:
		return "LAP"
	case AttrAPR:
		return "APR"
	}
	return fmt.Sprintf("AttrID(%#04x)", uint16(a))
}

// attrOf returns the attribute ID of a marshalled MAD (bytes 16..17 of the
// common header), which names the CM message it carries, without parsing the
// rest. It returns 0, no CM attribute, when mad is shorter than the header.
func attrOf(mad []byte) AttrID {
	if len(mad) < HeaderLen {
		return 0
	}
	return AttrID(binary.BigEndian.Uint16(mad[16:]))
}

// Header is the 24-byte MAD common header (IBA 13.4.3):
//
//	 0 BaseVersion | 1 MgmtClass | 2 ClassVersion | 3 R(1) Method(7)
//	 4 Status (16)              | 6 ClassSpecific (16)
//	 8 TransactionID (64)
//	16 AttributeID (16)         | 18 reserved (16)
//	20 AttributeModifier (32)
type Header struct {
	BaseVersion   uint8
	MgmtClass     uint8
	ClassVersion  uint8
	Method        uint8 // includes the response bit 0x80
	Status        uint16
	ClassSpecific uint16
	TID           uint64 // transaction ID; a reply carries the request's
	AttrID        AttrID
	AttrMod       uint32
}

// Parse errors. Parse wraps them with detail; test with errors.Is.
var (
	ErrTruncated   = errors.New("cm: MAD shorter than 256 bytes")
	ErrLength      = errors.New("cm: MAD longer than 256 bytes")
	ErrNotCM       = errors.New("cm: not a CM MAD (base version, class or class version)")
	ErrMethod      = errors.New("cm: CM MAD method is not Send")
	ErrUnknownAttr = errors.New("cm: unsupported CM attribute")
)

func (h *Header) put(b []byte) {
	b[0] = h.BaseVersion
	b[1] = h.MgmtClass
	b[2] = h.ClassVersion
	b[3] = h.Method
	binary.BigEndian.PutUint16(b[4:], h.Status)
	binary.BigEndian.PutUint16(b[6:], h.ClassSpecific)
	binary.BigEndian.PutUint64(b[8:], h.TID)
	binary.BigEndian.PutUint16(b[16:], uint16(h.AttrID))
	b[18], b[19] = 0, 0
	binary.BigEndian.PutUint32(b[20:], h.AttrMod)
}

func (h *Header) get(b []byte) {
	h.BaseVersion = b[0]
	h.MgmtClass = b[1]
	h.ClassVersion = b[2]
	h.Method = b[3]
	h.Status = binary.BigEndian.Uint16(b[4:])
	h.ClassSpecific = binary.BigEndian.Uint16(b[6:])
	h.TID = binary.BigEndian.Uint64(b[8:])
	h.AttrID = AttrID(binary.BigEndian.Uint16(b[16:]))
	h.AttrMod = binary.BigEndian.Uint32(b[20:])
}

// ParseHeader decodes the common header of a MAD without checking the class.
func ParseHeader(b []byte) (Header, error) {
	var h Header
	if len(b) < HeaderLen {
		return h, ErrTruncated
	}
	h.get(b)
	return h, nil
}

// Message is one CM message body (the 232 bytes after the MAD header).
// The concrete types are *REQ, *MRA, *REJ, *REP, *RTU, *DREQ, *DREP,
// *SIDRREQ and *SIDRREP.
type Message interface {
	// AttrID names the message.
	AttrID() AttrID
	// marshal writes the body into b, which is BodyLen zero bytes.
	marshal(b []byte) error
	// unmarshal reads the body from b (BodyLen bytes).
	unmarshal(b []byte)
}

// Marshal returns the 256-byte MAD carrying m as a CM Send with transaction
// ID tid. It fails (wrapping ErrPrivateDataTooLong) when m's private data
// does not fit its message.
func Marshal(tid uint64, m Message) ([]byte, error) {
	return AppendMAD(nil, tid, m)
}

// AppendMAD appends the 256-byte MAD carrying m to dst (see Marshal).
func AppendMAD(dst []byte, tid uint64, m Message) ([]byte, error) {
	n := len(dst)
	dst = append(dst, make([]byte, MADLen)...)
	b := dst[n:]
	h := Header{BaseVersion: BaseVersion, MgmtClass: MgmtClassCM, ClassVersion: ClassVersion,
		Method: MethodSend, TID: tid, AttrID: m.AttrID()}
	h.put(b)
	if err := m.marshal(b[HeaderLen:]); err != nil {
		return dst[:n], err
	}
	return dst, nil
}

// Parse decodes a 256-byte CM MAD. It checks the header (base version 1,
// class CM, class version 2, method Send) and returns the decoded message,
// which owns copies of its private data (b may be reused). It never panics on
// malformed input.
func Parse(b []byte) (Header, Message, error) {
	var h Header
	if len(b) < MADLen {
		return h, nil, fmt.Errorf("%w: %d bytes", ErrTruncated, len(b))
	}
	if len(b) > MADLen {
		return h, nil, fmt.Errorf("%w: %d bytes", ErrLength, len(b))
	}
	h.get(b)
	if h.BaseVersion != BaseVersion || h.MgmtClass != MgmtClassCM || h.ClassVersion != ClassVersion {
		return h, nil, fmt.Errorf("%w: base %d class %#x version %d", ErrNotCM, h.BaseVersion, h.MgmtClass, h.ClassVersion)
	}
	if h.Method != MethodSend {
		return h, nil, fmt.Errorf("%w: method %#x", ErrMethod, h.Method)
	}
	m := newMessage(h.AttrID)
	if m == nil {
		return h, nil, fmt.Errorf("%w: %v", ErrUnknownAttr, h.AttrID)
	}
	m.unmarshal(b[HeaderLen:MADLen])
	return h, m, nil
}

func newMessage(a AttrID) Message {
	switch a {
	case AttrREQ:
		return new(REQ)
	case AttrMRA:
		return new(MRA)
	case AttrREJ:
		return new(REJ)
	case AttrREP:
		return new(REP)
	case AttrRTU:
		return new(RTU)
	case AttrDREQ:
		return new(DREQ)
	case AttrDREP:
		return new(DREP)
	case AttrSIDRREQ:
		return new(SIDRREQ)
	case AttrSIDRREP:
		return new(SIDRREP)
	}
	return nil
}
