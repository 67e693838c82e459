package cq

import (
	"fmt"
	"sync"
	"syscall"

	"github.com/goroce/goroce/internal/core/verbs"
)

// notifyState is what ReqNotify armed.
type notifyState uint8

const (
	notifyNone      notifyState = iota // not armed
	notifySolicited                    // next solicited or unsuccessful completion
	notifyNext                         // next completion of any kind
)

// Queue is a completion queue: a fixed-capacity ring of work completions.
// Producers (the transport engine's shards, several goroutines) call Push;
// the user calls Poll, ReqNotify and Resize. All methods are safe for
// concurrent use; one mutex guards the ring, which stays cheap because each
// critical section only copies one or a few fixed-size values.
type Queue struct {
	// notify is the completion channel (ibv_comp_channel). Capacity 1 and
	// non-blocking sends, so events coalesce and a producer never waits.
	notify chan struct{}

	mu sync.Mutex
	// mu guards: ring, head, count, armed, err, attached, closed.
	ring     []verbs.WC // len(ring) is the capacity; never grows implicitly
	head     int        // index of the oldest completion
	count    int        // completions held
	armed    notifyState
	err      error // non-nil once the CQ has overrun (error state)
	attached int   // QPs using the CQ as send or receive CQ
	closed   bool
	onNotify func() // called with mu held whenever Notify is signalled; may be nil
}

// New is ibv_create_cq: it makes a CQ that holds at least cqe completions.
// cqe must be in [1..maxCQE] (dev_cap.max_cqe), else EINVAL. The actual size,
// reported by Cap, is exactly cqe.
func New(cqe, maxCQE int) (*Queue, error) {
	if err := checkCQE("ibv_create_cq", cqe, maxCQE); err != nil {
		return nil, err
	}
	return &Queue{
		notify: make(chan struct{}, 1),
		ring:   make([]verbs.WC, cqe),
	}, nil
}

func checkCQE(op string, cqe, maxCQE int) error {
	if cqe < 1 {
		return newError(op, syscall.EINVAL, fmt.Sprintf("cqe %d below 1", cqe))
	}
	if cqe > maxCQE {
		return newError(op, syscall.EINVAL, fmt.Sprintf("cqe %d above max_cqe %d", cqe, maxCQE))
	}
	return nil
}

// Push adds one completion at the tail; it is the device side of the CQ
// (rxe_cq_post). solicited says whether the message that produced it had
// the solicited-event bit set, for ReqNotify(true).
//
// When the CQ is full, the completion being pushed is the one lost: nothing
// already held is touched. Push then returns an error wrapping ErrOverrun
// (ENOSPC), puts the CQ in the error state (Err() != nil) and sends on
// Notify() so a waiting consumer wakes up. The caller raises CQ_ERR and moves
// the QPs feeding the CQ to the error state. Once in the error state, every
// Push fails with EIO.
func (q *Queue) Push(wc *verbs.WC, solicited bool) error {
	if wc == nil {
		return newError("push", syscall.EINVAL, "nil work completion")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return closedError("push")
	}
	if q.err != nil {
		return newError("push", syscall.EIO, "cq in error state after overrun")
	}
	if q.count == len(q.ring) {
		q.err = overrunError("push", fmt.Sprintf("overrun: %d completions held, completion for wr_id %#x lost", q.count, wc.WRID))
		q.armed = notifyNone
		q.signalLocked()
		return q.err
	}
	i := q.head + q.count
	if i >= len(q.ring) {
		i -= len(q.ring)
	}
	q.ring[i] = *wc
	q.count++
	switch q.armed {
	case notifyNone:
	case notifyNext:
		q.armed = notifyNone
		q.signalLocked()
	case notifySolicited:
		if solicited || wc.Status != verbs.WCSuccess {
			q.armed = notifyNone
			q.signalLocked()
		}
	}
	return nil
}

// signalLocked does the non-blocking send on the completion channel.
func (q *Queue) signalLocked() {
	if q.onNotify != nil {
		q.onNotify()
	}
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// Poll is ibv_poll_cq: it moves up to len(wc) completions, oldest first, into
// wc and returns how many. It never blocks. Completions held when the CQ
// overran are still delivered; once they are drained, Poll of an errored CQ
// returns (0, Err()) like a negative ibv_poll_cq return.
func (q *Queue) Poll(wc []verbs.WC) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, closedError("ibv_poll_cq")
	}
	n := min(len(wc), q.count)
	for k := 0; k < n; k++ {
		wc[k] = q.ring[q.head]
		q.head++
		if q.head == len(q.ring) {
			q.head = 0
		}
	}
	q.count -= n
	if n == 0 && q.err != nil && len(wc) > 0 {
		return 0, overrunError("ibv_poll_cq", "cq overran: completions were lost")
	}
	return n, nil
}

// ReqNotify is ibv_req_notify_cq: it arms the CQ once. The next completion
// pushed (any completion; or, when solicitedOnly, a solicited one or one
// with an unsuccessful status) disarms it and sends on Notify(). Arming for
// any completion is not narrowed by a later solicitedOnly request. A CQ in
// the error state returns EIO.
func (q *Queue) ReqNotify(solicitedOnly bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return closedError("ibv_req_notify_cq")
	}
	if q.err != nil {
		return newError("ibv_req_notify_cq", syscall.EIO, "cq in error state after overrun")
	}
	want := notifyNext
	if solicitedOnly {
		want = notifySolicited
	}
	if q.armed != notifyNext {
		q.armed = want
	}
	return nil
}

// SetNotifyFunc makes f run each time Notify is signalled, in the producer's
// goroutine with the CQ's lock held: f must not block or call back into q. It
// is how a completion channel outside Go (a file descriptor) learns of an
// event without a goroutine waiting on Notify. nil removes it.
func (q *Queue) SetNotifyFunc(f func()) {
	q.mu.Lock()
	q.onNotify = f
	q.mu.Unlock()
}

// Notify returns the completion channel (ibv_comp_channel +
// ibv_get_cq_event): one value arrives per armed event. Select on it, call
// ReqNotify again, then Poll until empty, as with libibverbs.
func (q *Queue) Notify() <-chan struct{} { return q.notify }

// Resize is ibv_resize_cq: it makes the CQ hold at least cqe completions,
// with completions present (kept, in order), with QPs attached and with a
// pending ReqNotify (kept armed). cqe must be in [1..maxCQE] and not below
// the number of completions held, else EINVAL; a failed Resize changes
// nothing. It returns the actual size (cqe exactly). A CQ in the error state
// returns EIO.
func (q *Queue) Resize(cqe, maxCQE int) (int, error) {
	if err := checkCQE("ibv_resize_cq", cqe, maxCQE); err != nil {
		return 0, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, closedError("ibv_resize_cq")
	}
	if q.err != nil {
		return 0, newError("ibv_resize_cq", syscall.EIO, "cq in error state after overrun")
	}
	if cqe < q.count {
		return 0, newError("ibv_resize_cq", syscall.EINVAL, fmt.Sprintf("cqe %d below %d completions held", cqe, q.count))
	}
	if cqe == len(q.ring) {
		return cqe, nil
	}
	ring := make([]verbs.WC, cqe)
	for k := 0; k < q.count; k++ {
		j := q.head + k
		if j >= len(q.ring) {
			j -= len(q.ring)
		}
		ring[k] = q.ring[j]
	}
	q.ring, q.head = ring, 0
	return cqe, nil
}

// Len returns how many completions the CQ holds.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count
}

// Cap returns the actual size of the CQ (cq->cqe).
func (q *Queue) Cap() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.ring)
}

// Err returns nil, or the overrun error (wrapping ErrOverrun) once the CQ is
// in the error state. The state is permanent: only Close is left to do.
func (q *Queue) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

// Attach records that one more QP uses the CQ (ibv_create_qp with it as send
// or receive CQ). A CQ used by both queues of one QP is attached twice.
func (q *Queue) Attach() {
	q.mu.Lock()
	q.attached++
	q.mu.Unlock()
}

// Detach undoes one Attach (ibv_destroy_qp). It panics when nothing is
// attached, like a negative sync.WaitGroup counter: that is a bug in the caller.
func (q *Queue) Detach() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.attached == 0 {
		panic("cq: Detach without Attach")
	}
	q.attached--
}

// Close is ibv_destroy_cq. It returns EBUSY, and changes nothing, while QPs
// are attached. Afterwards every method fails with an error wrapping EINVAL
// and net.ErrClosed, including a second Close.
func (q *Queue) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return closedError("ibv_destroy_cq")
	}
	if q.attached > 0 {
		return newError("ibv_destroy_cq", syscall.EBUSY, fmt.Sprintf("%d QPs still attached", q.attached))
	}
	q.closed = true
	q.ring, q.head, q.count = nil, 0, 0
	q.armed = notifyNone
	return nil
}
