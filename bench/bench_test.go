//go:build linux

package bench

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
)

var (
	addrA = netip.MustParseAddr("127.0.0.1")
	addrB = netip.MustParseAddr("127.0.0.2")
)

// TestMain prints, after the benchmarks, one table of every engine result against
// the raw-UDP baseline of the same process.
func TestMain(m *testing.M) {
	code := m.Run()
	printSummary()
	printScale()
	if !strictAllocs() && code == 0 {
		code = 1
	}
	os.Exit(code)
}

// result is the last run of one engine benchmark.
type result struct {
	pps, ratio float64 // data packets per second; pps over the batched raw-UDP rate
	gsoRatio   float64 // pps over the raw GSO/GRO rate at 4112 B (0: not measured)
	mbps       float64
	rtt        time.Duration // ping-pong only
	rttRatio   float64       // rtt over the raw round trip with blocking reads
	spinRatio  float64       // rtt over the raw round trip with both sides busy-polling
	ackedRatio float64       // rtt over the busy-polling raw round trip with an ACK per message
	cpu        cpuCost       // the process's CPU per data packet across the timed loop
}

var (
	resultsMu sync.Mutex
	results   = map[string]result{}
	gsoRuns   rawRuns // BenchmarkRawUDP/gso/4112B's runs in this process
)

// rawRuns are the final runs of one raw benchmark in this process (one per
// -count). The summary's "vs GSO" divides by rawBaseline's best of three
// 300 ms runs, measured first; these are the same process's own
// RawUDP/gso/4112B lines, the denominator the throughput targets name, which
// on a quiet host run 10-20 % below that best.
type rawRuns struct {
	final   []rawRun
	pending *rawRun // the latest run of the sequence under way
}

type rawRun struct {
	pps float64
	cpu cpuCost
}

// add notes a run of b.N datagrams. Each benchmark sequence starts at b.N 1
// and ends in the run that counts, so a run of 1 closes the sequence before.
func (rs *rawRuns) add(n int, r rawRun) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if n == 1 {
		rs.close()
	}
	rs.pending = &r
}

// close ends the sequence under way. resultsMu held.
func (rs *rawRuns) close() {
	if rs.pending != nil {
		rs.final = append(rs.final, *rs.pending)
		rs.pending = nil
	}
}

// median is the run of median rate (the upper middle of an even count, the
// stricter denominator), and the slowest and fastest rates; ok is false with
// no run. resultsMu held.
func (rs *rawRuns) median() (mid rawRun, lo, hi float64, ok bool) {
	rs.close()
	if len(rs.final) == 0 {
		return rawRun{}, 0, 0, false
	}
	runs := slices.Clone(rs.final)
	slices.SortFunc(runs, func(a, b rawRun) int { return cmp.Compare(a.pps, b.pps) })
	return runs[len(runs)/2], runs[0].pps, runs[len(runs)-1].pps, true
}

func record(name string, r result) {
	resultsMu.Lock()
	results[name] = r
	resultsMu.Unlock()
}

func printSummary() {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if len(results) == 0 {
		return
	}
	bl := rawBaseline()
	fmt.Printf("\nraw UDP baseline (this run): batched %.0f pkts/s at %d B, %.0f pkts/s at %d B; GSO/GRO %.0f pkts/s at %d B; ping-pong %.1f µs (%.1f µs busy-polling, %.1f µs with ACKs)\n",
		bl.batchPPS[smallDatagram], smallDatagram, bl.batchPPS[bigDatagram], bigDatagram, bl.gsoPPS, bigDatagram, us(bl.rtt), us(bl.spinRTT), us(bl.ackedRTT))
	names := make([]string, 0, len(results))
	for n := range results {
		names = append(names, n)
	}
	sort.Strings(names)
	gsoRun, gsoLo, gsoHi, haveRuns := gsoRuns.median()
	if haveRuns {
		fmt.Printf("RawUDP/gso/%dB in this process: %d run(s), %.0f-%.0f pkts/s, median %.0f (user %.3f, sys %.3f µs/pkt): the \"vs runs\" denominators\n",
			bigDatagram, len(gsoRuns.final), gsoLo, gsoHi, gsoRun.pps, gsoRun.cpu.userUS, gsoRun.cpu.sysUS)
	}
	fmt.Printf("%-40s %12s %10s %10s %10s %10s %10s %8s %8s %8s  %s  %s  %s\n", "engine benchmark", "pkts/s", "vs batch", "vs GSO", "vs runs", "MB/s", "µs/rt", "vs UDP", "vs spin", "vs acked", cpuHeader, "cpu vs raw", "cpu vs runs")
	for _, n := range names {
		r := results[n]
		if r.rtt > 0 {
			fmt.Printf("%-40s %12s %10s %10s %10s %10s %10.1f %7.2fx %7.2fx %7.2fx  %s  %10s  %11s\n", n, "-", "-", "-", "-", "-", us(r.rtt), r.rttRatio, r.spinRatio, r.ackedRatio, r.cpu, cpuRatio(r.cpu, bl.ackedCPU), "-")
			continue
		}
		gso, runs, cpuRuns := "-", "-", "-"
		if r.gsoRatio > 0 {
			gso = fmt.Sprintf("%.1f%%", 100*r.gsoRatio)
			if haveRuns {
				runs = fmt.Sprintf("%.1f%%", 100*r.pps/gsoRun.pps)
				cpuRuns = cpuRatio(r.cpu, gsoRun.cpu)
			}
		}
		raw := bl.gsoCPU
		if r.gsoRatio == 0 {
			raw = bl.batchCPU[smallDatagram]
		}
		fmt.Printf("%-40s %12.0f %9.1f%% %10s %10s %10.1f %10s %8s %8s %8s  %s  %10s  %11s\n", n, r.pps, 100*r.ratio, gso, runs, r.mbps, "-", "-", "-", "-", r.cpu, cpuRatio(r.cpu, raw), cpuRuns)
	}
	fmt.Printf("\nCPU per data packet (µs, user and system; both ends run in this process), the machine's idle share, system calls per 1000 packets:\n")
	fmt.Printf("%-40s  %s\n", "raw baseline", cpuHeader)
	for _, row := range []struct {
		name string
		c    cpuCost
	}{
		{fmt.Sprintf("batch %d B", smallDatagram), bl.batchCPU[smallDatagram]},
		{fmt.Sprintf("batch %d B", bigDatagram), bl.batchCPU[bigDatagram]},
		{fmt.Sprintf("GSO/GRO %d B", bigDatagram), bl.gsoCPU},
		{"ping-pong", bl.rttCPU},
		{"ping-pong busy-polling", bl.spinCPU},
		{"ping-pong busy-polling with ACKs", bl.ackedCPU},
	} {
		fmt.Printf("%-40s  %s\n", row.name, row.c)
	}
	if scWhy != "" {
		fmt.Printf("(no system call counts: %s)\n", scWhy)
	}
}

// cpuRatio is an engine's CPU per packet (user plus system) over its raw
// baseline's: "vs GSO" rows against raw GSO, small packets against batched raw UDP,
// round trips against the busy-polling raw round trip with ACKs.
func cpuRatio(engine, raw cpuCost) string {
	if r := raw.userUS + raw.sysUS; r > 0 {
		return fmt.Sprintf("%.2fx", (engine.userUS+engine.sysUS)/r)
	}
	return "-"
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// sharedPort returns a UDP port free on both addresses: RoCEv2 sends to the port it
// listens on, so both devices need the same one.
func sharedPort(b *testing.B) uint16 {
	for range 50 {
		p := uint16(20000 + rand.IntN(40000))
		c1, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, p)))
		if err != nil {
			continue
		}
		c2, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrB, p)))
		c1.Close()
		if err != nil {
			continue
		}
		c2.Close()
		return p
	}
	b.Skip("no UDP port free on both 127.0.0.1 and 127.0.0.2")
	return 0
}

const benchAccess = roce.AccessLocalWrite | roce.AccessRemoteWrite

// end is one side of an RC connection: device, PD, buffer, MR, CQs, QP.
type end struct {
	dev      *roce.Device
	pd       *roce.PD
	buf      []byte
	mr       *roce.MR
	scq, rcq *roce.CQ
	qp       *roce.QP
}

// devOpts are the device options of the benchmark running now, beyond port and
// MTU: the variants of a benchmark set them (run-to-completion, readers...).
var devOpts []roce.Option

func openEnd(b *testing.B, addr netip.Addr, port uint16, sock string, bufLen, sq, rq int) *end {
	opts := append([]roce.Option{roce.WithPort(port), roce.WithMTU(roce.MTU4096), roce.WithRoced(sock)}, devOpts...)
	dev, err := roce.Open(addr, opts...)
	if err != nil {
		b.Fatal(err)
	}
	if dev.Attached() != (sock != "") {
		dev.Close()
		b.Fatalf("device on %v: attached %v, want %v", addr, dev.Attached(), sock != "")
	}
	b.Cleanup(func() { dev.Close() })
	e := &end{dev: dev, buf: make([]byte, bufLen)}
	if e.pd, err = dev.AllocPD(); err != nil {
		b.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(e.buf, benchAccess); err != nil {
		b.Fatal(err)
	}
	if e.scq, err = dev.CreateCQ(sq); err != nil {
		b.Fatal(err)
	}
	if e.rcq, err = dev.CreateCQ(rq); err != nil {
		b.Fatal(err)
	}
	e.qp, err = e.pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: roce.QPCap{MaxSendWR: uint32(sq), MaxRecvWR: uint32(rq), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// rcPair opens two devices on the loopback addresses and connects an RC QP on each
// to the other at path MTU 4096, as ibv_rc_pingpong does after its exchange.
func rcPair(b *testing.B, bufLen, sq, rq int) (*end, *end) {
	port := sharedPort(b)
	sock := ""
	if attached {
		sock = shareBoth(b, port)
	}
	x, y := openEnd(b, addrA, port, sock, bufLen, sq, rq), openEnd(b, addrB, port, sock, bufLen, sq, rq)
	for _, p := range [][2]*end{{x, y}, {y, x}} {
		l, r := p[0], p[1]
		if err := l.qp.Modify(&roce.QPAttr{State: roce.QPSInit, PortNum: 1, AccessFlags: benchAccess},
			roce.QPAttrState|roce.QPAttrPKeyIndex|roce.QPAttrPort|roce.QPAttrAccessFlags); err != nil {
			b.Fatal(err)
		}
		if err := l.qp.Modify(&roce.QPAttr{State: roce.QPSRTR, PathMTU: roce.MTU4096, DestQPN: r.qp.QPN(), RQPSN: r.qp.QPN(),
			MaxDestRDAtomic: 1, MinRNRTimer: 1,
			AV: roce.AddressVector{IsGlobal: true, DGID: r.dev.Addr(), SGIDIndex: uint8(l.dev.GIDIndex()), HopLimit: 64}},
			roce.QPAttrState|roce.QPAttrAV|roce.QPAttrPathMTU|roce.QPAttrDestQPN|roce.QPAttrRQPSN|
				roce.QPAttrMaxDestRDAtomic|roce.QPAttrMinRNRTimer); err != nil {
			b.Fatal(err)
		}
	}
	for _, l := range []*end{x, y} {
		if err := l.qp.Modify(&roce.QPAttr{State: roce.QPSRTS, SQPSN: l.qp.QPN(), Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 1},
			roce.QPAttrState|roce.QPAttrSQPSN|roce.QPAttrTimeout|roce.QPAttrRetryCnt|roce.QPAttrRNRRetry|roce.QPAttrMaxQPRDAtomic); err != nil {
			b.Fatal(err)
		}
	}
	return x, y
}

var (
	errCQTimeout = errors.New("no completion within 10 s")
	errStopped   = errors.New("stopped")
)

// waiter reaps completions: it polls, yields a few times, then arms the CQ and
// sleeps on its channel (ibv_rc_pingpong -e), so a waiting benchmark goroutine does
// not take a core from the engine on this 2-core machine.
type waiter struct {
	cq    *roce.CQ
	wc    []roce.WC
	timer *time.Timer
	stop  <-chan struct{} // nil, or closed to give up waiting
}

// spinFor is how long a waiter keeps polling (yielding between polls) before it
// arms the CQ and sleeps: a few polls by default, longer in the ping-pong variants
// that busy-poll.
var spinFor time.Duration

func newWaiter(cq *roce.CQ, n int) *waiter {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &waiter{cq: cq, wc: make([]roce.WC, n), timer: t}
}

// wait returns at least one successful completion.
func (w *waiter) wait() ([]roce.WC, error) {
	var until time.Time
	if spinFor > 0 {
		until = time.Now().Add(spinFor)
	}
	for i := 0; ; i++ {
		n, err := w.cq.Poll(w.wc)
		if err == nil && n == 0 && i >= 4 && (spinFor == 0 || time.Now().After(until)) {
			if err = w.cq.ReqNotify(false); err == nil {
				if n, err = w.cq.Poll(w.wc); err == nil && n == 0 {
					w.timer.Reset(10 * time.Second)
					select {
					case <-w.cq.Notify():
						w.timer.Stop()
					case <-w.timer.C:
						return nil, errCQTimeout
					case <-w.stop:
						w.timer.Stop()
						return nil, errStopped
					}
				}
			}
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			runtime.Gosched()
			continue
		}
		for _, wc := range w.wc[:n] {
			if wc.Status != roce.WCSuccess {
				return nil, fmt.Errorf("wr %d: %v", wc.WRID, wc.Status)
			}
		}
		return w.wc[:n], nil
	}
}

// window returns the outstanding WRs kept for a message size and the signaling
// interval: for small and page-sized messages perftest's bandwidth default
// (ib_send_bw/ib_write_bw --tx-depth 128), every 16th WR signaled; 16 for 1 MiB
// ones, whose 256 packets each already fill the pipe. Why not fewer: a window of
// 64 one-packet WRs is a single GSO train (64 segments at most), so sender and
// receiver take turns (the train, then its ACK, then the next) and half of two cores
// stays idle; SEND 4 KiB ran at 39-41% of raw GSO with 64, and 61-66% with 128-256.
func window(size int) (depth, signalEvery int) {
	if size >= 1<<20 {
		return 16, 4
	}
	return perftestTxDepth, 16
}

// perftestTxDepth is perftest's default send queue depth for its bandwidth tests.
const perftestTxDepth = 128

// benchRC posts b.N messages of size bytes with op, keeping depth WRs outstanding
// and signaling every signalEvery-th, and reports throughput in bytes, messages and
// packets against the batched raw-UDP rate.
func benchRC(b *testing.B, op roce.WROpcode, size int) {
	bl := rawBaseline()
	if bl.err != nil {
		b.Fatalf("raw-UDP baseline: %v", bl.err)
	}
	depth, rq := streamQueues(op, size)
	x, y := rcPair(b, size, depth, max(rq, 1))

	var recvDone chan error
	if op == roce.WRSend {
		recvDone = make(chan error, 1)
		go receive(y, size, rq, b.N, recvDone)
	}
	st := newStream(x, y, op, size)
	class := roce.ClassWrite
	if op == roce.WRSend {
		class = roce.ClassSend
	}
	before := x.dev.Stats()

	b.SetBytes(int64(size))
	b.ReportAllocs()
	m := startCPU()
	b.ResetTimer()
	if err := st.run(b.N); err != nil {
		b.Fatal(err)
	}
	if recvDone != nil {
		if err := <-recvDone; err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after := x.dev.Stats()
	sec := b.Elapsed().Seconds()
	pkts := float64(after.SentPackets[class] - before.SentPackets[class])
	cpu := m.stop(pkts)
	retx := float64(after.Retransmits - before.Retransmits)
	acks := float64(y.dev.Stats().SentPackets[roce.ClassAck])
	dsize := bigDatagram
	if size < 4096 {
		dsize = smallDatagram
	}
	r := result{pps: pkts / sec, mbps: float64(b.N) * float64(size) / sec / 1e6, cpu: cpu}
	cpu.report(b)
	r.ratio = r.pps / bl.batchPPS[dsize]
	if bl.gsoPPS > 0 {
		r.gsoRatio = r.pps / bl.gsoPPS
		b.ReportMetric(100*r.gsoRatio, "%gso")
	}
	b.ReportMetric(float64(b.N)/sec, "msgs/s")
	b.ReportMetric(r.pps, "pkts/s")
	b.ReportMetric(acks/pkts, "acks/pkt")
	b.ReportMetric(trainLen(before, after, pkts), "pkts/msg")
	b.ReportMetric(retx/float64(b.N), "retx/op")
	b.ReportMetric(float64(st.sqFull)/float64(b.N), "sqfull/op")
	b.Logf("N=%d: %.0f pkts/s = %.1f%% of batched raw UDP (%.0f pkts/s at %d B), %.1f%% of raw GSO/GRO (%.0f pkts/s at %d B)",
		b.N, r.pps, 100*r.ratio, bl.batchPPS[dsize], dsize, 100*r.gsoRatio, bl.gsoPPS, bigDatagram)
	record(b.Name(), r)
}

// streamQueues is the send queue depth of a stream of op at size (window) and the
// receives the far side keeps posted: four windows for SEND, none for WRITE.
func streamQueues(op roce.WROpcode, size int) (depth, rq int) {
	depth, _ = window(size)
	if op == roce.WRSend {
		rq = 4 * depth
	}
	return depth, rq
}

// stream posts messages of one size and opcode from x to y, keeping the window
// outstanding (window) and signaling every signalEvery-th WR.
type stream struct {
	x            *end
	depth, every int
	wrs          []roce.SendWR
	groups       []int // a ring of the posted groups' sizes, each ending in a signaled WR
	gHead, gLen  int
	w            *waiter
	sqFull       int // posts refused for a full send queue (postAll)
}

func newStream(x, y *end, op roce.WROpcode, size int) *stream {
	depth, every := window(size)
	s := &stream{x: x, depth: depth, every: every, wrs: make([]roce.SendWR, every),
		groups: make([]int, depth/every+1), w: newWaiter(x.scq, depth)}
	for i := range s.wrs {
		s.wrs[i] = roce.SendWR{WRID: uint64(i), Opcode: op,
			SGL:        []roce.SGE{{Addr: x.mr.Addr(), Length: uint32(size), LKey: x.mr.LKey()}},
			RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
	}
	return s
}

// run posts n messages and returns when all of them have completed.
func (s *stream) run(n int) error {
	posted, outstanding := 0, 0
	for posted < n || outstanding > 0 {
		for posted < n && outstanding+s.every <= s.depth {
			k := min(s.every, n-posted)
			for i := range s.wrs[:k] {
				s.wrs[i].Flags = 0
			}
			s.wrs[k-1].Flags = roce.SendSignaled
			if err := postAll(s.x.qp, s.wrs[:k], &s.sqFull); err != nil {
				return err
			}
			s.groups[(s.gHead+s.gLen)%len(s.groups)] = k
			s.gLen++
			posted += k
			outstanding += k
		}
		wcs, err := s.w.wait()
		if err != nil {
			return fmt.Errorf("send completions (%d posted, %d outstanding): %w", posted, outstanding, err)
		}
		for range wcs {
			outstanding -= s.groups[s.gHead]
			s.gHead, s.gLen = (s.gHead+1)%len(s.groups), s.gLen-1
		}
	}
	return nil
}

// trainLen is the mean GSO train of the pkts data packets a device sent between
// two snapshots: packets per link message (1 with GSO off). A train is one UDP
// flow, so it tells the train length apart from the QP count and the load.
func trainLen(before, after roce.Stats, pkts float64) float64 {
	trains := float64(after.TxTrains - before.TxTrains)
	inTrains := float64(after.TxTrainSegments - before.TxTrainSegments)
	return pkts / max(trains+pkts-inTrains, 1)
}

// postAll posts wrs, retrying after a yield while the send queue is full. The
// caller never has more WRs outstanding than the queue holds, but the engine pushes
// a completion before it frees the WQE slots the completion retires
// (transport.QP.complete), so a post right after a poll can find the queue still
// full. Each such refusal is counted in *full.
func postAll(qp *roce.QP, wrs []roce.SendWR, full *int) error {
	deadline := time.Now().Add(10 * time.Second)
	for len(wrs) > 0 {
		n, err := qp.PostSend(wrs)
		wrs = wrs[n:]
		switch {
		case err == nil:
		case errors.Is(err, syscall.ENOMEM) && time.Now().Before(deadline):
			*full++
			runtime.Gosched()
		default:
			return fmt.Errorf("post_send: %w", err)
		}
	}
	return nil
}

// receive keeps y's receive queue full with rq receives of size bytes (all into the
// same buffer) until total messages have arrived, then reports on done.
func receive(y *end, size, rq, total int, done chan<- error) {
	wrs := make([]roce.RecvWR, rq)
	for i := range wrs {
		wrs[i] = roce.RecvWR{WRID: uint64(i), SGL: []roce.SGE{{Addr: y.mr.Addr(), Length: uint32(size), LKey: y.mr.LKey()}}}
	}
	if _, err := y.qp.PostRecv(wrs); err != nil {
		done <- err
		return
	}
	w := newWaiter(y.rcq, rq)
	for got := 0; got < total; {
		wcs, err := w.wait()
		if err != nil {
			done <- fmt.Errorf("receive completions after %d of %d: %v", got, total, err)
			return
		}
		got += len(wcs)
		if _, err := y.qp.PostRecv(wrs[:len(wcs)]); err != nil {
			done <- err
			return
		}
	}
	done <- nil
}

var sizes = []int{64, 4096, 1 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// BenchmarkRCWrite is RDMA WRITE throughput between two devices over loopback.
func BenchmarkRCWrite(b *testing.B) {
	for _, n := range sizes {
		b.Run(sizeName(n), func(b *testing.B) { benchRC(b, roce.WRRDMAWrite, n) })
	}
	b.Run("1MiB-attached", withAttached(false, func(b *testing.B) { benchRC(b, roce.WRRDMAWrite, 1<<20) }))
	b.Run("1MiB-attached-nogro", withAttached(true, func(b *testing.B) { benchRC(b, roce.WRRDMAWrite, 1<<20) }))
}

// BenchmarkRCSend is SEND throughput between two devices over loopback.
func BenchmarkRCSend(b *testing.B) {
	for _, n := range sizes {
		b.Run(sizeName(n), func(b *testing.B) { benchRC(b, roce.WRSend, n) })
	}
	b.Run("4KiB-attached", withAttached(false, func(b *testing.B) { benchRC(b, roce.WRSend, 4096) }))
	b.Run("4KiB-attached-nogro", withAttached(true, func(b *testing.B) { benchRC(b, roce.WRSend, 4096) }))
}

// BenchmarkRCPingPong is the 64-byte SEND round trip (ibv_rc_pingpong -s 64): the
// client sends, the server's receive completes and it sends back, the client's
// receive completes. It runs the engine's latency mode: run-to-completion devices
// (roce.WithRunToCompletion), each side busy-polling its CQ (as ibv_rc_pingpong
// without -e and ib_send_lat do) for up to 200 µs before it arms the CQ and sleeps.
// The polling goroutine so receives, completes and sends itself, and the ACK of
// what it received leaves in the same sendmmsg as its reply. The pollers are not
// locked to their threads: under runtime.LockOSThread every yield of a spinning
// goroutine is a hand-off between OS threads (BenchmarkRCPingPongModes/
// rtc-busypoll-locked, 5× slower on an idle 2-core host).
// BenchmarkRCPingPongModes/events is the default device with event-driven waits.
//
// Its sub-benchmarks are the round trip between owned devices (each binds
// its address) and between devices attached to roced (attach server in
// this process), in one run.
func BenchmarkRCPingPong(b *testing.B) {
	run := func(b *testing.B) {
		devOpts, spinFor = []roce.Option{roce.WithRunToCompletion(true)}, pollSpin
		defer func() { devOpts, spinFor = nil, 0 }()
		pingPong(b, false)
	}
	b.Run("owned", run)
	b.Run("attached", withAttached(false, run))
}

// pollSpin is how long the busy-polling ping-pong variants poll before sleeping.
const pollSpin = 200 * time.Microsecond

// BenchmarkRCPingPongModes is the round trip in the engine's other modes and with
// other ways of waiting, to compare them in one run:
//
//	events         default devices; each side polls a few times, then arms the CQ
//	               and sleeps (ibv_rc_pingpong -e): the engine's goroutines hand the
//	               packet and the completion on
//	rtc-events     run-to-completion devices, waiting as in events
//	busypoll       default devices, each side polling for up to 200 µs before it
//	               sleeps as in events (rtc-busypoll is BenchmarkRCPingPong)
//	busypoll-locked      busypoll on a goroutine locked to its thread
//	                     (runtime.LockOSThread)
//	rtc-busypoll-locked  run-to-completion devices, polling as in busypoll-locked
//	readers2       default devices with two SO_REUSEPORT readers each, events
func BenchmarkRCPingPongModes(b *testing.B) {
	rtc := []roce.Option{roce.WithRunToCompletion(true)}
	for _, m := range []struct {
		name string
		opts []roce.Option
		spin time.Duration
		lock bool
	}{
		{"events", nil, 0, false},
		{"rtc-events", rtc, 0, false},
		{"busypoll", nil, pollSpin, false},
		{"busypoll-locked", nil, pollSpin, true},
		{"rtc-busypoll-locked", rtc, pollSpin, true},
		{"readers2", []roce.Option{roce.WithReaders(2)}, 0, false},
	} {
		b.Run(m.name, func(b *testing.B) {
			devOpts, spinFor = m.opts, m.spin
			defer func() { devOpts, spinFor = nil, 0 }()
			pingPong(b, m.lock)
		})
	}
}

// pingPong runs the round trips; lock pins each side's goroutine to its thread.
func pingPong(b *testing.B, lock bool) {
	bl := rawBaseline()
	if bl.err != nil {
		b.Fatalf("raw-UDP baseline: %v", bl.err)
	}
	cli, srv := rcPair(b, pingSize, pingDepth, pingDepth)
	p, err := startPinger(cli, srv, lock)
	if err != nil {
		b.Fatal(err)
	}
	if lock {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	for range 100 { // warm up
		if err := p.roundTrip(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	trailing := func() uint64 { return cli.dev.Stats().TxTrailingACKs + srv.dev.Stats().TxTrailingACKs }
	tr0 := trailing()
	m := startCPU()
	b.ResetTimer()
	for range b.N {
		if err := p.roundTrip(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu := m.stop(2 * float64(b.N)) // a round trip is two data packets
	// ACKs that rode behind a reply in its train (transport's ackBehind): up
	// to two a round trip, one a side, where the link delivers trains whole.
	b.ReportMetric(float64(trailing()-tr0)/float64(b.N), "ack-trains/rt")
	rt := b.Elapsed() / time.Duration(b.N)
	if err := p.close(); err != nil {
		b.Fatalf("echo: %v", err)
	}
	r := result{rtt: rt, rttRatio: float64(rt) / float64(bl.rtt), spinRatio: float64(rt) / float64(bl.spinRTT),
		ackedRatio: float64(rt) / float64(bl.ackedRTT), cpu: cpu}
	cpu.report(b)
	b.ReportMetric(us(rt), "µs/rt")
	b.ReportMetric(r.rttRatio, "x-udp-rtt")
	b.ReportMetric(r.spinRatio, "x-udp-spin-rtt")
	b.ReportMetric(r.ackedRatio, "x-udp-acked-rtt")
	b.Logf("N=%d: %.1f µs per round trip = %.2fx raw UDP ping-pong (%.1f µs), %.2fx busy-polling (%.1f µs), %.2fx busy-polling with ACKs (%.1f µs)",
		b.N, us(rt), r.rttRatio, us(bl.rtt), r.spinRatio, us(bl.spinRTT), r.ackedRatio, us(bl.ackedRTT))
	record(b.Name(), r)
}

// pingSize and pingDepth are the ping-pong's message size and receive queue depth.
const pingSize, pingDepth = 64, 16

// pingSender posts one end's SENDs; sends are signaled one in eight, and the
// signaled one retires the rest.
type pingSender struct {
	e   *end
	wr  []roce.SendWR
	rwr []roce.RecvWR
	n   int
}

func newPingSender(e *end) *pingSender {
	sge := []roce.SGE{{Addr: e.mr.Addr(), Length: pingSize, LKey: e.mr.LKey()}}
	return &pingSender{e: e, wr: []roce.SendWR{{Opcode: roce.WRSend, SGL: sge}}, rwr: []roce.RecvWR{{SGL: sge}}}
}

// send posts one SEND and, at every eighth, waits for its completion, which keeps
// the send queue from filling with unsignaled WRs.
func (s *pingSender) send(w *waiter) error {
	s.n++
	s.wr[0].Flags = 0
	if s.n%8 == 0 {
		s.wr[0].Flags = roce.SendSignaled
	}
	if _, err := s.e.qp.PostSend(s.wr); err != nil {
		return err
	}
	if s.n%8 == 0 {
		_, err := w.wait()
		return err
	}
	return nil
}

// pinger is a ping-pong between two connected ends: roundTrip sends from the
// client and waits for the echo, which the server's goroutine sends for every
// receive.
type pinger struct {
	cli      *end
	c        *pingSender
	rw, sw   *waiter
	stop     chan struct{}
	echoDone chan error
}

// startPinger fills both receive queues and starts the server's echo; lock pins
// the echo goroutine to its thread.
func startPinger(cli, srv *end, lock bool) (*pinger, error) {
	for _, e := range []*end{cli, srv} {
		s := newPingSender(e)
		for range pingDepth {
			if _, err := e.qp.PostRecv(s.rwr); err != nil {
				return nil, err
			}
		}
	}
	p := &pinger{cli: cli, c: newPingSender(cli), rw: newWaiter(cli.rcq, 1), sw: newWaiter(cli.scq, 1),
		stop: make(chan struct{}), echoDone: make(chan error, 1)}
	go p.echo(srv, lock)
	return p, nil
}

func (p *pinger) echo(srv *end, lock bool) {
	if lock {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	s, rw, sw := newPingSender(srv), newWaiter(srv.rcq, 1), newWaiter(srv.scq, 1)
	rw.stop = p.stop
	for {
		if _, err := rw.wait(); err != nil {
			select {
			case <-p.stop:
				err = nil
			default:
			}
			p.echoDone <- err
			return
		}
		if _, err := srv.qp.PostRecv(s.rwr); err != nil {
			p.echoDone <- err
			return
		}
		if err := s.send(sw); err != nil {
			p.echoDone <- err
			return
		}
	}
}

// roundTrip sends one message and waits for its echo.
func (p *pinger) roundTrip() error {
	if err := p.c.send(p.sw); err != nil {
		return err
	}
	if _, err := p.rw.wait(); err != nil {
		return err
	}
	_, err := p.cli.qp.PostRecv(p.c.rwr)
	return err
}

// close stops the echo and returns what ended it, nil for the stop.
func (p *pinger) close() error {
	close(p.stop)
	return <-p.echoDone
}
