package link

import (
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/bth"
)

// LinkType is a pcap link-layer header type (www.tcpdump.org/linktypes.html).
type LinkType uint32

// Link types a Tap can write.
const (
	// LinkTypeEthernet frames each datagram in a synthesized Ethernet II
	// header; Wireshark decodes UDP 4791 as RoCEv2 / InfiniBand.
	LinkTypeEthernet LinkType = 1
	// LinkTypeRaw writes bare IPv4/IPv6 packets (LINKTYPE_RAW).
	LinkTypeRaw LinkType = 101
)

const (
	pcapMagic   = 0xa1b2c3d4 // microsecond timestamps
	pcapSnapLen = 65535
	ethHdrLen   = 14
	ip4HdrLen   = 20
	ip6HdrLen   = 40
	udpHdrLen   = 8
	recHdrLen   = 16
	tapTTL      = 64
)

// Tap is a Link that passes everything through to another Link and writes
// every datagram read or written to a pcap stream. The IP and UDP headers are
// synthesized from the Message fields, since a UDP socket never sees them:
//
//   - Datagrams we send get an IPv4 header with DF and the ID Linux gives
//     them: 0, or TrainIPv4ID for a train's segments (see the package doc),
//     so the ICRC of our own packets verifies in the capture. A train is
//     recorded segment by segment, as the wire carries it.
//   - Datagrams we receive get the ID that makes their ICRC verify: the
//     socket does not report it (rxe uses hashed IDs, a UDP link's trains
//     0, 1, ...), but exactly one ID fits a correct RoCEv2 packet
//     (bth.SolveIPv4ID). A datagram that fits none (corrupt, or not RoCEv2)
//     gets ID 0, or TrainIPv4ID as segment j of a GRO train. A GRO train is
//     recorded segment by segment.
//   - TOS / traffic class, TTL / hop limit and the IPv6 flow label are the
//     message's (TTL 0, "the socket default", is recorded as 64).
//   - The UDP checksum is always computed, even where the wire carried 0.
//     The ICRC masks it.
//
// A Tap is safe for concurrent use. Write errors never fail the I/O; they are
// counted (WriteErrors) and the first is kept (Err).
type Tap struct {
	l  Link
	lt LinkType

	mu   sync.Mutex
	w    io.Writer                                                         // mu guards
	rec  [recHdrLen + ethHdrLen + ip6HdrLen + udpHdrLen + MaxDatagram]byte // mu guards
	flat []byte                                                            // mu guards: a gathered message
	err  error                                                             // mu guards: first write error

	writeErrors atomic.Uint64
}

var (
	_ Link        = (*Tap)(nil)
	_ Receivers   = (*Tap)(nil)
	_ Poller      = (*Tap)(nil)
	_ Multicaster = (*Tap)(nil)
)

// NewTap wraps l and writes a pcap file header to w. Records follow as
// datagrams pass. The caller owns w; Close does not close it.
func NewTap(l Link, w io.Writer, lt LinkType) (*Tap, error) {
	if lt != LinkTypeEthernet && lt != LinkTypeRaw {
		return nil, fmt.Errorf("link: tap: unsupported link type %d: %w", lt, syscall.EINVAL)
	}
	t := &Tap{l: l, lt: lt}
	if err := t.Reopen(w); err != nil {
		return nil, err
	}
	return t, nil
}

// Reopen switches the capture to w, starting it with a new pcap file header
// (for log rotation on SIGHUP). The old writer is not closed.
func (t *Tap) Reopen(w io.Writer) error {
	var h [24]byte
	binary.LittleEndian.PutUint32(h[0:], pcapMagic)
	binary.LittleEndian.PutUint16(h[4:], 2) // version 2.4
	binary.LittleEndian.PutUint16(h[6:], 4)
	binary.LittleEndian.PutUint32(h[16:], pcapSnapLen)
	binary.LittleEndian.PutUint32(h[20:], uint32(t.lt))
	if _, err := w.Write(h[:]); err != nil {
		return fmt.Errorf("link: tap: write pcap header: %w", err)
	}
	t.mu.Lock()
	t.w = w
	t.err = nil
	t.mu.Unlock()
	return nil
}

// Err returns the first error writing to the current writer, or nil.
func (t *Tap) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// WriteErrors counts records lost to write errors since NewTap.
func (t *Tap) WriteErrors() uint64 { return t.writeErrors.Load() }

// ReadBatch reads from the wrapped Link and records what it got.
func (t *Tap) ReadBatch(msgs []Message) (int, error) { return t.recorded(t.l.ReadBatch, msgs) }

// ReceiveFuncs implements Receivers: each of the wrapped Link's receive
// paths, recorded.
func (t *Tap) ReceiveFuncs() []ReceiveFunc { return WrapReceiveFuncs(ReceiveFuncs(t.l), t.recorded) }

// PollFuncs implements Poller for a wrapped Link that does (nil otherwise):
// each of its non-blocking receive paths, recorded.
func (t *Tap) PollFuncs() []ReceiveFunc { return WrapReceiveFuncs(PollFuncs(t.l), t.recorded) }

// Offloads implements Offloader: the wrapped Link's.
func (t *Tap) Offloads() Offloads { return OffloadsOf(t.l) }

// WholeTrains implements WholeTrainer: the wrapped Link's.
func (t *Tap) WholeTrains(dst netip.Addr) bool { return WholeTrains(t.l, dst) }

// WaitFuncs implements Waiter for a wrapped Link that does (nil otherwise).
func (t *Tap) WaitFuncs() []WaitFunc { return WaitFuncs(t.l) }

// JoinGroup implements Multicaster for a wrapped Link that does: the
// group's datagrams are recorded too. Otherwise it is ENOSYS.
func (t *Tap) JoinGroup(group netip.Addr) (ReceiveFunc, error) {
	mc, ok := t.l.(Multicaster)
	if !ok {
		return nil, fmt.Errorf("link: tap: join %v: the wrapped link has no multicast: %w", group, syscall.ENOSYS)
	}
	fn, err := mc.JoinGroup(group)
	if err != nil {
		return nil, err
	}
	return func(msgs []Message) (int, error) { return t.recorded(fn, msgs) }, nil
}

// LeaveGroup implements Multicaster for a wrapped Link that does.
func (t *Tap) LeaveGroup(group netip.Addr) error {
	mc, ok := t.l.(Multicaster)
	if !ok {
		return fmt.Errorf("link: tap: leave %v: the wrapped link has no multicast: %w", group, syscall.ENOSYS)
	}
	return mc.LeaveGroup(group)
}

// recorded reads through fn and records what arrived.
func (t *Tap) recorded(fn ReceiveFunc, msgs []Message) (int, error) {
	n, err := fn(msgs)
	if n > 0 {
		local := t.l.LocalAddr()
		now := time.Now()
		t.mu.Lock()
		for i := range msgs[:n] {
			m := &msgs[i]
			h := recHdr{src: m.Addr, dst: local, tos: m.TOS, ttl: m.TTL, flow: m.FlowLabel}
			if m.Local.IsValid() {
				h.dst = netip.AddrPortFrom(m.Local, local.Port())
			}
			for j := range m.NumSegments() {
				h.id = receivedIPv4ID(h, m, j)
				t.recordLocked(now, h, m.Segment(j))
			}
		}
		t.mu.Unlock()
	}
	return n, err
}

// receivedIPv4ID is the IPv4 Identification recorded for segment j of a
// received message: the one that makes its ICRC verify (the sender computed
// the ICRC over the ID the wire carried, and exactly one ID fits a correct
// packet, bth.SolveIPv4ID), else the ID a UDP link's train gives it. The
// socket does not report the ID, nor whether a train arrived whole: a
// super-datagram the kernel segmented on the way arrives as datagrams whose
// IDs are 0, 1, ... of their train.
func receivedIPv4ID(h recHdr, m *Message, j int) uint16 {
	var id uint16
	if m.SegSize > 0 {
		id = TrainIPv4ID(m.SegSize, j)
	}
	if !h.src.Addr().Unmap().Is4() {
		return id
	}
	env := bth.Envelope{Src: h.src.Addr(), Dst: h.dst.Addr(), DF: true, SrcPort: h.src.Port(), DstPort: h.dst.Port()}
	if solved, ok := bth.SolveIPv4ID(&env, m.Segment(j)); ok {
		return solved
	}
	return id
}

// WriteBatch writes through the wrapped Link and records what was sent.
func (t *Tap) WriteBatch(msgs []Message) (int, error) {
	n, err := t.l.WriteBatch(msgs)
	if n > 0 {
		local := t.l.LocalAddr()
		now := time.Now()
		t.mu.Lock()
		for i := range msgs[:n] {
			m := &msgs[i]
			h := recHdr{src: local, dst: m.Addr, tos: m.TOS, ttl: m.TTL, flow: m.FlowLabel}
			if p := m.SrcPort; p != 0 {
				h.src = netip.AddrPortFrom(local.Addr(), p)
			}
			b := m.Buf
			if len(m.Pieces) > 0 {
				t.flat = t.flat[:0]
				for _, p := range m.Pieces {
					t.flat = append(t.flat, p...)
				}
				b = t.flat
			}
			if m.SegSize <= 0 || m.SegSize >= len(b) {
				t.recordLocked(now, h, b)
				continue
			}
			for j := 0; j*m.SegSize < len(b); j++ {
				h.id = TrainIPv4ID(m.SegSize, j)
				t.recordLocked(now, h, b[j*m.SegSize:min((j+1)*m.SegSize, len(b))])
			}
		}
		t.mu.Unlock()
	}
	return n, err
}

// SourcePort forwards to the wrapped Link.
func (t *Tap) SourcePort(port uint16) bool { return t.l.SourcePort(port) }

// LocalAddr returns the wrapped Link's address.
func (t *Tap) LocalAddr() netip.AddrPort { return t.l.LocalAddr() }

// BatchSize returns the wrapped Link's batch size.
func (t *Tap) BatchSize() int { return t.l.BatchSize() }

// Close closes the wrapped Link. The pcap writer stays open.
func (t *Tap) Close() error { return t.l.Close() }

// recHdr is what a record's synthesized IP and UDP headers say.
type recHdr struct {
	src, dst netip.AddrPort
	tos, ttl uint8
	flow     uint32
	id       uint16
}

// recordLocked writes one pcap record. Datagrams whose addresses are not of
// one family are counted as write errors and skipped.
func (t *Tap) recordLocked(now time.Time, h recHdr, payload []byte) {
	src, dst := h.src, h.dst
	sa, da := src.Addr().Unmap(), dst.Addr().Unmap()
	if sa.Is4() != da.Is4() || !sa.IsValid() || !da.IsValid() {
		t.failLocked(fmt.Errorf("link: tap: cannot frame %v -> %v: %w", src, dst, syscall.EAFNOSUPPORT))
		return
	}
	ttl := h.ttl
	if ttl == 0 {
		ttl = tapTTL
	}
	origPayload := len(payload)
	if len(payload) > MaxDatagram {
		payload = payload[:MaxDatagram] // snap; orig_len keeps the real size
	}
	r := t.rec[:]
	p := recHdrLen
	if t.lt == LinkTypeEthernet {
		putMAC(r[p:p+6], da)
		putMAC(r[p+6:p+12], sa)
		if sa.Is4() {
			binary.BigEndian.PutUint16(r[p+12:], 0x0800)
		} else {
			binary.BigEndian.PutUint16(r[p+12:], 0x86dd)
		}
		p += ethHdrLen
	}
	ipStart := p
	udpLen := udpHdrLen + len(payload)
	p += putIPHeader(r[p:], h, sa, da, ttl, udpLen)
	udp := r[p : p+udpHdrLen]
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0, 0
	p += udpHdrLen
	copy(r[p:], payload)
	p += len(payload)
	// UDP checksum over the pseudo-header, header and payload.
	var s uint32
	if sa.Is4() {
		s = sum(s, r[ipStart+12:ipStart+20])
	} else {
		s = sum(s, r[ipStart+8:ipStart+40])
	}
	s += syscall.IPPROTO_UDP + uint32(udpLen)
	s = sum(s, r[p-udpLen:p])
	c := ^uint16(fold(s))
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], c)

	frameLen := p - recHdrLen
	binary.LittleEndian.PutUint32(r[0:], uint32(now.Unix()))
	binary.LittleEndian.PutUint32(r[4:], uint32(now.Nanosecond()/1000))
	binary.LittleEndian.PutUint32(r[8:], uint32(frameLen))
	binary.LittleEndian.PutUint32(r[12:], uint32(frameLen-len(payload)+origPayload))
	if _, err := t.w.Write(r[:p]); err != nil {
		t.failLocked(err)
	}
}

// putIPHeader writes the IPv4 or IPv6 header of a record carrying udpLen
// bytes of UDP from sa to da into b, and returns its length.
func putIPHeader(b []byte, h recHdr, sa, da netip.Addr, ttl uint8, udpLen int) int {
	if !sa.Is4() {
		ip := b[:ip6HdrLen]
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(h.tos)<<20|h.flow&0xFFFFF)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = syscall.IPPROTO_UDP
		ip[7] = ttl
		s16, d16 := sa.As16(), da.As16()
		copy(ip[8:24], s16[:])
		copy(ip[24:40], d16[:])
		return ip6HdrLen
	}
	ip := b[:ip4HdrLen]
	ip[0] = 0x45
	ip[1] = h.tos
	binary.BigEndian.PutUint16(ip[2:], uint16(ip4HdrLen+udpLen))
	binary.BigEndian.PutUint16(ip[4:], h.id)   // what Linux sends with DF
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8] = ttl
	ip[9] = syscall.IPPROTO_UDP
	ip[10], ip[11] = 0, 0
	s4, d4 := sa.As4(), da.As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	binary.BigEndian.PutUint16(ip[10:], ^uint16(fold(sum(0, ip))))
	return ip4HdrLen
}

func (t *Tap) failLocked(err error) {
	t.writeErrors.Add(1)
	if t.err == nil {
		t.err = err
	}
}

// putMAC derives a locally administered MAC (02:00 + the address's last
// four bytes) so Wireshark shows one stable station per IP.
func putMAC(b []byte, a netip.Addr) {
	s := a.As16()
	b[0], b[1] = 0x02, 0x00
	copy(b[2:6], s[12:16])
}

// sum adds b as big-endian 16-bit words (RFC 1071) to s.
func sum(s uint32, b []byte) uint32 {
	for len(b) >= 2 {
		s += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint32(b[0]) << 8
	}
	return s
}

func fold(s uint32) uint16 {
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}
