package transport

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goroce/goroce/bth"
)

// Run to completion (Config.RunToCompletion). By default a received packet
// crosses goroutines twice (reader to shard to application), and a 64-byte
// ping-pong spends more in those wake-ups than in the kernel (a post worth a
// train runs its shard itself in both modes: postedDefault). In this mode the
// goroutine that has the work does it, under the shard's token: PostSend runs
// the shard's slices itself (the requester builds the packets, the flush
// sends them), and a reader runs each shard it fed
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
	s.driveLocked(poll)
	return true
}

// driveLocked is drive once the caller holds the token, which it gives back.
func (s *shard) driveLocked(poll bool) {
	for i := 0; i < rtcSlices; i++ {
		if poll && !s.pollSlice() || !poll && !s.slice() {
			break
		}
	}
	if s.posts.Load() == 0 {
		s.stopPosts() // before pending: a post it misses arms the timer again
	}
	more := s.pending()
	s.unlock()
	if more {
		s.wake()
	}
}

// A CQ poller waits for what another goroutine holds instead of skipping it:
// skipping spun the poller while the holder (the path's reader, mostly) had no
// core to finish the work the poll waited for. Each hold is bounded: one batch
// and rtcSlices slices, or one slice of the shard goroutine.

// waitDrive is drive for a CQ poller: it waits for the token held by another
// goroutine instead of leaving the work to it.
func (s *shard) waitDrive(poll bool) {
	s.e.waitLock(&s.mu)
	s.driveLocked(poll)
}

// waitLock takes mu for a CQ poller, counting the polls that had to wait
// (Stats.PollerWaits).
func (e *Engine) waitLock(mu *sync.Mutex) {
	if !mu.TryLock() {
		e.cfg.Stats.PollerWaits.Add(1)
		mu.Lock()
	}
}

// holdFor bounds how long a poll-driven slice's packets wait for the poller's
// next post before the shard goroutine sends them.
const holdFor = 50 * time.Microsecond

// pollSlice is a slice for a goroutine that polls a CQ: its completions become
// visible at once, and its plain ACKs are held until the poller's next post
// sends them ahead of its own packets, in the same system call; an empty poll
// sends them, or holdFor passes. The ACK still reaches the peer first: it
// leaves first, or, where the link delivers trains whole, it rides behind the
// reply in one train whose ACK the peer handles first (shard.ackBehind). A
// reply that overtakes the ACK of the message it answers reaches the peer's
// program before that program's send completed, an order no NIC makes:
// Debian 12's perftest (4.5) with -e, which takes both CQs' events from one
// completion channel, then waits for good for an event it already consumed.
// Token holder only.
func (s *shard) pollSlice() bool {
	if !s.step() {
		return false
	}
	s.drainWC()
	s.passDone.Store(s.stepAt)
	if !s.onlyACKs(s.held) || s.e.Streaming() {
		// Anything but plain ACKs leaves now, with the ACKs held before it: a
		// later slice's packets of the same QP must not overtake it (a PSN gap
		// at the peer). In a stream the ACKs open the peer's window, and no
		// reply of the poller's is coming to carry them.
		s.flush()
		return true
	}
	if len(s.out) > s.held {
		s.held = len(s.out)
		s.heldN.Store(int32(s.held))
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
// The timer is not stopped when held packets go out with a post, and a hold
// while it runs does not restart it: a ping-pong (whose every reply sends
// the ACK held before it) would otherwise stop and restart it on every round
// trip, two locks of the runtime's timer heap that took a quarter of a
// poll-driven slice (0.4 µs per round trip on each side). It runs out at
// most holdFor after the first packet it covers, and wakes the shard only if
// packets are held then. heldN is stored before heldArmed is tested
// (pollSlice), and heldArmed cleared before heldN is read here, so a hold
// that races with the timer either re-arms it or is seen by it.
func (s *shard) heldDue() {
	s.heldArmed.Store(false)
	if s.heldN.Load() > 0 {
		s.wake()
	}
}

// flushHeld sends what poll-driven slices hold on every shard: the poller found
// nothing new, so waiting gains nothing. It waits for a token another goroutine
// holds, whose slices may be making the completion the poller waits for.
func (e *Engine) flushHeld() {
	for _, s := range e.shards {
		e.waitLock(&s.mu)
		if s.held > 0 {
			s.flush()
		}
		s.unlock()
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

// kickOrDrive runs the shard inline (run to completion, or a reader that
// drives: Engine.readerDrives) or wakes it.
func (s *shard) kickOrDrive(poll, drives bool) {
	if !(s.e.cfg.RunToCompletion || drives) || !s.drive(poll) {
		s.wake()
	}
}

// A reader that hands a batch to a shard goroutine readies that goroutine,
// and with a core free the runtime wakes a sleeping thread to run it. The
// hand-off pipelines (the reader reads the next batch while the shard works
// on the other core) only where that wake is quick and lands on the free
// core, and that depends on the host:
//   - oversubscribed (GOMAXPROCS above the cores), the woken thread took a core
//     from the reader or the peer: RCWrite/1MiB at GOMAXPROCS 4 and 8 on a
//     2-core host left 13-18 % idle and ran 1.06-1.18 M pkts/s, against
//     1.20-1.37 M with the reader running the shards itself;
//   - at one P per core on a 2-core KVM guest (kernel 6.18), a wake of an
//     idle core's thread took 30 us at the median, as long as the batch's
//     work: RCWrite/1MiB ran 0.60-0.65 M with the hand-off and 0.97-1.16 M
//     with the reader driving (1.35-1.46 M with the reader polling through
//     the stream too, reader.read);
//   - at one P per core on the first host (2-core AMD EPYC guest) the hand-off
//     had been 9 % faster, 1.52 M against 1.39 M, before readers polled
//     through a stream.
//
// Running the batch where it was read costs a little where the wake is cheap
// and wins a lot where it is not, so a reader of the default mode runs the
// shards it fed itself when their tokens are free, as run to completion does
// (drive), and wakes a shard goroutine only for a shard another goroutine
// holds.
const (
	driveNever  = -1
	driveAlways = 1
)

// procsCheck caches whether GOMAXPROCS exceeds the cores, asked again every
// procsEvery calls: GOMAXPROCS may change while the engine runs, and asking
// takes the scheduler's lock.
type procsCheck struct {
	n    atomic.Uint32
	over atomic.Bool
}

const procsEvery = 1024

func (p *procsCheck) oversubscribed() bool {
	if p.n.Add(1)%procsEvery == 1 {
		p.over.Store(runtime.GOMAXPROCS(0) > runtime.NumCPU())
	}
	return p.over.Load()
}

// readerDrives reports whether a reader runs the shards its batch fed
// instead of waking their goroutines (see driveNever). Run to completion
// drives anyway (kickOrDrive).
func (e *Engine) readerDrives() bool {
	switch e.cfg.readerDrives {
	case driveNever:
		return false
	case driveAlways:
		return true
	}
	return !e.cfg.RunToCompletion
}

// Post batching. A post to an idle send queue is a request/response
// program's: in run-to-completion mode it sends before it returns (drive). A
// post behind outstanding WRs is a stream's, and a stream's program polls its
// CQ for their completions: its QP waits on the ready list for that poll
// (FlushPosts), which sends everything posted meanwhile in trains, one system
// call for up to a train's worth of packets instead of one per post. The wait
// is bounded: postBatch WRs posted behind send at once, and the post timer
// (holdFor) wakes the shard goroutine for a program that posted and then
// neither polls, posts nor arms its CQ.

// postBatch is how many WRs posted behind outstanding ones a shard leaves for
// the poller before a post sends them itself: a train's worth at one packet
// per WR (a train carries up to 64 datagrams).
const postBatch = 64

// posted follows a post of n WRs on a QP the caller put on the ready list;
// behind is how many WRs were outstanding on its send queue before.
func (s *shard) posted(behind, n int) {
	if !s.e.cfg.RunToCompletion {
		s.postedDefault(behind, n)
		return
	}
	if behind >= streamPackets {
		s.e.markStream()
	}
	if behind == 0 || s.posts.Add(int32(n)) >= postBatch {
		s.kickOrDrive(false, false)
		return
	}
	if s.postArmed.CompareAndSwap(false, true) {
		s.postMu.Lock()
		if s.postTimer == nil {
			s.postTimer = s.e.cfg.Clock.AfterFunc(holdFor, s.postDue)
		} else {
			s.postTimer.Reset(holdFor)
		}
		s.postMu.Unlock()
	}
}

// Posts in the default mode. A post that finds its shard idle sends its
// packets itself (drive): waking the shard goroutine for them costs a hand-off
// on the stream's critical path (post, send, ACK, completion, next post), and
// with perftest's window of 128 one-packet WRs (two trains) every such wait
// left a core idle: RCSend/4KiB spent 35-40 % of the machine idle. Only a post
// that is worth a train runs inline: one to an idle send queue (a request
// whose answer the program waits for) or a list of streamPackets WRs or more.
// A trickle of single WRs behind outstanding ones is left to the shard
// goroutine, which sends what accumulated by the time it runs in one train,
// instead of a system call per post. The readers keep handing their batches
// to the shard goroutine: a bulk receiver's read and its processing run on two
// cores at once (run to completion's inline receive serializes them, and cost
// RCWrite/1MiB a third of its rate).

// postedDefault is posted outside run-to-completion mode.
func (s *shard) postedDefault(behind, n int) {
	if s.e.inlinePosts && (behind == 0 || n >= streamPackets) && s.drive(false) {
		return
	}
	s.wake()
}

// postDue is the post timer: the shard goroutine sends what the poller left.
func (s *shard) postDue() {
	s.postArmed.Store(false)
	if s.posts.Load() > 0 {
		s.wake()
	}
}

// stopPosts stops the post timer once no post waits, so a stream whose poller
// sends its posts does not wake the shard goroutine every holdFor. It stops
// the timer before it clears postArmed: a post that saw the timer armed put
// its QP on the ready list before, where the caller's next look finds it.
// Token holder only.
func (s *shard) stopPosts() {
	if !s.postArmed.Load() {
		return
	}
	s.postMu.Lock()
	if s.postTimer != nil {
		s.postTimer.Stop()
	}
	s.postMu.Unlock()
	s.postArmed.Store(false)
}

// FlushPosts sends what posts left for the CQ poller (see posted), waiting
// for the token of a shard another goroutine holds. In run-to-completion mode
// roce's CQ.Poll and CQ.ReqNotify call it; otherwise it does nothing.
func (e *Engine) FlushPosts() {
	if !e.cfg.RunToCompletion {
		return
	}
	for _, s := range e.shards {
		if s.posts.Load() > 0 {
			s.waitDrive(false)
		}
	}
}

// Streams. A busy-polling program waits either for a request's answer, due
// within a round trip, which it should spin for (a sched_yield cost stock
// ib_send_lat on cabi 45-80 µs), or for a stream's progress, which needs the
// peer and a core, which it should yield for (stock ib_send_bw spinning fell
// from 160-556 to 22-67 MB/s at load 13). Streaming tells the two apart.

const (
	streamFor     = time.Millisecond // how long a stream's last sign counts
	streamPackets = 8                // packets in one read or one send, or WRs outstanding, that make a stream
)

// markStream notes a sign of a stream now.
func (e *Engine) markStream() {
	e.streamUntil.Store(e.cfg.Clock.Now().Add(streamFor).UnixNano())
}

// Streaming reports whether the engine carried a stream within the last
// streamFor: a post behind streamPackets outstanding WRs or more, or a
// receive or send batch of streamPackets packets or more (a large message's
// stream has few WRs and few ACKs). Outside run-to-completion
// mode it is false.
func (e *Engine) Streaming() bool {
	return e.cfg.RunToCompletion && e.streamed()
}

// streamed is Streaming in either mode: the receive paths' goroutines poll
// before they park while it holds (reader.read).
func (e *Engine) streamed() bool {
	return e.cfg.Clock.Now().UnixNano() < e.streamUntil.Load()
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
// reader at a time, the path's goroutine included (which waits for more outside
// mu); a Poll that finds mu taken waits for it.
type poller struct {
	mu sync.Mutex
	r  *reader
}

// Poll reads what is queued on the Link's receive paths without waiting and
// runs the shards it fed on the calling goroutine, through to their
// completions: roce's CQ.Poll calls it on an empty CQ, so the goroutine that
// polls is the one that receives. It waits for a path or shard another
// goroutine holds (waitDrive), so what that goroutine read is run or handed
// on when it returns. It returns the messages read; it does nothing outside
// run-to-completion mode or over a Link that cannot be read without waiting
// (link.Poller).
func (e *Engine) Poll() int {
	if !e.cfg.RunToCompletion {
		return 0
	}
	n := 0
	for _, p := range e.pollers {
		e.waitLock(&p.mu)
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
