package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/impair"
)

// psnRecorder collects the PSNs of the request packets with one opcode that
// reach the responder.
type psnRecorder struct {
	mu   sync.Mutex
	psns []bth.PSN
}

func (r *psnRecorder) add(p bth.PSN) {
	r.mu.Lock()
	r.psns = append(r.psns, p)
	r.mu.Unlock()
}

func (r *psnRecorder) get() []bth.PSN {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bth.PSN(nil), r.psns...)
}

// TestRCReadAtomicResentAtOwnPSNAfterImplicitNAK: WRITE, then a READ or
// atomic, then SEND are posted together. The WRITE's ACK and the first
// response of the READ/atomic are lost, so the SEND's cumulative ACK
// completes the WRITE and implicitly NAKs the READ/atomic in one go (rxe
// check_psn: COMPST_COMP_WQE, then COMPST_ERROR_RETRY). The completer must
// move its PSN past the WRITE before asking for the retry: the READ/atomic
// has to be sent again at its own PSN, which the responder finds among its
// saved resources (C9-105). Sent at the WRITE's PSN it is dropped as a
// duplicate with no resource, and the WR ends in RETRY_EXC_ERR.
func TestRCReadAtomicResentAtOwnPSNAfterImplicitNAK(t *testing.T) {
	for _, op := range []verbs.WROpcode{verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp} {
		t.Run(opNames[op], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { readAtomicAfterImplicitNAK(t, op) })
		})
	}
}

func readAtomicAfterImplicitNAK(t *testing.T, op verbs.WROpcode) {
	var (
		base     atomic.Uint32 // qa's first PSN: the WRITE's
		ackDrops atomic.Int32  // ACKs of the WRITE dropped
		respDrop atomic.Bool   // the READ/atomic response was dropped
		reqs     psnRecorder   // PSNs of the READ/atomic requests B received
	)
	reqOp := map[verbs.WROpcode]bth.Opcode{verbs.WRRDMARead: bth.RCReadRequest, verbs.WRAtomicFetchAndAdd: bth.RCFetchAdd,
		verbs.WRAtomicCmpAndSwp: bth.RCCompareSwap}[op]
	la, lb := link.Pipe(addrA, addrB)
	lb = impair.NewLossy(lb, impair.LossConfig{DropFn: func(d impair.Dir, b []byte) bool {
		pkt, err := bth.Parse(b)
		if err != nil {
			return false
		}
		p := pkt.PSN()
		switch {
		case d == impair.Recv && pkt.Opcode() == reqOp:
			reqs.add(p)
		case d == impair.Send && pkt.Opcode() == bth.RCAck && p == bth.PSN(base.Load()):
			ackDrops.Add(1)
			return true
		case d == impair.Send && (pkt.Opcode() == bth.RCReadResponseOnly || pkt.Opcode() == bth.RCAtomicAck):
			return respDrop.CompareAndSwap(false, true)
		}
		return false
	}})
	a, b := newNode(t, la, 1), newNode(t, lb, 1)
	defer a.close(t)
	defer b.close(t)
	// retry_cnt 3 and a short timeout: a READ/atomic resent at the wrong
	// PSN is never answered, and the WR fails within a few timeouts.
	qa, qb := rcPair(t, a, b, rcOpts{retry: 3, timeout: 10})
	first := bth.PSN(0x123400 + qa.QPN())
	base.Store(uint32(first))

	const orig = 0x0123456789abcdef
	src := a.mem.reg(1, pattern(100, 3), verbs.AccessLocalWrite)
	res := a.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite)
	remote := b.mem.reg(1, pattern(128, 9), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	binary.NativeEndian.PutUint64(remote.Buf[112:], orig)
	want := bytes.Clone(remote.Buf[:50])
	rbuf := b.mem.reg(1, make([]byte, 16), verbs.AccessLocalWrite)
	if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 77, SGL: []verbs.SGE{rbuf.sge(0, 16)}}}); err != nil {
		t.Fatal(err)
	}
	qb.Query()
	mid := verbs.SendWR{WRID: 2, Opcode: op, Flags: verbs.SendSignaled, RKey: remote.RKey}
	switch op {
	case verbs.WRRDMARead:
		mid.SGL, mid.RemoteAddr = []verbs.SGE{res.sge(0, 50)}, remote.Addr
	case verbs.WRAtomicFetchAndAdd:
		mid.SGL, mid.RemoteAddr, mid.CompareAdd = []verbs.SGE{res.sge(0, 8)}, remote.Addr+112, 5
	case verbs.WRAtomicCmpAndSwp:
		mid.SGL, mid.RemoteAddr, mid.CompareAdd, mid.Swap = []verbs.SGE{res.sge(0, 8)}, remote.Addr+112, orig, 0xdeadbeef
	}
	if _, err := qa.PostSend([]verbs.SendWR{
		{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 50)}, RemoteAddr: remote.Addr + 50, RKey: remote.RKey},
		mid,
		{WRID: 3, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 10)}},
	}); err != nil {
		t.Fatal(err)
	}
	wcs := waitWC(t, a.scq, 3, time.Minute)
	for i, w := range wcs {
		if w.Status != verbs.WCSuccess || w.WRID != uint64(i+1) {
			t.Errorf("completion %d: %s, want wr %d success", i, wcString(w), i+1)
		}
	}
	if !respDrop.Load() {
		t.Fatal("the READ/atomic response was never dropped: scenario not exercised")
	}
	for _, p := range reqs.get() {
		if p != first.Add(1) {
			t.Errorf("%s request received at PSN %#x, want its own PSN %#x (WRITE at %#x)", opNames[op], p, first.Add(1), first)
		}
	}
	if n := len(reqs.get()); n < 2 {
		t.Errorf("%s request received %d times, want a retransmission", opNames[op], n)
	}
	qb.Query() // orders b's shard writes before our reads
	switch op {
	case verbs.WRRDMARead:
		if !bytes.Equal(res.Buf[:50], want) {
			t.Error("READ data differs")
		}
	case verbs.WRAtomicFetchAndAdd:
		if got := binary.NativeEndian.Uint64(remote.Buf[112:]); got != orig+5 {
			t.Errorf("FETCH_ADD left %#x, want %#x (applied once)", got, uint64(orig+5))
		}
	case verbs.WRAtomicCmpAndSwp:
		if got := binary.NativeEndian.Uint64(remote.Buf[112:]); got != 0xdeadbeef {
			t.Errorf("CMP_SWP left %#x, want swapped", got)
		}
	}
	if op != verbs.WRRDMARead {
		if got := binary.NativeEndian.Uint64(res.Buf); got != orig {
			t.Errorf("%s returned %#x, want %#x", opNames[op], got, uint64(orig))
		}
	}
	if !bytes.Equal(remote.Buf[50:100], src.Buf[:50]) {
		t.Error("WRITE data differs")
	}
	// The implicit NAK asks for the retry at once; a timeout here means
	// it was ignored.
	if n := a.e.Stats().Timeouts.Load(); n != 0 {
		t.Errorf("%d retransmission timeouts, want the implicit NAK to retry at once", n)
	}
	t.Logf("WRITE ACKs dropped %d; %s requests at %#x; A retransmits %d",
		ackDrops.Load(), opNames[op], reqs.get(), a.e.Stats().Retransmits.Load())
}

// TestRCRNRWaitDoesNotSpendRetryCount: an RNR NAK on SEND_FIRST leaves the
// MIDDLE and LAST packets already in flight to arrive ahead of the
// responder's expected PSN, which answers them with one PSN sequence error
// NAK per RNR round. The requester is already waiting on the RNR timer, so
// that NAK must neither cost a transport retry nor restart anything: the
// RNR retries (7 = infinite) govern, and retry_cnt 2 must not run out.
func TestRCRNRWaitDoesNotSpendRetryCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		qa, qb := rcPair(t, a, b, rcOpts{retry: 2, rnrRetry: 7, minRNR: 1})
		src := a.mem.reg(1, pattern(3000, 1), verbs.AccessLocalWrite)
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: 7, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 3000)}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // many RNR rounds with no receive posted
		dst := b.mem.reg(1, make([]byte, 4000), verbs.AccessLocalWrite)
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 8, SGL: []verbs.SGE{dst.sge(0, 4000)}}}); err != nil {
			t.Fatal(err)
		}
		w := waitWC(t, a.scq, 1, 10*time.Second)[0]
		s := b.e.Stats().Snapshot()
		if w.Status != verbs.WCSuccess || w.WRID != 7 {
			t.Fatalf("send completion %s, want wr 7 success (B sent %d RNR NAKs, %d sequence NAKs)",
				wcString(w), s.NAKsSent[NAKRNR], s.NAKsSent[NAKPSNSeqErr])
		}
		if s.NAKsSent[NAKRNR] < 3 || s.NAKsSent[NAKPSNSeqErr] < 3 {
			t.Errorf("B sent %d RNR NAKs and %d sequence NAKs, want at least 3 each: scenario not exercised",
				s.NAKsSent[NAKRNR], s.NAKsSent[NAKPSNSeqErr])
		}
		r := waitWC(t, b.rcq, 1, time.Second)[0]
		qb.Query()
		if r.Status != verbs.WCSuccess || r.ByteLen != 3000 || !bytes.Equal(dst.Buf[:3000], src.Buf) {
			t.Fatalf("recv completion %s or data differs", wcString(r))
		}
	})
}

// pipeWR is one WR of TestRCPipelinedOpsUnderLoss. WR i owns slot i of the
// local, remote and receive regions, so every byte has one writer.
type pipeWR struct {
	op       verbs.WROpcode
	size     int
	signaled bool
	init     uint64 // atomics: the remote word before
}

// TestRCPipelinedOpsUnderLoss is TestRCOpsUnderLoss with many WRs in flight:
// rounds of a shuffled mix of WRITE, WRITE_IMM, READ, SEND, SEND_IMM,
// FETCH_ADD and CMP_SWP, posted 32 at a time, over links that drop,
// duplicate and reorder. Go-back-N then rewinds across WR boundaries, and
// cumulative ACKs skip past READs and atomics whose responses were lost. It
// checks every byte (and that nothing beyond a target is written), exactly
// one completion per signaled WR in posting order, one receive completion
// per SEND/WRITE_IMM in order, and that each atomic, on its own word, was
// applied exactly once.
func TestRCPipelinedOpsUnderLoss(t *testing.T) {
	for _, rate := range []float64{0.05, 0.20} {
		for k := range int64(3) {
			seed := int64(rate*1000) + 77 + k
			t.Run(fmt.Sprintf("loss%.0f%%/seed%d", rate*100, seed), func(t *testing.T) {
				t.Logf("seed %d", seed)
				synctest.Test(t, func(t *testing.T) { pipelinedUnderLoss(t, rate, seed) })
			})
		}
	}
}

// TestRCPipelinedOpsUnderLossRunToCompletion is TestRCPipelinedOpsUnderLoss
// with run-to-completion nodes, the waiting goroutine receiving itself.
func TestRCPipelinedOpsUnderLossRunToCompletion(t *testing.T) {
	for _, rate := range []float64{0.05, 0.20} {
		seed := int64(rate*1000) + 91
		t.Run(fmt.Sprintf("loss%.0f%%/seed%d", rate*100, seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { pipelinedUnderLoss(t, rate, seed, runToCompletion) })
		})
	}
}

// TestRCPipelinedOpsUnderLossHandOff is TestRCPipelinedOpsUnderLoss with
// readers that hand their batches to the shard goroutines.
func TestRCPipelinedOpsUnderLossHandOff(t *testing.T) {
	const rate, seed = 0.05, 143
	synctest.Test(t, func(t *testing.T) { pipelinedUnderLoss(t, rate, seed, readerHandsOff) })
}

func pipelinedUnderLoss(t *testing.T, rate float64, seed int64, opts ...func(*Config)) {
	const (
		rounds = 4
		depth  = 32
		slot   = 8 << 10
		guard  = 16 // bytes after each target that must stay untouched
		n      = rounds * depth
	)
	loss := &impair.LossConfig{Seed: seed, Drop: rate, Dup: rate / 2, Reorder: rate / 2}
	a, b := pair(t, loss, opts...)
	defer a.close(t)
	defer b.close(t)
	qa, qb := rcPair(t, a, b, rcOpts{mtu: verbs.MTU1024, timeout: 10})

	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	mix := []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead, verbs.WRRDMARead, verbs.WRSend, verbs.WRSendWithImm,
		verbs.WRAtomicFetchAndAdd, verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp}
	sizes := []int{0, 1, 8, 1023, 1024, 1025, 3000, 4097}
	wrs := make([]pipeWR, n)
	local := a.mem.reg(1, make([]byte, n*slot), verbs.AccessLocalWrite)
	remote := b.mem.reg(1, make([]byte, n*slot), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	recv := b.mem.reg(1, make([]byte, n*slot), verbs.AccessLocalWrite)
	for i := range wrs {
		w := &wrs[i]
		w.op = mix[rng.IntN(len(mix))]
		w.size = sizes[rng.IntN(len(sizes))]
		// Unsignaled WRs complete silently; the last of a round is
		// signaled so its completion proves the round done.
		w.signaled = rng.IntN(4) != 0 || i%depth == depth-1
		src := pattern(w.size, byte(i))
		switch w.op {
		case verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp:
			w.size = 8
			w.init = 0x0101010100000000*uint64(i+1) + 0x1234
			binary.NativeEndian.PutUint64(remote.Buf[i*slot:], w.init)
		case verbs.WRRDMARead:
			copy(remote.Buf[i*slot:], src)
		default:
			copy(local.Buf[i*slot:], src)
		}
	}
	qb.Query() // orders our writes to b's memory before b's shard reads them

	var recvWant []int // WR indices consuming a receive, in order
	for r := 0; r < rounds; r++ {
		var sends []verbs.SendWR
		var recvs []verbs.RecvWR
		var want []int // signaled WR indices, in order
		for i := r * depth; i < (r+1)*depth; i++ {
			w := &wrs[i]
			wr := verbs.SendWR{WRID: uint64(i), Opcode: w.op, Imm: 0xB0000000 | uint32(i),
				RemoteAddr: remote.Addr + uint64(i*slot), RKey: remote.RKey}
			if w.signaled {
				wr.Flags = verbs.SendSignaled
				want = append(want, i)
			}
			if w.size > 0 {
				wr.SGL = []verbs.SGE{local.sge(i*slot, w.size)}
			}
			switch w.op {
			case verbs.WRAtomicFetchAndAdd:
				wr.CompareAdd = uint64(i) + 1
			case verbs.WRAtomicCmpAndSwp:
				wr.CompareAdd, wr.Swap = w.init, ^w.init
			case verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWriteWithImm:
				recvs = append(recvs, verbs.RecvWR{WRID: uint64(i), SGL: []verbs.SGE{recv.sge(i*slot, slot)}})
				recvWant = append(recvWant, i)
			}
			sends = append(sends, wr)
		}
		if len(recvs) > 0 {
			if _, err := qb.PostRecv(recvs); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := qa.PostSend(sends); err != nil {
			t.Fatal(err)
		}
		for k, wc := range waitWC(t, a.scq, len(want), 10*time.Minute) {
			i := want[k]
			if wc.WRID != uint64(i) || wc.Status != verbs.WCSuccess || wc.Opcode != wcOpcode(wrs[i].op) {
				t.Fatalf("round %d send completion %d: %s, want wr %d success %v", r, k, wcString(wc), i, wcOpcode(wrs[i].op))
			}
		}
	}
	for k, wc := range waitWC(t, b.rcq, len(recvWant), time.Minute) {
		i := recvWant[k]
		w := wrs[i]
		wantOp, wantLen := verbs.WCRecv, uint32(w.size)
		if w.op == verbs.WRRDMAWriteWithImm {
			wantOp, wantLen = verbs.WCRecvRDMAWithImm, 0
		}
		if wc.WRID != uint64(i) || wc.Status != verbs.WCSuccess || wc.Opcode != wantOp || (w.op != verbs.WRRDMAWriteWithImm && wc.ByteLen != wantLen) {
			t.Fatalf("recv completion %d: %s, want wr %d %v len %d", k, wcString(wc), i, wantOp, wantLen)
		}
		if w.op != verbs.WRSend && (wc.Flags&verbs.WCWithImm == 0 || wc.ImmData != 0xB0000000|uint32(i)) {
			t.Fatalf("recv completion %d (wr %d): imm %#x flags %v", k, i, wc.ImmData, wc.Flags)
		}
	}
	noMoreWC(t, a.scq, 100*time.Millisecond)
	noMoreWC(t, b.rcq, 100*time.Millisecond)

	qb.Query() // orders b's shard writes before our reads
	zero := make([]byte, guard)
	for i, w := range wrs {
		off := i * slot
		src := pattern(w.size, byte(i))
		check := func(what string, buf []byte, want []byte) {
			t.Helper()
			if !bytes.Equal(buf[off:off+len(want)], want) {
				t.Errorf("wr %d %s %d bytes: %s differs", i, opNames[w.op], w.size, what)
			}
			if !bytes.Equal(buf[off+len(want):off+len(want)+guard], zero) {
				t.Errorf("wr %d %s %d bytes: %s written beyond the target", i, opNames[w.op], w.size, what)
			}
		}
		switch w.op {
		case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
			check("remote", remote.Buf, src)
		case verbs.WRSend, verbs.WRSendWithImm:
			check("receive buffer", recv.Buf, src)
		case verbs.WRRDMARead:
			check("local", local.Buf, src)
		case verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp:
			var orig, after [8]byte
			binary.NativeEndian.PutUint64(orig[:], w.init)
			nv := w.init + uint64(i) + 1 // applied exactly once
			if w.op == verbs.WRAtomicCmpAndSwp {
				nv = ^w.init
			}
			binary.NativeEndian.PutUint64(after[:], nv)
			check("returned value", local.Buf, orig[:])
			check("remote word", remote.Buf, after[:])
		}
	}
	sa, sb := a.e.Stats().Snapshot(), b.e.Stats().Snapshot()
	t.Logf("%d WRs: A retransmits %d timeouts %d naks rcvd %v; B dup %d oos %d naks sent %v",
		n, sa.Retransmits, sa.Timeouts, sa.NAKsRcvd, sb.DuplicateRequests, sb.OutOfSequence, sb.NAKsSent)
}
