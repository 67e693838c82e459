package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/bth"
)

// printer writes the lines of the packets that pass the filter.
type printer struct {
	w           *bufio.Writer
	opts        *options
	printed     int
	first, prev time.Time // for the relative timestamps
}

// columns are the --tsv columns, in order.
var columns = []string{"frame", "src", "dst", "sport", "dport", "opcode", "opname", "dqp", "psn", "ackreq", "se",
	"pad", "pkey", "syndrome", "msn", "qkey", "srcqp", "va", "rkey", "dmalen", "imm", "icrc", "icrc_ok",
	"time", "cm_msg", "cm_tid", "cm_comm_id", "cm_remote_comm_id", "cm_service_id", "cm_qpn", "cm_psn", "cm_status",
	"cm_cma_src", "cm_cma_dst"}

// header prints the --tsv header line.
func (p *printer) header() {
	if p.opts.tsv {
		fmt.Fprintln(p.w, strings.Join(columns, "\t"))
	}
}

// done reports whether -c packets have been printed.
func (p *printer) done() bool { return p.opts.count > 0 && p.printed >= p.opts.count }

// print prints packet no, captured at ts, if it passes the filter, and
// reports whether it did.
func (p *printer) print(no int, ts time.Time, d *datagram) bool {
	pkt, err := bth.Parse(d.payload)
	if d.err != nil {
		err = d.err
	}
	if p.opts.filter != nil && (err != nil || !p.opts.filter(&pkt)) {
		return false
	}
	p.printed++
	if p.opts.tsv {
		writeTSV(p.w, no, ts, d, pkt, err)
		return true
	}
	var b strings.Builder
	if p.opts.number {
		fmt.Fprintf(&b, "%d ", no)
	}
	b.WriteString(p.timestamp(ts))
	fmt.Fprintf(&b, "%v:%d > %v:%d ", d.env.Src, d.env.SrcPort, d.env.Dst, d.env.DstPort)
	if err != nil {
		fmt.Fprintf(&b, "malformed RoCE (%d bytes): %v", len(d.payload), err)
	} else {
		writeHuman(&b, d, pkt)
	}
	fmt.Fprintln(p.w, b.String())
	return true
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

func writeTSV(w io.Writer, no int, ts time.Time, d *datagram, p bth.Packet, err error) {
	col := make([]string, len(columns))
	col[0] = strconv.Itoa(no)
	col[1], col[2] = d.env.Src.String(), d.env.Dst.String()
	col[3], col[4] = strconv.Itoa(int(d.env.SrcPort)), strconv.Itoa(int(d.env.DstPort))
	col[23] = fmt.Sprintf("%d.%09d", ts.Unix(), ts.Nanosecond())
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
	if c := decodeCM(&p); c.ok && c.msg != nil {
		f := c.fields()
		col[24], col[25] = c.name(), hex0x(c.hdr.TID, 16)
		col[26], col[27], col[28], col[29], col[30], col[31] = f.commID, f.remoteCommID, f.serviceID, f.qpn, f.psn, f.reason
		if c.cma != nil {
			col[32] = fmt.Sprintf("%v:%d", c.cma.Src, c.cma.SrcPort)
			col[33] = c.cma.Dst.String()
		}
	}
	fmt.Fprintln(w, strings.Join(col, "\t"))
}

// writeHuman writes the packet's decode: the opcode, the BTH, then every
// extension header, each value labelled by its meaning (va, rkey and dma-len of
// the RETH; payload for the bytes the packet carries), the CM message of a MAD,
// and the ICRC verdict.
func writeHuman(sb *strings.Builder, d *datagram, p bth.Packet) {
	op := p.Opcode()
	fmt.Fprintf(sb, "%v qp %#06x psn %d", op, p.DestQP(), p.PSN())
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
		fmt.Fprintf(sb, " pkey %#04x", p.PKey())
	}
	if op.HasDETH() {
		dt := p.DETH()
		fmt.Fprintf(sb, " qkey %#x srcqp %#x", dt.QKey, dt.SrcQP)
	}
	if op.HasFETH() {
		f := p.FETH()
		fmt.Fprintf(sb, " placement %#x selectivity %d", f.PlacementType, f.Selectivity)
	}
	if op.HasRETH() {
		r := p.RETH()
		fmt.Fprintf(sb, " va %#x rkey %#x dma-len %d", r.VA, r.RKey, r.DMALen)
	}
	if op.HasAtomicETH() {
		a := p.AtomicETH()
		switch op {
		case bth.RCCompareSwap:
			fmt.Fprintf(sb, " va %#x rkey %#x swap %#x compare %#x", a.VA, a.RKey, a.SwapAdd, a.Compare)
		default:
			fmt.Fprintf(sb, " va %#x rkey %#x add %#x", a.VA, a.RKey, a.SwapAdd)
		}
	}
	if op.HasAETH() {
		a := p.AETH()
		switch {
		case a.IsACK():
			sb.WriteString(" ACK")
			if a.Credit() != bth.CreditInvalid {
				fmt.Fprintf(sb, " credit %d", a.Credit())
			}
		case a.IsRNRNAK():
			fmt.Fprintf(sb, " RNR-NAK %v", bth.RNRTimerDuration(a.RNRTimer()))
		case a.IsNAK():
			fmt.Fprintf(sb, " NAK %s", nakName(a.NAKCode()))
		default:
			fmt.Fprintf(sb, " syndrome %#02x", a.Syndrome)
		}
		fmt.Fprintf(sb, " msn %d", a.MSN)
	}
	if op.HasAtomicAckETH() {
		fmt.Fprintf(sb, " orig %#x", p.AtomicAckETH().Orig)
	}
	if op.HasImm() {
		fmt.Fprintf(sb, " imm %#08x", p.Imm())
	}
	if op.HasIETH() {
		fmt.Fprintf(sb, " inv-rkey %#x", p.IETH())
	}
	if op.HasPayload() {
		fmt.Fprintf(sb, " payload %d", len(p.Payload()))
		if p.PadCount() > 0 {
			fmt.Fprintf(sb, " pad %d", p.PadCount())
		}
	}
	c := decodeCM(&p)
	sb.WriteString(c.human())
	if icrcOK(d) {
		sb.WriteString(" icrc ok")
	} else {
		fmt.Fprintf(sb, " icrc BAD (%#08x, computed %#08x)", p.ICRC(), icrc(d))
	}
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
