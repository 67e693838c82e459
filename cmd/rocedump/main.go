package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/version"
)

func main() {
	tsv := flag.Bool("tsv", false, "print tab-separated columns with a header line")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: rocedump [-tsv] FILE.pcap|FILE.pcapng\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *showVersion {
		version.Print(os.Stdout, "rocedump")
		return
	}
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(flag.Arg(0), *tsv, os.Stdout, os.Stderr))
}

// run dumps the file at path and returns the exit status: 1 if the file
// cannot be read, or if it has frames but none of a link type rocedump
// decodes. Frames of unsupported link types are never skipped silently: one
// warning per link type goes to stderr.
func run(path string, tsv bool, stdout, stderr io.Writer) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(stderr, "rocedump:", err)
		return 1
	}
	defer f.Close()
	w := bufio.NewWriter(stdout)
	st, err := dump(w, f, tsv)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	skipped := 0
	for _, link := range slices.Sorted(maps.Keys(st.unsupported)) {
		n := st.unsupported[link]
		skipped += n
		fmt.Fprintf(stderr, "rocedump: %s: link type %d not supported; %d %s skipped\n", path, link, n, plural(n, "frame"))
	}
	if err != nil {
		fmt.Fprintln(stderr, "rocedump:", err)
		return 1
	}
	if skipped > 0 && skipped == st.frames {
		return 1
	}
	return 0
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

// columns are the -tsv columns, in order.
var columns = []string{"frame", "src", "dst", "sport", "dport", "opcode", "opname", "dqp", "psn", "ackreq", "se",
	"pad", "pkey", "syndrome", "msn", "qkey", "srcqp", "va", "rkey", "dmalen", "imm", "icrc", "icrc_ok"}

// stats is what dump read besides the lines it printed.
type stats struct {
	frames      int            // records in the file
	unsupported map[uint32]int // frames by link type extract does not decode
}

// dump reads a pcap or pcapng stream from r and writes one line per RoCEv2
// packet to w; frames are numbered by their record in the file, as tshark
// does. It returns an error only when the file itself cannot be read; a
// file cut short mid-record ends the dump with an error after the lines
// already printed.
func dump(w io.Writer, r io.Reader, tsv bool) (stats, error) {
	st := stats{unsupported: map[uint32]int{}}
	src, err := open(r)
	if err != nil {
		return st, err
	}
	if tsv {
		fmt.Fprintln(w, strings.Join(columns, "\t"))
	}
	for no := 1; ; no++ {
		data, link, err := src.next()
		if err == io.EOF {
			return st, nil
		}
		if err != nil {
			return st, fmt.Errorf("frame %d: %w", no, err)
		}
		st.frames = no
		d, err := extract(link, data)
		if err == errLinkType {
			st.unsupported[link]++
		}
		if err != nil {
			continue
		}
		if tsv {
			writeTSV(w, no, &d)
		} else {
			writeHuman(w, no, &d)
		}
	}
}

// icrcOK checks the trailer against the capture's IP/UDP header.
func icrcOK(d *datagram) bool {
	if len(d.payload) < bth.BTHLen+bth.ICRCLen {
		return false
	}
	return binary.LittleEndian.Uint32(d.payload[len(d.payload)-bth.ICRCLen:]) == icrc(d)
}

func hex0x(v uint64, digits int) string {
	s := strconv.FormatUint(v, 16)
	if len(s) < digits {
		s = strings.Repeat("0", digits-len(s)) + s
	}
	return "0x" + s
}

func b01(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func writeTSV(w io.Writer, no int, d *datagram) {
	col := make([]string, len(columns))
	col[0] = strconv.Itoa(no)
	col[1], col[2] = d.env.Src.String(), d.env.Dst.String()
	col[3], col[4] = strconv.Itoa(int(d.env.SrcPort)), strconv.Itoa(int(d.env.DstPort))
	p, err := bth.Parse(d.payload)
	if d.err != nil {
		err = d.err
	}
	if err != nil {
		if len(d.payload) > 0 {
			col[5] = strconv.Itoa(int(d.payload[0]))
		}
		col[6] = "malformed: " + err.Error()
		col[22] = "0"
		fmt.Fprintln(w, strings.Join(col, "\t"))
		return
	}
	op := p.Opcode()
	col[5], col[6] = strconv.Itoa(int(op)), op.String()
	col[7] = hex0x(uint64(p.DestQP()), 6)
	col[8] = strconv.Itoa(int(p.PSN()))
	col[9], col[10] = b01(p.AckReq()), b01(p.SE())
	col[11] = strconv.Itoa(p.PadCount())
	col[12] = strconv.Itoa(int(p.PKey()))
	if op.HasAETH() {
		a := p.AETH()
		col[13], col[14] = strconv.Itoa(int(a.Syndrome)), strconv.Itoa(int(a.MSN))
	}
	if op.HasDETH() {
		dt := p.DETH()
		col[15], col[16] = hex0x(uint64(dt.QKey), 8), strconv.Itoa(int(dt.SrcQP))
	}
	switch {
	case op.HasRETH():
		r := p.RETH()
		col[17], col[18], col[19] = hex0x(r.VA, 16), hex0x(uint64(r.RKey), 8), strconv.FormatUint(uint64(r.DMALen), 10)
	case op.HasAtomicETH():
		a := p.AtomicETH()
		col[17], col[18] = hex0x(a.VA, 16), hex0x(uint64(a.RKey), 8)
	}
	if op.HasImm() {
		col[20] = strconv.FormatUint(uint64(p.Imm()), 10)
	}
	col[21] = "0x" + hex.EncodeToString(d.payload[len(d.payload)-bth.ICRCLen:])
	col[22] = b01(icrcOK(d))
	fmt.Fprintln(w, strings.Join(col, "\t"))
}

func writeHuman(w io.Writer, no int, d *datagram) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d %v:%d > %v:%d ", no, d.env.Src, d.env.SrcPort, d.env.Dst, d.env.DstPort)
	p, err := bth.Parse(d.payload)
	if d.err != nil {
		err = d.err
	}
	if err != nil {
		fmt.Fprintf(&sb, "malformed RoCE (%d bytes): %v", len(d.payload), err)
		fmt.Fprintln(w, sb.String())
		return
	}
	op := p.Opcode()
	fmt.Fprintf(&sb, "%v qp %#06x psn %d", op, p.DestQP(), p.PSN())
	if p.AckReq() {
		sb.WriteString(" ackreq")
	}
	if p.SE() {
		sb.WriteString(" se")
	}
	if p.FECN() {
		sb.WriteString(" fecn")
	}
	if p.BECN() {
		sb.WriteString(" becn")
	}
	if p.PKey() != 0xFFFF {
		fmt.Fprintf(&sb, " pkey %#04x", p.PKey())
	}
	if op.HasDETH() {
		dt := p.DETH()
		fmt.Fprintf(&sb, " qkey %#x srcqp %#x", dt.QKey, dt.SrcQP)
	}
	if op.HasRETH() {
		r := p.RETH()
		fmt.Fprintf(&sb, " va %#x rkey %#x len %d", r.VA, r.RKey, r.DMALen)
	}
	if op.HasAtomicETH() {
		a := p.AtomicETH()
		fmt.Fprintf(&sb, " va %#x rkey %#x swap/add %#x compare %#x", a.VA, a.RKey, a.SwapAdd, a.Compare)
	}
	if op.HasAETH() {
		a := p.AETH()
		switch {
		case a.IsACK():
			sb.WriteString(" ACK")
			if a.Credit() != bth.CreditInvalid {
				fmt.Fprintf(&sb, " credit %d", a.Credit())
			}
		case a.IsRNRNAK():
			fmt.Fprintf(&sb, " RNR-NAK %v", bth.RNRTimerDuration(a.RNRTimer()))
		case a.IsNAK():
			fmt.Fprintf(&sb, " NAK %s", nakName(a.NAKCode()))
		default:
			fmt.Fprintf(&sb, " syndrome %#02x", a.Syndrome)
		}
		fmt.Fprintf(&sb, " msn %d", a.MSN)
	}
	if op.HasAtomicAckETH() {
		fmt.Fprintf(&sb, " orig %#x", p.AtomicAckETH().Orig)
	}
	if op.HasImm() {
		fmt.Fprintf(&sb, " imm %#08x", p.Imm())
	}
	if op.HasIETH() {
		fmt.Fprintf(&sb, " inv-rkey %#x", p.IETH())
	}
	if op.HasPayload() {
		fmt.Fprintf(&sb, " len %d", len(p.Payload()))
		if p.PadCount() > 0 {
			fmt.Fprintf(&sb, " pad %d", p.PadCount())
		}
	}
	if icrcOK(d) {
		sb.WriteString(" icrc ok")
	} else {
		fmt.Fprintf(&sb, " icrc BAD (%#08x, computed %#08x)", p.ICRC(), icrc(d))
	}
	fmt.Fprintln(w, sb.String())
}

func nakName(code uint8) string {
	switch code {
	case bth.NAKPSNSeqErr:
		return "psn-seq-err"
	case bth.NAKInvalidRequest:
		return "invalid-request"
	case bth.NAKRemoteAccess:
		return "remote-access-err"
	case bth.NAKRemoteOpErr:
		return "remote-op-err"
	case bth.NAKInvalidRDRequest:
		return "invalid-rd-request"
	}
	return "code-" + strconv.Itoa(int(code))
}
