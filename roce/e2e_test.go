package roce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// udpPort returns a UDP port free on both test addresses. Both devices must use the
// same port: RoCEv2 sends to the port it listens on.
func udpPort(t testing.TB) uint16 {
	t.Helper()
	for i := 0; i < 50; i++ {
		p := uint16(20000 + rand.IntN(40000))
		c1, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrA, p)))
		if err != nil {
			continue
		}
		c2, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addrB, p)))
		c1.Close()
		if err != nil {
			continue
		}
		c2.Close()
		return p
	}
	t.Skip("no UDP port free on both 127.0.0.1 and 127.0.0.2")
	return 0
}

// udpPair opens two devices on real loopback UDP sockets.
func udpPair(t testing.TB, mtu MTU) (*Device, *Device) {
	t.Helper()
	p := udpPort(t)
	a, err := Open(addrA, WithPort(p), WithMTU(mtu))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(addrB, WithPort(p), WithMTU(mtu))
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// side is one end of an RC or UD connection in the tests.
type side struct {
	dev      *Device
	pd       *PD
	scq, rcq *CQ
	qp       *QP
	buf      []byte
	mr       *MR
}

const testAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

func newSide(t testing.TB, d *Device, typ QPType, bufLen int, s *SRQ, pd *PD) *side {
	t.Helper()
	if pd == nil {
		pd = must[*PD](t)(d.AllocPD())
	}
	x := &side{dev: d, pd: pd}
	x.scq = must[*CQ](t)(d.CreateCQ(256))
	x.rcq = must[*CQ](t)(d.CreateCQ(256))
	x.qp = must[*QP](t)(pd.CreateQP(QPInitAttr{Type: typ, SendCQ: x.scq, RecvCQ: x.rcq, SRQ: s,
		Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}}))
	x.buf = make([]byte, bufLen)
	x.mr = must[*MR](t)(pd.RegMR(x.buf, testAccess))
	return x
}

// connectRC moves both QPs to RTS, each aimed at the other, the way
// ibv_rc_pingpong does after exchanging LID:QPN:PSN:GID.
func connectRC(t testing.TB, a, b *side, mtu MTU) {
	t.Helper()
	connectRCWith(t, a, b, mtu,
		AddressVector{DGID: b.dev.Addr(), SGIDIndex: uint8(a.dev.GIDIndex()), HopLimit: 64, IsGlobal: true},
		AddressVector{DGID: a.dev.Addr(), SGIDIndex: uint8(b.dev.GIDIndex()), HopLimit: 64, IsGlobal: true})
}

// connectRCWith is connectRC with the paths a→b and b→a given.
func connectRCWith(t testing.TB, a, b *side, mtu MTU, avAB, avBA AddressVector) {
	t.Helper()
	connectRCTimeout(t, a, b, mtu, avAB, avBA, 14)
}

// connectRCTimeout is connectRCWith with the QPs' local ACK timeout (4.096 µs
// × 2^timeout) given.
func connectRCTimeout(t testing.TB, a, b *side, mtu MTU, avAB, avBA AddressVector, timeout uint8) {
	t.Helper()
	for _, p := range []struct {
		l, r *side
		av   AddressVector
	}{{a, b, avAB}, {b, a, avBA}} {
		l, r := p.l, p.r
		noErr(t, l.qp.Modify(&QPAttr{State: QPSInit, PKeyIndex: 0, PortNum: 1, AccessFlags: testAccess},
			QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags))
		noErr(t, l.qp.Modify(&QPAttr{State: QPSRTR, PathMTU: mtu, DestQPN: r.qp.QPN(), RQPSN: 0x1000 + r.qp.QPN(),
			MaxDestRDAtomic: 16, MinRNRTimer: 12, AV: p.av},
			QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRDAtomic|QPAttrMinRNRTimer))
	}
	for _, l := range []*side{a, b} {
		noErr(t, l.qp.Modify(&QPAttr{State: QPSRTS, SQPSN: 0x1000 + l.qp.QPN(), Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 16},
			QPAttrState|QPAttrSQPSN|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRDAtomic))
	}
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func checkWC(t testing.TB, wc WC, wrid uint64, op WCOpcode, n int) {
	t.Helper()
	if wc.Status != WCSuccess || wc.WRID != wrid || wc.Opcode != op || (n >= 0 && int(wc.ByteLen) != n) {
		t.Fatalf("completion %+v (%v), want wr_id %d %v %d bytes success", wc, wc.Status, wrid, op, n)
	}
}

const wcTimeout = 10 * time.Second

// TestRCEndToEndUDP runs every RC opcode at sizes around the path MTU over real
// loopback UDP, verifying every byte and exactly one completion per signaled WR.
func TestRCEndToEndUDP(t *testing.T) {
	for _, mtu := range []MTU{MTU1024, MTU4096} {
		t.Run(fmt.Sprintf("pmtu%d", mtu.Bytes()), func(t *testing.T) {
			da, db := udpPair(t, mtu)
			runRCSuite(t, da, db, mtu)
		})
	}
}

// TestRCEndToEndPipe is the same suite over the in-memory pipe.
func TestRCEndToEndPipe(t *testing.T) {
	da, db := pipePair(t)
	runRCSuite(t, da, db, MTU1024)
}

func runRCSuite(t *testing.T, da, db *Device, mtu MTU) {
	const big = 1 << 20
	pm := mtu.Bytes()
	sizes := []int{0, 1, pm - 1, pm, pm + 1, big}
	a := newSide(t, da, QPTypeRC, 2*big, nil, nil)
	b := newSide(t, db, QPTypeRC, 2*big, nil, nil)
	connectRC(t, a, b, mtu)
	// The responder's engine touches b.buf for WRITE, READ and atomics with no
	// completion on b's side, so nothing orders those accesses with this goroutine's
	// in the Go memory model (on hardware, PCIe ordering does). syncMem runs a
	// command on every shard of both devices, which orders them for the race
	// detector: it is the Go analogue of the fence a C program gets from the NIC.
	syncMem := func() { da.barrier(); db.barrier() }
	wrid := uint64(0)
	for _, n := range sizes {
		t.Run(fmt.Sprintf("send/%d", n), func(t *testing.T) {
			for _, imm := range []bool{false, true} {
				wrid++
				fill(a.buf[:n], wrid)
				clear(b.buf[:n+1])
				_ = must[int](t)(b.qp.PostRecv([]RecvWR{{WRID: wrid, SGL: []SGE{{Addr: b.mr.Addr(), Length: uint32(n + 1), LKey: b.mr.LKey()}}}}))
				wr := SendWR{WRID: wrid, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Addr: a.mr.Addr(), Length: uint32(n), LKey: a.mr.LKey()}}}
				if n == 0 {
					wr.SGL = nil
				}
				if imm {
					wr.Opcode, wr.Imm = WRSendWithImm, 0xdeadbeef
				}
				_ = must[int](t)(a.qp.PostSend([]SendWR{wr}))
				checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], wrid, WCSend, -1)
				rw := pollN(t, b.rcq, 1, wcTimeout)[0]
				checkWC(t, rw, wrid, WCRecv, n)
				if imm != (rw.Flags&WCWithImm != 0) || (imm && rw.ImmData != 0xdeadbeef) {
					t.Fatalf("imm flags %v data %#x", rw.Flags, rw.ImmData)
				}
				syncMem()
				if !bytes.Equal(a.buf[:n], b.buf[:n]) || b.buf[n] != 0 {
					t.Fatal("received bytes differ")
				}
			}
		})
		t.Run(fmt.Sprintf("write/%d", n), func(t *testing.T) {
			for _, imm := range []bool{false, true} {
				wrid++
				fill(a.buf[:n], wrid)
				clear(b.buf[:n+1])
				syncMem()
				wr := SendWR{WRID: wrid, Opcode: WRRDMAWrite, Flags: SendSignaled,
					SGL: []SGE{{Addr: a.mr.Addr(), Length: uint32(n), LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
				if n == 0 {
					wr.SGL = nil
				}
				if imm {
					wr.Opcode, wr.Imm = WRRDMAWriteWithImm, uint32(wrid)
					_ = must[int](t)(b.qp.PostRecv([]RecvWR{{WRID: wrid}}))
				}
				_ = must[int](t)(a.qp.PostSend([]SendWR{wr}))
				checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], wrid, WCRDMAWrite, -1)
				if imm {
					rw := pollN(t, b.rcq, 1, wcTimeout)[0]
					checkWC(t, rw, wrid, WCRecvRDMAWithImm, n)
					if rw.Flags&WCWithImm == 0 || rw.ImmData != uint32(wrid) {
						t.Fatalf("imm %+v", rw)
					}
				}
				syncMem()
				if !bytes.Equal(a.buf[:n], b.buf[:n]) || b.buf[n] != 0 {
					t.Fatal("written bytes differ")
				}
			}
		})
		t.Run(fmt.Sprintf("read/%d", n), func(t *testing.T) {
			wrid++
			fill(b.buf[:n], wrid)
			clear(a.buf[:n+1])
			syncMem()
			wr := SendWR{WRID: wrid, Opcode: WRRDMARead, Flags: SendSignaled,
				SGL: []SGE{{Addr: a.mr.Addr(), Length: uint32(n), LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			if n == 0 {
				wr.SGL = nil
			}
			_ = must[int](t)(a.qp.PostSend([]SendWR{wr}))
			checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], wrid, WCRDMARead, n)
			syncMem()
			if !bytes.Equal(a.buf[:n], b.buf[:n]) || a.buf[n] != 0 {
				t.Fatal("read bytes differ")
			}
		})
	}
	t.Run("atomics", func(t *testing.T) {
		target := b.buf[64:72]
		binary.LittleEndian.PutUint64(target, 100)
		res := a.buf[:16]
		clear(res)
		syncMem()
		ops := []SendWR{
			{WRID: 900, Opcode: WRAtomicFetchAndAdd, CompareAdd: 5},
			{WRID: 901, Opcode: WRAtomicCmpAndSwp, CompareAdd: 105, Swap: 7},
			{WRID: 902, Opcode: WRAtomicCmpAndSwp, CompareAdd: 105, Swap: 9}, // compare fails
		}
		want := []uint64{100, 105, 7}
		for i := range ops {
			ops[i].Flags = SendSignaled
			ops[i].SGL = []SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}}
			ops[i].RemoteAddr = b.mr.Addr() + 64
			ops[i].RKey = b.mr.RKey()
			_ = must[int](t)(a.qp.PostSend(ops[i : i+1]))
			wc := pollN(t, a.scq, 1, wcTimeout)[0]
			op := WCFetchAdd
			if ops[i].Opcode == WRAtomicCmpAndSwp {
				op = WCCompSwap
			}
			checkWC(t, wc, ops[i].WRID, op, 8)
			if got := binary.LittleEndian.Uint64(res); got != want[i] {
				t.Fatalf("%d: original value %d, want %d", i, got, want[i])
			}
		}
		syncMem()
		if got := binary.LittleEndian.Uint64(target); got != 7 {
			t.Fatalf("target %d, want 7 (100+5, swapped to 7, second swap refused)", got)
		}
	})
	t.Run("unsignaled", func(t *testing.T) {
		// 9 unsignaled writes then a signaled one: exactly one completion.
		var wrs []SendWR
		for i := 0; i < 10; i++ {
			wrs = append(wrs, SendWR{WRID: uint64(1000 + i), Opcode: WRRDMAWrite,
				SGL: []SGE{{Addr: a.mr.Addr(), Length: 100, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		}
		wrs[9].Flags = SendSignaled
		syncMem()
		_ = must[int](t)(a.qp.PostSend(wrs))
		checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], 1009, WCRDMAWrite, -1)
		syncMem()
		noMoreWC(t, a.scq, 20*time.Millisecond)
	})
	noMoreWC(t, a.scq, 0)
	noMoreWC(t, b.rcq, 0)
}

// TestUDEndToEndUDP sends UD SEND and SEND_WITH_IMM over loopback, checking the GRH
// area, src_qp and every byte.
func TestUDEndToEndUDP(t *testing.T) {
	for _, mtu := range []MTU{MTU1024, MTU4096} {
		t.Run(fmt.Sprint(mtu.Bytes()), func(t *testing.T) { udEndToEnd(t, mtu) })
	}
}

// readyUD moves UD QPs a and b to RTS with Q_Key qkey and returns an AH from a
// to b.
func readyUD(t testing.TB, a, b *side, qkey uint32) *AH {
	t.Helper()
	for _, x := range []*side{a, b} {
		noErr(t, x.qp.Modify(&QPAttr{State: QPSInit, PortNum: 1, QKey: qkey}, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrQKey))
		noErr(t, x.qp.Modify(&QPAttr{State: QPSRTR}, QPAttrState))
		noErr(t, x.qp.Modify(&QPAttr{State: QPSRTS, SQPSN: 1}, QPAttrState|QPAttrSQPSN))
	}
	return must[*AH](t)(a.pd.CreateAH(AHAttr{DGID: b.dev.Addr(), SGIDIndex: uint8(a.dev.GIDIndex()), HopLimit: 64, IsGlobal: true}))
}

// udEndToEnd runs UD sends up to the port's active MTU, which is a UD QP's
// message limit (ud_pingpong never sets a path MTU).
func udEndToEnd(t *testing.T, mtu MTU) {
	da, db := udpPair(t, mtu)
	const qkey = 0x11111111
	a := newSide(t, da, QPTypeUD, 8192, nil, nil)
	b := newSide(t, db, QPTypeUD, 8192, nil, nil)
	ah := readyUD(t, a, b, qkey)
	const grh = 40
	for i, n := range []int{0, 1, mtu.Bytes() - 1, mtu.Bytes()} {
		for _, imm := range []bool{false, true} {
			wrid := uint64(i*2 + 1)
			if imm {
				wrid++
			}
			fill(a.buf[:n], wrid)
			clear(b.buf[:grh+n+1])
			_ = must[int](t)(b.qp.PostRecv([]RecvWR{{WRID: wrid, SGL: []SGE{{Addr: b.mr.Addr(), Length: uint32(grh + n + 1), LKey: b.mr.LKey()}}}}))
			wr := SendWR{WRID: wrid, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Addr: a.mr.Addr(), Length: uint32(n), LKey: a.mr.LKey()}},
				AH: ah.AV(), RemoteQPN: b.qp.QPN(), RemoteQKey: qkey}
			if n == 0 {
				wr.SGL = nil // an SGE of length 0 means 2^31 bytes
			}
			if imm {
				wr.Opcode, wr.Imm = WRSendWithImm, 0xabcd
			}
			_ = must[int](t)(a.qp.PostSend([]SendWR{wr}))
			checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], wrid, WCSend, -1)
			rw := pollN(t, b.rcq, 1, wcTimeout)[0]
			checkWC(t, rw, wrid, WCRecv, grh+n)
			if rw.SrcQP != a.qp.QPN() || rw.Flags&WCGRH == 0 || imm != (rw.Flags&WCWithImm != 0) {
				t.Fatalf("completion %+v", rw)
			}
			if !bytes.Equal(a.buf[:n], b.buf[grh:grh+n]) || b.buf[grh+n] != 0 {
				t.Fatalf("size %d: received bytes differ", n)
			}
		}
	}
}

// TestManyQPsShareOneSRQ has 8 RC connections whose receivers all take WRs from one
// SRQ; every message lands in exactly one WR and completes once.
func TestManyQPsShareOneSRQ(t *testing.T) {
	da, db := udpPair(t, MTU1024)
	const nqp, per, size = 8, 16, 3000
	pdb := must[*PD](t)(db.AllocPD())
	s := must[*SRQ](t)(pdb.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: nqp * per, MaxSGE: 1}}))
	rbuf := make([]byte, nqp*per*size)
	rmr := must[*MR](t)(pdb.RegMR(rbuf, AccessLocalWrite))
	for i := 0; i < nqp*per; i++ {
		_ = must[int](t)(s.PostRecv([]RecvWR{{WRID: uint64(i), SGL: []SGE{{Addr: rmr.Addr() + uint64(i*size), Length: size, LKey: rmr.LKey()}}}}))
	}
	rcq := must[*CQ](t)(db.CreateCQ(nqp * per))
	senders := make([]*side, nqp)
	for i := range senders {
		a := newSide(t, da, QPTypeRC, per*size, nil, nil)
		b := &side{dev: db, pd: pdb, scq: must[*CQ](t)(db.CreateCQ(4)), rcq: rcq}
		b.qp = must[*QP](t)(pdb.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: b.scq, RecvCQ: rcq, SRQ: s, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}}))
		connectRC(t, a, b, MTU1024)
		for j := 0; j < per; j++ {
			msg := a.buf[j*size : (j+1)*size]
			fill(msg, uint64(i<<8|j))
			binary.BigEndian.PutUint16(msg, uint16(i<<8|j))
			_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: uint64(j), Opcode: WRSend, Flags: SendSignaled,
				SGL: []SGE{{Addr: a.mr.Addr() + uint64(j*size), Length: size, LKey: a.mr.LKey()}}}}))
		}
		senders[i] = a
	}
	for _, a := range senders {
		pollN(t, a.scq, per, wcTimeout)
	}
	wcs := pollN(t, rcq, nqp*per, wcTimeout)
	seenWR := map[uint64]bool{}
	seenMsg := map[uint16]bool{}
	for _, wc := range wcs {
		if wc.Status != WCSuccess || wc.ByteLen != size || seenWR[wc.WRID] {
			t.Fatalf("completion %+v", wc)
		}
		seenWR[wc.WRID] = true
		got := rbuf[int(wc.WRID)*size : int(wc.WRID+1)*size]
		id := binary.BigEndian.Uint16(got)
		want := make([]byte, size)
		fill(want, uint64(id))
		binary.BigEndian.PutUint16(want, id)
		if seenMsg[id] || !bytes.Equal(got, want) {
			t.Fatalf("message %#x in wr %d: duplicate or corrupt", id, wc.WRID)
		}
		seenMsg[id] = true
	}
}

// TestUCEndToEndUDP connects two UC QPs the way ibv_uc_pingpong does and runs
// SEND, SEND_WITH_IMM, WRITE and WRITE_WITH_IMM around the path MTU over
// loopback UDP; READ is refused at post time.
func TestUCEndToEndUDP(t *testing.T) {
	da, db := udpPair(t, MTU1024)
	a := newSide(t, da, QPTypeUC, 8192, nil, nil)
	b := newSide(t, db, QPTypeUC, 8192, nil, nil)
	for _, p := range [][2]*side{{a, b}, {b, a}} {
		l, r := p[0], p[1]
		noErr(t, l.qp.Modify(&QPAttr{State: QPSInit, PortNum: 1, AccessFlags: AccessLocalWrite | AccessRemoteWrite},
			QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags))
		noErr(t, l.qp.Modify(&QPAttr{State: QPSRTR, PathMTU: MTU1024, DestQPN: r.qp.QPN(), RQPSN: 0x1000 + r.qp.QPN(),
			AV: AddressVector{DGID: r.dev.Addr(), SGIDIndex: uint8(l.dev.GIDIndex()), HopLimit: 64, IsGlobal: true}},
			QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN))
	}
	for _, x := range []*side{a, b} {
		noErr(t, x.qp.Modify(&QPAttr{State: QPSRTS, SQPSN: 0x1000 + x.qp.QPN()}, QPAttrState|QPAttrSQPSN))
	}
	_, err := a.qp.PostSend([]SendWR{{WRID: 99, Opcode: WRRDMARead, SGL: []SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey()}},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}})
	wantErrno(t, err, syscall.EINVAL)
	id := uint64(1)
	for _, op := range []WROpcode{WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm} {
		for _, n := range []int{1, 1024, 3000} {
			fill(a.buf[:n], id)
			clear(b.buf)
			wantRecv := op != WRRDMAWrite
			if wantRecv {
				_ = must[int](t)(b.qp.PostRecv([]RecvWR{{WRID: id, SGL: []SGE{{Addr: b.mr.Addr(), Length: uint32(n), LKey: b.mr.LKey()}}}}))
			}
			wr := SendWR{WRID: id, Opcode: op, Flags: SendSignaled, Imm: uint32(id), SGL: []SGE{{Addr: a.mr.Addr(), Length: uint32(n), LKey: a.mr.LKey()}},
				RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
			// A command on b's shard orders our clear before its writes (over a
			// real socket the race detector sees no happens-before edge).
			_ = must[QPAttr](t)(b.qp.Query())
			_ = must[int](t)(a.qp.PostSend([]SendWR{wr}))
			sop := WCSend
			if op == WRRDMAWrite || op == WRRDMAWriteWithImm {
				sop = WCRDMAWrite
			}
			checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], id, sop, -1)
			if wantRecv {
				rop := WCRecv
				if op == WRRDMAWriteWithImm {
					rop = WCRecvRDMAWithImm
				}
				rw := pollN(t, b.rcq, 1, wcTimeout)[0]
				checkWC(t, rw, id, rop, n)
				if (op != WRSend) != (rw.Flags&WCWithImm != 0) || (op != WRSend && rw.ImmData != uint32(id)) {
					t.Fatalf("completion %+v", rw)
				}
			} else {
				// Nothing tells the responder a WRITE arrived: a SEND behind it
				// on the same QP completes only after the WRITE was placed.
				_ = must[int](t)(b.qp.PostRecv([]RecvWR{{WRID: id + 1000, SGL: []SGE{{Addr: b.mr.Addr() + 4096, Length: 1, LKey: b.mr.LKey()}}}}))
				_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: id + 1000, Opcode: WRSend, SGL: []SGE{{Addr: a.mr.Addr() + 4096, Length: 1, LKey: a.mr.LKey()}}}}))
				checkWC(t, pollN(t, b.rcq, 1, wcTimeout)[0], id+1000, WCRecv, 1)
			}
			if !bytes.Equal(a.buf[:n], b.buf[:n]) {
				t.Fatalf("%v of %d bytes: data differs", op, n)
			}
			id++
		}
	}
}

// TestDeregMRUsedByOutstandingWRGivesErrorCompletion is the ibv_post_srq_recv
// page's rule: "if one of the MRs that are specified in the WR isn't valid, a
// Work Completion with error will be generated". A receive WR posted to an SRQ
// whose MR is then deregistered completes with LOC_PROT_ERR when a message
// arrives for it (the sender gets REM_OP_ERR), and nothing is written to the
// old buffer.
func TestDeregMRUsedByOutstandingWRGivesErrorCompletion(t *testing.T) {
	da, db := udpPair(t, MTU1024)
	pdb := must[*PD](t)(db.AllocPD())
	s := must[*SRQ](t)(pdb.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 4, MaxSGE: 1}}))
	rbuf := make([]byte, 100)
	rmr := must[*MR](t)(pdb.RegMR(rbuf, AccessLocalWrite))
	_ = must[int](t)(s.PostRecv([]RecvWR{{WRID: 7, SGL: []SGE{{Addr: rmr.Addr(), Length: 100, LKey: rmr.LKey()}}}}))
	noErr(t, rmr.Close()) // ibv_dereg_mr while the WR is outstanding

	a := newSide(t, da, QPTypeRC, 100, nil, nil)
	b := &side{dev: db, pd: pdb, scq: must[*CQ](t)(db.CreateCQ(4)), rcq: must[*CQ](t)(db.CreateCQ(4))}
	b.qp = must[*QP](t)(pdb.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: b.scq, RecvCQ: b.rcq, SRQ: s,
		Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}}))
	connectRC(t, a, b, MTU1024)
	fill(a.buf, 1)
	_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRSend, Flags: SendSignaled,
		SGL: []SGE{{Addr: a.mr.Addr(), Length: 100, LKey: a.mr.LKey()}}}}))
	if wc := pollN(t, b.rcq, 1, wcTimeout)[0]; wc.WRID != 7 || wc.Status != WCLocProtErr {
		t.Fatalf("receive completion %+v (%v), want wr 7 LOC_PROT_ERR", wc, wc.Status)
	}
	if wc := pollN(t, a.scq, 1, wcTimeout)[0]; wc.WRID != 1 || wc.Status != WCRemOpErr {
		t.Fatalf("send completion %+v (%v), want wr 1 REM_OP_ERR", wc, wc.Status)
	}
	if !bytes.Equal(rbuf, make([]byte, 100)) {
		t.Fatal("the message landed in the deregistered buffer")
	}
}
