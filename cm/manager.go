package cm

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/goroce/goroce/bth"
)

// rdma_cm's defaults (cma.c): CM response timeout code 20 (≈ 4.3 s), 15 CM
// retries, and on RoCE a packet lifetime code of 18 whose local ACK timeout
// is 19.
const (
	DefaultCMResponseTimeout = 20
	DefaultMaxCMRetries      = 15
	DefaultPacketLifetime    = 18
)

// A Manager bounds the passive connections that wait for their RTU (see
// Config.MaxPending): a REQ costs the listener a connection's resources
// before the peer proves it can answer, so a flood of spoofed REQs must not
// grow them without bound. The kernel's CM has no such caps, and a peer that
// opens hundreds of connections at once (an MPI job, a storage client, cmtime)
// must not meet them either. DefaultMaxPending is a full listen backlog
// (MaxBacklog): as many requests as rdma_cm queues for one listener at once,
// at about 3 KB each in the Manager (TestPendingCost), 3 MB in all. A peer is
// held to DefaultMaxUnansweredPerPeer only for connections whose RTU it failed
// to send in the time it promised, so one that answers is never refused.
// ManagerConfig.Machine fields left zero take these; a negative one switches
// the bound off.
const (
	DefaultMaxPending           = MaxBacklog
	DefaultMaxUnansweredPerPeer = 32
	DefaultPendingTimeout       = 30 * time.Second
	// DefaultMaxTimeWait caps timewait, which follows the peer's advertised
	// timeouts (≈ 13 s with rdma_cm's).
	DefaultMaxTimeWait = time.Minute
)

// ManagerConfig configures a Manager. Zero fields take rdma_cm's values.
type ManagerConfig struct {
	// CAGUID is the local CA GUID put in REQ/REP (rxe: the node GUID, EUI-64
	// of the MAC). Optional.
	CAGUID uint64
	// PathMTU is the port's active MTU enum (1=256 .. 5=4096); default 3
	// (1024, rxe on a 1500-byte netdev).
	PathMTU uint8
	// CMResponseTimeout is the 5-bit code we promise and expect for CM
	// answers; MaxCMRetries how often REQ/REP/DREQ are resent.
	CMResponseTimeout uint8
	MaxCMRetries      uint8
	// PacketLifetime is the 5-bit path packet lifetime; the QP's local ACK
	// timeout is PacketLifetime+1.
	PacketLifetime uint8
	// HopLimit of the path (default 64) and TrafficClass.
	HopLimit     uint8
	TrafficClass uint8
	// Machine tunes the state machine (timewait, randomness, the caps on
	// pending connections: DefaultMaxPending and its siblings when zero).
	Machine Config
	// Events, if non-nil, receives a copy of every connection event
	// (rdma_cm's event channel, for tracing). Sends never block: events
	// that do not fit are dropped.
	Events chan<- ConnEvent
}

// ConnEventType is what happened to a connection (rdma_cm event names).
type ConnEventType uint8

// Connection events.
const (
	ConnectRequest  ConnEventType = iota + 1 // RDMA_CM_EVENT_CONNECT_REQUEST
	ConnectResponse                          // REP received (active side, before RTU)
	Established                              // RDMA_CM_EVENT_ESTABLISHED
	Rejected                                 // RDMA_CM_EVENT_REJECTED
	Unreachable                              // RDMA_CM_EVENT_UNREACHABLE
	Disconnected                             // RDMA_CM_EVENT_DISCONNECTED
	TimeWaitExit                             // RDMA_CM_EVENT_TIMEWAIT_EXIT
)

var connEventNames = [...]string{"", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE",
	"RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_UNREACHABLE",
	"RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_TIMEWAIT_EXIT"}

// String returns the rdma_cm event name.
func (t ConnEventType) String() string {
	if int(t) < len(connEventNames) && t != 0 {
		return connEventNames[t]
	}
	return fmt.Sprintf("ConnEventType(%d)", uint8(t))
}

// ConnEvent is one entry of the event stream.
type ConnEvent struct {
	Type          ConnEventType
	ID            uint32 // local communication ID
	Local, Remote netip.AddrPort
	Err           error // Rejected: *RejectError; Unreachable: ErrTimeout
}

// ConnParam is what a side offers for a connection (struct
// rdma_conn_param plus the QP identity rdma_cm takes from the QP).
type ConnParam struct {
	QPN uint32 // the local RC QP
	// StartingPSN is the first PSN the local receive queue expects (rq_psn;
	// 24 bits; see RandomPSN). Linux's CM uses the REQ/REP starting PSN
	// this way (cm.c ib_send_cm_req: rq_psn = REQ starting PSN), and rping
	// captures confirm it: the active side sends from the REP's PSN, the
	// passive side from the REQ's.
	StartingPSN        uint32
	ResponderResources uint8  // RDMA READs/atomics we accept at once
	InitiatorDepth     uint8  // RDMA READs/atomics we issue at once
	RetryCount         uint8  // 3 bits (7 = infinite on rxe)
	RNRRetryCount      uint8  // 3 bits
	PrivateData        []byte // ≤ 56 bytes in a REQ, ≤ 196 in a REP
	// Ready is called with the negotiated parameters before the CM commits:
	// before REP is sent (Accept) or before RTU is sent (Dial). Move the QP
	// to RTR and RTS here. An error rejects the connection.
	Ready func(QPParams) error
}

// QPParams is what the caller needs to move its RC QP INIT→RTR→RTS (the
// attributes rdma_init_qp_attr would return).
type QPParams struct {
	LocalAddr, RemoteAddr netip.Addr // the GIDs as IP addresses
	LocalQPN, RemoteQPN   uint32     // dest_qp_num = RemoteQPN
	SQPSN                 uint32     // sq_psn: the peer's advertised starting PSN
	RQPSN                 uint32     // rq_psn: our advertised starting PSN
	MaxRdAtomic           uint8      // max_rd_atomic: READs we may have outstanding
	MaxDestRdAtomic       uint8      // max_dest_rd_atomic: READs we accept
	PathMTU               uint8      // MTU enum
	Timeout               uint8      // local ACK timeout code
	RetryCount            uint8
	RNRRetry              uint8
	FlowLabel             uint32 // 20 bits, from the REQ
	UDPSourcePort         uint16 // derived from FlowLabel as rxe does
	HopLimit              uint8
	TrafficClass          uint8
}

// RandomPSN returns a random 24-bit starting PSN, as rdma_cm picks one.
func RandomPSN() uint32 { return rand.Uint32() & 0xFFFFFF }

// Manager runs the CM for one port: it owns a Machine, reads MADs from a
// MADConn on its own goroutine and drives the retransmission timer.
type Manager struct {
	conn MADConn
	cfg  ManagerConfig
	addr netip.Addr

	mu        sync.Mutex // mu guards everything below
	m         *Machine
	timer     *time.Timer
	listeners map[uint64]*Listener
	grace     map[uint64]*listenGrace // ports whose listener closed less than ListenGrace ago
	adopt     []Event                 // requests held in a grace, for the listener that opened on their port
	udListen  map[uint64]*UDListener
	handles   map[uint32]*handle
	closed    bool
	dropped   uint64 // events dropped on a full ConnEvent channel

	readDone chan struct{}
}

// handle is the Manager's record of one communication ID.
type handle struct {
	id            uint32
	sid           uint64 // the service ID a passive connection was requested on (0: active)
	local, remote netip.AddrPort
	ev            chan Event // machine events for this ID; handleEvents buffered
	conn          *Conn
}

// handleEvents is how many machine events a handle holds for the Accept or
// Dial that waits on it: the most either waits for is REP and then a REJ.
// Events that do not fit are dropped; none is waited for once they return.
// Every pending connection has one, so it stays small.
const handleEvents = 2

// NewManager starts a CM on conn. Close stops it.
func NewManager(conn MADConn, cfg ManagerConfig) *Manager {
	if cfg.PathMTU == 0 {
		cfg.PathMTU = 3
	}
	if cfg.CMResponseTimeout == 0 {
		cfg.CMResponseTimeout = DefaultCMResponseTimeout
	}
	if cfg.MaxCMRetries == 0 {
		cfg.MaxCMRetries = DefaultMaxCMRetries
	}
	if cfg.PacketLifetime == 0 {
		cfg.PacketLifetime = DefaultPacketLifetime
	}
	if cfg.HopLimit == 0 {
		cfg.HopLimit = 64
	}
	mc := &cfg.Machine
	if sp, ok := conn.(CommIDSpace); ok {
		prefix, mask := sp.CommIDs()
		r := mc.Rand
		if r == nil {
			r = rand.Uint32
		}
		mc.Rand = func() uint32 { return prefix | r()&mask }
	}
	mc.MaxPending = orDefault(mc.MaxPending, DefaultMaxPending)
	mc.MaxUnansweredPerPeer = orDefault(mc.MaxUnansweredPerPeer, DefaultMaxUnansweredPerPeer)
	mc.PendingTimeout = orDefault(mc.PendingTimeout, DefaultPendingTimeout)
	mc.MaxTimeWait = orDefault(mc.MaxTimeWait, DefaultMaxTimeWait)
	mg := &Manager{conn: conn, cfg: cfg, addr: conn.LocalAddr().Unmap(), m: NewMachine(cfg.Machine),
		listeners: map[uint64]*Listener{}, grace: map[uint64]*listenGrace{}, udListen: map[uint64]*UDListener{}, handles: map[uint32]*handle{},
		readDone: make(chan struct{})}
	mg.timer = time.AfterFunc(time.Hour, mg.onTimer)
	mg.timer.Stop()
	go mg.readLoop()
	return mg
}

// DroppedEvents returns how many ConnEvents did not fit the Events channel.
func (mg *Manager) DroppedEvents() uint64 {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	return mg.dropped
}

// orDefault is v, or def when v is zero, or zero (no bound) when v is negative.
func orDefault[T int | time.Duration](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// Stats returns the state machine's counters.
func (mg *Manager) Stats() Stats {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	return mg.m.Stats()
}

// Pending returns how many passive connections wait for their RTU.
func (mg *Manager) Pending() int {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	return mg.m.Pending()
}

// Close stops the Manager and closes the MADConn. Connections are not
// disconnected: call Conn.Disconnect first.
func (mg *Manager) Close() error {
	mg.mu.Lock()
	if mg.closed {
		mg.mu.Unlock()
		return nil
	}
	// An established connection ends with a DREQ, as the kernel's CM sends
	// one for every connection of a process that exits: the peer learns at
	// once instead of when its QP times out. It is sent once; no DREP is
	// awaited.
	now := time.Now()
	for _, h := range mg.handles {
		if h.conn != nil && mg.m.Disconnect(now, h.id, nil) == nil {
			mg.flushLocked()
		}
	}
	mg.closed = true
	mg.timer.Stop()
	for _, l := range mg.listeners {
		l.closeLocked()
	}
	for _, l := range mg.udListen {
		l.closeLocked()
	}
	for sid := range mg.grace {
		mg.endGraceLocked(sid)
	}
	for _, h := range mg.handles {
		if h.conn != nil {
			h.conn.finish(net.ErrClosed)
		}
	}
	mg.mu.Unlock()
	err := mg.conn.Close()
	<-mg.readDone
	return err
}

func (mg *Manager) readLoop() {
	defer close(mg.readDone)
	buf := make([]byte, MADLen+64)
	for {
		n, from, err := mg.conn.ReadMAD(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		mg.mu.Lock()
		if !mg.closed {
			mg.m.Receive(time.Now(), from.Unmap(), buf[:n])
			mg.flushLocked()
		}
		mg.mu.Unlock()
	}
}

func (mg *Manager) onTimer() {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	if mg.closed {
		return
	}
	mg.m.Tick(time.Now())
	mg.flushLocked()
}

// flushLocked sends the machine's MADs, dispatches its events and re-arms
// the timer.
func (mg *Manager) flushLocked() {
	for {
		out, events := mg.m.Drain()
		if len(out) == 0 && len(events) == 0 {
			break
		}
		for _, d := range out {
			mg.conn.WriteMAD(d.MAD, d.Peer) // a lost MAD is retransmitted by the machine
		}
		for _, ev := range events {
			mg.dispatchLocked(ev)
		}
	}
	if d, ok := mg.m.Deadline(); ok {
		mg.timer.Reset(max(time.Until(d), 0))
	} else {
		mg.timer.Stop()
	}
}

func (mg *Manager) publishLocked(t ConnEventType, h *handle, id uint32, err error) {
	if mg.cfg.Events == nil || mg.closed {
		return
	}
	ev := ConnEvent{Type: t, ID: id, Err: err}
	if h != nil {
		ev.Local, ev.Remote = h.local, h.remote
	}
	select {
	case mg.cfg.Events <- ev:
	default:
		mg.dropped++
	}
}

func (mg *Manager) dispatchLocked(ev Event) {
	h := mg.handles[ev.ID]
	switch ev.Type {
	case EventConnectRequest:
		mg.onConnectRequestLocked(ev)
		return
	case EventReply:
		mg.publishLocked(ConnectResponse, h, ev.ID, nil)
	case EventEstablished:
		mg.publishLocked(Established, h, ev.ID, nil)
	case EventRejected:
		mg.publishLocked(Rejected, h, ev.ID, ev.Err)
	case EventUnreachable:
		mg.publishLocked(Unreachable, h, ev.ID, ev.Err)
	case EventDisconnectRequest:
		// rdma_cm reports DISCONNECTED and the application's
		// rdma_disconnect answers with DREP; we answer at once.
		mg.m.Disconnect(time.Now(), ev.ID, nil)
		return
	case EventDisconnected:
		mg.publishLocked(Disconnected, h, ev.ID, ev.Err)
	case EventTimeWaitExit:
		mg.publishLocked(TimeWaitExit, h, ev.ID, nil)
		delete(mg.handles, ev.ID)
		return
	case EventSIDRRequest:
		mg.onSIDRRequestLocked(ev)
		return
	case EventSIDRReply:
	}
	if h == nil {
		return
	}
	if mg.m.State(ev.ID) == StateIdle {
		delete(mg.handles, ev.ID) // the machine forgot it (REJ received, REQ unanswered)
	}
	if h.conn != nil && (ev.Type == EventDisconnected || ev.Type == EventRejected || ev.Type == EventUnreachable) {
		h.conn.finish(ev.Err)
	}
	select {
	case h.ev <- ev:
	default:
	}
}

func (mg *Manager) onConnectRequestLocked(ev Event) {
	now := time.Now()
	req := ev.REQ
	l := mg.listeners[req.ServiceID]
	if g := mg.grace[req.ServiceID]; l == nil && g != nil {
		g.held = append(g.held, ev) // a listener may open on the port again
		return
	}
	ch, user, err := ParseCMA(req.PrivateData)
	if l == nil || err != nil || (l.addr.Addr().IsValid() && !l.addr.Addr().IsUnspecified() && ch.Dst != l.addr.Addr()) {
		reason := RejInvalidServiceID
		if l != nil && err != nil {
			reason = RejConsumerDefined
		}
		mg.m.Reject(now, ev.ID, reason, nil)
		return
	}
	_, port, _ := SplitServiceID(req.ServiceID)
	h := &handle{id: ev.ID, sid: req.ServiceID, local: netip.AddrPortFrom(ch.Dst, port),
		remote: netip.AddrPortFrom(ch.Src, ch.SrcPort), ev: make(chan Event, handleEvents)}
	mg.handles[ev.ID] = h
	r := &ConnRequest{mg: mg, h: h, req: req, Local: h.local, Remote: h.remote,
		PrivateData: append([]byte(nil), user...), peer: ev.Peer}
	select {
	case l.reqs <- r:
		mg.publishLocked(ConnectRequest, h, ev.ID, nil)
	default:
		// The backlog is full: drop the REQ unanswered so that the peer
		// retries, as ucma does (its event handler fails with -ENOMEM).
		delete(mg.handles, ev.ID)
		mg.m.Discard(ev.ID)
	}
}

// Listener receives connection requests for one port (rdma_listen).
type Listener struct {
	requestQueue[*ConnRequest]
}

// Listen accepts connection requests to addr's port in the TCP port space
// (rdma_bind_addr + rdma_listen(id, backlog)). An unspecified address accepts
// requests for any address of this port. backlog is how many requests may
// wait for GetRequest, as rdma_listen's: 0 or less, or more than MaxBacklog,
// is MaxBacklog. A request beyond it is dropped unanswered (counted in
// Stats.Discarded), and the peer's CM sends it again.
func (mg *Manager) Listen(addr netip.AddrPort, backlog int) (*Listener, error) {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	l := &Listener{}
	if err := l.listenLocked(mg, addr, PortSpaceTCP, backlog); err != nil {
		return nil, err
	}
	mg.listeners[l.serviceID] = l
	held := mg.adopt
	mg.adopt = nil
	for _, ev := range held {
		mg.onConnectRequestLocked(ev)
	}
	mg.flushLocked()
	return l, nil
}

// Addr returns the listened address.
func (l *Listener) Addr() netip.AddrPort { return l.addr }

// GetRequest waits for the next connection request (rdma_get_request).
func (l *Listener) GetRequest(ctx context.Context) (*ConnRequest, error) { return l.get(ctx) }

// Close stops listening; pending requests are rejected.
func (l *Listener) Close() error {
	l.mg.mu.Lock()
	defer l.mg.mu.Unlock()
	l.closeLocked()
	return nil
}

func (l *Listener) closeLocked() {
	l.requestQueue.closeLocked(func() {
		delete(l.mg.listeners, l.serviceID)
		l.mg.startGraceLocked(l.serviceID)
	}, func(now time.Time, r *ConnRequest) { l.mg.m.Reject(now, r.h.id, RejConsumerDefined, nil) })
}

// ListenGrace is how long a port whose listener closed keeps the connection
// requests that arrive for it, for a listener that opens on it again, before
// it rejects them as a port nobody listens on is (REJ, invalid service ID).
// A program that serves one connection per listener and listens again on the
// same port (perftest -R: one listener for its parameter exchange, then a
// new one for the test's connection) races its peer, whose next REQ can
// arrive in between; rdma_cm programs take that REJ as fatal (perftest's
// client then fails, or crashes in its retry path). rxe's kernel CM leaves the
// gap open, but its peers take longer to resolve a route than the listener
// takes to open. The grace lasts while a connection the closed listener
// accepted is still up (perftest's exchange runs over one, and took 1.4 s on
// a loaded host), then ListenGrace more, and never beyond ListenGraceMax. A
// request held past its sender's response timeout is kept alive by the MRA
// the machine answers its retransmission with. Requests held are bounded by
// the manager's pending caps.
const (
	ListenGrace    = time.Second
	ListenGraceMax = 10 * time.Second
)

// listenGrace is a port in its grace: the machine still accepts its requests.
type listenGrace struct {
	timer *time.Timer
	until time.Time // ListenGraceMax after the listener closed
	held  []Event   // connection requests that arrived in the grace
}

// startGraceLocked begins sid's grace as its listener closes; a manager that
// is closing unlistens at once.
func (mg *Manager) startGraceLocked(sid uint64) {
	if mg.closed {
		mg.unlistenLocked(sid, false)
		return
	}
	g := &listenGrace{until: time.Now().Add(ListenGraceMax)}
	g.timer = time.AfterFunc(ListenGrace, func() {
		mg.mu.Lock()
		defer mg.mu.Unlock()
		if mg.grace[sid] != g {
			return
		}
		if left := time.Until(g.until); left > 0 && mg.acceptedUpLocked(sid) {
			g.timer.Reset(min(ListenGrace, left))
			return
		}
		mg.endGraceLocked(sid)
		mg.flushLocked()
	})
	mg.grace[sid] = g
}

// acceptedUpLocked reports whether a connection accepted on sid is still up.
// It looks at every handle, at most once per ListenGrace per port in grace.
func (mg *Manager) acceptedUpLocked(sid uint64) bool {
	for _, h := range mg.handles {
		if h.sid == sid && mg.m.State(h.id) == StateEstablished {
			return true
		}
	}
	return false
}

// endGraceLocked ends sid's grace with no listener back: the port stops
// taking requests, and those it held are rejected as they would have been on
// arrival.
func (mg *Manager) endGraceLocked(sid uint64) {
	g := mg.grace[sid]
	delete(mg.grace, sid)
	g.timer.Stop()
	mg.unlistenLocked(sid, false)
	now := time.Now()
	for _, ev := range g.held {
		delete(mg.handles, ev.ID)
		mg.m.Reject(now, ev.ID, RejInvalidServiceID, nil)
	}
}

// unlistenLocked stops the machine taking requests for sid and gives
// roced's claim on it back when the device is attached (ServiceClaimer).
func (mg *Manager) unlistenLocked(sid uint64, ud bool) {
	mg.m.Unlisten(sid)
	if c, ok := mg.conn.(ServiceClaimer); ok {
		c.ReleaseService(sid, ud)
	}
}

// ConnRequest is a received REQ waiting for Accept or Reject.
type ConnRequest struct {
	Local, Remote netip.AddrPort // the rdma_cm addresses and ports
	PrivateData   []byte         // the application's part (after the rdma_cm header)

	mg   *Manager
	h    *handle
	req  *REQ // the event's copy, the ConnRequest's own
	peer netip.Addr
}

// REQ returns the request as received.
func (r *ConnRequest) REQ() REQ { return *r.req }

// QPParams returns the QP attributes Accept with p would negotiate.
func (r *ConnRequest) QPParams(p ConnParam) QPParams {
	p = defaults(p)
	q := r.req
	return QPParams{
		LocalAddr: r.mg.addr, RemoteAddr: r.peer,
		LocalQPN: p.QPN, RemoteQPN: q.LocalQPN,
		SQPSN: q.StartingPSN, RQPSN: p.StartingPSN & 0xFFFFFF,
		MaxRdAtomic:     min(p.InitiatorDepth, q.ResponderResources),
		MaxDestRdAtomic: p.ResponderResources,
		PathMTU:         reqPathMTU(q.PathMTU, r.mg.cfg.PathMTU),
		Timeout:         q.Primary.LocalACKTimeout,
		RetryCount:      q.RetryCount, RNRRetry: q.RNRRetryCount,
		FlowLabel: q.Primary.FlowLabel, UDPSourcePort: bth.FlowLabelSourcePort(q.Primary.FlowLabel),
		HopLimit: q.Primary.HopLimit, TrafficClass: q.Primary.TrafficClass,
	}
}

// reqPathMTU is the passive side's path MTU: the REQ's, as cm.c gives the QP
// (cm_init_qp_rtr_attr takes the path MTU of the REQ). The active side uses the
// MTU it put in the REQ and learns nothing from the REP, so any other choice
// leaves the two sides with different MTUs: a READ response of one packet at the
// peer's MTU is then a bad response at ours. A REQ without a valid MTU gets ours.
func reqPathMTU(req, own uint8) uint8 {
	if req < 1 || req > 5 {
		return own
	}
	return req
}

func defaults(p ConnParam) ConnParam {
	if p.ResponderResources == 0 {
		p.ResponderResources = 1
	}
	if p.InitiatorDepth == 0 {
		p.InitiatorDepth = 1
	}
	return p
}

// Accept answers the request (rdma_accept): it calls p.Ready with the
// negotiated QP attributes, sends REP and waits for RTU.
func (r *ConnRequest) Accept(ctx context.Context, p ConnParam) (*Conn, error) {
	p = defaults(p)
	if len(p.PrivateData) > REPPrivateDataLen {
		return nil, fmt.Errorf("cm: accept: %w", ErrPrivateDataTooLong)
	}
	qp := r.QPParams(p)
	if p.Ready != nil {
		if err := p.Ready(qp); err != nil {
			r.Reject(nil)
			return nil, fmt.Errorf("cm: accept %v: %w", r.Remote, err)
		}
	}
	mg := r.mg
	c := newConn(mg, r.h, qp)
	mg.mu.Lock()
	if mg.closed {
		mg.mu.Unlock()
		return nil, net.ErrClosed
	}
	err := mg.m.Accept(time.Now(), r.h.id, REP{LocalQPN: p.QPN, StartingPSN: p.StartingPSN & 0xFFFFFF,
		ResponderResources: qp.MaxDestRdAtomic, InitiatorDepth: qp.MaxRdAtomic,
		TargetACKDelay: 15, RNRRetryCount: p.RNRRetryCount, LocalCAGUID: mg.cfg.CAGUID, PrivateData: p.PrivateData})
	if err == nil {
		r.h.conn = c
		mg.flushLocked()
	}
	mg.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("cm: accept %v: %w", r.Remote, err)
	}
	for {
		select {
		case ev := <-r.h.ev:
			switch ev.Type {
			case EventEstablished:
				return c, nil
			case EventRejected, EventUnreachable, EventDisconnected:
				return nil, fmt.Errorf("cm: accept %v: %w", r.Remote, ev.Err)
			}
		case <-mg.readDone:
			return nil, net.ErrClosed
		case <-ctx.Done():
			c.abort()
			return nil, ctx.Err()
		}
	}
}

// Reject refuses the request with REJ reason "consumer defined" (28) and
// optional private data (rdma_reject).
func (r *ConnRequest) Reject(privateData []byte) error {
	r.mg.mu.Lock()
	defer r.mg.mu.Unlock()
	if r.mg.closed {
		return net.ErrClosed
	}
	err := r.mg.m.Reject(time.Now(), r.h.id, RejConsumerDefined, privateData)
	r.mg.flushLocked()
	return err
}

// Dial connects from local to remote (rdma_resolve_addr, rdma_resolve_route,
// rdma_connect). An unspecified local address means the Manager's; port 0
// picks a random one. It calls p.Ready after REP and sends RTU when Ready
// returns nil. The CM gives up after MaxCMRetries+1 unanswered REQs with an
// error that Is(ErrTimeout); ctx bounds the whole exchange.
func (mg *Manager) Dial(ctx context.Context, local, remote netip.AddrPort, p ConnParam) (*Conn, error) {
	p = defaults(p)
	h, req, err := mg.dialREQ(local, remote, p)
	if err != nil {
		return nil, fmt.Errorf("cm: dial %v: %w", remote, err)
	}
	mg.mu.Lock()
	if mg.closed {
		mg.mu.Unlock()
		return nil, net.ErrClosed
	}
	h.id, err = mg.m.Connect(time.Now(), h.remote.Addr(), req)
	if err == nil {
		mg.handles[h.id] = h
		mg.flushLocked()
	}
	mg.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("cm: dial %v: %w", remote, err)
	}
	for {
		select {
		case ev := <-h.ev:
			switch ev.Type {
			case EventReply:
				return mg.dialReplied(h, &req, ev.REP, p, remote)
			case EventRejected, EventUnreachable:
				return nil, fmt.Errorf("cm: dial %v: %w", remote, ev.Err)
			}
		case <-mg.readDone:
			return nil, fmt.Errorf("cm: dial %v: %w", remote, net.ErrClosed)
		case <-ctx.Done():
			mg.mu.Lock()
			if !mg.closed {
				mg.m.Disconnect(time.Now(), h.id, nil)
				mg.flushLocked()
			}
			mg.mu.Unlock()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("cm: dial %v: %w", remote, &timeoutError{ctx.Err()})
			}
			return nil, fmt.Errorf("cm: dial %v: %w", remote, ctx.Err())
		}
	}
}

// dialREQ is the REQ of Dial, with its private data behind the rdma_cm
// header, and the handle that will follow it.
func (mg *Manager) dialREQ(local, remote netip.AddrPort, p ConnParam) (*handle, REQ, error) {
	la := local.Addr().Unmap()
	if !la.IsValid() || la.IsUnspecified() {
		la = mg.addr
	}
	lport := local.Port()
	if lport == 0 {
		lport = uint16(32768 + rand.IntN(61000-32768))
	}
	ra := remote.Addr().Unmap()
	priv, err := AppendCMA(nil, CMAHeader{SrcPort: lport, Src: la, Dst: ra}, p.PrivateData)
	if err != nil {
		return nil, REQ{}, err
	}
	if len(priv) > REQPrivateDataLen {
		return nil, REQ{}, fmt.Errorf("%w: %d bytes, at most %d", ErrPrivateDataTooLong,
			len(p.PrivateData), REQPrivateDataLen-CMAHeaderLen)
	}
	cfg := &mg.cfg
	req := REQ{ServiceID: ServiceID(PortSpaceTCP, remote.Port()), LocalCAGUID: cfg.CAGUID,
		LocalQPN: p.QPN, ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RemoteCMResponseTimeout: cfg.CMResponseTimeout, TransportServiceType: TransportRC,
		StartingPSN: p.StartingPSN & 0xFFFFFF, LocalCMResponseTimeout: cfg.CMResponseTimeout,
		RetryCount: p.RetryCount, PKey: GSIPKey, PathMTU: cfg.PathMTU, RNRRetryCount: p.RNRRetryCount,
		MaxCMRetries: cfg.MaxCMRetries,
		Primary: Path{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: GIDFromAddr(la), RemoteGID: GIDFromAddr(ra),
			FlowLabel: FlowLabel(lport, remote.Port()), TrafficClass: cfg.TrafficClass, HopLimit: cfg.HopLimit,
			LocalACKTimeout: cfg.PacketLifetime + 1},
		PrivateData: priv}
	h := &handle{local: netip.AddrPortFrom(la, lport), remote: netip.AddrPortFrom(ra, remote.Port()), ev: make(chan Event, handleEvents)}
	return h, req, nil
}

// dialReplied finishes Dial once the REP of req arrived: p.Ready gets the
// QP attributes, and RTU goes out unless Ready failed (then REJ).
func (mg *Manager) dialReplied(h *handle, req *REQ, rep *REP, p ConnParam, remote netip.AddrPort) (*Conn, error) {
	cfg := &mg.cfg
	fl := req.Primary.FlowLabel
	qp := QPParams{LocalAddr: h.local.Addr(), RemoteAddr: h.remote.Addr(), LocalQPN: p.QPN, RemoteQPN: rep.LocalQPN,
		SQPSN: rep.StartingPSN, RQPSN: req.StartingPSN,
		MaxRdAtomic: min(p.InitiatorDepth, rep.ResponderResources), MaxDestRdAtomic: p.ResponderResources,
		PathMTU: cfg.PathMTU, Timeout: req.Primary.LocalACKTimeout,
		RetryCount: p.RetryCount, RNRRetry: rep.RNRRetryCount,
		FlowLabel: fl, UDPSourcePort: bth.FlowLabelSourcePort(fl), HopLimit: cfg.HopLimit, TrafficClass: cfg.TrafficClass}
	if p.Ready != nil {
		if err := p.Ready(qp); err != nil {
			mg.mu.Lock()
			if !mg.closed {
				mg.m.Reject(time.Now(), h.id, RejConsumerDefined, nil)
				mg.flushLocked()
			}
			mg.mu.Unlock()
			return nil, fmt.Errorf("cm: dial %v: %w", remote, err)
		}
	}
	c := newConn(mg, h, qp)
	c.PrivateData = rep.PrivateData
	mg.mu.Lock()
	if mg.closed {
		mg.mu.Unlock()
		return nil, net.ErrClosed
	}
	err := mg.m.ReadyToUse(h.id, nil)
	if err == nil {
		h.conn = c
	}
	mg.flushLocked()
	mg.mu.Unlock()
	if err != nil {
		// The connection died between REP and RTU.
		return nil, fmt.Errorf("cm: dial %v: %w", remote, err)
	}
	mg.mu.Lock()
	mg.publishLocked(Established, h, h.id, nil)
	mg.mu.Unlock()
	return c, nil
}

// timeoutError is a context deadline that also reads as ETIMEDOUT.
type timeoutError struct{ err error }

func (e *timeoutError) Error() string { return e.err.Error() }
func (e *timeoutError) Is(target error) bool {
	return target == syscall.ETIMEDOUT || target == ErrTimeout || errors.Is(e.err, target)
}
func (e *timeoutError) Unwrap() error { return e.err }

// Conn is an established connection.
type Conn struct {
	LocalAddr, RemoteAddr netip.AddrPort
	// QP holds the negotiated attributes (already passed to Ready).
	QP QPParams
	// PrivateData is the peer's REP private data (active side).
	PrivateData []byte

	mg   *Manager
	h    *handle
	done chan struct{}
	once sync.Once
	err  error // set before done is closed
}

func newConn(mg *Manager, h *handle, qp QPParams) *Conn {
	return &Conn{LocalAddr: h.local, RemoteAddr: h.remote, QP: qp, mg: mg, h: h, done: make(chan struct{})}
}

func (c *Conn) finish(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.done)
	})
}

func (c *Conn) abort() {
	c.mg.mu.Lock()
	if !c.mg.closed {
		c.mg.m.Disconnect(time.Now(), c.h.id, nil)
		c.mg.flushLocked()
	}
	c.mg.mu.Unlock()
	c.finish(net.ErrClosed)
}

// ID returns the local communication ID.
func (c *Conn) ID() uint32 { return c.h.id }

// Done is closed when the connection ends: the peer disconnected (DREQ or
// REJ) or Disconnect finished. Move the QP to the error state then.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended (nil for an orderly disconnect)
// once Done is closed.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Disconnect sends DREQ and waits for DREP, the CM timeout, or ctx
// (rdma_disconnect). It returns nil when the peer disconnected first.
func (c *Conn) Disconnect(ctx context.Context) error {
	mg := c.mg
	mg.mu.Lock()
	if mg.closed {
		mg.mu.Unlock()
		return net.ErrClosed
	}
	err := mg.m.Disconnect(time.Now(), c.h.id, nil)
	mg.flushLocked()
	mg.mu.Unlock()
	if errors.Is(err, ErrUnknownID) {
		return nil // already gone through timewait
	}
	if err != nil {
		return fmt.Errorf("cm: disconnect %v: %w", c.RemoteAddr, err)
	}
	select {
	case <-c.done:
		if c.err != nil && !errors.Is(c.err, ErrTimeout) {
			return fmt.Errorf("cm: disconnect %v: %w", c.RemoteAddr, c.err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
