//go:build linux

package link_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/transport/link"
)

// TestTapOverUDP captures real loopback traffic in both directions; the
// receive side's destination comes from PKTINFO.
func TestTapOverUDP(t *testing.T) {
	a, err := link.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), link.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := link.ListenUDP(netip.MustParseAddrPort("127.0.0.2:0"), link.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
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
