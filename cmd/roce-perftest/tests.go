package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/goroce/goroce/roce"
)

const (
	resultLine = "---------------------------------------------------------------------------------------"
	bwHeader   = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
	latHeader  = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
	mib        = 1 << 20
)

// runTest runs the measurement and the closing steps of the test, for this side.
func (s *session) runTest(ctx context.Context) error {
	client := s.c.server != ""
	switch {
	case s.c.test == writeLat:
		return s.writeLat(ctx)
	case s.c.test == sendLat:
		return s.sendLat(ctx)
	case s.c.test == readLat && !client:
		// read_lat's server only waits for the client's closing hand-shake, for
		// as long as the client's test takes.
		x, cancel := xctx(ctx)
		defer cancel()
		return s.closeAfter(ctx, x)
	case s.c.test == readLat:
		return s.readLat(ctx)
	case s.c.test == sendBW && !client:
		return s.sendServer(ctx)
	case !client:
		return s.passiveServer(ctx)
	default:
		return s.bwClient(ctx)
	}
}

// passiveServer is the write_bw and read_bw server: the client's RDMA goes straight
// to the advertised buffer, so it only waits for the client's final hand-shake and
// prints the client's report.
func (s *session) passiveServer(ctx context.Context) error {
	fmt.Fprintln(s.out, resultLine)
	fmt.Fprintln(s.out, bwHeader)
	// This hand-shake returns once the client has finished: no exchange timeout.
	if err := s.handShake(ctx); err != nil {
		return err
	}
	rem, err := s.xchgReports(ctx, bwReport{})
	if err != nil {
		return err
	}
	printBW(s.out, rem)
	if err := s.closeConnection(ctx); err != nil {
		return err
	}
	fmt.Fprintln(s.out, resultLine)
	return nil
}

// opcode is the work request the bw client posts.
func (s *session) opcode() roce.WROpcode {
	switch s.c.test {
	case readBW:
		return roce.WRRDMARead
	case sendBW:
		return roce.WRSend
	}
	return roce.WRRDMAWrite
}

// slot is the buffer offset of message n: perftest steps through its cycle buffer
// by cache-line-rounded messages when two fit, and else reuses one address.
func (s *session) slot(n int) int {
	if s.c.size > s.cycle/2 {
		return 0
	}
	step := s.inc(s.c.size)
	return n % (s.cycle / step) * step
}

// bwClient is run_iter_bw: it keeps up to -t WRs outstanding until -n completed,
// then hand-shakes, swaps the reports (not for send_bw) and closes.
func (s *session) bwClient(ctx context.Context) error {
	c := s.c
	op := s.opcode()
	if op == roce.WRSend {
		// send_bw: the server posts its receives before this hand-shake.
		x, cancel := xctx(ctx)
		err := s.handShake(x)
		cancel()
		if err != nil {
			return err
		}
	}
	fmt.Fprintln(s.out, resultLine)
	fmt.Fprintln(s.out, bwHeader)
	posted := make([]time.Time, c.iters)
	best := time.Duration(math.MaxInt64)
	wc := make([]roce.WC, 64)
	wrs := make([]roce.SendWR, 0, c.txDepth)
	scnt, ccnt := 0, 0
	start := time.Now()
	for ccnt < c.iters {
		wrs = wrs[:0]
		for n := scnt; n < c.iters && n-ccnt < c.txDepth; n++ {
			off := s.slot(n)
			wr := roce.SendWR{WRID: uint64(n), Opcode: op, Flags: roce.SendSignaled,
				SGL: []roce.SGE{{Addr: s.mr.Addr() + uint64(off), Length: uint32(c.size), LKey: s.mr.LKey()}}}
			if op != roce.WRSend {
				wr.RemoteAddr, wr.RKey = s.remote.VAddr+uint64(off), s.remote.RKey
			}
			wrs = append(wrs, wr)
		}
		if len(wrs) > 0 {
			now := time.Now()
			for _, wr := range wrs {
				posted[wr.WRID] = now
			}
			n, err := s.qp.PostSend(wrs)
			scnt += n
			if err != nil {
				return fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		n, err := s.cq.Wait(ctx, wc)
		if err != nil {
			return fmt.Errorf("%w after %d/%d posted and %d completed", err, scnt, c.iters, ccnt)
		}
		now := time.Now()
		for _, w := range wc[:n] {
			if w.Status != roce.WCSuccess {
				return fmt.Errorf("completion with error: status %v (%d) for wr_id %d, syndrome %#x; scnt=%d ccnt=%d",
					w.Status, w.Status, w.WRID, w.VendorErr, scnt, ccnt)
			}
			if w.WRID >= uint64(c.iters) {
				return fmt.Errorf("completion for unknown wr_id %d", w.WRID)
			}
			best = min(best, now.Sub(posted[w.WRID]))
			ccnt++
		}
	}
	elapsed := time.Since(start)
	rep := bwResult(c.size, c.iters, elapsed, best)
	printBW(s.out, rep)
	if op != roce.WRSend {
		x, cancel := xctx(ctx)
		err := s.handShake(x)
		cancel()
		if err != nil {
			return err
		}
		if _, err := s.xchgReports(ctx, rep); err != nil {
			return err
		}
	}
	if err := s.closeConnection(ctx); err != nil {
		return err
	}
	fmt.Fprintln(s.out, resultLine)
	return nil
}

// sendServer is the send_bw server (ctx_set_recv_wqes, run_iter_bw_server): it
// posts -r receives before the barrier, reposts each one that completes, and counts
// -n completions.
func (s *session) sendServer(ctx context.Context) error {
	c := s.c
	depth := min(c.rxDepth, c.iters)
	rposted := 0
	post := func(k int) error {
		wrs := make([]roce.RecvWR, k)
		for i := range wrs {
			off := s.half + s.slot(rposted+i)
			wrs[i] = roce.RecvWR{WRID: uint64(rposted + i), SGL: []roce.SGE{{Addr: s.mr.Addr() + uint64(off),
				Length: uint32(c.size), LKey: s.mr.LKey()}}}
		}
		n, err := s.qp.PostRecv(wrs)
		rposted += n
		if err != nil {
			return fmt.Errorf("couldn't post receive: %w", err)
		}
		return nil
	}
	if err := post(depth); err != nil {
		return err
	}
	x, cancel := xctx(ctx)
	err := s.handShake(x)
	cancel()
	if err != nil {
		return err
	}
	fmt.Fprintln(s.out, resultLine)
	fmt.Fprintln(s.out, bwHeader)
	wc := make([]roce.WC, 64)
	rcnt := 0
	start := time.Now()
	best := time.Duration(math.MaxInt64)
	last := start
	for rcnt < c.iters {
		n, err := s.cq.Wait(ctx, wc)
		if err != nil {
			return fmt.Errorf("%w after %d/%d receives", err, rcnt, c.iters)
		}
		now := time.Now()
		for _, w := range wc[:n] {
			if w.Status != roce.WCSuccess {
				return fmt.Errorf("completion with error: status %v (%d) for wr_id %d; rcnt=%d", w.Status, w.Status, w.WRID, rcnt)
			}
			if w.Opcode != roce.WCRecv {
				return fmt.Errorf("receive %d: opcode %v, want RECV", rcnt, w.Opcode)
			}
			if w.ByteLen != uint32(c.size) {
				return fmt.Errorf("receive %d: %d bytes, want %d", rcnt, w.ByteLen, c.size)
			}
			if rcnt > 0 {
				best = min(best, now.Sub(last))
			}
			last = now
			rcnt++
		}
		if need := c.iters - rposted; need > 0 {
			if err := post(min(need, n)); err != nil {
				return err
			}
		}
	}
	rep := bwResult(c.size, c.iters, time.Since(start), best)
	printBW(s.out, rep)
	if err := s.closeConnection(ctx); err != nil {
		return err
	}
	fmt.Fprintln(s.out, resultLine)
	return nil
}

// bwResult computes perftest's figures: average over the whole run, peak from the
// fastest single message, in MB/sec of 2^20 bytes.
func bwResult(size, iters int, elapsed, best time.Duration) bwReport {
	sec := max(elapsed.Seconds(), 1e-9)
	r := bwReport{size: uint64(size), iters: uint64(iters)}
	r.avg = float64(size) * float64(iters) / sec / mib
	r.msgRatep = float64(iters) / sec / 1e6
	r.peak = r.avg
	if best > 0 && best < time.Duration(math.MaxInt64) {
		r.peak = max(r.avg, float64(size)/best.Seconds()/mib)
	}
	return r
}

func printBW(w interface{ Write([]byte) (int, error) }, r bwReport) {
	fmt.Fprintf(w, " %-7d    %-10d       %-7.2f            %-7.2f\t\t   %-7.6f\n", r.size, r.iters, r.peak, r.avg, r.msgRatep)
}

// writeLat is run_iter_lat_write: each side writes -s bytes to the other, the last
// byte carrying its count, and waits for the peer's count in the last byte of its
// own advertised buffer before writing again. The server writes first. There is no
// closing exchange: ib_write_lat just exits.
func (s *session) writeLat(ctx context.Context) error {
	c := s.c
	server := c.server == ""
	sendLast := c.size - 1          // post_buf
	pollLast := s.half + c.size - 1 // poll_buf
	fmt.Fprintln(s.out, resultLine)
	fmt.Fprintln(s.out, latHeader)
	posted := make([]time.Time, c.iters)
	wc := make([]roce.WC, 1)
	scnt, rcnt, ccnt := 0, 0, 0
	for scnt < c.iters || ccnt < c.iters || rcnt < c.iters {
		if rcnt < c.iters && !(scnt < 1 && server) {
			rcnt++
			if err := s.waitByte(ctx, pollLast, byte(rcnt)); err != nil {
				return fmt.Errorf("%w: waiting for write %d/%d (sent %d)", err, rcnt, c.iters, scnt)
			}
		}
		if scnt < c.iters {
			posted[scnt] = time.Now()
			scnt++
			// The previous write has completed (waited for below), so the engine
			// no longer reads this buffer.
			s.buf[sendLast] = byte(scnt)
			wr := roce.SendWR{WRID: uint64(scnt), Opcode: roce.WRRDMAWrite, Flags: roce.SendSignaled,
				SGL:        []roce.SGE{{Addr: s.mr.Addr(), Length: uint32(c.size), LKey: s.mr.LKey()}},
				RemoteAddr: s.remote.VAddr, RKey: s.remote.RKey}
			if _, err := s.qp.PostSend([]roce.SendWR{wr}); err != nil {
				return fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if ccnt < c.iters {
			n, err := s.cq.Wait(ctx, wc)
			if err != nil {
				return fmt.Errorf("%w after %d/%d writes completed", err, ccnt, c.iters)
			}
			if n > 0 {
				if wc[0].Status != roce.WCSuccess {
					return fmt.Errorf("completion with error: status %v (%d) for write %d", wc[0].Status, wc[0].Status, wc[0].WRID)
				}
				ccnt++
			}
		}
	}
	printLat(s.out, c.size, c.iters, posted, 2)
	return nil
}

// waitByte polls byte i of the buffer until it is v. The peer's RDMA WRITE lands
// there with no completion, so every look first makes an ibv_query_qp call: it
// runs on the QP's engine shard, which is the one that writes the buffer, so
// every write that shard made before it is visible to the look that follows, and
// the QP's state tells a dead connection apart from a slow one.
func (s *session) waitByte(ctx context.Context, i int, v byte) error {
	for spins := 0; ; spins++ {
		a, err := s.qp.Query()
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
		if spins > 64 {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// latTail is perftest's LAT_MEASURE_TAIL: the largest samples it drops.
const latTail = 2

// printLat prints perftest's latency row as print_report_lat computes it: the gaps
// between consecutive posts are round trips, each divided by rtt (2 for write_lat
// and send_lat, one way; 1 for read_lat); sorted, the two largest are dropped, and
// the rest give min, max, median (t_typical), mean, standard deviation and the
// 99% and 99.9% percentiles.
func printLat(w interface{ Write([]byte) (int, error) }, size, iters int, posted []time.Time, rtt float64) {
	var d []float64
	for i := 1; i < len(posted); i++ {
		d = append(d, float64(posted[i].Sub(posted[i-1]).Nanoseconds())/rtt/1e3)
	}
	slices.Sort(d)
	if len(d) > latTail {
		d = d[:len(d)-latTail]
	}
	if len(d) == 0 {
		d = []float64{0}
	}
	n := len(d)
	median := d[n/2]
	if (n-1)%2 != 0 {
		median = (d[n/2] + d[n/2-1]) / 2
	}
	var sum, sq float64
	for _, v := range d {
		sum += v
	}
	avg := sum / float64(n)
	for _, v := range d {
		sq += (v - avg) * (v - avg)
	}
	pct := func(p float64) float64 { return d[max(0, int(math.Ceil(p*float64(n)))-1)] }
	fmt.Fprintf(w, " %-7d %-10d     %-7.2f        %-7.2f      %-7.2f         %-7.2f          %-7.2f            %-7.2f                 %-7.2f\n",
		size, iters, d[0], d[n-1], median, avg, math.Sqrt(sq/float64(n)), pct(0.99), pct(0.999))
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

// readLat is read_lat's client (run_iter_lat with RDMA READ): one READ at a time
// from the server's buffer, each waited for, then the closing exchange.
func (s *session) readLat(ctx context.Context) error {
	c := s.c
	fmt.Fprintln(s.out, resultLine)
	fmt.Fprintln(s.out, latHeader)
	posted := make([]time.Time, c.iters)
	wc := make([]roce.WC, 1)
	for i := range c.iters {
		posted[i] = time.Now()
		wr := roce.SendWR{WRID: uint64(i), Opcode: roce.WRRDMARead, Flags: roce.SendSignaled,
			SGL:        []roce.SGE{{Addr: s.mr.Addr(), Length: uint32(c.size), LKey: s.mr.LKey()}},
			RemoteAddr: s.remote.VAddr, RKey: s.remote.RKey}
		if _, err := s.qp.PostSend([]roce.SendWR{wr}); err != nil {
			return fmt.Errorf("couldn't post send: scnt=%d: %w", i, err)
		}
		if _, err := s.cq.Wait(ctx, wc); err != nil {
			return fmt.Errorf("%w after %d/%d reads", err, i, c.iters)
		}
		if wc[0].Status != roce.WCSuccess {
			return fmt.Errorf("completion with error: status %v (%d) for read %d", wc[0].Status, wc[0].Status, i)
		}
	}
	printLat(s.out, c.size, c.iters, posted, 1)
	if err := s.closeConnection(ctx); err != nil {
		return err
	}
	fmt.Fprintln(s.out, resultLine)
	return nil
}

// sendLat is send_lat (run_iter_lat_send): both sides post receives before a
// hand-shake, then the client sends first and each side answers every message it
// receives with one of its own; then the closing exchange.
func (s *session) sendLat(ctx context.Context) error {
	c := s.c
	client := c.server != ""
	rposted := 0
	post := func(k int) error {
		wrs := make([]roce.RecvWR, k)
		for i := range wrs {
			// Every receive lands in the same place: nobody reads it.
			wrs[i] = roce.RecvWR{WRID: uint64(rposted + i), SGL: []roce.SGE{{Addr: s.mr.Addr() + uint64(s.half),
				Length: uint32(c.size), LKey: s.mr.LKey()}}}
		}
		n, err := s.qp.PostRecv(wrs)
		rposted += n
		if err != nil {
			return fmt.Errorf("couldn't post receive: %w", err)
		}
		return nil
	}
	if err := post(min(c.rxDepth, c.iters)); err != nil {
		return err
	}
	x, cancel := xctx(ctx)
	err := s.handShake(x)
	cancel()
	if err != nil {
		return err
	}
	fmt.Fprintln(s.out, resultLine)
	fmt.Fprintln(s.out, latHeader)
	posted := make([]time.Time, c.iters)
	wc := make([]roce.WC, 16)
	scnt, rcnt, ccnt := 0, 0, 0
	// handle takes the completions in wc[:n]; it returns how many were receives.
	handle := func(n int) (int, error) {
		recvs := 0
		for _, w := range wc[:n] {
			if w.Status != roce.WCSuccess {
				return 0, fmt.Errorf("completion with error: status %v (%d) for wr_id %d; scnt=%d rcnt=%d", w.Status, w.Status, w.WRID, scnt, rcnt)
			}
			if w.Opcode != roce.WCRecv {
				ccnt++
				continue
			}
			if w.ByteLen != uint32(c.size) {
				return 0, fmt.Errorf("receive %d: %d bytes, want %d", rcnt+recvs, w.ByteLen, c.size)
			}
			recvs++
		}
		return recvs, nil
	}
	for scnt < c.iters || rcnt < c.iters {
		if rcnt < c.iters && !(scnt < 1 && client) {
			for got := 0; got == 0; {
				n, err := s.cq.Wait(ctx, wc)
				if err != nil {
					return fmt.Errorf("%w after %d/%d receives", err, rcnt, c.iters)
				}
				if got, err = handle(n); err != nil {
					return err
				}
				rcnt += got
			}
			if need := c.iters - rposted; need > 0 {
				if err := post(1); err != nil {
					return err
				}
			}
		}
		if scnt < c.iters {
			posted[scnt] = time.Now()
			wr := roce.SendWR{WRID: uint64(scnt), Opcode: roce.WRSend, Flags: roce.SendSignaled,
				SGL: []roce.SGE{{Addr: s.mr.Addr(), Length: uint32(c.size), LKey: s.mr.LKey()}}}
			if _, err := s.qp.PostSend([]roce.SendWR{wr}); err != nil {
				return fmt.Errorf("couldn't post send: scnt=%d: %w", scnt, err)
			}
			scnt++
		}
	}
	// Every send is acknowledged before the closing exchange.
	for ccnt < scnt {
		n, err := s.cq.Wait(ctx, wc)
		if err != nil {
			return fmt.Errorf("%w after %d/%d send completions", err, ccnt, scnt)
		}
		got, err := handle(n)
		if err != nil {
			return err
		}
		if got > 0 {
			return fmt.Errorf("%d receives beyond the %d expected", got, c.iters)
		}
	}
	printLat(s.out, c.size, c.iters, posted, 2)
	if err := s.closeConnection(ctx); err != nil {
		return err
	}
	fmt.Fprintln(s.out, resultLine)
	return nil
}
