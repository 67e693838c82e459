//go:build linux

package link

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHeaderFieldsPerMessage sends datagrams and a train with their own
// traffic class (DSCP and ECN bits: 0x02 is ECT(0), 0x03 CE, 0x01 ECT(1)),
// TTL / hop limit and IPv6 flow label, and checks the receiver reports each
// as the kernel saw it (a CE mark reaches the reader, for a congestion
// notification point). As root, a
// capture on lo checks the headers on the wire too, and that the IPv4
// datagrams still carry ID 0 (trains: TrainIPv4ID) with DF and a valid header
// checksum, so the ICRC (which masks TOS and TTL) is unaffected.
func TestHeaderFieldsPerMessage(t *testing.T) {
	type fields struct {
		tos, ttl uint8
		flow     uint32
	}
	tests := []struct {
		name string
		a, b string
		msgs []fields
	}{
		{"ipv4", "127.0.0.1:0", "127.0.0.2:0", []fields{
			{}, {tos: 0xb8}, {tos: 0x02}, {tos: 0x03}, {ttl: 17}, {tos: 0x68, ttl: 3}, {ttl: 64}, {tos: 0x01, ttl: 255},
		}},
		{"ipv6", "[::1]:0", "[::1]:0", []fields{
			{}, {tos: 0xb8}, {tos: 0x02}, {tos: 0x03}, {ttl: 17}, {flow: 0x12345}, {tos: 0x68, ttl: 3, flow: 0xfffff}, {flow: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := listen(t, tt.a, Config{})
			b := listen(t, tt.b, Config{})
			var sn *sniffer
			if unix.Geteuid() == 0 {
				sn = sniff(t, loIndex(t), b.LocalAddr().Port())
			}
			var out []Message
			var want []fields
			for i, f := range tt.msgs {
				out = append(out, Message{Buf: fmt.Appendf(nil, "datagram %d", i), Addr: b.LocalAddr(), TOS: f.tos, TTL: f.ttl, FlowLabel: f.flow})
				want = append(want, f)
			}
			// A train carries its fields on every segment.
			tr := newTrain(a.LocalAddr(), b.LocalAddr(), 1000, 3, 0)
			m := tr.msg(b.LocalAddr())
			m.TOS, m.TTL = 0x6a, 9
			if a.is6 {
				m.FlowLabel = 0x777
			}
			out = append(out, m)
			for range 3 {
				want = append(want, fields{m.TOS, m.TTL, m.FlowLabel})
			}
			if n, err := a.WriteBatch(out); n != len(out) || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			got := readDatagrams(t, b.ReadBatch, 16, len(want))
			defTTL := uint8(a.defTTL)
			for i, g := range got {
				w := want[i]
				if w.ttl == 0 {
					w.ttl = defTTL
				}
				if g.TOS != w.tos || g.TTL != w.ttl || (w.flow != 0 && g.FlowLabel != w.flow) {
					t.Errorf("datagram %d: received TOS %#x TTL %d flow %#x; want %#x %d %#x", i, g.TOS, g.TTL, g.FlowLabel, w.tos, w.ttl, w.flow)
				}
			}
			if c := a.Counters(); c.FlowLabelRefused != 0 {
				t.Errorf("flow label leases refused: %+v", c)
			}
			if sn == nil {
				t.Log("not root: the wire check is skipped")
				return
			}
			// On lo the train leaves as one super-datagram: the receiver
			// splits it (TestGSOSegmentIDsOnWire sees segments on a veth).
			pkts := sn.collect(b.LocalAddr().Port(), len(tt.msgs)+1)
			if len(pkts) != len(tt.msgs)+1 || len(pkts[len(tt.msgs)].payload) != 3000 {
				t.Fatalf("captured %d datagrams, want %d and the train's super-datagram", len(pkts), len(tt.msgs))
			}
			for i, p := range pkts {
				w := want[i]
				if w.ttl == 0 {
					w.ttl = defTTL
				}
				if p.tos() != w.tos || p.ttl() != w.ttl || (w.flow != 0 && p.flowLabel() != w.flow) {
					t.Errorf("datagram %d on the wire: TOS %#x TTL %d flow %#x; want %#x %d %#x", i, p.tos(), p.ttl(), p.flowLabel(), w.tos, w.ttl, w.flow)
				}
				if !p.is6() && (p.ipv4ID() != 0 || binary.BigEndian.Uint16(p.ipUDP[6:8]) != 0x4000 || !p.ipv4ChecksumOK()) {
					t.Errorf("datagram %d: ID %d flags %#x checksum ok %v; want ID 0, DF", i, p.ipv4ID(), binary.BigEndian.Uint16(p.ipUDP[6:8]), p.ipv4ChecksumOK())
				}
			}
		})
	}
}

// TestTxControlOnlyWhenAsked: the common datagram (default TOS and TTL, no
// train) goes out without control messages, so it costs nothing extra.
func TestTxControlOnlyWhenAsked(t *testing.T) {
	u := listen(t, "127.0.0.1:0", Config{})
	s := newMmsgScratch(1)
	group := netip.MustParseAddr("239.1.2.3")
	for _, tt := range []struct {
		m    Message
		gso  bool
		dst  netip.Addr
		want int
	}{
		{Message{}, false, u.local.Addr(), 0},
		{Message{TTL: uint8(u.defTTL)}, false, u.local.Addr(), 0},
		{Message{TTL: DefaultMulticastTTL}, false, group, 0},
		{Message{TTL: uint8(u.defTTL)}, false, group, 24},
		{Message{TOS: 2}, false, u.local.Addr(), 24},
		{Message{TOS: 2, TTL: 1}, false, u.local.Addr(), 48},
		{Message{SegSize: 100}, true, u.local.Addr(), 24},
		{Message{SegSize: 100, TOS: 0xb8, TTL: 200}, true, u.local.Addr(), 72},
	} {
		u.putTxControl(s, 0, &tt.m, tt.gso, tt.dst)
		if got := int(s.hs[0].hdr.Controllen); got != tt.want || (got == 0) != (s.hs[0].hdr.Control == nil) {
			t.Errorf("%+v gso %v to %v: control length %d, want %d", tt.m, tt.gso, tt.dst, got, tt.want)
		}
		if meta := parseControl(s.oob[:s.hs[0].hdr.Controllen], false); meta.tos != tt.m.TOS {
			t.Errorf("%+v: the control messages say TOS %#x", tt.m, meta.tos)
		}
	}
}
