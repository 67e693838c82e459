package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/roce"
)

// errPhaseEnd stops a -D latency loop that waits for the peer when the clock
// runs out.
var errPhaseEnd = errors.New("duration over")

// latSizes are the sizes of a latency run: -s, or with -a 2 to 2^23 (send_lat
// over UD: to the MTU; atomic_lat has no -a).
func (s *session) latSizes() []int { return s.sizes() }

// latIters is whether the run goes by time (-D), and how many iterations it
// makes otherwise (0 in a run by time).
func (s *session) latIters() (bool, int) {
	if s.timed() {
		return true, 0
	}
	return false, s.c.iters
}

// latReport prints the row of one latency run.
func (s *session) latReport(size int, posted []int64, k *clock) {
	if k.timed {
		s.printLatDuration(size, k.samples, k.sampleEnd.Sub(k.sampleStart))
		return
	}
	s.printLat(size, s.c.iters, posted)
}

// writeLat is the main of ib_write_lat with run_iter_lat_write: each side writes
// -s bytes to the other, the last byte carrying its count, and waits for the
// peer's count in the last byte of its own advertised buffer before writing
// again; the server writes first. -a runs every size in turn with no hand-shake
// between them, as perftest; there is no closing exchange.
func (s *session) writeLat(ctx context.Context) error {
	s.latHeaderLines()
	for _, size := range s.latSizes() {
		s.size = size
		posted, k, err := s.writeLatRun(ctx)
		if err != nil {
			return err
		}
		s.latReport(size, posted, k)
	}
	s.println(resultLine)
	return nil
}

func (s *session) writeLatRun(ctx context.Context) ([]int64, *clock, error) {
	c := s.c
	server := c.server == ""
	size := s.size
	sendLast := size - 1                   // post_buf
	pollLast := s.advertised(0) + size - 1 // poll_buf
	timed, iters := s.latIters()
	posted := make([]int64, 0, iters)
	start := time.Now()
	k := newClock(timed, c.duration, c.margin)
	wc := make([]roce.WC, 1)
	scnt, rcnt, ccnt := 0, 0, 0
	for scnt < iters || ccnt < iters || rcnt < iters || timed && !k.ended() {
		if (rcnt < iters || timed) && !(scnt < 1 && server) {
			rcnt++
			if err := s.waitByte(ctx, k, pollLast, byte(rcnt)); errors.Is(err, errPhaseEnd) {
				break
			} else if err != nil {
				return nil, nil, fmt.Errorf("%w: waiting for write %d/%d (sent %d)", err, rcnt, iters, scnt)
			}
		}
		if scnt < iters || timed {
			if !timed {
				posted = append(posted, int64(time.Since(start)))
			}
			scnt++
			// The previous write has completed (waited for below), so the engine
			// no longer reads this buffer.
			s.buf[sendLast] = byte(scnt)
			wr := roce.SendWR{WRID: uint64(scnt), Opcode: roce.WRRDMAWrite, Flags: roce.SendSignaled,
				SGL:        []roce.SGE{{Addr: s.mr.Addr(), Length: uint32(size), LKey: s.mr.LKey()}},
				RemoteAddr: s.remote[0].VAddr, RKey: s.remote[0].RKey}
			if _, err := s.qps[0].PostSend([]roce.SendWR{wr}); err != nil {
				return nil, nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if timed && k.ended() {
			break
		}
		if ccnt < iters || timed {
			if err := s.waitOne(ctx, wc); err != nil {
				return nil, nil, fmt.Errorf("%w after %d/%d writes completed", err, ccnt, iters)
			}
			ccnt++
			k.count(time.Now(), 1)
		}
	}
	return posted, k, nil
}

// waitOne waits for one send completion and checks it.
func (s *session) waitOne(ctx context.Context, wc []roce.WC) error {
	for {
		n, err := s.waitCQ(ctx, wc[:1])
		if err != nil {
			return err
		}
		if n == 0 {
			continue
		}
		if wc[0].Status != roce.WCSuccess {
			return fmt.Errorf("completion with error: status %v (%d) for wr_id %d", wc[0].Status, wc[0].Status, wc[0].WRID)
		}
		return nil
	}
}

// waitByte polls byte i of the buffer until it is v. The peer's RDMA WRITE lands
// there with no completion, so every look first makes an ibv_query_qp call: it
// runs on the QP's engine shard, which is the one that writes the buffer, so
// every write that shard made before it is visible to the look that follows, and
// the QP's state tells a dead connection apart from a slow one. A -D clock that
// ends stops the wait with errPhaseEnd.
func (s *session) waitByte(ctx context.Context, k *clock, i int, v byte) error {
	for spins := 0; ; spins++ {
		a, err := s.qps[0].Query()
		if err != nil {
			return err
		}
		if peekByte(s.buf, i) == v {
			return nil
		}
		if a.State == roce.QPSErr {
			return fmt.Errorf("QP went to the error state")
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if k.ended() {
			return errPhaseEnd
		}
		if spins > 64 {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// peekByte reads b[i] the way perftest reads its volatile poll buffer. The engine
// may be writing that byte at this very moment (the peer's next RDMA WRITE has no
// completion to synchronise with), so this one access is hidden from the race
// detector: a byte cannot tear, and waitByte acts only on the value it waits for,
// which the engine wrote before the ibv_query_qp call that preceded the read.
// noinline keeps the load inside the polling loop.
//
//go:norace
//go:noinline
func peekByte(b []byte, i int) byte { return b[i] }

// readLat is the main of ib_read_lat and ib_atomic_lat. The client (run_iter_lat)
// posts one READ or atomic at a time to the server's buffer and waits for it,
// for every size with -a, then closes; the server only waits for the closing
// exchange, for as long as the client's test takes.
func (s *session) readLat(ctx context.Context) error {
	if s.c.server == "" {
		x, cancel := xctx(ctx)
		defer cancel()
		if err := s.closeAfter(ctx, x); err != nil {
			return err
		}
		s.println(resultLine)
		return s.checkAtomicTarget(0)
	}
	s.latHeaderLines()
	for _, size := range s.latSizes() {
		s.size = size
		posted, k, err := s.readLatRun(ctx)
		if err != nil {
			return err
		}
		s.latReport(size, posted, k)
	}
	if err := s.checkAtomicResults(); err != nil {
		return err
	}
	if err := s.closeConnection(ctx); err != nil {
		return err
	}
	s.println(resultLine)
	return nil
}

func (s *session) readLatRun(ctx context.Context) ([]int64, *clock, error) {
	c := s.c
	timed, iters := s.latIters()
	posted := make([]int64, 0, iters)
	start := time.Now()
	k := newClock(timed, c.duration, c.margin)
	wc := make([]roce.WC, 1)
	for i := 0; i < iters || timed && !k.ended(); i++ {
		if !timed {
			posted = append(posted, int64(time.Since(start)))
		}
		// Every READ and atomic goes to the same remote address, as perftest's.
		wr := s.sendWR(0, 0, roce.SendSignaled)
		wr.WRID = uint64(i)
		if s.c.test.verb == atomic && len(s.results) > 0 {
			wr.SGL[0].Addr = s.mr.Addr() + uint64(len(s.buf)-len(s.results)+8*i)
		}
		if _, err := s.qps[0].PostSend([]roce.SendWR{wr}); err != nil {
			return nil, nil, fmt.Errorf("couldn't post send: scnt=%d: %w", i, err)
		}
		if err := s.waitOne(ctx, wc); err != nil {
			return nil, nil, fmt.Errorf("%w after %d/%d", err, i, iters)
		}
		k.count(time.Now(), 1)
	}
	return posted, k, nil
}

// sendLat is the main of ib_send_lat with run_iter_lat_send: for each size, both
// sides post -r receives, a hand-shake, then the client sends first and each
// side answers every message it receives with one of its own; then the closing
// exchange.
func (s *session) sendLat(ctx context.Context) error {
	s.latHeaderLines()
	for _, size := range s.latSizes() {
		s.size = size
		posted := make([]int, 1)
		depth := s.c.rxDepth
		if !s.timed() {
			depth = min(depth, s.c.iters)
		}
		if err := s.postRecvs(0, depth, posted); err != nil {
			return err
		}
		if err := s.barrier(ctx); err != nil {
			return err
		}
		times, k, err := s.sendLatRun(ctx, posted)
		if err != nil {
			return err
		}
		s.latReport(size, times, k)
	}
	s.println(resultLine)
	return s.closeConnection(ctx)
}

func (s *session) sendLatRun(ctx context.Context, posted []int) ([]int64, *clock, error) {
	c := s.c
	client := c.server != ""
	timed, iters := s.latIters()
	times := make([]int64, 0, iters)
	start := time.Now()
	k := newClock(false, 0, 0)
	if client {
		k = newClock(timed, c.duration, c.margin)
	}
	wc := make([]roce.WC, 16)
	scnt, rcnt, ccnt := 0, 0, 0
	pending := 0 // receives taken while waiting for a send's completion
	// handle takes the completions in wc[:n]; it returns how many were receives.
	handle := func(n int) (int, error) {
		recvs := 0
		for _, w := range wc[:n] {
			if w.Opcode != roce.WCRecv {
				if w.Status != roce.WCSuccess {
					return 0, fmt.Errorf("completion with error: status %v (%d) for wr_id %#x; scnt=%d rcnt=%d", w.Status, w.Status, w.WRID, scnt, rcnt)
				}
				ccnt++
				continue
			}
			if err := s.checkRecv(w, rcnt+pending+recvs); err != nil {
				return 0, err
			}
			s.releaseRecv(w)
			recvs++
		}
		return recvs, nil
	}
	for scnt < iters || rcnt < iters || timed && !k.ended() {
		if (rcnt < iters || timed) && !(scnt < 1 && client) {
			got := pending
			pending = 0
			for got == 0 {
				n, err := s.wait(ctx, k, wc)
				if err != nil {
					return nil, nil, fmt.Errorf("%w after %d/%d receives", err, rcnt, iters)
				}
				if timed && k.ended() {
					break
				}
				if got, err = handle(n); err != nil {
					return nil, nil, err
				}
			}
			if got > 0 {
				if !k.timed && timed {
					k = newClock(true, c.duration, c.margin) // the server's clock starts at its first receive
				}
				rcnt += got
				k.count(time.Now(), got)
				if more := got; timed || posted[0] < iters {
					if !timed {
						more = min(got, iters-posted[0])
					}
					if err := s.postRecvs(0, more, posted); err != nil {
						return nil, nil, err
					}
				}
			}
		}
		if timed && k.ended() {
			break
		}
		if scnt < iters || timed {
			if !timed {
				times = append(times, int64(time.Since(start)))
			}
			wr := s.sendWR(0, 0, roce.SendSignaled)
			wr.WRID = uint64(scnt)
			if _, err := s.qps[0].PostSend([]roce.SendWR{wr}); err != nil {
				return nil, nil, fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			scnt++
			// As perftest (cq_mod is 1 with a TX depth of 1): the send's
			// completion comes before the next receive is waited for, so
			// the one-WR send queue is free for the next answer even when
			// the peer's next message arrives before this send's ACK.
			for ccnt < scnt && !(timed && k.ended()) {
				n, err := s.wait(ctx, k, wc)
				if err != nil {
					return nil, nil, fmt.Errorf("%w after %d/%d send completions", err, ccnt, scnt)
				}
				got, err := handle(n)
				if err != nil {
					return nil, nil, err
				}
				pending += got
			}
		}
	}
	// Every send is acknowledged before the closing exchange (RC; UC and UD
	// complete at once).
	for ccnt < scnt && !(timed && k.ended()) {
		n, err := s.waitCQ(ctx, wc)
		if err != nil {
			return nil, nil, fmt.Errorf("%w after %d/%d send completions", err, ccnt, scnt)
		}
		got, err := handle(n)
		if err != nil {
			return nil, nil, err
		}
		if got > 0 && !timed {
			return nil, nil, fmt.Errorf("%d receives beyond the %d expected", got, iters)
		}
	}
	return times, k, nil
}
