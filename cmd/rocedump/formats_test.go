package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/goroce/goroce/bth"
)

// refICRC is the ICRC of an IP packet whose UDP header is at udpOff, done
// the plain way (scapy's): the whole IP packet, variant fields set to ones,
// behind 8 bytes of ones, trailer excluded. It is independent of bth and of
// bth.ICRCOverHeaders and is checked against the traces in TestICRCOverHeadersOnTraces.
func refICRC(ip []byte, udpOff int) uint32 {
	m := append(bytes.Repeat([]byte{0xFF}, 8), ip[:len(ip)-bth.ICRCLen]...)
	h := m[8:]
	if h[0]>>4 == 4 {
		h[1], h[8], h[10], h[11] = 0xFF, 0xFF, 0xFF, 0xFF
	} else {
		h[0] |= 0x0F
		h[1], h[2], h[3], h[7] = 0xFF, 0xFF, 0xFF, 0xFF
	}
	h[udpOff+6], h[udpOff+7] = 0xFF, 0xFF
	h[udpOff+8+4] = 0xFF
	return crc32.ChecksumIEEE(m)
}

func putRefICRC(ip []byte, udpOff int) {
	binary.LittleEndian.PutUint32(ip[len(ip)-bth.ICRCLen:], refICRC(ip, udpOff))
}

// ethIPv6 rebuilds the IPv4 RoCE frame eth as IPv6, with the extension
// headers ext (whose chain must end in UDP, 17) after a fixed header whose
// next header is nh, and the trailer recomputed.
func ethIPv6(eth []byte, nh byte, ext []byte) []byte {
	udp := eth[14+20:]
	ip := []byte{0x61, 0x23, 0x45, 0x67, 0, 0, nh, 64} // traffic class and flow label not zero
	putBE16(ip[4:], uint16(len(ext)+len(udp)))
	src, dst := netip.MustParseAddr("fd00::11").As16(), netip.MustParseAddr("fd00::12").As16()
	ip = append(append(append(append(ip, src[:]...), dst[:]...), ext...), udp...)
	putRefICRC(ip, 40+len(ext))
	return append(append(bytes.Clone(eth[:12]), 0x86, 0xDD), ip...)
}

// ethIPv4Options inserts IPv4 options into eth and recomputes the trailer.
func ethIPv4Options(eth, opts []byte) []byte {
	out := append(append(bytes.Clone(eth[:14+20]), opts...), eth[14+20:]...)
	ip := out[14:]
	ip[0] = 0x40 | byte((20+len(opts))/4)
	putBE16(ip[2:], uint16(len(ip)))
	putRefICRC(ip, 20+len(opts))
	return out
}

// cols splits a -tsv line and blanks the columns that differ between two
// encapsulations of one packet: frame and icrc.
func cols(line string) string {
	f := strings.Split(line, "\t")
	if len(f) != len(columns) {
		return line
	}
	f[0], f[21], f[23] = "", "", ""
	return strings.Join(f, "\t")
}

// oneLine dumps data and returns its only packet line ("" for none).
func oneLine(t *testing.T, data []byte) string {
	t.Helper()
	lines, err := runDump(t, data, true)
	if err != nil {
		t.Fatal(err)
	}
	switch len(lines) {
	case 1:
		return ""
	case 2:
		return lines[1]
	}
	t.Fatalf("%d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	return ""
}

// pcapBE hand-writes a big-endian pcap (pcapgo writes only little-endian).
func pcapBE(link uint32, frames ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0xA1B2C3D4)
	b = binary.BigEndian.AppendUint16(b, 2)
	b = binary.BigEndian.AppendUint16(b, 4)
	b = append(b, make([]byte, 8)...)
	b = binary.BigEndian.AppendUint32(b, 65535)
	b = binary.BigEndian.AppendUint32(b, link)
	for _, fr := range frames {
		b = binary.BigEndian.AppendUint32(b, 1)
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint32(b, uint32(len(fr)))
		b = binary.BigEndian.AppendUint32(b, uint32(len(fr)))
		b = append(b, fr...)
	}
	return b
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// sll2 is a Linux cooked v2 header: protocol, reserved, ifindex, ARPHRD_ETHER,
// PACKET_HOST, address length 6, address padded to 8 bytes.
func sll2(proto uint16) []byte {
	return []byte{byte(proto >> 8), byte(proto), 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0}
}

func cat(b ...[]byte) []byte { return bytes.Join(b, nil) }

func TestLinkTypes(t *testing.T) {
	eth4 := firstRoCE(t, "ud_pingpong.pcap")
	eth6 := ethIPv6(eth4, 17, nil)
	ip4, ip6 := eth4[14:], eth6[14:]
	ref4 := oneLine(t, writePcap(t, linkEthernet, eth4))
	ref6 := oneLine(t, writePcap(t, linkEthernet, eth6))
	if strings.Split(ref6, "\t")[22] != "1" || !strings.Contains(ref6, "fd00::11") {
		t.Fatalf("IPv6 reference %q", ref6)
	}
	sll := func(proto uint16) []byte {
		return []byte{0, 0, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, byte(proto >> 8), byte(proto)}
	}
	tag := func(tpid uint16, vid byte) []byte { return []byte{byte(tpid >> 8), byte(tpid), 0, vid} }
	for _, tc := range []struct {
		name string
		file []byte
		want string // "" for no line
	}{
		{"raw ipv4", writePcap(t, linkRaw, ip4), ref4},
		{"raw ipv6", writePcap(t, linkRaw, ip6), ref6},
		{"ipv4", writePcap(t, linkIPv4, ip4), ref4},
		{"ipv6", writePcap(t, linkIPv6, ip6), ref6},
		{"dlt raw 12", writePcap(t, linkRawAlt, ip4), ref4},
		{"dlt raw 14 openbsd", writePcap(t, linkRawBSD, ip6), ref6},
		{"sll", writePcap(t, linkSLL, cat(sll(0x0800), ip4)), ref4},
		{"sll vlan", writePcap(t, linkSLL, cat(sll(0x8100), []byte{0, 5, 0x86, 0xDD}, ip6)), ref6},
		{"sll2 ipv4", writePcap(t, linkSLL2, cat(sll2(0x0800), ip4)), ref4},
		{"sll2 ipv6", writePcap(t, linkSLL2, cat(sll2(0x86DD), ip6)), ref6},
		{"sll2 vlan", writePcap(t, linkSLL2, cat(sll2(0x8100), []byte{0, 5, 0x08, 0x00}, ip4)), ref4},
		{"sll2 big-endian pcap", pcapBE(linkSLL2, cat(sll2(0x0800), ip4)), ref4},
		{"sll2 arp", writePcap(t, linkSLL2, cat(sll2(0x0806), ip4)), ""},
		{"sll2 short", writePcap(t, linkSLL2, sll2(0x0800)[:19]), ""},
		{"null ipv4 little-endian host", writePcap(t, linkNull, cat(le32(2), ip4)), ref4},
		{"null ipv4 big-endian host", writePcap(t, linkNull, cat(be32(2), ip4)), ref4},
		{"null ipv6 linux", writePcap(t, linkNull, cat(le32(10), ip6)), ref6},
		{"null ipv6 bsd", writePcap(t, linkNull, cat(le32(24), ip6)), ref6},
		{"null ipv6 freebsd", writePcap(t, linkNull, cat(le32(28), ip6)), ref6},
		{"null ipv6 macos", writePcap(t, linkNull, cat(be32(30), ip6)), ref6},
		{"null unknown family", writePcap(t, linkNull, cat(le32(7), ip4)), ""},
		{"loop ipv4", writePcap(t, linkLoop, cat(be32(2), ip4)), ref4},
		{"loop ipv6", writePcap(t, linkLoop, cat(be32(24), ip6)), ref6},
		{"ether 802.1q", writePcap(t, linkEthernet, cat(eth4[:12], tag(0x8100, 5), eth4[12:])), ref4},
		{"ether 802.1ad", writePcap(t, linkEthernet, cat(eth4[:12], tag(0x88A8, 7), tag(0x8100, 5), eth4[12:])), ref4},
		{"ether old qinq 0x9100", writePcap(t, linkEthernet, cat(eth6[:12], tag(0x9100, 7), tag(0x8100, 5), eth6[12:])), ref6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := oneLine(t, tc.file); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestICRCOverHeadersOnTraces anchors bth.ICRCOverHeaders and refICRC to bth.ICRC and the captured
// trailers on every RoCE packet of the traces (no options there).
func TestICRCOverHeadersOnTraces(t *testing.T) {
	n := 0
	for _, path := range traces(t) {
		eachFrame(t, path, func(data []byte, link uint32) {
			d, err := extract(link, data)
			if err != nil || d.err != nil {
				return
			}
			want := binary.LittleEndian.Uint32(d.payload[len(d.payload)-4:])
			if got := bth.ICRC(&d.env, d.payload); got != want {
				t.Fatalf("%s: bth %#x, trailer %#x", path, got, want)
			}
			if got := bth.ICRCOverHeaders(d.hdr, d.payload); got != want {
				t.Fatalf("%s: ICRCOverHeaders %#x, trailer %#x", path, got, want)
			}
			if got := refICRC(data[14:], 20); got != want {
				t.Fatalf("%s: refICRC %#x, trailer %#x", path, got, want)
			}
			n++
		})
	}
	if n < 1000 {
		t.Errorf("only %d packets", n)
	}
}

// TestIPv4Options: options are covered by the ICRC as they are.
func TestIPv4Options(t *testing.T) {
	eth := firstRoCE(t, "rc_pingpong_s64.pcap")
	ref := cols(oneLine(t, writePcap(t, linkEthernet, eth)))
	bad := ethIPv4Options(eth, []byte{0x94, 0x04, 0, 0})
	bad[14+22] ^= 1 // router alert value changed after the ICRC
	frag := bytes.Clone(eth)
	frag[14+6] |= 0x20 // MF
	later := bytes.Clone(eth)
	later[14+7] = 1 // fragment offset 8
	for _, tc := range []struct {
		name   string
		frame  []byte
		opname string // "" for no line
		ok     string
	}{
		{"nop", ethIPv4Options(eth, []byte{1, 1, 1, 0}), "RC_SEND_ONLY", "1"},
		{"router alert", ethIPv4Options(eth, []byte{0x94, 0x04, 0, 0}), "RC_SEND_ONLY", "1"},
		{"40 bytes", ethIPv4Options(eth, append([]byte{7, 39, 4}, make([]byte, 37)...)), "RC_SEND_ONLY", "1"},
		{"options corrupted", bad, "RC_SEND_ONLY", "0"},
		{"first fragment", frag, "malformed: " + errFragment.Error(), "0"},
		{"later fragment", later, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) { checkDecoded(t, tc.frame, tc.opname, tc.ok, ref) })
	}
}

// TestIPv6ExtensionHeaders: rocedump follows extension headers to UDP and
// checks the ICRC over them as they are.
func TestIPv6ExtensionHeaders(t *testing.T) {
	eth4 := firstRoCE(t, "ib_read_bw.pcap")
	ref := cols(oneLine(t, writePcap(t, linkEthernet, ethIPv6(eth4, 17, nil))))
	hbh := func(nh byte) []byte { return []byte{nh, 0, 1, 4, 0, 0, 0, 0} }                          // PadN
	rt := func(nh byte) []byte { return []byte{nh, 0, 4, 0, 0, 0, 0, 0} }                           // SRH, no segments left
	dst := func(nh byte) []byte { return []byte{nh, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0} } // PadN, 16 bytes
	fh := func(nh byte, off uint16, m bool) []byte {
		b := []byte{nh, 0, 0, 0, 0x12, 0x34, 0x56, 0x78}
		if m {
			off |= 1
		}
		putBE16(b[2:], off)
		return b
	}
	ah := func(nh byte) []byte { return append([]byte{nh, 4, 0, 0}, make([]byte, 20)...) } // 24 bytes
	corrupt := ethIPv6(eth4, 0, hbh(17))
	corrupt[14+40+4] ^= 1
	for _, tc := range []struct {
		name   string
		frame  []byte
		opname string
		ok     string
	}{
		{"hop-by-hop", ethIPv6(eth4, 0, hbh(17)), "RC_RDMA_READ_REQUEST", "1"},
		{"routing", ethIPv6(eth4, 43, rt(17)), "RC_RDMA_READ_REQUEST", "1"},
		{"destination options", ethIPv6(eth4, 60, dst(17)), "RC_RDMA_READ_REQUEST", "1"},
		{"chain", ethIPv6(eth4, 0, cat(hbh(60), dst(43), rt(51), ah(17))), "RC_RDMA_READ_REQUEST", "1"},
		{"atomic fragment", ethIPv6(eth4, 44, fh(17, 0, false)), "RC_RDMA_READ_REQUEST", "1"},
		{"options corrupted", corrupt, "RC_RDMA_READ_REQUEST", "0"},
		{"first fragment", ethIPv6(eth4, 44, fh(17, 0, true)), "malformed: " + errFragment.Error(), "0"},
		{"later fragment", ethIPv6(eth4, 44, fh(17, 8, false)), "", ""},
		{"esp", ethIPv6(eth4, 50, hbh(17)), "", ""},
		{"tcp after hop-by-hop", ethIPv6(eth4, 0, hbh(6)), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) { checkDecoded(t, tc.frame, tc.opname, tc.ok, ref) })
	}
}

// ngRec is one pcapng record: a packet of interface iface, or a simple
// packet block (iface -1), or an interface statistics block (iface -2).
type ngRec struct {
	iface int
	data  []byte
}

type ngSection struct {
	bo    binary.AppendByteOrder
	links []uint16
	recs  []ngRec
}

// pcapng hand-writes a pcapng file (pcapgo's writer has 8-bit link types).
func pcapng(secs ...ngSection) []byte {
	var out []byte
	for _, s := range secs {
		block := func(typ uint32, body []byte) {
			body = append(body, make([]byte, (4-len(body)%4)%4)...)
			out = s.bo.AppendUint32(out, typ)
			out = s.bo.AppendUint32(out, uint32(12+len(body)))
			out = append(out, body...)
			out = s.bo.AppendUint32(out, uint32(12+len(body)))
		}
		shb := s.bo.AppendUint32(nil, 0x1A2B3C4D)
		shb = s.bo.AppendUint16(shb, 1)
		shb = s.bo.AppendUint16(shb, 0)
		shb = append(shb, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF) // section length unknown
		block(0x0A0D0D0A, shb)
		for _, l := range s.links {
			idb := s.bo.AppendUint16(nil, l)
			idb = append(idb, 0, 0)
			block(1, s.bo.AppendUint32(idb, 65535))
		}
		for _, r := range s.recs {
			switch r.iface {
			case -1:
				block(3, append(s.bo.AppendUint32(nil, uint32(len(r.data))), r.data...))
			case -2:
				block(5, make([]byte, 12))
			default:
				epb := s.bo.AppendUint32(nil, uint32(r.iface))
				epb = append(epb, make([]byte, 8)...)
				epb = s.bo.AppendUint32(epb, uint32(len(r.data)))
				epb = s.bo.AppendUint32(epb, uint32(len(r.data)))
				block(6, append(epb, r.data...))
			}
		}
	}
	return out
}

// TestPcapngInterfaces: every record counts as a frame, whatever its
// interface, and each packet is decoded with its own interface's link type.
func TestPcapngInterfaces(t *testing.T) {
	eth := firstRoCE(t, "ib_write_bw.pcap")
	ip := eth[14:]
	ref := cols(oneLine(t, writePcap(t, linkEthernet, eth)))
	arp := append(bytes.Clone(eth[:12]), 0x08, 0x06, 0, 1)
	le, be := binary.LittleEndian, binary.BigEndian
	mixed := []ngSection{
		{le, []uint16{linkEthernet, linkSLL2, 147}, []ngRec{
			{0, arp},                    // 1
			{2, eth},                    // 2: USER0, not decoded
			{1, cat(sll2(0x0800), ip)},  // 3
			{-2, nil},                   // statistics: not a frame
			{0, eth},                    // 4
			{-1, eth},                   // 5: simple packet block, interface 0
			{2, eth},                    // 6
			{1, cat(sll2(0x0806), arp)}, // 7
		}},
		{be, []uint16{linkRaw, linkEthernet}, []ngRec{
			{1, arp}, // 8
			{0, ip},  // 9
			{1, eth}, // 10
		}},
		{le, []uint16{linkNull}, []ngRec{
			{0, cat(le32(2), ip)}, // 11
		}},
	}
	for _, tc := range []struct {
		name  string
		file  []byte
		wrap  func(io.Reader) io.Reader
		want  []string // frame numbers of the lines
		skips map[uint32]int
	}{
		{"one interface", pcapng(ngSection{le, []uint16{linkEthernet}, []ngRec{{0, arp}, {0, eth}}}), nil, []string{"2"}, map[uint32]int{}},
		{"sll2 only", pcapng(ngSection{be, []uint16{linkSLL2}, []ngRec{{0, cat(sll2(0x0800), ip)}}}), nil, []string{"1"}, map[uint32]int{}},
		{"mixed", pcapng(mixed...), nil, []string{"3", "4", "5", "9", "10", "11"}, map[uint32]int{147: 2}},
		{"mixed, one byte per read", pcapng(mixed...), iotest.OneByteReader, []string{"3", "4", "5", "9", "10", "11"}, map[uint32]int{147: 2}},
		{"mixed, half reads", pcapng(mixed...), iotest.HalfReader, []string{"3", "4", "5", "9", "10", "11"}, map[uint32]int{147: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r io.Reader = bytes.NewReader(tc.file)
			if tc.wrap != nil {
				r = tc.wrap(r)
			}
			var out bytes.Buffer
			st, err := dumpTo(&out, r, &options{tsv: true})
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")[1:]
			var frames []string
			for _, l := range lines {
				frames = append(frames, strings.Split(l, "\t")[0])
				if cols(l) != ref {
					t.Errorf("got  %q\nwant %q", cols(l), ref)
				}
			}
			if strings.Join(frames, " ") != strings.Join(tc.want, " ") {
				t.Errorf("frames %v, want %v", frames, tc.want)
			}
			if len(st.unsupported) != len(tc.skips) {
				t.Errorf("unsupported %v, want %v", st.unsupported, tc.skips)
			}
			for k, v := range tc.skips {
				if st.unsupported[k] != v {
					t.Errorf("unsupported %v, want %v", st.unsupported, tc.skips)
				}
			}
		})
	}
}

// TestUnsupportedLinkType: frames of a link type rocedump cannot decode
// are reported on stderr, and a file of nothing else fails.
func TestUnsupportedLinkType(t *testing.T) {
	eth := firstRoCE(t, "rping.pcap")
	dir := t.TempDir()
	twelve := make([][]byte, 12)
	for i := range twelve {
		twelve[i] = eth
	}
	le := binary.LittleEndian
	for _, tc := range []struct {
		name   string
		file   []byte
		lines  int // stdout lines, header included
		stderr string
		code   int
	}{
		{"pcap user0", writePcap(t, 147, twelve...), 1, "rocedump: FILE: link type 147 not supported; 12 frames skipped\n", 1},
		{"pcap one frame", writePcap(t, 300, eth), 1, "rocedump: FILE: link type 300 not supported; 1 frame skipped\n", 1},
		{"pcapng some supported", pcapng(ngSection{le, []uint16{147, linkEthernet, 149}, []ngRec{{0, eth}, {1, eth}, {2, eth}, {0, eth}}}), 2,
			"rocedump: FILE: link type 147 not supported; 2 frames skipped\nrocedump: FILE: link type 149 not supported; 1 frame skipped\n", 0},
		{"pcapng none supported", pcapng(ngSection{le, []uint16{147, 149}, []ngRec{{0, eth}, {1, eth}}}), 1,
			"rocedump: FILE: link type 147 not supported; 1 frame skipped\nrocedump: FILE: link type 149 not supported; 1 frame skipped\n", 1},
		{"no frames", writePcap(t, 147), 1, "", 0},
		{"no roce", writePcap(t, linkEthernet, eth[:14]), 1, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(path, tc.file, 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"--tsv", "-r", path}, nil, &stdout, &stderr)
			want := strings.ReplaceAll(tc.stderr, "FILE", path)
			if code != tc.code || stderr.String() != want || strings.Count(stdout.String(), "\n") != tc.lines {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit %d, stderr %q, %d lines", code, stderr.String(), stdout.String(), tc.code, want, tc.lines)
			}
		})
	}
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"-r", filepath.Join(dir, "missing")}, nil, io.Discard, &stderr); code != 1 || !strings.HasPrefix(stderr.String(), "rocedump: ") {
		t.Errorf("missing file: exit %d, %q", code, stderr.String())
	}
}

// checkDecoded dumps frame and checks its one line: opname (none: no line at
// all) and icrc_ok, and for a good ICRC every other column against ref.
func checkDecoded(t *testing.T, frame []byte, opname, ok, ref string) {
	t.Helper()
	got := oneLine(t, writePcap(t, linkEthernet, frame))
	if opname == "" {
		if got != "" {
			t.Fatalf("got %q", got)
		}
		return
	}
	f := strings.Split(got, "\t")
	if len(f) != len(columns) || f[6] != opname || f[22] != ok {
		t.Fatalf("got %q, want %s icrc_ok %s", got, opname, ok)
	}
	if ok == "1" && cols(got) != ref {
		t.Errorf("got  %q\nwant %q", cols(got), ref)
	}
}
