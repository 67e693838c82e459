package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/roce"
)

// mcastWait bounds one round's completions and counters: they take
// milliseconds; the margin is for a loaded 2-core host.
const mcastWait = 30 * time.Second

// mcQP is a UD QP of one device with a receive slot per message.
type mcQP struct {
	dev     *roce.Device
	pd      *roce.PD
	cq      *roce.CQ
	qp      *roce.QP
	mr      *roce.MR
	buf     []byte
	slot    int
	scratch []roce.WC
}

// newMcQP creates a UD QP in RTS with Q_Key qkey and posts slots receives
// of room for the GRH area and size bytes.
func newMcQP(t *testing.T, dev *roce.Device, qkey uint32, slots, size int) *mcQP {
	t.Helper()
	m := &mcQP{dev: dev, slot: roce.GRHLen + size, scratch: make([]roce.WC, 64)}
	var err error
	check := func(e error) {
		t.Helper()
		if e != nil {
			t.Fatal(e)
		}
	}
	m.pd, err = dev.AllocPD()
	check(err)
	m.buf = make([]byte, slots*m.slot)
	m.mr, err = m.pd.RegMR(m.buf, roce.AccessLocalWrite)
	check(err)
	m.cq, err = dev.CreateCQ(2 * slots)
	check(err)
	m.qp, err = m.pd.CreateQP(roce.QPInitAttr{Type: roce.QPTypeUD, SendCQ: m.cq, RecvCQ: m.cq,
		Cap: roce.QPCap{MaxSendWR: uint32(slots), MaxRecvWR: uint32(slots), MaxSendSGE: 1, MaxRecvSGE: 1}})
	check(err)
	check(m.qp.Modify(&roce.QPAttr{State: roce.QPSInit, PortNum: 1, QKey: qkey},
		roce.QPAttrState|roce.QPAttrPKeyIndex|roce.QPAttrPort|roce.QPAttrQKey))
	check(m.qp.Modify(&roce.QPAttr{State: roce.QPSRTR}, roce.QPAttrState))
	check(m.qp.Modify(&roce.QPAttr{State: roce.QPSRTS, SQPSN: 1}, roce.QPAttrState|roce.QPAttrSQPSN))
	wrs := make([]roce.RecvWR, slots)
	for i := range wrs {
		wrs[i] = roce.RecvWR{WRID: uint64(i), SGL: []roce.SGE{{Addr: m.mr.Addr() + uint64(i*m.slot), Length: uint32(m.slot), LKey: m.mr.LKey()}}}
	}
	_, err = m.qp.PostRecv(wrs)
	check(err)
	return m
}

// poll waits for n completions of name's QP, up to mcastWait.
func (m *mcQP) poll(t *testing.T, name string, n int) []roce.WC {
	t.Helper()
	var out []roce.WC
	deadline := time.Now().Add(mcastWait)
	for len(out) < n {
		k, err := m.cq.Poll(m.scratch)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m.scratch[:k]...)
		if k > 0 {
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d completions in %v", name, len(out), n, mcastWait)
		}
		if err := m.cq.ReqNotify(false); err != nil {
			t.Fatal(err)
		}
		if k, _ = m.cq.Poll(m.scratch); k > 0 {
			out = append(out, m.scratch[:k]...)
			continue
		}
		select {
		case <-m.cq.Notify():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return out
}

// mcPayload is message i of round r: its number, then bytes that depend on it.
func mcPayload(r, i, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint32(b, uint32(r<<16|i))
	for j := 4; j < size; j++ {
		b[j] = byte(r*31 + i*7 + j)
	}
	return b
}

// sendRound sends n messages of round r to the group and waits for their
// send completions.
func (m *mcQP) sendRound(t *testing.T, ah *roce.AH, qkey uint32, r, n, size int) {
	t.Helper()
	wrs := make([]roce.SendWR, n)
	for i := range wrs {
		copy(m.buf[i*m.slot:], mcPayload(r, i, size))
		wrs[i] = roce.SendWR{WRID: uint64(i), Opcode: roce.WRSend, Flags: roce.SendSignaled, AH: ah.AV(),
			RemoteQPN: roce.McastQPN, RemoteQKey: qkey,
			SGL: []roce.SGE{{Addr: m.mr.Addr() + uint64(i*m.slot), Length: uint32(size), LKey: m.mr.LKey()}}}
	}
	if _, err := m.qp.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for _, wc := range m.poll(t, "sender", n) {
		if wc.Status != roce.WCSuccess || wc.Opcode != roce.WCSend {
			t.Fatalf("send completion %+v", wc)
		}
	}
}

// mcSrc is where a group's datagrams come from.
type mcSrc struct {
	qpn         uint32
	addr, group netip.Addr
}

// recvRound waits for round r's n messages from src and checks each
// arrived once, whole, sent to the group (the GRH area's IPv4 header).
func (m *mcQP) recvRound(t *testing.T, name string, src mcSrc, r, n, size int) {
	t.Helper()
	seen := make([]bool, n)
	for _, wc := range m.poll(t, name, n) {
		if wc.Status != roce.WCSuccess || wc.Opcode != roce.WCRecv || wc.ByteLen != uint32(roce.GRHLen+size) || wc.SrcQP != src.qpn {
			t.Fatalf("%s: completion %+v, want a receive of %d bytes from QP %#x", name, wc, roce.GRHLen+size, src.qpn)
		}
		slot := m.buf[int(wc.WRID)*m.slot:][:m.slot]
		ip := slot[roce.GRHLen-20 : roce.GRHLen]
		if from, to := netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20])); from != src.addr || to != src.group {
			t.Fatalf("%s: datagram %v -> %v, want %v -> %v", name, from, to, src.addr, src.group)
		}
		got := slot[roce.GRHLen:]
		i := int(binary.BigEndian.Uint32(got) & 0xffff)
		if int(binary.BigEndian.Uint32(got)>>16) != r || i >= n || seen[i] || string(got) != string(mcPayload(r, i, size)) {
			t.Fatalf("%s: round %d: unexpected or repeated payload %x...", name, r, got[:8])
		}
		seen[i] = true
	}
}

// none checks that m has no completion.
func (m *mcQP) none(t *testing.T, name string) {
	t.Helper()
	if k, _ := m.cq.Poll(m.scratch); k != 0 {
		t.Errorf("%s: %d completions, want none: %+v", name, k, m.scratch[:k])
	}
}

// groupSockets counts the sockets bound to g (IPv4) in /proc/net/udp: the
// kernel hands a group's datagram to each that joined it, so this is how
// many devices get a copy.
func groupSockets(t *testing.T, g netip.AddrPort) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	a := g.Addr().As4()
	want := fmt.Sprintf("%08X:%04X", binary.LittleEndian.Uint32(a[:]), g.Port())
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 1 && f[1] == want {
			n++
		}
	}
	return n
}

// TestAttachedMulticast: the devices of processes attached to one roced
// address each join a multicast group for themselves, and each gets its
// own copy of every datagram sent to it (DestQP 0xFFFFFF), whole, from a
// sender on another address (an owned device) or on the same one
// (attached). An attached device that never joined or that left gets
// none: it has no socket in the group (the kernel hands it nothing to
// count); one whose QP joined with another Q_Key gets each datagram and
// drops it as bad_qkey, in its own counters and in roced's device-wide
// total. A receiver that leaves stops receiving while the other keeps on.
func TestAttachedMulticast(t *testing.T) {
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	sock := filepath.Join(t.TempDir(), "roced.sock")
	d := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)), "-pingpong=false",
		"-ud-pingpong=false", "-rping=false", "-socket", sock)
	open := func(t *testing.T, addr netip.Addr, attached bool) *roce.Device {
		t.Helper()
		opts := []roce.Option{roce.WithPort(port), roce.WithMTU(roce.MTU1024), roce.WithRoced(sock)}
		dev, err := roce.Open(addr, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		if dev.Attached() != attached {
			t.Fatalf("device on %v: attached %v, want %v", addr, dev.Attached(), attached)
		}
		return dev
	}
	const qkey, n, size = 0x4d43, 32, 512
	badKeys := 0.0 // roced's bad_qkey total over the subtests
	for _, tt := range []struct {
		name     string
		addr     netip.Addr
		attached bool
	}{
		{"owned-sender", addrs[1], false},
		{"attached-sender", addrs[0], true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			group := netip.AddrFrom4([4]byte{239, byte(1 + rand.IntN(254)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
			gid := roce.GIDFromAddr(group)
			rx := map[string]*mcQP{}
			for _, name := range []string{"a", "b", "never", "left", "badkey"} {
				k := uint32(qkey)
				if name == "badkey" {
					k++
				}
				rx[name] = newMcQP(t, open(t, addrs[0], true), k, 2*n, size)
			}
			for _, name := range []string{"a", "b", "left", "badkey"} {
				if err := rx[name].qp.AttachMcast(gid, 0); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			if err := rx["left"].qp.DetachMcast(gid, 0); err != nil {
				t.Fatal(err)
			}
			if s := groupSockets(t, netip.AddrPortFrom(group, port)); s != 3 {
				t.Fatalf("%d sockets in %v:%d, want 3 (a, b, badkey)", s, group, port)
			}
			snd := newMcQP(t, open(t, tt.addr, tt.attached), qkey, n, size)
			ah, err := snd.pd.CreateAH(roce.AHAttr{DGID: group, SGIDIndex: uint8(snd.dev.GIDIndex()), HopLimit: 64, IsGlobal: true})
			if err != nil {
				t.Fatal(err)
			}
			src := mcSrc{qpn: snd.qp.QPN(), addr: tt.addr, group: group}

			snd.sendRound(t, ah, qkey, 1, n, size)
			rx["a"].recvRound(t, "a", src, 1, n, size)
			rx["b"].recvRound(t, "b", src, 1, n, size)
			waitForIn(t, mcastWait, "badkey's drops", func() bool { return rx["badkey"].dev.Stats().BadQKey == n })

			// b leaves; a keeps receiving.
			if err := rx["b"].qp.DetachMcast(gid, 0); err != nil {
				t.Fatal(err)
			}
			if s := groupSockets(t, netip.AddrPortFrom(group, port)); s != 2 {
				t.Fatalf("%d sockets in %v:%d after b left, want 2 (a, badkey)", s, group, port)
			}
			snd.sendRound(t, ah, qkey, 2, n, size)
			rx["a"].recvRound(t, "a", src, 2, n, size)
			waitForIn(t, mcastWait, "badkey's drops", func() bool { return rx["badkey"].dev.Stats().BadQKey == 2*n })
			for _, name := range []string{"b", "never", "left", "badkey"} {
				rx[name].none(t, name)
			}
			for _, name := range []string{"b", "never", "left"} {
				if st := rx[name].dev.Stats(); st.UnknownQP+st.BadQKey != 0 {
					t.Errorf("%s: unknown_qp %d bad_qkey %d: a datagram reached a device outside the group", name, st.UnknownQP, st.BadQKey)
				}
			}
			badKeys += 2 * n
			waitForIn(t, mcastWait, "roced's device-wide bad_qkey", func() bool {
				v := value(t, d.scrape(t), "roce_bad_qkey_total")
				if v > badKeys {
					t.Fatalf("roced's roce_bad_qkey_total = %v, want %v", v, badKeys)
				}
				return v == badKeys
			})
		})
	}
}
