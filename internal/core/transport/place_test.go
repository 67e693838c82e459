package transport

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// TestWritePlacedWhileChecked: a WRITE's MIDDLE and LAST packets are placed
// while their ICRC is checked (responder.placeTarget). A corrupted MIDDLE is
// an ICRC error and nothing more: no ACK or NAK, the responder still expects
// its PSN, and the bytes it placed are its own message's, which the good
// packet of that PSN writes again. A packet from another source, or one
// ahead of the expected PSN, places nothing.
func TestWritePlacedWhileChecked(t *testing.T) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite})
	p := int(w.q.pmtu)
	mr := w.mem.reg(1, make([]byte, 3*p), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	src := make([]byte, 3*p)
	for i := range src {
		src[i] = byte(i*7+i>>8) | 1 // never 0, nor stray's 0xEE
	}
	stray := filled(p, 0xEE)
	base := wireRQPSN
	mid := bth.Fields{Opcode: bth.RCWriteMiddle, PSN: base.Add(1)}

	first := bth.Fields{Opcode: bth.RCWriteFirst, PSN: base, RETH: bth.RETH{VA: mr.Addr, RKey: mr.RKey, DMALen: uint32(3 * p)}}
	if out := w.feed(first, src[:p]); len(out) != 0 {
		t.Fatalf("FIRST: emitted %s", pktsString(out))
	}

	bad := w.packet(mid, src[p:2*p])
	bad.buf[bad.n-bth.ICRCLen-10] ^= 0xFF // a payload byte
	if out := w.deliver(bad); len(out) != 0 {
		t.Fatalf("corrupted MIDDLE: emitted %s", pktsString(out))
	}
	if st := w.e.Stats().Snapshot(); st.ICRCErrors != 1 || st.RcvdPackets[ClassWrite] != 1 {
		t.Fatalf("corrupted MIDDLE: ICRC errors %d, WRITE packets counted %d; want 1 and 1 (the FIRST)", st.ICRCErrors, st.RcvdPackets[ClassWrite])
	}
	if w.q.resp.psn != base.Add(1) || w.q.resp.woff != uint32(p) {
		t.Fatalf("corrupted MIDDLE moved the responder: PSN %v, offset %d", w.q.resp.psn, w.q.resp.woff)
	}
	if got := mr.Buf[2*p-10]; got != src[2*p-10]^0xFF {
		t.Fatalf("corrupted MIDDLE was not placed while checked: byte %#x, want the corrupted %#x", got, src[2*p-10]^0xFF)
	}

	w.peer = netip.MustParseAddrPort("10.0.0.3:4791")
	if out := w.feed(mid, stray); len(out) != 0 {
		t.Fatalf("MIDDLE from another source: emitted %s", pktsString(out))
	}
	w.peer = addrB
	ahead := mid
	ahead.PSN = base.Add(2) // a MIDDLE of the right length, a PSN early
	if out := w.feed(ahead, stray); len(out) != 1 || out[0].AETH().Syndrome != bth.NAKSyndrome(bth.NAKPSNSeqErr) {
		t.Fatalf("MIDDLE ahead of the expected PSN: emitted %s, want one sequence NAK", pktsString(out))
	}
	if bytes.IndexByte(mr.Buf, 0xEE) >= 0 {
		t.Fatal("a packet the responder refused placed bytes")
	}
	if st := w.e.Stats().Snapshot(); st.BadSource != 1 || st.OutOfSequence != 1 {
		t.Fatalf("bad source %d, out of sequence %d; want 1 and 1", st.BadSource, st.OutOfSequence)
	}

	if out := w.feed(mid, src[p:2*p]); len(out) != 0 {
		t.Fatalf("MIDDLE: emitted %s", pktsString(out))
	}
	last := bth.Fields{Opcode: bth.RCWriteLast, PSN: base.Add(2), AckReq: true}
	if out := w.feed(last, src[2*p:]); len(out) != 1 || out[0].Opcode() != bth.RCAck || out[0].PSN() != base.Add(2) {
		t.Fatalf("LAST: emitted %s, want the ACK of its PSN", pktsString(out))
	}
	if !bytes.Equal(mr.Buf, src) {
		t.Fatal("the WRITE's target differs from what was sent")
	}
}

// TestSendPlacedWhileChecked: a SEND's MIDDLE and LAST payloads are placed
// in the receive WR while their ICRC is checked when their bytes lie in one
// SGE; a corrupted MIDDLE is an ICRC error and nothing more; a packet whose
// bytes straddle two SGEs is checked, then scattered. The message arrives
// whole either way.
func TestSendPlacedWhileChecked(t *testing.T) {
	w := newWire(t, verbs.QPTypeRC, rcOpts{})
	p := int(w.q.pmtu)
	buf := w.mem.reg(1, make([]byte, 3*p+64), verbs.AccessLocalWrite)
	// one SGE for the first two packets, the third split across two
	w.recv(verbs.RecvWR{WRID: 7, SGL: []verbs.SGE{buf.sge(0, 2*p+100), buf.sge(2*p+164, p-100)}})
	src := make([]byte, 3*p)
	for i := range src {
		src[i] = byte(i*5+i>>8) | 1
	}
	base := wireRQPSN
	if out := w.feed(bth.Fields{Opcode: bth.RCSendFirst, PSN: base}, src[:p]); len(out) != 0 {
		t.Fatalf("FIRST: emitted %s", pktsString(out))
	}
	mid := bth.Fields{Opcode: bth.RCSendMiddle, PSN: base.Add(1)}
	bad := w.packet(mid, src[p:2*p])
	bad.buf[bad.n-bth.ICRCLen-10] ^= 0xFF
	if out := w.deliver(bad); len(out) != 0 {
		t.Fatalf("corrupted MIDDLE: emitted %s", pktsString(out))
	}
	if st := w.e.Stats().Snapshot(); st.ICRCErrors != 1 || w.q.resp.psn != base.Add(1) || w.q.resp.off != uint32(p) {
		t.Fatalf("corrupted MIDDLE: ICRC errors %d, PSN %v, offset %d", st.ICRCErrors, w.q.resp.psn, w.q.resp.off)
	}
	if got := buf.Buf[2*p-10]; got != src[2*p-10]^0xFF {
		t.Fatalf("corrupted MIDDLE was not placed while checked: byte %#x, want the corrupted %#x", got, src[2*p-10]^0xFF)
	}
	if out := w.feed(mid, src[p:2*p]); len(out) != 0 {
		t.Fatalf("MIDDLE: emitted %s", pktsString(out))
	}
	last := bth.Fields{Opcode: bth.RCSendLast, PSN: base.Add(2), AckReq: true}
	if pkt, _ := bth.Parse(bth.Append(nil, &bth.Fields{Opcode: bth.RCSendLast, PSN: base.Add(2), DestQP: w.q.qpn, PKey: 0xFFFF}, src[2*p:])); w.q.resp.placeTarget(&pkt) != nil {
		t.Fatal("a LAST across two SGEs has one place")
	}
	if out := w.feed(last, src[2*p:]); len(out) != 1 || out[0].Opcode() != bth.RCAck {
		t.Fatalf("LAST: emitted %s, want an ACK", pktsString(out))
	}
	wcs := w.wcs(w.rcq)
	if len(wcs) != 1 || wcs[0].Status != verbs.WCSuccess || wcs[0].WRID != 7 || wcs[0].ByteLen != uint32(3*p) {
		t.Fatalf("completions %v, want WR 7 with %d bytes", wcs, 3*p)
	}
	got := append(append([]byte{}, buf.Buf[:2*p+100]...), buf.Buf[2*p+164:3*p+64]...)
	if !bytes.Equal(got, src) {
		t.Fatal("the receive buffer differs from what was sent")
	}
}
