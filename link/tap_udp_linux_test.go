//go:build linux

package link_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/link"
)

// udpPair opens two UDP links on lo, closed at cleanup.
func udpPair(t *testing.T) (a, b *link.UDP) {
	t.Helper()
	for i, addr := range []string{"127.0.0.1:0", "127.0.0.2:0"} {
		u, err := link.ListenUDP(netip.MustParseAddrPort(addr), link.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { u.Close() })
		if i == 0 {
			a = u
		} else {
			b = u
		}
	}
	return a, b
}

// TestTapOverUDP captures real loopback traffic in both directions; the
// receive side's destination comes from PKTINFO.
func TestTapOverUDP(t *testing.T) {
	a, b := udpPair(t)
	var pcap bytes.Buffer
	tap, err := link.NewTap(a, &pcap, link.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	req := rocePayload(a.LocalAddr(), b.LocalAddr())
	if _, err := tap.WriteBatch([]link.Message{{Buf: req, Addr: b.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	in := []link.Message{{Buf: link.GetBuffer()[:]}}
	if _, err := b.ReadBatch(in); err != nil {
		t.Fatal(err)
	}
	resp := rocePayload(b.LocalAddr(), a.LocalAddr())
	if _, err := b.WriteBatch([]link.Message{{Buf: resp, Addr: in[0].Addr}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := tap.ReadBatch(in); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no response")
	}
	got := readPcap(t, &pcap, link.LinkTypeEthernet)
	if len(got) != 2 || got[0].src != a.LocalAddr() || got[0].dst != b.LocalAddr() ||
		got[1].src != b.LocalAddr() || got[1].dst != a.LocalAddr() {
		t.Fatalf("captured %+v", got)
	}
}

// TestTapTrain: a train written through a Tap is recorded segment by
// segment with the IPv4 ID each segment has on the wire (TrainIPv4ID) and
// the message's TOS and TTL, so its ICRCs verify in the capture (readPcap
// checks them); a GRO train read through a Tap is recorded segment by
// segment too.
func TestTapTrain(t *testing.T) {
	a, b := udpPair(t)
	var sent, recvd bytes.Buffer
	ta, err := link.NewTap(a, &sent, link.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := link.NewTap(b, &recvd, link.LinkTypeRaw)
	if err != nil {
		t.Fatal(err)
	}
	in := []link.Message{{Buf: link.GetTrainBuffer()[:]}}
	ta.WriteBatch([]link.Message{{Buf: []byte("prime"), Addr: b.LocalAddr()}})
	tb.ReadBatch(in) // MaxTrain buffers: GRO on from now
	const seg = 300
	var pieces [][]byte
	for i := range 20 { // a train of 16 + 4 segments
		p := make([]byte, seg)
		p[0] = 0x64
		p[12] = byte(i)
		env := bth.Envelope{Src: a.LocalAddr().Addr(), Dst: b.LocalAddr().Addr(), DF: true, SrcPort: a.LocalAddr().Port(), DstPort: b.LocalAddr().Port(), IPID: link.TrainIPv4ID(seg, i)}
		bth.PutICRC(&env, p)
		pieces = append(pieces, p)
	}
	if _, err := ta.WriteBatch([]link.Message{{Pieces: pieces, SegSize: seg, Addr: b.LocalAddr(), TOS: 0x2e, TTL: 30}}); err != nil {
		t.Fatal(err)
	}
	if n, err := tb.ReadBatch(in); n != 1 || err != nil || in[0].NumSegments() != 20 {
		t.Fatalf("ReadBatch = %d, %v, %d segments", n, err, in[0].NumSegments())
	}
	got := readPcap(t, &sent, link.LinkTypeEthernet)[1:]
	if len(got) != 20 {
		t.Fatalf("%d records of the train, want 20", len(got))
	}
	for i, c := range got {
		if c.id != link.TrainIPv4ID(seg, i) || c.tos != 0x2e || c.ttl != 30 || !bytes.Equal(c.payload, pieces[i]) {
			t.Fatalf("record %d: ID %d TOS %#x TTL %d", i, c.id, c.tos, c.ttl)
		}
	}
	if r := readPcapICRC(t, &recvd, link.LinkTypeRaw, false)[1:]; len(r) != 20 || !bytes.Equal(r[19].payload, pieces[19]) || r[0].tos != 0x2e || r[0].ttl != 30 {
		t.Fatalf("receive side recorded %d datagrams", len(r))
	}
}
