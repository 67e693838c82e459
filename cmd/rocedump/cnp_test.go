package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/testsupport/cnptest"
	"github.com/goroce/goroce/link"
)

// TestCNP: a CNP as goroce builds it (bth.Append, the ICRC for ID 0 and DF,
// framed by link's pcap Tap with the CNP's TOS) decodes in rocedump with
// BECN and a good ICRC, and in tshark with the repository's CNP dissector.
func TestCNP(t *testing.T) {
	src := netip.MustParseAddrPort("198.18.0.1:4791")
	dst := netip.MustParseAddrPort("198.18.0.11:4791")
	f := bth.Fields{Opcode: bth.CNP, BECN: true, PKey: 0xFFFF, DestQP: 0x000d2}
	pkt := bth.Append(nil, &f, nil)
	bth.PutICRC(&bth.Envelope{Src: src.Addr(), Dst: dst.Addr(), DF: true, SrcPort: src.Port(), DstPort: dst.Port()}, pkt)

	var pcap bytes.Buffer
	a, b := link.Pipe(src, dst)
	defer b.Close()
	tap, err := link.NewTap(a, &pcap, link.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tap.WriteBatch([]link.Message{{Buf: pkt, Addr: dst}}); err != nil {
		t.Fatal(err)
	}
	tap.Close()

	lines, err := runDump(t, pcap.Bytes(), false)
	if err != nil || len(lines) != 1 || !strings.HasSuffix(lines[0], "CNP qp 0x0000d2 psn 0 becn icrc ok") {
		t.Fatalf("rocedump: %q, %v", lines, err)
	}
	tsv, err := runDump(t, pcap.Bytes(), true)
	if err != nil || len(tsv) != 2 {
		t.Fatalf("rocedump -tsv: %q, %v", tsv, err)
	}
	if c := strings.Split(tsv[1], "\t"); c[5] != "129" || c[6] != "CNP" || c[7] != "0x0000d2" || c[12] != "65535" || c[22] != "1" {
		t.Fatalf("rocedump -tsv: %q", tsv[1])
	}

	cnps := cnptest.Dissect(t, pcap.Bytes())
	want := cnptest.CNP{Frame: 1, PKey: 0xFFFF, DestQP: 0xd2, BECN: true, Reserved: strings.Repeat("00", 16)}
	if len(cnps) != 1 || cnps[0] != want {
		t.Fatalf("tshark: %+v, want %+v", cnps, want)
	}
}
