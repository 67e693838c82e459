package bth_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
)

var update = flag.Bool("update", false, "rewrite bth/testdata/*.hex golden vectors from the encoder")

type vector struct {
	file, name, desc string
	env              bth.Envelope
	f                bth.Fields
	payload          []byte
}

var (
	env4 = bth.Envelope{
		Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.11"),
		IPID: 0, DF: true, SrcPort: 4791, DstPort: 4791,
	}
	env6 = bth.Envelope{
		Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"),
		SrcPort: 0xC132, DstPort: 4791,
	}
)

func seq(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i + 1)
	}
	return b
}

// goldenVectors are canonical packets, one or more per opcode family.
func goldenVectors() []vector {
	rc := func(op bth.Opcode, psn bth.PSN) bth.Fields {
		return bth.Fields{Opcode: op, MigReq: true, PKey: 0xFFFF, DestQP: 0x000123, PSN: psn}
	}
	with := func(f bth.Fields, mod func(*bth.Fields)) bth.Fields { mod(&f); return f }
	return []vector{
		{"send.hex", "rc-send-only-pad3", "RC SEND ONLY, 5-byte payload: PadCnt 3, AckReq, SE", env4,
			with(rc(bth.RCSendOnly, 261), func(f *bth.Fields) { f.AckReq, f.SE = true, true }), seq(5)},
		{"send.hex", "rc-send-only-empty", "RC SEND ONLY with no payload (zero-length message)", env4,
			with(rc(bth.RCSendOnly, 262), func(f *bth.Fields) { f.AckReq = true }), nil},
		{"send.hex", "rc-send-first", "RC SEND FIRST, 16 bytes", env4, rc(bth.RCSendFirst, 0xFFFFFF), seq(16)},
		{"send.hex", "rc-send-middle", "RC SEND MIDDLE, 16 bytes, PSN wrapped to 0", env4, rc(bth.RCSendMiddle, 0), seq(16)},
		{"send.hex", "rc-send-last-imm", "RC SEND LAST with immediate, 6 bytes: PadCnt 2", env4,
			with(rc(bth.RCSendLastImm, 1), func(f *bth.Fields) { f.AckReq, f.Imm = true, 0xDEADBEEF }), seq(6)},
		{"send.hex", "rc-send-only-inv", "RC SEND ONLY with invalidate, 4 bytes", env4,
			with(rc(bth.RCSendOnlyInv, 2), func(f *bth.Fields) { f.AckReq, f.IETH = true, 0x00001023 }), seq(4)},
		{"write.hex", "rc-write-first", "RC RDMA WRITE FIRST with RETH (DMA length = whole message)", env4,
			with(rc(bth.RCWriteFirst, 100), func(f *bth.Fields) {
				f.RETH = bth.RETH{VA: 0x0000556D8E083000, RKey: 0x00000F3C, DMALen: 4096}
			}), seq(8)},
		{"write.hex", "rc-write-only-imm", "RC RDMA WRITE ONLY with immediate: RETH then ImmDt", env4,
			with(rc(bth.RCWriteOnlyImm, 101), func(f *bth.Fields) {
				f.AckReq, f.Imm = true, 0x01020304
				f.RETH = bth.RETH{VA: 0x1000, RKey: 0xABCD, DMALen: 3}
			}), seq(3)},
		{"read.hex", "rc-read-request", "RC RDMA READ REQUEST (RETH, no payload)", env4,
			with(rc(bth.RCReadRequest, 7), func(f *bth.Fields) {
				f.AckReq = true
				f.RETH = bth.RETH{VA: 0x000055EBED3E4000, RKey: 0x00001023, DMALen: 4096}
			}), nil},
		{"read.hex", "rc-read-response-first", "RC RDMA READ RESPONSE FIRST (AETH ACK, MSN 1)", env4,
			with(rc(bth.RCReadResponseFirst, 7), func(f *bth.Fields) {
				f.AETH = bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid), MSN: 1}
			}), seq(16)},
		{"read.hex", "rc-read-response-middle", "RC RDMA READ RESPONSE MIDDLE (no AETH)", env4,
			rc(bth.RCReadResponseMiddle, 8), seq(16)},
		{"ack.hex", "rc-ack", "RC ACKNOWLEDGE: ACK, credit invalid (0x1F), MSN 1", env4,
			with(rc(bth.RCAck, 256), func(f *bth.Fields) { f.AETH = bth.AETH{Syndrome: 0x1F, MSN: 1} }), nil},
		{"ack.hex", "rc-nak-seq", "RC ACKNOWLEDGE: NAK PSN sequence error (0x60) at the expected PSN", env4,
			with(rc(bth.RCAck, 256), func(f *bth.Fields) { f.AETH = bth.AETH{Syndrome: bth.NAKSyndrome(bth.NAKPSNSeqErr)} }), nil},
		{"ack.hex", "rc-rnr-nak", "RC ACKNOWLEDGE: RNR NAK, timer code 12 (0.64 ms)", env4,
			with(rc(bth.RCAck, 300), func(f *bth.Fields) { f.AETH = bth.AETH{Syndrome: bth.RNRSyndrome(12), MSN: 5} }), nil},
		{"atomic.hex", "rc-compare-swap", "RC COMPARE SWAP (AtomicETH)", env4,
			with(rc(bth.RCCompareSwap, 9), func(f *bth.Fields) {
				f.AckReq = true
				f.Atomic = bth.AtomicETH{VA: 0x7F0000001000, RKey: 0x42, SwapAdd: 0x1111111111111111, Compare: 0x2222222222222222}
			}), nil},
		{"atomic.hex", "rc-fetch-add", "RC FETCH ADD (AtomicETH, Compare unused)", env4,
			with(rc(bth.RCFetchAdd, 10), func(f *bth.Fields) {
				f.AckReq = true
				f.Atomic = bth.AtomicETH{VA: 0x7F0000001008, RKey: 0x42, SwapAdd: 1}
			}), nil},
		{"atomic.hex", "rc-atomic-ack", "RC ATOMIC ACKNOWLEDGE (AETH + AtomicAckETH)", env4,
			with(rc(bth.RCAtomicAck, 9), func(f *bth.Fields) {
				f.AETH = bth.AETH{Syndrome: 0x1F, MSN: 3}
				f.AtomicAck = bth.AtomicAckETH{Orig: 0x2222222222222222}
			}), nil},
		{"flush.hex", "rc-flush-range-global", "RC FLUSH: FETH (placement global, selectivity range) before the RETH; rxe's ICRC (the headers twice)", env4,
			with(rc(bth.RCFlush, 11), func(f *bth.Fields) {
				f.AckReq = true
				f.FETH = bth.FETH{PlacementType: bth.FlushGlobal, Selectivity: bth.FlushRange}
				f.RETH = bth.RETH{VA: 0x7F0000002000, RKey: 0x1234567, DMALen: 64}
			}), nil},
		{"flush.hex", "rc-flush-mr-persistent", "RC FLUSH of the whole MR, persistent placement, over IPv6; rxe's ICRC", env6,
			with(rc(bth.RCFlush, 12), func(f *bth.Fields) {
				f.AckReq = true
				f.FETH = bth.FETH{PlacementType: bth.FlushPersistent, Selectivity: bth.FlushMR}
				f.RETH = bth.RETH{VA: 0x7F0000002000, RKey: 0x1234567}
			}), nil},
		{"flush.hex", "rc-atomic-write", "RC ATOMIC WRITE: RETH (DMA length 8) and the 8 bytes to write", env4,
			with(rc(bth.RCAtomicWrite, 13), func(f *bth.Fields) {
				f.AckReq = true
				f.RETH = bth.RETH{VA: 0x7F0000002008, RKey: 0x1234567, DMALen: 8}
			}), seq(8)},
		{"flush.hex", "rc-read-response-only-empty", "RC RDMA READ RESPONSE ONLY without payload: the answer to FLUSH and ATOMIC WRITE", env4,
			with(rc(bth.RCReadResponseOnly, 13), func(f *bth.Fields) {
				f.AETH = bth.AETH{Syndrome: bth.ACKSyndrome(bth.CreditInvalid), MSN: 4}
			}), nil},
		{"ud.hex", "ud-send-only", "UD SEND ONLY with DETH over IPv6 (ICRC IPv6 masks)", env6,
			bth.Fields{Opcode: bth.UDSendOnly, PKey: 0xFFFF, DestQP: 0x15, PSN: 4307534,
				DETH: bth.DETH{QKey: 0x11111111, SrcQP: 0x15}}, seq(12)},
		{"ud.hex", "ud-send-only-imm", "UD SEND ONLY with immediate: DETH then ImmDt, 1 byte: PadCnt 3", env4,
			bth.Fields{Opcode: bth.UDSendOnlyImm, SE: true, PKey: 0xFFFF, DestQP: 1, PSN: 12,
				DETH: bth.DETH{QKey: 0x80010000, SrcQP: 1}, Imm: 0xCAFEF00D}, seq(1)},
		{"uc.hex", "uc-write-only", "UC RDMA WRITE ONLY with RETH", env4,
			bth.Fields{Opcode: bth.UCWriteOnly, PKey: 0xFFFF, DestQP: 0x22, PSN: 5,
				RETH: bth.RETH{VA: 0x2000, RKey: 7, DMALen: 8}}, seq(8)},
		{"uc.hex", "uc-send-last-imm", "UC SEND LAST with immediate", env4,
			bth.Fields{Opcode: bth.UCSendLastImm, PKey: 0xFFFF, DestQP: 0x22, PSN: 6, Imm: 9}, seq(4)},
		{"cnp.hex", "cnp", "RoCEv2 CNP: BECN set, 16 reserved zero bytes", env4,
			bth.Fields{Opcode: bth.CNP, BECN: true, PKey: 0xFFFF, DestQP: 0x123}, nil},
	}
}

func (v *vector) build() []byte {
	b := bth.Append(nil, &v.f, v.payload)
	bth.PutICRC(&v.env, b)
	return b
}

// readHex reads an annotated hex file: "== name" starts a vector, "#" starts
// a comment, everything else is hex bytes separated by spaces.
func readHex(tb testing.TB, path string) (names []string, vecs map[string][]byte) {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	vecs = map[string][]byte{}
	cur := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "== "); ok {
			cur, _, _ = strings.Cut(name, ":")
			names = append(names, cur)
			continue
		}
		line, _, _ = strings.Cut(line, "#")
		line = strings.ReplaceAll(strings.TrimSpace(line), " ", "")
		if line == "" {
			continue
		}
		if cur == "" {
			tb.Fatalf("%s: bytes before the first == line", path)
		}
		b, err := hex.DecodeString(line)
		if err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		vecs[cur] = append(vecs[cur], b...)
	}
	return names, vecs
}

// annotate renders a packet as annotated hex, one header per line.
func annotate(w *bytes.Buffer, v *vector, b []byte) {
	fmt.Fprintf(w, "== %s: %s\n", v.name, v.desc)
	if v.env.Src.Is4() {
		fmt.Fprintf(w, "# envelope: IPv4 %v -> %v, ID %#04x, DF %v, UDP %d -> %d\n", v.env.Src, v.env.Dst, v.env.IPID, v.env.DF, v.env.SrcPort, v.env.DstPort)
	} else {
		fmt.Fprintf(w, "# envelope: IPv6 %v -> %v, UDP %d -> %d\n", v.env.Src, v.env.Dst, v.env.SrcPort, v.env.DstPort)
	}
	p, err := bth.Parse(b)
	if err != nil {
		panic(err)
	}
	line := func(seg []byte, note string) {
		h := hex.EncodeToString(seg)
		var sp strings.Builder
		for i := 0; i < len(h); i += 2 {
			if i > 0 {
				sp.WriteByte(' ')
			}
			sp.WriteString(h[i : i+2])
		}
		fmt.Fprintf(w, "%-48s # %s\n", sp.String(), note)
	}
	op := p.Opcode()
	line(b[0:4], fmt.Sprintf("BTH opcode %#02x %v, SE %v, MigReq %v, PadCnt %d, TVer 0, P_Key %#04x", byte(op), op, p.SE(), p.MigReq(), p.PadCount(), p.PKey()))
	line(b[4:8], fmt.Sprintf("BTH FECN %v, BECN %v, DestQP %#06x", p.FECN(), p.BECN(), p.DestQP()))
	line(b[8:12], fmt.Sprintf("BTH AckReq %v, PSN %d", p.AckReq(), p.PSN()))
	off := bth.BTHLen
	seg := func(n int, note string) {
		line(b[off:off+n], note)
		off += n
	}
	if op.HasDETH() {
		d := p.DETH()
		seg(bth.DETHLen, fmt.Sprintf("DETH Q_Key %#08x, SrcQP %#06x", d.QKey, d.SrcQP))
	}
	if op.HasFETH() {
		f := p.FETH()
		seg(bth.FETHLen, fmt.Sprintf("FETH placement type %#x, selectivity level %d", f.PlacementType, f.Selectivity))
	}
	if op.HasRETH() {
		r := p.RETH()
		seg(8, fmt.Sprintf("RETH VA %#x", r.VA))
		seg(8, fmt.Sprintf("RETH R_Key %#x, DMA length %d", r.RKey, r.DMALen))
	}
	if op.HasAtomicETH() {
		a := p.AtomicETH()
		seg(8, fmt.Sprintf("AtomicETH VA %#x", a.VA))
		seg(4, fmt.Sprintf("AtomicETH R_Key %#x", a.RKey))
		seg(8, fmt.Sprintf("AtomicETH Swap/Add %#x", a.SwapAdd))
		seg(8, fmt.Sprintf("AtomicETH Compare %#x", a.Compare))
	}
	if op.HasAETH() {
		a := p.AETH()
		kind := "ACK"
		switch {
		case a.IsRNRNAK():
			kind = fmt.Sprintf("RNR NAK timer %d (%v)", a.RNRTimer(), bth.RNRTimerDuration(a.RNRTimer()))
		case a.IsNAK():
			kind = fmt.Sprintf("NAK code %d", a.NAKCode())
		default:
			kind = fmt.Sprintf("ACK credit %#x", a.Credit())
		}
		seg(bth.AETHLen, fmt.Sprintf("AETH syndrome %#02x %s, MSN %d", a.Syndrome, kind, a.MSN))
	}
	if op.HasAtomicAckETH() {
		seg(bth.AtomicAckETHLen, fmt.Sprintf("AtomicAckETH original %#x", p.AtomicAckETH().Orig))
	}
	if op.HasImm() {
		seg(bth.ImmDtLen, fmt.Sprintf("ImmDt %#08x", p.Imm()))
	}
	if op.HasIETH() {
		seg(bth.IETHLen, fmt.Sprintf("IETH R_Key %#08x", p.IETH()))
	}
	if op == bth.CNP {
		seg(16, "CNP reserved")
	}
	for pl := p.Payload(); len(pl) > 0; {
		n := min(len(pl), 16)
		seg(n, "payload")
		pl = pl[n:]
	}
	if p.PadCount() > 0 {
		seg(p.PadCount(), "pad")
	}
	seg(bth.ICRCLen, fmt.Sprintf("ICRC %#08x, little-endian", p.ICRC()))
}

func TestGoldenVectors(t *testing.T) {
	vecs := goldenVectors()
	if *update {
		files := map[string]*bytes.Buffer{}
		var order []string
		for i := range vecs {
			v := &vecs[i]
			w := files[v.file]
			if w == nil {
				w = &bytes.Buffer{}
				fmt.Fprintf(w, "# Golden RoCEv2 packets (UDP payload: BTH .. ICRC), written by\n# go test ./bth -run TestGoldenVectors -update; review every change.\n\n")
				files[v.file] = w
				order = append(order, v.file)
			} else {
				w.WriteByte('\n')
			}
			annotate(w, v, v.build())
		}
		for _, name := range order {
			if err := os.WriteFile(filepath.Join("testdata", name), files[name].Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	loaded := map[string]map[string][]byte{}
	for _, v := range vecs {
		t.Run(v.name, func(t *testing.T) {
			if loaded[v.file] == nil {
				_, loaded[v.file] = readHex(t, filepath.Join("testdata", v.file))
			}
			want, ok := loaded[v.file][v.name]
			if !ok {
				t.Fatalf("%s: no vector %q (run with -update)", v.file, v.name)
			}
			if got := v.build(); !bytes.Equal(got, want) {
				t.Fatalf("Append+PutICRC:\n got %x\nwant %x", got, want)
			}
			p, err := bth.Parse(want)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Fields(); got != v.f {
				t.Errorf("Fields:\n got %+v\nwant %+v", got, v.f)
			}
			if !bytes.Equal(p.Payload(), v.payload) {
				t.Errorf("Payload %x, want %x", p.Payload(), v.payload)
			}
			if !bth.CheckICRC(&v.env, want) {
				t.Error("CheckICRC false")
			}
		})
	}
}

// TestProtocolVector checks a real rxe CM REQ whose ICRC
// verifies with exactly one UDP source port, rxe's QP1 port 55410, and
// whose IPv4 ID the solver recovers.
func TestProtocolVector(t *testing.T) {
	_, vecs := readHex(t, filepath.Join("testdata", "cm_req_rxe.hex"))
	b := vecs["cm-req"]
	if len(b) != 280 {
		t.Fatalf("vector is %d bytes, want 280", len(b))
	}
	p, err := bth.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	want := bth.Fields{Opcode: bth.UDSendOnly, PKey: 0xFFFF, DestQP: 1, AckReq: true, PSN: 12,
		DETH: bth.DETH{QKey: 0x80010000, SrcQP: 1}}
	if got := p.Fields(); got != want {
		t.Errorf("Fields %+v, want %+v", got, want)
	}
	if p.ICRC() != 0xE49D0ABF || len(p.Payload()) != 256 {
		t.Errorf("ICRC %#x payload %d", p.ICRC(), len(p.Payload()))
	}
	env := bth.Envelope{
		Src: netip.MustParseAddr("192.168.1.102"), Dst: netip.MustParseAddr("192.168.1.101"),
		IPID: 0xB6AF, DF: true, DstPort: 4791,
	}
	var match []uint16
	for port := range 1 << 16 {
		env.SrcPort = uint16(port)
		if bth.CheckICRC(&env, b) {
			match = append(match, uint16(port))
		}
	}
	if len(match) != 1 || match[0] != 55410 {
		t.Fatalf("source ports verifying the ICRC: %v, want [55410]", match)
	}
	env.SrcPort = 55410
	if id, ok := bth.SolveIPv4ID(&env, b); !ok || id != 0xB6AF {
		t.Errorf("SolveIPv4ID = %#x, %v", id, ok)
	}
	// The kernel seeds its CRC register with 0xDEBB20E3: the register after
	// 8 bytes of 0xFF.
	if got := ^crc32FF8(); got != 0xDEBB20E3 {
		t.Errorf("register after 8xFF = %#x", got)
	}
}
