package gsi

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/roce"
)

// openPair opens roce devices with QP1 on 127.0.0.1 and 127.0.0.2, one UDP
// port, or skips.
func openPair(t *testing.T) (da, db *roce.Device, ca, cb *Conn) {
	t.Helper()
	for range 20 {
		port := uint16(20000 + rand.IntN(40000))
		d1, c1, err := Open(netip.MustParseAddr("127.0.0.1"), port)
		if err != nil {
			continue
		}
		d2, c2, err := Open(netip.MustParseAddr("127.0.0.2"), port)
		if err != nil {
			d1.Close()
			continue
		}
		t.Cleanup(func() { d2.Close(); d1.Close() })
		return d1, d2, c1, c2
	}
	t.Skip("no free UDP port on 127.0.0.1 and 127.0.0.2")
	return nil, nil, nil, nil
}

// rcEnd is one side's verbs for a burst: a PD and a CQ its QPs share.
type rcEnd struct {
	dev *roce.Device
	pd  *roce.PD
	cq  *roce.CQ
}

func newRCEnd(t *testing.T, dev *roce.Device, qps int) *rcEnd {
	t.Helper()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := dev.CreateCQ(2 * qps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cq.Close(); pd.Close() })
	return &rcEnd{dev: dev, pd: pd, cq: cq}
}

// qp creates an RC QP in INIT and the ConnParam that moves it to RTS when the
// CM calls Ready, as rdma_create_qp and rdma_accept/rdma_connect do (cmtime's
// QPs: one WR each way).
func (e *rcEnd) qp() (*roce.QP, cm.ConnParam, error) {
	qp, err := e.pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: roce.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		return nil, cm.ConnParam{}, err
	}
	if err := qp.Init(&roce.ConnectAttr{}); err != nil {
		qp.Close()
		return nil, cm.ConnParam{}, err
	}
	ready := func(q cm.QPParams) error {
		a := ConnectAttr(q, e.dev.GIDIndex(), 0)
		return qp.Connect(&a)
	}
	return qp, cm.ConnParam{QPN: qp.QPN(), StartingPSN: cm.RandomPSN(), Ready: ready}, nil
}

// TestConnectionBurst: one peer opens burst RC connections at once, as cmtime
// or an MPI job start does, through two CMs with their defaults (ManagerConfig
// zero, Listen's default backlog) on loopback. Every connection is made and torn
// down, and none is refused, dropped or made to wait for a retransmission: the
// pending caps hold back only a peer whose RTUs do not come. The CM response
// timeout is raised to code 23 (≈ 34 s) so that a loaded host cannot make a REQ
// or REP look lost; at the default (≈ 4.3 s, 6.4 s with the packet lifetimes)
// the run takes a fraction of that, which the log shows.
func TestConnectionBurst(t *testing.T) {
	const burst = 500
	da, db, ca, cb := openPair(t)
	client := cm.NewManager(ca, cm.ManagerConfig{CMResponseTimeout: 23})
	server := cm.NewManager(cb, cm.ManagerConfig{CMResponseTimeout: 23})
	defer client.Close()
	defer server.Close()
	ec, es := newRCEnd(t, da, burst), newRCEnd(t, db, burst)
	l, err := server.Listen(netip.AddrPortFrom(db.Addr(), 7471), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The server: cmtime's, a goroutine per request (rdma_create_qp, rdma_accept).
	accepted := make(chan *cm.Conn, burst)
	serr := make(chan error, burst)
	var swg sync.WaitGroup
	swg.Add(1)
	go func() {
		defer swg.Done()
		for range burst {
			r, err := l.GetRequest(ctx)
			if err != nil {
				serr <- err
				return
			}
			swg.Add(1)
			go func() {
				defer swg.Done()
				qp, p, err := es.qp()
				if err != nil {
					r.Reject(nil)
					serr <- err
					return
				}
				defer qp.Close()
				c, err := r.Accept(ctx, p)
				if err != nil {
					serr <- err
					return
				}
				accepted <- c
				<-c.Done() // the client's DREQ
			}()
		}
	}()

	start := time.Now()
	conns := make([]*cm.Conn, burst)
	qps := make([]*roce.QP, burst)
	errs := make(chan error, burst)
	var cwg sync.WaitGroup
	for i := range burst {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			qp, p, err := ec.qp()
			if err != nil {
				errs <- err
				return
			}
			qps[i] = qp
			if conns[i], err = client.Dial(ctx, netip.AddrPort{}, netip.AddrPortFrom(db.Addr(), 7471), p); err != nil {
				errs <- fmt.Errorf("connection %d: %w", i, err)
			}
		}()
	}
	cwg.Wait()
	for range burst {
		select {
		case <-accepted:
		case err := <-serr:
			t.Fatalf("server: %v", err)
		case err := <-errs:
			t.Fatalf("client: %v", err)
		}
	}
	connected := time.Since(start)
	for i := range burst {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			if err := conns[i].Disconnect(ctx); err != nil {
				errs <- fmt.Errorf("disconnect %d: %w", i, err)
			}
			qps[i].Close()
		}()
	}
	cwg.Wait()
	swg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := time.Since(start)
	cs, ss := client.Stats(), server.Stats()
	t.Logf("%d connections from one peer: connected in %v (%.0f/s), torn down after %v; server CM %+v; QP1 %+v / %+v",
		burst, connected.Round(time.Millisecond), burst/connected.Seconds(), total.Round(time.Millisecond), ss, ca.Stats(), cb.Stats())
	if ss.Refused+ss.Discarded != 0 || ss.Retransmits+cs.Retransmits != 0 || ss.REPs != burst {
		t.Errorf("server refused %d and discarded %d REQs, sent %d REPs (want %d); %d REQ/REP/DREQ retransmissions",
			ss.Refused, ss.Discarded, ss.REPs, burst, ss.Retransmits+cs.Retransmits)
	}
	if o := ca.Stats().Overflow + cb.Stats().Overflow; o != 0 {
		t.Errorf("%d MADs dropped on QP1 for a slow CM", o)
	}
	if p := server.Pending(); p != 0 {
		t.Errorf("%d connections still pending", p)
	}
}
