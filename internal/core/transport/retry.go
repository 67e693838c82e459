package transport

import (
	"math"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
)

// Retransmission is bounded so that a peer that stops answering cannot make
// the engine send without limit. rxe (rxe_comp.c, rxe_req.c) keeps a fixed
// timer and resends the whole window on every timeout; goroce bounds it three
// ways:
//
//   - Backoff: the timer of a QP runs rto << k after k consecutive timeouts
//     without progress, k at most maxBackoff; any progress (an ACK or
//     response that moves the oldest unacknowledged PSN) resets k. The IBA
//     leaves the local ACK timer's restart to the implementation; TCP backs
//     off the same way. retry_cnt still counts timeouts, so a finite
//     retry_cnt fails later than on rxe (retry_cnt 3 after 15 timeouts' worth
//     of time instead of 4); with retry_cnt 7 (infinite) a QP whose peer is
//     gone sends one probe every 64 × timeout.
//   - Probe: after a timeout the QP resends only its oldest unacknowledged
//     packet, with AckReq, until an answer arrives; the answer ends probing
//     and go-back-N resumes from what it acknowledged (ACK-clocked). NAKs and
//     RNR NAKs, which come from a live peer, still go back N at once.
//   - Budget: timeouts acted on take a token from a device-wide bucket
//     (Config.RetryRate per second, Config.RetryBurst deep). A timeout
//     without a token reserves the next one and waits for it, in arrival
//     order; it is counted (RetriesDeferred), never dropped, and costs no
//     retry.
//
// So without answers a QP sends at most one packet per backed-off timeout,
// and the device at most RetryBurst + RetryRate × t probes in any t. Every
// packet that is not a probe is a first transmission or is clocked by a
// packet from the peer. The counters Timeouts, BackedOffTimeouts,
// RetriesDeferred and TurnsYielded, and QPInfo.Backoff, show the bounds at
// work.
const (
	maxBackoff        = 6
	defaultRetryRate  = 10000
	defaultRetryBurst = 1000
)

// rtoInterval is the QP's retransmission timeout after its consecutive
// timeouts: rto << backoff.
func (c *completer) rtoInterval() time.Duration { return c.q.rto << c.backoff }

// retryBudget is the device-wide token bucket of timer-driven retries.
type retryBudget struct {
	mu     sync.Mutex
	rate   float64 // tokens per second; +Inf: unlimited
	burst  float64
	tokens float64
	last   time.Time
}

// newRetryBudget is a full bucket of burst tokens refilled at rate per
// second; a negative rate is unlimited (Config.RetryRate, normalized).
func newRetryBudget(rate, burst int) *retryBudget {
	b := &retryBudget{rate: float64(rate), burst: float64(burst), tokens: float64(burst)}
	if rate < 0 {
		b.rate = math.Inf(1)
	}
	return b
}

// reserve takes a token at now. Without one it takes the next token to come
// (the bucket goes into debt) and returns how long until it is there:
// timeouts that wait are served in the order they came, each waking once.
func (b *retryBudget) reserve(now time.Time) (wait time.Duration) {
	if math.IsInf(b.rate, 1) {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() {
		b.last = now
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.rate)
		b.last = now
	}
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(math.Ceil(-b.tokens / b.rate * float64(time.Second)))
}

// onTimer handles the retransmission and RNR timers at now. A timeout with a
// budget token spends a retry (7: infinite), doubles the timer and starts a
// probe; without a token the retry waits for the one it reserved.
func (c *completer) onTimer(now time.Time) {
	q := c.q
	if c.rnrWaiting() && !now.Before(c.rnrAt) {
		c.rnrAt = time.Time{}
	}
	if c.rtoAt.IsZero() || now.Before(c.rtoAt) {
		return
	}
	c.rtoAt = time.Time{}
	if c.head() == nil {
		return
	}
	if !c.reserved {
		if wait := q.e.retries.reserve(now); wait > 0 {
			c.reserved = true // the token is ours at now+wait
			q.e.cfg.Stats.RetriesDeferred.Add(1)
			c.rtoAt = now.Add(wait)
			return
		}
	}
	c.reserved = false
	q.e.cfg.Stats.Timeouts.Add(1)
	q.cnt.timeouts.Add(1)
	if c.backoff > 0 {
		q.e.cfg.Stats.BackedOffTimeouts.Add(1)
	}
	c.retry(now, true)
	if q.attr.State == verbs.QPSErr || q.rto == 0 {
		return
	}
	c.backoff = min(c.backoff+1, maxBackoff)
	q.win.probing = q.win.needRetry
	c.rtoAt = now.Add(c.rtoInterval())
}
