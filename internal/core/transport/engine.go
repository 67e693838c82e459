package transport

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
)

// Device limits used when Config leaves them zero.
const (
	DefaultMaxQPWR   = 16384
	DefaultMaxSGE    = 32
	DefaultMaxInline = 256
	DefaultRDAtomic  = 128  // max_qp_init_rd_atom and max_qp_rd_atom
	firstQPN         = 0x11 // rxe: RXE_MIN_QP_INDEX 16, first QPN 0x11
	maxQPN           = 0xFFFFFF
	rxQueueLen       = 4096 // inbound packets a shard buffers before dropping
	maxUnackedPSNs   = 128  // rxe RXE_MAX_UNACKED_PSNS
	maxPktsPerAck    = 64   // rxe RXE_MAX_PKT_PER_ACK
)

// Engine runs RoCEv2 queue pairs over one Link: a reader goroutine per receive
// path (link.ReceiveFuncs) hands datagrams to the shard goroutines that own
// their QPs by QPN (package doc).
type Engine struct {
	cfg      Config            // normalized: no default left to apply
	port     uint16            // UDP port we send from and to (the Link's)
	offloads link.Offloads     // what the Link does with trains
	whole    link.WholeTrainer // the Link, if it tells where trains arrive whole

	shards  []*shard
	pollers []*poller    // run-to-completion: the receive paths Poll reads
	retries *retryBudget // timer-driven retries, device-wide

	streamUntil atomic.Int64 // UnixNano: a stream ran until then (rtc.go, Streaming)
	procs       procsCheck   // GOMAXPROCS against the cores (rtc.go; reader.spinBounds)

	// inlinePosts: a post may run its shard (postedDefault). Set by NewEngine
	// only: an engine built without its goroutines is stepped by its test.
	inlinePosts bool

	mu sync.Mutex
	// mu guards: writes of qps (lookups are lock-free).
	qps qpTable

	// mcMu serialises multicast attach and detach; readers load mcast.
	mcMu  sync.Mutex
	mcast atomic.Pointer[mcastTable]

	closed atomic.Bool
	fatal  atomic.Bool // the Link died under the engine (DEVICE_FATAL)
	done   chan struct{}
	wg     sync.WaitGroup
}

// NewEngine starts an engine on cfg.Link, which it owns from then on: Close
// closes it.
func NewEngine(cfg Config) (*Engine, error) {
	e, err := newEngine(cfg)
	if err != nil {
		return nil, err
	}
	e.inlinePosts = true
	readers := link.ReceiveFuncs(cfg.Link) // one, or one per SO_REUSEPORT socket
	e.wg.Add(len(e.shards) + len(readers))
	for _, s := range e.shards {
		go s.run()
	}
	// In run-to-completion mode CQ pollers read the receive paths too
	// (Engine.Poll), sharing each with its goroutine under one lock
	// (reader.orderedOnce); a Link that cannot wait on a path without reading
	// it keeps its paths to their goroutines.
	polls, waits := link.PollFuncs(cfg.Link), link.WaitFuncs(cfg.Link)
	shared := e.cfg.RunToCompletion && len(polls) == len(readers) && len(waits) == len(readers)
	for i, recv := range readers {
		r := newReader(e, recv, e.shards[0].batch)
		r.hold = len(readers) == 1 // may poll through a stream (reader.spinBounds)
		if shared {
			p := newReader(e, polls[i], pollBatch)
			p.poll = true
			e.pollers = append(e.pollers, &poller{r: p})
			r.recv, r.ordered, r.wait = polls[i], e.pollers[i], waits[i]
		} else if len(polls) == len(readers) {
			r.spin = polls[i] // polled before it parks on a stream (reader.read)
		}
		go r.loop()
	}
	return e, nil
}

// newEngine builds an engine without starting its goroutines.
func newEngine(cfg Config) (*Engine, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		port:     cfg.Link.LocalAddr().Port(),
		offloads: link.OffloadsOf(cfg.Link),
		retries:  newRetryBudget(cfg.RetryRate, cfg.RetryBurst),
		done:     make(chan struct{}),
	}
	if w, ok := cfg.Link.(link.WholeTrainer); ok && e.offloads.GSO {
		e.whole = w
	}
	e.qps.init(cfg.FirstQPN, cfg.LastQPN)
	batch := max(cfg.Link.BatchSize(), 1)
	for range cfg.Shards {
		e.shards = append(e.shards, newShard(e, batch))
	}
	return e, nil
}

// normalize checks c and fills in every default.
func (c *Config) normalize() error {
	if c.Link == nil || c.Memory == nil {
		return newErr("create_engine", 0, syscall.EINVAL, "Link and Memory are required")
	}
	if err := c.CC.Normalize(); err != nil {
		return newErr("create_engine", 0, syscall.EINVAL, "congestion control: %v", err)
	}
	if c.PortMTU == 0 {
		c.PortMTU = verbs.MTU1024
	} else if c.PortMTU.Bytes() == 0 {
		return newErr("create_engine", 0, syscall.EINVAL, "invalid port MTU %d", c.PortMTU)
	}
	if !c.LocalAddr.IsValid() {
		c.LocalAddr = c.Link.LocalAddr().Addr()
	}
	c.LocalAddr = c.LocalAddr.Unmap()
	if c.Stats == nil {
		c.Stats = new(Stats)
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	switch {
	case c.LastQPN == 0:
		c.FirstQPN, c.LastQPN = firstQPN, maxQPN
	case c.FirstQPN > c.LastQPN || c.LastQPN > maxQPN:
		return newErr("create_engine", 0, syscall.EINVAL, "QPNs %#x-%#x", c.FirstQPN, c.LastQPN)
	default:
		c.FirstQPN = max(c.FirstQPN, firstQPN)
	}
	if c.Shards <= 0 {
		c.Shards = runtime.GOMAXPROCS(0)
	}
	orDefault := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	orDefault(&c.MaxQPWR, DefaultMaxQPWR)
	orDefault(&c.MaxSGE, DefaultMaxSGE)
	orDefault(&c.MaxRDAtomic, DefaultRDAtomic)
	orDefault(&c.MaxDestRDAtomic, DefaultRDAtomic)
	if c.MaxInline == 0 {
		c.MaxInline = DefaultMaxInline
	}
	c.MaxInline = max(c.MaxInline, 0)
	orDefault(&c.RetryBurst, defaultRetryBurst)
	if c.RetryRate == 0 {
		c.RetryRate = defaultRetryRate
	}
	return nil
}

// Config returns the engine's configuration with every default filled in.
func (e *Engine) Config() Config { return e.cfg }

func (e *Engine) Stats() *Stats { return e.cfg.Stats }

// Close moves every QP to ERR (flushing its WRs), stops the shards and readers
// and closes the Link. Later verbs fail with an error matching net.ErrClosed.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	// ACKs held for a CQ poller (rtc.go) are owed: the peer must not retry
	// what the program already saw complete.
	for _, s := range e.shards {
		s.call(func() {
			if s.held > 0 {
				s.flush()
			}
		})
	}
	for _, q := range e.qps.all() {
		q.run("close", func() { q.toError(e.cfg.Clock.Now()) }, true)
	}
	close(e.done)
	err := e.cfg.Link.Close()
	e.wg.Wait()
	return err
}

// Barrier returns once every shard has finished the step it was in. A shard
// resolves keys and copies data within a step and keeps no region across
// steps, so after a key is unregistered, Barrier guarantees no access through
// it is in flight (ibv_dereg_mr). One command per shard; after Close it waits
// for the shards to stop. Not from an OnEvent callback, which runs on a shard.
func (e *Engine) Barrier() {
	for _, s := range e.shards {
		// A shard steps only under its token and takes commands between steps:
		// an empty command that ran is the barrier.
		if !s.call(func() {}) {
			e.wg.Wait()
			return
		}
	}
}

// linkGone reports whether a read error means the Link can never deliver again
// (closed, or its socket gone), not a hiccup.
func linkGone(err error) bool {
	return errors.Is(err, errClosed) || errors.Is(err, syscall.EBADF) ||
		errors.Is(err, syscall.ENOTSOCK) || errors.Is(err, syscall.ENODEV)
}

// fail is the device's catastrophic error, the Link dead under an open engine:
// DEVICE_FATAL and PORT_ERR, and every QP goes to ERR with QP_FATAL, flushing
// its WRs, as a device with an internal error does; verbs still work, failing
// with flush errors. Reader goroutine only.
func (e *Engine) fail() {
	if e.fatal.Swap(true) {
		return
	}
	e.event(Event{Type: verbs.EventDeviceFatal})
	e.event(Event{Type: verbs.EventPortErr})
	e.failQPs(func(*QP) bool { return true })
}

// failQPs marks the QPs match selects fatally failed and wakes their shards,
// which raise QP_FATAL and move them to ERR (QP.service): only the owner shard
// changes a QP's state.
func (e *Engine) failQPs(match func(*QP) bool) {
	e.qps.each(func(q *QP) bool {
		if match(q) {
			q.fatal.Store(true)
			q.sh.wakeQP(q)
		}
		return true
	})
}

// Fatal reports whether the device hit its catastrophic error (DEVICE_FATAL).
func (e *Engine) Fatal() bool { return e.fatal.Load() }

func (e *Engine) event(ev Event) {
	if e.cfg.OnEvent != nil {
		e.cfg.OnEvent(ev)
	}
}

func (e *Engine) lookup(qpn uint32) *QP { return e.qps.lookup(qpn) }

// shardFor is the QP's owner shard: QPNs are sequential, so the remainder
// spreads QPs evenly.
func (e *Engine) shardFor(qpn uint32) *shard {
	return e.shards[qpn%uint32(len(e.shards))]
}
