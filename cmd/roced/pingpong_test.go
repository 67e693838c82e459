package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/tool/devapi"
	"github.com/goroce/goroce/internal/tool/pingpong"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

// ppClient is the client side of ibv_{rc,srq,ud}_pingpong written with the engine's own
// verbs: what a stock client does, so the daemon's responder is driven the same way.
type ppClient struct {
	t    *testing.T
	kind pingpongKind
	dev  *roce.Device
	pd   *roce.PD
	cq   *roce.CQ
	srq  *roce.SRQ
	qps  []*roce.QP
	mr   *roce.MR
	buf  []byte
	size int
	rem  []oob.Dest
	ahs  []*roce.AH
}

func newPPClient(t *testing.T, dev *roce.Device, kind pingpongKind, nqp, size int) *ppClient {
	t.Helper()
	c := &ppClient{t: t, kind: kind, dev: dev, size: size}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	var err error
	c.pd, err = dev.AllocPD()
	must(err)
	slot := size
	if kind == kindUD {
		slot += pingpong.GRH
	}
	// Slot 2i is QP i's receive buffer, slot 2i+1 its send buffer.
	c.buf = make([]byte, 2*nqp*slot)
	c.mr, err = c.pd.RegMR(c.buf, roce.AccessLocalWrite)
	must(err)
	c.cq, err = dev.CreateCQ(4 * nqp)
	must(err)
	init := roce.QPInitAttr{Type: roce.QPTypeRC, SendCQ: c.cq, RecvCQ: c.cq,
		Cap: roce.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if kind == kindUD {
		init.Type = roce.QPTypeUD
	}
	if kind == kindSRQ {
		c.srq, err = c.pd.CreateSRQ(roce.SRQInitAttr{Attr: roce.SRQAttr{MaxWR: uint32(2 * nqp), MaxSGE: 1}})
		must(err)
		init.SRQ = c.srq
		init.Cap.MaxRecvWR = 0
	}
	for range nqp {
		qp, err := c.pd.CreateQP(init)
		must(err)
		attr := roce.QPAttr{State: roce.QPSInit, PortNum: 1}
		mask := roce.QPAttrState | roce.QPAttrPKeyIndex | roce.QPAttrPort
		if kind == kindUD {
			attr.QKey = pingpong.QKey
			mask |= roce.QPAttrQKey
		} else {
			mask |= roce.QPAttrAccessFlags
		}
		must(qp.Modify(&attr, mask))
		c.qps = append(c.qps, qp)
	}
	for i := range c.qps {
		c.postRecv(i)
	}
	t.Cleanup(c.close)
	return c
}

func (c *ppClient) slot() int {
	if c.kind == kindUD {
		return c.size + pingpong.GRH
	}
	return c.size
}

func (c *ppClient) postRecv(i int) {
	c.t.Helper()
	wr := []roce.RecvWR{{WRID: uint64(i), SGL: []roce.SGE{{Addr: c.mr.Addr() + uint64(2*i*c.slot()), Length: uint32(c.slot()), LKey: c.mr.LKey()}}}}
	var err error
	if c.srq != nil {
		_, err = c.srq.PostRecv(wr)
	} else {
		_, err = c.qps[i].PostRecv(wr)
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// exchange runs the TCP exchange against the daemon and connects the QPs.
func (c *ppClient) exchange(tcp string) {
	c.t.Helper()
	conn, err := net.Dial("tcp", tcp)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close()
	local := make([]oob.Dest, len(c.qps))
	for i, qp := range c.qps {
		local[i] = oob.Dest{QPN: qp.QPN(), PSN: rand.Uint32() & 0xffffff, GID: c.dev.GID()}
	}
	n := 1
	if c.kind == kindSRQ {
		n = oob.SRQRecords
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.rem, err = oob.ClientExchange(ctx, conn, local, n)
	if err != nil {
		c.t.Fatal(err)
	}
	for i, qp := range c.qps {
		r := c.rem[i]
		av := roce.AddressVector{IsGlobal: true, DGID: netip.AddrFrom16(r.GID).Unmap(), SGIDIndex: uint8(c.dev.GIDIndex()), HopLimit: 1}
		if c.kind == kindUD {
			if err := qp.Modify(&roce.QPAttr{State: roce.QPSRTR}, roce.QPAttrState); err != nil {
				c.t.Fatal(err)
			}
			if err := qp.Modify(&roce.QPAttr{State: roce.QPSRTS, SQPSN: local[i].PSN}, roce.QPAttrState|roce.QPAttrSQPSN); err != nil {
				c.t.Fatal(err)
			}
			ah, err := c.pd.CreateAH(av)
			if err != nil {
				c.t.Fatal(err)
			}
			c.ahs = append(c.ahs, ah)
			continue
		}
		err := qp.Modify(&roce.QPAttr{State: roce.QPSRTR, PathMTU: roce.MTU1024, DestQPN: r.QPN, RQPSN: r.PSN,
			MaxDestRDAtomic: 1, MinRNRTimer: 12, AV: av},
			roce.QPAttrState|roce.QPAttrAV|roce.QPAttrPathMTU|roce.QPAttrDestQPN|roce.QPAttrRQPSN|
				roce.QPAttrMaxDestRDAtomic|roce.QPAttrMinRNRTimer)
		if err != nil {
			c.t.Fatal(err)
		}
		err = qp.Modify(&roce.QPAttr{State: roce.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: local[i].PSN, MaxRDAtomic: 1},
			roce.QPAttrState|roce.QPAttrTimeout|roce.QPAttrRetryCnt|roce.QPAttrRNRRetry|roce.QPAttrSQPSN|roce.QPAttrMaxQPRDAtomic)
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

// run does iters ping-pongs on every QP, checking that each pong is the ping echoed.
func (c *ppClient) run(iters int) {
	c.t.Helper()
	byQPN := map[uint32]int{}
	for i, qp := range c.qps {
		byQPN[qp.QPN()] = i
	}
	sent := make([]int, len(c.qps))
	rcvd := make([]int, len(c.qps))
	pendingSend := make([]bool, len(c.qps))
	pendingRecv := make([]bool, len(c.qps))
	send := func(i int) {
		c.t.Helper()
		b := c.buf[(2*i+1)*c.slot():][:c.size]
		for j := range b {
			b[j] = byte(sent[i] + i + j)
		}
		wr := roce.SendWR{WRID: uint64(i), Opcode: roce.WRSend, Flags: roce.SendSignaled,
			SGL: []roce.SGE{{Addr: c.mr.Addr() + uint64((2*i+1)*c.slot()), Length: uint32(c.size), LKey: c.mr.LKey()}}}
		if c.kind == kindUD {
			wr.AH = c.ahs[i].AV()
			wr.RemoteQPN = c.rem[i].QPN
			wr.RemoteQKey = pingpong.QKey
		}
		if _, err := c.qps[i].PostSend([]roce.SendWR{wr}); err != nil {
			c.t.Fatal(err)
		}
		pendingSend[i], pendingRecv[i] = true, true
	}
	for i := range c.qps {
		send(i)
	}
	wc := make([]roce.WC, 8)
	deadline := time.Now().Add(30 * time.Second)
	for done := 0; done < len(c.qps); {
		n, err := c.cq.Poll(wc)
		if err != nil {
			c.t.Fatal(err)
		}
		if n == 0 {
			if time.Now().After(deadline) {
				c.t.Fatalf("%v pingpong stalled: sent %v received %v", c.kind, sent, rcvd)
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		for _, w := range wc[:n] {
			if w.Status != roce.WCSuccess {
				c.t.Fatalf("completion qp %#x wr %d: %v", w.QPNum, w.WRID, w.Status)
			}
			i := byQPN[w.QPNum]
			if w.Opcode == roce.WCRecv {
				// With an SRQ any slot can take any QP's message: the WRID names the slot.
				rs := int(w.WRID)
				got := c.buf[2*rs*c.slot():][:w.ByteLen]
				if c.kind == kindUD {
					got = got[pingpong.GRH:]
				}
				if len(got) != c.size {
					c.t.Fatalf("qp %d pong %d: %d bytes, want %d", i, rcvd[i], len(got), c.size)
				}
				for j, b := range got {
					if b != byte(sent[i]+i+j) {
						c.t.Fatalf("qp %d pong %d byte %d = %d, want the ping's %d", i, rcvd[i], j, b, byte(sent[i]+i+j))
					}
				}
				rcvd[i]++
				pendingRecv[i] = false
				c.postRecv(rs)
			} else {
				pendingSend[i] = false
			}
			if !pendingSend[i] && !pendingRecv[i] {
				sent[i]++
				if sent[i] == iters {
					done++
				} else {
					send(i)
				}
			}
		}
	}
}

func (c *ppClient) close() {
	for _, qp := range c.qps {
		qp.Close()
	}
	for _, ah := range c.ahs {
		ah.Close()
	}
	if c.srq != nil {
		c.srq.Close()
	}
	c.cq.Close()
	c.mr.Close()
	c.pd.Close()
}

// sendPackets is how many packets and UDP payload bytes one SEND of size bytes takes
// at path MTU mtu: BTH (+DETH for UD), payload, pad, ICRC per packet.
func sendPackets(kind pingpongKind, size, mtu int) (pkts, bytes int) {
	if kind == kindUD {
		return 1, bth.PacketLen(bth.UDSendOnly, size)
	}
	if size <= mtu {
		return 1, bth.PacketLen(bth.RCSendOnly, size)
	}
	for left := size; left > 0; left -= mtu {
		pkts++
		bytes += bth.PacketLen(bth.RCSendMiddle, min(left, mtu))
	}
	return pkts, bytes
}

type counterDelta struct {
	name   string
	labels []string
	want   float64
}

func checkCounters(t *testing.T, mfs map[string]*dto.MetricFamily, want []counterDelta) {
	t.Helper()
	for _, w := range want {
		if got := value(t, mfs, w.name, w.labels...); got != w.want {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.want)
		}
	}
}

// TestPingpongExchange drives each pingpong kind against the daemon with the engine's
// own client and checks that the daemon's counters moved by exactly what crossed the
// wire, as the client device counted it from the other side.
func TestPingpongExchange(t *testing.T) {
	tests := []struct {
		kind         pingpongKind
		nqp          int
		size, iters  int
		wantQPsAfter int
	}{
		{kindRC, 1, 4096, 50, 1},
		{kindRC, 1, 1, 20, 1},
		{kindSRQ, 4, 1000, 20, 4},
		{kindUD, 1, 1024, 30, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/qps=%d/size=%d", tt.kind, tt.nqp, tt.size), func(t *testing.T) {
			addrs := testAddrs(2)
			port := freeUDPPort(t, addrs...)
			tcp := freeTCPAddr(t)
			_, tcpPort, _ := net.SplitHostPort(tcp)
			args := []string{"-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong-idle", "2s"}
			if tt.kind == kindUD {
				args = append(args, "-pingpong=false", "-ud-pingpong-port", tcpPort)
			} else {
				args = append(args, "-ud-pingpong=false", "-pingpong-port", tcpPort)
			}
			p := startDaemon(t, args...)
			dev, err := roce.Open(addrs[1], roce.WithPort(port), roce.WithMTU(roce.MTU1024))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dev.Close() })

			c := newPPClient(t, dev, tt.kind, tt.nqp, tt.size)
			c.exchange(net.JoinHostPort(addrs[0].String(), tcpPort))
			c.run(tt.iters)

			// The client saw its last pong, so every ping and pong has been counted on
			// the daemon; ACKs may still be in flight, so wait for the two views of
			// them to agree.
			cs := dev.Stats()
			var mfs map[string]*dto.MetricFamily
			waitFor(t, "ACK counts to settle", func() bool {
				cs = dev.Stats()
				mfs = p.scrape(t)
				return value(t, mfs, "roce_packets_total", "direction", "rx", "op_class", "ack") == float64(cs.SentPackets[classIndex("ack")]) &&
					value(t, mfs, "roce_packets_total", "direction", "tx", "op_class", "ack") == float64(cs.RcvdPackets[classIndex("ack")])
			})
			pkts, bytes := sendPackets(tt.kind, tt.size, 1024)
			msgs := tt.nqp * tt.iters
			class := "send"
			if tt.kind == kindUD {
				class = "ud_send"
			}
			// A loaded machine can delay an ACK past the 67 ms timeout: each
			// resent packet is one more SEND sent by one side and received by
			// the other (and maybe a duplicate), so the exact counts then hold
			// up to each side's retransmissions, and bytes are not compared.
			daemonRetx := value(t, mfs, "roce_retransmits_total")
			clientRetx := float64(cs.Retransmits)
			want := []counterDelta{
				{"roce_packets_total", []string{"direction", "rx", "op_class", class}, float64(msgs*pkts) + clientRetx},
				{"roce_packets_total", []string{"direction", "tx", "op_class", class}, float64(msgs*pkts) + daemonRetx},
				{"roce_malformed_packets_total", nil, 0},
				{"roce_icrc_errors_total", nil, 0},
				{"roce_unknown_qp_total", nil, 0},
			}
			if daemonRetx+clientRetx == 0 {
				want = append(want,
					counterDelta{"roce_bytes_total", []string{"direction", "rx", "op_class", class}, float64(msgs * bytes)},
					counterDelta{"roce_bytes_total", []string{"direction", "tx", "op_class", class}, float64(msgs * bytes)},
					counterDelta{"roce_timeouts_total", nil, 0},
					counterDelta{"roce_duplicate_requests_total", nil, 0})
			} else {
				t.Logf("%v retransmissions by the daemon, %v by the client: bytes not compared", daemonRetx, clientRetx)
			}
			checkCounters(t, mfs, append(want, []counterDelta{
				{"roce_queue_pairs", []string{"state", "rts"}, float64(tt.wantQPsAfter)},
				{"roce_pingpong_active_sessions", []string{"kind", tt.kind.String()}, 1},
				{"roce_pingpong_sessions_total", []string{"kind", tt.kind.String()}, 1},
				{"roce_pingpong_messages_total", []string{"kind", tt.kind.String()}, float64(msgs)},
				{"roce_pingpong_exchange_errors_total", nil, 0},
			}...))
			if tt.kind != kindUD {
				// Every pong is an RC request the daemon times until its ACK.
				if n := mfs["roce_ack_latency_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); n == 0 || n > uint64(msgs) {
					t.Errorf("ACK latency samples = %d, want 1..%d", n, msgs)
				}
			}
			// The client's own device saw the same traffic from the other side.
			if got, want := cs.RcvdPackets[classIndex(class)], uint64(float64(msgs*pkts)+daemonRetx); got != want {
				t.Errorf("client received %d %s packets, want %d", got, class, want)
			}

			// /debug/qps lists the session's QPs with the client as the peer.
			_, body := httpGet(t, "http://"+p.metrics+"/debug/qps")
			var rows []devapi.QP
			if err := json.Unmarshal(body, &rows); err != nil {
				t.Fatalf("/debug/qps: %v: %s", err, body)
			}
			if len(rows) != tt.nqp {
				t.Fatalf("/debug/qps has %d QPs, want %d: %s", len(rows), tt.nqp, body)
			}
			for _, r := range rows {
				if r.State != "RTS" || r.RxPackets == 0 || (tt.kind != kindUD && r.Peer != addrs[1].String()) {
					t.Errorf("/debug/qps row %+v", r)
				}
			}

			// After -pingpong-idle the session ends and its QPs are destroyed.
			waitFor(t, "the idle session to end", func() bool {
				m := p.scrape(t)
				return value(t, m, "roce_queue_pairs", "state", "rts") == 0 && value(t, m, "roce_queue_pairs", "state", "err") == 0 &&
					value(t, m, "roce_pingpong_active_sessions", "kind", tt.kind.String()) == 0 &&
					value(t, m, "roce_pingpong_session_ends_total", "kind", tt.kind.String(), "reason", "idle") == 1
			})
		})
	}
}

func classIndex(name string) int {
	for i, n := range []string{"send", "write", "read_request", "read_response", "atomic", "atomic_ack", "ack", "ud_send", "cnp", "other"} {
		if n == name {
			return i
		}
	}
	panic(name)
}

// TestPingpongConcurrentSessions: several clients at once, each with its own QP, all
// complete, and the sessions are independent.
func TestPingpongConcurrentSessions(t *testing.T) {
	const clients, iters, size = 4, 20, 2048
	addrs := testAddrs(1 + clients)
	port := freeUDPPort(t, addrs...)
	tcp := freeTCPAddr(t)
	_, tcpPort, _ := net.SplitHostPort(tcp)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-ud-pingpong=false", "-pingpong-port", tcpPort)

	var wg sync.WaitGroup
	var devs []*roce.Device
	for i := range clients {
		dev, err := roce.Open(addrs[1+i], roce.WithPort(port), roce.WithMTU(roce.MTU1024))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		devs = append(devs, dev)
		c := newPPClient(t, dev, kindRC, 1, size)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.exchange(net.JoinHostPort(addrs[0].String(), tcpPort))
			c.run(iters)
		}()
	}
	wg.Wait()
	mfs := p.scrape(t)
	pkts, _ := sendPackets(kindRC, size, 1024)
	// A loaded machine can delay an ACK past the 67 ms timeout: each resent
	// packet is one more SEND received (the clients') or sent (roced's).
	var clientRetx uint64
	for _, d := range devs {
		clientRetx += d.Stats().Retransmits
	}
	checkCounters(t, mfs, []counterDelta{
		{"roce_packets_total", []string{"direction", "rx", "op_class", "send"}, float64(clients*iters*pkts) + float64(clientRetx)},
		{"roce_packets_total", []string{"direction", "tx", "op_class", "send"}, float64(clients*iters*pkts) + value(t, mfs, "roce_retransmits_total")},
		{"roce_queue_pairs", []string{"state", "rts"}, clients},
	})
}

// TestShutdownWithSessions: SIGTERM with a session open exits 0 promptly.
func TestShutdownWithSessions(t *testing.T) {
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	tcp := freeTCPAddr(t)
	_, tcpPort, _ := net.SplitHostPort(tcp)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-ud-pingpong=false", "-pingpong-port", tcpPort)
	dev, err := roce.Open(addrs[1], roce.WithPort(port), roce.WithMTU(roce.MTU1024))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	c := newPPClient(t, dev, kindRC, 1, 64)
	c.exchange(net.JoinHostPort(addrs[0].String(), tcpPort))
	c.run(3)
	code, took := p.stop(10 * time.Second)
	if code != 0 {
		t.Errorf("exit code %d, want 0; stderr:\n%s", code, p.stderr.String())
	}
	// Promptly: the session is ended, not waited for until the drain deadline.
	if took >= defaultDrainTimeout {
		t.Errorf("shutdown with an open session took %v, the whole -drain-timeout (%v)", took, defaultDrainTimeout)
	}
}

// TestPingpongBadExchange: a client that sends garbage instead of a record is counted
// and dropped, and the responder keeps serving real clients.
func TestPingpongBadExchange(t *testing.T) {
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	tcp := freeTCPAddr(t)
	_, tcpPort, _ := net.SplitHostPort(tcp)
	srv := net.JoinHostPort(addrs[0].String(), tcpPort)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-ud-pingpong=false", "-pingpong-port", tcpPort)

	for _, junk := range []string{
		strings.Repeat("z", oob.RecordLen),                     // not hex
		"0000:000011:000022:" + strings.Repeat("0", 32) + "\n", // 52 bytes, but a newline where the NUL goes
		"short", // then EOF
	} {
		conn, err := net.Dial("tcp", srv)
		if err != nil {
			t.Fatal(err)
		}
		conn.Write([]byte(junk))
		conn.(*net.TCPConn).CloseWrite()
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, _ := io.ReadAll(conn); len(n) != 0 {
			t.Errorf("responder answered junk %q with %q", junk, n)
		}
		conn.Close()
	}
	waitFor(t, "3 exchange errors", func() bool {
		return value(t, p.scrape(t), "roce_pingpong_exchange_errors_total") == 3
	})

	dev, err := roce.Open(addrs[1], roce.WithPort(port), roce.WithMTU(roce.MTU1024))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	c := newPPClient(t, dev, kindRC, 1, 100)
	c.exchange(srv)
	c.run(5)
	if v := value(t, p.scrape(t), "roce_queue_pairs", "state", "rts"); v != 1 {
		t.Errorf("roce_queue_pairs{rts} = %v after the good client, want 1 (the junk sessions left QPs behind?)", v)
	}
}

// TestBadICRCToLiveQP: packets for a live QP with a wrong ICRC are counted as ICRC
// errors and dropped; the session carries on undisturbed.
func TestBadICRCToLiveQP(t *testing.T) {
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	_, tcpPort, _ := net.SplitHostPort(freeTCPAddr(t))
	srv := net.JoinHostPort(addrs[0].String(), tcpPort)
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-ud-pingpong=false", "-pingpong-port", tcpPort)
	dev, err := roce.Open(addrs[1], roce.WithPort(port), roce.WithMTU(roce.MTU1024))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	c := newPPClient(t, dev, kindRC, 1, 256)
	c.exchange(srv)
	c.run(5)

	// The ICRC is checked before anything in the packet is acted on, so the forged
	// packets come from a third address of the same /24.
	const n = 25
	pkts := make([][]byte, n)
	for i := range pkts {
		f := bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: c.rem[0].QPN, PSN: bth.PSN(i), AckReq: true}
		b := bth.Append(nil, &f, make([]byte, 64))
		b[len(b)-1] ^= 0xff // whatever the right ICRC is, this is not it
		pkts[i] = b
	}
	third := netip.AddrFrom4([4]byte{127, addrs[0].As4()[1], addrs[0].As4()[2], 200})
	sendDatagrams(t, third, netip.AddrPortFrom(addrs[0], port), pkts)
	waitFor(t, "25 ICRC errors", func() bool {
		return value(t, p.scrape(t), "roce_icrc_errors_total") == n
	})
	c.run(5)
	mfs := p.scrape(t)
	checkCounters(t, mfs, []counterDelta{
		{"roce_icrc_errors_total", nil, n},
		{"roce_duplicate_requests_total", nil, 0},
		{"roce_out_of_sequence_total", nil, 0},
		{"roce_naks_total", []string{"direction", "tx", "kind", "psn_sequence_error"}, 0},
		{"roce_pingpong_messages_total", []string{"kind", "rc"}, 10},
	})
}

// TestPingpongKindSwitchedOff: rc and srq pingpong share the TCP port (as the stock
// tools do) but are switched separately: a client of the kind switched off is told
// apart, refused (its exchange fails) and counted, and the other kind still works.
func TestPingpongKindSwitchedOff(t *testing.T) {
	for _, tc := range []struct {
		off, on pingpongKind
		flag    string
	}{
		{kindSRQ, kindRC, "-srq-pingpong=false"},
		{kindRC, kindSRQ, "-pingpong=false"},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			addrs := testAddrs(2)
			port := freeUDPPort(t, addrs...)
			tcp := freeTCPAddr(t)
			_, tcpPort, _ := net.SplitHostPort(tcp)
			p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-ud-pingpong=false",
				"-pingpong-port", tcpPort, tc.flag)
			srv := net.JoinHostPort(addrs[0].String(), tcpPort)
			dev, err := roce.Open(addrs[1], roce.WithPort(port), roce.WithMTU(roce.MTU1024))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { dev.Close() })

			// The switched-off kind: the daemon closes the connection without a reply.
			n, nqp := 1, 1
			if tc.off == kindSRQ {
				n, nqp = oob.SRQRecords, 4
			}
			local := make([]oob.Dest, nqp)
			for i := range local {
				local[i] = oob.Dest{QPN: uint32(0x100 + i), PSN: 1, GID: dev.GID()}
			}
			conn, err := net.Dial("tcp", srv)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = oob.ClientExchange(ctx, conn, local, n)
			cancel()
			conn.Close()
			if err == nil {
				t.Fatalf("%v client completed its exchange with %s", tc.off, tc.flag)
			}
			waitFor(t, "one refused session", func() bool {
				return value(t, p.scrape(t), "roce_pingpong_refused_total", "reason", "kind") == 1
			})

			// The kind still on works.
			nqp = 1
			if tc.on == kindSRQ {
				nqp = 4
			}
			c := newPPClient(t, dev, tc.on, nqp, 100)
			c.exchange(srv)
			c.run(5)
		})
	}
}
