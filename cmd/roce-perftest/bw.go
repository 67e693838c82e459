package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goroce/goroce/roce"
)

// sizes are the message sizes of the run: -s, or with -a every power of two
// from 2 up to 2^23 (send over UD: up to the MTU; the atomic tests: 8 only).
func (s *session) sizes() []int {
	if !s.c.all || s.c.test.verb == atomic {
		return []int{s.size}
	}
	top := maxSize
	if s.c.conn == connUD {
		top = s.mtu.Bytes()
	}
	var out []int
	for n := 2; n <= top; n *= 2 {
		out = append(out, n)
	}
	return out
}

// timed reports whether the run is measured by time (-D, --run_infinitely).
func (s *session) timed() bool { return s.c.set("duration") || s.c.runInf }

// waitCQ takes completions as perftest does: busy-polling, or with -e sleeping on
// the completion channel.
func (s *session) waitCQ(ctx context.Context, wc []roce.WC) (int, error) {
	if s.c.events {
		return s.cq.Wait(ctx, wc)
	}
	return s.cq.Spin(ctx, wc)
}

// wait is waitCQ bounded by the -D clock: a wait that reaches the next phase
// returns no completions and no error.
func (s *session) wait(ctx context.Context, k *clock, wc []roce.WC) (int, error) {
	wctx, cancel := k.waitCtx(ctx)
	n, err := s.waitCQ(wctx, wc)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return 0, nil
	}
	return n, err
}

// runTest runs the measurement and the closing steps of the test, for this side.
func (s *session) runTest(ctx context.Context) error {
	t := s.c.test
	switch {
	case t.lat && t.verb == write:
		return s.writeLat(ctx)
	case t.lat && t.verb == send:
		return s.sendLat(ctx)
	case t.lat:
		return s.readLat(ctx)
	case s.c.receives():
		return s.sendBW(ctx)
	}
	return s.rdmaBW(ctx)
}

// rdmaBW is the main of ib_write_bw, ib_read_bw and ib_atomic_bw. Without -b the
// server is passive: the client's RDMA goes straight to the advertised buffer,
// so it only waits for the client's final hand-shake and prints the client's
// report. With -b both sides run the client's loop.
func (s *session) rdmaBW(ctx context.Context) error {
	c := s.c
	s.bwHeaderLines()
	if c.server == "" && !c.duplex {
		// This hand-shake returns once the client has finished: no exchange timeout.
		if err := s.handShake(ctx, 0); err != nil {
			return err
		}
		rem, err := s.xchgReports(ctx, bwReport{})
		if err != nil {
			return err
		}
		s.printBW(rem, nil)
		if err := s.closeConnection(ctx); err != nil {
			return err
		}
		s.println(resultLine)
		return s.checkAtomicTarget(int(rem.iters))
	}
	if c.runInf {
		return s.bwInfinitely(ctx)
	}
	var rep bwReport
	for _, size := range s.sizes() {
		s.size = size
		if c.duplex {
			if err := s.barrier(ctx); err != nil {
				return err
			}
		}
		var err error
		if rep, err = s.bwClient(ctx); err != nil {
			return err
		}
		if c.duplex && c.all {
			if err := s.barrier(ctx); err != nil {
				return err
			}
		}
		if err := s.reportBW(ctx, rep); err != nil {
			return err
		}
	}
	s.println(resultLine)
	if !c.duplex {
		if err := s.barrier(ctx); err != nil {
			return err
		}
		if _, err := s.xchgReports(ctx, rep); err != nil {
			return err
		}
	}
	if err := s.checkAtomicResults(); err != nil {
		return err
	}
	return s.closeConnection(ctx)
}

// reportBW prints a run's row: this side's alone, or with -b the sum of both
// sides' after swapping reports (and with --report-both each side's too).
func (s *session) reportBW(ctx context.Context, rep bwReport) error {
	c := s.c
	if !c.duplex || (c.receives() && s.timed()) {
		s.printBW(rep, nil)
		return nil
	}
	rem, err := s.xchgReports(ctx, rep)
	if err != nil {
		return err
	}
	s.printBW(rep, &rem)
	if c.reportBoth && s.full() {
		for _, side := range []struct {
			name string
			r    bwReport
		}{{"Local", rep}, {"Remote", rem}} {
			fmt.Fprintf(s.out, "%s\n\n %s results: \n%s\n", resultLine, side.name, resultLine)
			h := bwHeader
			if c.reportGbits {
				h = bwHeaderG
			}
			fmt.Fprintln(s.out, h)
			s.printBW(side.r, nil)
		}
	}
	return nil
}

// opcode is the work request of the test's verb.
func (s *session) opcode() roce.WROpcode {
	switch s.c.test.verb {
	case read:
		return roce.WRRDMARead
	case send:
		return roce.WRSend
	case atomic:
		if s.c.atomicCAS {
			return roce.WRAtomicCmpAndSwp
		}
		return roce.WRAtomicFetchAndAdd
	}
	if s.c.writeImm {
		return roce.WRRDMAWriteWithImm
	}
	return roce.WRRDMAWrite
}

// slot is the buffer offset of message k of a bw run: perftest steps through
// its cycle buffer by cache-line-rounded messages when two fit, and else reuses
// one address (increase_loc_addr, increase_rem_addr).
func (s *session) slot(k int) int { return s.slotOf(k, s.size) }

// slotOf is slot for messages of length bytes.
func (s *session) slotOf(k, length int) int {
	if length > s.cycle/2 {
		return 0
	}
	step := s.inc(length)
	return k % (s.cycle / step) * step
}

// sendWR is message k of QP q: at the slot of k in q's send region, to the slot
// of k in the peer's advertised buffer. An atomic fetches into a word of its
// own (k's), when there is one.
func (s *session) sendWR(q, k int, flags roce.SendFlags) roce.SendWR {
	size := s.size
	wr := roce.SendWR{WRID: uint64(q)<<32 | uint64(uint32(k)), Opcode: s.opcode(), Flags: flags,
		SGL: []roce.SGE{{Addr: s.mr.Addr() + uint64(s.sendRegion(q)+s.slot(k)), Length: uint32(size), LKey: s.mr.LKey()}}}
	r := s.remote[q]
	switch s.c.test.verb {
	case write, read:
		wr.RemoteAddr, wr.RKey = r.VAddr+uint64(s.slot(k)), r.RKey
	case atomic:
		wr.RemoteAddr, wr.RKey = r.VAddr+uint64(s.slot(k)), r.RKey
		if s.c.atomicCAS {
			wr.CompareAdd, wr.Swap = 0, atomicSwap
		} else {
			wr.CompareAdd = atomicAdd
		}
		if len(s.results) > 0 {
			off := len(s.buf) - len(s.results) + 8*(q*s.c.iters+k)
			wr.SGL[0].Addr = s.mr.Addr() + uint64(off)
		}
	case send:
		if s.c.conn == connUD {
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ahs[q].AV(), r.QPN, qkey
		}
	}
	return wr
}

// window is the WRs QP q posts next to fill its send window (-t), within its -n
// unless the run is unbounded (by time), in wrs[:0]; scnt and ccnt are the QP's
// WRs posted and completed. With -l they come in whole lists, in which only
// every cqMod-th WR asks for a completion, as perftest's post list; without,
// each WR does.
func (s *session) window(wrs []roce.SendWR, q, scnt, ccnt int, unbounded bool) []roce.SendWR {
	c := s.c
	wrs = wrs[:0]
	for (scnt+len(wrs) < c.iters || unbounded) && scnt+len(wrs)+c.postList-ccnt <= c.txDepth {
		for j := range c.postList {
			flags := roce.SendSignaled
			if c.postList > 1 && (j+1)%c.cqMod != 0 {
				flags = 0
			}
			wrs = append(wrs, s.sendWR(q, scnt+len(wrs), flags))
		}
	}
	return wrs
}

// post posts wrs on QP q and returns how many it posted: with -l each list in
// one call, a chain of WRs in one ibv_post_send as perftest's; without, all of
// them in one call.
func (s *session) post(q int, wrs []roce.SendWR) (int, error) {
	step := len(wrs)
	if s.c.postList > 1 {
		step = s.c.postList
	}
	n := 0
	for len(wrs) > 0 {
		got, err := s.qps[q].PostSend(wrs[:step])
		n += got
		if err != nil {
			return n, err
		}
		wrs = wrs[step:]
	}
	return n, nil
}

// perCQE is how many WRs one send completion stands for: with -l, the CQ
// moderation; without, 1 (goroce asks for a completion of every WR).
func (s *session) perCQE() int {
	if s.c.postList > 1 {
		return s.c.cqMod
	}
	return 1
}

// bwClient is run_iter_bw: on every QP it keeps up to -t WRs outstanding until
// -n completed (or, with -D, until the clock ends), recording when each message
// was posted and each completion arrived.
func (s *session) bwClient(ctx context.Context) (bwReport, error) {
	c := s.c
	n := c.numQPs
	total := c.iters * n
	timed := s.timed()
	if timed {
		total = 0
	}
	var tm timing
	if !c.noPeak {
		tm.posted, tm.completed = make([]int64, 0, total), make([]int64, 0, total)
	}
	scnt, ccnt := make([]int, n), make([]int, n)
	totS, totC := 0, 0
	wc := make([]roce.WC, 64)
	wrs := make([]roce.SendWR, 0, c.txDepth)
	start := time.Now()
	k := newClock(timed, c.duration, c.margin)
	per := s.perCQE()
	for totS < total || totC < total || timed && !k.ended() {
		for q := range n {
			wrs = s.window(wrs, q, scnt[q], ccnt[q], timed)
			if timed && k.ended() {
				break
			}
			if len(wrs) == 0 {
				continue
			}
			now := int64(time.Since(start))
			for range wrs {
				if !c.noPeak {
					tm.posted = append(tm.posted, now)
				}
			}
			got, err := s.post(q, wrs)
			scnt[q] += got
			totS += got
			if err != nil {
				return bwReport{}, fmt.Errorf("couldn't post send: qp %d scnt=%d: %w", q, scnt[q], err)
			}
		}
		if totC >= totS {
			continue
		}
		got, err := s.wait(ctx, k, wc)
		if err != nil {
			return bwReport{}, fmt.Errorf("%w after %d/%d posted and %d completed", err, totS, total, totC)
		}
		now := time.Now()
		for _, w := range wc[:got] {
			if w.Status != roce.WCSuccess {
				return bwReport{}, fmt.Errorf("completion with error: status %v (%d) for wr_id %#x, syndrome %#x; scnt=%d ccnt=%d",
					w.Status, w.Status, w.WRID, w.VendorErr, totS, totC)
			}
			q := int(w.WRID >> 32)
			if q >= n {
				return bwReport{}, fmt.Errorf("completion for unknown wr_id %#x", w.WRID)
			}
			ccnt[q] += per
			totC += per
			for range per {
				if !c.noPeak {
					tm.completed = append(tm.completed, int64(now.Sub(start)))
				}
			}
		}
		k.count(now, got*per)
	}
	if timed {
		return s.bwReportOf(s.size, k.samples, timing{posted: []int64{0}, completed: []int64{int64(k.sampleEnd.Sub(k.sampleStart))}}, true), nil
	}
	if c.noPeak {
		tm = timing{posted: []int64{0}, completed: []int64{int64(time.Since(start))}}
	}
	return s.bwReportOf(s.size, total, tm, c.noPeak), nil
}

// bwInfinitely is run_iter_bw_infinitely: the client's loop with no end, and a
// row every -D seconds with what completed since the last one, until
// interrupted (SIGINT, SIGTERM or --timeout), which ends the run without error.
func (s *session) bwInfinitely(ctx context.Context) error {
	c := s.c
	n := c.numQPs
	scnt, ccnt := make([]int, n), make([]int, n)
	totS, totC, last := 0, 0, 0
	wc := make([]roce.WC, 64)
	period := time.Duration(c.duration) * time.Second
	mark := time.Now()
	tick := time.NewTicker(period)
	defer tick.Stop()
	factor := 1
	if c.duplex && c.test.verb != send {
		factor = 2
	}
	per := s.perCQE()
	var wrs []roce.SendWR
	for {
		for q := range n {
			wrs = s.window(wrs, q, scnt[q], ccnt[q], true)
			got, err := s.post(q, wrs)
			scnt[q] += got
			totS += got
			if err != nil {
				return fmt.Errorf("couldn't post send: qp %d: %w", q, err)
			}
		}
		got, err := s.waitCQ(ctx, wc)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		for _, w := range wc[:got] {
			if w.Status != roce.WCSuccess {
				return fmt.Errorf("completion with error: status %v (%d) for wr_id %#x", w.Status, w.Status, w.WRID)
			}
			ccnt[int(w.WRID>>32)] += per
			totC += per
		}
		select {
		case now := <-tick.C:
			rep := s.bwReportOf(s.size*factor, totC-last, timing{posted: []int64{0}, completed: []int64{int64(now.Sub(mark))}}, true)
			s.printBW(rep, nil)
			last, mark = totC, now
		default:
		}
	}
}

// postRecvs posts k receives on QP q, the next ones of the slots of q's
// advertised region; posted counts the receives q has had. With an SRQ they
// go to it, q naming only whose region they use (perftest's wr_id): any QP may
// consume them.
func (s *session) postRecvs(q, k int, posted []int) error {
	length := s.size
	if s.c.conn == connUD {
		length += udAddition
	}
	sgeLen := length
	if s.c.writeImm {
		sgeLen = 0 // the data goes where the WRITE puts it; the receive holds none
	}
	wrs := make([]roce.RecvWR, k)
	for i := range wrs {
		sge, low, err := s.recvSGE(q, posted[q]+i, length, sgeLen)
		if err != nil {
			return err
		}
		wrs[i] = roce.RecvWR{WRID: uint64(q)<<32 | uint64(low), SGL: []roce.SGE{sge}}
	}
	post := s.qps[q].PostRecv
	if s.srq != nil {
		post = s.srq.PostRecv
	}
	got, err := post(wrs)
	posted[q] += got
	if err != nil {
		return fmt.Errorf("couldn't post receive: qp %d: %w", q, err)
	}
	return nil
}

// recvOpcode is the opcode of the test's receive completions.
func (s *session) recvOpcode() roce.WCOpcode {
	if s.c.writeImm {
		return roce.WCRecvRDMAWithImm
	}
	return roce.WCRecv
}

// recvLen is the byte count a receive completion must have: for a WRITE with
// immediate, the length of the WRITE.
func (s *session) recvLen() uint32 {
	if s.c.conn == connUD {
		return uint32(s.size + udAddition)
	}
	return uint32(s.size)
}

// sendBW is the main of ib_send_bw, and of ib_write_bw --write_with_imm (the
// same steps, perftest's write_bw.c with WRITE_IMM): for each size, the receiving side (server,
// or both with -b) posts -r receives per QP, a hand-shake lets the sender start,
// and the run ends with each side's row (with -b, and not -D, the sum of both
// after swapping reports); -a adds a hand-shake after each size.
func (s *session) sendBW(ctx context.Context) error {
	c := s.c
	client := c.server != ""
	s.bwHeaderLines()
	for _, size := range s.sizes() {
		s.size = size
		posted := make([]int, c.numQPs)
		if !client || c.duplex {
			depth := c.rxDepth
			if !s.timed() {
				depth = min(depth, c.iters)
			}
			if s.srq != nil {
				depth = c.rxDepth / c.numQPs // the SRQ's -r, shared out among the QPs' regions
			}
			for q := range c.numQPs {
				if err := s.postRecvs(q, depth, posted); err != nil {
					return err
				}
			}
		}
		if err := s.barrier(ctx); err != nil {
			return err
		}
		var rep bwReport
		var err error
		switch {
		case c.runInf && client:
			return s.bwInfinitely(ctx)
		case c.runInf:
			_, err := s.sendServer(ctx, posted)
			return err
		case c.duplex:
			rep, err = s.sendBi(ctx, posted)
		case client:
			rep, err = s.bwClient(ctx)
		default:
			rep, err = s.sendServer(ctx, posted)
		}
		if err != nil {
			return err
		}
		// With -a, send_bw hand-shakes after a size's report, write_bw
		// --write_with_imm before it.
		if c.all && c.writeImm {
			if err := s.barrier(ctx); err != nil {
				return err
			}
		}
		if err := s.reportBW(ctx, rep); err != nil {
			return err
		}
		if c.all && !c.writeImm {
			if err := s.barrier(ctx); err != nil {
				return err
			}
		}
	}
	s.println(resultLine)
	return s.closeConnection(ctx)
}

// sendServer is run_iter_bw_server: it counts -n receive completions per QP
// (with -D, those of the sample), reposting each receive while more messages
// are due; the clock starts at the first message. With --run_infinitely it
// prints a row every -D seconds until interrupted.
func (s *session) sendServer(ctx context.Context, posted []int) (bwReport, error) {
	c := s.c
	n := c.numQPs
	total := c.iters * n
	timed := s.timed()
	wc := make([]roce.WC, 64)
	rcnt := 0
	var first, lastRow time.Time
	lastCount := 0
	k := newClock(false, 0, 0)
	for (rcnt < total || timed) && !(k.timed && k.ended()) {
		got, err := s.wait(ctx, k, wc)
		if c.runInf && ctx.Err() != nil {
			return bwReport{}, nil
		}
		if err != nil {
			return bwReport{}, fmt.Errorf("%w after %d/%d receives", err, rcnt, total)
		}
		now := time.Now()
		if got > 0 && first.IsZero() {
			first, lastRow = now, now
			if timed && !c.runInf {
				k = newClock(true, c.duration, c.margin)
			}
		}
		for _, w := range wc[:got] {
			if err := s.recvDone(w, rcnt, posted); err != nil {
				return bwReport{}, err
			}
			rcnt++
		}
		k.count(now, got)
		if c.runInf && now.Sub(lastRow) >= time.Duration(c.duration)*time.Second {
			s.printBW(s.bwReportOf(s.size, rcnt-lastCount, timing{posted: []int64{0}, completed: []int64{int64(now.Sub(lastRow))}}, true), nil)
			lastRow, lastCount = now, rcnt
		}
	}
	if timed {
		return s.bwReportOf(s.size, k.samples, timing{posted: []int64{0}, completed: []int64{int64(k.sampleEnd.Sub(k.sampleStart))}}, true), nil
	}
	return s.bwReportOf(s.size, total, timing{posted: []int64{0}, completed: []int64{int64(time.Since(first))}}, true), nil
}

// recvDone takes receive completion w, the n-th of the run: it checks it and
// gives its QP the receive back while more messages are due (all the time in
// a run by time).
func (s *session) recvDone(w roce.WC, n int, posted []int) error {
	if err := s.checkRecv(w, n); err != nil {
		return err
	}
	s.releaseRecv(w)
	if q := int(w.WRID >> 32); s.timed() || posted[q] < s.c.iters {
		return s.postRecvs(q, 1, posted)
	}
	return nil
}

// checkRecv checks a receive completion of a send test.
func (s *session) checkRecv(w roce.WC, rcnt int) error {
	switch {
	case w.Status != roce.WCSuccess:
		return fmt.Errorf("completion with error: status %v (%d) for wr_id %#x; rcnt=%d", w.Status, w.Status, w.WRID, rcnt)
	case w.Opcode != s.recvOpcode():
		return fmt.Errorf("receive %d: opcode %v, want %v", rcnt, w.Opcode, s.recvOpcode())
	case w.ByteLen != s.recvLen():
		return fmt.Errorf("receive %d: %d bytes, want %d", rcnt, w.ByteLen, s.recvLen())
	case int(w.WRID>>32) >= s.c.numQPs:
		return fmt.Errorf("receive for unknown wr_id %#x", w.WRID)
	}
	return nil
}

// sendBi is run_iter_bi, send_bw -b: both sides send and receive at once; the
// server starts sending at its first receive, so that neither side runs out of
// receives before the other has started. The report is of this side's sends.
func (s *session) sendBi(ctx context.Context, posted []int) (bwReport, error) {
	c := s.c
	n := c.numQPs
	total := c.iters * n
	timed := s.timed()
	if timed {
		total = 0
	}
	scnt, ccnt := make([]int, n), make([]int, n)
	totS, totC, totR := 0, 0, 0
	sending := c.server != ""
	wc := make([]roce.WC, 64)
	var wrs []roce.SendWR
	per := s.perCQE()
	var start time.Time
	k := newClock(false, 0, 0)
	if sending {
		start = time.Now()
		k = newClock(timed, c.duration, c.margin)
	}
	for totC < total || totR < total || timed && !k.ended() {
		if sending && !(timed && k.ended()) {
			for q := range n {
				wrs = s.window(wrs, q, scnt[q], ccnt[q], timed)
				got, err := s.post(q, wrs)
				scnt[q] += got
				totS += got
				if err != nil {
					return bwReport{}, fmt.Errorf("couldn't post send: qp %d: %w", q, err)
				}
			}
		}
		got, err := s.wait(ctx, k, wc)
		if err != nil {
			return bwReport{}, fmt.Errorf("%w after %d/%d sends and %d/%d receives", err, totC, total, totR, total)
		}
		now := time.Now()
		sends := 0
		for _, w := range wc[:got] {
			if w.Opcode != s.recvOpcode() {
				if w.Status != roce.WCSuccess {
					return bwReport{}, fmt.Errorf("completion with error: status %v (%d) for wr_id %#x", w.Status, w.Status, w.WRID)
				}
				ccnt[int(w.WRID>>32)] += per
				totC += per
				sends += per
				continue
			}
			if err := s.recvDone(w, totR, posted); err != nil {
				return bwReport{}, err
			}
			totR++
			if !sending {
				sending, start = true, now
				k = newClock(timed, c.duration, c.margin)
			}
		}
		k.count(now, sends)
	}
	if timed {
		return s.bwReportOf(s.size, k.samples, timing{posted: []int64{0}, completed: []int64{int64(k.sampleEnd.Sub(k.sampleStart))}}, true), nil
	}
	return s.bwReportOf(s.size, total, timing{posted: []int64{0}, completed: []int64{int64(time.Since(start))}}, true), nil
}
