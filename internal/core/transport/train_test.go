package transport

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// recLink records every message written, its gather list flattened.
type recLink struct {
	noLink
	mu     sync.Mutex
	msgs   []link.Message
	writes int // WriteBatch calls (system calls, on a real link)
}

func (l *recLink) WriteBatch(m []link.Message) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes++
	for _, x := range m {
		var b []byte
		for i := range x.NumSegments() {
			d := make([]byte, link.MaxDatagram)
			b = append(b, d[:x.CopySegment(d, i)]...)
		}
		l.msgs = append(l.msgs, link.Message{Buf: b, SegSize: x.SegSize, Addr: x.Addr, SrcPort: x.SrcPort})
	}
	return len(m), nil
}

// idleEngine is an engine whose goroutines never start: the test plays the
// shard.
func idleEngine(t *testing.T, l link.Link, opts ...func(*Config)) *Engine {
	t.Helper()
	cfg := Config{Link: l, Memory: newFakeMem(), Shards: 1}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := newEngine(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// noGSOLink is a noLink that sends no trains as GSO.
type noGSOLink struct{ noLink }

func (noGSOLink) Offloads() link.Offloads { return link.Offloads{GRO: true} }

// TestTrainEnd: how the output list is cut into trains. Each packet is
// "q.d.size[.tos]": QP, destination, datagram size, traffic class. QPs a and
// b send from the link's own port, c and d from ports of their own.
func TestTrainEnd(t *testing.T) {
	tests := []struct {
		name   string
		out    string
		trains string // the size of each train, in order
		noGSO  bool
	}{
		{"one packet", "a.x.80", "1", false},
		{"equal sizes", "a.x.80 a.x.80 a.x.80", "3", false},
		{"WRITE: FIRST alone, MIDDLEs and LAST", "a.x.1060 a.x.1040 a.x.1040 a.x.1040 a.x.500", "1 4", false},
		{"WRITE of two full packets: FIRST, LAST", "a.x.1060 a.x.1040", "2", false},
		{"READ response: FIRST, MIDDLEs, longer LAST", "a.x.1044 a.x.1040 a.x.1040 a.x.1044", "1 2 1", false},
		{"the last shorter", "a.x.1040 a.x.1040 a.x.20", "3", false},
		{"a shorter packet ends the train", "a.x.1040 a.x.20 a.x.1040", "2 1", false},
		{"a longer packet starts another", "a.x.20 a.x.20 a.x.1040 a.x.1040", "2 2", false},
		{"QPs on one source port share a train", "a.x.80 a.x.80 b.x.80 b.x.80 a.x.80", "5", false},
		{"another source port breaks it", "c.x.80 c.x.80 d.x.80 d.x.80 c.x.80", "2 2 1", false},
		{"the link's port and a QP's own", "a.x.80 c.x.80 c.x.80", "1 2", false},
		{"another destination breaks it", "a.x.80 a.y.80 a.y.80", "1 2", false},
		{"ACKs of one QP coalesce", "a.x.20 a.x.20", "2", false},
		{"another traffic class breaks it", "a.x.80 a.x.80.2 a.x.80.2", "1 2", false},
		{"the link has no GSO", "a.x.80 a.x.80 a.x.80", "1 1 1", true},
		{"DestQPs of one 4096-QPN range share a train", "a.x.80.0.3 b.x.80.0.3", "2", false},
		{"another DestQP range breaks it", "a.x.80.0.3 b.x.80.0.4 b.x.80.0.4", "1 2", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var l link.Link = noLink{t}
			if tc.noGSO {
				l = noGSOLink{noLink{t}}
			}
			e := idleEngine(t, l)
			s := e.shards[0]
			qps := map[string]*QP{}
			for _, f := range strings.Fields(tc.out) {
				var q, d string
				var n, tos, rng int
				fmt.Sscanf(f, "%1s.%1s.%d.%d.%d", &q, &d, &n, &tos, &rng)
				if qps[q] == nil {
					qps[q] = &QP{e: e, sh: s}
					if q >= "c" {
						qps[q].wport = 50000 + uint16(q[0])
					}
				}
				dst := netip.MustParseAddr("192.0.2.1")
				if d == "y" {
					dst = netip.MustParseAddr("192.0.2.2")
				}
				buf := new([link.MaxDatagram]byte)
				binary.BigEndian.PutUint32(buf[4:], uint32(rng)<<12|0x11) // DestQP
				s.out = append(s.out, txPacket{q: qps[q], dst: dst, n: n, tos: uint8(tos), buf: buf})
			}
			var got []string
			for i := 0; i < len(s.out); {
				j := s.trainEnd(i, len(s.out))
				got = append(got, fmt.Sprint(j-i))
				i = j
			}
			if g := fmt.Sprint(got); g != "["+tc.trains+"]" {
				t.Fatalf("trains %s, want [%s]", g, tc.trains)
			}
		})
	}
}

// TestFlushTrainICRC: a train leaves as one message with the segment size,
// and each segment carries the ICRC for the IPv4 ID the kernel gives it in
// its super-datagram (link.TrainIPv4ID): ID 0, 1, 2, ... restarting every
// GSOSegments segments. Alone, a packet has ID 0.
func TestFlushTrainICRC(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%v", v6), func(t *testing.T) {
			l := &recLink{noLink: noLink{t}}
			local, peer := addrA.Addr(), addrB.Addr()
			if v6 {
				local, peer = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
			}
			e := idleEngine(t, l, func(c *Config) { c.LocalAddr = local })
			s := e.shards[0]
			q := &QP{e: e, sh: s, wport: 50000}
			const segs = 70 // more than one super-datagram (62 segments of 1040 bytes)
			payload := pattern(1024, 7)
			av := &verbs.AddressVector{DGID: peer}
			for i := range segs + 1 {
				f := bth.Fields{Opcode: bth.RCWriteMiddle, PKey: 0xFFFF, DestQP: 0x77, PSN: bth.PSN(i)}
				p := payload // sent in place: headers, payload and tail as three pieces
				if i == segs {
					f.Opcode, f.AckReq, p = bth.RCWriteLast, true, payload[:100] // copied
				}
				q.emit(&f, p, av)
			}
			if s.out[0].pay == nil || s.out[segs].pay != nil {
				t.Fatal("a 1024-byte payload was copied, or a 100-byte one was not")
			}
			s.flush()
			if len(l.msgs) != 1 || l.msgs[0].SegSize != 1040 {
				t.Fatalf("%d messages, segment size %d; want one train of 1040", len(l.msgs), l.msgs[0].SegSize)
			}
			m := l.msgs[0]
			env := bth.Envelope{Src: local, Dst: peer, DF: true, SrcPort: 50000, DstPort: e.port}
			for k := range m.NumSegments() {
				env.IPID = link.TrainIPv4ID(m.SegSize, k)
				if !bth.CheckICRC(&env, m.Segment(k)) {
					t.Fatalf("segment %d: ICRC wrong for IPv4 ID %d", k, env.IPID)
				}
				pkt, err := bth.Parse(m.Segment(k))
				if err != nil || pkt.PSN() != bth.PSN(k) || len(pkt.Payload()) > 0 && pkt.Payload()[1] != payload[1] {
					t.Fatalf("segment %d: %v, PSN %v", k, err, pkt.PSN())
				}
			}
			if n := e.cfg.Stats.TxTrainSegments.Load(); n != segs+1 || e.cfg.Stats.TxTrains.Load() != 1 {
				t.Fatalf("counted %d trains, %d segments", e.cfg.Stats.TxTrains.Load(), n)
			}
			if len(s.out) != 0 {
				t.Fatal("output list not emptied")
			}
		})
	}
}

// TestReaderSplitsGROTrain: a GRO train is split into its segments, each
// checked on its own (a corrupt one is dropped and counted, the others are
// delivered), a lone datagram is copied out of the train buffer, and the
// train buffer is released once every segment is done.
func TestReaderSplitsGROTrain(t *testing.T) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{recvWR: 8})
	rb := w.mem.reg(1, make([]byte, 4096), verbs.AccessLocalWrite)
	for i := range 4 {
		w.recv(verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{rb.sge(1024*i, 1024)}})
	}
	env := bth.Envelope{Src: w.peer.Addr(), Dst: addrA.Addr(), DF: true, SrcPort: w.peer.Port(), DstPort: addrA.Port()}
	var train []byte
	for i := range 3 {
		f := bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xFFFF, DestQP: w.q.qpn, PSN: wireRQPSN.Add(i), AckReq: true}
		p := bth.Append(nil, &f, pattern(512, byte(i)))
		env.IPID = link.TrainIPv4ID(len(p), i)
		bth.PutICRC(&env, p)
		if i == 1 {
			p[100] ^= 0x40 // corrupt: dropped alone, the third is then out of sequence
		}
		train = append(train, p...)
	}
	lone := w.packet(bth.Fields{Opcode: bth.RCSendOnly, PSN: wireRQPSN.Add(1), AckReq: true}, pattern(512, 9))
	reads := []link.Message{
		{Buf: train, SegSize: len(train) / 3, Addr: w.peer, Local: addrA.Addr()},
		{Buf: lone.bytes(), Addr: w.peer, Local: addrA.Addr()},
	}
	recv := func(msgs []link.Message) (int, error) {
		n := 0
		for ; n < len(reads) && n < len(msgs); n++ {
			b := append(msgs[n].Buf[:0], reads[n].Buf...)
			msgs[n] = reads[n]
			msgs[n].Buf = b
		}
		return n, nil
	}
	r := newReader(w.e, recv, 4)
	tr := r.trains[0]
	if _, err := r.once(); err != nil {
		t.Fatal(err)
	}
	lone.release()
	if r.trains[0] == tr {
		t.Fatal("the reader kept reading into a train its segments still use")
	}
	if got := tr.refs.Load(); got != 3 {
		t.Fatalf("train held by %d packets, want 3", got)
	}
	if s := w.q.sh; len(s.in) != 4 || s.in[3].train != nil || s.in[3].buf == nil {
		t.Fatalf("queued %d packets; the lone datagram must be copied out", len(s.in))
	}
	out := w.step()
	if tr.refs.Load() != 0 {
		t.Fatalf("train still held by %d packets after the step", tr.refs.Load())
	}
	if n := w.e.cfg.Stats.ICRCErrors.Load(); n != 1 {
		t.Fatalf("%d ICRC errors, want the corrupt segment's", n)
	}
	if n := w.e.cfg.Stats.RxTrains.Load(); n != 1 || w.e.cfg.Stats.RxTrainSegments.Load() != 3 {
		t.Fatalf("counted %d trains, %d segments", n, w.e.cfg.Stats.RxTrainSegments.Load())
	}
	wcs := w.wcs(w.rcq)
	if len(wcs) != 2 {
		t.Fatalf("%d receive completions, want 2 (first segment, then the lone resend)", len(wcs))
	}
	if len(out) == 0 {
		t.Fatal("no ACK or NAK emitted")
	}
}
