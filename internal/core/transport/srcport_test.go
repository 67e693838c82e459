package transport

import (
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// portWatch records the UDP source port of every datagram read, by
// opcode byte.
type portWatch struct {
	link.Link
	mu    sync.Mutex
	ports map[uint16]int
}

func (w *portWatch) ReadBatch(msgs []link.Message) (int, error) {
	n, err := w.Link.ReadBatch(msgs)
	w.mu.Lock()
	for _, m := range msgs[:n] {
		w.ports[m.Addr.Port()]++
	}
	w.mu.Unlock()
	return n, err
}

func (w *portWatch) seen() map[uint16]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[uint16]int{}
	for k, v := range w.ports {
		out[k] = v
	}
	return out
}

// grantLink grants only the ports in ok.
type grantLink struct {
	link.Link
	ok map[uint16]bool
}

func (g *grantLink) SourcePort(p uint16) bool { return g.ok[p] && g.Link.SourcePort(p) }

// TestQPSourcePort: an RC QP's packets leave from rxe's
// rdma_get_udp_sport(0, lqpn, rqpn), a UD QP's from 0xC000 + hash_32(qpn, 14),
// both directions and ACKs included, and the receiver verifies their ICRC
// (which covers the port). A QP whose port the link refuses sends from the
// link's own port, and still works.
func TestQPSourcePort(t *testing.T) {
	la, lb := link.Pipe(addrA, addrB)
	wa := &portWatch{Link: la, ports: map[uint16]int{}}
	wb := &portWatch{Link: lb, ports: map[uint16]int{}}
	a := newNode(t, wa, 2)
	b := newNode(t, &grantLink{Link: wb, ok: map[uint16]bool{}}, 2) // b grants nothing
	defer a.close(t)
	defer b.close(t)
	qa, qb := rcPair(t, a, b, rcOpts{})
	src := a.mem.reg(1, pattern(64, 2), verbs.AccessLocalWrite)
	dst := b.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if _, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 64)},
		RemoteAddr: dst.Addr, RKey: dst.RKey}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, a.scq, 1, 5*time.Second)
	rcA := bth.ConnectedSourcePort(0, qa.QPN(), qb.QPN())
	if got := wb.seen(); got[rcA] == 0 || len(got) != 1 {
		t.Errorf("b received from ports %v, want only %d (rdma_get_udp_sport)", got, rcA)
	}
	if got := wa.seen(); got[addrB.Port()] == 0 || len(got) != 1 {
		t.Errorf("a received ACKs from ports %v, want b's own %d (b grants no port)", got, addrB.Port())
	}
	for _, in := range a.e.QPs() {
		if in.QPN == qa.QPN() && in.SrcPort != rcA {
			t.Errorf("QPInfo.SrcPort %d, want %d", in.SrcPort, rcA)
		}
	}

	ua, ub := udQP(t, a, 9), udQP(t, b, 9)
	buf := b.mem.reg(1, make([]byte, grhLen+8), verbs.AccessLocalWrite)
	if _, err := ub.PostRecv([]verbs.RecvWR{{WRID: 5, SGL: []verbs.SGE{buf.sge(0, grhLen+8)}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := ua.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 8)},
		AH: &verbs.AddressVector{DGID: b.addr}, RemoteQPN: ub.QPN(), RemoteQKey: 9}}); err != nil {
		t.Fatal(err)
	}
	waitWC(t, b.rcq, 1, 5*time.Second)
	if got := wb.seen(); got[bth.QPSourcePort(ua.QPN())] != 1 {
		t.Errorf("b received from ports %v, want one datagram from %d (UD)", got, bth.QPSourcePort(ua.QPN()))
	}
	if s := b.e.Stats(); s.ICRCErrors.Load() != 0 {
		t.Errorf("%d ICRC errors", s.ICRCErrors.Load())
	}
}

// refuseLink refuses the ports in no (set while the test runs), as a link
// whose ports other sockets hold: another process sharing the address.
type refuseLink struct {
	link.Link
	mu sync.Mutex
	no map[uint16]bool
}

func (r *refuseLink) SourcePort(p uint16) bool {
	r.mu.Lock()
	taken := r.no[p]
	r.mu.Unlock()
	return !taken && r.Link.SourcePort(p)
}

func (r *refuseLink) refuse(ports ...uint16) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range ports {
		r.no[p] = true
	}
}

// TestQPSourcePortTaken: when another socket holds rxe's port of a connected
// QP, the QP sends from the next port of rxe's range that the link grants
// (at most sourcePortProbes tried), and only when all are taken from the
// link's own port; a port the address vector names is not moved.
func TestQPSourcePortTaken(t *testing.T) {
	for _, c := range []struct {
		name     string
		taken    int    // rxe's port and the ones after it that are taken
		explicit uint16 // the address vector's SrcPort, taken
		want     func(rxe uint16) uint16
	}{
		{"free", 0, 0, func(p uint16) uint16 { return p }},
		{"rxe's taken", 1, 0, func(p uint16) uint16 { return nextSourcePort(p) }},
		{"three taken", 3, 0, func(p uint16) uint16 { return nextSourcePort(nextSourcePort(nextSourcePort(p))) }},
		{"all probes taken", sourcePortProbes, 0, func(uint16) uint16 { return addrA.Port() }},
		{"explicit port taken", 0, 0xD000, func(uint16) uint16 { return addrA.Port() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			la, lb := link.Pipe(addrA, addrB)
			ra := &refuseLink{Link: la, no: map[uint16]bool{}}
			wb := &portWatch{Link: lb, ports: map[uint16]int{}}
			a, b := newNode(t, ra, 1), newNode(t, wb, 1)
			defer a.close(t)
			defer b.close(t)
			qa, qb := a.createQP(t, verbs.QPTypeRC, rcOpts{}), b.createQP(t, verbs.QPTypeRC, rcOpts{})
			rxe := bth.ConnectedSourcePort(0, qa.QPN(), qb.QPN())
			for i, p := 0, rxe; i < c.taken; i, p = i+1, nextSourcePort(p) {
				ra.refuse(p)
			}
			ra.refuse(c.explicit)
			connect(t, qa, b.addr, qb.QPN(), rcOpts{srcPort: c.explicit})
			connect(t, qb, a.addr, qa.QPN(), rcOpts{})
			src := a.mem.reg(1, pattern(64, 3), verbs.AccessLocalWrite)
			dst := b.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			if _, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{src.sge(0, 64)}, RemoteAddr: dst.Addr, RKey: dst.RKey}}); err != nil {
				t.Fatal(err)
			}
			waitWC(t, a.scq, 1, 5*time.Second)
			want := c.want(rxe)
			if got := wb.seen(); got[want] == 0 || len(got) != 1 {
				t.Errorf("b received from ports %v, want only %d (rxe's %d)", got, want, rxe)
			}
		})
	}
}

// TestNextSourcePort: the probe order stays in rxe's range and wraps.
func TestNextSourcePort(t *testing.T) {
	for _, c := range []struct{ p, want uint16 }{
		{0xC000, 0xC001}, {0xC01C, 0xC01D}, {0xFFFE, 0xFFFF}, {0xFFFF, 0xC000}, {4791, 0xC000},
	} {
		if got := nextSourcePort(c.p); got != c.want {
			t.Errorf("nextSourcePort(%#x) = %#x, want %#x", c.p, got, c.want)
		}
	}
}
