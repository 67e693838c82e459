package transport

import (
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// corkWire is a wire at a 4096-byte MTU whose posts run the shard on the
// poster's goroutine, as NewEngine's do, and whose link sends trains as GSO
// (15 packets of 4112 bytes to a datagram).
func corkWire(t *testing.T) (*wire, *recLink, *Region) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{mtu: verbs.MTU4096, sendWR: 64})
	l := &recLink{noLink: noLink{t}}
	w.e.cfg.Link, w.e.offloads, w.e.inlinePosts = l, link.Offloads{GSO: true, GRO: true}, true
	return w, l, w.mem.reg(1, pattern(1<<17, 3), verbs.AccessLocalWrite)
}

// sends is n SEND WRs of size bytes each, from WR ID first on.
func sends(mr *Region, first uint64, n, size int) []verbs.SendWR {
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: first + uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{mr.sge(i*size, size)}}
	}
	return wrs
}

// written returns the packets l has been given since the first skip, one per
// GSO segment.
func written(t *testing.T, l *recLink, skip int) []bth.Packet {
	t.Helper()
	var out []bth.Packet
	for _, m := range l.msgs[skip:] {
		for i := range m.NumSegments() {
			p, err := bth.Parse(m.Segment(i))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
	}
	return out
}

// TestCorkedPostSendsWholeDatagrams: a list of WRs posted behind outstanding
// ones sends whole GSO datagrams only, its last packet asking for an ACK
// even inside a message; the rest goes when that ACK arrives.
func TestCorkedPostSendsWholeDatagrams(t *testing.T) {
	w, l, mr := corkWire(t)
	w.post(sends(mr, 1, 1, 4096)...) // nothing outstanding: sent at once
	if got := written(t, l, 0); len(got) != 1 {
		t.Fatalf("the first post wrote %d packets, want 1", len(got))
	}
	// 8 two-packet SENDs: 16 packets, one more than a datagram holds.
	w.post(sends(mr, 2, 8, 8192)...)
	got := written(t, l, 1)
	if len(got) != 15 {
		t.Fatalf("the corked post wrote %d packets, want 15", len(got))
	}
	last := got[14]
	if last.Opcode() != bth.RCSendFirst || !last.AckReq() || last.PSN() != wireSQPSN.Add(15) {
		t.Fatalf("the corked post's last packet: %v PSN %#x AckReq %v, want a SEND FIRST at %#x asking for an ACK",
			last.Opcode(), last.PSN(), last.AckReq(), wireSQPSN.Add(15))
	}
	if len(l.msgs) != 2 {
		t.Fatalf("%d messages written, want one train per post", len(l.msgs))
	}
	rest := w.feed(bth.Fields{Opcode: bth.RCAck, PSN: wireSQPSN.Add(15), AETH: bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid), MSN: 8}}, nil)
	if len(rest) != 1 || rest[0].Opcode() != bth.RCSendLast || rest[0].PSN() != wireSQPSN.Add(16) {
		t.Fatalf("after the ACK the QP emitted %d packets, want the SEND LAST at %#x", len(rest), wireSQPSN.Add(16))
	}
}

// TestCorkOnlyInStreams: a post sends everything when nothing is
// outstanding (a request whose answer the program waits for), when what it
// holds is less than one datagram, and when the link has no GSO.
func TestCorkOnlyInStreams(t *testing.T) {
	tests := []struct {
		name   string
		before int // one-packet SENDs posted first
		n, at  int // then n SENDs of at bytes
		noGSO  bool
		want   int // packets the second post writes
	}{
		{"nothing outstanding", 0, 8, 8192, false, 16},
		{"less than a datagram", 1, 14, 4096, false, 14},
		{"a datagram and one more", 1, 16, 4096, false, 15},
		{"two datagrams exactly", 1, 15, 8192, false, 30},
		{"no GSO", 1, 8, 8192, true, 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, l, mr := corkWire(t)
			if tt.noGSO {
				w.e.offloads.GSO = false
			}
			if tt.before > 0 {
				w.post(sends(mr, 100, tt.before, 4096)...)
			}
			skip := len(l.msgs)
			w.post(sends(mr, 1, tt.n, tt.at)...)
			if got := written(t, l, skip); len(got) != tt.want {
				t.Fatalf("the post wrote %d packets, want %d", len(got), tt.want)
			}
		})
	}
}
