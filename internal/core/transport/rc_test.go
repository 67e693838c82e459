package transport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link/impair"
)

var allOps = []verbs.WROpcode{verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead, verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd}

var opNames = map[verbs.WROpcode]string{verbs.WRSend: "SEND", verbs.WRSendWithImm: "SEND_IMM", verbs.WRRDMAWrite: "WRITE",
	verbs.WRRDMAWriteWithImm: "WRITE_IMM", verbs.WRRDMARead: "READ", verbs.WRAtomicCmpAndSwp: "CMP_SWP", verbs.WRAtomicFetchAndAdd: "FETCH_ADD"}

// transfer runs one WR of op and size from qa (on a) to qb (on b) and
// checks every byte and exactly one completion on each side that gets one.
func transfer(t *testing.T, a, b *node, qa, qb *QP, op verbs.WROpcode, size int, id uint64, within time.Duration) {
	t.Helper()
	src := pattern(size, byte(id))
	local := a.mem.reg(1, append([]byte(nil), src...), verbs.AccessLocalWrite)
	remote := b.mem.reg(1, make([]byte, max(size, 8)), verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	wr := verbs.SendWR{WRID: id, Opcode: op, Flags: verbs.SendSignaled, Imm: uint32(id) | 0xA0000000, RemoteAddr: remote.Addr, RKey: remote.RKey}
	wantRecv := op == verbs.WRSend || op == verbs.WRSendWithImm || op == verbs.WRRDMAWriteWithImm
	if size > 0 {
		wr.SGL = []verbs.SGE{local.sge(0, size)}
	}
	var orig uint64
	switch op {
	case verbs.WRRDMARead:
		copy(remote.Buf, src)
		clear(local.Buf)
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAndAdd:
		orig = 0x1111222233334444 + id
		binary.NativeEndian.PutUint64(remote.Buf, orig)
		local = a.mem.reg(1, make([]byte, 8), verbs.AccessLocalWrite)
		wr.SGL = []verbs.SGE{local.sge(0, 8)}
		wr.CompareAdd = orig
		if op == verbs.WRAtomicFetchAndAdd {
			wr.CompareAdd = 5
		}
		wr.Swap = 0xdeadbeef
	}
	if wantRecv {
		rw := verbs.RecvWR{WRID: id + 1000}
		if op != verbs.WRRDMAWriteWithImm && size > 0 {
			rw.SGL = []verbs.SGE{remote.sge(0, size)}
		}
		if _, err := qb.PostRecv([]verbs.RecvWR{rw}); err != nil {
			t.Fatal(err)
		}
	}
	qb.Query() // orders our writes to b's memory before b's shard reads them
	if _, err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
		t.Fatal(err)
	}
	swc := waitWC(t, a.scq, 1, within)
	if swc[0].WRID != id || swc[0].Status != verbs.WCSuccess || swc[0].Opcode != wcOpcode(op) {
		t.Fatalf("send completion %s, want wr %d success %v", wcString(swc[0]), id, wcOpcode(op))
	}
	if wantRecv {
		rwc := waitWC(t, b.rcq, 1, within)[0]
		wantOp, wantLen := verbs.WCRecv, uint32(size)
		if op == verbs.WRRDMAWriteWithImm {
			wantOp = verbs.WCRecvRDMAWithImm
		}
		if rwc.WRID != id+1000 || rwc.Status != verbs.WCSuccess || rwc.Opcode != wantOp || rwc.ByteLen != wantLen {
			t.Fatalf("recv completion %s, want wr %d %v len %d", wcString(rwc), id+1000, wantOp, wantLen)
		}
		if op != verbs.WRSend && (rwc.Flags&verbs.WCWithImm == 0 || rwc.ImmData != wr.Imm) {
			t.Fatalf("recv completion imm %#x flags %v, want %#x", rwc.ImmData, rwc.Flags, wr.Imm)
		}
		if rwc.SrcQP != qa.QPN() || rwc.QPNum != qb.QPN() {
			t.Fatalf("recv completion qp %#x src %#x", rwc.QPNum, rwc.SrcQP)
		}
	}
	if qa.typ == verbs.QPTypeUC && !wantRecv {
		// A UC WRITE has no ACK and no receive completion: it completes when its
		// last packet leaves, and the responder may still be writing the first
		// ones (ci52: "WRITE of 3000 bytes: data differs"). Wait until every
		// goroutine of the bubble is blocked, the pipe empty and b's shard idle.
		synctest.Wait()
	}
	// The responder wrote remote memory on b's shard; a command on that
	// shard orders those writes before our reads (over a real socket the
	// kernel gives the race detector no happens-before edge).
	qb.Query()
	switch op {
	case verbs.WRRDMARead:
		if !bytes.Equal(local.Buf, src) {
			t.Fatalf("READ of %d bytes: data differs", size)
		}
	case verbs.WRAtomicCmpAndSwp:
		if got := binary.NativeEndian.Uint64(local.Buf); got != orig {
			t.Fatalf("CMP_SWP returned %#x, want %#x", got, orig)
		}
		if got := binary.NativeEndian.Uint64(remote.Buf); got != 0xdeadbeef {
			t.Fatalf("CMP_SWP left %#x, want swapped", got)
		}
	case verbs.WRAtomicFetchAndAdd:
		if got := binary.NativeEndian.Uint64(local.Buf); got != orig {
			t.Fatalf("FETCH_ADD returned %#x, want %#x", got, orig)
		}
		if got := binary.NativeEndian.Uint64(remote.Buf); got != orig+5 {
			t.Fatalf("FETCH_ADD left %#x, want %#x (applied once)", got, orig+5)
		}
	default:
		if !bytes.Equal(remote.Buf[:size], src) {
			t.Fatalf("%s of %d bytes: data differs", opNames[op], size)
		}
	}
}

func sizesFor(mtu verbs.MTU, big bool) []int {
	p := mtu.Bytes()
	s := []int{0, 1, p - 1, p, p + 1, 3*p + 17}
	if big {
		s = append(s, 1<<20)
	}
	return s
}

func TestRCOpsOverPipe(t *testing.T) {
	for _, mtu := range []verbs.MTU{verbs.MTU1024, verbs.MTU4096} {
		t.Run(fmt.Sprintf("mtu%d", mtu.Bytes()), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := pair(t, nil)
				defer a.close(t)
				defer b.close(t)
				qa, qb := rcPair(t, a, b, rcOpts{mtu: mtu})
				id := uint64(1)
				for _, op := range allOps {
					sizes := sizesFor(mtu, true)
					if op == verbs.WRAtomicCmpAndSwp || op == verbs.WRAtomicFetchAndAdd {
						sizes = []int{8}
					}
					for _, size := range sizes {
						transfer(t, a, b, qa, qb, op, size, id, 10*time.Second)
						id++
					}
				}
				st := a.e.Stats().Snapshot()
				if st.Retransmits != 0 || st.ICRCErrors != 0 || st.Malformed != 0 {
					t.Fatalf("lossless run: retransmits %d icrc %d malformed %d", st.Retransmits, st.ICRCErrors, st.Malformed)
				}
			})
		})
	}
}

// TestRCOpsUnderLoss runs the lossless suite (every opcode; sizes 0, 1,
// PMTU-1, PMTU, PMTU+1, 3 PMTU+17 and 1 MiB; PMTU 1024 and 4096) one WR at a
// time over links that drop, duplicate, reorder and corrupt datagrams, in
// virtual time. TestRCPipelinedOpsUnderLoss (completer_regress_test.go) keeps
// many WRs in flight, where go-back-N crosses WR boundaries.
func TestRCOpsUnderLoss(t *testing.T) {
	for _, mtu := range []verbs.MTU{verbs.MTU1024, verbs.MTU4096} {
		for _, rate := range []float64{0.01, 0.05, 0.20} {
			t.Run(fmt.Sprintf("mtu%d/loss%.0f%%", mtu.Bytes(), rate*100), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { opsUnderLoss(t, mtu, rate) })
			})
		}
	}
}

// TestRCOpsUnderLossRunToCompletion is TestRCOpsUnderLoss in run-to-completion
// mode: posts send their own packets, readers run the receive side inline, and
// the waiting goroutine polls the engines (Engine.Poll) before each CQ poll, so
// completions arrive on every path the mode has, ACKs held behind replies.
func TestRCOpsUnderLossRunToCompletion(t *testing.T) {
	for _, mtu := range []verbs.MTU{verbs.MTU1024, verbs.MTU4096} {
		for _, rate := range []float64{0.05, 0.20} {
			t.Run(fmt.Sprintf("mtu%d/loss%.0f%%", mtu.Bytes(), rate*100), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) { opsUnderLoss(t, mtu, rate, runToCompletion) })
			})
		}
	}
}

// TestRCOpsUnderLossHandOff is TestRCOpsUnderLoss with readers that hand
// their batches to the shard goroutines.
func TestRCOpsUnderLossHandOff(t *testing.T) {
	for _, rate := range []float64{0.05, 0.20} {
		t.Run(fmt.Sprintf("mtu4096/loss%.0f%%", rate*100), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { opsUnderLoss(t, verbs.MTU4096, rate, readerHandsOff) })
		})
	}
}

// opsUnderLoss runs every operation at every size over a Pipe that drops,
// duplicates, reorders and corrupts at rate.
func opsUnderLoss(t *testing.T, mtu verbs.MTU, rate float64, opts ...func(*Config)) {
	seed := int64(rate*1000) + int64(mtu)
	t.Logf("seed %d", seed)
	loss := &impair.LossConfig{Seed: seed, Drop: rate, Dup: rate / 2, Reorder: rate / 2, Corrupt: rate / 4}
	a, b := pair(t, loss, opts...)
	defer a.close(t)
	defer b.close(t)
	qa, qb := rcPair(t, a, b, rcOpts{mtu: mtu, timeout: 10})
	id := uint64(1)
	for _, op := range allOps {
		sizes := sizesFor(mtu, true)
		if op == verbs.WRAtomicCmpAndSwp || op == verbs.WRAtomicFetchAndAdd {
			sizes = []int{8, 8, 8}
		}
		for _, size := range sizes {
			transfer(t, a, b, qa, qb, op, size, id, 10*time.Minute)
			id++
		}
	}
	noMoreWC(t, a.scq, time.Second)
	noMoreWC(t, b.rcq, time.Second)
	sa, sb := a.e.Stats().Snapshot(), b.e.Stats().Snapshot()
	t.Logf("A: retransmits %d timeouts %d naks rcvd %v icrc errors %d trains tx %d rx %d; B: dup %d oos %d naks sent %v icrc errors %d",
		sa.Retransmits, sa.Timeouts, sa.NAKsRcvd, sa.ICRCErrors, sa.TxTrains, sb.RxTrains, sb.DuplicateRequests, sb.OutOfSequence, sb.NAKsSent, sb.ICRCErrors)
}
