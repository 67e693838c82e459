package transport

import (
	"math"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
)

// Retransmission is bounded, so that a peer that stops answering cannot make
// the engine send without limit (rxe keeps a fixed timer and resends the whole
// window on every timeout):
//
//   - Backoff: k consecutive timeouts without progress (the oldest
//     unacknowledged PSN moving) make the timer rto << k, k ≤ maxBackoff, as
//     TCP does; the IBA leaves it open. retry_cnt still counts timeouts, so
//     retry_cnt 3 fails after 15 timeouts' worth of time (rxe: 4), and with 7
//     (infinite) a dead peer gets one probe every 64 × timeout.
//   - Probe: after a timeout only the oldest unacknowledged packet goes out,
//     with AckReq; the answer ends probing and go-back-N resumes from what it
//     acknowledged. NAKs and RNR NAKs, from a live peer, go back N at once.
//   - Budget: a timeout acted on takes a token from a device-wide bucket
//     (Config.RetryRate per second, RetryBurst deep); without one it reserves
//     the next and waits, in order, counted in RetriesDeferred and costing no
//     retry.
//
// So without answers a QP sends one packet per backed-off timeout, and the
// device at most RetryBurst + RetryRate × t probes in any t (see the counters
// Timeouts, BackedOffTimeouts, RetriesDeferred and QPInfo.Backoff).
const (
	maxBackoff        = 6
	defaultRetryRate  = 10000
	defaultRetryBurst = 1000
)

// rtoInterval is rto after the QP's consecutive timeouts: rto << backoff.
func (c *completer) rtoInterval() time.Duration { return c.q.rto << c.backoff }

// retryBudget is the device-wide token bucket of timer-driven retries.
type retryBudget struct {
	mu     sync.Mutex
	rate   float64 // tokens per second; +Inf: unlimited
	burst  float64
	tokens float64
	last   time.Time
}

// newRetryBudget is a full bucket of burst tokens refilled at rate per second;
// rate < 0 is unlimited.
func newRetryBudget(rate, burst int) *retryBudget {
	b := &retryBudget{rate: float64(rate), burst: float64(burst), tokens: float64(burst)}
	if rate < 0 {
		b.rate = math.Inf(1)
	}
	return b
}

// reserve takes a token at now. Without one it takes the next to come (the
// bucket goes into debt) and returns the wait for it: waiting timeouts are
// served in arrival order, each waking once.
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

// onTimer handles the retransmission and RNR timers at now: a timeout with a
// budget token spends a retry, doubles the timer and starts a probe; one
// without waits for the token it reserved.
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
