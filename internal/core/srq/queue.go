package srq

import (
	"fmt"
	"sync"
	"syscall"

	"github.com/goroce/goroce/internal/core/verbs"
)

// attrAll is every SRQ attribute mask bit Modify knows.
const attrAll = verbs.SRQMaxWR | verbs.SRQLimit

// Caps are the device limits a queue is checked against (dev_cap.max_srq_wr,
// dev_cap.max_srq_sge, IBV_DEVICE_SRQ_RESIZE in device_cap_flags).
type Caps struct {
	MaxWR  uint32
	MaxSGE uint32
	Resize bool
}

// slot is one posted WR; its SGEs live in Queue.sges at [i*maxSGE, i*maxSGE+n).
type slot struct {
	wrID uint64
	n    uint32
}

// Queue is a receive work queue: a shared receive queue, or a QP's own
// receive queue when the caller never shares it (rxe uses one type for
// both). The user posts with PostRecv; the transport engine's shards take the
// head WR with Pop. One mutex guards everything; storage for every WR and its
// SGEs is allocated up front, so posting and popping do not allocate.
type Queue struct {
	caps Caps // immutable

	mu sync.Mutex
	// mu guards: slots, sges, maxSGE, head, count, limit, onLimit, failed,
	// attached, closed.
	slots    []slot      // len(slots) is max_wr; never grows implicitly
	sges     []verbs.SGE // len(slots)*maxSGE
	maxSGE   uint32
	head     int // index of the oldest WR
	count    int // WRs outstanding
	limit    uint32
	onLimit  func()
	failed   bool // SRQ_ERR happened
	attached int
	closed   bool
}

// New is ibv_create_srq (and the receive half of ibv_create_qp). attr.MaxWR
// must be in [1..caps.MaxWR] and attr.MaxSGE in [1..caps.MaxSGE], else
// EINVAL. attr.Limit is ignored, as ibv_create_srq(3) says: a new queue is
// disarmed. The actual MaxWR and MaxSGE (equal to the requested ones) are
// written back into attr.
func New(attr *verbs.SRQAttr, caps Caps) (*Queue, error) {
	const op = "ibv_create_srq"
	if attr == nil {
		return nil, newError(op, syscall.EINVAL, "nil attr")
	}
	if err := checkMaxWR(op, attr.MaxWR, caps); err != nil {
		return nil, err
	}
	if attr.MaxSGE < 1 || attr.MaxSGE > caps.MaxSGE {
		return nil, newError(op, syscall.EINVAL, fmt.Sprintf("max_sge %d outside [1..%d]", attr.MaxSGE, caps.MaxSGE))
	}
	q := &Queue{
		caps:   caps,
		slots:  make([]slot, attr.MaxWR),
		sges:   make([]verbs.SGE, int(attr.MaxWR)*int(attr.MaxSGE)),
		maxSGE: attr.MaxSGE,
	}
	return q, nil
}

func checkMaxWR(op string, maxWR uint32, caps Caps) error {
	if maxWR < 1 || maxWR > caps.MaxWR {
		return newError(op, syscall.EINVAL, fmt.Sprintf("max_wr %d outside [1..%d]", maxWR, caps.MaxWR))
	}
	return nil
}

// PostRecv is ibv_post_srq_recv (and ibv_post_recv for a QP's own RQ). It
// checks the WRs one by one, in order, and appends each valid one at the
// tail: more SGEs than max_sge is EINVAL, a full queue is ENOMEM. It stops at
// the first bad WR and returns how many were posted and an error whose Index
// names the bad one (the Go form of bad_wr): the WRs before it stay posted,
// it and the ones after it are not posted. The WRs and their SGE lists are
// copied, so the caller may reuse them as soon as PostRecv returns.
func (q *Queue) PostRecv(wrs []verbs.RecvWR) (int, error) {
	const op = "ibv_post_srq_recv"
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		e := closedError(op)
		e.Index = 0
		return 0, e
	}
	if q.failed {
		e := errorStateError(op)
		e.Index = 0
		return 0, e
	}
	for i := range wrs {
		wr := &wrs[i]
		if len(wr.SGL) > int(q.maxSGE) {
			e := newError(op, syscall.EINVAL, fmt.Sprintf("num_sge %d above max_sge %d", len(wr.SGL), q.maxSGE))
			e.Index = i
			return i, e
		}
		if q.count == len(q.slots) {
			e := newError(op, syscall.ENOMEM, fmt.Sprintf("queue full (max_wr %d)", len(q.slots)))
			e.Index = i
			return i, e
		}
		t := q.head + q.count
		if t >= len(q.slots) {
			t -= len(q.slots)
		}
		q.slots[t] = slot{wrID: wr.WRID, n: uint32(len(wr.SGL))}
		copy(q.sges[t*int(q.maxSGE):], wr.SGL)
		q.count++
	}
	return len(wrs), nil
}

// Pop takes the WR at the head, atomically, into dst: it is the device
// fetching a receive request for whichever QP received a message. dst.SGL is
// reused (appended to dst.SGL[:0]), so a caller that keeps dst does not
// allocate. It returns false when the queue is empty, in the error state or
// destroyed. When the take leaves fewer WRs than an armed limit, the queue
// disarms and calls the limit handler once, after releasing its lock.
func (q *Queue) Pop(dst *verbs.RecvWR) bool {
	q.mu.Lock()
	if q.closed || q.failed || q.count == 0 {
		q.mu.Unlock()
		return false
	}
	s := q.slots[q.head]
	off := q.head * int(q.maxSGE)
	dst.WRID = s.wrID
	dst.SGL = append(dst.SGL[:0], q.sges[off:off+int(s.n)]...)
	q.head++
	if q.head == len(q.slots) {
		q.head = 0
	}
	q.count--
	fn := q.crossedLocked()
	q.mu.Unlock()
	if fn != nil {
		fn()
	}
	return true
}

// crossedLocked disarms the queue and returns the handler to call when the
// armed limit has been crossed (fewer WRs outstanding than the limit).
func (q *Queue) crossedLocked() func() {
	if q.limit == 0 || uint32(q.count) >= q.limit {
		return nil
	}
	q.limit = 0
	return q.onLimit
}

// SetLimitHandler sets the function called each time an armed limit is
// crossed (IBV_EVENT_SRQ_LIMIT_REACHED). It runs on the goroutine that
// crossed the limit (a Pop or Modify caller), never under the queue lock, so
// it may call back into the queue; it should be quick. After the call the
// queue is disarmed until Modify arms it again. nil removes the handler;
// crossings still disarm.
func (q *Queue) SetLimitHandler(fn func()) {
	q.mu.Lock()
	q.onLimit = fn
	q.mu.Unlock()
}

// Modify is ibv_modify_srq. With SRQMaxWR it resizes the queue to
// attr.MaxWR, keeping the outstanding WRs in order: ENOSYS when the device
// does not advertise SRQ resize, EINVAL when attr.MaxWR is 0, above
// caps.MaxWR, below the WRs outstanding or below the armed limit; the actual
// MaxWR and MaxSGE are written back into attr (attr.MaxSGE is ignored on
// input: max_sge cannot change, ibv_modify_srq(3)). With SRQLimit it arms
// the limit with attr.Limit in [0..max_wr] (the new max_wr when both bits
// are set), else EINVAL; 0 disarms. Arming above the number of WRs
// outstanding raises the limit event at once (and disarms again). If any
// attribute is invalid, or the mask has unknown bits (EINVAL), nothing
// changes. A mask of 0 is a successful no-op.
func (q *Queue) Modify(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) error {
	const op = "ibv_modify_srq"
	if attr == nil {
		return newError(op, syscall.EINVAL, "nil attr")
	}
	if mask&^attrAll != 0 {
		return newError(op, syscall.EINVAL, fmt.Sprintf("unknown attr_mask bits %#x", uint32(mask&^attrAll)))
	}
	q.mu.Lock()
	fn, err := q.modifyLocked(attr, mask)
	q.mu.Unlock()
	if fn != nil {
		fn()
	}
	return err
}

// modifyLocked validates every attribute, then applies them all. It returns
// the limit handler to call once the lock is released, if the new limit is
// already crossed.
func (q *Queue) modifyLocked(attr *verbs.SRQAttr, mask verbs.SRQAttrMask) (func(), error) {
	const op = "ibv_modify_srq"
	if q.closed {
		return nil, closedError(op)
	}
	if q.failed {
		return nil, errorStateError(op)
	}
	// Validate everything before changing anything.
	maxWR := uint32(len(q.slots))
	if mask&verbs.SRQMaxWR != 0 {
		if !q.caps.Resize {
			return nil, newError(op, syscall.ENOSYS, "device does not support SRQ resize")
		}
		if err := checkMaxWR(op, attr.MaxWR, q.caps); err != nil {
			return nil, err
		}
		if attr.MaxWR < uint32(q.count) {
			return nil, newError(op, syscall.EINVAL, fmt.Sprintf("max_wr %d below %d WRs outstanding", attr.MaxWR, q.count))
		}
		if mask&verbs.SRQLimit == 0 && attr.MaxWR < q.limit {
			return nil, newError(op, syscall.EINVAL, fmt.Sprintf("max_wr %d below armed limit %d", attr.MaxWR, q.limit))
		}
		maxWR = attr.MaxWR
	}
	if mask&verbs.SRQLimit != 0 && attr.Limit > maxWR {
		return nil, newError(op, syscall.EINVAL, fmt.Sprintf("srq_limit %d above max_wr %d", attr.Limit, maxWR))
	}
	// Apply.
	if mask&verbs.SRQMaxWR != 0 {
		q.resizeLocked(int(maxWR))
		attr.MaxWR, attr.MaxSGE = maxWR, q.maxSGE
	}
	if mask&verbs.SRQLimit != 0 {
		q.limit = attr.Limit
		// Arming above the outstanding count raises the event at once.
		return q.crossedLocked(), nil
	}
	return nil, nil
}

// resizeLocked moves the outstanding WRs, in order, into storage for n WRs.
func (q *Queue) resizeLocked(n int) {
	if n == len(q.slots) {
		return
	}
	stride := int(q.maxSGE)
	slots := make([]slot, n)
	sges := make([]verbs.SGE, n*stride)
	for k := 0; k < q.count; k++ {
		j := q.head + k
		if j >= len(q.slots) {
			j -= len(q.slots)
		}
		slots[k] = q.slots[j]
		copy(sges[k*stride:(k+1)*stride], q.sges[j*stride:(j+1)*stride])
	}
	q.slots, q.sges, q.head = slots, sges, 0
}

// Query is ibv_query_srq: it returns max_wr, max_sge and the armed limit (0
// when disarmed, including after the limit event fired).
func (q *Queue) Query() (verbs.SRQAttr, error) {
	const op = "ibv_query_srq"
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return verbs.SRQAttr{}, closedError(op)
	}
	if q.failed {
		return verbs.SRQAttr{}, errorStateError(op)
	}
	return verbs.SRQAttr{MaxWR: uint32(len(q.slots)), MaxSGE: q.maxSGE, Limit: q.limit}, nil
}

// SetError puts the queue in the error state (IBV_EVENT_SRQ_ERR; the caller
// raises the event). From then on PostRecv, Modify and Query fail with EIO,
// Pop fetches nothing, and only Close (ibv_destroy_srq) succeeds. Flush
// still works, so the engine can complete outstanding WRs with errors.
func (q *Queue) SetError() {
	q.mu.Lock()
	q.failed = true
	q.limit = 0
	q.mu.Unlock()
}

// Flush removes the WRs outstanding when it is called, oldest first,
// calling fn on each (fn may be nil), and returns how many it removed. The
// engine uses it when a QP's own receive queue is flushed with
// IBV_WC_WR_FLUSH_ERR. fn runs without the queue lock, so it may push
// completions or call back into the queue; the *RecvWR it gets is reused
// after fn returns. WRs posted during the flush stay queued. Flush works in
// the error state and never raises the limit event.
func (q *Queue) Flush(fn func(wr *verbs.RecvWR)) int {
	q.mu.Lock()
	n := q.count
	if q.closed {
		n = 0
	}
	q.mu.Unlock()
	var wr verbs.RecvWR
	done := 0
	for ; done < n; done++ {
		q.mu.Lock()
		if q.closed || q.count == 0 {
			q.mu.Unlock()
			break
		}
		off := q.head * int(q.maxSGE)
		s := q.slots[q.head]
		wr.WRID = s.wrID
		wr.SGL = append(wr.SGL[:0], q.sges[off:off+int(s.n)]...)
		q.head++
		if q.head == len(q.slots) {
			q.head = 0
		}
		q.count--
		q.mu.Unlock()
		if fn != nil {
			fn(&wr)
		}
	}
	return done
}

// Len returns the number of WRs outstanding.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.count
}

// Attach records that one more QP uses the queue (ibv_create_qp with
// init_attr.srq set).
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
		panic("srq: Detach without Attach")
	}
	q.attached--
}

// Close is ibv_destroy_srq. It returns EBUSY, and changes nothing, while QPs
// are attached; it succeeds in the error state. Outstanding WRs are dropped
// without completions. Afterwards every verb fails with an error wrapping
// EINVAL and net.ErrClosed, including a second Close.
func (q *Queue) Close() error {
	const op = "ibv_destroy_srq"
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return closedError(op)
	}
	if q.attached > 0 {
		return newError(op, syscall.EBUSY, fmt.Sprintf("%d QPs still attached", q.attached))
	}
	q.closed = true
	q.slots, q.sges, q.head, q.count = nil, nil, 0, 0
	q.limit, q.onLimit = 0, nil
	return nil
}
