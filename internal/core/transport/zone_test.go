package transport

import (
	"bytes"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
)

// TestLinkLocalZone runs RC and UD over IPv6 link-local addresses whose
// received source carries the interface zone (fe80::1%br0, as a UDP socket
// reports it) while the address vectors name the peer without one: every
// packet must still be accepted.
func TestLinkLocalZone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		la, lb := link.Pipe(netip.MustParseAddrPort("[fe80::1%br0]:4791"), netip.MustParseAddrPort("[fe80::2%br0]:4791"))
		a, b := newNode(t, la, 2), newNode(t, lb, 2)
		defer a.close(t)
		defer b.close(t)
		a.addr, b.addr = a.addr.WithZone(""), b.addr.WithZone("")
		qa, qb := rcPair(t, a, b, rcOpts{})
		for i, op := range allOps {
			transfer(t, a, b, qa, qb, op, 3000, uint64(i+1), time.Second)
		}
		if m := a.e.Stats().Malformed.Load() + b.e.Stats().Malformed.Load(); m != 0 {
			t.Fatalf("%d packets counted malformed", m)
		}
		ua, ub := udQP(t, a, 7), udQP(t, b, 7)
		src := a.mem.reg(1, pattern(512, 9), verbs.AccessLocalWrite)
		dst := b.mem.reg(1, make([]byte, grhLen+512), verbs.AccessLocalWrite)
		ub.PostRecv([]verbs.RecvWR{{WRID: 5, SGL: []verbs.SGE{dst.sge(0, grhLen+512)}}})
		wr := verbs.SendWR{WRID: 6, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 512)},
			AH: &verbs.AddressVector{DGID: b.addr}, RemoteQPN: ub.QPN(), RemoteQKey: 7}
		if _, err := ua.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		if w := waitWC(t, b.rcq, 1, time.Second)[0]; w.Status != verbs.WCSuccess || w.ByteLen != grhLen+512 {
			t.Fatalf("UD recv %s", wcString(w))
		}
		ub.Query()
		if !bytes.Equal(dst.Buf[grhLen:], src.Buf) || !bytes.Equal(dst.Buf[8:24], a.addr.AsSlice()) {
			t.Fatalf("UD payload or GRH source differs: % x", dst.Buf[:40])
		}
	})
}
