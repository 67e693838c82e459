package roce

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestLinkGoneRaisesDeviceFatalAndSRQErr: when the device's link dies the device
// raises DEVICE_FATAL, every SRQ enters the error state with SRQ_ERR (after which
// every SRQ verb but destroy fails), every QP gets QP_FATAL and goes to ERR, and
// the port goes DOWN with PORT_ERR.
func TestLinkGoneRaisesDeviceFatalAndSRQErr(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	c := must[*CQ](t)(d.CreateCQ(16))
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 4, MaxSGE: 1}}))
	must[int](t)(s.PostRecv([]RecvWR{{WRID: 1}, {WRID: 2}}))
	qp := must[*QP](t)(pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: c, RecvCQ: c, SRQ: s,
		Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}}))
	for range d.Events() { // PORT_ACTIVE from Open
		break
	}
	noErr(t, d.lnk.Close())

	want := map[string]bool{"DEVICE_FATAL": false, "PORT_ERR port 1": false,
		fmt.Sprintf("QP_FATAL qp %#x", qp.QPN()): false, "SRQ_ERR " + s.obj: false}
	deadline := time.After(5 * time.Second)
	for missing := len(want); missing > 0; {
		select {
		case ev := <-d.Events():
			if seen, ok := want[ev.String()]; ok && !seen {
				want[ev.String()] = true
				missing--
			}
		case <-deadline:
			t.Fatalf("events after the link died: %v", want)
		}
	}
	if at, err := qp.Query(); err != nil || at.State != QPSErr {
		t.Errorf("QP after DEVICE_FATAL: %v, %v; want ERR", at.State, err)
	}
	if pa, _ := d.QueryPort(1); pa.State != PortDown {
		t.Errorf("port state %v after PORT_ERR, want DOWN", pa.State)
	}
	_, err1 := s.PostRecv([]RecvWR{{WRID: 3}})
	_, err2 := s.Query()
	err3 := s.Modify(&SRQAttr{Limit: 1}, SRQLimit)
	for i, err := range []error{err1, err2, err3} {
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("SRQ verb %d after SRQ_ERR: %v, want EIO", i, err)
		}
	}
	if _, err := pd.CreateQP(QPInitAttr{Type: QPTypeUD, SendCQ: c, RecvCQ: c,
		Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); !errors.Is(err, syscall.EIO) {
		t.Errorf("CreateQP after DEVICE_FATAL: %v, want EIO", err)
	}
	noErr(t, qp.Close())
	noErr(t, s.Close()) // destroy still works
}
