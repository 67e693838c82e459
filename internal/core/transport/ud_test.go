package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/impair"
)

func udQP(t testing.TB, n *node, qkey uint32) *QP {
	t.Helper()
	q := n.createQP(t, verbs.QPTypeUD, rcOpts{})
	steps := []struct {
		a verbs.QPAttr
		m verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, QKey: qkey}, verbs.QPAttrState | verbs.QPAttrPKeyIndex | verbs.QPAttrPort | verbs.QPAttrQKey},
		{verbs.QPAttr{State: verbs.QPSRTR}, verbs.QPAttrState},
		{verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 1}, verbs.QPAttrState | verbs.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := q.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

func TestUDSendAndImm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		udExchange(t, a, b)
	})
}

// udExchange sends UD SEND and SEND_IMM (and two with wrong Q_Keys) from a
// to b and checks the GRH area, payloads, completions and Q_Key drops.
func udExchange(t *testing.T, a, b *node) {
	qa, qb := udQP(t, a, 0x1111), udQP(t, b, 0x2222)
	src := a.mem.reg(1, pattern(1024, 3), verbs.AccessLocalWrite)
	dst := b.mem.reg(1, make([]byte, 4*1100), verbs.AccessLocalWrite)
	for i := 0; i < 4; i++ {
		qb.PostRecv([]verbs.RecvWR{{WRID: uint64(10 + i), SGL: []verbs.SGE{dst.sge(i*1100, 1100)}}})
	}
	ah := &verbs.AddressVector{DGID: b.addr}
	wrs := []verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 1024)}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x2222},
		{WRID: 2, Opcode: verbs.WRSendWithImm, Flags: verbs.SendSignaled, Imm: 0x5a5a, SGL: []verbs.SGE{src.sge(0, 100)}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x2222},
		{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x3333},                                      // wrong Q_Key: dropped
		{WRID: 4, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 1)}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x80000000}, // takes QP's Q_Key 0x1111: dropped
	}
	if _, err := qa.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	for i, w := range waitWC(t, a.scq, 4, 10*time.Second) {
		if w.WRID != uint64(i+1) || w.Status != verbs.WCSuccess {
			t.Fatalf("send completion %s", wcString(w))
		}
	}
	rwc := waitWC(t, b.rcq, 2, 10*time.Second)
	// b's shard takes the four datagrams of one QP in order: once both
	// wrong-Q_Key drops are counted, nothing of this exchange is left to
	// complete (on real sockets that can be well after the two receives).
	for deadline := time.Now().Add(10 * time.Second); b.e.Stats().Snapshot().BadQKey < 2; time.Sleep(50 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Q_Key drops counted %d after 10 s, want 2", b.e.Stats().Snapshot().BadQKey)
		}
	}
	noMoreWC(t, b.rcq, 0)
	for i, want := range []int{1024, 100} {
		w := rwc[i]
		if w.Status != verbs.WCSuccess || w.ByteLen != uint32(grhLen+want) || w.SrcQP != qa.QPN() || w.Flags&verbs.WCGRH == 0 {
			t.Fatalf("recv %d: %s src %#x flags %v", i, wcString(w), w.SrcQP, w.Flags)
		}
		buf := dst.Buf[i*1100:]
		if !bytes.Equal(buf[grhLen:grhLen+want], src.Buf[:want]) {
			t.Fatalf("recv %d: payload differs", i)
		}
		ip := buf[20:40]
		if ip[0] != 0x45 || ip[9] != 17 || !bytes.Equal(ip[12:16], a.addr.AsSlice()) || !bytes.Equal(ip[16:20], b.addr.AsSlice()) {
			t.Fatalf("recv %d: GRH area % x", i, buf[:40])
		}
		if got := binary.BigEndian.Uint16(ip[2:]); int(got) != 20+8+12+8+want+(-want&3)+4+map[int]int{0: 0, 1: 4}[i] {
			t.Fatalf("recv %d: IPv4 total length %d", i, got)
		}
	}
	if rwc[1].Flags&verbs.WCWithImm == 0 || rwc[1].ImmData != 0x5a5a {
		t.Fatalf("imm %#x flags %v", rwc[1].ImmData, rwc[1].Flags)
	}
	if s := b.e.Stats().Snapshot(); s.BadQKey != 2 || s.Malformed != 0 {
		t.Fatalf("Q_Key violations counted %d (malformed %d), want 2 (0)", s.BadQKey, s.Malformed)
	}
}

func TestSharedSRQManyQPs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { sharedSRQRun(t, nil) })
}

// TestSharedSRQManyQPsUnderLoss: four RC QPs draw from one SRQ over links
// that drop, duplicate, reorder and corrupt; every message lands exactly once,
// intact, and the limit event is still raised once.
func TestSharedSRQManyQPsUnderLoss(t *testing.T) {
	for _, rate := range []float64{0.01, 0.05, 0.20} {
		t.Run(fmt.Sprintf("loss%.0f%%", rate*100), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sharedSRQRun(t, &impair.LossConfig{Seed: int64(rate * 7919), Drop: rate, Dup: rate / 2,
					Reorder: rate / 2, Corrupt: rate / 4})
			})
		})
	}
}

// TestSharedSRQManyQPsUnderLossHandOff is the same with readers that hand
// their batches to the shard goroutines.
func TestSharedSRQManyQPsUnderLossHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sharedSRQRun(t, &impair.LossConfig{Seed: 78, Drop: 0.1, Dup: 0.05, Reorder: 0.05, Corrupt: 0.025}, readerHandsOff)
	})
}

// TestSharedSRQManyQPsUnderLossRunToCompletion is the same with
// run-to-completion nodes.
func TestSharedSRQManyQPsUnderLossRunToCompletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sharedSRQRun(t, &impair.LossConfig{Seed: 77, Drop: 0.1, Dup: 0.05, Reorder: 0.05, Corrupt: 0.025}, runToCompletion)
	})
}

// sharedSRQRun sends 8 messages on each of 4 RC QPs whose responders share one
// SRQ, over loss (nil: a clean pipe), and checks every message arrived once.
func sharedSRQRun(t *testing.T, loss *impair.LossConfig, opts ...func(*Config)) {
	a, b := pair(t, loss, opts...)
	defer a.close(t)
	defer b.close(t)
	s, err := srq.New(&verbs.SRQAttr{MaxWR: 64, MaxSGE: 1}, srq.Caps{MaxWR: 1024, MaxSGE: 4})
	if err != nil {
		t.Fatal(err)
	}
	var limitEvents atomic.Int32 // the SRQ's owner raises SRQ_LIMIT_REACHED; the shards only Pop
	s.SetLimitHandler(func() { limitEvents.Add(1) })
	const nqp, per, size = 4, 8, 2000
	dst := b.mem.reg(1, make([]byte, nqp*per*size), verbs.AccessLocalWrite)
	for i := 0; i < nqp*per; i++ {
		if _, err := s.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{dst.sge(i*size, size)}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Modify(&verbs.SRQAttr{Limit: 4}, verbs.SRQLimit); err != nil {
		t.Fatal(err)
	}
	var qas []*QP
	for i := 0; i < nqp; i++ {
		qa := a.createQP(t, verbs.QPTypeRC, rcOpts{})
		qb := b.createQP(t, verbs.QPTypeRC, rcOpts{srq: s})
		connect(t, qa, b.addr, qb.QPN(), rcOpts{})
		connect(t, qb, a.addr, qa.QPN(), rcOpts{})
		if _, err := qb.PostRecv([]verbs.RecvWR{{}}); err == nil {
			t.Fatal("PostRecv on a QP with an SRQ succeeded")
		}
		qas = append(qas, qa)
	}
	src := a.mem.reg(1, make([]byte, nqp*per*size), verbs.AccessLocalWrite)
	for i := range src.Buf {
		src.Buf[i] = byte(i / size)
	}
	for k := 0; k < per; k++ {
		for i, qa := range qas {
			m := (i*per + k)
			qa.PostSend([]verbs.SendWR{{WRID: uint64(m), Opcode: verbs.WRSend, SGL: []verbs.SGE{src.sge(m*size, size)}}})
		}
	}
	rwc := waitWC(t, b.rcq, nqp*per, 10*time.Minute) // virtual time: retransmissions under loss
	seen := map[byte]bool{}
	for _, w := range rwc {
		if w.Status != verbs.WCSuccess || w.ByteLen != size {
			t.Fatalf("recv %s", wcString(w))
		}
		got := dst.Buf[int(w.WRID)*size : int(w.WRID+1)*size]
		v := got[0]
		if seen[v] || !bytes.Equal(got, bytes.Repeat([]byte{v}, size)) {
			t.Fatalf("message %d delivered twice or corrupted", v)
		}
		seen[v] = true
	}
	if len(seen) != nqp*per {
		t.Fatalf("%d distinct messages", len(seen))
	}
	if n := limitEvents.Load(); n != 1 {
		t.Fatalf("SRQ limit handler ran %d times, want once", n)
	}
	noMoreWC(t, b.rcq, time.Second)
	if loss != nil {
		return
	}
	// Moving an SRQ QP to ERR raises LAST_WQE_REACHED.
	for _, q := range b.e.qps.all() {
		q.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState)
		break
	}
	if !b.hasEvent(verbs.EventQPLastWQEReached) {
		t.Fatal("no LAST_WQE_REACHED")
	}
}

// TestUDUnderLoss: UD is unreliable, so over a link that drops, duplicates,
// reorders and corrupts, messages may be missing or (duplicated on the wire)
// delivered twice, but every one delivered is a message that was sent, intact:
// a corrupted datagram never completes a receive. Every send completes.
func TestUDUnderLoss(t *testing.T) {
	for _, rate := range []float64{0.01, 0.05, 0.20} {
		t.Run(fmt.Sprintf("loss%.0f%%", rate*100), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				la, lb := link.Pipe(addrA, addrB)
				lossy := impair.NewLossy(la, impair.LossConfig{Seed: int64(rate * 104729), Drop: rate,
					Dup: rate / 2, Reorder: rate / 2, Corrupt: rate})
				a, b := newNode(t, lossy, 2), newNode(t, lb, 2)
				defer a.close(t)
				defer b.close(t)
				qa, qb := udQP(t, a, 0x1111), udQP(t, b, 0x2222)
				const n, size, slot = 120, 1000, 1100 // 2n receives fit the RQ (256)
				src := a.mem.reg(1, make([]byte, n*size), verbs.AccessLocalWrite)
				for m := 0; m < n; m++ {
					binary.BigEndian.PutUint32(src.Buf[m*size:], uint32(m))
					copy(src.Buf[m*size+4:(m+1)*size], pattern(size-4, byte(m)))
				}
				dst := b.mem.reg(1, make([]byte, 2*n*slot), verbs.AccessLocalWrite)
				for i := 0; i < 2*n; i++ {
					if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{dst.sge(i*slot, slot)}}}); err != nil {
						t.Fatal(err)
					}
				}
				ah := &verbs.AddressVector{DGID: b.addr}
				for m := 0; m < n; m++ {
					wr := verbs.SendWR{WRID: uint64(m), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(m*size, size)},
						AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x2222}
					if _, err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
						t.Fatal(err)
					}
					if w := waitWC(t, a.scq, 1, time.Second)[0]; w.Status != verbs.WCSuccess || w.WRID != uint64(m) {
						t.Fatalf("send completion %s", wcString(w))
					}
				}
				time.Sleep(time.Second) // virtual: let delayed and reordered datagrams land
				var got []verbs.WC
				buf := make([]verbs.WC, 64)
				for {
					k, _ := b.rcq.Poll(buf)
					if k == 0 {
						break
					}
					got = append(got, buf[:k]...)
				}
				qb.Query() // orders b's shard's writes before our reads
				seen := map[uint32]int{}
				for _, w := range got {
					if w.Status != verbs.WCSuccess || w.ByteLen != grhLen+size {
						t.Fatalf("recv %s", wcString(w))
					}
					msg := dst.Buf[int(w.WRID)*slot+grhLen : int(w.WRID)*slot+grhLen+size]
					m := binary.BigEndian.Uint32(msg)
					if m >= n || !bytes.Equal(msg[4:], pattern(size-4, byte(m))) {
						t.Fatalf("recv wr %d: a corrupt message completed (id %d)", w.WRID, m)
					}
					seen[m]++
				}
				dups, dropped, corrupted := lossy.Duplicated.Load(), lossy.Dropped.Load(), lossy.Corrupted.Load()
				if len(got) > n+int(dups) || len(seen) < n-int(dropped+corrupted) {
					t.Fatalf("%d receives of %d distinct messages; sent %d, link dropped %d, corrupted %d, duplicated %d",
						len(got), len(seen), n, dropped, corrupted, dups)
				}
				st := b.e.Stats().Snapshot()
				t.Logf("delivered %d (%d distinct) of %d; link dropped %d corrupted %d duplicated %d; icrc errors %d unknown qp %d malformed %d bad qkey %d",
					len(got), len(seen), n, dropped, corrupted, dups, st.ICRCErrors, st.UnknownQP, st.Malformed, st.BadQKey)
			})
		})
	}
}

// TestEngineLeavesTheSRQLimitHandlerAlone: SRQ_LIMIT_REACHED has one owner, the
// creator of the SRQ (roce). Creating and destroying the QPs that draw from an SRQ
// neither replaces its limit handler nor makes the engine keep the SRQ (it used to
// watch every SRQ it saw in a map).
func TestEngineLeavesTheSRQLimitHandlerAlone(t *testing.T) {
	a, b := pair(t, nil)
	defer a.close(t)
	defer b.close(t)
	for range 3 {
		s, err := srq.New(&verbs.SRQAttr{MaxWR: 4, MaxSGE: 1}, srq.Caps{MaxWR: 16, MaxSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		s.SetLimitHandler(func() { calls++ })
		q1 := b.createQP(t, verbs.QPTypeRC, rcOpts{srq: s})
		q2 := b.createQP(t, verbs.QPTypeRC, rcOpts{srq: s})
		// Arming above the WRs outstanding (none) fires at once, on this goroutine.
		if err := s.Modify(&verbs.SRQAttr{Limit: 1}, verbs.SRQLimit); err != nil || calls != 1 {
			t.Fatalf("arm with QPs attached: err %v, handler ran %d times, want once", err, calls)
		}
		for _, q := range []*QP{q1, q2} {
			if err := q.Destroy(); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Modify(&verbs.SRQAttr{Limit: 1}, verbs.SRQLimit); err != nil || calls != 2 {
			t.Fatalf("arm after the QPs are gone: err %v, handler ran %d times in all, want 2", err, calls)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUDDestroySendsPosted destroys a UD QP whose posted sends its shard has
// not served yet: every datagram still leaves, and the one
// signaled send completes, as on a NIC, where mckey's unsignaled sends are
// long gone by the time it destroys its QP.
func TestUDDestroySendsPosted(t *testing.T) {
	a, b := pair(t, nil)
	defer a.close(t)
	defer b.close(t)
	qa, qb := udQP(t, a, 0x1111), udQP(t, b, 0x2222)
	const n = 8
	src := a.mem.reg(1, pattern(100, 5), verbs.AccessLocalWrite)
	dst := b.mem.reg(1, make([]byte, n*200), verbs.AccessLocalWrite)
	for i := range n {
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: uint64(i), SGL: []verbs.SGE{dst.sge(i*200, 200)}}}); err != nil {
			t.Fatal(err)
		}
	}
	ah := &verbs.AddressVector{DGID: b.addr}
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{src.sge(0, 100)}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x2222}
	}
	wrs[n-1].Flags = verbs.SendSignaled
	// The shard goroutine, the only other receiver of its commands, runs this
	// one holding its token: the destroy, finding the token taken, hands its
	// work over the command channel, and runs before any slice.
	s, entered := qa.sh, make(chan struct{})
	s.cmds <- func() {
		close(entered)
		(<-s.cmds)()
	}
	<-entered
	if _, err := qa.PostSend(wrs); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- qa.Destroy() }()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w := waitWC(t, a.scq, 1, 10*time.Second)[0]; w.WRID != n-1 || w.Status != verbs.WCSuccess {
		t.Errorf("signaled send: %s, want wr_id %d success", wcString(w), n-1)
	}
	for i, w := range waitWC(t, b.rcq, n, 10*time.Second) {
		if w.WRID != uint64(i) || w.Status != verbs.WCSuccess || w.ByteLen != 100+40 {
			t.Errorf("receive %d: %s", i, wcString(w))
		}
	}
}
