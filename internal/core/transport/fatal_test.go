package transport

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
)

// TestLinkGoneIsDeviceFatal: a Link that dies under an open engine is the
// device's catastrophic error. DEVICE_FATAL and PORT_ERR are raised once, every
// QP gets QP_FATAL and goes to ERR with its WRs flushed, and no QP can be
// created any more. Close still works.
func TestLinkGoneIsDeviceFatal(t *testing.T) {
	a, b := pair(t, nil)
	defer a.close(t)
	qa, qb := rcPair(t, a, b, rcOpts{})
	_ = qa
	for i := 0; i < 2; i++ {
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: uint64(10 + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.e.cfg.Link.Close(); err != nil { // the socket goes away underneath
		t.Fatal(err)
	}
	wcs := waitWC(t, b.rcq, 2, 5*time.Second)
	for _, w := range wcs {
		if w.Status != verbs.WCWRFlushErr {
			t.Errorf("receive %s, want WR_FLUSH_ERR", wcString(w))
		}
	}
	if at, _ := qb.Query(); at.State != verbs.QPSErr {
		t.Fatalf("QP after the link died: %v, want ERR", at.State)
	}
	if !b.e.Fatal() {
		t.Fatal("Engine.Fatal() = false")
	}
	for _, want := range []struct {
		typ verbs.EventType
		qpn uint32
	}{{verbs.EventDeviceFatal, 0}, {verbs.EventPortErr, 0}, {verbs.EventQPFatal, qb.QPN()}} {
		if n := b.countEvents(want.typ, want.qpn); n != 1 {
			t.Errorf("%d events of type %d for QPN %#x, want 1", n, want.typ, want.qpn)
		}
	}
	_, err := b.e.CreateQP(&QPInitAttr{Type: verbs.QPTypeRC, SendCQ: b.scq, RecvCQ: b.rcq,
		Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("CreateQP on a fatal device: %v, want EIO", err)
	}
	if a.e.Fatal() {
		t.Fatal("the peer's engine went fatal too")
	}
	b.close(t)
}
