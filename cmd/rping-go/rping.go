package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/roce"
)

// Depths of rping's queues (RPING_SQ_DEPTH, max_recv_wr 2, CQ 2×SQ).
const (
	sqDepth = 16
	rqDepth = 2
)

// errDisconnected ends a ping loop because the CM connection went away:
// rping's DISCONNECTED state.
var errDisconnected = errors.New("disconnected")

// pinger is one rping connection's verbs objects (rping_cb).
type pinger struct {
	o      *options
	out    io.Writer
	errw   io.Writer
	dbg    func(format string, args ...any)
	dev    *roce.Device
	pd     *roce.PD
	cq     *roce.CQ
	qp     *roce.QP
	mr     *roce.MR
	mem    []byte // recv(16) | send(16) | rdma(bufSize) | start(size)
	conn   *cm.Conn
	server bool
}

// Offsets into mem.
const (
	offRecv  = 0
	offSend  = infoLen
	offRDMA  = 2 * infoLen
	offStart = offRDMA + bufSize
)

func newPinger(o *options, dev *roce.Device, server bool, out, errw io.Writer, dbg func(string, ...any)) (*pinger, error) {
	p := &pinger{o: o, out: out, errw: errw, dbg: dbg, dev: dev, server: server}
	var err error
	if p.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	dbg("created pd %p\n", p.pd)
	if p.cq, err = dev.CreateCQ(sqDepth * 2); err != nil {
		p.close()
		return nil, err
	}
	dbg("created cq %p\n", p.cq)
	p.qp, err = p.pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: p.cq, RecvCQ: p.cq,
		Cap: roce.QPCap{MaxSendWR: sqDepth, MaxRecvWR: rqDepth, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		p.close()
		return nil, err
	}
	dbg("created qp %p\n", p.qp)
	// The server's sink is always RPING_BUFSIZE so a client with a larger -S
	// still works; what it prints and writes back is the same.
	p.mem = make([]byte, offStart+o.size)
	p.mr, err = p.pd.RegMR(p.mem, roce.AccessLocalWrite|roce.AccessRemoteRead|roce.AccessRemoteWrite)
	if err != nil {
		p.close()
		return nil, err
	}
	dbg("allocated & registered buffers...\n")
	err = p.qp.Modify(&roce.QPAttr{State: roce.QPSInit, PKeyIndex: 0, PortNum: 1,
		AccessFlags: roce.AccessLocalWrite | roce.AccessRemoteRead | roce.AccessRemoteWrite},
		roce.QPAttrState|roce.QPAttrPKeyIndex|roce.QPAttrPort|roce.QPAttrAccessFlags)
	if err == nil {
		err = p.postRecv()
	}
	if err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *pinger) close() {
	for _, c := range []interface{ Close() error }{p.qp, p.mr, p.cq, p.pd} {
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

func (p *pinger) postRecv() error {
	_, err := p.qp.PostRecv([]roce.RecvWR{{WRID: 1, SGL: []roce.SGE{p.sge(offRecv, infoLen)}}})
	return err
}

// ready moves the QP to RTR and RTS with what the CM negotiated
// (rdma_cm's cma_modify_qp_rtr/rts).
func (p *pinger) ready(q cm.QPParams) error {
	err := p.qp.Modify(&roce.QPAttr{State: roce.QPSRTR, PathMTU: roce.MTU(q.PathMTU), DestQPN: q.RemoteQPN,
		RQPSN: q.RQPSN, MaxDestRDAtomic: q.MaxDestRdAtomic, MinRNRTimer: 12,
		AV: roce.AddressVector{DGID: q.RemoteAddr, SGIDIndex: uint8(p.dev.GIDIndex()), HopLimit: q.HopLimit,
			TrafficClass: q.TrafficClass, FlowLabel: q.FlowLabel, SrcPort: q.UDPSourcePort, IsGlobal: true}},
		roce.QPAttrState|roce.QPAttrAV|roce.QPAttrPathMTU|roce.QPAttrDestQPN|roce.QPAttrRQPSN|
			roce.QPAttrMaxDestRDAtomic|roce.QPAttrMinRNRTimer)
	if err != nil {
		return err
	}
	return p.qp.Modify(&roce.QPAttr{State: roce.QPSRTS, SQPSN: q.SQPSN, Timeout: q.Timeout,
		RetryCnt: q.RetryCount, RNRRetry: q.RNRRetry, MaxRDAtomic: q.MaxRdAtomic},
		roce.QPAttrState|roce.QPAttrSQPSN|roce.QPAttrTimeout|roce.QPAttrRetryCnt|roce.QPAttrRNRRetry|roce.QPAttrMaxQPRDAtomic)
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
			}
		}
		w := wc[0]
		if w.Status != roce.WCSuccess {
			if w.Status == roce.WCWRFlushErr {
				return w, errDisconnected
			}
			return w, fmt.Errorf("cq completion failed status %d", w.Status)
		}
		switch w.Opcode {
		case roce.WCSend:
			p.dbg("send completion\n")
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
		if n > bufSize {
			n = bufSize
		}
		clear(p.mem[offRDMA : offRDMA+bufSize])
		if err := p.post(roce.SendWR{WRID: 3, Opcode: roce.WRRDMARead, SGL: []roce.SGE{p.sge(offRDMA, n)},
			RemoteAddr: adv.Addr, RKey: adv.RKey}); err != nil {
			return err
		}
		p.dbg("server posted rdma read req \n")
		if _, err := p.expect(ctx, roce.WCRDMARead, "RDMA_READ_COMPLETE"); err != nil {
			return err
		}
		p.dbg("server received read complete\n")
		data := cstr(p.mem[offRDMA : offRDMA+bufSize])
		if p.o.verbose {
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
			p.mem[offRDMA] ^= 0x20 // test hook: echo wrong data
		}
		p.dbg("rdma write from lkey %x laddr %x len %d\n", p.mr.LKey(), p.mr.Addr()+offRDMA, wlen)
		if err := p.post(roce.SendWR{WRID: 4, Opcode: roce.WRRDMAWrite, SGL: []roce.SGE{p.sge(offRDMA, wlen)},
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
	size := p.o.size
	start := byte(65)
	startBuf := p.mem[offStart : offStart+size]
	rdmaBuf := p.mem[offRDMA : offRDMA+size]
	for ping := 0; p.o.count == 0 || ping < p.o.count; ping++ {
		start = fillPing(startBuf, ping, start)
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
		if p.o.validate && string(startBuf) != string(rdmaBuf) {
			fmt.Fprintf(p.errw, "data mismatch!\n")
			return errors.New("-1")
		}
		if p.o.verbose {
			fmt.Fprintf(p.out, "ping data: %s\n", cstr(rdmaBuf))
		}
	}
	return nil
}

// resolveSource returns the address the kernel would send to dst from (no
// packet is sent), as rdma_resolve_addr picks a source.
func resolveSource(dst netip.Addr, udpPort int) (netip.Addr, error) {
	c, err := net.Dial("udp", netip.AddrPortFrom(dst, uint16(udpPort)).String())
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

func parseAddr(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.LookupIP(s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo failed (%v) - invalid hostname or IP address", err)
	}
	a, _ := netip.AddrFromSlice(ips[0])
	return a.Unmap(), nil
}

// caGUID derives the CA GUID from the link-local GID (fe80::<EUI-64>) as
// rxe's node GUID, or 0.
func caGUID(dev *roce.Device) uint64 {
	g, err := dev.QueryGID(0)
	if err != nil {
		return 0
	}
	b := [16]byte(g)
	if b[0] != 0xfe || b[1] != 0x80 {
		return 0
	}
	return binary.BigEndian.Uint64(b[8:])
}

// run is main with injectable I/O; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, code, ok := parseOpts(args, stdout, stderr)
	if !ok {
		return code
	}
	var mu sync.Mutex // serialises output of persistent-server goroutines
	out := &lockedWriter{w: stdout, mu: &mu}
	errw := &lockedWriter{w: stderr, mu: &mu}
	dbg := func(format string, args ...any) {
		if o.debug {
			fmt.Fprintf(out, format, args...)
		}
	}
	if o.server == 1 {
		if err := runServer(ctx, &o, out, errw, dbg); err != nil {
			fmt.Fprintf(errw, "rping server failed: %v\n", err)
			return 1
		}
		return 0
	}
	if err := runClient(ctx, &o, out, errw, dbg); err != nil {
		fmt.Fprintf(errw, "rping client failed: %v\n", err)
		return 1
	}
	return 0
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// endpoint is a device with its CM; close releases both.
type endpoint struct {
	dev   *roce.Device
	mgr   *cm.Manager
	trace chan cm.ConnEvent // -d: the CM event stream; nil otherwise
	wg    sync.WaitGroup
}

// closeHook, if set (tests), sees each device just before it closes.
var closeHook func(*roce.Device)

func (e *endpoint) close() {
	if closeHook != nil {
		closeHook(e.dev)
	}
	e.mgr.Close()
	if e.trace != nil {
		close(e.trace) // the Manager publishes nothing after Close
		e.wg.Wait()
	}
	e.dev.Close()
}

func openDevice(addr netip.Addr, o *options, dbg func(string, ...any)) (*endpoint, error) {
	dev, mads, err := openGSI(addr, uint16(o.udpPort))
	if err != nil {
		return nil, err
	}
	pa, err := dev.QueryPort(1)
	if err != nil {
		dev.Close()
		return nil, err
	}
	e := &endpoint{dev: dev}
	cfg := cm.ManagerConfig{CAGUID: caGUID(dev), PathMTU: uint8(pa.ActiveMTU), TrafficClass: uint8(o.tos)}
	if o.debug {
		e.trace = make(chan cm.ConnEvent, 64)
		cfg.Events = e.trace
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			for ev := range e.trace {
				role := "parent"
				if o.server == 1 {
					role = "child"
				}
				dbg("cma_event type %s cma_id %#x (%s)\n", ev.Type, ev.ID, role)
			}
		}()
	}
	e.mgr = cm.NewManager(mads, cfg)
	return e, nil
}

func runClient(ctx context.Context, o *options, out, errw io.Writer, dbg func(string, ...any)) error {
	if o.addr == "" {
		usage(out)
		return errors.New("-a is required")
	}
	dst, err := parseAddr(o.addr)
	if err != nil {
		return err
	}
	src := netip.Addr{}
	if o.src != "" {
		if src, err = parseAddr(o.src); err != nil {
			return err
		}
	} else if src, err = resolveSource(dst, o.udpPort); err != nil {
		return fmt.Errorf("rdma_resolve_addr: %w", err)
	}
	e, err := openDevice(src, o, dbg)
	if err != nil {
		return err
	}
	defer e.close()
	p, err := newPinger(o, e.dev, false, out, errw, dbg)
	if err != nil {
		return fmt.Errorf("setup_qp failed: %w", err)
	}
	defer p.close()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	p.conn, err = e.mgr.Dial(dctx, netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, uint16(o.port)), p.connParam())
	cancel()
	if err != nil {
		name, status := cmaEvent(err)
		fmt.Fprintf(errw, "cma event %s, error %d\n", name, status)
		return fmt.Errorf("connect error: %w", err)
	}
	dbg("rdma_connect successful\n")
	err = p.testClient(ctx)
	// rping_disconnect: DREQ, whatever happened.
	dctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	p.conn.Disconnect(dctx)
	cancel()
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

func runServer(ctx context.Context, o *options, out, errw io.Writer, dbg func(string, ...any)) error {
	if o.addr == "" {
		usage(out)
		return errors.New("-a is required: a goroce device binds one address")
	}
	addr, err := parseAddr(o.addr)
	if err != nil {
		return err
	}
	e, err := openDevice(addr, o, dbg)
	if err != nil {
		return err
	}
	defer e.close()
	l, err := e.mgr.Listen(netip.AddrPortFrom(addr, uint16(o.port)))
	if err != nil {
		return fmt.Errorf("rdma_listen: %w", err)
	}
	dbg("rdma_bind_addr successful\n")
	dbg("rdma_listen\n")
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		r, err := l.GetRequest(ctx)
		if err != nil {
			if o.persistent && ctx.Err() != nil {
				return nil // -P runs until interrupted
			}
			return err
		}
		dbg("child cma %#x\n", r.Remote.Port())
		serve := func() error {
			p, err := newPinger(o, e.dev, true, out, errw, dbg)
			if err != nil {
				r.Reject(nil)
				return fmt.Errorf("setup_qp failed: %w", err)
			}
			defer p.close()
			dbg("accepting client connection request\n")
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			p.conn, err = r.Accept(actx, p.connParam())
			cancel()
			if err != nil {
				return fmt.Errorf("connect error %w", err)
			}
			err = p.testServer(ctx)
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			p.conn.Disconnect(dctx)
			cancel()
			return err
		}
		if !o.persistent {
			return serve()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serve(); err != nil {
				fmt.Fprintf(errw, "rping server connection failed: %v\n", err)
			}
		}()
	}
}
