package oob

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"syscall"
)

// perftest (ib_send_bw, ib_write_bw, ib_read_bw, ...) swaps addresses over the same TCP
// port with a richer exchange (perftest's "Ethernet" data exchange method). Every
// step is symmetric and fixed-size: the client writes first and then reads, the server
// reads and then writes the same number of bytes. PerftestConn runs those steps; which
// steps a test makes, and how many hand-shakes it uses as barriers, is up to the caller.

// PerftestRecordLen is the size of perftest's per-QP record with a GID
// (KEY_PRINT_FMT_GID): LID:OUT_READS:QPN:PSN:RKEY:VADDR:16 GID bytes:SRQN: plus a NUL.
const PerftestRecordLen = 108

// PerftestVersionLen is the size of the version string step (MAX_VERSION).
const PerftestVersionLen = 16

// PerftestVersion is the version goroce advertises. From 6.28 on, perftest also swaps a
// raw C struct of test parameters whose size depends on how it was built; a peer that
// reads a version below 6.28 skips that step, and 5.70 is the oldest it accepts.
const PerftestVersion = "6.27"

// PerftestDest is one QP's address in perftest's exchange (struct pingpong_dest).
type PerftestDest struct {
	LID      uint16
	OutReads uint16 // max outstanding RDMA READs/atomics the sender allows (out_reads)
	QPN      uint32 // 24 bits
	PSN      uint32 // 24 bits
	RKey     uint32 // of the buffer the peer may read or write
	VAddr    uint64 // address of that buffer
	GID      [16]byte
	SRQN     uint32
}

// AppendRecord appends d's 108-byte record to b; it fails, appending nothing, when QPN
// or PSN exceed 24 bits.
func (d PerftestDest) AppendRecord(b []byte) ([]byte, error) {
	if d.QPN > 0xffffff || d.PSN > 0xffffff {
		return b, fmt.Errorf("oob: QPN 0x%x or PSN 0x%x exceeds 24 bits: %w", d.QPN, d.PSN, syscall.EINVAL)
	}
	for _, f := range []struct {
		v     uint64
		width int
	}{{uint64(d.LID), 4}, {uint64(d.OutReads), 4}, {uint64(d.QPN), 6}, {uint64(d.PSN), 6}, {uint64(d.RKey), 8}, {d.VAddr, 16}} {
		b = appendHex(b, f.v, f.width)
		b = append(b, ':')
	}
	for _, c := range d.GID {
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf], ':')
	}
	b = appendHex(b, uint64(d.SRQN), 8)
	return append(b, ':', 0), nil
}

// ParsePerftestRecord parses one 108-byte record, strictly in the layout perftest
// writes (hex digits of either case).
func ParsePerftestRecord(b []byte) (PerftestDest, error) {
	if len(b) != PerftestRecordLen {
		return PerftestDest{}, fmt.Errorf("oob: perftest record is %d bytes, want %d: %w", len(b), PerftestRecordLen, ErrRecord)
	}
	if b[len(b)-1] != 0 {
		return PerftestDest{}, fmt.Errorf("oob: perftest record %q: no NUL: %w", printable(b), ErrRecord)
	}
	widths := []int{4, 4, 6, 6, 8, 16}
	for range 16 {
		widths = append(widths, 2)
	}
	widths = append(widths, 8)
	vals := make([]uint64, 0, len(widths))
	off := 0
	for _, w := range widths {
		v, ok := parseHex(b[off : off+w])
		if !ok || b[off+w] != ':' {
			return PerftestDest{}, fmt.Errorf("oob: perftest record %q: bad field at %d: %w", printable(b), off, ErrRecord)
		}
		vals = append(vals, v)
		off += w + 1
	}
	d := PerftestDest{LID: uint16(vals[0]), OutReads: uint16(vals[1]), QPN: uint32(vals[2]), PSN: uint32(vals[3]),
		RKey: uint32(vals[4]), VAddr: vals[5], SRQN: uint32(vals[22])}
	for i := range d.GID {
		d.GID[i] = byte(vals[6+i])
	}
	return d, nil
}

// PerftestBinaryLen is the size of perftest's struct pingpong_dest as its rdma_cm
// exchange (-R) sends it, on x86-64: five 32-bit fields, 4 bytes of padding, the
// 64-bit vaddr, the GID, srqn and gid_index.
const PerftestBinaryLen = 56

// AppendBinary appends d in the layout of struct pingpong_dest, each number
// big-endian as perftest's rdma_write_keys writes it.
func (d PerftestDest) AppendBinary(b []byte) []byte {
	for _, v := range []uint32{uint32(d.LID), uint32(d.OutReads), d.QPN, d.PSN, d.RKey, 0} {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	b = binary.BigEndian.AppendUint64(b, d.VAddr)
	b = append(b, d.GID[:]...)
	b = binary.BigEndian.AppendUint32(b, d.SRQN)
	return binary.BigEndian.AppendUint32(b, 0) // gid_index: perftest does not read it
}

// ParsePerftestBinary parses a struct pingpong_dest of the rdma_cm exchange, the
// fields perftest's rdma_read_keys reads.
func ParsePerftestBinary(b []byte) (PerftestDest, error) {
	if len(b) != PerftestBinaryLen {
		return PerftestDest{}, fmt.Errorf("oob: perftest binary record is %d bytes, want %d: %w", len(b), PerftestBinaryLen, ErrRecord)
	}
	be := binary.BigEndian
	d := PerftestDest{LID: uint16(be.Uint32(b[0:])), OutReads: uint16(be.Uint32(b[4:])), QPN: be.Uint32(b[8:]) & 0xFFFFFF,
		PSN: be.Uint32(b[12:]) & 0xFFFFFF, RKey: be.Uint32(b[16:]), VAddr: be.Uint64(b[24:]), SRQN: be.Uint32(b[48:])}
	copy(d.GID[:], b[32:48])
	return d, nil
}

// MessageExchanger carries perftest's exchange over rdma_cm (-R): each step is
// one message each way on an RC QP, the client's first.
type MessageExchanger interface {
	Exchange(ctx context.Context, out, in []byte) error
}

// PerftestConn runs perftest's exchange steps on one TCP connection, or, for -R,
// over a MessageExchanger.
type PerftestConn struct {
	conn   net.Conn
	client bool             // the side that connected: it writes first in every step
	msgs   MessageExchanger // -R: steps are messages, QP records binary, no "done"
}

// NewPerftestConn wraps conn. client is true on the side that connected.
func NewPerftestConn(conn net.Conn, client bool) *PerftestConn {
	return &PerftestConn{conn: conn, client: client}
}

// NewPerftestMessages runs the exchange over m, as perftest does with -R: the
// same steps, the QP records in their binary form, and no closing "done".
func NewPerftestMessages(m MessageExchanger) *PerftestConn {
	return &PerftestConn{msgs: m}
}

// Exchange sends out and receives len(in) bytes, in perftest's order: the client
// writes then reads, the server reads then writes.
func (p *PerftestConn) Exchange(ctx context.Context, out, in []byte) error {
	if p.msgs != nil {
		return p.msgs.Exchange(ctx, out, in)
	}
	defer bindContext(ctx, p.conn)()
	if p.client {
		if _, err := p.conn.Write(out); err != nil {
			return wrapIO(ctx, "perftest send", err)
		}
	}
	if _, err := io.ReadFull(p.conn, in); err != nil {
		return wrapIO(ctx, "perftest read", err)
	}
	if !p.client {
		if _, err := p.conn.Write(out); err != nil {
			return wrapIO(ctx, "perftest send", err)
		}
	}
	return nil
}

// ExchangeVersion swaps the 16-byte NUL-padded version strings and returns the
// peer's.
func (p *PerftestConn) ExchangeVersion(ctx context.Context, local string) (string, error) {
	if len(local) >= PerftestVersionLen {
		return "", fmt.Errorf("oob: version %q too long: %w", local, syscall.EINVAL)
	}
	var out, in [PerftestVersionLen]byte
	copy(out[:], local)
	if err := p.Exchange(ctx, out[:], in[:]); err != nil {
		return "", err
	}
	v, _, _ := bytes.Cut(in[:], []byte{0})
	return string(v), nil
}

// ExchangeUint32 swaps one big-endian 32-bit value (perftest's cycle buffer and cache
// line sizes, one step each).
func (p *PerftestConn) ExchangeUint32(ctx context.Context, local uint32) (uint32, error) {
	var out, in [4]byte
	binary.BigEndian.PutUint32(out[:], local)
	if err := p.Exchange(ctx, out[:], in[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(in[:]), nil
}

// ExchangeMTU swaps the MTU enum (1..5, 256..4096 bytes) as perftest does from 5.31 on:
// one ASCII digit and a NUL.
func (p *PerftestConn) ExchangeMTU(ctx context.Context, local int) (int, error) {
	if local < 1 || local > 5 {
		return 0, fmt.Errorf("oob: MTU enum %d: %w", local, syscall.EINVAL)
	}
	out := []byte{byte('0' + local), 0}
	var in [2]byte
	if err := p.Exchange(ctx, out, in[:]); err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(string(in[:1]))
	if err != nil || v < 1 || v > 5 || in[1] != 0 {
		return 0, fmt.Errorf("oob: peer MTU %q: %w", printable(in[:]), ErrRecord)
	}
	return v, nil
}

// HandShake swaps one QP record (ctx_hand_shake). perftest also uses it as a barrier,
// repeating the same records.
func (p *PerftestConn) HandShake(ctx context.Context, local PerftestDest) (PerftestDest, error) {
	if p.msgs != nil {
		var in [PerftestBinaryLen]byte
		if err := p.Exchange(ctx, local.AppendBinary(nil), in[:]); err != nil {
			return PerftestDest{}, err
		}
		return ParsePerftestBinary(in[:])
	}
	out, err := local.AppendRecord(make([]byte, 0, PerftestRecordLen))
	if err != nil {
		return PerftestDest{}, err
	}
	var in [PerftestRecordLen]byte
	if err := p.Exchange(ctx, out, in[:]); err != nil {
		return PerftestDest{}, err
	}
	return ParsePerftestRecord(in[:])
}

// Done swaps the closing "done" (with its NUL) that both sides send when the peer is
// older than perftest 23.10 (version 6.17); newer ones close without it, and over
// rdma_cm there is none.
func (p *PerftestConn) Done(ctx context.Context) error {
	if p.msgs != nil {
		return nil
	}
	var in [len(doneMsg)]byte
	if err := p.Exchange(ctx, doneMsg[:], in[:]); err != nil {
		return err
	}
	if in != doneMsg {
		return fmt.Errorf("oob: expected \"done\", got %q: %w", printable(in[:]), ErrRecord)
	}
	return nil
}
