package transport

import (
	"sync"
	"time"

	"github.com/goroce/goroce/bth"
)

// Run to completion (Config.RunToCompletion). By default a packet crosses
// goroutines twice on each side (reader to shard to application; post to
// shard), and a 64-byte ping-pong spends more in those wake-ups than in the
// kernel. In this mode the goroutine that has the work does it, under the
// shard's token: PostSend runs the shard's slices itself (the requester builds
// the packets, the flush sends them), and a reader runs each shard it fed
// (responder, completer, ACKs, completions). Whoever finds the token taken
// wakes the shard goroutine, as in the default mode, so nothing waits and a QP
// never has two writers. Inline work is bounded by rtcSlices; the shard
// goroutine does the rest.

const rtcSlices = 4

// drive runs up to rtcSlices slices on the calling goroutine if the shard's
// token is free, waking the shard goroutine for the rest, and reports whether
// it got the token. poll: the caller polls a CQ (Engine.Poll, pollSlice).
func (s *shard) drive(poll bool) bool {
	if !s.mu.TryLock() {
		return false
	}
	for i := 0; i < rtcSlices; i++ {
		if poll && !s.pollSlice() || !poll && !s.slice() {
			break
		}
	}
	more := s.pending()
	s.mu.Unlock()
	if more {
		s.wake()
	}
	return true
}

// holdFor bounds how long a poll-driven slice's packets wait for the poller's
// next post before the shard goroutine sends them.
const holdFor = 50 * time.Microsecond

// pollSlice is a slice for a goroutine that polls a CQ: its completions become
// visible at once, and its plain ACKs are held until the poller's next post
// sends them after its own packets, an empty poll sends them, or holdFor
// passes. So a reply posted on seeing a receive leaves before that receive's
// ACK, which is off the round trip: rxe's order (rxe_resp.c completes a
// receive, then sends its ACK); otherwise the engine writes the ACK first.
// Token holder only.
func (s *shard) pollSlice() bool {
	if !s.step() {
		return false
	}
	s.drainWC()
	s.passDone.Store(s.e.cfg.Clock.Now().UnixNano())
	if !s.onlyACKs(s.held) {
		// Anything but plain ACKs leaves now, with the ACKs held before it: a
		// later slice's packets of the same QP must not overtake it (a PSN gap
		// at the peer).
		s.flush()
		return true
	}
	if len(s.out) > s.held {
		s.held = len(s.out)
		if s.heldArmed.CompareAndSwap(false, true) {
			if s.heldTimer == nil {
				s.heldTimer = s.e.cfg.Clock.AfterFunc(holdFor, s.heldDue)
			} else {
				s.heldTimer.Reset(holdFor)
			}
		}
	}
	return true
}

// onlyACKs reports whether out[from:] is plain ACKs only. Token holder only.
func (s *shard) onlyACKs(from int) bool {
	for i := from; i < len(s.out); i++ {
		if bth.Opcode(s.out[i].buf[0]) != bth.RCAck {
			return false
		}
	}
	return true
}

// heldDue is the hold timer: the shard goroutine sends what is still held.
func (s *shard) heldDue() {
	s.heldArmed.Store(false)
	s.wake()
}

// stopHold stops the hold timer once the held packets go out, so a ping-pong
// (whose next post sends them) does not wake the shard goroutine every
// holdFor. Token holder only.
func (s *shard) stopHold() {
	if s.heldArmed.CompareAndSwap(true, false) {
		s.heldTimer.Stop()
	}
}

// flushHeld sends what poll-driven slices hold on every shard whose token is
// free: the poller found nothing new, so waiting gains nothing.
func (e *Engine) flushHeld() {
	for _, s := range e.shards {
		if s.mu.TryLock() {
			if s.held > 0 {
				s.flush()
			}
			s.mu.Unlock()
		}
	}
}

// pending reports whether the shard has inbound datagrams or ready QPs it
// has not served. Token holder only.
func (s *shard) pending() bool {
	if s.wpos < len(s.work) || s.rpos < len(s.readyW) {
		return true
	}
	s.inMu.Lock()
	n := len(s.in) + len(s.ready)
	s.inMu.Unlock()
	return n > 0
}

// kickOrDrive runs the shard inline (run to completion) or wakes it.
func (s *shard) kickOrDrive(poll bool) {
	if !s.e.cfg.RunToCompletion || !s.drive(poll) {
		s.wake()
	}
}

// readyQP puts q on the shard's ready list without waking the shard.
func (s *shard) readyQP(q *QP) {
	if q.queued.CompareAndSwap(false, true) {
		s.inMu.Lock()
		s.ready = append(s.ready, q)
		s.inMu.Unlock()
	}
}

// pollBatch is the most messages one Poll takes from a receive path.
const pollBatch = 8

// poller is a receive path that Poll reads without waiting. mu keeps it to one
// reader at a time, the path's goroutine included (which waits outside mu); a
// Poll that finds mu taken skips the path.
type poller struct {
	mu sync.Mutex
	r  *reader
}

// Poll reads what is queued on the Link's receive paths without waiting and
// runs the shards it fed on the calling goroutine where their tokens are free,
// through to their completions: roce's CQ.Poll calls it on an empty CQ, so the
// goroutine that polls is the one that receives. It returns the messages read;
// it does nothing outside run-to-completion mode or over a Link that cannot be
// read without waiting (link.Poller).
func (e *Engine) Poll() int {
	if !e.cfg.RunToCompletion {
		return 0
	}
	n := 0
	for _, p := range e.pollers {
		if !p.mu.TryLock() {
			continue
		}
		k, err := p.r.take()
		p.mu.Unlock()
		p.r.kick()
		if err == nil {
			n += k
		}
	}
	if n == 0 {
		e.flushHeld()
	}
	return n
}
