package rping

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/roce"
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

// TestServerEndsAtOnceAfterAFailedCompletion: a client whose RDMA stack still
// answers while its CM is already gone (a process torn down piecemeal, its
// buffers deregistered before its CM's DREP could leave) makes the server's
// work request fail. The server ends the connection at once with that failed
// completion, not after Options.Timeout waiting for a DREP that nobody sends;
// roced counts such a session as an error end and frees its slot. In virtual
// time.
func TestServerEndsAtOnceAfterAFailedCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 30 * time.Second
		p := newPair(t)
		srv := netip.MustParseAddrPort("10.0.0.2:7174")
		l, err := p.mgrB.Listen(srv, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		served := make(chan error, 1)
		go func() {
			r, err := l.GetRequest(context.Background())
			if err == nil {
				err = ServeConn(context.Background(), p.devB, r, Options{Timeout: timeout})
			}
			served <- err
		}()

		// The client, by hand: connect, lose the CM, then advertise its start
		// buffer with a wrong rkey so the server's RDMA READ is NAKed.
		o := Options{}
		if err := o.defaults(); err != nil {
			t.Fatal(err)
		}
		c, err := newPinger(&o, p.devA, false)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		if c.conn, err = p.mgrA.Dial(context.Background(), netip.AddrPort{}, srv, c.connParam()); err != nil {
			t.Fatal(err)
		}
		// The CM goes without a word: its QP1 first, so the DREQ that
		// Manager.Close sends for an established connection cannot leave.
		p.madA.Close()
		p.mgrA.Close()
		rdmaInfo{Addr: c.mr.Addr() + offStart, RKey: c.mr.RKey() + 1, Size: 64}.put(c.mem[offSend:])
		if err := c.post(roce.SendWR{WRID: 2, Opcode: roce.WRSend, SGL: []roce.SGE{c.sge(offSend, infoLen)}}); err != nil {
			t.Fatal(err)
		}
		sent := time.Now()

		select {
		case err := <-served:
			var failed completionError
			if !errors.As(err, &failed) || roce.WCStatus(failed) != roce.WCRemAccessErr {
				t.Fatalf("server returned %v, want the READ's remote access error", err)
			}
		case <-time.After(time.Hour):
			t.Fatal("the server still serves after an hour")
		}
		// The NAK takes one round trip on the pipe, which costs no virtual
		// time; waiting for the DREP would cost the whole timeout.
		if took := time.Since(sent); took >= timeout {
			t.Errorf("the connection ended %v after the failed READ; it waited for the DREP (timeout %v)", took, timeout)
		}
		if qps := p.devB.QPs(); len(qps) != 0 {
			t.Errorf("server QPs left: %+v", qps)
		}
	})
}
