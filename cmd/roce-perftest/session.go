package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/internal/tool/cli"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

const (
	// defCycleBuffer is perftest's cycle buffer before the exchange: the page size
	// (sysconf(_SC_PAGESIZE) on x86). Both sides take the larger of theirs.
	defCycleBuffer = 4096
	// defCacheLine is perftest's cache line size before the exchange.
	defCacheLine = 64
	// minPeerVersion is the oldest perftest whose exchange perftest itself accepts.
	minPeerVersion = 5.70
	// minRNRTimer, retryCnt and rnrRetry are perftest's QP attributes
	// (MIN_RNR_TIMER, and 7 for both retry counts).
	minRNRTimer = 12
	retryCnt    = 7
	rnrRetry    = 7
	// hopLimit is the GRH hop limit perftest sets.
	hopLimit = 0xff
	// qkey is perftest's Q_Key of UD QPs (DEF_QKEY).
	qkey = 0x11111111
)

// session holds one run's verbs objects and exchange state, shaped like perftest's
// pingpong_context and perftest_comm.
type session struct {
	c       *config
	out     io.Writer
	errOut  io.Writer
	dev     *roce.Device
	pd      *roce.PD
	mr      *roce.MR
	cq      *roce.CQ // send and receive completions both
	qps     []*roce.QP
	srq     *roce.SRQ  // --use-srq on the receiving side: every QP's receives
	srqBufs *srqSlots  // the SRQ's receive buffers, one per posted receive (nil: perftest's layout)
	ahs     []*roce.AH // UD senders: one per QP
	gidx    int

	// buf is perftest's buffer: QP i sends from (or reads into) buf[i*bsize:],
	// and advertises buf[(n+i)*bsize:] to the peer, n QPs in all. results holds,
	// for the atomic tests, the value each atomic WR fetched, one 8-byte word
	// per WR: the check that every atomic ran exactly once reads them.
	buf     []byte
	bsize   int
	results []byte
	initial []byte // the advertised regions before the test, for the atomic check
	size    int    // the message size of the current run (changes with -a)

	cycle, cacheLine int // after the exchange: the larger of both sides'
	mtu              roce.MTU
	peerVersion      string
	outReads         int
	conn             *oob.PerftestConn
	local, remote    []oob.PerftestDest
	mgr              *cm.Manager  // -R
	listener         *cm.Listener // -R, server: on -p's port from the exchange's connection to the end
	cmConns          []*cm.Conn   // -R: the test QPs' connections, then the exchange's
	cli.Closers
}

// perftest runs one test from the device to the closing exchange.
func perftest(ctx context.Context, c *config, out, errOut io.Writer) (err error) {
	s := &session{c: c, out: out, errOut: errOut, cycle: defCycleBuffer, cacheLine: defCacheLine, size: c.size}
	defer func() {
		if c.Stats && s.dev != nil {
			fmt.Fprintln(errOut, cli.Stats(s.dev))
		}
		if cerr := s.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := s.connectExchange(ctx); err != nil {
		return err
	}
	if err := s.exchangeParams(ctx); err != nil {
		return err
	}
	if err := s.createQPs(); err != nil {
		return err
	}
	if c.rdmaCM {
		if err := s.connectCM(ctx); err != nil {
			return err
		}
		defer s.disconnectCM()
	}
	s.printBanner()
	if err := s.exchangeDests(ctx); err != nil {
		return err
	}
	if err := s.runTest(ctx); err != nil {
		return err
	}
	c.Hold(ctx)
	return nil
}

// connectExchange opens the device and the connection that carries perftest's
// exchange: TCP, or with -R an rdma_cm connection. With -d the device opens
// first, as perftest opens its device, so that a busy address fails before the
// peer is involved; without it the device binds the address of the TCP
// connection (with -R: the route to the server).
func (s *session) connectExchange(ctx context.Context) error {
	c := s.c
	if c.rdmaCM && !c.Addr.IsValid() {
		server, err := netip.ParseAddr(c.server)
		if err != nil {
			return fmt.Errorf("-R: the server must be an IP address: %v", err)
		}
		if c.Addr, err = cli.RouteSource(server, c.RoCEPort); err != nil {
			return err
		}
	}
	if c.Addr.IsValid() {
		if err := s.openDevice(); err != nil {
			return err
		}
	}
	if c.server == "" && c.output == "" {
		fmt.Fprint(s.out, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	}
	if c.rdmaCM {
		comm, err := s.dialComm(ctx)
		if err != nil {
			return err
		}
		s.cmConns = append(s.cmConns, comm.conn)
		s.conn = oob.NewPerftestMessages(comm)
		return nil
	}
	conn, err := c.Connect(ctx, c.server)
	if err != nil {
		return err
	}
	s.Add(conn.Close)
	s.conn = oob.NewPerftestConn(conn, c.server != "")
	if s.dev == nil {
		c.Resolve(conn)
		return s.openDevice()
	}
	return nil
}

// openDevice opens the device and picks the GID; the buffer and QPs wait for the
// exchanged cycle buffer size, as perftest's ctx_init waits for check_sys_data.
func (s *session) openDevice() error {
	var err error
	if s.c.rdmaCM {
		err = s.openCM()
	} else if s.dev, err = s.c.Open(roce.WithRunToCompletion(true)); err == nil {
		s.Add(s.dev.Close)
	}
	if err != nil {
		return cli.OpenError(err, s.c.Addr, s.c.RoCEPort, "-d", "--roce-port")
	}
	s.gidx = s.c.gidIndex
	if s.gidx < 0 {
		s.gidx = s.dev.GIDIndex()
	}
	if _, err := s.dev.QueryGID(s.gidx); err != nil {
		return fmt.Errorf("can't read sgid of index %d: %w", s.gidx, err)
	}
	return nil
}

// xctx bounds one exchange step that must not wait for the peer's test to run: a
// peer that stalls mid-exchange must not hang us forever.
func xctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, 60*time.Second)
}

// parseVersion is atof of a perftest version string: the leading number, 0 if none.
func parseVersion(v string) float64 {
	end := 0
	for end < len(v) && (v[end] >= '0' && v[end] <= '9' || v[end] == '.') {
		end++
	}
	f, err := strconv.ParseFloat(strings.TrimRight(v[:end], "."), 64)
	if err != nil {
		return 0
	}
	return f
}

// exchangeParams is exchange_versions, check_sys_data and check_mtu, then the UD
// message size check.
func (s *session) exchangeParams(ctx context.Context) error {
	ctx, cancel := xctx(ctx)
	defer cancel()
	var err error
	if s.peerVersion, err = s.conn.ExchangeVersion(ctx, oob.PerftestVersion); err != nil {
		return fmt.Errorf("failed to exchange versions: %w", err)
	}
	if parseVersion(s.peerVersion) < minPeerVersion {
		return fmt.Errorf("peer perftest version %q: older than %.2f is not supported", s.peerVersion, minPeerVersion)
	}
	// check_sys_data (peer >= 5.32, always true here): each side takes the larger.
	cycle, err := s.conn.ExchangeUint32(ctx, uint32(s.cycle))
	if err != nil {
		return fmt.Errorf("failed to exchange page size: %w", err)
	}
	line, err := s.conn.ExchangeUint32(ctx, uint32(s.cacheLine))
	if err != nil {
		return fmt.Errorf("failed to exchange cache line size: %w", err)
	}
	if cycle > 1<<30 || line > 1<<20 || line == 0 || cycle == 0 {
		return fmt.Errorf("peer page size %d or cache line size %d out of range", cycle, line)
	}
	s.cycle, s.cacheLine = max(s.cycle, int(cycle)), max(s.cacheLine, int(line))

	port, err := s.dev.QueryPort(1)
	if err != nil {
		return err
	}
	mine := port.ActiveMTU
	if s.c.mtu != 0 {
		mine = roce.MTUFromBytes(s.c.mtu)
	}
	theirs, err := s.conn.ExchangeMTU(ctx, int(mine))
	if err != nil {
		return fmt.Errorf("failed to exchange MTU: %w", err)
	}
	s.mtu = min(mine, roce.MTU(theirs))
	if s.c.conn == connUD && s.size > s.mtu.Bytes() {
		if s.c.all || !s.c.set("size") {
			fmt.Fprintf(s.errOut, " Max msg size in UD is MTU %d\n Changing to this MTU\n", s.mtu.Bytes())
			s.size = s.mtu.Bytes()
		} else {
			return fmt.Errorf("-s %d: a UD message cannot be larger than the MTU (%d)", s.size, s.mtu.Bytes())
		}
	}
	return nil
}

// inc is perftest's INC: size rounded up to the cache line.
func (s *session) inc(size int) int { return (size + s.cacheLine - 1) / s.cacheLine * s.cacheLine }

// access is what the peer may do to the QPs and buffer (ctx_modify_qp_to_init,
// create_single_mr).
func (s *session) access() (qp, mr roce.Access) {
	mr = roce.AccessLocalWrite | roce.AccessRemoteWrite | roce.AccessRemoteRead
	switch s.c.test.verb {
	case atomic:
		return roce.AccessRemoteAtomic, mr | roce.AccessRemoteAtomic
	case read:
		return roce.AccessRemoteRead, mr
	case write:
		return roce.AccessRemoteWrite, mr
	}
	return roce.AccessRemoteWrite | roce.AccessLocalWrite, mr
}

// createQPs allocates the buffer (two regions of max(size, cycle buffer) per QP,
// as perftest's alloc_ctx), registers it, creates the CQs and the QPs in INIT, and
// fills in the local addresses (set_up_connection).
func (s *session) createQPs() error {
	c := s.c
	n := c.numQPs
	s.bsize = s.inc(max(s.size, s.cycle))
	if c.conn == connUD {
		s.bsize = s.inc(max(s.size+udAddition, s.cycle))
	}
	s.buf = make([]byte, 2*n*s.bsize)
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	s.Add(s.pd.Close)
	qpAccess, mrAccess := s.access()
	if c.test.verb == atomic {
		// Every WR fetches into a word of its own, so that the fetched values can
		// be checked once all have completed.
		words := c.iters * n
		if c.set("duration") || c.runInf {
			words = 0 // the count is not known; the check uses counters then
		}
		s.buf = make([]byte, 2*n*s.bsize+8*words)
		s.results = s.buf[2*n*s.bsize:]
		// Known, distinct starting values in the advertised regions.
		for i := n * s.bsize; i+8 <= 2*n*s.bsize; i += 8 {
			binary.LittleEndian.PutUint64(s.buf[i:], uint64(i)<<20)
		}
		s.initial = append([]byte(nil), s.buf[n*s.bsize:2*n*s.bsize]...)
	}
	if s.mr, err = s.pd.RegMR(s.buf, mrAccess); err != nil {
		return err
	}
	s.Add(s.mr.Close)
	if s.cq, err = s.dev.CreateCQ(n * (c.txDepth + c.rxDepth + 1)); err != nil {
		return err
	}
	s.Add(s.cq.Close)
	qpType := []roce.QPType{connRC: roce.QPTypeRC, connUC: roce.QPTypeUC, connUD: roce.QPTypeUD}[c.conn]
	gid, err := s.dev.QueryGID(s.gidx)
	if err != nil {
		return err
	}
	dattr, err := s.dev.Query()
	if err != nil {
		return err
	}
	// ctx_set_out_reads: the device's maximum for READ and atomic, 1 otherwise; -o
	// sets it, within the device's.
	s.outReads = 1
	if c.test.verb == read || c.test.verb == atomic {
		s.outReads = dattr.MaxQPRdAtom
		if c.set("outs") {
			s.outReads = min(c.outReads, dattr.MaxQPRdAtom)
		}
	}
	// --use-srq: the side that receives (the server of send_bw, either side with
	// -b or in send_lat) creates one SRQ of -r WRs for all its QPs, as perftest.
	if c.useSRQ && (c.test.lat || c.server == "" || c.duplex) {
		if s.srq, err = s.pd.CreateSRQ(roce.SRQInitAttr{Attr: roce.SRQAttr{MaxWR: uint32(c.rxDepth), MaxSGE: 1}}); err != nil {
			return fmt.Errorf("couldn't create SRQ: %w", err)
		}
		s.Add(s.srq.Close)
		if err := s.setupSRQSlots(); err != nil {
			return err
		}
	}
	for i := range n {
		attr := roce.QPInitAttr{Type: qpType, SendCQ: s.cq, RecvCQ: s.cq, SRQ: s.srq,
			Cap: roce.QPCap{MaxSendWR: uint32(c.txDepth), MaxSendSGE: 1, MaxRecvWR: uint32(c.rxDepth), MaxRecvSGE: 1}}
		qp, err := s.pd.CreateQP(attr)
		if err != nil {
			return fmt.Errorf("couldn't create QP %d: %w", i, err)
		}
		s.qps = append(s.qps, qp)
		s.Add(qp.Close)
		if err := qp.Init(&roce.ConnectAttr{AccessFlags: qpAccess, QKey: qkey}); err != nil {
			return fmt.Errorf("failed to %w", err)
		}
		s.local = append(s.local, oob.PerftestDest{OutReads: uint16(s.outReads), QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff,
			RKey: s.mr.RKey(), VAddr: s.mr.Addr() + uint64(s.advertised(i)), GID: gid})
	}
	s.remote = make([]oob.PerftestDest, n)
	return nil
}

// sendRegion and advertised are the offsets in buf of QP i's two regions.
func (s *session) sendRegion(i int) int { return i * s.bsize }
func (s *session) advertised(i int) int { return (s.c.numQPs + i) * s.bsize }

// handShake is ctx_hand_shake for QP i: its record each way. perftest also uses
// it as a barrier, sending QP 0's record.
func (s *session) handShake(ctx context.Context, i int) error {
	r, err := s.conn.HandShake(ctx, s.local[i])
	if err != nil {
		return fmt.Errorf("failed to exchange data between server and client: %w", err)
	}
	s.remote[i] = r
	return nil
}

// barrier is a hand-shake on QP 0 bounded like every exchange step.
func (s *session) barrier(ctx context.Context) error {
	x, cancel := xctx(ctx)
	defer cancel()
	return s.handShake(x, 0)
}

// exchangeDests swaps the QP records, connects the QPs and passes the
// barriers around that, in the order and number the test's perftest main uses:
// the peer keeps the records of its last hand-shake per QP, so the order
// matters, not only the count.
func (s *session) exchangeDests(ctx context.Context) error {
	x, cancel := xctx(ctx)
	defer cancel()
	n := s.c.numQPs
	t := s.c.test
	if t.lat && t.verb != send {
		// write_lat, read_lat and atomic_lat hand-shake once before the records.
		if err := s.handShake(x, 0); err != nil {
			return err
		}
	}
	for i := range n {
		if err := s.handShake(x, i); err != nil {
			return err
		}
	}
	// With -R rdma_cm has connected the QPs already.
	if !s.c.rdmaCM {
		if isV4(s.local[0].GID) != isV4(s.remote[0].GID) {
			return fmt.Errorf("found incompatibility issue with GID types: local %v, remote %v",
				netip.AddrFrom16(s.local[0].GID), netip.AddrFrom16(s.remote[0].GID))
		}
		if err := s.connect(); err != nil {
			return err
		}
	}
	if t.verb == send {
		// send_bw and send_lat hand-shake right after connecting.
		if err := s.handShake(x, 0); err != nil {
			return err
		}
	}
	for i := range n {
		s.printDest("local", s.local[i])
	}
	for i := range n {
		if err := s.handShake(x, i); err != nil {
			return err
		}
		s.printDest("remote", s.remote[i])
	}
	if t.verb != send {
		// "An additional handshake is required after moving qp to RTR."
		if err := s.handShake(x, 0); err != nil {
			return err
		}
	}
	return nil
}

func isV4(gid [16]byte) bool { return netip.AddrFrom16(gid).Is4In6() }

// connect moves every QP to RTS with perftest's attributes (ctx_connect) and, for
// UD, makes the address handles.
func (s *session) connect() error {
	dattr, err := s.dev.Query()
	if err != nil {
		return err
	}
	for i, qp := range s.qps {
		r := s.remote[i]
		if r.QPN == 0 {
			return fmt.Errorf("remote QP %d: QP number 0", i)
		}
		a := roce.ConnectAttr{
			AV: roce.AddressVector{DGID: netip.AddrFrom16(r.GID).Unmap(), SGIDIndex: uint8(s.gidx), HopLimit: hopLimit,
				TrafficClass: uint8(s.c.trafficClass), IsGlobal: true},
			PathMTU: s.mtu, DestQPN: r.QPN, RQPSN: r.PSN, MaxDestRDAtomic: uint8(s.local[i].OutReads), MinRNRTimer: minRNRTimer,
			SQPSN: s.local[i].PSN, Timeout: uint8(s.c.qpTimeout), RetryCnt: retryCnt, RNRRetry: rnrRetry,
			// max_rd_atomic is what the peer allows us, within what our device can issue.
			MaxRDAtomic: uint8(min(int(r.OutReads), dattr.MaxQPInitRdAtom))}
		if err := qp.Connect(&a); err != nil {
			return fmt.Errorf("QP %d: failed to %w", i, err)
		}
		if s.c.conn == connUD {
			ah, err := s.pd.CreateAH(a.AV)
			if err != nil {
				return fmt.Errorf("failed to create AH: %w", err)
			}
			s.ahs = append(s.ahs, ah)
			s.Add(ah.Close)
		}
	}
	return nil
}

// noDoneVersion is the first perftest (23.10, version string 6.17) whose
// ctx_close_connection ends with the hand-shake and closes the connection without
// writing "done"; older ones write it (and never read the peer's).
const noDoneVersion = 6.17

// sendsDone reports whether a peer of version v ends the exchange with "done".
func sendsDone(v string) bool { return parseVersion(v) < noDoneVersion }

// closeConnection is ctx_close_connection: a last hand-shake, then "done" each way
// with a peer older than noDoneVersion.
func (s *session) closeConnection(ctx context.Context) error {
	x, cancel := xctx(ctx)
	defer cancel()
	return s.closeAfter(x, x)
}

// closeAfter is closeConnection with the hand-shake bounded by wait: a passive
// server's hand-shake returns only once the client has run the whole test.
func (s *session) closeAfter(wait, x context.Context) error {
	if err := s.handShake(wait, 0); err != nil {
		return fmt.Errorf("failed to close connection between server and client: %w", err)
	}
	if !sendsDone(s.peerVersion) {
		return nil
	}
	if err := s.conn.Done(x); err != nil {
		return fmt.Errorf("failed to close connection between server and client: %w", err)
	}
	return nil
}

// bwReport is perftest's struct bw_report_data, as much of it as it exchanges.
type bwReport struct {
	size, iters         uint64
	peak, avg, msgRatep float64 // in the report's unit (MB/sec of 2^20 bytes, or Gb/sec), and Mpps
}

// xchgReports is xchg_bw_reports for a peer of version 5.33 or newer: size, iters,
// peak, average and message rate, 8 big-endian bytes each, one step each.
func (s *session) xchgReports(ctx context.Context, mine bwReport) (bwReport, error) {
	x, cancel := xctx(ctx)
	defer cancel()
	out := []uint64{mine.size, mine.iters, math.Float64bits(mine.peak), math.Float64bits(mine.avg), math.Float64bits(mine.msgRatep)}
	in := make([]uint64, len(out))
	for i, v := range out {
		var o, r [8]byte
		binary.BigEndian.PutUint64(o[:], v)
		if err := s.conn.Exchange(x, o[:], r[:]); err != nil {
			return bwReport{}, fmt.Errorf("failed to exchange bw reports: %w", err)
		}
		in[i] = binary.BigEndian.Uint64(r[:])
	}
	return bwReport{size: in[0], iters: in[1], peak: math.Float64frombits(in[2]),
		avg: math.Float64frombits(in[3]), msgRatep: math.Float64frombits(in[4])}, nil
}

// deviceName is what the banner shows as the device: -d as given, else the
// address the device binds.
func (s *session) deviceName() string {
	if s.c.Device != "" {
		return s.c.Device
	}
	return s.c.Addr.String()
}
