package transport

import (
	"bytes"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
)

// TestUDPortMTU checks that a UD QP's message limit is the port MTU, not a
// path MTU UD cannot set: a message of exactly the port MTU is delivered,
// one byte more completes with LOC_LEN_ERR, and so does an SGE of length 0
// (2^31 bytes); none of them completes SUCCESS without being sent.
func TestUDPortMTU(t *testing.T) {
	for _, tc := range []struct {
		mtu  verbs.MTU
		size int
	}{{0, 1024}, {verbs.MTU1024, 1024}, {verbs.MTU2048, 2048}, {verbs.MTU4096, 4096}} {
		t.Run(fmt.Sprint(tc.size), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { udMTU(t, tc.mtu, tc.size) })
		})
	}
}

func udMTU(t *testing.T, mtu verbs.MTU, size int) {
	la, lb := link.Pipe(addrA, addrB)
	set := func(c *Config) { c.PortMTU = mtu }
	a, b := newNode(t, la, 2, set), newNode(t, lb, 2, set)
	defer a.close(t)
	defer b.close(t)
	src := a.mem.reg(1, pattern(size+1, 5), verbs.AccessLocalWrite)
	dst := b.mem.reg(1, make([]byte, grhLen+size+1), verbs.AccessLocalWrite)
	send := func(wr verbs.SendWR) (verbs.WC, *QP, *QP) {
		t.Helper()
		qa, qb := udQP(t, a, 9), udQP(t, b, 9)
		if _, err := qb.PostRecv([]verbs.RecvWR{{WRID: 100, SGL: []verbs.SGE{dst.sge(0, grhLen+size+1)}}}); err != nil {
			t.Fatal(err)
		}
		wr.Flags, wr.AH, wr.RemoteQPN, wr.RemoteQKey = verbs.SendSignaled, &verbs.AddressVector{DGID: b.addr}, qb.QPN(), 9
		if _, err := qa.PostSend([]verbs.SendWR{wr}); err != nil {
			t.Fatal(err)
		}
		return waitWC(t, a.scq, 1, time.Second)[0], qa, qb
	}
	// Exactly the port MTU: delivered.
	w, _, qb := send(verbs.SendWR{WRID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{src.sge(0, size)}})
	if w.Status != verbs.WCSuccess || w.ByteLen != uint32(size) {
		t.Fatalf("send of %d bytes at port MTU %d: %s", size, size, wcString(w))
	}
	if r := waitWC(t, b.rcq, 1, time.Second)[0]; r.Status != verbs.WCSuccess || r.ByteLen != uint32(grhLen+size) {
		t.Fatalf("recv: %s", wcString(r))
	}
	qb.Query()
	if !bytes.Equal(dst.Buf[grhLen:grhLen+size], src.Buf[:size]) {
		t.Fatal("payload differs")
	}
	// One byte more, and an SGE of length 0 (2^31 bytes): LOC_LEN_ERR.
	for _, sge := range []verbs.SGE{src.sge(0, size+1), {Addr: src.Addr, LKey: src.LKey}} {
		w, qa, _ := send(verbs.SendWR{WRID: 2, Opcode: verbs.WRSendWithImm, SGL: []verbs.SGE{sge}})
		if w.WRID != 2 || w.Status != verbs.WCLocLenErr {
			t.Fatalf("send of %d bytes at port MTU %d: %s, want LOC_LEN_ERR", sge.Size(), size, wcString(w))
		}
		noMoreWC(t, b.rcq, 10*time.Millisecond)
		if n := a.e.Stats().SentPackets[ClassUD].Load(); n != 1 {
			t.Fatalf("%d UD packets sent, want 1", n)
		}
		if a, _ := qa.Query(); a.PathMTU != mtuOr(mtu) {
			t.Fatalf("UD QP path MTU %v, want the port's %v", a.PathMTU, mtuOr(mtu))
		}
	}
}

func mtuOr(m verbs.MTU) verbs.MTU {
	if m == 0 {
		return verbs.MTU1024
	}
	return m
}
