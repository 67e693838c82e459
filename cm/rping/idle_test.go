package rping

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// firstWrite closes pinged at its first Write.
type firstWrite struct {
	once   sync.Once
	pinged chan struct{}
}

func (w *firstWrite) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.pinged) })
	return len(b), nil
}

// TestServerEndsWhenClientVanishes: a client that dies mid-run without a DREQ
// (kill -9 of a user-space client) ends the server's connection within the
// idle limit, although rping's retry_cnt 7 retries forever, and the server's
// QP, CQ, MR and PD are gone. In virtual time.
func TestServerEndsWhenClientVanishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = 5 * time.Second
		p := newPair(t) // closed by its cleanup, inside the bubble
		devA, devB, mgrA, mgrB := p.devA, p.devB, p.mgrA, p.mgrB

		l, err := mgrB.Listen(netip.MustParseAddrPort("10.0.0.2:7174"), 0)
		if err != nil {
			t.Fatal(err)
		}
		pings := &firstWrite{pinged: make(chan struct{})}
		served := make(chan error, 1)
		go func() {
			r, err := l.GetRequest(context.Background())
			if err == nil {
				err = ServeConn(context.Background(), devB, r, Options{Verbose: true, Out: pings, Idle: idle})
			}
			served <- err
		}()
		clientDone := make(chan error, 1)
		go func() {
			clientDone <- Client(context.Background(), devA, mgrA, netip.AddrPort{}, netip.MustParseAddrPort("10.0.0.2:7174"), Options{})
		}()
		<-pings.pinged // the run is under way
		// The client vanishes as a kill -9 makes it vanish: its wire goes
		// silent at once, so nothing it does afterwards (no DREQ, no NAK from
		// a cleanup that deregisters its buffers) reaches the server; then its
		// CM and device are torn down.
		p.wireA.Close()
		mgrA.Close()
		devA.Close()
		<-clientDone
		died := time.Now()

		select {
		case err := <-served:
			if !errors.Is(err, ErrIdle) {
				t.Fatalf("server returned %v, want ErrIdle", err)
			}
		case <-time.After(time.Hour):
			t.Fatal("the server still serves the dead client after an hour")
		}
		if took := time.Since(died); took > idle+time.Second {
			t.Errorf("the connection ended %v after the client died; the idle limit is %v", took, idle)
		}
		if qps := devB.QPs(); len(qps) != 0 {
			t.Errorf("server QPs left: %+v", qps)
		}
		if o := devB.QueueOccupancy(); o.CQs != 0 {
			t.Errorf("server CQs left: %+v", o)
		}
		if n := devB.Stats().Retransmits; n > 10 {
			t.Errorf("%d retransmissions to the dead client", n)
		}
		l.Close()
	})
}
