package transport

import (
	"math"
	"sync"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
)

// Retransmission after a timeout is bounded three ways, so a peer that stops
// answering cannot make the engine send without limit (see the package
// documentation, "Retransmission"):
//
//   - backoff: the timer of a QP runs rto << k, k the number of consecutive
//     timeouts without progress, at most maxBackoff; any progress resets k;
//   - probe: a timed-out QP resends only its oldest unacknowledged packet
//     (with AckReq) until an answer comes, then goes back N from there;
//   - budget: timer-driven retries take a token from a device-wide bucket
//     (Config.RetryRate per second, Config.RetryBurst deep); without one the
//     retry reserves the next token to come and waits for it, in order. It
//     is deferred and counted, never dropped, and it costs no retry_cnt.
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
