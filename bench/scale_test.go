//go:build linux

package bench

import (
	"fmt"
	"net/netip"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/roce"
)

// The scale benchmarks: many RC QPs between two devices, every QP's receives on
// its device's one SRQ, every QP's completions on its device's two CQs (send and
// receive), as a server with thousands of connections sets them up.

// scaleCaps are the caps of the QPs of BenchmarkQPScale: a send queue of 16
// one-SGE WRs, receives from the SRQ, no inline data. BenchmarkRCSendQPs gives
// its QPs perftestTxDepth WRs, its whole window.
var scaleCaps = roce.QPCap{MaxSendWR: 16, MaxSendSGE: 1}

const (
	scaleMsg   = 64            // bytes per SEND
	scaleSRQWR = 8192          // receives the SRQ holds
	scaleCQE   = (1 << 15) - 1 // max_cqe: completions a CQ holds
)

// scaleEnd is one device of a scale benchmark and its QPs.
type scaleEnd struct {
	dev      *roce.Device
	pd       *roce.PD
	buf      []byte
	mr       *roce.MR
	scq, rcq *roce.CQ
	srq      *roce.SRQ
	qps      []*roce.QP
	caps     roce.QPCap
}

func openScaleEnd(b *testing.B, dev *roce.Device) *scaleEnd {
	b.Helper()
	e := &scaleEnd{dev: dev, buf: make([]byte, 1<<16), caps: scaleCaps}
	var err error
	if e.pd, err = dev.AllocPD(); err != nil {
		b.Fatal(err)
	}
	if e.mr, err = e.pd.RegMR(e.buf, benchAccess); err != nil {
		b.Fatal(err)
	}
	if e.scq, err = dev.CreateCQ(scaleCQE); err != nil {
		b.Fatal(err)
	}
	if e.rcq, err = dev.CreateCQ(scaleCQE); err != nil {
		b.Fatal(err)
	}
	if e.srq, err = e.pd.CreateSRQ(roce.SRQInitAttr{Attr: roce.SRQAttr{MaxWR: scaleSRQWR, MaxSGE: 1}}); err != nil {
		b.Fatal(err)
	}
	return e
}

// scaleDevices opens the two devices of a scale benchmark; they close at the end
// of the benchmark.
func scaleDevices(b *testing.B) (*scaleEnd, *scaleEnd) {
	b.Helper()
	port := sharedPort(b)
	var ends [2]*scaleEnd
	for i, addr := range []netip.Addr{addrA, addrB} {
		dev, err := roce.Open(addr, append([]roce.Option{roce.WithPort(port), roce.WithMTU(roce.MTU4096)}, devOpts...)...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { dev.Close() })
		ends[i] = openScaleEnd(b, dev)
	}
	return ends[0], ends[1]
}

func (e *scaleEnd) createQP() (*roce.QP, error) {
	return e.pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: e.scq, RecvCQ: e.rcq, SRQ: e.srq, Cap: e.caps})
}

// connectQP takes q from RESET to RTS towards peer QPN dqpn on device to, with the
// three ibv_modify_qp calls of ibv_rc_pingpong.
func connectQP(q *roce.QP, from, to *roce.Device, dqpn uint32) error {
	if err := q.Modify(&roce.QPAttr{State: roce.QPSInit, PortNum: 1, AccessFlags: benchAccess},
		roce.QPAttrState|roce.QPAttrPKeyIndex|roce.QPAttrPort|roce.QPAttrAccessFlags); err != nil {
		return err
	}
	if err := q.Modify(&roce.QPAttr{State: roce.QPSRTR, PathMTU: roce.MTU4096, DestQPN: dqpn, RQPSN: dqpn,
		MaxDestRDAtomic: 1, MinRNRTimer: 1,
		AV: roce.AddressVector{IsGlobal: true, DGID: to.Addr(), SGIDIndex: uint8(from.GIDIndex()), HopLimit: 64}},
		roce.QPAttrState|roce.QPAttrAV|roce.QPAttrPathMTU|roce.QPAttrDestQPN|roce.QPAttrRQPSN|
			roce.QPAttrMaxDestRDAtomic|roce.QPAttrMinRNRTimer); err != nil {
		return err
	}
	return q.Modify(&roce.QPAttr{State: roce.QPSRTS, SQPSN: q.QPN(), Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 1},
		roce.QPAttrState|roce.QPAttrSQPSN|roce.QPAttrTimeout|roce.QPAttrRetryCnt|roce.QPAttrRNRRetry|roce.QPAttrMaxQPRDAtomic)
}

// connectPairs creates n QPs on each end, QP i of x connected to QP i of y, one
// pair after the other as a server accepting connections would.
func connectPairs(x, y *scaleEnd, n int) error {
	for range n {
		qx, err := x.createQP()
		if err != nil {
			return fmt.Errorf("create QP %d on x: %w", len(x.qps), err)
		}
		x.qps = append(x.qps, qx)
		qy, err := y.createQP()
		if err != nil {
			return fmt.Errorf("create QP %d on y: %w", len(y.qps), err)
		}
		y.qps = append(y.qps, qy)
		if err := connectQP(qx, x.dev, y.dev, qy.QPN()); err != nil {
			return err
		}
		if err := connectQP(qy, y.dev, x.dev, qx.QPN()); err != nil {
			return err
		}
	}
	return nil
}

// destroyAll destroys every QP of both ends.
func destroyAll(x, y *scaleEnd) error {
	for _, e := range []*scaleEnd{x, y} {
		for _, q := range e.qps {
			if err := q.Close(); err != nil {
				return err
			}
		}
		e.qps = nil
	}
	return nil
}

// liveHeap is the heap in use after two collections: what the program keeps.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// sendAcross sends total SENDs of scaleMsg bytes from x's QPs to their peers on y:
// bursts of burst WRs to one QP (the last signaled), the QPs in turn, at most depth
// WRs outstanding, while a receiver goroutine keeps y's SRQ stocked. When perQP is
// not nil it counts the receives of each of y's QPs (by QPN). It returns once every
// send and every receive has completed.
func sendAcross(x, y *scaleEnd, total, burst, depth int, perQP map[uint32]int) error {
	recvDone := make(chan error, 1)
	go func() { recvDone <- receiveSRQ(y, total, perQP) }()
	wrs := make([]roce.SendWR, burst)
	for i := range wrs {
		wrs[i] = roce.SendWR{WRID: uint64(i), Opcode: roce.WRSend,
			SGL: []roce.SGE{{Addr: x.mr.Addr(), Length: scaleMsg, LKey: x.mr.LKey()}}}
	}
	// groups holds the size of each outstanding burst, oldest first: a burst's
	// signaled WR completes after the burst's other WRs, and the QPs share one
	// CQ, so bursts of different QPs complete in any order; what is counted is
	// WRs, each signaled completion retiring its own burst (WRID holds its size).
	w := newWaiter(x.scq, depth)
	next, posted, outstanding, full := 0, 0, 0, 0
	for posted < total || outstanding > 0 {
		for posted < total && outstanding+burst <= depth {
			k := min(burst, total-posted)
			for i := range wrs[:k] {
				wrs[i].Flags = 0
			}
			wrs[k-1].Flags = roce.SendSignaled
			wrs[k-1].WRID = uint64(k)
			if err := postAll(x.qps[next], wrs[:k], &full); err != nil {
				return err
			}
			next = (next + 1) % len(x.qps)
			posted += k
			outstanding += k
		}
		wcs, err := w.wait()
		if err != nil {
			return fmt.Errorf("send completions (%d posted, %d outstanding): %w", posted, outstanding, err)
		}
		for _, wc := range wcs {
			outstanding -= int(wc.WRID)
		}
	}
	return <-recvDone
}

// receiveSRQ keeps y's SRQ stocked until total receives completed.
func receiveSRQ(y *scaleEnd, total int, perQP map[uint32]int) error {
	const stock = scaleSRQWR / 2
	wrs, sges := make([]roce.RecvWR, stock), make([]roce.SGE, stock) // two allocations, not one per WR
	for i := range wrs {
		sges[i] = roce.SGE{Addr: y.mr.Addr(), Length: scaleMsg, LKey: y.mr.LKey()}
		wrs[i] = roce.RecvWR{WRID: uint64(i), SGL: sges[i : i+1 : i+1]}
	}
	if _, err := y.srq.PostRecv(wrs); err != nil {
		return err
	}
	w := newWaiter(y.rcq, stock)
	for got := 0; got < total; {
		wcs, err := w.wait()
		if err != nil {
			return fmt.Errorf("receive completions after %d of %d: %w", got, total, err)
		}
		got += len(wcs)
		if perQP != nil {
			for _, wc := range wcs {
				perQP[wc.QPNum]++
			}
		}
		if _, err := y.srq.PostRecv(wrs[:len(wcs)]); err != nil {
			return err
		}
	}
	return nil
}

// scaleRow is one line of the scale table printed after the benchmarks.
type scaleRow struct {
	qps                   int
	setupPerSec           float64 // QPs created and connected per second
	idleBytes, usedBytes  float64 // heap per QP: connected and idle; after one message each
	teardownPerPair       time.Duration
	served                int
	sendPPS, sendRatio    float64 // BenchmarkRCSendQPs
	haveSetup, haveSendQP bool
}

var (
	scaleMu   sync.Mutex
	scaleRows = map[int]*scaleRow{}
)

func scaleRecord(n int, f func(r *scaleRow)) {
	scaleMu.Lock()
	r := scaleRows[n]
	if r == nil {
		r = &scaleRow{qps: n}
		scaleRows[n] = r
	}
	f(r)
	scaleMu.Unlock()
}

func printScale() {
	scaleMu.Lock()
	defer scaleMu.Unlock()
	if len(scaleRows) == 0 {
		return
	}
	ns := make([]int, 0, len(scaleRows))
	for n := range scaleRows {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	fmt.Printf("\n%10s %14s %12s %12s %14s %10s %12s %10s\n", "QPs/device", "setup QPs/s", "B/idle QP", "B/used QP", "teardown/pair", "served", "SEND pkts/s", "vs 1 QP")
	for _, n := range ns {
		r := scaleRows[n]
		setup, idle, used, td, served := "-", "-", "-", "-", "-"
		if r.haveSetup {
			setup = fmt.Sprintf("%.0f", r.setupPerSec)
			idle = fmt.Sprintf("%.0f", r.idleBytes)
			used = fmt.Sprintf("%.0f", r.usedBytes)
			td = r.teardownPerPair.Round(100 * time.Nanosecond).String()
			served = fmt.Sprint(r.served)
		}
		pps, ratio := "-", "-"
		if r.haveSendQP {
			pps = fmt.Sprintf("%.0f", r.sendPPS)
			ratio = fmt.Sprintf("%.1f%%", 100*r.sendRatio)
		}
		fmt.Printf("%10d %14s %12s %12s %14s %10s %12s %10s\n", n, setup, idle, used, td, served, pps, ratio)
	}
}

// BenchmarkQPScale creates and connects N RC QP pairs between two devices (2N
// QPs), measures the heap each idle QP costs, sends one SEND on every pair and
// checks that every QP on the far side received exactly one, and destroys them
// all. It reports QPs created and connected per second (setup), bytes per idle QP
// (connected, nothing posted yet) and per QP once it has carried a message, and
// the teardown time per pair. 65536 is the device's max_qp.
func BenchmarkQPScale(b *testing.B) {
	for _, n := range []int{256, 1024, 4096, 16384, 65536} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				x, y := scaleDevices(b)
				x.qps, y.qps = make([]*roce.QP, 0, n), make([]*roce.QP, 0, n)
				heap0 := liveHeap()
				b.StartTimer()
				t0 := time.Now()
				if err := connectPairs(x, y, n); err != nil {
					b.Fatal(err)
				}
				setup := time.Since(t0)
				b.StopTimer()
				idle := float64(liveHeap()-heap0) / float64(2*n)
				perQP := make(map[uint32]int, n)
				if err := sendAcross(x, y, n, 1, 256, perQP); err != nil {
					b.Fatal(err)
				}
				served := 0
				for _, q := range y.qps {
					if perQP[q.QPN()] == 1 {
						served++
					}
				}
				if served != n {
					b.Fatalf("%d of %d QPs received exactly one SEND", served, n)
				}
				perQP = nil
				used := float64(liveHeap()-heap0) / float64(2*n)
				t1 := time.Now()
				if err := destroyAll(x, y); err != nil {
					b.Fatal(err)
				}
				teardown := time.Since(t1)
				rate := float64(2*n) / setup.Seconds()
				b.ReportMetric(rate, "QPs/s")
				b.ReportMetric(idle, "B/idleQP")
				b.ReportMetric(used, "B/usedQP")
				b.ReportMetric(float64(teardown.Microseconds())/float64(n), "teardown-µs/pair")
				scaleRecord(n, func(r *scaleRow) {
					r.haveSetup, r.setupPerSec, r.idleBytes, r.usedBytes = true, rate, idle, used
					r.teardownPerPair, r.served = teardown/time.Duration(n), n
				})
				b.StartTimer()
			}
		})
	}
}

// single is the SEND packet rate of one QP in BenchmarkRCSendQPs, the ratio's
// denominator: measured by the N=1 case, or once on demand when a larger N runs
// alone.
var (
	singleMu  sync.Mutex
	singlePPS float64
)

// BenchmarkRCSendQPs is 64-byte SENDs spread over N RC QPs whose receives all come
// from one SRQ: bursts of 16 WRs to one QP (the last signaled), the QPs in turn,
// perftestTxDepth (128) WRs outstanding in all (with one QP, the pattern of
// BenchmarkRCSend/64B). It reports the total packet rate and its ratio to one
// QP's.
func BenchmarkRCSendQPs(b *testing.B) {
	for _, n := range []int{1, 16, 256, 1024, 4096} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			pps := sendQPsRate(b, n, b.N)
			singleMu.Lock()
			if n == 1 {
				singlePPS = pps
			}
			base := singlePPS
			singleMu.Unlock()
			b.ReportMetric(pps, "pkts/s")
			if base > 0 {
				b.ReportMetric(pps/base, "x-1QP")
			}
			scaleRecord(n, func(r *scaleRow) { r.haveSendQP, r.sendPPS, r.sendRatio = true, pps, pps/max(base, 1) })
		})
	}
}

// BenchmarkRCSendQPsNoGSO is BenchmarkRCSendQPs with GSO off (one datagram per
// packet): it separates the cost of the QP count from the train length, since one
// QP's back-to-back bursts form longer GSO trains than many QPs in turn.
func BenchmarkRCSendQPsNoGSO(b *testing.B) {
	for _, n := range []int{1, 16, 4096} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			devOpts = []roce.Option{roce.WithLinkConfig(link.Config{NoGSO: true})}
			defer func() { devOpts = nil }()
			b.ReportMetric(sendQPsRate(b, n, b.N), "pkts/s")
		})
	}
}

// BenchmarkRCSendQPsOnePort is BenchmarkRCSendQPs with every QP sending from the
// device's own UDP port (link.Config.MaxSourcePorts -1, roced -source-ports 0):
// the QPs then share one flow, so their packets share GSO trains (one QP's
// flow is the most a train can hold; with a port per QP, N QPs in turn give
// trains of one burst).
func BenchmarkRCSendQPsOnePort(b *testing.B) {
	for _, n := range []int{1, 16, 4096} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			devOpts = []roce.Option{roce.WithLinkConfig(link.Config{MaxSourcePorts: -1})}
			defer func() { devOpts = nil }()
			b.ReportMetric(sendQPsRate(b, n, b.N), "pkts/s")
		})
	}
}

// BenchmarkRCReaders is BenchmarkRCSendQPs/16 on devices with one receive socket
// and with two SO_REUSEPORT receive sockets (roce.WithReaders), each read by its
// own goroutine: the QPs' source ports spread their flows over the sockets.
func BenchmarkRCReaders(b *testing.B) {
	for _, readers := range []int{1, 2} {
		b.Run(fmt.Sprintf("readers%d", readers), func(b *testing.B) {
			devOpts = []roce.Option{roce.WithReaders(readers)}
			defer func() { devOpts = nil }()
			b.ReportMetric(sendQPsRate(b, 16, b.N), "pkts/s")
		})
	}
}

// sendQPsRate connects n pairs (not timed) and times total SENDs across them.
func sendQPsRate(b *testing.B, n, total int) float64 {
	b.StopTimer()
	x, y := scaleDevices(b)
	x.caps.MaxSendWR, y.caps.MaxSendWR = perftestTxDepth, perftestTxDepth
	if err := connectPairs(x, y, n); err != nil {
		b.Fatal(err)
	}
	// One message on every QP first: a QP allocates its send ring and receive
	// scratch on first use, which is set-up, not the per-packet cost.
	if err := sendAcross(x, y, n, 1, perftestTxDepth, nil); err != nil {
		b.Fatal(err)
	}
	st0 := x.dev.Stats()
	before := st0.SentPackets[roce.ClassSend]
	acks0 := y.dev.Stats().SentPackets[roce.ClassAck]
	b.ReportAllocs()
	m := startCPU()
	b.StartTimer()
	t0 := time.Now()
	if err := sendAcross(x, y, total, 16, perftestTxDepth, nil); err != nil {
		b.Fatal(err)
	}
	d := time.Since(t0)
	b.StopTimer()
	st := x.dev.Stats()
	pkts := float64(st.SentPackets[roce.ClassSend] - before)
	m.stop(pkts).report(b)
	b.ReportMetric(float64(y.dev.Stats().SentPackets[roce.ClassAck]-acks0)/pkts, "acks/pkt")
	b.ReportMetric(trainLen(st0, st, pkts), "pkts/msg")
	return pkts / d.Seconds()
}
