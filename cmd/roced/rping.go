package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/cm/rping"
	"github.com/goroce/goroce/roce"
)

// rpStats counts rping sessions for the metrics, shared by every rping responder.
type rpStats struct {
	active   atomic.Int64  // connections established and served now
	started  atomic.Uint64 // connections established (RTU received)
	ends     [numEnds]atomic.Uint64
	acceptFS atomic.Uint64 // connection requests that never got established (no RTU, setup failed)
	refused  atomic.Uint64 // connection requests rejected at the session limit
	pings    atomic.Uint64 // pings answered (one RDMA READ and one RDMA WRITE each)
}

// rpingConfig configures an rpingResponder.
type rpingConfig struct {
	stats       *rpStats
	maxSessions int           // connections served at once; more are rejected
	idle        time.Duration // a connection with no completion for this long ends
	accept      time.Duration // how long Accept waits for the RTU
}

// cmAddr is the rdma_cm address an rping responder listens on; it is not a socket,
// so Network names the port space.
type cmAddr netip.AddrPort

func (a cmAddr) Network() string { return "rdma_cm" }
func (a cmAddr) String() string  { return netip.AddrPort(a).String() }

// rpingResponder is rping -s -P on one device: the CM runs on the device's QP1 (the gsi
// agent, set up by openDevice) and every connection request to the rdma_cm port is
// accepted and served on its own goroutine by cm/rping.
type rpingResponder struct {
	dev   *roce.Device
	mgr   *cm.Manager
	ln    *cm.Listener
	cfg   rpingConfig
	stats *rpStats
	log   *slog.Logger
	warn  logEvery // refusals, rate-limited
	live  atomic.Int64

	ctx    context.Context // cancelled by Close: ends sessions in progress
	cancel context.CancelFunc
	wg     sync.WaitGroup // sessions
}

// newCM starts the connection manager of dev on mads, with the pending-connection
// caps of the configuration.
func newCM(dev *roce.Device, mads *gsi.Conn, c *config) (*cm.Manager, error) {
	pa, err := dev.QueryPort(1)
	if err != nil {
		return nil, err
	}
	return cm.NewManager(mads, cm.ManagerConfig{CAGUID: gsi.CAGUID(dev), PathMTU: uint8(pa.ActiveMTU),
		Machine: cm.Config{MaxPending: c.cmMaxPending, MaxUnansweredPerPeer: c.cmMaxPendingPerSource,
			PendingTimeout: c.cmPendingTimeout}}), nil
}

// newRpingResponder listens on addr's rdma_cm port through mgr, which it closes
// when it closes.
func newRpingResponder(dev *roce.Device, mgr *cm.Manager, addr netip.AddrPort, cfg rpingConfig, log *slog.Logger) (*rpingResponder, error) {
	ln, err := mgr.Listen(addr, 0) // rdma_cm's default backlog
	if err != nil {
		mgr.Close()
		return nil, err
	}
	r := &rpingResponder{dev: dev, mgr: mgr, ln: ln, cfg: cfg, stats: cfg.stats, log: log.With("responder", "rping")}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// Name implements responder.
func (r *rpingResponder) Name() string { return "rping" }

// Addr implements responder.
func (r *rpingResponder) Addr() net.Addr { return cmAddr(r.ln.Addr()) }

// Serve implements responder: it accepts connection requests until Close.
func (r *rpingResponder) Serve() error {
	for {
		req, err := r.ln.GetRequest(r.ctx)
		if err != nil {
			if r.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if r.stats.active.Load() >= int64(r.cfg.maxSessions) {
			// rdma_reject: REJ "consumer defined", and the client says so at once
			// (RDMA_CM_EVENT_REJECTED, error 28) instead of retrying. Only
			// established sessions count: connections still waiting for their
			// RTU are capped by the CM (-cm-max-pending), and counting them here
			// would let REQs that never complete lock real clients out.
			req.Reject(nil)
			r.stats.refused.Add(1)
			r.warn.log(r.log, "rping session limit reached; rejecting connection requests", "max", r.cfg.maxSessions)
			continue
		}
		r.live.Add(1)
		r.wg.Add(1)
		go r.serveConn(req)
	}
}

// serveConn runs one rping session. The server's -v lines are counted as pings, not
// printed; rping's error and event messages go to the log.
func (r *rpingResponder) serveConn(req *cm.ConnRequest) {
	defer r.wg.Done()
	defer r.live.Add(-1)
	peer := req.REQ()
	log := r.log.With("peer", req.Remote, "peer_qpn", peer.LocalQPN)
	pings := &lineCounter{n: &r.stats.pings}
	established := false
	o := rping.Options{Verbose: true, Out: pings, Err: &logWriter{log: log}, Idle: r.cfg.idle, Timeout: r.cfg.accept,
		Established: func() {
			established = true
			r.stats.started.Add(1)
			r.stats.active.Add(1)
		}}
	start := time.Now()
	err := rping.ServeConn(r.ctx, r.dev, req, o)
	if !established {
		if r.ctx.Err() == nil {
			r.stats.acceptFS.Add(1)
			log.Info("rping connection not established", "err", err, "after", time.Since(start))
		}
		return
	}
	r.stats.active.Add(-1)
	end := endDisconnect
	switch {
	case errors.Is(err, rping.ErrIdle):
		end = endIdle
	case err != nil && r.ctx.Err() != nil:
		end = endShutdown
	case err != nil:
		end = endError
	}
	r.stats.ends[end].Add(1)
	lvl := slog.LevelInfo
	if end == endError {
		lvl = slog.LevelWarn
	}
	log.Log(context.Background(), lvl, "rping session ended", "reason", end.String(), "err", err, "pings", pings.local.Load(), "after", time.Since(start))
}

// Close implements responder: stop accepting, end the sessions (each disconnects and
// destroys its QP), wait for them until deadline, then stop the CM.
func (r *rpingResponder) Close(deadline time.Time) {
	r.ln.Close()
	r.cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		r.log.Warn("rping sessions still running at the drain deadline")
	}
	r.mgr.Close()
}

// lineCounter counts the newline-terminated lines written to it: rping's server writes
// one "server ping data: ..." line per ping.
type lineCounter struct {
	n     *atomic.Uint64
	local atomic.Uint64
}

func (c *lineCounter) Write(b []byte) (int, error) {
	k := uint64(bytes.Count(b, []byte{'\n'}))
	c.n.Add(k)
	c.local.Add(k)
	return len(b), nil
}

// logWriter turns rping's stderr messages into log records, one per line.
type logWriter struct{ log *slog.Logger }

func (w *logWriter) Write(b []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimRight(b, "\n"), []byte{'\n'}) {
		if len(line) > 0 {
			w.log.Info("rping", "text", string(line))
		}
	}
	return len(b), nil
}
