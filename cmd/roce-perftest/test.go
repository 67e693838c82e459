package main

import (
	"fmt"
	"strings"
)

// verb is the operation a test measures, in perftest's VerbType order.
type verb uint8

const (
	send verb = iota
	write
	read
	atomic
)

// verbNames are perftest's names of the verbs in its banner (testsStr).
var verbNames = [...]string{"Send", "RDMA_Write", "RDMA_Read", "Atomic"}

// connType is the transport of the test QPs (-c), in perftest's order.
type connType uint8

const (
	connRC connType = iota
	connUC
	connUD
)

var connNames = [...]string{"RC", "UC", "UD"}

func (c connType) String() string { return connNames[c] }

// test is one perftest benchmark: a verb, measured for bandwidth or latency.
type test struct {
	verb verb
	lat  bool
}

// tests maps the names of perftest's binaries, without the ib_ prefix, to tests.
var tests = map[string]test{
	"send_bw": {send, false}, "write_bw": {write, false}, "read_bw": {read, false}, "atomic_bw": {atomic, false},
	"send_lat": {send, true}, "write_lat": {write, true}, "read_lat": {read, true}, "atomic_lat": {atomic, true},
}

// testList is the names of tests, for messages.
const testList = "write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat, send_lat or atomic_lat"

func (t test) String() string {
	kind := "_bw"
	if t.lat {
		kind = "_lat"
	}
	return strings.ToLower(strings.TrimPrefix(verbNames[t.verb], "RDMA_")) + kind
}

// bw reports whether t is a bandwidth test.
func (t test) bw() bool { return !t.lat }

// rttFactor is how many one-way trips one sample of a latency test spans:
// perftest halves the round trip of write_lat and send_lat, and reports READ
// and atomic latency as the whole round trip.
func (t test) rttFactor() float64 {
	if t.verb == read || t.verb == atomic {
		return 1
	}
	return 2
}

// perftest's defaults and limits (perftest_parameters.h).
const (
	defSizeBW     = 65536
	defSizeLat    = 2
	defSizeAtomic = 8
	defIters      = 1000
	defItersWB    = 5000 // write_bw's
	defTxBW       = 128
	defTxLat      = 1
	defRxSend     = 512
	defRxRDMA     = 1
	defQPTimeout  = 14
	defCQMod      = 100
	defDuration   = 5
	maxSize       = 1 << 23 // MAX_SIZE: the buffer -a allocates
	minIters      = 5
	maxIters      = 100000000
	maxTx         = 15000
	maxRx         = 16384
	ucMaxRx       = 16000
	maxQPs        = 16384
	maxCQMod      = 1024
	maxInline     = 912
	cqModLimit    = 8192 // MSG_SIZE_CQ_MOD_LIMIT: larger messages signal every WR
	noPeakIters   = 20000
	udAddition    = 40 // UD receive buffers start with room for the GRH
	atomicAdd     = 1  // ATOMIC_ADD_VALUE
	atomicSwap    = 0  // ATOMIC_SWAP_VALUE; the compare value is 0 too
)

// applyDefaults fills what the command line left unset, then enforces perftest's
// rules between options (force_dependecies), returning the first conflict.
func (c *config) applyDefaults() error {
	t := c.test
	if !c.set("size") {
		c.size = defSizeBW
		if t.lat {
			c.size = defSizeLat
		}
		if t.verb == atomic {
			c.size = defSizeAtomic
		}
	}
	if !c.set("iters") {
		c.iters = defIters
		if t.bw() && t.verb == write {
			c.iters = defItersWB
		}
	}
	if !c.set("tx-depth") {
		c.txDepth = defTxBW
		if t.lat {
			c.txDepth = defTxLat
		}
	}
	if !c.set("rx-depth") {
		c.rxDepth = defRxRDMA
		if c.receives() {
			c.rxDepth = defRxSend
		}
	}
	if !c.set("cq-mod") {
		c.cqMod = defCQMod
	}
	if c.duration == 0 {
		c.duration = defDuration
	}
	switch {
	case t.verb == atomic && c.size != defSizeAtomic:
		return fmt.Errorf("-s %d: the message size of the atomic tests is 8", c.size)
	case c.conn == connUC && (t.verb == read || t.verb == atomic):
		return fmt.Errorf("-c UC: UC has no %s", verbNames[t.verb])
	case c.conn == connUD && t.verb != send:
		return fmt.Errorf("-c UD: UD only SENDs")
	case c.numQPs > 1 && t.lat:
		return fmt.Errorf("-q %d: several QPs only in the bw tests", c.numQPs)
	case c.duplex && t.lat:
		return fmt.Errorf("-b: bidirectional only in the bw tests")
	case c.set("atomic_type") && t.verb != atomic:
		return fmt.Errorf("-A: only the atomic tests have an atomic type")
	case c.set("outs") && t.verb != read && t.verb != atomic:
		return fmt.Errorf("-o: outstanding reads only in the read and atomic tests")
	case c.runInf && t.lat:
		return fmt.Errorf("--run_infinitely: only in the bw tests")
	case c.runInf && c.duplex && c.receives():
		return fmt.Errorf("--run_infinitely: not with -b in send_bw or --write_with_imm")
	case c.writeImm && (t.verb != write || t.lat):
		return fmt.Errorf("--write_with_imm: only in write_bw")
	case c.set("duration") && c.all:
		return fmt.Errorf("-D: not with -a")
	case (c.unsorted || c.histogram) && !t.lat:
		return fmt.Errorf("-U and -H: only in the latency tests")
	case c.postList > 1 && t.lat:
		return fmt.Errorf("-l: post lists only in the bw tests")
	case c.useSRQ && (t.verb != send || c.writeImm):
		return fmt.Errorf("--use-srq: an SRQ only in the send tests")
	}
	// force_dependecies, in its order.
	timed := c.set("duration") || c.runInf
	if !timed {
		c.txDepth = min(c.txDepth, c.iters)
		if c.receives() {
			c.rxDepth = min(c.rxDepth, c.iters)
		}
		if (c.conn == connUD || c.conn == connUC) && !c.set("rx-depth") {
			c.rxDepth = min(c.iters, ucMaxRx)
		}
	}
	if c.size > cqModLimit && c.conn != connUD && !c.all && !c.set("cq-mod") {
		c.cqMod = 1
	}
	c.cqMod = min(c.cqMod, c.txDepth)
	if err := c.postListRules(timed); err != nil {
		return err
	}
	if c.useSRQ && c.numQPs > c.rxDepth {
		return fmt.Errorf("--use-srq -q %d: the SRQ's depth (-r, %d) must be at least the number of QPs", c.numQPs, c.rxDepth)
	}
	if c.all {
		c.size = maxSize
	}
	if timed {
		c.noPeak = true
		if !c.set("margin") {
			c.margin = c.duration / 4
		}
		if c.duration <= 2*c.margin {
			return fmt.Errorf("-D %d -f %d: the duration must be more than twice the margin", c.duration, c.margin)
		}
	}
	if c.receives() && t.bw() && c.server == "" && !c.duplex {
		c.noPeak = true
	}
	if t.verb == send && c.rxDepth%2 == 1 && !c.all && !c.runInf {
		c.rxDepth++ // perftest's work-around for an odd rx depth in SEND
	}
	if !timed && c.iters > noPeakIters && t.bw() {
		c.noPeak = true
	}
	return nil
}

// postListRules are perftest's for -l: the iterations come in whole lists, and
// unless -Q says otherwise a list asks for one completion, of its last WR (CQ
// moderation is the list's length); with -Q, the list holds whole moderation
// periods. A list longer than the TX depth would never fit the send queue
// (perftest waits for room forever); goroce refuses it.
func (c *config) postListRules(timed bool) error {
	if c.postList == 1 {
		return nil
	}
	switch {
	case !timed && c.iters%c.postList != 0:
		return fmt.Errorf("-l %d: the number of iterations (-n %d) must be a multiple of the post list size", c.postList, c.iters)
	case !c.set("cq-mod"):
		c.cqMod = c.postList
	case c.postList%c.cqMod != 0:
		return fmt.Errorf("-l %d -Q %d: the post list size must be a multiple of the CQ moderation", c.postList, c.cqMod)
	}
	if c.postList > c.txDepth {
		return fmt.Errorf("-l %d: longer than the TX depth (-t %d): no list fits the send queue", c.postList, c.txDepth)
	}
	return nil
}

// receives reports whether the test consumes receives: the send tests, and
// write_bw with --write_with_imm (perftest's WRITE_IMM verb).
func (c *config) receives() bool { return c.test.verb == send || c.writeImm }
