package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/tool/pingpong"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

// pingpongKind is which stock tool a session serves.
type pingpongKind uint8

const (
	kindRC  pingpongKind = iota // ibv_rc_pingpong: one RC QP
	kindSRQ                     // ibv_srq_pingpong: num_qp RC QPs on one SRQ
	kindUD                      // ibv_ud_pingpong: one UD QP
)

func (k pingpongKind) String() string {
	return [...]string{"rc", "srq", "ud"}[k]
}

// Pingpong responder tuning. The stock clients keep one message in flight per QP (they
// send the next ping only after the pong arrived), so a few receive slots per QP are
// plenty; when all are busy the client gets an RNR NAK and retries (rnr_retry 7).
const (
	ppSlotsPerQP = 4
	// ppSRQDetect is how long a session waits after the first 52-byte record for more
	// bytes: ibv_srq_pingpong writes its 256 records back to back, ibv_rc_pingpong
	// writes one and waits for the answer.
	ppSRQDetect = 250 * time.Millisecond
	// ppMaxExchanges bounds the TCP connections still in their exchange (a
	// goroutine and a 13 KiB read buffer each; no verbs objects yet).
	ppMaxExchanges = 256
)

// Why a pingpong connection was refused: the roce_pingpong_refused_total reasons.
type refusal uint8

const (
	refusedSessions  refusal = iota // every session slot taken (after the exchange read the records)
	refusedExchanges                // ppMaxExchanges connections still exchanging (at accept)
	refusedKind                     // the client's kind is switched off
	numRefusals
)

func (r refusal) String() string { return [...]string{"sessions", "exchanges", "kind"}[r] }

// errNoSlot fails an exchange whose client arrived with every session slot taken.
var errNoSlot = errors.New("every session slot is taken")

// ppStats counts pingpong sessions for the metrics. One instance is shared by every
// responder of the daemon; the collector reads it at scrape time.
type ppStats struct {
	active   [3]atomic.Int64  // sessions serving messages now, by kind
	started  [3]atomic.Uint64 // sessions that completed the exchange, by kind
	messages [3]atomic.Uint64 // messages echoed, by kind
	failed   atomic.Uint64    // connections whose exchange failed (bad records, timeouts)
	refused  [numRefusals]atomic.Uint64
	ends     [3][numEnds]atomic.Uint64 // sessions that ended, by kind and why
}

// sessionEnd is why a responder session ended: the reason label of
// roce_pingpong_session_ends_total and roce_rping_session_ends_total.
type sessionEnd uint8

const (
	endDisconnect sessionEnd = iota // the client disconnected (rping's DREQ)
	endIdle                         // the client went quiet for the idle limit
	endError                        // a transfer or the protocol failed
	endShutdown                     // roced is stopping
	numEnds
)

func (e sessionEnd) String() string { return [...]string{"disconnect", "idle", "error", "shutdown"}[e] }

// pingpongConfig configures a pingpongResponder.
type pingpongConfig struct {
	stats   *ppStats
	kinds   []pingpongKind // what the port serves: {kindRC, kindSRQ} or {kindUD}
	mtu     roce.MTU
	maxSize int           // largest message a client may send (ibv_*_pingpong -s)
	idle    time.Duration // a session without a message for this long ends
	// exchange bounds the TCP exchange, from accept to "done".
	exchange time.Duration
	// maxSessions bounds the sessions with verbs objects: each registers
	// slots × maxSize bytes. A slot is taken once the client's records are
	// read, so idle TCP connections never hold one.
	maxSessions int
}

// pingpongResponder is the server side of ibv_rc_pingpong, ibv_srq_pingpong or
// ibv_ud_pingpong: for each TCP connection it creates the QPs, swaps addresses with
// the oob package and then echoes every message it receives back to the sender, which
// is what the stock server's loop amounts to (it answers each receive with one send
// of the same size). The stock tools never send their iteration count, so echoing is
// the only server behaviour that works for any -n.
type pingpongResponder struct {
	name string
	dev  *roce.Device
	ln   net.Listener
	cfg  pingpongConfig
	log  *slog.Logger

	ctx    context.Context // cancelled by Close: ends exchanges in progress
	cancel context.CancelFunc

	// mu guards: sessions, exchanging, slots, closed.
	mu         sync.Mutex
	sessions   map[*ppSession]struct{} // every connection, exchanging or served
	exchanging int                     // connections before their records are read
	slots      int                     // sessions holding verbs objects
	closed     bool
	wg         sync.WaitGroup // one per session goroutine
	warn       logEvery       // refusals, rate-limited
}

func newPingpongResponder(name string, dev *roce.Device, tcp netip.AddrPort, cfg pingpongConfig, log *slog.Logger) (*pingpongResponder, error) {
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(tcp))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%s responder: TCP %s is in use (a stock pingpong server or another roced?); pick another port or switch the responder off", name, tcp)
		}
		return nil, fmt.Errorf("%s responder: TCP %s: %w", name, tcp, unwrapOp(err))
	}
	r := &pingpongResponder{
		name:     name,
		dev:      dev,
		ln:       ln,
		cfg:      cfg,
		log:      log.With("responder", name),
		sessions: make(map[*ppSession]struct{}),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// Name implements responder.
func (r *pingpongResponder) Name() string { return r.name }

// Addr implements responder.
func (r *pingpongResponder) Addr() net.Addr { return r.ln.Addr() }

// Serve implements responder: it accepts connections until Close.
func (r *pingpongResponder) Serve() error {
	var backoff time.Duration
	for {
		conn, err := r.ln.Accept()
		if err != nil {
			if r.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				r.log.Warn("accept failed; retrying", "err", err, "in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			conn.Close()
			return nil
		}
		if r.exchanging >= ppMaxExchanges {
			r.mu.Unlock()
			r.refuse(refusedExchanges, conn.RemoteAddr())
			conn.Close()
			continue
		}
		r.exchanging++
		s := &ppSession{r: r, conn: conn, stop: make(chan struct{}), deadline: time.Now().Add(r.cfg.exchange)}
		r.sessions[s] = struct{}{}
		r.wg.Add(1)
		r.mu.Unlock()
		go s.run()
	}
}

// refuse counts a refused connection and logs it, rate-limited.
func (r *pingpongResponder) refuse(why refusal, client net.Addr) {
	r.cfg.stats.refused[why].Add(1)
	r.warn.log(r.log, "refusing pingpong clients", "reason", why.String(), "client", client.String(),
		"max_sessions", r.cfg.maxSessions, "max_exchanges", ppMaxExchanges)
}

// takeSlot reserves a session slot; false when all are taken.
func (r *pingpongResponder) takeSlot() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.slots >= r.cfg.maxSessions {
		return false
	}
	r.slots++
	return true
}

// exchanged ends a connection's exchange phase (records read, or failed).
func (r *pingpongResponder) exchanged() {
	r.mu.Lock()
	r.exchanging--
	r.mu.Unlock()
}

// Close implements responder: stop accepting, move every session's QPs to ERR so the
// peers see their work flushed, and wait for the sessions to clean up.
func (r *pingpongResponder) Close(deadline time.Time) {
	r.mu.Lock()
	r.closed = true
	sessions := make([]*ppSession, 0, len(r.sessions))
	for s := range r.sessions {
		sessions = append(sessions, s)
	}
	r.mu.Unlock()
	r.cancel()
	r.ln.Close()
	for _, s := range sessions {
		s.abort()
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		r.log.Warn("sessions still running at the drain deadline", "count", len(sessions))
	}
}

// ppSession is one client: its QPs, CQ, optional SRQ, and one registered buffer cut
// into receive slots.
type ppSession struct {
	r    *pingpongResponder
	conn net.Conn
	kind pingpongKind
	log  *slog.Logger

	sess *pingpong.Session
	byQP map[uint32]*ppQP

	stopOnce sync.Once
	stop     chan struct{}
	msgs     uint64
	deadline time.Time // of the TCP exchange
	slotted  bool      // holds a session slot
	inExch   bool      // still counted in exchanging
}

// ppQP is one QP of a session and where its echoes go.
type ppQP struct {
	i      int // in sess.QPs
	remote oob.Dest
}

// WRIDs: the slot index, with the top bit set for sends (an echo sent from a slot).
const wridSend = 1 << 63

func (s *ppSession) run() {
	defer s.r.wg.Done()
	s.inExch = true
	defer func() {
		s.r.mu.Lock()
		delete(s.r.sessions, s)
		if s.inExch {
			s.r.exchanging--
		}
		if s.slotted {
			s.r.slots--
		}
		s.r.mu.Unlock()
	}()
	s.log = s.r.log.With("client", s.conn.RemoteAddr().String())
	defer s.destroy()

	conn, n, err := s.detect()
	if err != nil {
		s.conn.Close()
		s.r.cfg.stats.failed.Add(1)
		s.log.Info("pingpong exchange failed", "err", err)
		return
	}
	if !slices.Contains(s.r.cfg.kinds, s.kind) {
		s.conn.Close()
		s.r.refuse(refusedKind, s.conn.RemoteAddr())
		s.log.Info("pingpong session refused: its kind is switched off", "kind", s.kind.String())
		return
	}
	ctx, cancel := context.WithDeadline(s.r.ctx, s.deadline)
	remote, err := oob.ServerExchange(ctx, conn, n, s.connect)
	cancel()
	s.conn.Close() // the stock tools close the socket after the exchange
	if errors.Is(err, errNoSlot) {
		s.r.refuse(refusedSessions, s.conn.RemoteAddr())
		return
	}
	if err != nil {
		s.r.cfg.stats.failed.Add(1)
		s.log.Info("pingpong exchange failed", "kind", s.kind.String(), "err", err)
		return
	}
	st := s.r.cfg.stats
	st.started[s.kind].Add(1)
	st.active[s.kind].Add(1)
	defer st.active[s.kind].Add(-1)
	s.log.Info("session started", "kind", s.kind.String(), "qps", len(s.sess.QPs), "peer", remote[0].String())
	start := time.Now()
	end, reason := s.serve()
	st.ends[s.kind][end].Add(1)
	s.log.Info("session ended", "kind", s.kind.String(), "messages", s.msgs, "reason", reason, "duration", time.Since(start).Round(time.Millisecond))
}

// detect decides the session kind. On a UD port every client is ibv_ud_pingpong; on
// the RC port a client that sends more than one record right away is ibv_srq_pingpong
// (told apart even when only one of the two is served, so the other is refused, not
// misread).
// It returns a conn that replays the bytes it peeked and the record count.
func (s *ppSession) detect() (net.Conn, int, error) {
	if slices.Contains(s.r.cfg.kinds, kindUD) {
		s.kind = kindUD
		return s.conn, 1, nil
	}
	br := bufio.NewReaderSize(s.conn, oob.RecordLen*oob.SRQRecords)
	s.conn.SetReadDeadline(s.deadline)
	if _, err := br.Peek(oob.RecordLen); err != nil {
		return nil, 0, fmt.Errorf("reading the first record: %w", err)
	}
	s.conn.SetReadDeadline(time.Now().Add(ppSRQDetect))
	_, err := br.Peek(oob.RecordLen + 1)
	s.conn.SetReadDeadline(time.Time{})
	c := &peekedConn{Conn: s.conn, r: br}
	if err == nil {
		s.kind = kindSRQ
		return c, oob.SRQRecords, nil
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return nil, 0, err
	}
	s.kind = kindRC
	return c, 1, nil
}

// peekedConn reads through the bufio.Reader that detect peeked with.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connect is the ServerExchange callback: create the QPs for the client's records,
// post the receives, move the QPs to RTR and RTS, and return our records.
func (s *ppSession) connect(remote []oob.Dest) ([]oob.Dest, error) {
	// The client's records are in: the exchange phase is over, and the session
	// needs a slot before it creates anything.
	s.r.mu.Lock()
	s.inExch = false
	s.r.exchanging--
	s.r.mu.Unlock()
	if !s.r.takeSlot() {
		return nil, errNoSlot
	}
	s.slotted = true
	dests := remote
	if s.kind == kindSRQ {
		dests = nil
		for _, d := range remote {
			if d.IsZero() {
				break
			}
			dests = append(dests, d)
		}
		if len(dests) == 0 {
			return nil, fmt.Errorf("ibv_srq_pingpong client sent no QP: %w", syscall.EINVAL)
		}
	}
	// A client run without -g sends a zero GID; use its TCP address instead, the only
	// address RoCEv2 can reach it at.
	peerTCP, _ := netip.ParseAddrPort(s.conn.RemoteAddr().String())
	for i := range dests {
		if dests[i].GID == ([16]byte{}) {
			dests[i].GID = peerTCP.Addr().As16()
		}
	}
	if err := s.create(len(dests)); err != nil {
		return nil, err
	}
	local := make([]oob.Dest, len(dests))
	for i, d := range dests {
		s.byQP[s.sess.QPs[i].QPN()].remote = d
		psn := rand.Uint32() & 0xffffff
		if err := s.sess.Connect(i, psn, d, s.r.dev.GIDIndex(), s.r.cfg.mtu); err != nil {
			return nil, err
		}
		local[i] = oob.Dest{QPN: s.sess.QPs[i].QPN(), PSN: psn, GID: s.r.dev.GID()}
	}
	return local, nil
}

// create allocates the session's verbs objects and posts every receive slot.
// Every slot is either a posted receive or an echo in flight, so nslots
// completions can be outstanding at once.
func (s *ppSession) create(nqp int) error {
	nslots := ppSlotsPerQP * nqp
	spec := pingpong.Spec{Kind: pingpong.RC, QPs: nqp, Slots: nslots, SlotLen: s.r.cfg.maxSize,
		SendWR: ppSlotsPerQP, RecvWR: ppSlotsPerQP, CQE: nslots + 1}
	switch s.kind {
	case kindUD:
		spec.Kind, spec.SlotLen = pingpong.UD, s.r.cfg.mtu.Bytes()+pingpong.GRH
	case kindSRQ:
		spec.Kind = pingpong.SRQ
	}
	var err error
	s.sess, err = pingpong.Open(s.r.dev, spec)
	if err != nil {
		return err
	}
	s.byQP = make(map[uint32]*ppQP, nqp)
	for i, qp := range s.sess.QPs {
		s.byQP[qp.QPN()] = &ppQP{i: i}
	}
	for i := range nslots {
		if err := s.postRecv(i, i%nqp); err != nil {
			return err
		}
	}
	return nil
}

// postRecv gives slot i back to the receive queue (the SRQ, or QP qp's own).
func (s *ppSession) postRecv(i, qp int) error {
	_, err := s.sess.PostRecv(qp, []roce.RecvWR{{WRID: uint64(i), SGL: []roce.SGE{s.sess.SGE(i, 0, s.sess.SlotLen)}}})
	return err
}

// shuttingDown is the reason a session gives when the responder closes it.
const shuttingDown = "shutting down"

// serve echoes until the client goes quiet, a completion fails, or the responder
// closes. It returns why it stopped.
func (s *ppSession) serve() (sessionEnd, string) {
	wc := make([]roce.WC, 16)
	idle := time.NewTimer(s.r.cfg.idle)
	defer idle.Stop()
	for {
		n, err := s.sess.CQ.Poll(wc)
		if err != nil {
			return endError, "poll: " + err.Error()
		}
		if n == 0 {
			if err := s.sess.CQ.ReqNotify(false); err != nil {
				return endError, "notify: " + err.Error()
			}
			if n, _ = s.sess.CQ.Poll(wc); n == 0 {
				select {
				case <-s.sess.CQ.Notify():
					continue
				case <-idle.C:
					return endIdle, fmt.Sprintf("idle for %v", s.r.cfg.idle)
				case <-s.stop:
					return endShutdown, shuttingDown
				}
			}
		}
		for i := range wc[:n] {
			if reason := s.complete(&wc[i]); reason == shuttingDown {
				return endShutdown, reason
			} else if reason != "" {
				return endError, reason
			}
		}
		if !idle.Stop() {
			select {
			case <-idle.C:
			default:
			}
		}
		idle.Reset(s.r.cfg.idle)
	}
}

// complete handles one completion: a receive is echoed from its slot; a finished echo
// gives its slot back to the receive queue.
func (s *ppSession) complete(wc *roce.WC) string {
	if wc.Status != roce.WCSuccess {
		select {
		case <-s.stop:
			return shuttingDown
		default:
		}
		if wc.Status == roce.WCLocLenErr {
			return fmt.Sprintf("qp %#x: message larger than the %d-byte receive slot (client -s too big)", wc.QPNum, s.sess.SlotLen)
		}
		return fmt.Sprintf("qp %#x wr %#x: %v", wc.QPNum, wc.WRID, wc.Status)
	}
	q := s.byQP[wc.QPNum]
	if q == nil {
		return fmt.Sprintf("completion for unknown qp %#x", wc.QPNum)
	}
	slot := int(wc.WRID &^ wridSend)
	if wc.WRID&wridSend != 0 {
		if err := s.postRecv(slot, q.i); err != nil {
			return "post recv: " + err.Error()
		}
		return ""
	}
	s.msgs++
	s.r.cfg.stats.messages[s.kind].Add(1)
	off, length := 0, int(wc.ByteLen)
	wr := roce.SendWR{WRID: uint64(slot) | wridSend, Opcode: roce.WRSend, Flags: roce.SendSignaled}
	if s.kind == kindUD {
		off, length = pingpong.GRH, length-pingpong.GRH
		wr.AH = s.sess.AHs[q.i].AV()
		wr.RemoteQPN = q.remote.QPN
		wr.RemoteQKey = pingpong.QKey
	}
	if length > 0 {
		wr.SGL = []roce.SGE{s.sess.SGE(slot, off, length)}
	}
	if _, err := s.sess.QPs[q.i].PostSend([]roce.SendWR{wr}); err != nil {
		return "post send: " + err.Error()
	}
	return ""
}

// abort ends the session from outside its goroutine: it wakes the loop (or fails the
// exchange in progress), and the goroutine then moves the QPs to ERR in destroy.
func (s *ppSession) abort() {
	s.stopOnce.Do(func() {
		close(s.stop)
		s.conn.Close()
	})
}

// destroy moves the QPs to ERR, so the peer's work is flushed, and releases
// every verbs object.
func (s *ppSession) destroy() {
	s.abort()
	if s.sess == nil {
		return
	}
	for _, qp := range s.sess.QPs {
		_ = qp.Modify(&roce.QPAttr{State: roce.QPSErr}, roce.QPAttrState)
	}
	if err := s.sess.Close(); err != nil {
		s.log.Warn("releasing session resources", "err", err)
	}
}
