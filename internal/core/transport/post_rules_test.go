package transport

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/core/verbs"
)

// TestPostSendRules: the rules of ibv_post_send, one row each, on
// validateSendWR alone (no engine): the WR, the QP's type and caps, and the
// refusal (a fragment of its reason) or the message length.
func TestPostSendRules(t *testing.T) {
	caps := verbs.QPCap{MaxSendSGE: 2, MaxInlineData: 64}
	sge := func(n uint32) verbs.SGE { return verbs.SGE{Addr: 0x1000, Length: n, LKey: 1} }
	ah := &verbs.AddressVector{DGID: netip.MustParseAddr("192.0.2.1")}
	flush := func(typ, level uint8, n uint32) verbs.FlushWR {
		return verbs.FlushWR{Type: typ, Level: level, Length: n}
	}
	const (
		rc, uc, ud = verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD
		inline     = verbs.SendInline
	)
	for _, tc := range []struct {
		name string
		typ  verbs.QPType
		wr   verbs.SendWR
		want string // a fragment of the refusal; "" accepts
		len  uint64
	}{
		{"RC SEND", rc, verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{sge(100), sge(28)}}, "", 128},
		{"RC WRITE of 0 bytes", rc, verbs.SendWR{Opcode: verbs.WRRDMAWrite}, "", 0},
		{"an SGE of length 0 is 2^31 bytes", rc, verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{sge(0)}}, "", 1 << 31},
		{"more than 2^31 bytes", rc, verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{sge(0), sge(1)}}, "above 2^31", 0},
		{"more SGEs than max_send_sge", rc, verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{sge(1), sge(1), sge(1)}}, "max_send_sge", 0},
		{"unknown opcode", rc, verbs.SendWR{Opcode: 10}, "not valid on a RC QP", 0},
		{"READ on UC", uc, verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{sge(8)}}, "not valid on a UC QP", 0},
		{"atomic on UC", uc, verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, SGL: []verbs.SGE{sge(8)}}, "not valid on a UC QP", 0},
		{"SEND_WITH_INV on UC", uc, verbs.SendWR{Opcode: verbs.WRSendWithInv}, "not valid on a UC QP", 0},
		{"BIND_MW on UC", uc, verbs.SendWR{Opcode: verbs.WRBindMW}, "", 0},
		{"WRITE on UD", ud, verbs.SendWR{Opcode: verbs.WRRDMAWrite, AH: ah}, "not valid on a UD QP", 0},
		{"UD SEND", ud, verbs.SendWR{Opcode: verbs.WRSendWithImm, AH: ah, SGL: []verbs.SGE{sge(40)}}, "", 40},
		{"UD SEND without an AH", ud, verbs.SendWR{Opcode: verbs.WRSend}, "without an address handle", 0},
		{"UD SEND to an AH without a GID", ud, verbs.SendWR{Opcode: verbs.WRSend, AH: &verbs.AddressVector{}}, "without an address handle", 0},
		{"atomic into 8 bytes", rc, verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{sge(8)}}, "", 8},
		{"atomic into 4 bytes", rc, verbs.SendWR{Opcode: verbs.WRAtomicCmpAndSwp, SGL: []verbs.SGE{sge(4)}}, "8-byte local buffer", 0},
		{"atomic into nothing", rc, verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd}, "8-byte local buffer", 0},
		{"inline SEND", rc, verbs.SendWR{Opcode: verbs.WRSend, Flags: inline, SGL: []verbs.SGE{sge(64)}}, "", 64},
		{"inline above max_inline_data", rc, verbs.SendWR{Opcode: verbs.WRSend, Flags: inline, SGL: []verbs.SGE{sge(65)}}, "max_inline_data", 0},
		{"inline READ", rc, verbs.SendWR{Opcode: verbs.WRRDMARead, Flags: inline, SGL: []verbs.SGE{sge(8)}}, "only for SEND and WRITE", 0},
		{"inline atomic", rc, verbs.SendWR{Opcode: verbs.WRAtomicFetchAndAdd, Flags: inline, SGL: []verbs.SGE{sge(8)}}, "only for SEND and WRITE", 0},
		{"LOCAL_INV with an SGE", rc, verbs.SendWR{Opcode: verbs.WRLocalInv, SGL: []verbs.SGE{sge(8)}}, "takes no SGEs", 0},
		{"BIND_MW inline", rc, verbs.SendWR{Opcode: verbs.WRBindMW, Flags: inline}, "takes no SGEs", 0},
		{"ATOMIC_WRITE with an SGE", rc, verbs.SendWR{Opcode: verbs.WRAtomicWrite, SGL: []verbs.SGE{sge(8)}}, "takes no SGEs", 0},
		{"ATOMIC_WRITE", rc, verbs.SendWR{Opcode: verbs.WRAtomicWrite, Swap: 7}, "", 0},
		{"FLUSH of a range", rc, verbs.SendWR{Opcode: verbs.WRFlush, Flush: flush(bth.FlushGlobal, bth.FlushRange, 4096)}, "", 0},
		{"FLUSH of an MR, both placements", rc, verbs.SendWR{Opcode: verbs.WRFlush, Flush: flush(bth.FlushGlobal|bth.FlushPersistent, bth.FlushMR, 0)}, "", 0},
		{"FLUSH without a placement", rc, verbs.SendWR{Opcode: verbs.WRFlush, Flush: flush(0, bth.FlushRange, 8)}, "FLUSH placement", 0},
		{"FLUSH of an unknown placement", rc, verbs.SendWR{Opcode: verbs.WRFlush, Flush: flush(4, bth.FlushRange, 8)}, "FLUSH placement", 0},
		{"FLUSH of an unknown selectivity", rc, verbs.SendWR{Opcode: verbs.WRFlush, Flush: flush(bth.FlushGlobal, bth.FlushMR+1, 8)}, "FLUSH placement", 0},
		{"FLUSH above 2^31", rc, verbs.SendWR{Opcode: verbs.WRFlush, Flush: flush(bth.FlushGlobal, bth.FlushRange, 1<<31+1)}, "FLUSH placement", 0},
		{"FLUSH with an SGE", rc, verbs.SendWR{Opcode: verbs.WRFlush, SGL: []verbs.SGE{sge(8)}, Flush: flush(bth.FlushGlobal, bth.FlushRange, 8)}, "takes no SGEs", 0},
		{"FLUSH on UC", uc, verbs.SendWR{Opcode: verbs.WRFlush, Flush: flush(bth.FlushGlobal, bth.FlushRange, 8)}, "not valid on a UC QP", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, why := validateSendWR(tc.typ, &caps, &tc.wr)
			switch {
			case tc.want == "" && why != "":
				t.Fatalf("refused: %s", why)
			case tc.want == "" && n != tc.len:
				t.Fatalf("length %d, want %d", n, tc.len)
			case tc.want != "" && !strings.Contains(why, tc.want):
				t.Fatalf("reason %q, want one with %q", why, tc.want)
			}
		})
	}
}
