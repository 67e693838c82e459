package transport

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// wholeLink is a noLink that delivers trains whole to every destination but
// 192.0.2.2 (link.WholeTrainer).
type wholeLink struct{ noLink }

func (wholeLink) WholeTrains(dst netip.Addr) bool { return dst != netip.MustParseAddr("192.0.2.2") }

// TestAckBehind: which ACKs ride at the end of the train after them. Each
// packet is "kind.dst.size[.tos]": kind A an ACK, S a SEND (a request), R a
// READ response; dst x delivers trains whole, y does not. The result is the
// kinds in the order they leave, trains in brackets.
func TestAckBehind(t *testing.T) {
	tests := []struct {
		name, out, want string
		plain           bool // a link that cannot tell (no WholeTrainer)
		rides           uint64
	}{
		{"the ACK rides behind the reply", "A.x.20 S.x.80", "[S A]", false, 1},
		{"behind a train of requests", "A.x.20 S.x.80 S.x.80 S.x.80", "[S S S A]", false, 1},
		{"a link that cannot tell", "A.x.20 S.x.80", "[A] [S]", true, 0},
		{"a destination that may split trains", "A.y.20 S.y.80", "[A] [S]", false, 0},
		{"another destination", "A.x.20 S.y.80", "[A] [S]", false, 0},
		{"not behind responses", "A.x.20 R.x.80", "[A] [R]", false, 0},
		{"not behind a shorter last packet", "A.x.20 S.x.80 S.x.40", "[A] [S S]", false, 0},
		{"ACKs that coalesce stay a train", "A.x.20 A.x.20 S.x.80", "[A A] [S]", false, 0},
		{"a later ACK of the flow keeps its place", "A.x.20 S.x.80 A.x.20", "[A] [S A]", false, 0},
		{"Not-ECT beside ECT(0) rides", "A.x.20.0 S.x.80.2", "[S A]", false, 1},
		{"another DSCP does not", "A.x.20.0 S.x.80.6", "[A] [S]", false, 0},
		{"more than one GSO datagram holds", "A.x.20" + strings.Repeat(" S.x.1040", 62), "[A] [" + strings.TrimSpace(strings.Repeat("S ", 62)) + "]", false, 0},
		{"exactly one GSO datagram", "A.x.20" + strings.Repeat(" S.x.1040", 61), "[" + strings.Repeat("S ", 61) + "A]", false, 1},
	}
	kinds := map[string]bth.Opcode{"A": bth.RCAck, "S": bth.RCSendOnly, "R": bth.RCReadResponseOnly}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var l link.Link = wholeLink{noLink{t}}
			if tc.plain {
				l = noLink{t}
			}
			e := idleEngine(t, l)
			s := e.shards[0]
			q := &QP{e: e, sh: s}
			for _, f := range strings.Fields(tc.out) {
				var kind, d string
				var n, tos int
				fmt.Sscanf(f, "%1s.%1s.%d.%d", &kind, &d, &n, &tos)
				dst := netip.MustParseAddr("192.0.2.1")
				if d == "y" {
					dst = netip.MustParseAddr("192.0.2.2")
				}
				buf := new([link.MaxDatagram]byte)
				buf[0] = byte(kinds[kind])
				binary.BigEndian.PutUint32(buf[4:], 0x11) // DestQP
				s.out = append(s.out, txPacket{q: q, dst: dst, n: n, tos: uint8(tos), buf: buf})
			}
			var got []string
			for i := 0; i < len(s.out); {
				s.ackBehind(i, len(s.out))
				j := s.trainEnd(i, len(s.out))
				var train []string
				for _, p := range s.out[i:j] {
					for k, op := range kinds {
						if bth.Opcode(p.buf[0]) == op {
							train = append(train, k)
						}
					}
					if p.tos != s.out[i].tos {
						t.Errorf("a train of TOS %#x carries a packet of %#x", s.out[i].tos, p.tos)
					}
				}
				got = append(got, "["+strings.Join(train, " ")+"]")
				i = j
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Fatalf("left as %s, want %s", g, tc.want)
			}
			if n := e.cfg.Stats.TxTrailingACKs.Load(); n != tc.rides {
				t.Fatalf("counted %d trailing ACKs, want %d", n, tc.rides)
			}
		})
	}
}

// TestReaderHandsResponsesFirst: a batch's responses reach their QP before
// its requests, a train's trailing ACK before the train's other segments,
// and responses never overtake one another: one behind a train that carries
// responses stays behind it.
func TestReaderHandsResponsesFirst(t *testing.T) {
	tests := []struct {
		name  string
		gro   bool
		batch [][]bth.Opcode // a message each: one packet, or a train
		want  []bth.Opcode
	}{
		{"a train's trailing ACK first", true,
			[][]bth.Opcode{{bth.RCSendOnly, bth.RCAck}},
			[]bth.Opcode{bth.RCAck, bth.RCSendOnly}},
		{"lone datagrams: responses ahead of requests, in their order", false,
			[][]bth.Opcode{{bth.RCSendOnly}, {bth.RCReadResponseOnly}, {bth.RCSendOnly}, {bth.RCAck}},
			[]bth.Opcode{bth.RCReadResponseOnly, bth.RCAck, bth.RCSendOnly, bth.RCSendOnly}},
		{"with GRO, lone ones too", true,
			[][]bth.Opcode{{bth.RCSendOnly}, {bth.RCAck}},
			[]bth.Opcode{bth.RCAck, bth.RCSendOnly}},
		{"a trailing ACK and a later lone one keep their order", true,
			[][]bth.Opcode{{bth.RCSendOnly, bth.RCAck}, {bth.RCSendOnly}, {bth.RCAck}},
			[]bth.Opcode{bth.RCAck, bth.RCAck, bth.RCSendOnly, bth.RCSendOnly}},
		{"nothing overtakes a train of responses", true,
			[][]bth.Opcode{{bth.RCSendOnly}, {bth.RCReadResponseMiddle, bth.RCReadResponseMiddle}, {bth.RCAck}},
			[]bth.Opcode{bth.RCSendOnly, bth.RCReadResponseMiddle, bth.RCReadResponseMiddle, bth.RCAck}},
		{"a train of responses ending in an ACK", true,
			[][]bth.Opcode{{bth.RCReadResponseMiddle, bth.RCReadResponseMiddle, bth.RCAck}},
			[]bth.Opcode{bth.RCAck, bth.RCReadResponseMiddle, bth.RCReadResponseMiddle}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWire(t, verbs.QPTypeRC, rcOpts{})
			w.e.offloads.GRO = tc.gro
			var reads []link.Message
			for _, ops := range tc.batch {
				var m link.Message
				for i, op := range ops {
					f := bth.Fields{Opcode: op, PKey: 0xFFFF, DestQP: w.q.qpn}
					pay := 64
					if op == bth.RCAck {
						pay = 0
					}
					p := bth.Append(nil, &f, make([]byte, pay))
					p = append(p, 0, 0, 0, 0) // ICRC: not checked on the way to the shard
					if i == 0 {
						m.SegSize = len(p)
					}
					m.Buf = append(m.Buf, p...)
				}
				if len(ops) == 1 {
					m.SegSize = 0
				}
				m.Addr, m.Local = w.peer, addrA.Addr()
				reads = append(reads, m)
			}
			recv := func(msgs []link.Message) (int, error) {
				n := min(len(msgs), len(reads))
				for i, m := range reads[:n] {
					b := append(msgs[i].Buf[:0], m.Buf...) // into the reader's buffer
					msgs[i] = m
					msgs[i].Buf = b
				}
				return n, nil
			}
			r := newReader(w.e, recv, 8)
			if _, err := r.once(); err != nil {
				t.Fatal(err)
			}
			var got []bth.Opcode
			for _, it := range w.q.sh.in {
				got = append(got, bth.Opcode(it.bytes()[0]))
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("queued %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTrailingACKKeepsCompletionOrder: over a link that delivers trains
// whole, a busy-polled ping-pong's ACK rides behind the reply in one train,
// and each side still sees its send complete before the reply to it arrives
// (one CQ for both, as a program that takes every event from one channel
// sees them).
func TestTrailingACKKeepsCompletionOrder(t *testing.T) {
	la, lb := link.Pipe(addrA, addrB)
	a, b := newNode(t, la, 1, runToCompletion), newNode(t, lb, 1, runToCompletion)
	defer a.close(t)
	defer b.close(t)
	qa := a.createQP(t, verbs.QPTypeRC, rcOpts{recvCQ: a.scq})
	qb := b.createQP(t, verbs.QPTypeRC, rcOpts{recvCQ: b.scq})
	connect(t, qa, b.addr, qb.QPN(), rcOpts{})
	connect(t, qb, a.addr, qa.QPN(), rcOpts{})
	const rounds = 50
	type side struct {
		n    *node
		q    *QP
		buf  *Region
		seen []string
	}
	sides := []*side{{n: a, q: qa}, {n: b, q: qb}}
	for _, x := range sides {
		x.buf = x.n.mem.reg(1, make([]byte, 128), verbs.AccessLocalWrite)
		for i := range rounds {
			if _, err := x.q.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{x.buf.sge(64, 64)}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send := func(x *side, i int) {
		if _, err := x.q.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{x.buf.sge(0, 64)}}}); err != nil {
			t.Fatal(err)
		}
	}
	// await polls x's CQ until the receive of message i completes.
	await := func(x *side, i int) {
		deadline := time.Now().Add(time.Minute)
		buf := make([]verbs.WC, 8)
		for {
			enginePoll(x.n.scq)
			k, _ := x.n.scq.Poll(buf)
			done := false
			for _, wc := range buf[:k] {
				if wc.Status != verbs.WCSuccess {
					t.Fatalf("completion %s", wcString(wc))
				}
				kind := "send"
				if wc.Opcode == verbs.WCRecv {
					kind = "recv"
				}
				x.seen = append(x.seen, fmt.Sprint(kind, wc.WRID))
				done = done || kind == "recv" && wc.WRID == uint64(i)
			}
			if done {
				return
			}
			if k == 0 && time.Now().After(deadline) {
				t.Fatalf("message %d never arrived; completions %v", i, x.seen)
			}
		}
	}
	for i := range rounds {
		send(sides[0], i)
		await(sides[1], i)
		send(sides[1], i)
		await(sides[0], i)
	}
	// a: each send completes before the reply to it; b: each reply's send
	// before a's next message (its ACK rode in front of that message).
	for _, x := range sides {
		for i, s := range x.seen {
			if strings.HasPrefix(s, "recv") && x == sides[0] {
				if i == 0 || x.seen[i-1] != "send"+s[4:] {
					t.Fatalf("a: %s not right after its send: %v", s, x.seen)
				}
			}
			if strings.HasPrefix(s, "recv") && x == sides[1] && s != "recv0" {
				var k int
				fmt.Sscanf(s, "recv%d", &k)
				if i == 0 || x.seen[i-1] != fmt.Sprint("send", k-1) {
					t.Fatalf("b: %s not right after the previous reply's send: %v", s, x.seen)
				}
			}
		}
	}
	// An ACK rides only if the poller's slice held it: the engine's own
	// reader may take a packet first and acknowledge it at once, more often
	// on a loaded host. TestRunToCompletionTrailingACK covers the exact case.
	rides := a.e.cfg.Stats.TxTrailingACKs.Load() + b.e.cfg.Stats.TxTrailingACKs.Load()
	if rides == 0 {
		t.Errorf("no ACK rode behind a reply in %d round trips", rounds)
	}
	t.Logf("%d of %d ACKs rode behind a reply", rides, 2*rounds-1)
}

// wholeRecLink is a recLink that delivers trains whole (link.WholeTrainer).
type wholeRecLink struct{ *recLink }

func (wholeRecLink) WholeTrains(netip.Addr) bool { return true }

// TestRunToCompletionTrailingACK: the ACK a poller's slice holds leaves
// behind the poller's reply, as the last segment of one train, where the
// link delivers trains whole; elsewhere it leaves first
// (TestRunToCompletionPollHoldsACK).
func TestRunToCompletionTrailingACK(t *testing.T) {
	var reads []link.Message
	w, l := rtcWire(t, &reads)
	w.e.cfg.Link = wholeRecLink{l}
	w.e.whole = wholeRecLink{l}
	rb := w.mem.reg(1, make([]byte, 256), verbs.AccessLocalWrite)
	sb := w.mem.reg(1, pattern(64, 2), verbs.AccessLocalWrite)
	w.recv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{rb.sge(0, 256)}})
	queueSend(w, &reads, wireRQPSN)
	if n := w.e.Poll(); n != 1 || len(l.msgs) != 0 {
		t.Fatalf("Poll read %d messages and wrote %d, want 1 read and the ACK held", n, len(l.msgs))
	}
	w.post(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{sb.sge(0, 64)}})
	if len(l.msgs) != 1 {
		t.Fatalf("the reply and the ACK left as %d messages, want one train", len(l.msgs))
	}
	m := l.msgs[0]
	if m.NumSegments() != 2 || bth.Opcode(m.Segment(0)[0]) != bth.RCSendOnly || bth.Opcode(m.Segment(1)[0]) != bth.RCAck {
		t.Fatalf("train of %d segments, segment size %d; want the reply, then the ACK", m.NumSegments(), m.SegSize)
	}
	env := bth.Envelope{Src: addrA.Addr(), Dst: w.peer.Addr(), DF: true, SrcPort: w.q.srcPort(), DstPort: w.e.port}
	for k := range 2 {
		env.IPID = link.TrainIPv4ID(m.SegSize, k)
		if !bth.CheckICRC(&env, m.Segment(k)) {
			t.Fatalf("segment %d: ICRC wrong for its IPv4 ID in the train", k)
		}
	}
	if n := w.e.cfg.Stats.TxTrailingACKs.Load(); n != 1 {
		t.Fatalf("counted %d trailing ACKs, want 1", n)
	}
}
