// Package rping is rping's application protocol (rdma-core
// librdmacm/examples/rping.c) on a goroce device, over a connection made by
// package cm: the client SENDs its start buffer's address, rkey and size;
// the server RDMA READs it and SENDs "go ahead"; the client SENDs its sink
// buffer; the server RDMA WRITEs the data back and SENDs "go ahead"; the
// client compares (Validate). Output (Verbose) is byte-identical to rping's:
// "ping data: rdma-ping-N: ..." on the client, "server ping data: ..." on
// the server. cmd/rping-go is the command line; a daemon can offer Serve as
// an rping responder.
package rping

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/roce"
)

// Size limits of rping (rping.c RPING_MIN_BUFSIZE, RPING_BUFSIZE).
const (
	MinSize = 26 // sizeof(stringify(INT_MAX)) + sizeof("rdma-ping-%d: ")
	MaxSize = BufSize - 1
	BufSize = 64 * 1024
)

// Options are rping's per-run settings.
type Options struct {
	Size     int  // ping data size (rping -S), MinSize..MaxSize; 0 means 64
	Count    int  // pings the client sends (rping -C); 0 means until ctx ends
	Verbose  bool // print each ping's data as rping -v does
	Validate bool // client: compare what came back (rping -V)
	// Out receives -v lines, Err rping's error and event messages
	// ("data mismatch!", "server DISCONNECT EVENT..."); nil discards.
	Out, Err io.Writer
	// Debug, if set, receives rping -d style trace lines.
	Debug func(format string, args ...any)
	// Timeout bounds connection setup (Dial, Accept) and Disconnect; 0
	// means 30 s.
	Timeout time.Duration
	// Idle ends the connection with ErrIdle when nothing completes for this
	// long: a peer that died without a DREQ (rping asks retry_cnt 7, which
	// retries forever, so the QP alone never gives up). The QP goes to
	// ERR at once and the DREQ is sent without waiting for its DREP. 0
	// waits forever, as rping does.
	Idle time.Duration
	// Established, if set, is called once when the connection is
	// established (server: RTU received; client: RTU sent).
	Established func()

	corruptEcho bool // tests: the server flips a bit before writing back
}

// ErrMismatch is returned by Client when Validate finds the data changed.
var ErrMismatch = errors.New("rping: data mismatch")

// ErrIdle ends a connection on which nothing completed for Options.Idle.
var ErrIdle = errors.New("rping: peer idle")

// completionError ends a connection whose QP failed a work request (a NAK,
// retries exhausted): the QP is in ERR and the peer may be gone.
type completionError roce.WCStatus

func (e completionError) Error() string { return fmt.Sprintf("cq completion failed status %d", int(e)) }

func (o *Options) defaults() error {
	if o.Size == 0 {
		o.Size = 64
	}
	if o.Size < MinSize || o.Size > MaxSize {
		return fmt.Errorf("rping: invalid size %d (valid range is %d to %d)", o.Size, MinSize, BufSize)
	}
	if o.Count < 0 {
		return fmt.Errorf("rping: invalid count %d", o.Count)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Err == nil {
		o.Err = io.Discard
	}
	if o.Debug == nil {
		o.Debug = func(string, ...any) {}
	}
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	return nil
}

// Depths of rping's queues (RPING_SQ_DEPTH, max_recv_wr 2, CQ 2×SQ).
const (
	sqDepth = 16
	rqDepth = 2
)

// access is what rping's buffers and QP allow: the peer READs the start buffer
// and WRITEs the sink.
const access = roce.AccessLocalWrite | roce.AccessRemoteRead | roce.AccessRemoteWrite

// errDisconnected ends a ping loop because the CM connection went away:
// rping's DISCONNECTED state.
var errDisconnected = errors.New("disconnected")

// pinger is one rping connection's verbs objects (rping_cb).
type pinger struct {
	o      *Options
	out    io.Writer
	errw   io.Writer
	dbg    func(format string, args ...any)
	dev    *roce.Device
	pd     *roce.PD
	cq     *roce.CQ
	qp     *roce.QP
	mr     *roce.MR
	mem    []byte // recv(16) | send(16) | rdma(BufSize) | start(size); the server's: recv | send
	conn   *cm.Conn
	server bool
	// The server's sink, registered once the connection is established, so
	// that a connection waiting for its RTU (one a spoofed REQ made) holds
	// no 64 KiB buffer.
	rdmaMR  *roce.MR
	rdmaBuf []byte
}

// Offsets into mem.
const (
	offRecv  = 0
	offSend  = infoLen
	offRDMA  = 2 * infoLen
	offStart = offRDMA + BufSize
)

func newPinger(o *Options, dev *roce.Device, server bool) (*pinger, error) {
	p := &pinger{o: o, out: o.Out, errw: o.Err, dbg: o.Debug, dev: dev, server: server}
	var err error
	if p.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	p.dbg("created pd %p\n", p.pd)
	if p.cq, err = dev.CreateCQ(sqDepth * 2); err != nil {
		p.close()
		return nil, err
	}
	p.dbg("created cq %p\n", p.cq)
	p.qp, err = p.pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: roce.QPCap{MaxSendWR: sqDepth, MaxRecvWR: rqDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		p.close()
		return nil, err
	}
	p.dbg("created qp %p\n", p.qp)
	p.mem = make([]byte, offStart+o.Size)
	if server {
		p.mem = make([]byte, offRDMA) // the sink comes with the connection (setupSink)
	}
	p.mr, err = p.pd.RegMR(p.mem, access)
	if err != nil {
		p.close()
		return nil, err
	}
	p.dbg("allocated & registered buffers...\n")
	err = p.qp.Init(&roce.ConnectAttr{AccessFlags: access})
	if err == nil {
		err = p.postRecv()
	}
	if err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// setupSink registers the server's sink: always RPING_BUFSIZE, so a client
// with a larger -S still works; what it prints and writes back is the same.
func (p *pinger) setupSink() error {
	p.rdmaBuf = make([]byte, BufSize)
	var err error
	p.rdmaMR, err = p.pd.RegMR(p.rdmaBuf, access)
	return err
}

func (p *pinger) close() {
	for _, c := range []interface{ Close() error }{p.qp, p.rdmaMR, p.mr, p.cq, p.pd} {
		if c != nil && !isNilHandle(c) {
			c.Close()
		}
	}
}

func isNilHandle(c interface{ Close() error }) bool {
	switch v := c.(type) {
	case *roce.QP:
		return v == nil
	case *roce.MR:
		return v == nil
	case *roce.CQ:
		return v == nil
	case *roce.PD:
		return v == nil
	}
	return false
}

func (p *pinger) sge(off, n int) roce.SGE {
	return roce.SGE{Addr: p.mr.Addr() + uint64(off), Length: uint32(n), LKey: p.mr.LKey()}
}

// sinkSGE is the first n bytes of the server's sink.
func (p *pinger) sinkSGE(n int) roce.SGE {
	return roce.SGE{Addr: p.rdmaMR.Addr(), Length: uint32(n), LKey: p.rdmaMR.LKey()}
}

func (p *pinger) postRecv() error {
	_, err := p.qp.PostRecv([]roce.RecvWR{{WRID: 1, SGL: []roce.SGE{p.sge(offRecv, infoLen)}}})
	return err
}

// ready moves the QP to RTR and RTS with what the CM negotiated
// (rdma_cm's cma_modify_qp_rtr/rts).
func (p *pinger) ready(q cm.QPParams) error {
	a := gsi.ConnectAttr(q, p.dev.GIDIndex(), access)
	return p.qp.Connect(&a)
}

func (p *pinger) connParam() cm.ConnParam {
	// rping_init_conn_param: 1/1 and retry 7/7.
	return cm.ConnParam{QPN: p.qp.QPN(), StartingPSN: cm.RandomPSN(), ResponderResources: 1, InitiatorDepth: 1,
		RetryCount: 7, RNRRetryCount: 7, Ready: p.ready}
}

// wait returns the next completion that is not a SEND's, reposting the
// receive after a RECV (rping_cq_event_handler). A RECV must carry 16 bytes.
func (p *pinger) wait(ctx context.Context) (roce.WC, error) {
	var wc [1]roce.WC
	var idle *time.Timer
	var idleC <-chan time.Time // nil without Options.Idle: never fires
	if p.o.Idle > 0 {
		idle = time.NewTimer(p.o.Idle)
		defer idle.Stop()
		idleC = idle.C
	}
	for {
		n, err := p.cq.Poll(wc[:])
		if err != nil {
			return wc[0], err
		}
		if n == 0 {
			if err := p.cq.ReqNotify(false); err != nil {
				return wc[0], err
			}
			if n, err = p.cq.Poll(wc[:]); err != nil {
				return wc[0], err
			}
		}
		if n == 0 {
			select {
			case <-p.cq.Notify():
				continue
			case <-p.conn.Done():
				// Drain what arrived before the disconnect, then stop.
				if n, _ = p.cq.Poll(wc[:]); n == 0 {
					return wc[0], errDisconnected
				}
			case <-ctx.Done():
				return wc[0], ctx.Err()
			case <-idleC:
				return wc[0], ErrIdle
			}
		}
		w := wc[0]
		if w.Status != roce.WCSuccess {
			if w.Status == roce.WCWRFlushErr {
				return w, errDisconnected
			}
			return w, completionError(w.Status)
		}
		switch w.Opcode {
		case roce.WCSend:
			p.dbg("send completion\n")
			if idle != nil {
				idle.Reset(p.o.Idle) // progress
			}
			continue
		case roce.WCRDMAWrite:
			p.dbg("rdma write completion\n")
		case roce.WCRDMARead:
			p.dbg("rdma read completion\n")
		case roce.WCRecv:
			p.dbg("recv completion\n")
			if w.ByteLen != infoLen {
				fmt.Fprintf(p.errw, "Received bogus data, size %d\n", w.ByteLen)
				return w, errors.New("recv wc error: -1")
			}
			if err := p.postRecv(); err != nil {
				return w, fmt.Errorf("post recv error: %w", err)
			}
		default:
			return w, fmt.Errorf("unknown completion %v", w.Opcode)
		}
		return w, nil
	}
}

func (p *pinger) post(wr roce.SendWR) error {
	wr.Flags |= roce.SendSignaled
	if _, err := p.qp.PostSend([]roce.SendWR{wr}); err != nil {
		return fmt.Errorf("post send error %w", err)
	}
	return nil
}

// sendInfo SENDs an rping_rdma_info naming mem[off:off+size].
func (p *pinger) sendInfo(off, size int) error {
	info := rdmaInfo{Addr: p.mr.Addr() + uint64(off), RKey: p.mr.RKey(), Size: uint32(size)}
	info.put(p.mem[offSend:])
	p.dbg("RDMA addr %x rkey %x len %d\n", info.Addr, info.RKey, info.Size)
	return p.post(roce.SendWR{WRID: 2, Opcode: roce.WRSend, SGL: []roce.SGE{p.sge(offSend, infoLen)}})
}

// goAhead SENDs the server's 16-byte send buffer (never filled by rping).
func (p *pinger) goAhead() error {
	return p.post(roce.SendWR{WRID: 2, Opcode: roce.WRSend, SGL: []roce.SGE{p.sge(offSend, infoLen)}})
}

// expect waits for a completion with opcode op.
func (p *pinger) expect(ctx context.Context, op roce.WCOpcode, what string) (roce.WC, error) {
	w, err := p.wait(ctx)
	if err != nil {
		return w, err
	}
	if w.Opcode != op {
		return w, fmt.Errorf("wait for %s: got %v", what, w.Opcode)
	}
	return w, nil
}

// testServer is rping_test_server: READ the client's buffer, go ahead, WRITE
// it back, go ahead; until the client disconnects.
func (p *pinger) testServer(ctx context.Context) error {
	for {
		if _, err := p.expect(ctx, roce.WCRecv, "RDMA_READ_ADV"); err != nil {
			if errors.Is(err, errDisconnected) {
				// rping's CM thread reports the event, then the test loop
				// finds state DISCONNECTED (10) and ends without error.
				fmt.Fprintf(p.errw, "server DISCONNECT EVENT...\n")
				fmt.Fprintf(p.errw, "wait for RDMA_READ_ADV state 10\n")
				return nil
			}
			return err
		}
		adv := getInfo(p.mem[offRecv:])
		p.dbg("Received rkey %x addr %x len %d from peer\n", adv.RKey, adv.Addr, adv.Size)
		p.dbg("server received sink adv\n")
		n := int(adv.Size)
		if n > BufSize {
			n = BufSize
		}
		clear(p.rdmaBuf)
		if err := p.post(roce.SendWR{WRID: 3, Opcode: roce.WRRDMARead, SGL: []roce.SGE{p.sinkSGE(n)},
			RemoteAddr: adv.Addr, RKey: adv.RKey}); err != nil {
			return err
		}
		p.dbg("server posted rdma read req \n")
		if _, err := p.expect(ctx, roce.WCRDMARead, "RDMA_READ_COMPLETE"); err != nil {
			return err
		}
		p.dbg("server received read complete\n")
		data := cstr(p.rdmaBuf)
		if p.o.Verbose {
			fmt.Fprintf(p.out, "server ping data: %s\n", data)
		}
		if err := p.goAhead(); err != nil {
			return err
		}
		p.dbg("server posted go ahead\n")
		if _, err := p.expect(ctx, roce.WCRecv, "RDMA_WRITE_ADV"); err != nil {
			return err
		}
		adv = getInfo(p.mem[offRecv:])
		p.dbg("Received rkey %x addr %x len %d from peer\n", adv.RKey, adv.Addr, adv.Size)
		p.dbg("server received sink adv\n")
		wlen := len(data) + 1
		if p.o.corruptEcho {
			p.rdmaBuf[0] ^= 0x20 // test hook: echo wrong data
		}
		p.dbg("rdma write from lkey %x laddr %x len %d\n", p.rdmaMR.LKey(), p.rdmaMR.Addr(), wlen)
		if err := p.post(roce.SendWR{WRID: 4, Opcode: roce.WRRDMAWrite, SGL: []roce.SGE{p.sinkSGE(wlen)},
			RemoteAddr: adv.Addr, RKey: adv.RKey}); err != nil {
			return err
		}
		if _, err := p.expect(ctx, roce.WCRDMAWrite, "RDMA_WRITE_COMPLETE"); err != nil {
			return err
		}
		p.dbg("server rdma write complete \n")
		if err := p.goAhead(); err != nil {
			return err
		}
		p.dbg("server posted go ahead\n")
	}
}

// testClient is rping_test_client. It returns nil when every ping completed.
func (p *pinger) testClient(ctx context.Context) error {
	size := p.o.Size
	start := byte(65)
	startBuf := p.mem[offStart : offStart+size]
	rdmaBuf := p.mem[offRDMA : offRDMA+size]
	for ping := 0; p.o.Count == 0 || ping < p.o.Count; ping++ {
		start = Fill(startBuf, ping, start)
		if err := p.sendInfo(offStart, size); err != nil {
			return err
		}
		if _, err := p.expect(ctx, roce.WCRecv, "RDMA_WRITE_ADV"); err != nil {
			return err
		}
		if err := p.sendInfo(offRDMA, size); err != nil {
			return err
		}
		if _, err := p.expect(ctx, roce.WCRecv, "RDMA_WRITE_COMPLETE"); err != nil {
			return err
		}
		if p.o.Validate && string(startBuf) != string(rdmaBuf) {
			fmt.Fprintf(p.errw, "data mismatch!\n")
			return ErrMismatch
		}
		if p.o.Verbose {
			fmt.Fprintf(p.out, "ping data: %s\n", cstr(rdmaBuf))
		}
	}
	return nil
}

// Client is rping -c: it dials remote (rdma_cm port) from local through mgr,
// runs Count pings and disconnects. It returns nil only when every ping
// completed (and matched, with Validate).
func Client(ctx context.Context, dev *roce.Device, mgr *cm.Manager, local, remote netip.AddrPort, o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	p, err := newPinger(&o, dev, false)
	if err != nil {
		return fmt.Errorf("setup_qp failed: %w", err)
	}
	defer p.close()
	dctx, cancel := context.WithTimeout(ctx, o.Timeout)
	p.conn, err = mgr.Dial(dctx, local, remote, p.connParam())
	cancel()
	if err != nil {
		name, status := cmaEvent(err)
		fmt.Fprintf(o.Err, "cma event %s, error %d\n", name, status)
		return fmt.Errorf("connect error: %w", err)
	}
	o.Debug("rdma_connect successful\n")
	if o.Established != nil {
		o.Established()
	}
	err = p.testClient(ctx)
	p.disconnect(err) // rping_disconnect: DREQ, whatever happened
	return err
}

// cmaEvent names the rdma_cm event a failed connect reports and its status
// (the REJ reason, or -ETIMEDOUT), as rping prints them.
func cmaEvent(err error) (string, int) {
	var rej *cm.RejectError
	if errors.As(err, &rej) {
		return cm.Rejected.String(), int(rej.Reason)
	}
	return cm.Unreachable.String(), -110
}

// ServeConn is rping -s for one connection request: it accepts r, answers
// pings until the client disconnects, and returns nil then.
func ServeConn(ctx context.Context, dev *roce.Device, r *cm.ConnRequest, o Options) error {
	if err := o.defaults(); err != nil {
		r.Reject(nil)
		return err
	}
	p, err := newPinger(&o, dev, true)
	if err != nil {
		r.Reject(nil)
		return fmt.Errorf("setup_qp failed: %w", err)
	}
	defer p.close()
	o.Debug("accepting client connection request\n")
	actx, cancel := context.WithTimeout(ctx, o.Timeout)
	p.conn, err = r.Accept(actx, p.connParam())
	cancel()
	if err != nil {
		return fmt.Errorf("connect error %w", err)
	}
	if o.Established != nil {
		o.Established()
	}
	if err = p.setupSink(); err != nil {
		p.disconnect(err)
		return fmt.Errorf("setup_buffers failed: %w", err)
	}
	err = p.testServer(ctx)
	p.disconnect(err)
	return err
}

// disconnect is rdma_disconnect: the QP goes to ERR (flushing its WRs and
// stopping its retransmissions), then DREQ. After ErrIdle or a failed
// completion the peer may be gone, so the DREQ is not waited for (the CM
// still retries it): a peer whose stack NAKed while its CM was already down
// would otherwise hold the connection for Options.Timeout more. Otherwise
// the DREP is awaited up to Options.Timeout.
func (p *pinger) disconnect(err error) {
	p.qp.Modify(&roce.QPAttr{State: roce.QPSErr}, roce.QPAttrState)
	wait := p.o.Timeout
	var failed completionError
	if errors.Is(err, ErrIdle) || errors.As(err, &failed) {
		wait = 0
	}
	dctx, cancel := context.WithTimeout(context.Background(), wait)
	p.conn.Disconnect(dctx)
	cancel()
}

// Serve is rping -s -P: it serves every connection request from l, each on
// its own goroutine, until ctx ends or l is closed; then it waits for the
// connections to finish. Per-connection failures go to o.Err.
func Serve(ctx context.Context, dev *roce.Device, l *cm.Listener, o Options) error {
	if err := o.defaults(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		r, err := l.GetRequest(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ServeConn(ctx, dev, r, o); err != nil {
				fmt.Fprintf(o.Err, "rping server connection failed: %v\n", err)
			}
		}()
	}
}
