package transport

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
	"github.com/goroce/goroce/link"
)

// TestLoopbackUDP runs RC and UD between two engines on real UDP sockets,
// 127.0.0.1 and 127.0.0.2 on a test port.
func TestLoopbackUDP(t *testing.T) {
	const port = 47917
	mk := func(ip string) *node {
		l, err := link.ListenUDP(netip.AddrPortFrom(netip.MustParseAddr(ip), port), link.Config{})
		if err != nil {
			t.Skipf("cannot listen on %s:%d: %v", ip, port, err)
		}
		return newNode(t, l, 2)
	}
	a := mk("127.0.0.1")
	defer a.close(t)
	b := mk("127.0.0.2")
	defer b.close(t)
	qa, qb := rcPair(t, a, b, rcOpts{mtu: verbs.MTU4096})
	id := uint64(1)
	for _, op := range allOps {
		sizes := sizesFor(verbs.MTU4096, true)
		if op == verbs.WRAtomicCmpAndSwp || op == verbs.WRAtomicFetchAndAdd {
			sizes = []int{8}
		}
		for _, size := range sizes {
			transfer(t, a, b, qa, qb, op, size, id, 10*time.Second)
			id++
		}
	}
	udExchange(t, a, b)
	sa := a.e.Stats().Snapshot()
	sb := b.e.Stats().Snapshot()
	if sa.ICRCErrors+sb.ICRCErrors != 0 || sa.Malformed+sb.Malformed != 0 || sa.BadQKey+sb.BadQKey != 2 {
		t.Fatalf("icrc errors %d/%d malformed %d/%d bad Q_Key %d/%d", sa.ICRCErrors, sb.ICRCErrors, sa.Malformed, sb.Malformed, sa.BadQKey, sb.BadQKey)
	}
	t.Logf("A sent %v packets, retransmits %d", sa.SentPackets, sa.Retransmits)
}
