package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/verbserr"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/impair"
)

// wireEvent is one packet a wireLog saw cross the link it observes.
type wireEvent struct {
	dir    impair.Dir
	op     bth.Opcode
	psn    bth.PSN
	destQP uint32
}

// wireLog records, in order, every packet through a Lossy link (as its
// DropFn) and drops the packets the wrapped side sends while hold is set.
// A packet received is logged before the engine reads it, and a packet sent
// after the engine wrote it, so "received before sent" in the log is a
// causal order.
type wireLog struct {
	mu   sync.Mutex
	evs  []wireEvent
	hold atomic.Bool
}

func (l *wireLog) dropFn(d impair.Dir, b []byte) bool {
	if d == impair.Send && l.hold.Load() {
		return true
	}
	pkt, err := bth.Parse(b)
	if err != nil {
		return false
	}
	l.mu.Lock()
	l.evs = append(l.evs, wireEvent{dir: d, op: pkt.Opcode(), psn: pkt.PSN(), destQP: pkt.DestQP()})
	l.mu.Unlock()
	return false
}

func (l *wireLog) events() []wireEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]wireEvent(nil), l.evs...)
}

// find returns the index of the first event matching f, or -1.
func (l *wireLog) find(f func(wireEvent) bool) int {
	for i, ev := range l.events() {
		if f(ev) {
			return i
		}
	}
	return -1
}

// observedPair is pair(t, nil) with a wireLog on each side's link; opts
// configure both engines.
func observedPair(t *testing.T, opts ...func(*Config)) (a, b *node, la, lb *wireLog) {
	t.Helper()
	la, lb = &wireLog{}, &wireLog{}
	pa, pb := link.Pipe(addrA, addrB)
	a = newNode(t, impair.NewLossy(pa, impair.LossConfig{DropFn: la.dropFn}), 2, opts...)
	b = newNode(t, impair.NewLossy(pb, impair.LossConfig{DropFn: lb.dropFn}), 2, opts...)
	return a, b, la, lb
}

func firstSQPSN(q *QP) bth.PSN { return bth.PSN(0x123400 + q.QPN()) }

func isReadOrAtomicOp(op verbs.WROpcode) bool {
	return op == verbs.WRRDMARead || op == verbs.WRAtomicCmpAndSwp || op == verbs.WRAtomicFetchAndAdd
}

// TestFencedWRWaitsForPriorReadsAndAtomics: a WR with IBV_SEND_FENCE is not
// started until every RDMA READ and atomic posted before it on the QP has
// completed (IBV_SEND_FENCE, rxe rxe_wqe_is_fenced). On the wire, the fenced
// WR's first request packet leaves only after the last response of each
// prior READ/atomic came back, and a fenced WR that gathers from the prior
// WRs' local targets carries the data they fetched.
func TestFencedWRWaitsForPriorReadsAndAtomics(t *testing.T) {
	const (
		readLen = 4096 // 4 response packets at MTU 1024
		slot    = 8192
	)
	cases := []struct {
		name   string
		prior  []verbs.WROpcode
		fenced verbs.WROpcode
		fence  bool
	}{
		{"READ then fenced WRITE", []verbs.WROpcode{verbs.WRRDMARead}, verbs.WRRDMAWrite, true},
		{"READ then fenced SEND", []verbs.WROpcode{verbs.WRRDMARead}, verbs.WRSend, true},
		{"READ then fenced READ", []verbs.WROpcode{verbs.WRRDMARead}, verbs.WRRDMARead, true},
		{"two READs then fenced WRITE", []verbs.WROpcode{verbs.WRRDMARead, verbs.WRRDMARead}, verbs.WRRDMAWrite, true},
		{"FETCH_ADD then fenced SEND", []verbs.WROpcode{verbs.WRAtomicFetchAndAdd}, verbs.WRSend, true},
		{"CMP_SWP then fenced WRITE", []verbs.WROpcode{verbs.WRAtomicCmpAndSwp}, verbs.WRRDMAWrite, true},
		{"READ, FETCH_ADD, READ then fenced WRITE", []verbs.WROpcode{verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd, verbs.WRRDMARead}, verbs.WRRDMAWrite, true},
		// Without the flag the WRITE may start at once; only logged.
		{"READ then unfenced WRITE", []verbs.WROpcode{verbs.WRRDMARead}, verbs.WRRDMAWrite, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b, la, _ := observedPair(t)
				defer a.close(t)
				defer b.close(t)
				qa, qb := rcPair(t, a, b, rcOpts{})
				all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
				local := a.mem.reg(1, make([]byte, 10*slot), verbs.AccessLocalWrite)
				remote := b.mem.reg(1, make([]byte, 10*slot), all)
				recv := b.mem.reg(1, make([]byte, 4*slot), verbs.AccessLocalWrite)
				// Slot 9 of remote: what a fenced READ fetches.
				copy(remote.Buf[9*slot:], pattern(readLen, 99))

				psn := firstSQPSN(qa)
				var wrs []verbs.SendWR
				var lastPSNs []bth.PSN // last PSN of each prior WR's response
				var dep []verbs.SGE    // the fenced WR's SGL: the prior targets
				var want []byte        // what the prior WRs fetch, in order
				for i, op := range tc.prior {
					wr := verbs.SendWR{WRID: uint64(i + 1), Opcode: op, Flags: verbs.SendSignaled, RKey: remote.RKey,
						RemoteAddr: remote.Addr + uint64(i*slot)}
					n := readLen
					switch op {
					case verbs.WRRDMARead:
						copy(remote.Buf[i*slot:], pattern(readLen, byte(i+1)))
						want = append(want, pattern(readLen, byte(i+1))...)
					case verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp:
						n = 8
						orig := 0x1122334455667700 + uint64(i)
						binary.NativeEndian.PutUint64(remote.Buf[i*slot:], orig)
						want = binary.NativeEndian.AppendUint64(want, orig)
						wr.CompareAdd, wr.Swap = 5, 7
						if op == verbs.WRAtomicCmpAndSwp {
							wr.CompareAdd = orig
						}
					}
					wr.SGL = []verbs.SGE{local.sge(i*slot, n)}
					dep = append(dep, local.sge(i*slot, n))
					psn = psn.Add(int(numPackets(op, uint32(n), 1024)))
					lastPSNs = append(lastPSNs, psn.Add(-1))
					wrs = append(wrs, wr)
				}
				fencedPSN := psn
				f := verbs.SendWR{WRID: 100, Opcode: tc.fenced, Flags: verbs.SendSignaled, SGL: dep, RKey: remote.RKey,
					RemoteAddr: remote.Addr + 8*slot}
				if tc.fence {
					f.Flags |= verbs.SendFence
				}
				switch tc.fenced {
				case verbs.WRRDMARead:
					// Overwrites the prior READ's target with other data.
					f.SGL, f.RemoteAddr = []verbs.SGE{local.sge(0, readLen)}, remote.Addr+9*slot
				case verbs.WRSend:
					if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 7, SGL: []verbs.SGE{recv.sge(0, 4*slot)}}}); err != nil {
						t.Fatal(err)
					}
				}
				wrs = append(wrs, f)
				qb.Query() // orders our writes to b's memory before b's shard reads them
				if n, err := qa.PostSend(wrs); err != nil || n != len(wrs) {
					t.Fatalf("PostSend = %d, %v", n, err)
				}
				wcs := waitWC(t, a.scq, len(wrs), 10*time.Second)
				for i, w := range wcs {
					if w.Status != verbs.WCSuccess || w.WRID != wrs[i].WRID {
						t.Fatalf("completion %d: %s, want wr %d success", i, wcString(w), wrs[i].WRID)
					}
				}

				evs := la.events()
				sendIdx := la.find(func(ev wireEvent) bool {
					return ev.dir == impair.Send && ev.op.IsRequest() && ev.psn == fencedPSN
				})
				if sendIdx < 0 {
					t.Fatalf("fenced WR's first packet (PSN %#x) never sent: %v", fencedPSN, evs)
				}
				for i, last := range lastPSNs {
					respIdx := la.find(func(ev wireEvent) bool {
						return ev.dir == impair.Recv && ev.psn == last && (ev.op == bth.RCReadResponseLast ||
							ev.op == bth.RCReadResponseOnly || ev.op == bth.RCAtomicAck)
					})
					if respIdx < 0 {
						t.Fatalf("last response of prior wr %d (PSN %#x) never received", i+1, last)
					}
					if !tc.fence {
						t.Logf("unfenced: WR's first packet is event %d, the READ's last response event %d", sendIdx, respIdx)
						continue
					}
					if sendIdx < respIdx {
						t.Errorf("fenced %s (PSN %#x) sent as event %d, before the last response of prior %s (PSN %#x, event %d)",
							opNames[tc.fenced], fencedPSN, sendIdx, opNames[tc.prior[i]], last, respIdx)
					}
				}
				if !tc.fence {
					return
				}
				qb.Query() // orders b's shard writes before our reads
				switch tc.fenced {
				case verbs.WRRDMAWrite:
					if !bytes.Equal(remote.Buf[8*slot:8*slot+len(want)], want) {
						t.Error("fenced WRITE did not carry the data the prior READs/atomics fetched")
					}
				case verbs.WRSend:
					w := waitWC(t, b.rcq, 1, time.Second)[0]
					if w.Status != verbs.WCSuccess || w.ByteLen != uint32(len(want)) || !bytes.Equal(recv.Buf[:len(want)], want) {
						t.Errorf("fenced SEND: receive %s, or data differs from what the prior WRs fetched", wcString(w))
					}
				case verbs.WRRDMARead:
					if !bytes.Equal(local.Buf[:readLen], pattern(readLen, 99)) {
						t.Error("fenced READ's data was overwritten by the prior READ")
					}
				}
			})
		})
	}
}

// TestMaxRDAtomicBoundsOutstandingReadsAndAtomics: the requester keeps at
// most max_rd_atomic (QPAttr.MaxRDAtomic, the initiator depth) RDMA READ and
// atomic requests outstanding: one is outstanding from its request until its
// last response arrives (rxe qp->req.rd_atomic). Seen on the wire.
func TestMaxRDAtomicBoundsOutstandingReadsAndAtomics(t *testing.T) {
	reads := []verbs.WROpcode{verbs.WRRDMARead, verbs.WRRDMARead, verbs.WRRDMARead, verbs.WRRDMARead}
	mixed := []verbs.WROpcode{verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp, verbs.WRRDMARead}
	cases := []struct {
		name  string
		maxRD uint8
		ops   []verbs.WROpcode
	}{
		{"max_rd_atomic 1, 4 READs", 1, reads},
		{"max_rd_atomic 2, 4 READs", 2, reads},
		{"max_rd_atomic 1, READs and atomics", 1, mixed},
		{"max_rd_atomic 3, READs and atomics", 3, mixed},
		{"max_rd_atomic 16, 4 READs", 16, reads},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const readLen, slot = 3000, 4096 // 3 response packets each
				a, b, la, _ := observedPair(t)
				defer a.close(t)
				defer b.close(t)
				qa, _ := rcPair(t, a, b, rcOpts{maxRD: tc.maxRD})
				if at, _ := qa.Query(); at.MaxRDAtomic != tc.maxRD {
					t.Fatalf("max_rd_atomic %d, want %d", at.MaxRDAtomic, tc.maxRD)
				}
				local := a.mem.reg(1, make([]byte, len(tc.ops)*slot), verbs.AccessLocalWrite)
				remote := b.mem.reg(1, make([]byte, len(tc.ops)*slot), verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
				var wrs []verbs.SendWR
				for i, op := range tc.ops {
					n := readLen
					if op != verbs.WRRDMARead {
						n = 8
					} else {
						copy(remote.Buf[i*slot:], pattern(readLen, byte(i)))
					}
					wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: op, Flags: verbs.SendSignaled, SGL: []verbs.SGE{local.sge(i*slot, n)},
						RemoteAddr: remote.Addr + uint64(i*slot), RKey: remote.RKey, CompareAdd: 1})
				}
				// Posted in SQD, where the send queue holds WRs without starting
				// them, so that all are there when the requester starts: posted
				// in RTS, a READ's response could come back before the last WR
				// is queued, and the limit would not be reached.
				if err := qa.Modify(&verbs.QPAttr{State: verbs.QPSSQD}, verbs.QPAttrState); err != nil {
					t.Fatal(err)
				}
				if _, err := qa.PostSend(wrs); err != nil {
					t.Fatal(err)
				}
				if err := qa.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.QPAttrState); err != nil {
					t.Fatal(err)
				}
				for i, w := range waitWC(t, a.scq, len(wrs), 10*time.Second) {
					if w.Status != verbs.WCSuccess || w.WRID != uint64(i) {
						t.Fatalf("completion %d: %s", i, wcString(w))
					}
				}
				out, most, reqs := 0, 0, 0
				for _, ev := range la.events() {
					switch {
					case ev.dir == impair.Send && (ev.op == bth.RCReadRequest || ev.op == bth.RCFetchAdd || ev.op == bth.RCCompareSwap):
						out++
						reqs++
						most = max(most, out)
						if out > int(tc.maxRD) {
							t.Errorf("request %d (%v PSN %#x) sent with %d READ/atomic outstanding, max_rd_atomic %d",
								reqs, ev.op, ev.psn, out, tc.maxRD)
						}
					case ev.dir == impair.Recv && (ev.op == bth.RCReadResponseLast || ev.op == bth.RCReadResponseOnly || ev.op == bth.RCAtomicAck):
						out--
					}
				}
				if reqs != len(tc.ops) {
					t.Errorf("%d READ/atomic requests on the wire, want %d (no retransmission on a clean link)", reqs, len(tc.ops))
				}
				// All WRs are posted at once, so the limit is reached.
				if w := min(int(tc.maxRD), len(tc.ops)); most != w {
					t.Errorf("at most %d outstanding, want %d", most, w)
				}
				for i, op := range tc.ops {
					if op == verbs.WRRDMARead && !bytes.Equal(local.Buf[i*slot:i*slot+readLen], pattern(readLen, byte(i))) {
						t.Errorf("READ %d data differs", i)
					}
				}
			})
		})
	}
}

// TestSQSigAllSignalsEveryWR: a QP created with sq_sig_all
// (QPInitAttr.SQSigAll) posts a completion for every send WR, signaled or
// not (ibv_create_qp(3), rxe do_complete).
func TestSQSigAllSignalsEveryWR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		qa, qb := rcPair(t, a, b, rcOpts{sqSigAll: true})
		if _, init := qa.Query(); !init.SQSigAll {
			t.Fatal("Query lost sq_sig_all")
		}
		local := a.mem.reg(1, pattern(4096, 1), verbs.AccessLocalWrite)
		remote := b.mem.reg(1, make([]byte, 4096), verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
		recv := b.mem.reg(1, make([]byte, 4096), verbs.AccessLocalWrite)
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{recv.sge(0, 4096)}}}); err != nil {
			t.Fatal(err)
		}
		ops := []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRSend, verbs.WRRDMARead, verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp, verbs.WRRDMAWrite, verbs.WRRDMAWrite}
		var wrs []verbs.SendWR
		for i, op := range ops {
			n := 100
			if isReadOrAtomicOp(op) && op != verbs.WRRDMARead {
				n = 8
			}
			wrs = append(wrs, verbs.SendWR{WRID: uint64(i), Opcode: op, SGL: []verbs.SGE{local.sge(i*256, n)}, // no SendSignaled
				RemoteAddr: remote.Addr + uint64(i*256), RKey: remote.RKey})
		}
		if _, err := qa.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		for i, w := range waitWC(t, a.scq, len(ops), 10*time.Second) {
			if w.Status != verbs.WCSuccess || w.WRID != uint64(i) || w.Opcode != wcOpcode(ops[i]) {
				t.Errorf("completion %d: %s, want wr %d success %v", i, wcString(w), i, wcOpcode(ops[i]))
			}
		}
		noMoreWC(t, a.scq, 10*time.Millisecond)
	})
}

// TestUnsignaledWRsRetireWithSignaledOnes: without sq_sig_all only signaled
// WRs (and failed ones) complete, but unsignaled WRs are still retired from
// the send queue when a later WR completes (rxe do_complete): posting many more
// unsignaled WRs than max_send_wr, a signaled one closing each full queue,
// never hits ENOMEM once that signaled WR's completion is polled.
func TestUnsignaledWRsRetireWithSignaledOnes(t *testing.T) {
	const depth, rounds = 8, 6
	for _, op := range []verbs.WROpcode{verbs.WRRDMAWrite, verbs.WRRDMARead, verbs.WRSend} {
		t.Run(opNames[op], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b := pair(t, nil)
				defer a.close(t)
				defer b.close(t)
				qa, qb := rcPair(t, a, b, rcOpts{sendWR: depth, recvWR: depth * rounds})
				local := a.mem.reg(1, pattern(64, 1), verbs.AccessLocalWrite)
				remote := b.mem.reg(1, make([]byte, 64), verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
				if op == verbs.WRSend {
					recv := make([]verbs.RecvWR, depth*rounds)
					for i := range recv {
						recv[i].WRID = uint64(i)
					}
					if _, err := qb.PostRecv(recv); err != nil {
						t.Fatal(err)
					}
				}
				id := uint64(0)
				for r := 0; r < rounds; r++ {
					wrs := make([]verbs.SendWR, depth)
					for i := range wrs {
						wrs[i] = verbs.SendWR{WRID: id, Opcode: op, RemoteAddr: remote.Addr, RKey: remote.RKey}
						if op != verbs.WRSend {
							wrs[i].SGL = []verbs.SGE{local.sge(0, 16)}
						}
						id++
					}
					wrs[depth-1].Flags = verbs.SendSignaled // every depth-th WR
					if n, err := qa.PostSend(wrs); err != nil || n != depth {
						t.Fatalf("round %d: PostSend = %d, %v (unsignaled WRs not retired?)", r, n, err)
					}
					w := waitWC(t, a.scq, 1, 10*time.Second)[0]
					if w.Status != verbs.WCSuccess || w.WRID != id-1 {
						t.Fatalf("round %d: completion %s, want only the signaled wr %d", r, wcString(w), id-1)
					}
				}
				noMoreWC(t, a.scq, 10*time.Millisecond)
				if op == verbs.WRSend {
					waitWC(t, b.rcq, depth*rounds, time.Second)
				}
			})
		})
	}
}

// TestInlineDataCopiedAtPostTime: with IBV_SEND_INLINE the data is copied
// when PostSend runs, so the caller may overwrite the buffer as soon as it
// returns. The first transmissions are dropped while the buffer is
// overwritten, so every packet that reaches the peer is built after the
// overwrite: it must still carry the original bytes.
func TestInlineDataCopiedAtPostTime(t *testing.T) {
	cases := []struct {
		name  string
		op    verbs.WROpcode
		mtu   verbs.MTU
		sizes []int // one SGE each
	}{
		{"SEND one packet", verbs.WRSend, verbs.MTU1024, []int{200}},
		{"SEND_IMM two SGEs", verbs.WRSendWithImm, verbs.MTU1024, []int{100, 156}},
		{"WRITE one packet", verbs.WRRDMAWrite, verbs.MTU1024, []int{256}},
		{"SEND four packets", verbs.WRSend, verbs.MTU256, []int{1000}},
		{"WRITE_IMM three packets three SGEs", verbs.WRRDMAWriteWithImm, verbs.MTU256, []int{300, 1, 400}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b, la, _ := observedPair(t, func(c *Config) { c.MaxInline = 1024 })
				defer a.close(t)
				defer b.close(t)
				o := rcOpts{mtu: tc.mtu, maxInline: 1024, timeout: 8}
				qa, qb := rcPair(t, a, b, o)
				total := 0
				for _, n := range tc.sizes {
					total += n
				}
				src := a.mem.reg(1, pattern(total+64, 5), verbs.AccessLocalWrite)
				want := bytes.Clone(src.Buf[:total])
				remote := b.mem.reg(1, make([]byte, total), verbs.AccessRemoteWrite)
				recv := b.mem.reg(1, make([]byte, total), verbs.AccessLocalWrite)
				wr := verbs.SendWR{WRID: 1, Opcode: tc.op, Flags: verbs.SendSignaled | verbs.SendInline, Imm: 0x55,
					RemoteAddr: remote.Addr, RKey: remote.RKey}
				off := 0
				for _, n := range tc.sizes {
					wr.SGL = append(wr.SGL, src.sge(off, n))
					off += n
				}
				if tc.op != verbs.WRRDMAWrite {
					if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 2, SGL: []verbs.SGE{recv.sge(0, total)}}}); err != nil {
						t.Fatal(err)
					}
				}
				la.hold.Store(true)
				if _, err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
					t.Fatal(err)
				}
				for i := range src.Buf {
					src.Buf[i] = 0xEE
				}
				time.Sleep(time.Millisecond) // the first transmission is dropped
				la.hold.Store(false)
				if w := waitWC(t, a.scq, 1, 10*time.Second)[0]; w.Status != verbs.WCSuccess {
					t.Fatalf("send completion %s", wcString(w))
				}
				qb.Query()
				got := remote.Buf
				if tc.op != verbs.WRRDMAWrite {
					w := waitWC(t, b.rcq, 1, time.Second)[0]
					if w.Status != verbs.WCSuccess {
						t.Fatalf("receive completion %s", wcString(w))
					}
					if tc.op != verbs.WRRDMAWriteWithImm {
						got = recv.Buf
						if w.ByteLen != uint32(total) {
							t.Fatalf("receive completion %s, want %d bytes", wcString(w), total)
						}
					}
				}
				if !bytes.Equal(got, want) {
					t.Fatal("the peer got the bytes written after PostSend, not those at post time")
				}
				if a.e.Stats().Retransmits.Load() == 0 {
					t.Fatal("no retransmission: the scenario was not exercised")
				}
			})
		})
	}
}

// TestInlineAboveMaxInlineIsEINVAL: an inline WR above the QP's
// max_inline_data, or inline on a READ or atomic, fails at post time with
// EINVAL, bad_wr naming it and the WRs before it posted (libibverbs
// ibv_post_send, rxe validate_send_wr).
func TestInlineAboveMaxInlineIsEINVAL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		qa, _ := rcPair(t, a, b, rcOpts{maxInline: 64})
		src := a.mem.reg(1, pattern(256, 1), verbs.AccessLocalWrite)
		remote := b.mem.reg(1, make([]byte, 256), verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
		ok := verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline, SGL: []verbs.SGE{src.sge(0, 64)},
			RemoteAddr: remote.Addr, RKey: remote.RKey}
		cases := []struct {
			name string
			bad  verbs.SendWR
		}{
			{"65 bytes", verbs.SendWR{Opcode: verbs.WRRDMAWrite, Flags: verbs.SendInline, SGL: []verbs.SGE{src.sge(0, 65)}}},
			{"33+32 bytes in two SGEs", verbs.SendWR{Opcode: verbs.WRSend, Flags: verbs.SendInline, SGL: []verbs.SGE{src.sge(0, 33), src.sge(100, 32)}}},
			{"inline READ", verbs.SendWR{Opcode: verbs.WRRDMARead, Flags: verbs.SendInline, SGL: []verbs.SGE{src.sge(0, 8)}}},
			{"inline FETCH_ADD", verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, Flags: verbs.SendInline, SGL: []verbs.SGE{src.sge(0, 8)}}},
		}
		id := uint64(0)
		for _, tc := range cases {
			id++
			good := ok
			good.WRID = id
			bad := tc.bad
			bad.RemoteAddr, bad.RKey, bad.WRID = remote.Addr, remote.RKey, 1000+id
			n, err := qa.PostSend([]verbs.SendWR{good, bad, good})
			var e *verbserr.Error
			if n != 1 || !errors.Is(err, syscall.EINVAL) || !errors.As(err, &e) || e.Index != 1 {
				t.Fatalf("%s: PostSend = %d, %v; want 1, EINVAL at wr 1", tc.name, n, err)
			}
			if w := waitWC(t, a.scq, 1, time.Second)[0]; w.Status != verbs.WCSuccess || w.WRID != id {
				t.Fatalf("%s: completion %s, want the WR before the bad one", tc.name, wcString(w))
			}
		}
		noMoreWC(t, a.scq, 10*time.Millisecond)
		if at, _ := qa.Query(); at.State != verbs.QPSRTS {
			t.Fatalf("state %v after rejected posts, want RTS", at.State)
		}
	})
}

// TestInlineSkipsLocalKeyChecks: inline data is copied at post time and its
// SGEs' lkeys are not checked for PD or access (libibverbs: "the lkey won't
// be checked"): a buffer registered in another PD with no access rights is
// sent. Go has no raw pointers, so unlike libibverbs the SGE must still name
// registered memory: an lkey naming no region is EINVAL at post time
// (documented in PostSend).
func TestInlineSkipsLocalKeyChecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		qa, qb := rcPair(t, a, b, rcOpts{maxInline: 128})
		foreign := a.mem.reg(7, pattern(100, 3), 0) // other PD, no access
		recv := b.mem.reg(1, make([]byte, 100), verbs.AccessLocalWrite)
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 9, SGL: []verbs.SGE{recv.sge(0, 100)}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := qa.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
			SGL: []verbs.SGE{foreign.sge(0, 100)}}}); err != nil {
			t.Fatal(err)
		}
		if w := waitWC(t, a.scq, 1, time.Second)[0]; w.Status != verbs.WCSuccess {
			t.Fatalf("send %s", wcString(w))
		}
		if w := waitWC(t, b.rcq, 1, time.Second)[0]; w.Status != verbs.WCSuccess || w.ByteLen != 100 {
			t.Fatalf("recv %s", wcString(w))
		}
		qb.Query()
		if !bytes.Equal(recv.Buf, foreign.Buf) {
			t.Fatal("data differs")
		}
		_, err := qa.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendInline,
			SGL: []verbs.SGE{{Addr: 0x1234, Length: 8, LKey: 0}}}})
		if !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("inline SGE naming no registered memory: %v, want EINVAL", err)
		}
	})
}

// TestSendWithInvReportsInvalidatedRKey: a SEND_WITH_INV carries the rkey in
// an IETH on its last packet, the receive completion has IBV_WC_WITH_INV and
// that rkey in invalidated_rkey (rxe do_complete), and the window it names
// (bound to the receiving QP) is invalidated: its rkey resolves no more.
func TestSendWithInvReportsInvalidatedRKey(t *testing.T) {
	for _, size := range []int{0, 100, 3000} {
		t.Run(fmt.Sprintf("%d bytes", size), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b, _, lb := observedPair(t)
				defer a.close(t)
				defer b.close(t)
				qa, qb := rcPair(t, a, b, rcOpts{})
				mr := b.mem.reg(1, make([]byte, 64), verbs.AccessLocalWrite|verbs.AccessMWBind)
				b.mem.bindQP = true
				if err := b.mem.BindMW(&MWBind{NewRKey: 0x501, MRLKey: mr.LKey, Addr: mr.Addr, Length: 64,
					Access: verbs.AccessRemoteWrite, QPN: qb.qpn, PD: 1}); err != nil {
					t.Fatal(err)
				}
				target := b.mem.RemoteRegion(0x501) // the window named
				src := a.mem.reg(1, pattern(size, 4), verbs.AccessLocalWrite)
				recv := b.mem.reg(1, make([]byte, 4096), verbs.AccessLocalWrite)
				if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 5, SGL: []verbs.SGE{recv.sge(0, 4096)}}}); err != nil {
					t.Fatal(err)
				}
				wr := verbs.SendWR{WRID: 1, Opcode: verbs.WRSendWithInv, Flags: verbs.SendSignaled, InvRKey: target.RKey}
				if size > 0 {
					wr.SGL = []verbs.SGE{src.sge(0, size)}
				}
				if _, err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
					t.Fatal(err)
				}
				if w := waitWC(t, a.scq, 1, 10*time.Second)[0]; w.Status != verbs.WCSuccess || w.Opcode != verbs.WCSend {
					t.Fatalf("send completion %s", wcString(w))
				}
				w := waitWC(t, b.rcq, 1, time.Second)[0]
				if w.Status != verbs.WCSuccess || w.WRID != 5 || w.Opcode != verbs.WCRecv || w.ByteLen != uint32(size) {
					t.Fatalf("receive completion %s", wcString(w))
				}
				if w.Flags&verbs.WCWithInv == 0 || w.InvalidatedRKey != target.RKey {
					t.Fatalf("receive flags %v invalidated_rkey %#x, want WITH_INV and %#x", w.Flags, w.InvalidatedRKey, target.RKey)
				}
				if w.Flags&verbs.WCWithImm != 0 {
					t.Fatalf("receive flags %v: WITH_IMM set on SEND_WITH_INV", w.Flags)
				}
				if b.mem.RemoteRegion(target.RKey) != nil {
					t.Fatal("the window's rkey still resolves after the SEND_WITH_INV")
				}
				qb.Query()
				if !bytes.Equal(recv.Buf[:size], src.Buf) {
					t.Fatal("data differs")
				}
				wantLast := bth.RCSendOnlyInv
				if size > 1024 {
					wantLast = bth.RCSendLastInv
				}
				if lb.find(func(ev wireEvent) bool { return ev.dir == impair.Recv && ev.op == wantLast }) < 0 {
					t.Fatalf("no %v on the wire", wantLast)
				}
			})
		})
	}
}

// TestAtomicErrorsNAKAndLeaveTargetUntouched: an atomic that fails the
// responder's checks is NAKed, completes in error, and changes no memory on
// either side. As rxe: an rkey that is unknown or whose MR lacks
// REMOTE_ATOMIC is an R_Key violation (NAK remote access error,
// REM_ACCESS_ERR, rxe check_rkey); a responder QP without REMOTE_ATOMIC in
// its access flags (rxe check_op_valid, RESPST_ERR_UNSUPPORTED_OPCODE) and
// a VA not 8-byte aligned (RESPST_ERR_MISALIGNED_ATOMIC) are both class C
// in rxe's responder: NAK invalid request,
// REM_INV_REQ_ERR. The responder, with no receive WR to report on, raises
// the affiliated QP_ACCESS_ERR / QP_REQ_ERR.
func TestAtomicErrorsNAKAndLeaveTargetUntouched(t *testing.T) {
	const all = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	cases := []struct {
		name     string
		mrAccess verbs.Access
		qpAccess verbs.Access // responder QP's access flags
		rkey     func(r *Region) uint32
		vaOff    uint64
		status   verbs.WCStatus
		nak      NAKKind
		event    verbs.EventType
	}{
		{"bad rkey", all, all, func(r *Region) uint32 { return 0xdead }, 8, verbs.WCRemAccessErr, NAKRemoteAccess, verbs.EventQPAccessErr},
		{"MR without REMOTE_ATOMIC", verbs.AccessRemoteWrite | verbs.AccessRemoteRead, all, nil, 8, verbs.WCRemAccessErr, NAKRemoteAccess, verbs.EventQPAccessErr},
		{"QP without REMOTE_ATOMIC", all, verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead, nil, 8, verbs.WCRemInvReqErr, NAKInvalidReq, verbs.EventQPReqErr},
		{"VA misaligned by 4", all, all, nil, 12, verbs.WCRemInvReqErr, NAKInvalidReq, verbs.EventQPReqErr},
		{"VA misaligned by 1", all, all, nil, 9, verbs.WCRemInvReqErr, NAKInvalidReq, verbs.EventQPReqErr},
	}
	for _, tc := range cases {
		for _, op := range []verbs.WROpcode{verbs.WRAtomicFetchAndAdd, verbs.WRAtomicCmpAndSwp} {
			t.Run(tc.name+"/"+opNames[op], func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					a, b := pair(t, nil)
					defer a.close(t)
					defer b.close(t)
					qa := a.createQP(t, verbs.QPTypeRC, rcOpts{})
					qb := b.createQP(t, verbs.QPTypeRC, rcOpts{})
					connect(t, qa, b.addr, qb.QPN(), rcOpts{})
					connect(t, qb, a.addr, qa.QPN(), rcOpts{access: tc.qpAccess})
					remote := b.mem.reg(1, pattern(32, 9), tc.mrAccess)
					before := bytes.Clone(remote.Buf)
					local := a.mem.reg(1, pattern(16, 2), verbs.AccessLocalWrite)
					localBefore := bytes.Clone(local.Buf)
					rkey := remote.RKey
					if tc.rkey != nil {
						rkey = tc.rkey(remote)
					}
					va := remote.Addr + tc.vaOff
					// Compare with the word at va (as the engine would read
					// it), so a swap would happen if the check were missed.
					var cmp uint64
					if tc.vaOff+8 <= 32 {
						cmp = binary.NativeEndian.Uint64(remote.Buf[tc.vaOff:])
					}
					wr := verbs.SendWR{WRID: 1, Opcode: op, Flags: verbs.SendSignaled, SGL: []verbs.SGE{local.sge(0, 8)},
						RemoteAddr: va, RKey: rkey, CompareAdd: cmp, Swap: 0x0102030405060708}
					if op == verbs.WRAtomicFetchAndAdd {
						wr.CompareAdd = 1
					}
					follow := verbs.SendWR{WRID: 2, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled}
					if _, err := qa.PostSend([]verbs.SendWR{wr, follow}); err != nil {
						t.Fatal(err)
					}
					wcs := waitWC(t, a.scq, 2, 10*time.Second)
					if wcs[0].WRID != 1 || wcs[0].Status != tc.status {
						t.Fatalf("completion %s, want %v", wcString(wcs[0]), tc.status)
					}
					if wcs[1].WRID != 2 || wcs[1].Status != verbs.WCWRFlushErr {
						t.Fatalf("second completion %s, want WR_FLUSH_ERR", wcString(wcs[1]))
					}
					qb.Query()
					if !bytes.Equal(remote.Buf, before) {
						t.Fatalf("target memory changed: % x, was % x", remote.Buf, before)
					}
					if !bytes.Equal(local.Buf, localBefore) {
						t.Fatal("local result buffer written")
					}
					s := b.e.Stats().Snapshot()
					if s.NAKsSent[tc.nak] != 1 {
						t.Fatalf("NAKs sent %v, want one %v", s.NAKsSent, tc.nak)
					}
					if at, _ := qb.Query(); at.State != verbs.QPSErr {
						t.Fatalf("responder state %v, want ERR (class C)", at.State)
					}
					if n := b.countEvents(tc.event, qb.QPN()); n != 1 {
						t.Fatalf("%d events %d on the responder, want 1", n, tc.event)
					}
				})
			})
		}
	}
}

// TestSRQFetchedOnlyInRTRAndRTS: a QP takes receive WRs from its SRQ only
// while it can receive, in RTR or RTS; in RESET, INIT or ERR inbound requests
// are dropped and the SRQ is left alone (ibv_post_srq_recv(3): a QP takes
// WRs from its SRQ only once it can receive; rxe drops requests to a QP
// below RTR or in ERR).
// Two QPs share an SRQ: the one under test, and one in RTS that still takes
// WRs afterwards.
func TestSRQFetchedOnlyInRTRAndRTS(t *testing.T) {
	cases := []struct {
		state verbs.QPState
		fetch bool
	}{
		{verbs.QPSReset, false},
		{verbs.QPSInit, false},
		{verbs.QPSRTR, true},
		{verbs.QPSRTS, true},
		{verbs.QPSErr, false},
	}
	for _, tc := range cases {
		t.Run(tc.state.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, b, _, lb := observedPair(t)
				defer a.close(t)
				defer b.close(t)
				s, err := srq.New(&verbs.SRQAttr{MaxWR: 8, MaxSGE: 1}, srq.Caps{MaxWR: 64, MaxSGE: 4})
				if err != nil {
					t.Fatal(err)
				}
				const posted = 4
				dst := b.mem.reg(1, make([]byte, posted*64), verbs.AccessLocalWrite)
				for i := 0; i < posted; i++ {
					if _, err := s.PostRecv([]verbs.RecvWR{{WRID: uint64(100 + i), SGL: []verbs.SGE{dst.sge(i*64, 64)}}}); err != nil {
						t.Fatal(err)
					}
				}
				o := rcOpts{retry: 2, timeout: 8}
				// Control pair: RTS on both sides.
				qa1 := a.createQP(t, verbs.QPTypeRC, o)
				qb1 := b.createQP(t, verbs.QPTypeRC, rcOpts{srq: s})
				connect(t, qa1, b.addr, qb1.QPN(), o)
				connect(t, qb1, a.addr, qa1.QPN(), o)
				// Pair under test: qb2 in tc.state.
				qa2 := a.createQP(t, verbs.QPTypeRC, o)
				qb2 := b.createQP(t, verbs.QPTypeRC, rcOpts{srq: s})
				connect(t, qa2, b.addr, qb2.QPN(), o)
				switch tc.state {
				case verbs.QPSReset:
				case verbs.QPSInit:
					if err := qb2.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: 1, AccessFlags: verbs.AccessLocalWrite},
						verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
						t.Fatal(err)
					}
				case verbs.QPSRTR:
					connect(t, qb2, a.addr, qa2.QPN(), rcOpts{skipRTS: true})
				case verbs.QPSRTS:
					connect(t, qb2, a.addr, qa2.QPN(), o)
				case verbs.QPSErr:
					connect(t, qb2, a.addr, qa2.QPN(), o)
					if err := qb2.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.QPAttrState); err != nil {
						t.Fatal(err)
					}
				}
				if at, _ := qb2.Query(); at.State != tc.state {
					t.Fatalf("QP under test in %v, want %v", at.State, tc.state)
				}
				src := a.mem.reg(1, pattern(32, 1), verbs.AccessLocalWrite)
				if _, err := qa2.PostSend([]verbs.SendWR{{WRID: 1, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 32)}}}); err != nil {
					t.Fatal(err)
				}
				w := waitWC(t, a.scq, 1, 10*time.Second)[0]
				if lb.find(func(ev wireEvent) bool { return ev.dir == impair.Recv && ev.destQP == qb2.QPN() }) < 0 {
					t.Fatal("no packet for the QP under test reached its engine: scenario not exercised")
				}
				if tc.fetch {
					if w.Status != verbs.WCSuccess {
						t.Fatalf("SEND to a QP in %v: %s, want success", tc.state, wcString(w))
					}
					r := waitWC(t, b.rcq, 1, time.Second)[0]
					if r.Status != verbs.WCSuccess || r.QPNum != qb2.QPN() || r.WRID != 100 {
						t.Fatalf("receive %s (qp %#x), want wr 100 on qp %#x", wcString(r), r.QPNum, qb2.QPN())
					}
					if n := s.Len(); n != posted-1 {
						t.Fatalf("SRQ holds %d WRs, want %d", n, posted-1)
					}
				} else {
					if w.Status != verbs.WCRetryExcErr {
						t.Fatalf("SEND to a QP in %v: %s, want RETRY_EXC_ERR (requests dropped)", tc.state, wcString(w))
					}
					noMoreWC(t, b.rcq, time.Millisecond)
					if n := s.Len(); n != posted {
						t.Fatalf("SRQ holds %d WRs after requests to a QP in %v, want %d untouched", n, tc.state, posted)
					}
				}
				// The RTS QP on the same SRQ takes the next WR.
				left := s.Len()
				if _, err := qa1.PostSend([]verbs.SendWR{{WRID: 2, Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{src.sge(0, 32)}}}); err != nil {
					t.Fatal(err)
				}
				if w := waitWC(t, a.scq, 1, 10*time.Second)[0]; w.Status != verbs.WCSuccess {
					t.Fatalf("control SEND %s", wcString(w))
				}
				r := waitWC(t, b.rcq, 1, time.Second)[0]
				if r.Status != verbs.WCSuccess || r.QPNum != qb1.QPN() || r.WRID != uint64(100+posted-left) {
					t.Fatalf("control receive %s (qp %#x)", wcString(r), r.QPNum)
				}
				if n := s.Len(); n != left-1 {
					t.Fatalf("SRQ holds %d WRs, want %d", n, left-1)
				}
			})
		})
	}
}

// TestPostSendFullSQIsENOMEMWithBadWR: PostSend on a full send queue fails
// with ENOMEM; the error's Index is bad_wr, the first WR not posted, and the
// WRs before it are posted and complete (ibv_post_send(3)). The peer is cut
// off while posting so nothing completes meanwhile.
func TestPostSendFullSQIsENOMEMWithBadWR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, la, _ := observedPair(t)
		defer a.close(t)
		defer b.close(t)
		const depth = 4
		qa, _ := rcPair(t, a, b, rcOpts{sendWR: depth, timeout: 8})
		remote := b.mem.reg(1, make([]byte, 64), verbs.AccessRemoteWrite)
		wr := func(id uint64) verbs.SendWR {
			return verbs.SendWR{WRID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled, RemoteAddr: remote.Addr, RKey: remote.RKey}
		}
		la.hold.Store(true)
		n, err := qa.PostSend([]verbs.SendWR{wr(0), wr(1), wr(2)})
		if n != 3 || err != nil {
			t.Fatalf("PostSend = %d, %v", n, err)
		}
		n, err = qa.PostSend([]verbs.SendWR{wr(3), wr(4), wr(5)})
		var e *verbserr.Error
		if n != 1 || !errors.Is(err, syscall.ENOMEM) || !errors.As(err, &e) || e.Index != 1 {
			t.Fatalf("PostSend on a queue with one free slot = %d, %v; want 1, ENOMEM at wr 1", n, err)
		}
		n, err = qa.PostSend([]verbs.SendWR{wr(6)})
		if n != 0 || !errors.Is(err, syscall.ENOMEM) || !errors.As(err, &e) || e.Index != 0 {
			t.Fatalf("PostSend on a full queue = %d, %v; want 0, ENOMEM at wr 0", n, err)
		}
		la.hold.Store(false)
		for i, w := range waitWC(t, a.scq, depth, 10*time.Second) {
			if w.Status != verbs.WCSuccess || w.WRID != uint64(i) {
				t.Fatalf("completion %d: %s, want wr %d (only the posted WRs)", i, wcString(w), i)
			}
		}
		noMoreWC(t, a.scq, 10*time.Millisecond)
		if n, err := qa.PostSend([]verbs.SendWR{wr(7), wr(8), wr(9), wr(10)}); n != depth || err != nil {
			t.Fatalf("PostSend after the queue drained = %d, %v", n, err)
		}
		waitWC(t, a.scq, depth, 10*time.Second)
	})
}

// TestPostRecvFullRQIsENOMEMWithBadWR: PostRecv on a full receive queue
// fails with ENOMEM and bad_wr (Index) naming the first WR not posted; the
// WRs before it are posted and consumed in order (ibv_post_recv(3)).
func TestPostRecvFullRQIsENOMEMWithBadWR(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := pair(t, nil)
		defer a.close(t)
		defer b.close(t)
		const depth = 4
		qa, qb := rcPair(t, a, b, rcOpts{recvWR: depth})
		rwr := func(id uint64) verbs.RecvWR { return verbs.RecvWR{WRID: id} }
		if n, err := qb.PostRecv([]verbs.RecvWR{rwr(0), rwr(1)}); n != 2 || err != nil {
			t.Fatalf("PostRecv = %d, %v", n, err)
		}
		n, err := qb.PostRecv([]verbs.RecvWR{rwr(2), rwr(3), rwr(4), rwr(5)})
		var e *verbserr.Error
		if n != 2 || !errors.Is(err, syscall.ENOMEM) || !errors.As(err, &e) || e.Index != 2 {
			t.Fatalf("PostRecv on a queue with two free slots = %d, %v; want 2, ENOMEM at wr 2", n, err)
		}
		n, err = qb.PostRecv([]verbs.RecvWR{rwr(6)})
		if n != 0 || !errors.Is(err, syscall.ENOMEM) || !errors.As(err, &e) || e.Index != 0 {
			t.Fatalf("PostRecv on a full queue = %d, %v; want 0, ENOMEM at wr 0", n, err)
		}
		for i := 0; i < depth; i++ {
			if _, err := qa.PostSend([]verbs.SendWR{{WRID: uint64(i), Opcode: verbs.WRSend}}); err != nil {
				t.Fatal(err)
			}
		}
		for i, w := range waitWC(t, b.rcq, depth, 10*time.Second) {
			if w.Status != verbs.WCSuccess || w.WRID != uint64(i) {
				t.Fatalf("receive %d: %s, want wr %d (only the posted WRs)", i, wcString(w), i)
			}
		}
		noMoreWC(t, b.rcq, 10*time.Millisecond)
		if n, err := qb.PostRecv([]verbs.RecvWR{rwr(7)}); n != 1 || err != nil {
			t.Fatalf("PostRecv after the queue drained = %d, %v", n, err)
		}
	})
}
