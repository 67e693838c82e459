// Package tracetest loads the golden rxe captures in the repository's
// testdata/traces for tests of bth and its sub-packages: the RoCEv2 frames
// of a pcap with their IP/UDP envelope, and tshark's decode of each frame.
// It is a test helper; production code must not import it.
package tracetest

import (
	"bufio"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/goroce/goroce/bth"
)

// RoCEPort is the IANA UDP port of RoCEv2.
const RoCEPort = 4791

// Dir returns the absolute path of the repository's testdata/traces.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "testdata", "traces")
}

// Names returns the base names (without extension) of every capture.
func Names(tb testing.TB) []string {
	tb.Helper()
	m, err := filepath.Glob(filepath.Join(Dir(), "*.pcap"))
	if err != nil || len(m) == 0 {
		tb.Fatalf("no traces in %s: %v", Dir(), err)
	}
	var names []string
	for _, p := range m {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".pcap"))
	}
	sort.Strings(names)
	return names
}

// Frame is one RoCEv2 datagram of a capture.
type Frame struct {
	No    int          // 1-based frame number, as tshark numbers it
	Data  []byte       // the whole link-layer frame
	Env   bth.Envelope // IP/UDP facts, with the real IPv4 ID and DF
	UDP   []byte       // the UDP payload: BTH .. ICRC
	IPv4  *layers.IPv4 // nil for IPv6
	Layer *layers.UDP
}

// Frames returns every frame of NAME.pcap whose UDP source or destination
// port is 4791.
func Frames(tb testing.TB, name string) []Frame {
	tb.Helper()
	f, err := os.Open(filepath.Join(Dir(), name+".pcap"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var out []Frame
	for no := 1; ; no++ {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		pkt := gopacket.NewPacket(data, r.LinkType(), gopacket.DecodeOptions{NoCopy: true, Lazy: true})
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp == nil || (udp.DstPort != RoCEPort && udp.SrcPort != RoCEPort) {
			continue
		}
		fr := Frame{No: no, Data: data, Layer: udp, UDP: udp.Payload}
		fr.Env.SrcPort, fr.Env.DstPort = uint16(udp.SrcPort), uint16(udp.DstPort)
		switch ip := pkt.NetworkLayer().(type) {
		case *layers.IPv4:
			fr.IPv4 = ip
			fr.Env.Src, _ = netip.AddrFromSlice(ip.SrcIP.To4())
			fr.Env.Dst, _ = netip.AddrFromSlice(ip.DstIP.To4())
			fr.Env.IPID = ip.Id
			fr.Env.DF = ip.Flags&layers.IPv4DontFragment != 0
		case *layers.IPv6:
			fr.Env.Src, _ = netip.AddrFromSlice(ip.SrcIP)
			fr.Env.Dst, _ = netip.AddrFromSlice(ip.DstIP)
		default:
			tb.Fatalf("%s frame %d: UDP without IP", name, no)
		}
		out = append(out, fr)
	}
	return out
}

// Row is one tshark summary line, by column name.
type Row map[string]string

// Summary returns tshark's decode of NAME.pcap by frame number, only the
// rows tshark decoded as RoCE (proto "RRoCE").
func Summary(tb testing.TB, name string) map[int]Row {
	tb.Helper()
	f, err := os.Open(filepath.Join(Dir(), name+".summary.txt"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var cols []string
	rows := map[int]Row{}
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if cols == nil {
			fields[0] = strings.TrimPrefix(fields[0], "#")
			cols = fields
			continue
		}
		row := Row{}
		for i, c := range cols {
			if i < len(fields) {
				row[c] = fields[i]
			}
		}
		if row["proto"] != "RRoCE" {
			continue
		}
		no, err := strconv.Atoi(row["no"])
		if err != nil {
			tb.Fatalf("%s: bad frame number %q", name, row["no"])
		}
		rows[no] = row
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return rows
}
