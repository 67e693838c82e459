package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

// With -R perftest connects through rdma_cm twice on -p's port: first an RC QP
// that carries its exchange (a SEND and a RECV per step, the QP records in
// binary), then one connection per test QP; a hand-shake comes before and after
// the test QPs connect. There is no TCP connection and no closing "done".

// cmRetries and cmRetryDelay are how often, and how far apart, a client asks
// again when the server does not listen yet (perftest: 10 times, 100 ms).
const (
	cmRetries    = 10
	cmRetryDelay = 100 * time.Millisecond
)

// openCM opens the device with its GSI agent and a CM on it.
func (s *session) openCM() error {
	dev, mads, err := gsi.Open(s.c.Addr, uint16(s.c.RoCEPort), roce.WithRunToCompletion(true))
	if err != nil {
		return err
	}
	s.dev = dev
	s.Add(dev.Close)
	pa, err := dev.QueryPort(1)
	if err != nil {
		return err
	}
	s.mgr = cm.NewManager(mads, cm.ManagerConfig{CAGUID: gsi.CAGUID(dev), PathMTU: uint8(pa.ActiveMTU), TrafficClass: uint8(s.c.tos)})
	s.Add(s.mgr.Close)
	return nil
}

// cmComm is perftest's exchange QP over rdma_cm: one receive of a record's size
// posted at a time, as perftest's post_one_recv_wqe, and one message each way per
// step, the client's first.
type cmComm struct {
	client  bool
	mr      *roce.MR
	cq      *roce.CQ
	qp      *roce.QP
	buf     []byte // receive buffer, then send buffer
	conn    *cm.Conn
	pending int // receive completions seen while waiting for a send's
}

const commSlot = 64 // the receive half of cmComm.buf; the send half follows

// dialComm connects the exchange QP: to the server on -p's port, or from the
// first client to connect there.
func (s *session) dialComm(ctx context.Context) (*cmComm, error) {
	c := &cmComm{client: s.c.server != "", buf: make([]byte, 2*commSlot)}
	pd, err := s.dev.AllocPD()
	if err != nil {
		return nil, err
	}
	s.Add(pd.Close)
	if c.mr, err = pd.RegMR(c.buf, roce.AccessLocalWrite); err != nil {
		return nil, err
	}
	s.Add(c.mr.Close)
	if c.cq, err = s.dev.CreateCQ(4); err != nil {
		return nil, err
	}
	s.Add(c.cq.Close)
	if c.qp, err = pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: c.cq, RecvCQ: c.cq,
		Cap: roce.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	s.Add(c.qp.Close)
	if err := c.qp.Init(&roce.ConnectAttr{AccessFlags: roce.AccessLocalWrite}); err != nil {
		return nil, err
	}
	if err := c.postRecv(); err != nil {
		return nil, err
	}
	param := func(qp *roce.QP) cm.ConnParam {
		return cm.ConnParam{QPN: qp.QPN(), StartingPSN: cm.RandomPSN(), RetryCount: retryCnt, RNRRetryCount: rnrRetry,
			Ready: func(q cm.QPParams) error {
				a := gsi.ConnectAttr(q, s.gidx, roce.AccessLocalWrite)
				return qp.Connect(&a)
			}}
	}
	conns, err := s.cmConnect(ctx, []*roce.QP{c.qp}, param)
	if err != nil {
		return nil, fmt.Errorf("rdma_cm exchange connection: %w", err)
	}
	c.conn = conns[0]
	return c, nil
}

// cmConnect connects qps through rdma_cm on -p's port: the client dials one
// connection per QP, asking again while the server does not listen yet; the
// server accepts as many on its listener. As perftest's one listening cm_id,
// the listener opens with the exchange's connection and stays up to the end:
// the client asks for the test QPs' connections as soon as the exchange is
// done (a stock client does not ask again), and a REQ that found no listener
// would be rejected with "invalid service ID".
func (s *session) cmConnect(ctx context.Context, qps []*roce.QP, param func(*roce.QP) cm.ConnParam) ([]*cm.Conn, error) {
	var conns []*cm.Conn
	if s.c.server == "" {
		if s.listener == nil {
			l, err := s.mgr.Listen(netip.AddrPortFrom(s.c.Addr, uint16(s.c.TCPPort)), s.c.numQPs) // perftest's backlog
			if err != nil {
				return nil, fmt.Errorf("rdma_listen: %w", err)
			}
			s.listener = l
			s.Add(l.Close)
		}
		for _, qp := range qps {
			req, err := s.listener.GetRequest(ctx)
			if err != nil {
				return nil, err
			}
			conn, err := req.Accept(ctx, param(qp))
			if err != nil {
				return nil, err
			}
			conns = append(conns, conn)
		}
		return conns, nil
	}
	server, err := netip.ParseAddr(s.c.server)
	if err != nil {
		return nil, fmt.Errorf("-R: the server must be an IP address: %v", err)
	}
	for _, qp := range qps {
		var conn *cm.Conn
		for try := 0; ; try++ {
			x, cancel := xctx(ctx)
			conn, err = s.mgr.Dial(x, netip.AddrPortFrom(s.c.Addr, 0), netip.AddrPortFrom(server, uint16(s.c.TCPPort)), param(qp))
			cancel()
			if err == nil || !errors.Is(err, cm.ErrRejected) || try == cmRetries {
				break
			}
			select {
			case <-time.After(cmRetryDelay):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("rdma_connect: %w", err)
		}
		conns = append(conns, conn)
	}
	return conns, nil
}

func (c *cmComm) postRecv() error {
	_, err := c.qp.PostRecv([]roce.RecvWR{{WRID: 1, SGL: []roce.SGE{{Addr: c.mr.Addr(), Length: oob.PerftestBinaryLen, LKey: c.mr.LKey()}}}})
	return err
}

// Exchange is one step of the exchange: the client SENDs out and then takes the
// server's message, the server the other way round.
func (c *cmComm) Exchange(ctx context.Context, out, in []byte) error {
	if len(out) > oob.PerftestBinaryLen || len(in) > oob.PerftestBinaryLen {
		return fmt.Errorf("rdma_cm exchange: a step of %d/%d bytes does not fit the receive buffer", len(out), len(in))
	}
	if c.client {
		if err := c.send(ctx, out); err != nil {
			return err
		}
		return c.recv(ctx, in)
	}
	if err := c.recv(ctx, in); err != nil {
		return err
	}
	return c.send(ctx, out)
}

func (c *cmComm) send(ctx context.Context, out []byte) error {
	copy(c.buf[commSlot:], out)
	wr := roce.SendWR{WRID: 2, Opcode: roce.WRSend, Flags: roce.SendSignaled,
		SGL: []roce.SGE{{Addr: c.mr.Addr() + commSlot, Length: uint32(len(out)), LKey: c.mr.LKey()}}}
	if _, err := c.qp.PostSend([]roce.SendWR{wr}); err != nil {
		return fmt.Errorf("rdma_cm exchange: post send: %w", err)
	}
	return c.wait(ctx, 2)
}

func (c *cmComm) recv(ctx context.Context, in []byte) error {
	if c.pending == 0 {
		if err := c.wait(ctx, 1); err != nil {
			return err
		}
	} else {
		c.pending--
	}
	copy(in, c.buf[:len(in)])
	return c.postRecv()
}

// wait waits for the completion of WR id (1: the receive, 2: the send),
// counting a receive that completes first.
func (c *cmComm) wait(ctx context.Context, id uint64) error {
	x, cancel := xctx(ctx)
	defer cancel()
	wc := make([]roce.WC, 2)
	for {
		n, err := c.cq.Wait(x, wc)
		if err != nil {
			return fmt.Errorf("rdma_cm exchange: %w", err)
		}
		done := false
		for _, w := range wc[:n] {
			if w.Status != roce.WCSuccess {
				return fmt.Errorf("rdma_cm exchange: completion status %v", w.Status)
			}
			switch {
			case w.WRID == id:
				done = true
			case w.WRID == 1:
				c.pending++
			}
		}
		if done {
			return nil
		}
	}
}

// connectCM is create_rdma_cm_connection for the test QPs: a hand-shake, a
// connection through rdma_cm per QP with perftest's parameters, a hand-shake.
func (s *session) connectCM(ctx context.Context) error {
	if err := s.barrier(ctx); err != nil {
		return err
	}
	qpAccess, _ := s.access()
	depth := uint8(0)
	if s.c.test.verb == read || s.c.test.verb == atomic {
		depth = uint8(s.outReads)
	}
	param := func(qp *roce.QP) cm.ConnParam {
		return cm.ConnParam{QPN: qp.QPN(), StartingPSN: cm.RandomPSN(), ResponderResources: depth, InitiatorDepth: depth,
			RetryCount: retryCnt, RNRRetryCount: rnrRetry,
			Ready: func(q cm.QPParams) error {
				a := gsi.ConnectAttr(q, s.gidx, qpAccess)
				return qp.Connect(&a)
			}}
	}
	conns, err := s.cmConnect(ctx, s.qps, param)
	if err != nil {
		return fmt.Errorf("failed to create RDMA CM connection: %w", err)
	}
	s.cmConns = append(conns, s.cmConns...) // the exchange's connection goes last
	return s.barrier(ctx)
}

// disconnectCM disconnects the test QPs and then the exchange QP (DREQ, DREP).
func (s *session) disconnectCM() {
	for _, c := range s.cmConns {
		x, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.Disconnect(x)
		cancel()
	}
}
