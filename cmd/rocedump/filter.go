package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/goroce/goroce/bth"
)

// A filter is a tcpdump-style expression over RoCE packets, given as the
// operands after the options:
//
//	qpn N        the BTH destination QP, or the DETH source QP, is N
//	psn N        the PSN is N;  psn N-M: N to M (wrapping past 2^24 if M < N)
//	op NAME      the opcode, by its name with or without the transport
//	             (RC_SEND_ONLY, send_only: RC, UC and UD's) or its number
//	CLASS        send, write, read (requests and responses), read_request,
//	             read_response, atomic, atomic_ack, ack (ACKs and NAKs), nak
//	             (NAKs and RNR NAKs), cnp, cm (MADs to or from QP1), request,
//	             response, rc, uc, ud
//	not X, X and Y, X or Y, ( X )   also !, &&, ||; and binds tighter than or
//
// Adjacent primitives are joined by and, as in "qpn 0x11 write". Numbers are
// decimal, or hex with 0x. A malformed packet matches no primitive.
type filter func(p *bth.Packet) bool

// classes are the class keywords.
var classes = map[string]filter{
	"send":          func(p *bth.Packet) bool { return p.Opcode().IsSend() },
	"write":         func(p *bth.Packet) bool { return p.Opcode().IsWrite() },
	"read":          func(p *bth.Packet) bool { return p.Opcode().IsReadRequest() || p.Opcode().IsReadResponse() },
	"read_request":  func(p *bth.Packet) bool { return p.Opcode().IsReadRequest() },
	"read_response": func(p *bth.Packet) bool { return p.Opcode().IsReadResponse() },
	"atomic":        func(p *bth.Packet) bool { return p.Opcode().IsAtomic() },
	"atomic_ack":    func(p *bth.Packet) bool { return p.Opcode().IsAtomicAck() },
	"ack":           func(p *bth.Packet) bool { return p.Opcode().IsAck() },
	"nak": func(p *bth.Packet) bool {
		if !p.Opcode().HasAETH() {
			return false
		}
		a := p.AETH()
		return a.IsNAK() || a.IsRNRNAK()
	},
	"cnp":      func(p *bth.Packet) bool { return p.Opcode() == bth.CNP },
	"cm":       func(p *bth.Packet) bool { return p.Opcode().IsUD() && p.DestQP() == 1 },
	"request":  func(p *bth.Packet) bool { return p.Opcode().IsRequest() },
	"response": func(p *bth.Packet) bool { return p.Opcode().IsResponse() },
	"rc":       func(p *bth.Packet) bool { return p.Opcode().IsRC() },
	"uc":       func(p *bth.Packet) bool { return p.Opcode().IsUC() },
	"ud":       func(p *bth.Packet) bool { return p.Opcode().IsUD() },
}

// parseFilter compiles the expression in words; none gives nil, every packet.
func parseFilter(words []string) (filter, error) {
	if len(words) == 0 {
		return nil, nil
	}
	// "(qpn" and "17)" are tokens too, as tcpdump users type them unquoted.
	var toks []string
	for _, w := range words {
		for _, f := range strings.Fields(strings.NewReplacer("(", " ( ", ")", " ) ").Replace(w)) {
			toks = append(toks, f)
		}
	}
	fp := &filterParser{toks: toks}
	f, err := fp.or()
	if err != nil {
		return nil, err
	}
	if fp.i < len(fp.toks) {
		return nil, fmt.Errorf("filter: unexpected %q", fp.toks[fp.i])
	}
	return f, nil
}

type filterParser struct {
	toks []string
	i    int
}

func (fp *filterParser) peek() string {
	if fp.i < len(fp.toks) {
		return strings.ToLower(fp.toks[fp.i])
	}
	return ""
}

func (fp *filterParser) next() string {
	t := fp.peek()
	fp.i++
	return t
}

func (fp *filterParser) or() (filter, error) {
	f, err := fp.and()
	if err != nil {
		return nil, err
	}
	for fp.peek() == "or" || fp.peek() == "||" {
		fp.next()
		g, err := fp.and()
		if err != nil {
			return nil, err
		}
		a, b := f, g
		f = func(p *bth.Packet) bool { return a(p) || b(p) }
	}
	return f, nil
}

func (fp *filterParser) and() (filter, error) {
	f, err := fp.unary()
	if err != nil {
		return nil, err
	}
	for {
		switch t := fp.peek(); {
		case t == "and" || t == "&&":
			fp.next()
		case t == "" || t == "or" || t == "||" || t == ")":
			return f, nil
		}
		g, err := fp.unary()
		if err != nil {
			return nil, err
		}
		a, b := f, g
		f = func(p *bth.Packet) bool { return a(p) && b(p) }
	}
}

func (fp *filterParser) unary() (filter, error) {
	switch t := fp.next(); t {
	case "not", "!":
		f, err := fp.unary()
		if err != nil {
			return nil, err
		}
		return func(p *bth.Packet) bool { return !f(p) }, nil
	case "(":
		f, err := fp.or()
		if err != nil {
			return nil, err
		}
		if fp.next() != ")" {
			return nil, fmt.Errorf("filter: missing )")
		}
		return f, nil
	case "":
		return nil, fmt.Errorf("filter: expression ends too early")
	case "qpn", "qp":
		n, err := fp.number(t, 0xFFFFFF)
		if err != nil {
			return nil, err
		}
		return func(p *bth.Packet) bool {
			return p.DestQP() == n || p.Opcode().HasDETH() && p.DETH().SrcQP == n
		}, nil
	case "psn":
		return fp.psn()
	case "op", "opcode":
		return fp.opcode()
	default:
		if f, ok := classes[t]; ok {
			return f, nil
		}
		return nil, fmt.Errorf("filter: unknown word %q (qpn, psn, op, a class such as send, write, read, atomic, ack, nak, cm; and, or, not)", t)
	}
}

func (fp *filterParser) number(what string, limit uint64) (uint32, error) {
	s := fp.next()
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil || n > limit {
		return 0, fmt.Errorf("filter: %s needs a number up to %#x, not %q", what, limit, s)
	}
	return uint32(n), nil
}

func (fp *filterParser) psn() (filter, error) {
	lo, hi, ok := strings.Cut(fp.peek(), "-")
	if !ok {
		n, err := fp.number("psn", 0xFFFFFF)
		if err != nil {
			return nil, err
		}
		return func(p *bth.Packet) bool { return uint32(p.PSN()) == n }, nil
	}
	fp.next()
	a, err1 := strconv.ParseUint(lo, 0, 32)
	b, err2 := strconv.ParseUint(hi, 0, 32)
	if err1 != nil || err2 != nil || a > 0xFFFFFF || b > 0xFFFFFF {
		return nil, fmt.Errorf("filter: psn range %s-%s: two PSNs below 2^24", lo, hi)
	}
	from, to := uint32(a), uint32(b)
	if from <= to {
		return func(p *bth.Packet) bool { v := uint32(p.PSN()); return v >= from && v <= to }, nil
	}
	return func(p *bth.Packet) bool { v := uint32(p.PSN()); return v >= from || v <= to }, nil
}

func (fp *filterParser) opcode() (filter, error) {
	name := strings.ToUpper(fp.next())
	if name == "" {
		return nil, fmt.Errorf("filter: op needs an opcode name")
	}
	if n, err := strconv.ParseUint(name, 0, 8); err == nil {
		return func(p *bth.Packet) bool { return uint64(p.Opcode()) == n }, nil
	}
	var ops []bth.Opcode
	for i := range 256 {
		o := bth.Opcode(i)
		if !o.Valid() {
			continue
		}
		s := o.String()
		if s == name || strings.TrimPrefix(strings.TrimPrefix(strings.TrimPrefix(s, "RC_"), "UC_"), "UD_") == name {
			ops = append(ops, o)
		}
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("filter: no opcode is called %q", name)
	}
	return func(p *bth.Packet) bool {
		for _, o := range ops {
			if p.Opcode() == o {
				return true
			}
		}
		return false
	}, nil
}
