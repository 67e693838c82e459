package interop

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/cm/mcast"
	"github.com/goroce/goroce/interop/labtest"
	"github.com/goroce/goroce/roce"
)

// The stock rdmacm-utils examples udaddy (UD over SIDR, rdma_cm port space UDP) and
// ucmatose (RC over REQ/REP/RTU) run as clients in guest a against goroce's CM on the
// host side of the bridge. The goroce side is this test binary itself, re-executed in
// the lab namespace with $GOROCE_CMPEER naming the role (see init below): the engine
// must bind 198.18.0.1, which only exists inside the namespace.

// cmtoolCount and cmtoolSize are -C and -S of both tools (their defaults, made explicit).
const (
	cmtoolCount = 10
	cmtoolSize  = 100
)

// Well-known ports of the tools (udaddy.c, cmatose.c: "7174" and "7471").
const (
	udaddyPort   = 7174
	ucmatosePort = 7471
)

// cmPeerReady is the line the peer prints once its CM listens.
const cmPeerReady = "cmpeer: listening"

func init() {
	if role := os.Getenv("GOROCE_CMPEER"); role != "" {
		if err := runCMPeer(role); err != nil {
			fmt.Fprintf(os.Stderr, "cmpeer %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// TestUdaddy runs stock `udaddy -s HOST` in guest a against a goroce SIDR server: the
// client resolves port 7174 through SIDR_REQ/SIDR_REP, SENDs cmtoolCount messages
// with immediate data (its QPN) to the QPN and Q_Key of the SIDR_REP, and waits for as
// many replies, which goroce sends back to the QPN carried in the immediate data.
func TestUdaddy(t *testing.T) {
	runCMTool(t, "udaddy", "udaddy -s %s -C %d -S %d", "UD (SIDR)", cmtoolCount+1)
}

// TestUcmatose runs stock `ucmatose -s HOST` in guest a against a goroce RC server:
// REQ/REP/RTU, goroce SENDs cmtoolCount messages, the client answers with as many,
// then goroce disconnects (DREQ/DREP) and the client exits on DISCONNECTED.
func TestUcmatose(t *testing.T) {
	runCMTool(t, "ucmatose", "ucmatose -s %s -C %d -S %d", "RC (rdma_cm)", cmtoolCount+3)
}

// runCMTool runs the goroce peer for role and the stock client (clientFmt takes the
// host address, -C and -S), checks both exit 0 and report every message, and that rxe
// counted no error and received at least minRcvd packets: the SIDR_REP and the
// replies (UD), or REP, DREQ, the SENDs and at least one ACK (RC).
func runCMTool(t *testing.T, role, clientFmt, transportName string, minRcvd uint64) {
	lab := labtest.Open(t)
	g := lab.Guest(t, "a")
	host := lab.HostIP.String()
	var ours string
	var took time.Duration
	var rxe labtest.Counters
	defer func() { recordCMTool(t, role, transportName, took, rxe, ours) }()
	defer rpingCapture(t, lab, t.Name())()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	chk := startRpingCheck(ctx, t, g)

	peer := startGoPeer(ctx, t, lab, cmPeerReady, "GOROCE_CMPEER="+role, "GOROCE_CMPEER_ADDR="+host,
		"GOROCE_CMPEER_COUNT="+strconv.Itoa(cmtoolCount), "GOROCE_CMPEER_SIZE="+strconv.Itoa(cmtoolSize))

	start := time.Now()
	res, err := g.Run(ctx, fmt.Sprintf(clientFmt, host, cmtoolCount, cmtoolSize)+" 2>&1")
	took = time.Since(start)
	if err != nil {
		t.Errorf("stock %s client: %v", role, err)
	}
	if res.RC != 0 || !strings.Contains(res.Out, "return status 0") {
		t.Errorf("stock %s client exit %d:\n%s", role, res.RC, tail(res.Out, 15))
	}
	rc, killed := peer.wait(20 * time.Second)
	if killed {
		t.Errorf("goroce %s peer still running 20 s after the client ended; killed", role)
	}
	out := peer.out.String()
	if rc != 0 {
		t.Errorf("goroce %s peer exit %d:\n%s\n%s", role, rc, tail(out, 10), peer.errs.String())
	}
	for _, want := range []string{fmt.Sprintf("received %d", cmtoolCount), fmt.Sprintf("sent %d", cmtoolCount)} {
		if !strings.Contains(out, want) {
			t.Errorf("goroce %s peer did not report %q:\n%s", role, want, out)
		}
	}
	t.Logf("stock %s client: %v\n%s", role, took, tail(res.Out, 8))
	t.Logf("goroce peer:\n%s", strings.TrimSpace(out))

	d := chk.finishCounters(ctx, t)
	if d["rcvd_pkts"] < minRcvd {
		t.Errorf("rxe rcvd_pkts=%d, want at least %d", d["rcvd_pkts"], minRcvd)
	}
	t.Logf("rxe: %v", d)
	rxe = d
	for _, l := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(l, "goroce: "); ok {
			ours = s
		}
	}
}

// recordCMTool appends the run's row to $GOROCE_INTEROP_RESULTS, in the pingpong rows'
// columns.
func recordCMTool(t *testing.T, role, transportName string, took time.Duration, rxe labtest.Counters, ours string) {
	appendResult(t, resultRow{tool: role, dir: "rxe " + role + " client -> goroce CM server", transport: transportName,
		opts: fmt.Sprintf("-C %d -S %d", cmtoolCount, cmtoolSize), usec: float64(took.Microseconds()) / cmtoolCount,
		counters: rxe.String() + " | goroce: " + ours})
}

// runCMPeer is the goroce side of TestUdaddy ("udaddy"), TestUcmatose
// ("ucmatose"), TestCmtime ("cmtime") and TestMckey, run in the lab namespace.
func runCMPeer(role string) error {
	addr, err := netip.ParseAddr(os.Getenv("GOROCE_CMPEER_ADDR"))
	if err != nil {
		return err
	}
	count, err := strconv.Atoi(os.Getenv("GOROCE_CMPEER_COUNT"))
	if err != nil || count < 1 {
		return fmt.Errorf("bad GOROCE_CMPEER_COUNT: %v", err)
	}
	size, err := strconv.Atoi(os.Getenv("GOROCE_CMPEER_SIZE"))
	if err != nil || size < 1 {
		return fmt.Errorf("bad GOROCE_CMPEER_SIZE: %v", err)
	}
	timeout := 50 * time.Second
	if role == "cmtime" {
		timeout = 4 * time.Minute // three runs of cmtimeConns connections from a TCG guest
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dev, mads, err := gsi.Open(addr, 0)
	if err != nil {
		return err
	}
	defer dev.Close()
	mg := cm.NewManager(mads, cm.ManagerConfig{})
	defer mg.Close()
	switch role {
	case "udaddy":
		err = udaddyServer(ctx, dev, mg, count, size)
	case "ucmatose":
		err = ucmatoseServer(ctx, dev, mg, count, size)
	case "cmtime":
		err = cmtimeServer(ctx, dev, mg, count, os.Getenv("GOROCE_CMPEER_OOB") == "1")
	case "mckey-recv", "mckey-send":
		// mckeyPeer checks the counters itself while its QPs are still
		// members. After it leaves, a datagram to the group still queued on
		// the group's socket is one no QP may take, dropped as unknown_qp
		// as it should be: a sender's own datagrams, looped back by the
		// kernel (IP_MULTICAST_LOOP) to its group socket, are such when
		// their reader runs after the leave.
		return mckeyPeer(ctx, dev, role == "mckey-send", os.Getenv("GOROCE_CMPEER_GROUP"), count, size, nil)
	default:
		err = fmt.Errorf("unknown role")
	}
	if err != nil {
		return err
	}
	return checkPeerStats(dev.Stats())
}

// checkPeerStats fails on any engine error counter and prints the packet totals.
func checkPeerStats(s roce.Stats) error {
	var sent, rcvd uint64
	for i := range s.SentPackets {
		sent += s.SentPackets[i]
		rcvd += s.RcvdPackets[i]
	}
	fmt.Printf("goroce: sent_pkts=%d rcvd_pkts=%d\n", sent, rcvd)
	for _, c := range []struct {
		name string
		v    uint64
	}{
		{"icrc_errors", s.ICRCErrors}, {"malformed", s.Malformed}, {"unknown_qp", s.UnknownQP},
		{"bad_pkey", s.BadPKey}, {"bad_qkey", s.BadQKey}, {"bad_source", s.BadSource},
		{"retry_exceeded", s.RetryExceeded}, {"rnr_retry_exceeded", s.RNRRetryExceeded},
		{"tx_errors", s.TxErrors}, {"cq_overruns", s.CQOverruns},
	} {
		if c.v != 0 {
			return fmt.Errorf("engine counter %s=%d", c.name, c.v)
		}
	}
	return nil
}

// peerVerbs holds one side's verbs objects: a CQ for sends and receives, and one
// buffer per receive (size+40 for UD's GRH) followed by the send buffer.
type peerVerbs struct {
	pd   *roce.PD
	cq   *roce.CQ
	qp   *roce.QP
	mr   *roce.MR
	mem  []byte
	slot int
}

func newPeerVerbs(dev *roce.Device, typ roce.QPType, count, size int) (*peerVerbs, error) {
	v := &peerVerbs{slot: size + 40}
	var err error
	if v.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if v.cq, err = dev.CreateCQ(2 * count); err != nil {
		v.close()
		return nil, err
	}
	v.qp, err = v.pd.CreateQP(roce.QPInitAttr{Type: typ, SendCQ: v.cq, RecvCQ: v.cq,
		Cap: roce.QPCap{MaxSendWR: uint32(count), MaxRecvWR: uint32(count), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		v.close()
		return nil, err
	}
	v.mem = make([]byte, (count+1)*v.slot)
	for i := range size {
		v.mem[count*v.slot+i] = byte('a' + i%26)
	}
	if v.mr, err = v.pd.RegMR(v.mem, roce.AccessLocalWrite); err != nil {
		v.close()
		return nil, err
	}
	return v, nil
}

func (v *peerVerbs) close() {
	if v.qp != nil {
		v.qp.Close()
	}
	if v.mr != nil {
		v.mr.Close()
	}
	if v.cq != nil {
		v.cq.Close()
	}
	if v.pd != nil {
		v.pd.Close()
	}
}

// postRecvs posts count receives, one buffer slot each.
func (v *peerVerbs) postRecvs(count int) error {
	for i := range count {
		_, err := v.qp.PostRecv([]roce.RecvWR{{WRID: uint64(i), SGL: []roce.SGE{{Addr: v.mr.Addr() + uint64(i*v.slot),
			Length: uint32(v.slot), LKey: v.mr.LKey()}}}})
		if err != nil {
			return err
		}
	}
	return nil
}

// sendWR is a signaled SEND of the send buffer's first size bytes.
func (v *peerVerbs) sendWR(count, size int) roce.SendWR {
	return roce.SendWR{WRID: 1 << 32, Opcode: roce.WRSend, Flags: roce.SendSignaled,
		SGL: []roce.SGE{{Addr: v.mr.Addr() + uint64(count*v.slot), Length: uint32(size), LKey: v.mr.LKey()}}}
}

// poll returns the next n successful completions, or the first failed one as an error.
func (v *peerVerbs) poll(ctx context.Context, n int) ([]roce.WC, error) {
	var got []roce.WC
	var wc [8]roce.WC
	armed := false
	for len(got) < n {
		k, err := v.cq.Poll(wc[:min(len(wc), n-len(got))])
		if err != nil {
			return got, err
		}
		for _, w := range wc[:k] {
			if w.Status != roce.WCSuccess {
				return got, fmt.Errorf("completion wr %#x opcode %v status %d", w.WRID, w.Opcode, w.Status)
			}
			got = append(got, w)
		}
		switch {
		case k > 0:
			armed = false
		case !armed:
			// Arm, then poll once more: a completion may have landed in between.
			if err := v.cq.ReqNotify(false); err != nil {
				return got, err
			}
			armed = true
		default:
			select {
			case <-v.cq.Notify():
				armed = false
			case <-ctx.Done():
				return got, fmt.Errorf("%d of %d completions: %w", len(got), n, ctx.Err())
			}
		}
	}
	return got, nil
}

// udaddyServer is `udaddy` (server) for one SIDR request: a UD QP with rdma_cm's
// Q_Key, count receives posted before SIDR_REP, then as many SEND_WITH_IMM replies to
// the QPN each client message carries in its immediate data.
func udaddyServer(ctx context.Context, dev *roce.Device, mg *cm.Manager, count, size int) error {
	l, err := mg.ListenUD(netip.AddrPortFrom(dev.Addr(), udaddyPort), 0)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Println(cmPeerReady)
	req, err := l.GetRequest(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("SIDR request from %v\n", req.Remote)
	v, err := newPeerVerbs(dev, roce.QPTypeUD, count, size)
	if err != nil {
		req.Reject(nil)
		return err
	}
	defer v.close()
	err = v.qp.Connect(&roce.ConnectAttr{QKey: cm.UDPQKey, SQPSN: cm.RandomPSN()})
	if err == nil {
		err = v.postRecvs(count)
	}
	if err != nil {
		req.Reject(nil)
		return err
	}
	if err := req.Accept(v.qp.QPN(), cm.UDPQKey, nil); err != nil {
		return err
	}
	wcs, err := v.poll(ctx, count)
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	var srcQP uint32
	for i, w := range wcs {
		switch {
		case w.Opcode != roce.WCRecv || w.Flags&roce.WCWithImm == 0 || w.Flags&roce.WCGRH == 0:
			return fmt.Errorf("message %d: completion %+v, want a RECV with GRH and immediate data", i, w)
		case w.ByteLen != uint32(40+size):
			return fmt.Errorf("message %d: %d bytes, want %d (GRH + %d)", i, w.ByteLen, 40+size, size)
		case w.ImmData != w.SrcQP:
			return fmt.Errorf("message %d: immediate data %#x, source QP %#x", i, w.ImmData, w.SrcQP)
		case i > 0 && w.SrcQP != srcQP:
			return fmt.Errorf("message %d from QP %#x, earlier ones from %#x", i, w.SrcQP, srcQP)
		}
		srcQP = w.SrcQP
	}
	fmt.Printf("received %d messages from QP %#x\n", len(wcs), srcQP)
	ah, err := v.pd.CreateAH(roce.AHAttr{DGID: req.Remote.Addr(), SGIDIndex: uint8(dev.GIDIndex()), HopLimit: 64, IsGlobal: true})
	if err != nil {
		return err
	}
	defer ah.Close()
	wr := v.sendWR(count, size)
	wr.Opcode, wr.Imm = roce.WRSendWithImm, v.qp.QPN()
	wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah.AV(), srcQP, cm.UDPQKey
	for range count {
		if _, err := v.qp.PostSend([]roce.SendWR{wr}); err != nil {
			return err
		}
	}
	if wcs, err = v.poll(ctx, count); err != nil {
		return fmt.Errorf("send: %w", err)
	}
	fmt.Printf("sent %d messages\n", len(wcs))
	return nil
}

// ucmatoseServer is `ucmatose` (server) for one connection: an RC QP with count
// receives posted before REP; after RTU it SENDs count messages, waits for the
// client's count replies, then disconnects.
func ucmatoseServer(ctx context.Context, dev *roce.Device, mg *cm.Manager, count, size int) error {
	l, err := mg.Listen(netip.AddrPortFrom(dev.Addr(), ucmatosePort), 0)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Println(cmPeerReady)
	req, err := l.GetRequest(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("connection request from %v\n", req.Remote)
	v, err := newPeerVerbs(dev, roce.QPTypeRC, count, size)
	if err != nil {
		req.Reject(nil)
		return err
	}
	defer v.close()
	err = v.qp.Init(&roce.ConnectAttr{AccessFlags: roce.AccessLocalWrite})
	if err == nil {
		err = v.postRecvs(count)
	}
	if err != nil {
		req.Reject(nil)
		return err
	}
	ready := func(q cm.QPParams) error {
		a := gsi.ConnectAttr(q, dev.GIDIndex(), roce.AccessLocalWrite)
		return v.qp.Connect(&a)
	}
	// cmatose's rdma_accept parameters: 1/1 READs, retry 7 (rnr 7).
	conn, err := req.Accept(ctx, cm.ConnParam{QPN: v.qp.QPN(), StartingPSN: cm.RandomPSN(), ResponderResources: 1,
		InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, Ready: ready})
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	fmt.Println("established")
	wr := v.sendWR(count, size)
	for range count {
		if _, err := v.qp.PostSend([]roce.SendWR{wr}); err != nil {
			return err
		}
	}
	wcs, err := v.poll(ctx, 2*count)
	if err != nil {
		return err
	}
	var sent, rcvd int
	for i, w := range wcs {
		switch {
		case w.Opcode == roce.WCSend:
			sent++
		case w.Opcode == roce.WCRecv && w.ByteLen == uint32(size):
			rcvd++
		default:
			return fmt.Errorf("completion %d: %+v", i, w)
		}
	}
	fmt.Printf("sent %d messages\nreceived %d messages\n", sent, rcvd)
	if sent != count || rcvd != count {
		return errors.New("wrong completion counts")
	}
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := conn.Disconnect(dctx); err != nil {
		return fmt.Errorf("disconnect: %w", err)
	}
	fmt.Println("disconnected")
	return nil
}

// mckeyCount and mckeySize are mckey's -C and -S (its defaults, made explicit);
// mckeyQPs is the receiver's -c: that many rdma_cm ids, each with a UD QP attached
// to the group, each of which must receive every datagram.
const (
	mckeyCount = 10
	mckeySize  = 100
	mckeyQPs   = 2
)

// TestMckey runs rdmacm-utils' mckey (UD multicast through rdma_join_multicast: on
// RoCE no SA, the MGID is the IPv4-mapped group address and the kernel sends the IGMP
// join) between the lane's guests, a receiver with mckeyQPs QPs attached to the group
// and a sender, and checks every QP received every datagram; then goroce (cm/mcast's
// join) as the sender to a stock receiver and as a receiver with mckeyQPs QPs of a
// stock sender.
func TestMckey(t *testing.T) {
	lab := labtest.Open(t)
	a, b := lab.Guest(t, "a"), lab.Guest(t, "b")
	// One group per lane, inside the organisation-local scope 239/8.
	group := fmt.Sprintf("239.18.%d.1", lab.HostIP.As4()[2])
	row := func(dir string) resultRow {
		return resultRow{tool: "mckey", dir: dir, transport: "UD multicast (rdma_cm)",
			opts: fmt.Sprintf("-m %s -C %d -S %d, receiver -c %d", group, mckeyCount, mckeySize, mckeyQPs)}
	}
	t.Run("rxe-to-rxe", func(t *testing.T) {
		r := row("rxe sender (guest b) -> rxe receiver (guest a)")
		defer func() { appendResult(t, r) }()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		chk := startRpingCheck(ctx, t, a)
		recv, err := a.Start(ctx, fmt.Sprintf("mckey -m %s -b %s -c %d -C %d -S %d 2>&1", group, a.IP, mckeyQPs, mckeyCount, mckeySize))
		if err != nil {
			t.Fatal(err)
		}
		waitMckeyJoined(ctx, t, a, group, mckeyQPs)
		start := time.Now()
		send, err := b.Run(ctx, mckeySender(fmt.Sprintf("-m %s -b %s -s -C %d -S %d", group, b.IP, mckeyCount, mckeySize)))
		if err != nil {
			t.Fatal(err)
		}
		rres, err := waitJob(recv, 20*time.Second)
		if err != nil {
			t.Errorf("receiver: %v", err)
		}
		r.usec = float64(time.Since(start).Microseconds()) / mckeyCount
		checkMckey(t, "sender (guest b)", send, 1)
		checkMckey(t, "receiver (guest a)", rres, mckeyQPs)
		d := chk.finishCounters(ctx, t)
		checkMckeyReceiverCounters(t, d)
		r.counters = "guest a: " + d.String()
		if !t.Failed() {
			r.verdict = "pass"
		}
	})
	t.Run("ours-to-rxe", func(t *testing.T) {
		r := row("goroce sender -> rxe receiver (guest a)")
		defer func() { appendResult(t, r) }()
		defer rpingCapture(t, lab, t.Name())()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		chk := startRpingCheck(ctx, t, a)
		recv, err := a.Start(ctx, fmt.Sprintf("mckey -m %s -b %s -c %d -C %d -S %d 2>&1", group, a.IP, mckeyQPs, mckeyCount, mckeySize))
		if err != nil {
			t.Fatal(err)
		}
		waitMckeyJoined(ctx, t, a, group, mckeyQPs)
		start := time.Now()
		peer := startGoPeer(ctx, t, lab, "", mckeyPeerEnv(lab, "mckey-send", group)...)
		rc, killed := peer.wait(30 * time.Second)
		out := peer.out.String()
		if rc != 0 || killed || !strings.Contains(out, fmt.Sprintf("sent %d", mckeyCount)) {
			t.Errorf("goroce sender: exit %d (killed %v):\n%s%s", rc, killed, out, peer.errs.String())
		}
		rres, err := waitJob(recv, 20*time.Second)
		if err != nil {
			t.Errorf("receiver: %v", err)
		}
		r.usec = float64(time.Since(start).Microseconds()) / mckeyCount
		checkMckey(t, "receiver (guest a)", rres, mckeyQPs)
		d := chk.finishCounters(ctx, t)
		checkMckeyReceiverCounters(t, d)
		r.counters = "guest a: " + d.String() + " | " + goroceLine(out)
		if !t.Failed() {
			r.verdict = "pass"
		}
	})
	t.Run("rxe-to-ours", func(t *testing.T) {
		r := row("rxe sender (guest a) -> goroce receiver")
		defer func() { appendResult(t, r) }()
		defer rpingCapture(t, lab, t.Name())()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		chk := startRpingCheck(ctx, t, a)
		peer := startGoPeer(ctx, t, lab, cmPeerReady, mckeyPeerEnv(lab, "mckey-recv", group)...)
		start := time.Now()
		send, err := a.Run(ctx, mckeySender(fmt.Sprintf("-m %s -b %s -s -C %d -S %d", group, a.IP, mckeyCount, mckeySize)))
		if err != nil {
			t.Fatal(err)
		}
		rc, killed := peer.wait(20 * time.Second)
		r.usec = float64(time.Since(start).Microseconds()) / mckeyCount
		checkMckey(t, "sender (guest a)", send, 1)
		out := peer.out.String()
		want := fmt.Sprintf("received %d on each of %d QPs", mckeyCount, mckeyQPs)
		if rc != 0 || killed || !strings.Contains(out, want) {
			t.Errorf("goroce receiver: exit %d (killed %v), want 0 and %q:\n%s%s", rc, killed, want, out, peer.errs.String())
		}
		d := chk.finishCounters(ctx, t)
		if d["sent_pkts"] < mckeyCount {
			t.Errorf("guest a: sent_pkts=%d, want at least %d", d["sent_pkts"], mckeyCount)
		}
		r.counters = "guest a: " + d.String() + " | " + goroceLine(out)
		if !t.Failed() {
			r.verdict = "pass"
		}
	})
}

// goroceLine returns the "goroce: ..." counters line a peer printed.
func goroceLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "goroce: ") {
			return l
		}
	}
	return "goroce: -"
}

// mckeyPeerEnv is the environment of a goroce mckey peer in role.
func mckeyPeerEnv(lab *labtest.Lab, role, group string) []string {
	return []string{"GOROCE_CMPEER=" + role, "GOROCE_CMPEER_ADDR=" + lab.HostIP.String(), "GOROCE_CMPEER_GROUP=" + group,
		"GOROCE_CMPEER_COUNT=" + strconv.Itoa(mckeyCount), "GOROCE_CMPEER_SIZE=" + strconv.Itoa(mckeySize)}
}

// mckeyPeer is mckey on goroce, with rdma_cm's join (cm/mcast): as a receiver, mckeyQPs UD
// QPs each joined to group, each of which must receive count datagrams of size bytes; as a
// sender, one joined QP that sends count datagrams to the group and waits for their
// completions (mckey does not) before it leaves. A receiver calls joined, if set, once
// every QP has joined.
func mckeyPeer(ctx context.Context, dev *roce.Device, send bool, group string, count, size int, joined func()) error {
	g, err := netip.ParseAddr(group)
	if err != nil {
		return err
	}
	qps := mckeyQPs
	if send {
		qps = 1
	}
	var vs []*peerVerbs
	defer func() {
		for _, v := range vs {
			v.close()
		}
	}()
	for range qps {
		v, err := newPeerVerbs(dev, roce.QPTypeUD, count, size)
		if err != nil {
			return err
		}
		vs = append(vs, v)
		if err := v.qp.Connect(&roce.ConnectAttr{QKey: cm.UDPQKey, SQPSN: cm.RandomPSN()}); err != nil {
			return err
		}
		if !send {
			if err := v.postRecvs(count); err != nil {
				return err
			}
		}
		m, err := mcast.Join(v.qp, g, mcast.FullMember)
		if err != nil {
			return err
		}
		defer m.Leave()
		if send {
			ah, err := v.pd.CreateAH(m.AHAttr())
			if err != nil {
				return err
			}
			defer ah.Close()
			wr := v.sendWR(count, size)
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah.AV(), m.RemoteQPN(), m.QKey()
			for range count {
				if _, err := v.qp.PostSend([]roce.SendWR{wr}); err != nil {
					return err
				}
			}
			if _, err := v.poll(ctx, count); err != nil {
				return fmt.Errorf("send: %w", err)
			}
			fmt.Printf("sent %d datagrams to %v\n", count, g)
			return checkPeerStats(dev.Stats())
		}
	}
	fmt.Println(cmPeerReady)
	if joined != nil {
		joined()
	}
	for i, v := range vs {
		wcs, err := v.poll(ctx, count)
		if err != nil {
			return fmt.Errorf("QP %d: %w", i, err)
		}
		for _, w := range wcs {
			if w.Opcode != roce.WCRecv || w.ByteLen != uint32(40+size) || w.Flags&roce.WCGRH == 0 {
				return fmt.Errorf("QP %d: completion %+v, want a RECV of GRH + %d bytes", i, w, size)
			}
		}
	}
	fmt.Printf("received %d on each of %d QPs\n", count, len(vs))
	return checkPeerStats(dev.Stats())
}

// mckeySender is the guest command line of an mckey sender with args. mckey posts its
// SENDs unsignaled and leaves the group at once; 6.12's rxe sends a user QP's work
// requests from a work queue, so without linger.so (interop/verbs-probe/linger.c),
// which holds rdma_leave_multicast a second, most were flushed unsent.
func mckeySender(args string) string {
	return "LD_PRELOAD=/usr/lib/goroce/linger.so mckey " + args + " 2>&1"
}

// waitMckeyJoined waits until every one of a stock mckey receiver's QPs in guest g has
// joined group: the guest kernel's rdma_cm adds an IGMP membership for each join of a
// RoCEv2 id (/proc/net/igmp counts them as the group's users), and the receiver
// attaches the QP as it takes the join's event, before its first receive could be
// missed by a sender that starts after this returns. mckey's stdout is a pipe, fully
// buffered, so its "joined" lines come only at exit.
func waitMckeyJoined(ctx context.Context, t *testing.T, g *labtest.Guest, group string, joins int) {
	t.Helper()
	ip := netip.MustParseAddr(group).As4()
	want := fmt.Sprintf("%08X", binary.LittleEndian.Uint32(ip[:])) // the kernel prints the __be32 as a host-order word
	users := -1
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		r, err := g.Run(ctx, "cat /proc/net/igmp")
		if err != nil {
			t.Fatalf("guest %s: /proc/net/igmp: %v", g.Name, err)
		}
		users = igmpUsers(r.Out, want)
		if users >= joins {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("guest %s: %d of %d joins of %s: %v", g.Name, max(users, 0), joins, group, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	t.Fatalf("guest %s: %d of %d joins of %s within 20 s", g.Name, max(users, 0), joins, group)
}

// igmpUsers is the users count of a group (as /proc/net/igmp prints it: 8 hex digits)
// summed over the devices, or -1 if no device has joined it.
func igmpUsers(procNetIGMP, group string) int {
	n := -1
	for _, line := range strings.Split(procNetIGMP, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.EqualFold(f[0], group) {
			if u, err := strconv.Atoi(f[1]); err == nil {
				n = max(n, 0) + u
			}
		}
	}
	return n
}

// TestIGMPUsers reads /proc/net/igmp as a 6.1 guest prints it, with the group of a
// receiver whose two ids joined.
func TestIGMPUsers(t *testing.T) {
	const out = "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n" +
		"1\tlo        :     1      V3\n\t\t\t\t010000E0     1 0:00000000\t\t0\n" +
		"2\teth0      :     2      V3\n\t\t\t\t010012EF     2 0:00000000\t\t0\n\t\t\t\t010000E0     1 0:00000000\t\t0\n"
	for _, c := range []struct {
		group string
		want  int
	}{{"010012EF", 2}, {"010000E0", 2}, {"020012EF", -1}} {
		if got := igmpUsers(out, c.group); got != c.want {
			t.Errorf("igmpUsers(%s) = %d, want %d", c.group, got, c.want)
		}
	}
}

// checkMckey checks an mckey run: exit 0, every id joined, the transfers complete.
func checkMckey(t *testing.T, who string, r labtest.Result, joins int) {
	t.Helper()
	if r.RC != 0 || !strings.Contains(r.Out, "data transfers complete") || strings.Count(r.Out, "joined dgid") != joins {
		t.Errorf("mckey %s: exit %d, want 0, %d joins and \"data transfers complete\":\n%s", who, r.RC, joins, tail(r.Out, 15))
		return
	}
	t.Logf("mckey %s:\n%s", who, tail(r.Out, 8))
}

// TestMckeyPeerLoopback runs the goroce mckey peer's receiver and sender against each
// other on loopback devices (127.0.0.1 and .2, a multicast group on lo): the roles the
// lab's mckey rows use, proven without the lab.
func TestMckeyPeerLoopback(t *testing.T) {
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(u.LocalAddr().(*net.UDPAddr).Port)
	u.Close()
	var devs [2]*roce.Device
	for i, a := range []string{"127.0.0.1", "127.0.0.2"} {
		if devs[i], err = roce.Open(netip.MustParseAddr(a), roce.WithPort(port), roce.WithMTU(roce.MTU1024)); err != nil {
			t.Skipf("loopback device %s: %v", a, err)
		}
		defer devs[i].Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	recv := make(chan error, 1)
	joined := make(chan struct{})
	go func() {
		recv <- mckeyPeer(ctx, devs[0], false, "239.18.99.1", mckeyCount, mckeySize, func() { close(joined) })
	}()
	// The sender starts once the receiver's QPs have joined: a datagram sent
	// before a join reaches nobody.
	select {
	case <-joined:
	case err := <-recv:
		t.Fatalf("receiver: %v", err)
	}
	if err := mckeyPeer(ctx, devs[1], true, "239.18.99.1", mckeyCount, mckeySize, nil); err != nil {
		t.Fatalf("sender: %v", err)
	}
	if err := <-recv; err != nil {
		t.Fatalf("receiver: %v", err)
	}
}

// checkMckeyReceiverCounters checks the receiving guest's hw_counters: one
// datagram on the wire per message, and rxe hands a copy to every attached QP.
func checkMckeyReceiverCounters(t *testing.T, d labtest.Counters) {
	t.Helper()
	if d["rcvd_pkts"] < mckeyCount || d["rdma_recvs"] < mckeyCount*mckeyQPs {
		t.Errorf("guest a: rcvd_pkts=%d rdma_recvs=%d, want at least %d and %d", d["rcvd_pkts"], d["rdma_recvs"],
			mckeyCount, mckeyCount*mckeyQPs)
	}
}
