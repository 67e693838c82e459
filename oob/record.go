package oob

import (
	"fmt"
	"net/netip"
	"syscall"
)

// DefaultPort is the TCP port of the pingpong and perftest exchanges.
const DefaultPort = 18515

// RecordLen is the size of one pingpong record: "%04x:%06x:%06x:" with 32 hex digits of
// GID and a NUL (char msg[sizeof "0000:000000:000000:" + 32] in rdma-core).
const RecordLen = 52

// SRQRecords is how many records ibv_srq_pingpong always exchanges each way (its MAX_QP),
// whatever its -q; the unused ones are all zeros.
const SRQRecords = 256

// doneMsg is what the client sends after it has read the server's records: the string
// "done" with its NUL, 5 bytes.
var doneMsg = [5]byte{'d', 'o', 'n', 'e', 0}

// Dest is one queue pair's address as the pingpong tools exchange it.
type Dest struct {
	LID uint16   // 0 on RoCE
	QPN uint32   // 24 bits
	PSN uint32   // 24 bits, the first PSN this QP sends
	GID [16]byte // network order; ::ffff:a.b.c.d for RoCEv2 over IPv4
}

// ErrRecord is wrapped by every error about a malformed record; it is EPROTO.
var ErrRecord = syscall.EPROTO

// GIDAddr returns the GID as an address (IPv4-mapped GIDs stay mapped).
func (d Dest) GIDAddr() netip.Addr { return netip.AddrFrom16(d.GID) }

// String formats d the way the pingpong tools print an address:
// "LID 0x0000, QPN 0x000011, PSN 0x67a3f8, GID ::ffff:198.18.0.12".
func (d Dest) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", d.LID, d.QPN, d.PSN, d.GIDAddr())
}

// IsZero reports whether d is the all-zeros placeholder of an unused srq record.
func (d Dest) IsZero() bool { return d == Dest{} }

const hexDigits = "0123456789abcdef"

// AppendRecord appends d's 52-byte record to b. It returns an error, appending nothing,
// if QPN or PSN do not fit in 24 bits.
func (d Dest) AppendRecord(b []byte) ([]byte, error) {
	if d.QPN > 0xffffff || d.PSN > 0xffffff {
		return b, fmt.Errorf("oob: QPN 0x%x or PSN 0x%x exceeds 24 bits: %w", d.QPN, d.PSN, syscall.EINVAL)
	}
	b = appendHex(b, uint64(d.LID), 4)
	b = append(b, ':')
	b = appendHex(b, uint64(d.QPN), 6)
	b = append(b, ':')
	b = appendHex(b, uint64(d.PSN), 6)
	b = append(b, ':')
	for _, c := range d.GID {
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return append(b, 0), nil
}

func appendHex(b []byte, v uint64, width int) []byte {
	for i := width - 1; i >= 0; i-- {
		b = append(b, hexDigits[(v>>(4*i))&0xf])
	}
	return b
}

// ParseRecord parses one 52-byte record. It is strict about the layout the tools
// produce: fixed field widths, ':' separators, hex digits of either case, a final NUL.
func ParseRecord(b []byte) (Dest, error) {
	if len(b) != RecordLen {
		return Dest{}, fmt.Errorf("oob: record is %d bytes, want %d: %w", len(b), RecordLen, ErrRecord)
	}
	if b[4] != ':' || b[11] != ':' || b[18] != ':' || b[51] != 0 {
		return Dest{}, fmt.Errorf("oob: record %q: bad separators: %w", printable(b), ErrRecord)
	}
	lid, ok1 := parseHex(b[0:4])
	qpn, ok2 := parseHex(b[5:11])
	psn, ok3 := parseHex(b[12:18])
	if !ok1 || !ok2 || !ok3 {
		return Dest{}, fmt.Errorf("oob: record %q: bad hex field: %w", printable(b), ErrRecord)
	}
	d := Dest{LID: uint16(lid), QPN: uint32(qpn), PSN: uint32(psn)}
	for i := range d.GID {
		v, ok := parseHex(b[19+2*i : 21+2*i])
		if !ok {
			return Dest{}, fmt.Errorf("oob: record %q: bad GID: %w", printable(b), ErrRecord)
		}
		d.GID[i] = byte(v)
	}
	return d, nil
}

func parseHex(b []byte) (uint64, bool) {
	var v uint64
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

// printable returns b with non-printing bytes as '.', for error messages.
func printable(b []byte) string {
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '.'
		}
		out[i] = c
	}
	return string(out)
}

// AppendRecords appends n records to b: dests, then zero placeholders up to n. It fails if
// len(dests) > n.
func AppendRecords(b []byte, dests []Dest, n int) ([]byte, error) {
	if len(dests) > n {
		return b, fmt.Errorf("oob: %d records do not fit in %d: %w", len(dests), n, syscall.EINVAL)
	}
	start := len(b)
	for i := 0; i < n; i++ {
		var d Dest
		if i < len(dests) {
			d = dests[i]
		}
		var err error
		if b, err = d.AppendRecord(b); err != nil {
			return b[:start], err
		}
	}
	return b, nil
}

// ParseRecords parses consecutive records; len(b) must be a multiple of RecordLen.
func ParseRecords(b []byte) ([]Dest, error) {
	if len(b)%RecordLen != 0 {
		return nil, fmt.Errorf("oob: %d bytes is not a whole number of records: %w", len(b), ErrRecord)
	}
	out := make([]Dest, 0, len(b)/RecordLen)
	for i := 0; i < len(b); i += RecordLen {
		d, err := ParseRecord(b[i : i+RecordLen])
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", i/RecordLen, err)
		}
		out = append(out, d)
	}
	return out, nil
}
