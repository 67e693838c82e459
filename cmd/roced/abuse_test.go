package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/rping"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

// TestPingpongIdleFlood: idle TCP connections to the pingpong port hold no session
// slot, so real clients are still served while they sit there; each idle one is
// closed after the exchange timeout and counted. A client that finds every session
// slot taken is refused after its records are read, and counted.
func TestPingpongIdleFlood(t *testing.T) {
	const idle, exchange = 100, 5 * time.Second
	addrs := testAddrs(3)
	port := freeUDPPort(t, addrs...)
	tcp := freeTCPAddr(t)
	_, tcpPort, _ := net.SplitHostPort(tcp)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-ud-pingpong=false",
		"-pingpong-port", tcpPort, "-pingpong-exchange-timeout", exchange.String(), "-pingpong-max-sessions", "1", "-rping=false")
	srv := net.JoinHostPort(addrs[0].String(), tcpPort)
	var conns []net.Conn
	for range idle {
		c, err := net.Dial("tcp", srv)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()

	dev, err := roce.Open(addrs[1], roce.WithPort(port), roce.WithMTU(roce.MTU1024))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	start := time.Now()
	c := newPPClient(t, dev, kindRC, 1, 64)
	c.exchange(srv)
	c.run(10)
	// Waiting behind even one idle connection would last until it timed out,
	// counted as an exchange error before the client was served.
	if n := value(t, p.scrape(t), "roce_pingpong_exchange_errors_total"); n != 0 {
		t.Errorf("a real client behind %d idle connections was served after %v, when %v of them had timed out (-pingpong-exchange-timeout %v)",
			idle, time.Since(start), n, exchange)
	}

	// The one session slot is taken: the next client's exchange is refused.
	dev2, err := roce.Open(addrs[2], roce.WithPort(port), roce.WithMTU(roce.MTU1024))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev2.Close() })
	refusedClient(t, dev2, srv)

	waitFor(t, "the idle connections to time out", func() bool {
		m := p.scrape(t)
		return value(t, m, "roce_pingpong_exchange_errors_total") == idle &&
			value(t, m, "roce_pingpong_refused_total", "reason", "sessions") == 1 &&
			value(t, m, "roce_pingpong_refused_total", "reason", "exchanges") == 0 &&
			value(t, m, "roce_pingpong_sessions_total", "kind", "rc") == 1
	})
	for _, c := range conns[:3] {
		c.SetReadDeadline(time.Now().Add(time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("an idle connection read %d bytes; want it closed", n)
		}
	}
}

// refusedClient runs an RC client's exchange that the daemon must refuse.
func refusedClient(t *testing.T, dev *roce.Device, srv string) {
	t.Helper()
	conn, err := net.Dial("tcp", srv)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	local := []oob.Dest{{QPN: 0x123, PSN: 1, GID: dev.GID()}}
	if _, err := oob.ClientExchange(ctx, conn, local, 1); err == nil {
		t.Fatal("a client completed its exchange with every session slot taken")
	}
}

// reqDatagram is a CM REQ for the rping port as a RoCEv2 datagram from src (UDP
// source port sport) to dst: a UD SEND ONLY to QP1 with its ICRC.
func reqDatagram(t *testing.T, id uint32, src netip.Addr, sport uint16, dst netip.AddrPort, rpingPort uint16) []byte {
	t.Helper()
	pkt, err := buildREQDatagram(id, src, sport, dst, rpingPort)
	if err != nil {
		t.Fatal(err)
	}
	return pkt
}

// buildREQDatagram is reqDatagram for goroutines other than the test's.
func buildREQDatagram(id uint32, src netip.Addr, sport uint16, dst netip.AddrPort, rpingPort uint16) ([]byte, error) {
	priv, err := cm.AppendCMA(nil, cm.CMAHeader{SrcPort: 40000, Src: src, Dst: dst.Addr()}, nil)
	if err != nil {
		return nil, err
	}
	req := cm.REQ{LocalCommID: id, ServiceID: cm.ServiceID(cm.PortSpaceTCP, rpingPort), LocalQPN: 0x100 + id&0xffff,
		ResponderResources: 1, InitiatorDepth: 1, TransportServiceType: cm.TransportRC, StartingPSN: id & 0xffffff,
		RetryCount: 7, RNRRetryCount: 7, PKey: cm.GSIPKey, PathMTU: 3, MaxCMRetries: 15,
		LocalCMResponseTimeout: 20, RemoteCMResponseTimeout: 20,
		Primary: cm.Path{LocalLID: 0xffff, RemoteLID: 0xffff, LocalGID: cm.GIDFromAddr(src), RemoteGID: cm.GIDFromAddr(dst.Addr()),
			HopLimit: 64, LocalACKTimeout: 19},
		PrivateData: priv}
	mad, err := cm.Marshal(uint64(id), &req)
	if err != nil {
		return nil, err
	}
	pkt := bth.Append(nil, &bth.Fields{Opcode: bth.UDSendOnly, PKey: cm.GSIPKey, DestQP: cm.GSIQPN, AckReq: true,
		PSN: bth.PSN(id), DETH: bth.DETH{QKey: cm.GSIQKey, SrcQP: cm.GSIQPN}}, mad)
	bth.PutICRC(&bth.Envelope{Src: src, Dst: dst.Addr(), DF: true, SrcPort: sport, DstPort: dst.Port()}, pkt)
	return pkt, nil
}

// sendREQFrom sends REQ id to dst's rping port from src (bound for the send).
func sendREQFrom(src netip.Addr, id uint32, dst netip.AddrPort) error {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)))
	if err != nil {
		return err
	}
	defer c.Close()
	pkt, err := buildREQDatagram(id, src, uint16(c.LocalAddr().(*net.UDPAddr).Port), dst, defaultRpingPort)
	if err == nil {
		_, err = c.WriteToUDPAddrPort(pkt, dst)
	}
	return err
}

// spoofPrefix is a random 127.b1.0.0/16 for spoofed REQ sources, apart from
// the test's own addresses.
func spoofPrefix(own netip.Addr) byte {
	for {
		if b1 := byte(64 + rand.IntN(128)); b1 != own.As4()[1] {
			return b1
		}
	}
}

// spoofSrc is the i-th spoofed source address in 127.b1.0.0/16.
func spoofSrc(b1 byte, i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, b1, byte(i >> 8), byte(1 + i%250)})
}

// memory is the daemon's resident set, Go heap in use and goroutines, from its metrics.
func memory(t *testing.T, p *daemonProc) (rss, heap, goroutines float64) {
	m := p.scrape(t)
	return value(t, m, "process_resident_memory_bytes"), value(t, m, "go_memstats_heap_inuse_bytes"), value(t, m, "go_goroutines")
}

// reqFlood sends n REQs for the rping port to dst, each from its own address in
// 127.b1.0.0/16 and with its own comm ID from firstID, under flow control so that
// loopback drops none, and returns the highest RSS and heap seen meanwhile.
func reqFlood(t *testing.T, p *daemonProc, dst netip.AddrPort, b1 byte, firstID uint32, n int) (peakRSS, peakHeap float64) {
	fc := newFlowControl(t, dst)
	defer fc.check()
	for i := range n {
		fc.before(i)
		if err := sendREQFrom(spoofSrc(b1, i), firstID+uint32(i), dst); err != nil {
			t.Fatal(err)
		}
		if i%500 == 499 {
			rss, heap, _ := memory(t, p)
			peakRSS, peakHeap = max(peakRSS, rss), max(peakHeap, heap)
		}
	}
	return peakRSS, peakHeap
}

// TestCMREQFlood: 5,000 REQs from 5,000 addresses that never send an RTU, twice.
// The daemon holds at most -cm-max-pending of them (each with an rping session's
// QP and CQ): a REQ at the cap evicts the oldest unanswered REP, or is dropped
// unanswered when none has its REP yet; every one is counted, and each admitted
// one gets one REP and one REJ (evicted, or withdrawn after -cm-pending-timeout).
// Its memory stays bounded (the second flood peaks no higher than the first) and
// its goroutines return to their baseline. A real rping client is served afterwards.
func TestCMREQFlood(t *testing.T) {
	const flood, maxPending = 5000, 64
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false", "-ud-pingpong=false",
		"-cm-max-pending", strconv.Itoa(maxPending), "-cm-pending-timeout", "2s")
	dst := netip.AddrPortFrom(addrs[0], port)
	// The baseline: roced announces its metrics address after it started every
	// listener and responder, so nothing is still coming up.
	rss0, heap0, g0 := memory(t, p)
	b1 := spoofPrefix(addrs[0])
	var peaks [2][2]float64
	var total float64
	for round := range 2 {
		peaks[round][0], peaks[round][1] = reqFlood(t, p, dst, b1, uint32(1+round*flood), flood)
		total += flood
		var m map[string]float64
		waitFor(t, "every REQ to be counted", func() bool {
			mfs := p.scrape(t)
			m = map[string]float64{
				"gsi_rx":   value(t, mfs, "roce_gsi_mads_total", "direction", "rx"),
				"overflow": value(t, mfs, "roce_gsi_drops_total", "reason", "overflow"),
				"cm_rx":    value(t, mfs, "roce_cm_mads_total", "direction", "rx"),
				"refused":  value(t, mfs, "roce_cm_drops_total", "reason", "pending_limit"),
				"pending":  value(t, mfs, "roce_cm_pending_connections"),
			}
			return m["gsi_rx"]+m["overflow"] == total && m["cm_rx"] == m["gsi_rx"]
		})
		admitted := m["cm_rx"] - m["refused"]
		if m["pending"] > maxPending || admitted < 1 {
			t.Errorf("%v pending (cap %d), %v REQs admitted", m["pending"], maxPending, admitted)
		}
		waitFor(t, "the pending connections to be withdrawn", func() bool {
			mfs := p.scrape(t)
			return value(t, mfs, "roce_cm_pending_connections") == 0 && value(t, mfs, "roce_rping_active_sessions") == 0 &&
				value(t, mfs, "roce_queue_pairs", "state", "rts") == 0 && value(t, mfs, "roce_queue_pairs", "state", "rtr") == 0 &&
				value(t, mfs, "roce_queue_pairs", "state", "init") == 0 && value(t, mfs, "roce_completion_queues") == 0 &&
				value(t, mfs, "roce_rping_accept_errors_total") == admitted
		})
		// Each admitted REQ is answered by one REP, and the REQs ask for a
		// 4.3 s CM response timeout, longer than -cm-pending-timeout: its
		// retransmission never comes before the connection is evicted or
		// withdrawn, with one REJ.
		mfs := p.scrape(t)
		evicted, expired := value(t, mfs, "roce_cm_pending_evicted_total"), value(t, mfs, "roce_cm_pending_expired_total")
		reps, rejs := value(t, mfs, "roce_cm_reps_total"), value(t, mfs, "roce_cm_rejects_total", "direction", "tx")
		t.Logf("flood %d: %v; %v admitted: %v evicted, %v expired, %v REPs, %v REJs", round+1, m, admitted, evicted, expired, reps, rejs)
		// (A few end by the server's own accept timeout, as long as the CM's.)
		if reps != admitted || rejs != admitted || evicted+expired > admitted {
			t.Errorf("%v REPs, %v REJs, %v evicted + %v expired for %v admitted REQs; want one REP and one REJ each",
				reps, rejs, evicted, expired, admitted)
		}
	}
	waitFor(t, "goroutines back to their baseline", func() bool {
		_, _, g := memory(t, p)
		return g <= g0+2
	})
	rss1, heap1, g1 := memory(t, p)
	t.Logf("RSS %.1f MB before, %.1f / %.1f MB peak in floods 1 / 2, %.1f MB after; Go heap in use %.1f MB before, %.1f / %.1f MB peak, %.1f MB after; goroutines %v before, %v after",
		rss0/1e6, peaks[0][0]/1e6, peaks[1][0]/1e6, rss1/1e6, heap0/1e6, peaks[0][1]/1e6, peaks[1][1]/1e6, heap1/1e6, g0, g1)
	// Measured 13-15 MB for 5,000 REQs (about 3,000 admitted in turn, each
	// with an rping session's QP and CQ); the margin is the GC's timing.
	if peaks[0][0]-rss0 > 24e6 {
		t.Errorf("RSS grew by %.1f MB during the flood", (peaks[0][0]-rss0)/1e6)
	}
	if peaks[1][1] > peaks[0][1]+8e6 {
		t.Errorf("the second flood's heap peak %.1f MB is above the first's %.1f MB: something is kept", peaks[1][1]/1e6, peaks[0][1]/1e6)
	}

	// A real client gets in.
	dev, mgr := cmPeer(t, addrs[1], port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rping.Client(ctx, dev, mgr, netip.AddrPortFrom(addrs[1], 0), netip.AddrPortFrom(addrs[0], defaultRpingPort),
		rping.Options{Count: 5, Validate: true}); err != nil {
		t.Fatalf("rping client after the flood: %v", err)
	}
}

// TestCMREQFloodRealClient: a spoofed REQ flood far above the pending cap
// (200 a second against -cm-max-pending 64 per 60 s -cm-pending-timeout) keeps
// the table full; a real rping client connecting meanwhile is served, because
// each REQ evicts the oldest unanswered REP, which lives about 64/200 s. Before
// eviction, its REQ and every retransmission were refused for the flood's length.
func TestCMREQFloodRealClient(t *testing.T) {
	const (
		maxPending = 64
		every      = 5 * time.Millisecond // the flood's pace: a REP lives ≈ 320 ms
	)
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false", "-ud-pingpong=false",
		"-cm-max-pending", strconv.Itoa(maxPending), "-cm-pending-timeout", "60s")
	dst := netip.AddrPortFrom(addrs[0], port)
	b1 := spoofPrefix(addrs[0])
	ctx, stop := context.WithCancel(context.Background())
	flooded := make(chan error, 1)
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				flooded <- nil
				return
			case <-tick.C:
			}
			if err := sendREQFrom(spoofSrc(b1, i), uint32(1+i), dst); err != nil {
				flooded <- err
				return
			}
		}
	}()
	defer func() {
		stop()
		if err := <-flooded; err != nil {
			t.Errorf("flood: %v", err)
		}
	}()
	waitFor(t, "the flood to fill the pending table", func() bool {
		mfs := p.scrape(t)
		return value(t, mfs, "roce_cm_pending_connections") == maxPending && value(t, mfs, "roce_cm_mads_total", "direction", "rx") >= 2*maxPending
	})

	// The client's REQ is refused only when no pending REP is there to evict
	// (every slot taken by a request the server is still setting up); its CM
	// resends it every response timeout plus two packet lifetimes (≈ 6.4 s).
	// Three tries, and the margin for a loaded host.
	resend := cm.TimeoutDuration(cm.DefaultCMResponseTimeout) + 2*cm.TimeoutDuration(cm.DefaultPacketLifetime)
	dev, mgr := cmPeer(t, addrs[1], port)
	cctx, cancel := context.WithTimeout(context.Background(), 3*resend+10*time.Second)
	defer cancel()
	began := time.Now()
	err := rping.Client(cctx, dev, mgr, netip.AddrPortFrom(addrs[1], 0), netip.AddrPortFrom(addrs[0], defaultRpingPort),
		rping.Options{Count: 5, Validate: true, Timeout: 3*resend + 10*time.Second})
	took := time.Since(began)
	mfs := p.scrape(t)
	evicted, refused := value(t, mfs, "roce_cm_pending_evicted_total"), value(t, mfs, "roce_cm_drops_total", "reason", "pending_limit")
	t.Logf("real client done in %v; daemon: %v REQs, %v evicted, %v refused, %v pending, client REQs resent %d",
		took.Round(time.Millisecond), value(t, mfs, "roce_cm_mads_total", "direction", "rx"), evicted, refused,
		value(t, mfs, "roce_cm_pending_connections"), mgr.Stats().Retransmits)
	if err != nil {
		t.Fatalf("rping client during the flood: %v", err)
	}
	if evicted == 0 || value(t, mfs, "roce_rping_sessions_total") != 1 || value(t, mfs, "roce_cm_pending_connections") > maxPending {
		t.Errorf("evicted %v, sessions %v, pending %v; want evictions, the client's session, at most %d pending",
			evicted, value(t, mfs, "roce_rping_sessions_total"), value(t, mfs, "roce_cm_pending_connections"), maxPending)
	}
}

// TestRpingClientDies: an rping client killed mid-run (kill -9 of a user-space
// client: its socket closes with the process, so no DREQ and nothing else leaves
// it) ends its session on the daemon within -rping-idle; the session's QP is
// destroyed and the end is counted as idle.
func TestRpingClientDies(t *testing.T) {
	const idle = 2 * time.Second
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false", "-ud-pingpong=false",
		"-rping-idle", idle.String())
	dev, mgr, wire := cmPeerWire(t, addrs[1], port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- rping.Client(ctx, dev, mgr, netip.AddrPortFrom(addrs[1], 0), netip.AddrPortFrom(addrs[0], defaultRpingPort), rping.Options{})
	}()
	waitFor(t, "pings", func() bool { return value(t, p.scrape(t), "roce_rping_pings_total") > 10 })
	// The kill: the socket closes first, so the client's teardown below (its QP
	// to ERR, its buffers deregistered, its CM closed) reaches nobody. Tearing it
	// down with the socket still open let a deregistered receive buffer NAK the
	// daemon's SEND under load: a failed completion, counted as an error end.
	wire.Close()
	died := time.Now()
	mgr.Close()
	dev.Close()
	<-done
	defer func() {
		if t.Failed() {
			m := p.scrape(t)
			for _, r := range []string{"idle", "error", "disconnect", "shutdown"} {
				t.Logf("sessions ended by %s: %v", r, value(t, m, "roce_rping_session_ends_total", "reason", r))
			}
			t.Logf("roced stderr:\n%s", p.stderr.String())
		}
	}()
	waitFor(t, "the daemon to end the session", func() bool {
		m := p.scrape(t)
		return value(t, m, "roce_rping_session_ends_total", "reason", "idle") == 1 &&
			value(t, m, "roce_rping_active_sessions") == 0 && value(t, m, "roce_queue_pairs", "state", "rts") == 0
	})
	// The idle timer started at the last completion before the kill, so the end
	// comes at most idle after it; the margin covers a loaded host's scheduling
	// and the 20 ms scrape period.
	if took, limit := time.Since(died), idle+2*time.Second; took > limit {
		t.Errorf("the session ended %v after the client died; -rping-idle is %v (limit %v)", took, idle, limit)
	}
	if n := value(t, p.scrape(t), "roce_rping_session_ends_total", "reason", "error"); n != 0 {
		t.Errorf("%v sessions ended by an error; the dead client sent nothing", n)
	}
}

// TestRpingSessionLimit: -rping-max-sessions counts established sessions.
// Connections that never send their RTU (capped by the CM, not here) do not
// take a slot from a real client; a request beyond the established limit is
// rejected with REJ "consumer defined" and counted.
func TestRpingSessionLimit(t *testing.T) {
	addrs := testAddrs(4)
	port := freeUDPPort(t, addrs...)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false", "-ud-pingpong=false",
		"-rping-max-sessions", "1", "-cm-pending-timeout", "60s")
	srv := netip.AddrPortFrom(addrs[0], port)

	// Three REQs that will never get their RTU.
	junk, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrs[3], 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	from := junk.LocalAddr().(*net.UDPAddr).AddrPort()
	for id := uint32(1); id <= 3; id++ {
		if _, err := junk.WriteToUDPAddrPort(reqDatagram(t, id, from.Addr(), from.Port(), srv, defaultRpingPort), srv); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "three pending connections", func() bool { return value(t, p.scrape(t), "roce_cm_pending_connections") == 3 })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dev, mgr := cmPeer(t, addrs[1], port)
	first := make(chan error, 1)
	go func() {
		first <- rping.Client(ctx, dev, mgr, netip.AddrPortFrom(addrs[1], 0), netip.AddrPortFrom(addrs[0], defaultRpingPort), rping.Options{})
	}()
	waitFor(t, "the first client's pings", func() bool { return value(t, p.scrape(t), "roce_rping_pings_total") > 3 })

	dev2, mgr2 := cmPeer(t, addrs[2], port)
	err = rping.Client(ctx, dev2, mgr2, netip.AddrPortFrom(addrs[2], 0), netip.AddrPortFrom(addrs[0], defaultRpingPort), rping.Options{Count: 1})
	var rej *cm.RejectError
	if !errors.As(err, &rej) || rej.Reason != cm.RejConsumerDefined {
		t.Fatalf("second client with one session established: %v, want REJ consumer defined", err)
	}
	if n := value(t, p.scrape(t), "roce_rping_refused_total"); n != 1 {
		t.Errorf("roce_rping_refused_total %v, want 1", n)
	}
	select {
	case err := <-first:
		t.Fatalf("the first client ended: %v", err)
	default:
	}
	cancel()
	<-first
}
