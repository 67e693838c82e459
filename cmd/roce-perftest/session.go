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

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

const (
	// defCycleBuffer is perftest's cycle buffer before the exchange: the page size
	// (sysconf(_SC_PAGESIZE) on x86). Both sides take the larger of theirs.
	defCycleBuffer = 4096
	// defCacheLine is perftest's cache line size before the exchange.
	defCacheLine = 64
	// maxSize is perftest's largest message (MAX_SIZE).
	maxSize = 1 << 23
	// minPeerVersion is the oldest perftest whose exchange perftest itself accepts.
	minPeerVersion = 5.70
	// minRNRTimer, qpTimeout, retryCnt and rnrRetry are perftest's QP attributes
	// (MIN_RNR_TIMER, DEF_QP_TIME, and 7 for both retry counts).
	minRNRTimer = 12
	qpTimeout   = 14
	retryCnt    = 7
	rnrRetry    = 7
	// hopLimit is the GRH hop limit perftest sets.
	hopLimit = 0xff
)

// session holds one run's verbs objects and exchange state, shaped like perftest's
// pingpong_context and perftest_comm.
type session struct {
	c   *config
	out io.Writer
	dev *roce.Device
	pd  *roce.PD
	mr  *roce.MR
	cq  *roce.CQ
	qp  *roce.QP
	// buf is perftest's buffer: the first half is where this side sends from (or
	// reads into), the second half, from half on, is what it advertises to the peer.
	buf  []byte
	half int
	gidx int

	cycle, cacheLine int // after the exchange: the larger of both sides'
	mtu              roce.MTU
	peerVersion      string
	conn             *oob.PerftestConn
	local, remote    oob.PerftestDest
	cli.Closers
}

// perftest runs one test from the device to the closing exchange.
func perftest(ctx context.Context, c *config, out, errOut io.Writer) (err error) {
	s := &session{c: c, out: out, cycle: defCycleBuffer, cacheLine: defCacheLine}
	defer func() {
		if c.Stats && s.dev != nil {
			fmt.Fprintln(errOut, cli.Stats(s.dev))
		}
		if cerr := s.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := s.openDevice(); err != nil {
		return err
	}
	if err := s.dial(ctx); err != nil {
		return err
	}
	if err := s.exchangeParams(ctx); err != nil {
		return err
	}
	if err := s.createQP(); err != nil {
		return err
	}
	if err := s.exchangeDests(ctx); err != nil {
		return err
	}
	if err := s.runTest(ctx); err != nil {
		return err
	}
	c.Hold(ctx)
	return nil
}

// openDevice opens the device and picks the GID; the buffer and QP wait for the
// exchanged cycle buffer size, as perftest's ctx_init waits for check_sys_data.
func (s *session) openDevice() error {
	var err error
	s.dev, err = roce.Open(s.c.Addr, roce.WithPort(uint16(s.c.RoCEPort)))
	if err != nil {
		return fmt.Errorf("couldn't open the device on %v: %w", s.c.Addr, err)
	}
	s.Add(s.dev.Close)
	s.gidx = s.c.gidIndex
	if s.gidx < 0 {
		s.gidx = s.dev.GIDIndex()
	}
	if _, err := s.dev.QueryGID(s.gidx); err != nil {
		return fmt.Errorf("can't read sgid of index %d: %w", s.gidx, err)
	}
	return nil
}

// dial makes the TCP connection: to the server, or the first client that connects.
func (s *session) dial(ctx context.Context) error {
	conn, err := s.c.Connect(ctx, s.c.server)
	if err != nil {
		return err
	}
	s.Add(conn.Close)
	s.conn = oob.NewPerftestConn(conn, s.c.server != "")
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

// exchangeParams is exchange_versions, check_sys_data and check_mtu.
func (s *session) exchangeParams(ctx context.Context) error {
	ctx, cancel := xctx(ctx)
	defer cancel()
	var err error
	if s.peerVersion, err = s.conn.ExchangeVersion(ctx, oob.PerftestVersion); err != nil {
		return fmt.Errorf("failed to exchange versions: %w", err)
	}
	peer := parseVersion(s.peerVersion)
	if peer < minPeerVersion {
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
	fmt.Fprintf(s.out, " Test: %s, goroce perftest %s, peer %s, MTU %d, cycle buffer %d\n",
		s.c.test, oob.PerftestVersion, s.peerVersion, s.mtu.Bytes(), s.cycle)
	return nil
}

// inc is perftest's INC: size rounded up to the cache line.
func (s *session) inc(size int) int { return (size + s.cacheLine - 1) / s.cacheLine * s.cacheLine }

// createQP allocates the buffer (two halves of max(size, cycle buffer), as
// perftest's alloc_ctx), registers it, and creates the CQ and an RC QP in INIT.
func (s *session) createQP() error {
	c := s.c
	s.half = s.inc(max(c.size, s.cycle))
	s.buf = make([]byte, 2*s.half)
	var err error
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return err
	}
	s.Add(s.pd.Close)
	access := roce.AccessLocalWrite | roce.AccessRemoteWrite | roce.AccessRemoteRead
	if s.mr, err = s.pd.RegMR(s.buf, access); err != nil {
		return err
	}
	s.Add(s.mr.Close)
	if s.cq, err = s.dev.CreateCQ(c.txDepth + c.rxDepth + 1); err != nil {
		return err
	}
	s.Add(s.cq.Close)
	attr := roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: roce.QPCap{MaxSendWR: uint32(c.txDepth), MaxSendSGE: 1, MaxRecvWR: uint32(c.rxDepth), MaxRecvSGE: 1}}
	if s.qp, err = s.pd.CreateQP(attr); err != nil {
		return fmt.Errorf("couldn't create QP: %w", err)
	}
	s.Add(s.qp.Close)
	if err := s.qp.Init(&roce.ConnectAttr{AccessFlags: access}); err != nil {
		return fmt.Errorf("failed to modify QP to INIT: %w", err)
	}
	gid, err := s.dev.QueryGID(s.gidx)
	if err != nil {
		return err
	}
	dattr, err := s.dev.Query()
	if err != nil {
		return err
	}
	// perftest advertises the device's max_qp_rd_atom for READ (ctx_set_out_reads)
	// and its default of 1 otherwise.
	outReads := 1
	if c.test == readBW || c.test == readLat {
		outReads = dattr.MaxQPRdAtom
	}
	s.local = oob.PerftestDest{OutReads: uint16(outReads), QPN: s.qp.QPN(), PSN: rand.Uint32() & 0xffffff,
		RKey: s.mr.RKey(), VAddr: s.mr.Addr() + uint64(s.half), GID: gid}
	s.printDest("local", s.local)
	return nil
}

func (s *session) printDest(side string, d oob.PerftestDest) {
	fmt.Fprintf(s.out, " %s address: LID %#04x QPN %#06x PSN %#06x OUT %#04x RKey %#08x VAddr %#016x GID %v\n",
		side, d.LID, d.QPN, d.PSN, d.OutReads, d.RKey, d.VAddr, netip.AddrFrom16(d.GID).Unmap())
}

// handShake is ctx_hand_shake: one record each way, also used as a barrier.
func (s *session) handShake(ctx context.Context) error {
	r, err := s.conn.HandShake(ctx, s.local)
	if err != nil {
		return fmt.Errorf("failed to exchange data between server and client: %w", err)
	}
	s.remote = r
	return nil
}

// exchangeDests swaps the QP records, connects the QP and passes the barrier that
// follows, in the order and number perftest uses for the test.
func (s *session) exchangeDests(ctx context.Context) error {
	x, cancel := xctx(ctx)
	defer cancel()
	if s.c.test == writeLat || s.c.test == readLat {
		// write_lat and read_lat hand-shake once more before the per-QP one.
		if err := s.handShake(x); err != nil {
			return err
		}
	}
	if err := s.handShake(x); err != nil {
		return err
	}
	s.printDest("remote", s.remote)
	if isV4(s.local.GID) != isV4(s.remote.GID) {
		return fmt.Errorf("found incompatibility issue with GID types: local %v, remote %v",
			netip.AddrFrom16(s.local.GID), netip.AddrFrom16(s.remote.GID))
	}
	if err := s.connect(); err != nil {
		return err
	}
	// The hand-shakes after RTR/RTS: once through, the peer's QP is ready too.
	// perftest 4.5-0.17 (version 6.06) makes two here (three records each way
	// before the first RDMA packet of ib_write_bw, in the recorded exchange);
	// making both after connect is right wherever the peer places its second one.
	for range 2 {
		if err := s.handShake(x); err != nil {
			return err
		}
	}
	return nil
}

func isV4(gid [16]byte) bool { return netip.AddrFrom16(gid).Is4In6() }

// connect moves the QP to RTR and RTS with perftest's attributes (ctx_connect).
func (s *session) connect() error {
	r := s.remote
	if r.QPN == 0 {
		return fmt.Errorf("remote QP number 0")
	}
	dattr, err := s.dev.Query()
	if err != nil {
		return err
	}
	a := roce.ConnectAttr{
		AV:      roce.AddressVector{DGID: netip.AddrFrom16(r.GID), SGIDIndex: uint8(s.gidx), HopLimit: hopLimit, IsGlobal: true},
		PathMTU: s.mtu, DestQPN: r.QPN, RQPSN: r.PSN, MaxDestRDAtomic: uint8(s.local.OutReads), MinRNRTimer: minRNRTimer,
		SQPSN: s.local.PSN, Timeout: qpTimeout, RetryCnt: retryCnt, RNRRetry: rnrRetry,
		// max_rd_atomic is what the peer allows us, within what our device can issue.
		MaxRDAtomic: uint8(min(int(r.OutReads), dattr.MaxQPInitRdAtom))}
	if err := s.qp.Connect(&a); err != nil {
		return fmt.Errorf("failed to %w", err)
	}
	return nil
}

// closeConnection is ctx_close_connection: a last hand-shake, then "done" each way.
func (s *session) closeConnection(ctx context.Context) error {
	x, cancel := xctx(ctx)
	defer cancel()
	return s.closeAfter(x, x)
}

// closeAfter is closeConnection with the hand-shake bounded by wait: the read_lat
// server's hand-shake returns only once the client has run the whole test.
func (s *session) closeAfter(wait, x context.Context) error {
	if err := s.handShake(wait); err != nil {
		return fmt.Errorf("failed to close connection between server and client: %w", err)
	}
	if err := s.conn.Done(x); err != nil {
		return fmt.Errorf("failed to close connection between server and client: %w", err)
	}
	return nil
}

// bwReport is perftest's struct bw_report_data, as much of it as it exchanges.
type bwReport struct {
	size, iters         uint64
	peak, avg, msgRatep float64 // MB/sec (2^20 bytes), MB/sec, Mpps
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
