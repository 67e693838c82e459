package transport

import (
	"bytes"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"

	"github.com/goroce/goroce/link"
)

// FuzzResponder feeds packet sequences with valid ICRCs to an RC QP in RTS
// whose MR sits between guard pages: nothing may panic, and no byte outside
// the MR and the receive buffer may change.
func FuzzResponder(f *testing.F) {
	seq := func(pkts ...[]byte) []byte {
		var out []byte
		for _, p := range pkts {
			out = append(out, byte(len(p)>>8), byte(len(p)))
			out = append(out, p...)
		}
		return out
	}
	const mrVA, rkey = 0x10000, 0x103 // the first region fakeMem registers
	mk := func(f bth.Fields, payload []byte) []byte {
		f.PKey = 0xFFFF
		return bth.Append(nil, &f, payload)
	}
	psn := bth.PSN(0x123400 + firstQPN + 1)
	// A WRITE ONLY into the MR.
	f.Add(seq(mk(bth.Fields{Opcode: bth.RCWriteOnly, PSN: psn, AckReq: true, RETH: bth.RETH{VA: mrVA, RKey: rkey, DMALen: 4}}, []byte{1, 2, 3, 4})))
	// A WRITE past the end of the MR (must be refused).
	f.Add(seq(mk(bth.Fields{Opcode: bth.RCWriteOnly, PSN: psn, RETH: bth.RETH{VA: mrVA + 4094, RKey: rkey, DMALen: 4}}, []byte{1, 2, 3, 4})))
	// A SEND FIRST then a LAST longer than the receive buffer.
	f.Add(seq(mk(bth.Fields{Opcode: bth.RCSendFirst, PSN: psn}, make([]byte, 1024)),
		mk(bth.Fields{Opcode: bth.RCSendLast, PSN: psn + 1}, make([]byte, 1000))))
	// READ, duplicate READ, atomic and duplicate atomic.
	rd := mk(bth.Fields{Opcode: bth.RCReadRequest, PSN: psn, RETH: bth.RETH{VA: mrVA, RKey: rkey, DMALen: 3000}}, nil)
	at := mk(bth.Fields{Opcode: bth.RCFetchAdd, PSN: psn + 3, Atomic: bth.AtomicETH{VA: mrVA + 8, RKey: rkey, SwapAdd: 1}}, nil)
	f.Add(seq(rd, rd, at, at))
	// Out of sequence, then a WRITE FIRST/MIDDLE with a bad sequence.
	f.Add(seq(mk(bth.Fields{Opcode: bth.RCWriteMiddle, PSN: psn + 5}, make([]byte, 1024)),
		mk(bth.Fields{Opcode: bth.RCWriteFirst, PSN: psn, RETH: bth.RETH{VA: mrVA, RKey: rkey, DMALen: 5000}}, make([]byte, 1024)),
		mk(bth.Fields{Opcode: bth.RCSendLast, PSN: psn + 1}, make([]byte, 10))))

	f.Fuzz(func(t *testing.T, data []byte) { fuzzResponder(t, data, verbs.QPTypeRC) })
}

// FuzzUCResponder is FuzzResponder for a UC QP: partial messages, PSN gaps
// and resyncs must neither panic nor write outside the MR or receive buffer.
func FuzzUCResponder(f *testing.F) {
	seq := func(pkts ...[]byte) []byte {
		var out []byte
		for _, p := range pkts {
			out = append(out, byte(len(p)>>8), byte(len(p)))
			out = append(out, p...)
		}
		return out
	}
	const mrVA, rkey = 0x10000, 0x103
	mk := func(f bth.Fields, payload []byte) []byte {
		f.PKey = 0xFFFF
		return bth.Append(nil, &f, payload)
	}
	psn := bth.PSN(0x777000 + 0x77)
	f.Add(seq(mk(bth.Fields{Opcode: bth.UCWriteOnly, PSN: psn, RETH: bth.RETH{VA: mrVA, RKey: rkey, DMALen: 4}}, []byte{1, 2, 3, 4})))
	f.Add(seq(mk(bth.Fields{Opcode: bth.UCWriteFirst, PSN: psn, RETH: bth.RETH{VA: mrVA + 2048, RKey: rkey, DMALen: 3000}}, make([]byte, 1024)),
		mk(bth.Fields{Opcode: bth.UCWriteLast, PSN: psn + 2}, make([]byte, 952)),
		mk(bth.Fields{Opcode: bth.UCWriteLastImm, PSN: psn + 3, Imm: 7}, make([]byte, 952))))
	f.Add(seq(mk(bth.Fields{Opcode: bth.UCSendFirst, PSN: psn}, make([]byte, 1024)),
		mk(bth.Fields{Opcode: bth.UCSendMiddle, PSN: psn + 1}, make([]byte, 1024)),
		mk(bth.Fields{Opcode: bth.UCSendOnlyImm, PSN: psn + 9, Imm: 1}, make([]byte, 100)),
		mk(bth.Fields{Opcode: bth.UCSendLast, PSN: psn + 10}, make([]byte, 10))))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzResponder(t, data, verbs.QPTypeUC) })
}

// fuzzResponder feeds the length-prefixed packets in data to a QP of type
// typ whose MR and receive buffer sit between guard bytes.
func fuzzResponder(t *testing.T, data []byte, typ verbs.QPType) {
	const mrVA, rkey = 0x10000, 0x103 // the first region fakeMem registers
	n := newNode(t, &nullLink{done: make(chan struct{})}, 1)
	defer n.close(t)
	backing := bytes.Repeat([]byte{0xAA}, 3*4096)
	mr := n.mem.reg(1, backing[4096:8192:8192], verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	if mr.Addr != mrVA || mr.RKey != rkey {
		t.Fatalf("fake memory layout changed: %#x %#x", mr.Addr, mr.RKey)
	}
	rbacking := bytes.Repeat([]byte{0xBB}, 3*1024)
	rb := n.mem.reg(1, rbacking[1024:2048:2048], verbs.AccessLocalWrite)
	q := n.createQP(t, typ, rcOpts{recvWR: 4})
	peer := addrB
	if typ == verbs.QPTypeUC {
		ucConnect(t, q, peer.Addr(), 0x77, verbs.MTU1024)
	} else {
		connect(t, q, peer.Addr(), 0x77, rcOpts{})
	}
	q.PostRecv([]verbs.RecvWR{{WRID: 1, SGL: []verbs.SGE{rb.sge(0, 1024)}}, {WRID: 2, SGL: []verbs.SGE{rb.sge(512, 512)}}})
	for len(data) >= 2 {
		l := int(data[0])<<8 | int(data[1])
		data = data[2:]
		if l > len(data) {
			l = len(data)
		}
		if l > link.MaxDatagram {
			l = link.MaxDatagram
		}
		buf := link.GetBuffer()
		pkt := buf[:l]
		copy(pkt, data[:l])
		data = data[l:]
		if l >= 12 {
			pkt[5], pkt[6], pkt[7] = byte(q.qpn>>16), byte(q.qpn>>8), byte(q.qpn)
		}
		env := bth.Envelope{Src: peer.Addr(), Dst: addrA.Addr(), DF: true, SrcPort: peer.Port(), DstPort: addrA.Port()}
		if l >= 4 {
			bth.PutICRC(&env, pkt)
		}
		it := rxItem{buf: buf, n: l, src: peer, local: addrA.Addr(), qp: q}
		q.run("fuzz", func() {
			q.receive(n.e.cfg.Clock.Now(), &it)
			q.service(n.e.cfg.Clock.Now())
			q.sh.flush()
		}, false)
		link.PutBuffer(buf)
	}
	for i, b := range backing {
		if (i < 4096 || i >= 8192) && b != 0xAA {
			t.Fatalf("write outside the MR at offset %d", i-4096)
		}
	}
	for i, b := range rbacking {
		if (i < 1024 || i >= 2048) && b != 0xBB {
			t.Fatalf("write outside the receive buffer at offset %d", i-1024)
		}
	}
}
