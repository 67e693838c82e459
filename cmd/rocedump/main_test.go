package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// traceDir is the repository's golden captures.
const traceDir = "../../testdata/traces"

// cmDir holds rocedump's own captures with tshark's decodes (ucmatose, udaddy).
const cmDir = "testdata"

func traces(t *testing.T) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(traceDir, "*.pcap"))
	own, _ := filepath.Glob(filepath.Join(cmDir, "*.pcap"))
	m = append(m, own...)
	if len(m) == 0 {
		t.Fatal("no traces")
	}
	sort.Strings(m)
	return m
}

// table reads a tab-separated file whose first line, after a "#", names the
// columns (tshark's decodes in testdata/traces): one map per row.
func table(t *testing.T, path string) []map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	cols := strings.Split(strings.TrimPrefix(lines[0], "#"), "\t")
	var rows []map[string]string
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		row := map[string]string{}
		for i, c := range cols {
			if i < len(f) {
				row[c] = f[i]
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// summary reads tshark's decode: RoCE rows by frame number.
func summary(t *testing.T, pcap string) map[string]map[string]string {
	t.Helper()
	rows := map[string]map[string]string{}
	for _, row := range table(t, strings.TrimSuffix(pcap, ".pcap")+".summary.txt") {
		if row["proto"] == "RRoCE" {
			rows[row["no"]] = row
		}
	}
	return rows
}

// eachFrame calls f with every record of the capture at path and its link type.
func eachFrame(t *testing.T, path string, f func(data []byte, link uint32)) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	src, err := open(file)
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, link, _, err := src.next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f(data, link)
	}
}

// dumpTo dumps the capture r with opts to w.
func dumpTo(w io.Writer, r io.Reader, opts *options) (stats, error) {
	p := &printer{w: bufio.NewWriter(w), opts: opts}
	st, err := dump(p, r)
	p.w.Flush()
	return st, err
}

// runDump dumps data without timestamps, human or --tsv.
func runDump(t *testing.T, data []byte, tsv bool) (lines []string, err error) {
	t.Helper()
	var out bytes.Buffer
	_, err = dumpTo(&out, bytes.NewReader(data), &options{tsv: tsv, tstamps: 1})
	s := strings.TrimRight(out.String(), "\n")
	if s == "" {
		return nil, err
	}
	return strings.Split(s, "\n"), err
}

// TestTracesTSV: one line per RoCE packet, every column equal to tshark's,
// every ICRC verifying.
func TestTracesTSV(t *testing.T) {
	// rocedump column -> tshark column; numeric ones compare by value.
	same := map[string]string{
		"frame": "no", "src": "src", "dst": "dst", "sport": "sport", "dport": "dport", "opcode": "opcode",
		"dqp": "dqp", "psn": "psn", "ackreq": "ackreq", "se": "se", "pad": "pad", "pkey": "pkey",
		"syndrome": "aeth_syn", "msn": "msn", "qkey": "qkey", "srcqp": "srcqp", "va": "reth_va",
		"rkey": "reth_rkey", "dmalen": "reth_len", "imm": "imm", "icrc": "icrc",
	}
	total := 0
	for _, path := range traces(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			lines, err := runDump(t, data, true)
			if err != nil {
				t.Fatal(err)
			}
			if lines[0] != strings.Join(columns, "\t") {
				t.Fatalf("header %q", lines[0])
			}
			rows := summary(t, path)
			if len(lines)-1 != len(rows) {
				t.Fatalf("%d lines, tshark has %d RoCE packets", len(lines)-1, len(rows))
			}
			for _, l := range lines[1:] {
				f := strings.Split(l, "\t")
				if len(f) != len(columns) {
					t.Fatalf("%d columns: %q", len(f), l)
				}
				row := rows[f[0]]
				if row == nil {
					t.Fatalf("frame %s not RoCE for tshark", f[0])
				}
				for i, c := range columns {
					tc, ok := same[c]
					if !ok {
						continue
					}
					want := row[tc]
					if c == "imm" && want != "" {
						want = "0x" + want // tshark prints the immediate data in hex, unprefixed
					}
					if !equalField(f[i], want) {
						t.Errorf("frame %s %s = %q, tshark %s = %q", f[0], c, f[i], tc, row[tc])
					}
				}
				if f[22] != "1" {
					t.Errorf("frame %s: icrc_ok %s", f[0], f[22])
				}
				total++
			}
		})
	}
	if total < 1000 {
		t.Errorf("only %d packets", total)
	}
}

// equalField compares by numeric value when both parse as numbers (tshark
// prints some hex 64 bits wide), else as strings; 0x-hex icrc compares as text.
func equalField(a, b string) bool {
	if a == b {
		return true
	}
	x, err1 := strconv.ParseUint(a, 0, 64)
	y, err2 := strconv.ParseUint(b, 0, 64)
	return err1 == nil && err2 == nil && x == y
}

func TestTracesHuman(t *testing.T) {
	for _, path := range traces(t) {
		data, _ := os.ReadFile(path)
		lines, err := runDump(t, data, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) != len(summary(t, path)) {
			t.Errorf("%s: %d lines", path, len(lines))
		}
		for _, l := range lines {
			if !strings.HasSuffix(l, " icrc ok") {
				t.Errorf("%s: %q", path, l)
			}
		}
	}
}

// rocePayload returns the UDP payload of the first RoCE frame of a trace
// and its whole Ethernet frame.
func firstRoCE(t *testing.T, name string) (frame []byte) {
	t.Helper()
	f, err := os.Open(filepath.Join(traceDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			t.Fatal("no RoCE frame")
		}
		if _, err := extract(linkEthernet, data); err == nil {
			return data
		}
	}
}

// writePcap writes a little-endian pcap with pcapgo, patching in link
// types wider than its 8-bit layers.LinkType.
func writePcap(t *testing.T, link uint32, frames ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := pcapgo.NewWriter(&buf)
	if err := w.WriteFileHeader(65535, layers.LinkType(link)); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint32(buf.Bytes()[20:], link)
	for _, fr := range frames {
		ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(fr), Length: len(fr)}
		if err := w.WritePacket(ci, fr); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestMalformed(t *testing.T) {
	good := firstRoCE(t, "rc_pingpong_s64.pcap") // RC SEND ONLY, 64 bytes
	const udpOff = 14 + 20 + 8
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	arp := make([]byte, 42)
	arp[12], arp[13] = 0x08, 0x06
	frames := [][]byte{
		good,
		arp, // not IP: skipped
		mod(func(b []byte) []byte { b[udpOff] = 0x1F; return b }),     // unknown opcode
		mod(func(b []byte) []byte { b[udpOff+1] = 0x01; return b }),   // TVer 1
		mod(func(b []byte) []byte { b[udpOff+70] ^= 0xFF; return b }), // payload corrupted: ICRC bad
		mod(func(b []byte) []byte { return shrink(b, 10) }),           // 10-byte RoCE payload
		mod(func(b []byte) []byte { b[23] = 6; return b }),            // TCP: skipped
		good[:20], // cut inside IP: skipped
		good[:60], // cut by snaplen inside the payload
		mod(func(b []byte) []byte { b[udpOff-4], b[udpOff-3] = 0xFF, 0xFF; return b }), // UDP length beyond frame
	}
	lines, err := runDump(t, writePcap(t, linkEthernet, frames...), true)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ frame, opname, ok string }{
		{"1", "RC_SEND_ONLY", "1"},
		{"3", "malformed: bth: unknown opcode", "0"},
		{"4", "malformed: bth: transport header version not 0", "0"},
		{"5", "RC_SEND_ONLY", "0"},
		{"6", "malformed: bth: packet truncated", "0"},
		{"9", "malformed: frame cut short by the capture (snaplen)", "0"},
		{"10", "malformed: UDP length disagrees with the IP length", "0"},
	}
	if len(lines) != 1+len(want) {
		t.Fatalf("got %d lines:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	for i, w := range want {
		f := strings.Split(lines[i+1], "\t")
		if f[0] != w.frame || f[6] != w.opname || f[22] != w.ok || len(f) != len(columns) {
			t.Errorf("line %d: %q, want frame %s %q icrc_ok %s", i+1, lines[i+1], w.frame, w.opname, w.ok)
		}
	}
	human, err := runDump(t, writePcap(t, linkEthernet, frames...), false)
	if err != nil || len(human) != len(want) || !strings.Contains(human[1], "malformed RoCE") || !strings.Contains(human[3], "icrc BAD") {
		t.Errorf("human output %v:\n%s", err, strings.Join(human, "\n"))
	}
}

// shrink cuts the UDP payload to n bytes, fixing IP and UDP lengths.
func shrink(b []byte, n int) []byte {
	b = b[:14+20+8+n]
	putBE16(b[14+2:], uint16(20+8+n))
	putBE16(b[14+20+4:], uint16(8+n))
	return b
}

func putBE16(b []byte, v uint16) { b[0], b[1] = byte(v>>8), byte(v) }

func TestPcapng(t *testing.T) {
	eth := firstRoCE(t, "ib_read_bw.pcap")
	var buf bytes.Buffer
	w, err := pcapgo.NewNgWriter(&buf, layers.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(1, 0), CaptureLength: len(eth), Length: len(eth), InterfaceIndex: 0}
	if err := w.WritePacket(ci, eth); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := runDump(t, buf.Bytes(), true)
	ref, _ := runDump(t, writePcap(t, linkEthernet, eth), true)
	if err != nil || len(got) != 2 || got[1] != ref[1] {
		t.Errorf("pcapng: %v %q", err, got)
	}
}

func TestBadFiles(t *testing.T) {
	if _, err := runDump(t, []byte("hello world"), true); err == nil {
		t.Error("text file accepted")
	}
	if _, err := runDump(t, nil, true); err == nil {
		t.Error("empty file accepted")
	}
	data, _ := os.ReadFile(filepath.Join(traceDir, "rping.pcap"))
	lines, err := runDump(t, data[:len(data)-30], true)
	if err == nil || len(lines) < 10 {
		t.Errorf("cut file: %v, %d lines", err, len(lines))
	}
}

// FuzzExtract: arbitrary frames never panic the link/IP/UDP decoder or the
// line writers.
func FuzzExtract(f *testing.F) {
	f.Add(uint16(linkEthernet), []byte{})
	f.Add(uint16(linkSLL), make([]byte, 16))
	f.Add(uint16(linkSLL2), make([]byte, 20))
	f.Add(uint16(linkNull), []byte{2, 0, 0, 0, 0x45})
	f.Add(uint16(linkRaw), append([]byte{0x60, 0, 0, 0, 0, 16, 0}, make([]byte, 57)...))
	f.Fuzz(func(t *testing.T, link uint16, b []byte) {
		d, err := extract(uint32(link), b)
		if err != nil {
			return
		}
		p := &printer{w: bufio.NewWriter(io.Discard), opts: &options{}}
		p.print(1, time.Unix(1, 0), &d)
		p.opts.tsv = true
		p.print(1, time.Unix(1, 0), &d)
	})
}
