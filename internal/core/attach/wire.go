package attach

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"syscall"
)

// Version is the protocol version a Hello carries. A server answers any
// other with EPROTONOSUPPORT.
const Version = 1

// MaxMessage bounds one message on the wire, header included: a larger one
// is refused (EMSGSIZE) by the sender and by the decoder.
const MaxMessage = 64 << 10

// MADLen is the length of a CM MAD: MADOut and MADIn carry exactly one.
const MADLen = 256

// maxText bounds the human-readable strings (a program name, an error's
// text).
const maxText = 256

// headerLen is the fixed header: version, type, flags (2), sequence (4).
const headerLen = 8

// Type names a message.
type Type uint8

// Message types. The direction is client → roced (c) or roced → client (s).
const (
	THello   Type = iota + 1 // c: attach to an address
	TGrant                   // s: the QPN block and its socket (one fd)
	TError                   // s: a request failed, with its errno
	TOK                      // s: a request succeeded
	TMADOut                  // c: send a CM MAD from QP1
	TMADIn                   // s: a CM MAD for this client arrived on QP1
	TClaim                   // c: listen on a CM service ID (exclusive)
	TRelease                 // c: stop listening on a service ID (no answer)
	TCharge                  // c: take (Delta > 0) or give back resources against the uid's quota
	TQuery                   // s: report the device's state
	TReport                  // c: the answer to a Query (Body)
	tLast
)

var typeNames = [...]string{"", "Hello", "Grant", "Error", "OK", "MADOut", "MADIn", "Claim", "Release", "Charge", "Query", "Report"}

func (t Type) String() string {
	if t > 0 && t < tLast {
		return typeNames[t]
	}
	return fmt.Sprintf("Type(%d)", uint8(t))
}

// Kind is the resource a Charge counts.
type Kind uint8

// Resources under per-uid quotas. Listeners are counted by roced itself
// (Claim).
const (
	KindQP Kind = iota + 1
	KindMR
	kindLast
)

// Grant flags.
const (
	// FlagGRO allows the client to turn UDP_GRO on for its socket.
	FlagGRO uint32 = 1 << iota
)

// Msg is one message. Which fields a type carries:
//
//	Hello   Addr, Port, Name (the program, for display)
//	Grant   Block, First, Last, CommIDs, Flags, MTU; one fd: the block's socket
//	Error   Errno, Text
//	OK      (nothing)
//	MADOut  Addr (to), MAD
//	MADIn   Addr (from), MAD
//	Claim   ServiceID, UD
//	Release ServiceID, UD
//	Charge  Kind, Delta
//	Query   (nothing)
//	Report  Body (JSON, see Report)
//
// Seq pairs a request with its answer: the answer (Grant, Error, OK,
// Report) carries the request's Seq. Unsolicited messages carry 0.
type Msg struct {
	Type Type
	Seq  uint32

	Addr      netip.Addr
	Port      uint16
	Name      string
	Block     uint16
	First     uint32
	Last      uint32
	CommIDs   uint32 // the prefix every communication ID of the client has (Session.CommIDs)
	Flags     uint32
	MTU       uint8 // the port's active MTU (1 = 256 ... 5 = 4096)
	Errno     syscall.Errno
	Text      string
	MAD       []byte
	ServiceID uint64
	UD        bool
	Kind      Kind
	Delta     int32
	Body      []byte
}

// Append encodes m after b.
func (m *Msg) Append(b []byte) ([]byte, error) {
	if m.Type == 0 || m.Type >= tLast {
		return nil, fmt.Errorf("attach: encode %v: %w", m.Type, syscall.EINVAL)
	}
	start := len(b)
	b = append(b, Version, byte(m.Type), 0, 0)
	b = binary.BigEndian.AppendUint32(b, m.Seq)
	var err error
	switch m.Type {
	case THello:
		b = appendAddr(b, m.Addr)
		b = binary.BigEndian.AppendUint16(b, m.Port)
		b, err = appendText(b, m.Name)
	case TGrant:
		b = binary.BigEndian.AppendUint16(b, m.Block)
		b = binary.BigEndian.AppendUint32(b, m.First)
		b = binary.BigEndian.AppendUint32(b, m.Last)
		b = binary.BigEndian.AppendUint32(b, m.CommIDs)
		b = binary.BigEndian.AppendUint32(b, m.Flags)
		b = append(b, m.MTU)
	case TError:
		b = binary.BigEndian.AppendUint32(b, uint32(m.Errno))
		b, err = appendText(b, m.Text)
	case TMADOut, TMADIn:
		if len(m.MAD) != MADLen {
			return nil, fmt.Errorf("attach: encode %v: a MAD is %d bytes, not %d: %w", m.Type, MADLen, len(m.MAD), syscall.EINVAL)
		}
		b = appendAddr(b, m.Addr)
		b = append(b, m.MAD...)
	case TClaim, TRelease:
		b = binary.BigEndian.AppendUint64(b, m.ServiceID)
		b = append(b, b2u(m.UD))
	case TCharge:
		b = append(b, byte(m.Kind))
		b = binary.BigEndian.AppendUint32(b, uint32(m.Delta))
	case TReport:
		b = append(b, m.Body...)
	}
	if err != nil {
		return nil, err
	}
	if len(b)-start > MaxMessage {
		return nil, fmt.Errorf("attach: encode %v: %d bytes, at most %d: %w", m.Type, len(b)-start, MaxMessage, syscall.EMSGSIZE)
	}
	return b, nil
}

// Decode parses one message. Errors wrap EPROTO (malformed), EMSGSIZE (too
// long) or EPROTONOSUPPORT (another version), so errors.Is works.
func Decode(b []byte) (Msg, error) {
	if len(b) > MaxMessage {
		return Msg{}, fmt.Errorf("attach: %d-byte message, at most %d: %w", len(b), MaxMessage, syscall.EMSGSIZE)
	}
	if len(b) < headerLen {
		return Msg{}, fmt.Errorf("attach: %d-byte message, shorter than its header: %w", len(b), syscall.EPROTO)
	}
	if b[0] != Version {
		return Msg{}, fmt.Errorf("attach: protocol version %d, this side speaks %d: %w", b[0], Version, syscall.EPROTONOSUPPORT)
	}
	m := Msg{Type: Type(b[1]), Seq: binary.BigEndian.Uint32(b[4:])}
	if m.Type == 0 || m.Type >= tLast {
		return Msg{}, fmt.Errorf("attach: unknown message type %d: %w", b[1], syscall.EPROTO)
	}
	if b[2] != 0 || b[3] != 0 {
		return Msg{}, fmt.Errorf("attach: %v: flags %#x, none defined: %w", m.Type, b[2:4], syscall.EPROTO)
	}
	r := reader{b: b[headerLen:]}
	switch m.Type {
	case THello:
		m.Addr = r.addr()
		m.Port = r.u16()
		m.Name = r.text()
	case TGrant:
		m.Block = r.u16()
		m.First = r.u32()
		m.Last = r.u32()
		m.CommIDs = r.u32()
		m.Flags = r.u32()
		m.MTU = r.u8()
		if !r.bad && (m.First > m.Last || m.Last > 0xFFFFFF || m.MTU < 1 || m.MTU > 5) {
			r.bad = true
		}
	case TError:
		m.Errno = syscall.Errno(r.u32())
		m.Text = r.text()
	case TMADOut, TMADIn:
		m.Addr = r.addr()
		m.MAD = r.bytes(MADLen)
	case TClaim, TRelease:
		m.ServiceID = r.u64()
		switch r.u8() {
		case 0:
		case 1:
			m.UD = true
		default:
			r.bad = true
		}
	case TCharge:
		m.Kind = Kind(r.u8())
		m.Delta = int32(r.u32())
		if m.Kind == 0 || m.Kind >= kindLast {
			r.bad = true
		}
	case TReport:
		m.Body = append([]byte(nil), r.rest()...)
	}
	if r.bad || len(r.b) != 0 {
		return Msg{}, fmt.Errorf("attach: malformed %v (%d bytes): %w", m.Type, len(b), syscall.EPROTO)
	}
	return m, nil
}

func b2u(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// appendAddr writes an address as its length (0, 4 or 16) and bytes.
func appendAddr(b []byte, a netip.Addr) []byte {
	if !a.IsValid() {
		return append(b, 0)
	}
	s := a.Unmap().AsSlice()
	return append(append(b, byte(len(s))), s...)
}

func appendText(b []byte, s string) ([]byte, error) {
	if len(s) > maxText {
		return nil, fmt.Errorf("attach: %d-byte text, at most %d: %w", len(s), maxText, syscall.EMSGSIZE)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...), nil
}

// reader takes fields off a message body; a short or invalid field sets bad
// and yields zero values from then on.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) take(n int) []byte {
	if r.bad || len(r.b) < n {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() uint8 {
	if v := r.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if v := r.take(2); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if v := r.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if v := r.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *reader) bytes(n int) []byte {
	if v := r.take(n); v != nil {
		return append([]byte(nil), v...)
	}
	return nil
}

func (r *reader) rest() []byte {
	v := r.b
	r.b = nil
	return v
}

func (r *reader) addr() netip.Addr {
	n := int(r.u8())
	if r.bad {
		return netip.Addr{}
	}
	switch n {
	case 0:
		return netip.Addr{}
	case 4, 16:
		a, _ := netip.AddrFromSlice(r.take(n))
		if a.Is4In6() {
			r.bad = true // sent as 4 bytes, so that an address has one encoding
		}
		return a
	}
	r.bad = true
	return netip.Addr{}
}

func (r *reader) text() string {
	n := int(r.u16())
	if n > maxText {
		r.bad = true
		return ""
	}
	return string(r.take(n))
}

var errNoMulticast = fmt.Errorf("attach: the socket cannot join multicast groups: %w", syscall.EOPNOTSUPP)
