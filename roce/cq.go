package roce

import (
	"context"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/core/cq"
)

// CQ is a completion queue (struct ibv_cq), its completion channel built in (Notify).
type CQ struct {
	dev *Device
	q   *cq.Queue
	id  uint32
	obj string
}

// CreateCQ is ibv_create_cq: room for at least cqe completions, 1 ≤ cqe ≤ max_cqe
// (EINVAL otherwise; ENOMEM when max_cq CQs exist). CQE reports the actual size.
func (d *Device) CreateCQ(cqe int) (*CQ, error) {
	const op = "ibv_create_cq"
	if d.closed.Load() {
		return nil, closedErr(op, "")
	}
	if !reserve(&d.nCQ, d.limits.MaxCQ) {
		return nil, newErr(op, "", syscall.ENOMEM, "max_cq %d reached", d.limits.MaxCQ)
	}
	q, err := cq.New(cqe, d.limits.MaxCQE)
	if err != nil {
		d.nCQ.Add(-1)
		return nil, wrapErr(op, "", -1, err)
	}
	c := &CQ{dev: d, q: q, id: d.ids.Add(1)}
	c.obj = d.obj("cq", c.id)
	d.objMu.Lock()
	d.cqs[q] = c
	d.objMu.Unlock()
	return c, nil
}

// queue is the engine's CQ; nil for a nil *CQ, which the engine refuses.
func (c *CQ) queue() *cq.Queue {
	if c == nil {
		return nil
	}
	return c.q
}

// Handle returns the CQ's number, used in error messages and events.
func (c *CQ) Handle() uint32 { return c.id }

// CQE returns the number of completions the CQ can hold (ibv_cq.cqe).
func (c *CQ) CQE() int { return c.q.Cap() }

func (c *CQ) Len() int { return c.q.Len() }

// Poll is ibv_poll_cq: it copies up to len(wc) completions, oldest first, and returns
// how many, without blocking (wait on Notify after ReqNotify). After a CQ overrun
// (CQ_ERR) it returns the completions held, then an error. With WithRunToCompletion it
// sends what posts left for it, and an empty CQ runs what the socket holds through the
// engine on this goroutine (waiting for a read or slice an engine goroutine holds).
func (c *CQ) Poll(wc []WC) (int, error) {
	if c.dev.closed.Load() {
		return 0, closedErr("ibv_poll_cq", c.obj)
	}
	c.dev.eng.FlushPosts() // run to completion: what a stream posted since
	n, err := c.q.Poll(wc)
	if n == 0 && err == nil {
		// Even if Poll read nothing: the goroutines it waited for may have.
		c.dev.eng.Poll()
		n, err = c.q.Poll(wc)
	}
	if err != nil {
		return n, wrapErr("ibv_poll_cq", c.obj, -1, err)
	}
	return n, nil
}

// Streaming reports whether the device carried a stream in the last millisecond (run
// to completion): a busy-polling library yields its core between empty polls then.
func (c *CQ) Streaming() bool { return c.dev.eng.Streaming() }

// ReqNotify is ibv_req_notify_cq: it arms the CQ once, so the next completion (the next
// solicited or error one when solicitedOnly) sends on Notify.
func (c *CQ) ReqNotify(solicitedOnly bool) error {
	if c.dev.closed.Load() {
		return closedErr("ibv_req_notify_cq", c.obj)
	}
	c.dev.eng.FlushPosts() // the program may sleep now
	return wrapErr("ibv_req_notify_cq", c.obj, -1, c.q.ReqNotify(solicitedOnly))
}

// Notify is the completion channel (ibv_comp_channel + ibv_get_cq_event): one receive
// per armed ReqNotify that fired, with nothing to acknowledge.
func (c *CQ) Notify() <-chan struct{} { return c.q.Notify() }

// SetNotifyFunc makes f run on the engine's goroutine whenever Notify is signalled, for
// a completion channel that is not a Go channel (libibverbs' ibv_comp_channel fd). f
// must return at once and not call verbs of this CQ; nil removes it.
func (c *CQ) SetNotifyFunc(f func()) { c.q.SetNotifyFunc(f) }

// Wait is Poll that blocks until a completion arrives or ctx ends (ctx's error): the
// loop of every event-driven verbs program (poll, ReqNotify, poll again, sleep on
// Notify). Closing the device ends it with the closed error.
func (c *CQ) Wait(ctx context.Context, wc []WC) (int, error) {
	for {
		if n, err := c.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if err := c.ReqNotify(false); err != nil {
			return 0, err
		}
		if n, err := c.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		select {
		case <-c.Notify():
		case <-c.dev.done:
			return 0, closedErr("ibv_poll_cq", c.obj)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// SpinFor is how long a busy-poller polls an empty CQ in a row before it gives the
// core up even without a stream: a peer that slow (rxe in an emulated guest, a host
// short of cores) is not waited for faster by spinning.
const SpinFor = time.Millisecond

// ShouldYield is the busy-poll policy: whether a poller whose polls have found c empty
// for emptyFor should give its core up before it polls again. A program waiting for a
// request's answer, due within a round trip, spins; a stream's progress needs the
// engine's goroutines and the peer, so while the device carries one (Streaming), or
// after SpinFor, the poller yields.
func (c *CQ) ShouldYield(emptyFor time.Duration) bool {
	return emptyFor >= SpinFor || c.Streaming()
}

// Spin is Poll that busy-polls until a completion arrives or ctx ends (ctx's error),
// as a verbs program that polls without a completion channel: with
// WithRunToCompletion, the spinning goroutine is the one that receives the answer,
// with no wake-up. Where ShouldYield says to give the core up, a goroutine can do
// better than yield: it sleeps on the channel as Wait, so a stream's engine
// goroutines, and a peer on the same host, get the core.
func (c *CQ) Spin(ctx context.Context, wc []WC) (int, error) {
	var since time.Time
	for {
		if n, err := c.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if since.IsZero() {
			since = time.Now()
		}
		if c.ShouldYield(time.Since(since)) {
			return c.Wait(ctx, wc)
		}
	}
}

// Resize is ibv_resize_cq: room for at least cqe completions, keeping those held; it
// returns the actual size. Below their number or above max_cqe is EINVAL, no change.
func (c *CQ) Resize(cqe int) (int, error) {
	if c.dev.closed.Load() {
		return 0, closedErr("ibv_resize_cq", c.obj)
	}
	n, err := c.q.Resize(cqe, c.dev.limits.MaxCQE)
	return n, wrapErr("ibv_resize_cq", c.obj, -1, err)
}

// Close is ibv_destroy_cq: EBUSY, changing nothing, while a QP uses the CQ.
func (c *CQ) Close() error {
	const op = "ibv_destroy_cq"
	if err := c.q.Close(); err != nil {
		return wrapErr(op, c.obj, -1, err)
	}
	c.dev.nCQ.Add(-1)
	c.dev.objMu.Lock()
	delete(c.dev.cqs, c.q)
	c.dev.objMu.Unlock()
	return nil
}
