package transport

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// Slice bounds: see the package doc (Shard slices).
const (
	sliceInbound = 256
	sliceQPs     = 64
	slicePackets = 256
	turnPackets  = 64
)

// rxItem is an inbound datagram on its way to a shard, which owns buf once
// enqueue succeeded and returns it to the pool.
type rxItem struct {
	buf   *[link.MaxDatagram]byte // the datagram, or nil for a segment of
	train *rxTrain                // a GRO train, at off
	off   int
	n     int
	src   netip.AddrPort
	local netip.Addr
	tos   uint8  // IPv4 TOS or IPv6 traffic class as received
	ttl   uint8  // IPv4 TTL or IPv6 hop limit as received (0: not reported)
	flow  uint32 // IPv6 flow label as received
	qp    *QP
}

// txPacket is an entry of the slice's output list: a packet built by a state
// machine, ICRC not yet written, its QP, and the destination and IP header
// fields of its address vector. A QP's packets of one turn are contiguous.
type txPacket struct {
	buf  *[link.MaxDatagram]byte // the packet; or, with pay, its headers then pad and ICRC
	n    int                     // the packet's length
	hdr  int                     // with pay: the headers' length in buf
	pay  []byte                  // a payload sent from where it lies (gather send), or nil
	q    *QP
	dst  netip.Addr
	tos  uint8  // traffic class: IPv4 TOS or IPv6 traffic class
	ttl  uint8  // hop limit: IPv4 TTL or IPv6 hop limit (0: the link's default)
	flow uint32 // IPv6 flow label (0: the kernel's choice)
}

// shard is one engine goroutine and the QPs it owns.
type shard struct {
	e     *Engine
	kick  chan struct{} // capacity 1: kicks coalesce and are never lost
	cmds  chan func()
	batch int

	// passDone is when (UnixNano) the shard last finished a slice or an idle
	// pass (Engine.ShardLoopAges). A slice stamps the time its step began,
	// which is a slice's length (microseconds) early.
	passDone atomic.Int64
	// stepAt is when (UnixNano) the last step began: the slice that ran it
	// stamps passDone with it instead of reading the clock again. Token
	// holder only.
	stepAt int64

	// mu is the shard's token: its holder runs the shard's work and writes its
	// QPs' state, so a QP never has two writers. The shard goroutine holds it
	// to run slices and commands; a command finding the shard idle takes it
	// and runs on the caller's goroutine (call).
	mu sync.Mutex

	// wanted: the shard goroutine waits for the token another goroutine holds
	// (lock); whoever lets the token go wakes it (unlock).
	wanted atomic.Bool

	heldTimer Timer        // sends what poll-driven slices hold (token holder)
	heldArmed atomic.Bool  // heldTimer is running
	heldN     atomic.Int32 // held, for heldTimer to see

	// Posts left for the CQ poller (rtc.go, posted).
	posts     atomic.Int32 // WRs posted behind outstanding ones since the last refill
	postArmed atomic.Bool  // postTimer is running
	postMu    sync.Mutex
	postTimer Timer // postMu guards; created on first use

	inMu sync.Mutex
	// inMu guards: in, ready.
	in    []rxItem
	ready []*QP // QPs woken by PostSend/PostRecv, timers, other shards, or their own unfinished turn

	// Owned by the shard goroutine.
	work    []rxItem // inbound datagrams taken from in, consumed from wpos
	wpos    int
	readyW  []*QP // ready QPs taken from ready, served from rpos
	rpos    int
	touched []*QP
	out     []txPacket // the slice's output list
	held    int        // out[:held] come from poll-driven slices, their completions visible (rtc.go)
	tx      []link.Message
	pieces  [][]byte     // the gather lists of tx's trains
	budget  int          // budgeted packets the slice may still emit
	rwr     verbs.RecvWR // scratch for SRQ pops (reused, no allocation)
	scratch [4096]byte   // gather buffer for a payload spanning SGEs (QP.gather)

	// Completions wait in wcs until the slice's packets are sent (drainWC).
	deferWC bool
	wcs     []deferredWC
}

func newShard(e *Engine, batch int) *shard {
	s := &shard{e: e, kick: make(chan struct{}, 1), cmds: make(chan func()), batch: batch,
		in: make([]rxItem, 0, rxQueueLen), work: make([]rxItem, 0, rxQueueLen),
		out: make([]txPacket, 0, slicePackets+sliceInbound), tx: make([]link.Message, 0, batch),
		pieces: make([][]byte, 0, 3*(slicePackets+sliceInbound))}
	s.passDone.Store(e.cfg.Clock.Now().UnixNano())
	return s
}

// deferredWC is a completion held until its slice's packets are sent.
type deferredWC struct {
	q         *QP
	c         *cq.Queue
	wc        verbs.WC
	solicited bool
}

func (s *shard) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

func (s *shard) enqueue(it rxItem) bool {
	s.inMu.Lock()
	if len(s.in) >= cap(s.in) {
		s.inMu.Unlock()
		return false
	}
	s.in = append(s.in, it)
	s.inMu.Unlock()
	return true
}

// wakeQP asks the shard to service q. Safe from any goroutine.
func (s *shard) wakeQP(q *QP) {
	s.readyQP(q)
	s.wake()
}

func (s *shard) run() {
	defer s.e.wg.Done()
	for {
		var fn func()
		select {
		case <-s.kick:
		case fn = <-s.cmds:
		case <-s.e.done:
			s.inMu.Lock()
			for i := range s.in {
				s.in[i].release()
			}
			s.in = s.in[:0]
			s.inMu.Unlock()
			return
		}
		s.lock()
		if fn != nil {
			fn()
		}
		s.process()
		s.mu.Unlock()
		s.passDone.Store(s.e.cfg.Clock.Now().UnixNano()) // health: Engine.ShardLoopAges
	}
}

// process runs slices until no work is left, serving commands between them.
// Between two slices it lets the token go for a moment, so a CQ poller waiting
// for it (waitDrive) gets it within a millisecond (sync.Mutex's starvation
// mode) and one slice, however long the work goes on. Token holder, again on
// return.
func (s *shard) process() {
	for {
		s.serveCommands()
		if !s.slice() {
			break
		}
		s.mu.Unlock()
		s.lock()
	}
	if len(s.out) > 0 {
		s.flush() // what poll-driven slices held (rtc.go)
	}
}

// lock takes the token for the shard goroutine. A post or a CQ poller that
// runs the shard (rtc.go) holds it for a bounded time; instead of blocking on
// the mutex the goroutine asks to be woken when it is let go (unlock), so it
// waits where testing/synctest sees it wait (a channel) and a command sent to
// it meanwhile waits on the command channel. Checking the token again after
// asking closes the window in which the holder let go before it was asked.
func (s *shard) lock() {
	for !s.mu.TryLock() {
		s.wanted.Store(true)
		if s.mu.TryLock() {
			break
		}
		<-s.kick
	}
	s.wanted.Store(false)
}

// unlock lets the token go for a goroutine other than the shard's, waking
// the shard goroutine if it waits for it (lock).
func (s *shard) unlock() {
	s.mu.Unlock()
	if s.wanted.Load() {
		s.wake()
	}
}

// serveCommands runs the commands waiting on the (unbuffered) channel.
func (s *shard) serveCommands() {
	for {
		select {
		case fn := <-s.cmds:
			fn()
		default:
			return
		}
	}
}

// refill takes what arrived once the previous take is consumed, so datagrams
// and ready QPs are served in arrival order.
func (s *shard) refill() {
	if s.wpos < len(s.work) && s.rpos < len(s.readyW) {
		return
	}
	s.inMu.Lock()
	if s.wpos == len(s.work) {
		s.work, s.in, s.wpos = s.in, s.work[:0], 0
	}
	if s.rpos == len(s.readyW) {
		clear(s.readyW)
		s.readyW, s.ready, s.rpos = s.ready, s.readyW[:0], 0
		s.posts.Store(0) // the posts' QPs are taken
	}
	s.inMu.Unlock()
}

// slice is a bounded unit of shard work: step, send the output list and make
// the completions visible; false when there was nothing to do.
func (s *shard) slice() bool {
	if !s.step() {
		return false
	}
	s.flush()
	s.drainWC()
	s.passDone.Store(s.stepAt)
	return true
}

// step delivers up to sliceInbound datagrams and serves up to sliceQPs ready
// QPs, leaving their packets in the output list and their completions held.
func (s *shard) step() bool {
	s.refill()
	nIn := min(len(s.work)-s.wpos, sliceInbound)
	nQP := min(len(s.readyW)-s.rpos, sliceQPs)
	if nIn == 0 && nQP == 0 {
		return false
	}
	now := s.e.cfg.Clock.Now()
	s.stepAt = now.UnixNano()
	s.deferWC = true
	s.budget = slicePackets
	var rel trainRefs
	for i := s.wpos; i < s.wpos+nIn; i++ {
		it := &s.work[i]
		if q := it.qp; !q.destroyed {
			s.touch(q)
			if q.resp.hold(it) {
				*it = rxItem{}
				continue
			}
			q.receive(now, it)
		} else {
			// Destroyed after the reader queued the packet (a peer's last ACK
			// racing a disconnect handled on another shard).
			s.e.cfg.Stats.DestroyedQPDrops.Add(1)
		}
		rel.release(it)
		*it = rxItem{}
	}
	rel.flush()
	s.wpos += nIn
	for i := s.rpos; i < s.rpos+nQP; i++ {
		q := s.readyW[i]
		s.readyW[i] = nil
		q.queued.Store(false)
		s.touch(q)
	}
	s.rpos += nQP
	for _, q := range s.touched {
		q.touchedMark = false
		if !q.destroyed {
			q.service(now)
		}
	}
	clear(s.touched)
	s.touched = s.touched[:0]
	return true
}

// turn is how many budgeted packets a QP may emit now; spend records them. A
// QP that stops at its turn's limit is queued again behind the others.
func (s *shard) turn() int { return min(turnPackets, max(s.budget, 0)) }

func (s *shard) spend(n int) { s.budget -= n }

// drainWC makes the slice's completions visible, after flush: an application
// never sees a receive before its ACK has left, so a peer that learns of the
// delivery over a side channel (a CM DREQ, a TCP "done") and tears down cannot
// race the ACK, and a UD or UC send completes once its packets are sent.
func (s *shard) drainWC() {
	s.deferWC = false
	for i := range s.wcs {
		d := &s.wcs[i]
		d.q.pushWC(d.c, &d.wc, d.solicited)
		*d = deferredWC{}
	}
	s.wcs = s.wcs[:0]
}

func (s *shard) touch(q *QP) {
	if !q.touchedMark {
		q.touchedMark = true
		s.touched = append(s.touched, q)
	}
}

// emit appends a packet built from f and payload to the shard's output list:
// the state machines never write to the Link. The packet's IP header carries
// av's traffic class, hop limit and flow label, as an IB GRH does: an RC or UC
// QP's path for all it sends, a UD WR's address handle. With congestion
// control on, the ECN bits are the engine's (Engine.packetTOS).
func (q *QP) emit(f *bth.Fields, payload []byte, av *verbs.AddressVector) {
	p := txPacket{buf: link.GetBuffer(), q: q, dst: av.DGID, tos: q.e.packetTOS(f.Opcode, av.TrafficClass), ttl: av.HopLimit, flow: av.FlowLabel}
	if len(payload) >= gatherMin && !q.sh.isScratch(payload) {
		// Gather send: the payload stays in place (registered memory or a WR's
		// inline copy) until flush sends headers, payload and tail as one
		// gather list, with the ICRC run over it in place (bth.ICRCParts).
		// ibv_dereg_mr waits for the slice (Engine.Barrier), so the memory
		// cannot go away meanwhile.
		h := bth.AppendHeaders(p.buf[:0], f, len(payload))
		tail := bth.PadCount(len(payload)) + bth.ICRCLen
		clear(p.buf[len(h) : len(h)+tail])
		p.hdr, p.pay, p.n = len(h), payload, len(h)+len(payload)+tail
	} else {
		p.n = len(bth.Append(p.buf[:0], f, payload))
	}
	q.sh.out = append(q.sh.out, p)
	q.cnt.txPackets.Add(1)
}

// gatherMin is the smallest payload sent in place; a smaller one is cheaper to
// copy next to its headers than to give its own iovec.
const gatherMin = 512

// isScratch reports whether b lies in the gather scratch, which the next
// gather overwrites: such a payload is copied now.
func (s *shard) isScratch(b []byte) bool {
	return len(b) > 0 && &b[0] == &s.scratch[0]
}

// packet returns a copy of the whole packet p (for tests and taps).
func (p *txPacket) packet() []byte {
	if p.pay == nil {
		return append([]byte(nil), p.buf[:p.n]...)
	}
	b := append([]byte(nil), p.buf[:p.hdr]...)
	b = append(b, p.pay...)
	return append(b, p.buf[p.hdr:p.hdr+p.n-p.hdr-len(p.pay)]...)
}

// flush sends the output list in order, in link batches, runs of one UDP
// flow's equal-size packets as trains (train.go). Each packet gets its ICRC
// now, over its source port and the IPv4 ID the kernel will give it (DF set;
// ID 0 for a datagram sent alone: package link).
func (s *shard) flush() {
	// Held packets (rtc.go) go first, in the same link batch as the newer
	// ones: an ACK and the reply after it cost one system call.
	if len(s.out) >= streamPackets {
		s.e.markStream()
	}
	s.tx, s.pieces = s.tx[:0], s.pieces[:0]
	s.queueOut()
	if len(s.tx) > 0 {
		s.write(s.tx)
	}
	if s.held > 0 {
		s.held = 0
		s.heldN.Store(0)
	}
	for i := range s.out {
		link.PutBuffer(s.out[i].buf)
		s.out[i] = txPacket{}
	}
	s.out = s.out[:0]
	clear(s.tx)
	clear(s.pieces)
}

// queueOut adds the output list to the link batch, writing it whenever full.
func (s *shard) queueOut() {
	for i, hi := 0, len(s.out); i < hi; {
		if len(s.tx) == s.batch {
			s.write(s.tx)
			s.tx, s.pieces = s.tx[:0], s.pieces[:0]
		}
		s.ackBehind(i, hi)
		j := s.trainEnd(i, hi)
		s.tx = append(s.tx, s.message(i, j))
		i = j
	}
}

// write hands msgs to the Link, skipping a message it fails to send.
func (s *shard) write(msgs []link.Message) {
	for len(msgs) > 0 {
		n, err := s.e.cfg.Link.WriteBatch(msgs)
		if err == nil {
			return
		}
		s.e.cfg.Stats.TxErrors.Add(1)
		if errors.Is(err, errClosed) {
			return
		}
		msgs = msgs[n+1:]
	}
}
