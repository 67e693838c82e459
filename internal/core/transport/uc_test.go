package transport

import (
	"bytes"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link/impair"
)

// ucConnect moves q to RTS talking to peer QPN dqpn at dst, with the UC
// attribute masks (no RC timers, retries or rd_atomic resources).
func ucConnect(t testing.TB, q *QP, dst netip.Addr, dqpn uint32, mtu verbs.MTU) {
	t.Helper()
	steps := []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite},
			verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPSRTR, AV: verbs.AddressVector{DGID: dst}, PathMTU: mtu, DestQPN: dqpn, RQPSN: 0x777000 + dqpn},
			verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN},
		{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0x777000 + q.QPN()}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := q.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
}

func ucPair(t testing.TB, a, b *node) (*QP, *QP) {
	t.Helper()
	qa, qb := a.createQP(t, verbs.QPTypeUC, rcOpts{}), b.createQP(t, verbs.QPTypeUC, rcOpts{})
	ucConnect(t, qa, b.addr, qb.QPN(), verbs.MTU1024)
	ucConnect(t, qb, a.addr, qa.QPN(), verbs.MTU1024)
	return qa, qb
}

// TestUCOpcodes runs every UC operation at sizes around the path MTU over a
// clean pipe: data, completions and UC opcodes on the wire (no ACKs).
func TestUCOpcodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		qa, qb := ucPair(t, a, b)
		id := uint64(1)
		for _, op := range []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm} {
			for _, size := range []int{1, 1023, 1024, 1025, 3000, 4096} {
				transfer(t, a, b, qa, qb, op, size, id, time.Second)
				id++
			}
		}
		sa, sb := a.e.Stats().Snapshot(), b.e.Stats().Snapshot()
		if sa.SentPackets[ClassAck] != 0 || sb.SentPackets[ClassAck] != 0 {
			t.Fatalf("UC sent ACKs: %d, %d", sa.SentPackets[ClassAck], sb.SentPackets[ClassAck])
		}
		if sa.SentPackets[ClassSend] == 0 || sa.SentPackets[ClassWrite] == 0 || sb.Malformed != 0 || sb.OutOfSequence != 0 {
			t.Fatalf("counters: sent %v, peer malformed %d out-of-sequence %d", sa.SentPackets, sb.Malformed, sb.OutOfSequence)
		}
	})
}

// TestUCPostSendRejects checks that READ, atomics and SEND_WITH_INV are
// EINVAL on a UC QP, and that a UC QP can be created at all.
func TestUCPostSendRejects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		qa, _ := ucPair(t, a, b)
		buf := a.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite)
		for _, op := range []verbs.WROpcode{verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd, verbs.WRSendWithInv} {
			n, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: op, SGL: []verbs.SGE{buf.sge(0, 8)}}})
			if n != 0 || !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("opcode %d on UC: posted %d, err %v; want EINVAL", op, n, err)
			}
		}
	})
}

// TestUCRNRDrops checks that a SEND arriving with no receive WR is dropped
// (UC has no RNR NAK) while the sender completes it, and that the next
// message is delivered once a WR is posted.
func TestUCRNRDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		qa, qb := ucPair(t, a, b)
		src := a.mem.reg(1, pattern(2500, 1), verbs.AccessLocalWrite)
		dst := b.mem.reg(1, make([]byte, 2500), verbs.AccessLocalWrite)
		send := func(id uint64) {
			t.Helper()
			if _, err := qa.PostSend([]verbs.SendWR{{WRID: id, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 2500)}}}); err != nil {
				t.Fatal(err)
			}
			if w := waitWC(t, a.scq, 1, time.Second)[0]; w.WRID != id || w.Status != verbs.WCSuccess {
				t.Fatalf("send completion %s", wcString(w))
			}
		}
		send(1)
		noMoreWC(t, b.rcq, 10*time.Millisecond)
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 7, SGL: []verbs.SGE{dst.sge(0, 2500)}}}); err != nil {
			t.Fatal(err)
		}
		send(2)
		if w := waitWC(t, b.rcq, 1, time.Second)[0]; w.WRID != 7 || w.Status != verbs.WCSuccess || w.ByteLen != 2500 {
			t.Fatalf("recv completion %s", wcString(w))
		}
		qb.Query()
		if !bytes.Equal(dst.Buf, src.Buf) {
			t.Fatal("data differs")
		}
		if a, _ := qb.Query(); a.State != verbs.QPSRTS {
			t.Fatalf("receiver in %v after an RNR drop", a.State)
		}
	})
}

// TestUCLoss sends multi-packet SENDs over a lossy pipe: every send
// completes (nothing is retransmitted), a message that lost a packet is
// never delivered in part, and messages after a loss are delivered intact.
func TestUCLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const msgs, size = 64, 3000 // 3 packets each at PMTU 1024
		a, b := pair(t, &impair.LossConfig{Seed: 11, Drop: 0.1})
		defer a.close(t)
		defer b.close(t)
		qa, qb := ucPair(t, a, b)
		src := a.mem.reg(1, make([]byte, msgs*size), verbs.AccessLocalWrite)
		dst := b.mem.reg(1, make([]byte, msgs*size), verbs.AccessLocalWrite)
		for i := 0; i < msgs; i++ {
			copy(src.Buf[i*size:], pattern(size, byte(i)))
			if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{dst.sge(i*size, size)}}}); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < msgs; i++ {
			wr := verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(i*size, size)}}
			if _, err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range waitWC(t, a.scq, msgs, time.Second) {
			if w.Status != verbs.WCSuccess {
				t.Fatalf("send completion %s", wcString(w))
			}
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		buf := make([]verbs.WC, msgs+1)
		n, _ := b.rcq.Poll(buf)
		qb.Query()
		seen := map[int]bool{}
		firstMissing, lastSeen := -1, -1
		for _, w := range buf[:n] {
			if w.Status != verbs.WCSuccess || w.ByteLen != size {
				t.Fatalf("recv completion %s", wcString(w))
			}
			got := dst.Buf[int(w.WRID)*size : int(w.WRID+1)*size]
			m := -1
			for i := 0; i < msgs; i++ {
				if bytes.Equal(got, pattern(size, byte(i))) {
					m = i
					break
				}
			}
			if m < 0 || seen[m] {
				t.Fatalf("wr %d holds a partial, mixed or duplicate message (%d)", w.WRID, m)
			}
			seen[m] = true
			lastSeen = max(lastSeen, m)
		}
		for i := 0; i < msgs; i++ {
			if !seen[i] {
				firstMissing = i
				break
			}
		}
		t.Logf("%d of %d messages delivered; out-of-sequence packets %d", n, msgs, b.e.Stats().OutOfSequence.Load())
		if n == msgs || n == 0 || firstMissing < 0 || lastSeen < firstMissing {
			t.Fatalf("delivered %d of %d (first missing %d, last delivered %d): the loss pattern does not exercise UC resync", n, msgs, firstMissing, lastSeen)
		}
		if b.e.Stats().Retransmits.Load()+a.e.Stats().Retransmits.Load() != 0 {
			t.Fatal("UC retransmitted")
		}
		if st, _ := qb.Query(); st.State != verbs.QPSRTS {
			t.Fatalf("receiver in %v", st.State)
		}
	})
}
