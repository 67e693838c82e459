package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/goroce/goroce/internal/tool/cli"
	"github.com/goroce/goroce/internal/tool/version"
	"github.com/goroce/goroce/roce"
	"github.com/pborman/getopt/v2"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the parsed command line.
type config struct {
	cli.Flags
	o      *cli.Options
	test   test
	name   string // the test as given
	server string // empty: serve

	size             int
	iters            int
	txDepth, rxDepth int
	mtu              int // bytes; 0: the port's active MTU
	gidIndex         int // -1: the device's RoCEv2 index
	qpTimeout        int
	sl               int
	conn             connType
	numQPs           int
	all              bool // -a: sizes 2 to 2^23
	duration         int  // -D, seconds; also the period of --run_infinitely's rows
	margin           int  // -f, seconds
	runInf           bool
	duplex           bool // -b
	reportGbits      bool
	reportBoth       bool
	noPeak           bool
	atomicCAS        bool // -A CMP_AND_SWAP; FETCH_AND_ADD otherwise
	writeImm         bool // --write_with_imm: write_bw's WRITEs carry immediate data, each consuming a receive
	outReads         int  // -o; 0: the device's (read, atomic) or 1
	cqMod            int
	inline           int
	trafficClass     int
	output           string // --output: bandwidth, message_rate or latency; "" for the full report
	unsorted         bool   // -U
	histogram        bool   // -H
	rdmaCM           bool   // -R: connect through rdma_cm, exchange over it
	tos              int    // -T: the traffic class of -R's connections
	postList         int    // -l: WRs per ibv_post_send, a chain; 1 without -l
	useSRQ           bool   // --use-srq: the receiving side's QPs share one SRQ
	events           bool   // -e: sleep on the completion channel; busy-poll otherwise
}

// set reports whether the option with long name name was given.
func (c *config) set(name string) bool { return c.o.IsSet(name) }

// sizeValue is -s: a number with perftest's K and M suffixes (1024, 1024²).
type sizeValue struct{ n *int }

func (v sizeValue) Set(s string, _ getopt.Option) error {
	f := 1
	switch {
	case strings.HasSuffix(s, "K"):
		f, s = 1024, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		f, s = 1024*1024, strings.TrimSuffix(s, "M")
	}
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil || n < 1 || n*int64(f) > 1<<31-1 {
		return fmt.Errorf("not a message size")
	}
	*v.n = int(n) * f
	return nil
}

func (v sizeValue) String() string { return strconv.Itoa(*v.n) }

// connValue is -c: RC, UC or UD.
type connValue struct{ c *connType }

func (v connValue) Set(s string, _ getopt.Option) error {
	for i, n := range connNames {
		if s == n {
			*v.c = connType(i)
			return nil
		}
	}
	if s == "XRC" || s == "DC" || s == "SRD" || s == "RawEth" {
		return fmt.Errorf("%s QPs are not supported", s)
	}
	return fmt.Errorf("not a connection type (RC, UC or UD)")
}

func (v connValue) String() string { return v.c.String() }

// unsupported are perftest options goroce refuses, with one line saying why:
// each needs hardware, another transport or a feature goroce does not have.
var unsupported = []struct {
	long  string
	short rune
	arg   bool
	why   string
}{
	{"mcg", 'g', false, "multicast is not supported"},
	{"MGID", 'M', true, "multicast is not supported"},
	{"comm_rdma_cm", 'z', false, "the rdma_cm exchange is not supported; the TCP exchange is"},
	{"dualport", 'O', false, "a goroce device has one port"},
	{"vector", 'X', true, "completion vectors are not supported"},
	{"report-counters", 'W', true, "hardware counters are not supported"},
	{"limit_bw", 'w', true, "limits are not supported"},
	{"limit_msgrate", 'y', true, "limits are not supported"},
	{"hop_limit", 'L', true, "raw Ethernet is not supported"},
	{"source_mac", 'B', true, "raw Ethernet is not supported"},
	{"dest_mac", 'E', true, "raw Ethernet is not supported"},
	{"dest_ip", 'J', true, "raw Ethernet is not supported"},
	{"source_ip", 'j', true, "raw Ethernet is not supported"},
	{"dest_port", 'K', true, "raw Ethernet is not supported"},
	{"source_port", 'k', true, "raw Ethernet is not supported"},
	{"ethertype", 'Y', true, "raw Ethernet is not supported"},
	{"mac_fwd", 'v', false, "raw Ethernet is not supported"},
	{"use_rss", 'G', false, "raw Ethernet is not supported"},
	{"server", 'Z', false, "raw Ethernet is not supported"},
	{"client", 'P', false, "raw Ethernet is not supported"},
	{"report-cycles", 'C', false, "CPU cycle counts are not supported"},
	{"reversed", 0, false, "reversed traffic is not supported"},
	{"report-per-port", 0, false, "a goroce device has one port"},
	{"mmap", 0, true, "mmap'd buffers are not supported"},
	{"mmap-offset", 0, true, "mmap'd buffers are not supported"},
	{"rate_limit", 0, true, "rate limits are not supported"},
	{"rate_limit_type", 0, true, "rate limits are not supported"},
	{"rate_units", 0, true, "rate limits are not supported"},
	{"burst_size", 0, true, "rate limits are not supported"},
	{"typical_pkt_size", 0, true, "rate limits are not supported"},
	{"out_json", 0, false, "JSON output is not supported"},
	{"out_json_file", 0, true, "JSON output is not supported"},
	{"flows", 0, true, "several flows are not supported"},
	{"flows_burst", 0, true, "several flows are not supported"},
	{"reply_every", 0, true, "latency under load is not supported"},
	{"recv_post_list", 0, true, "receive post lists are not supported"},
	{"inline_recv", 0, true, "inline receive is not supported"},
	{"force-link", 0, true, "a goroce device is Ethernet only"},
	{"dlid", 0, true, "RoCE has no LIDs"},
	{"remote_mac", 0, true, "raw Ethernet is not supported"},
	{"local_mac", 0, true, "raw Ethernet is not supported"},
	{"remote_ip", 0, true, "raw Ethernet is not supported"},
	{"local_ip", 0, true, "raw Ethernet is not supported"},
	{"remote_port", 0, true, "raw Ethernet is not supported"},
	{"local_port", 0, true, "raw Ethernet is not supported"},
	{"tcp", 0, false, "raw Ethernet is not supported"},
	{"ipv6", 0, false, "raw Ethernet is not supported"},
	{"raw_mcast", 0, false, "raw Ethernet is not supported"},
	{"promiscuous", 0, false, "raw Ethernet is not supported"},
	{"vlan_en", 0, false, "raw Ethernet is not supported"},
	{"vlan_pcp", 0, true, "raw Ethernet is not supported"},
	{"dont_xchg_versions", 0, false, "perftest 4.5 itself then refuses its peer (it reads no version, older than 5.70)"},
}

// ignored are perftest options that change nothing in goroce, accepted so
// that stock command lines work: CPU frequency checks (-F), CQ moderation (-Q), inline sends
// (-I), the service level (-S), CPU utilisation, on-demand paging and huge
// pages (Go memory is resident), the old post-send API, warm-up rounds, one MR
// per QP, the latency gap, the flow label and retry count of rdma_cm, and the
// wait before destroying resources.
var ignoredFlags = []struct {
	long  string
	short rune
	help  string
}{
	{"CPU-freq", 'F', "accepted (no CPU frequency checks)"},
	{"noPeak", 'N', "do not compute the peak bandwidth"},
	{"odp", 0, "accepted and ignored"},
	{"use_hugepages", 0, "accepted and ignored"},
	{"use_old_post_send", 0, "accepted and ignored"},
	{"perform_warm_up", 0, "accepted and ignored"},
	{"mr_per_qp", 0, "accepted and ignored"},
	{"cpu_util", 0, "accepted and ignored"},
}

var ignoredValues = []struct {
	long  string
	short rune
	help  string
}{
	{"cq-mod", 'Q', "CQ moderation (accepted; goroce signals every WR)"},
	{"inline_size", 'I', "inline size (accepted; goroce decides inline itself)"},
	{"sl", 'S', "service level (accepted; RoCEv2 without VLANs has no use for it)"},
	{"latency_gap", 0, "accepted and ignored"},
	{"flow_label", 0, "accepted and ignored (rdma_cm only)"},
	{"retry_count", 0, "accepted and ignored (rdma_cm only)"},
	{"wait_destroy", 0, "accepted and ignored"},
	{"pkey_index", 0, "P_Key index (only 0)"},
}

// parseArgs parses TEST, the options and the optional SERVER, in any order, as
// perftest's getopt_long does.
func parseArgs(args []string) (*config, *cli.Options, error) {
	c := &config{gidIndex: -1, qpTimeout: defQPTimeout, numQPs: 1, postList: 1}
	o := cli.NewOptions("roce-perftest")
	c.o = o
	c.Register(o)
	o.FlagLong(sizeValue{&c.size}, "size", 's', "message size, with K or M suffix (65536 for bw, 2 for lat, 8 for atomic)", "SIZE")
	o.FlagLong(&c.iters, "iters", 'n', "iterations (5000 for write_bw, else 1000)", "ITERS")
	o.FlagLong(&c.txDepth, "tx-depth", 't', "send queue depth (128 for bw, 1 for lat)", "DEPTH")
	o.FlagLong(&c.rxDepth, "rx-depth", 'r', "receive queue depth of the send tests (512)", "DEPTH")
	o.FlagLong(&c.mtu, "mtu", 'm', "path MTU in bytes (default: the port's active MTU; the lower of both sides' is used)", "MTU")
	o.FlagLong(&c.gidIndex, "gid-index", 'x', "local GID index (default: the device's RoCEv2 GID)", "INDEX")
	o.FlagLong(&c.qpTimeout, "qp-timeout", 'u', "QP local ACK timeout code (14)", "CODE")
	o.FlagLong(connValue{&c.conn}, "connection", 'c', "connection type: RC, UC (send, write) or UD (send)", "TYPE")
	o.FlagLong(&c.numQPs, "qp", 'q', "number of QPs (bw tests)", "NUM")
	o.FlagLong(&c.all, "all", 'a', "run sizes 2 to 2^23 bytes (send_bw over UD: to the MTU)")
	o.FlagLong(&c.duration, "duration", 'D', "run for this many seconds instead of -n iterations", "SECONDS")
	o.FlagLong(&c.margin, "margin", 'f', "seconds at each end of -D that are not measured (D/4)", "SECONDS")
	o.FlagLong(&c.duplex, "bidirectional", 'b', "traffic both ways (bw tests)")
	o.FlagLong(&c.runInf, "run_infinitely", 0, "run until interrupted, printing a row every -D seconds (bw tests)")
	o.FlagLong(&c.reportGbits, "report_gbits", 0, "report bandwidth in Gb/s instead of MB/s")
	o.FlagLong(&c.reportBoth, "report-both", 0, "with -b, print both sides' results too")
	o.FlagLong(&c.unsorted, "report-unsorted", 'U', "print every latency sample, unsorted")
	o.FlagLong(&c.histogram, "report-histogrm", 'H', "print every latency sample, sorted")
	o.FlagLong(&c.outReads, "outs", 'o', "outstanding reads/atomics (default: the device's)", "NUM")
	o.FlagLong(&c.trafficClass, "tclass", 0, "GRH traffic class", "CLASS")
	o.FlagLong(&c.output, "output", 0, "print only one figure: bandwidth, message_rate or latency", "WHAT")
	o.FlagLong(&c.writeImm, "write_with_imm", 0, "write_bw: RDMA WRITE with immediate, each consuming a receive at the server")
	o.FlagLong(&c.rdmaCM, "rdma_cm", 'R', "connect the QPs through rdma_cm, and exchange over an rdma_cm connection (RC)")
	o.FlagLong(&c.tos, "tos", 'T', "with -R: the type of service (traffic class) of the connections", "TOS")
	o.FlagLong(&c.postList, "post_list", 'l', "post the WRs in chains of this many, one ibv_post_send each; CQ moderation is the chain's length (bw tests)", "SIZE")
	o.FlagLong(&c.useSRQ, "use-srq", 0, "the receiving side's QPs draw their receives from one SRQ (send tests)")
	o.FlagLong(&c.events, "events", 'e', "sleep on the completion channel for completions (default: busy-poll the CQ)")
	atomicType := "FETCH_AND_ADD"
	o.FlagLong(&atomicType, "atomic_type", 'A', "atomic test: CMP_AND_SWAP or FETCH_AND_ADD", "TYPE")
	var showVersion bool
	o.Flag(&showVersion, 'V', "print the version and exit")
	for _, f := range ignoredFlags {
		if f.long == "noPeak" {
			o.FlagLong(&c.noPeak, f.long, f.short, f.help)
			continue
		}
		var b bool
		o.FlagLong(&b, f.long, f.short, f.help)
	}
	var cqMod, inline, sl, pkey, ignoredInt int
	for _, f := range ignoredValues {
		p := &ignoredInt
		switch f.long {
		case "cq-mod":
			p = &cqMod
		case "inline_size":
			p = &inline
		case "sl":
			p = &sl
		case "pkey_index":
			p = &pkey
		}
		o.FlagLong(p, f.long, f.short, f.help, "N")
	}
	refused := make([]string, len(unsupported))
	for i, u := range unsupported {
		if u.arg {
			o.FlagLong(&refused[i], u.long, u.short, "not supported: "+u.why, "X")
		} else {
			var b bool
			o.FlagLong(&b, u.long, u.short, "not supported: "+u.why)
		}
	}
	ops, err := o.Parse(args)
	if err != nil {
		return nil, o, err
	}
	if showVersion {
		return nil, o, errVersion
	}
	for _, u := range unsupported {
		if o.IsSet(u.long) {
			name := "--" + u.long
			if u.short != 0 {
				name = "-" + string(u.short)
			}
			return nil, o, fmt.Errorf("%s: %s", name, u.why)
		}
	}
	if c.name, c.server, err = cli.Operands(ops, "TEST ("+testList+")"); err != nil {
		return nil, o, err
	}
	var ok bool
	if c.test, ok = tests[strings.TrimPrefix(c.name, "ib_")]; !ok {
		return nil, o, fmt.Errorf("unknown TEST %q (%s)", c.name, testList)
	}
	c.cqMod, c.inline, c.sl = cqMod, inline, sl
	if err := c.Check(c.server); err != nil {
		return nil, o, err
	}
	switch atomicType {
	case "FETCH_AND_ADD":
	case "CMP_AND_SWAP":
		c.atomicCAS = true
	default:
		return nil, o, fmt.Errorf("-A %s: the atomic type is CMP_AND_SWAP or FETCH_AND_ADD", atomicType)
	}
	switch {
	case c.set("size") && c.size > maxSize:
		return nil, o, fmt.Errorf("-s %d: size must be in [1, %d]", c.size, maxSize)
	case c.set("iters") && (c.iters < minIters || c.iters > maxIters):
		return nil, o, fmt.Errorf("-n %d: iterations must be in [%d, %d]", c.iters, minIters, maxIters)
	case c.mtu != 0 && roce.MTUFromBytes(c.mtu) == 0:
		return nil, o, fmt.Errorf("-m %d: MTU must be 256, 512, 1024, 2048 or 4096", c.mtu)
	case c.postList < 1:
		return nil, o, fmt.Errorf("-l %d: the post list size must be positive", c.postList)
	case c.numQPs < 1 || c.numQPs > maxQPs:
		return nil, o, fmt.Errorf("-q %d: between 1 and %d QPs", c.numQPs, maxQPs)
	case c.set("tx-depth") && (c.txDepth < 1 || c.txDepth > maxTx):
		return nil, o, fmt.Errorf("-t %d: tx depth must be in [1, %d]", c.txDepth, maxTx)
	case c.set("rx-depth") && (c.rxDepth < 1 || c.rxDepth > maxRx):
		return nil, o, fmt.Errorf("-r %d: rx depth must be in [1, %d]", c.rxDepth, maxRx)
	case c.set("rx-depth") && !c.receives() && c.rxDepth > defRxRDMA:
		return nil, o, fmt.Errorf("-r %d: the RDMA tests use an rx depth of 1", c.rxDepth)
	case c.gidIndex < -1 || c.gidIndex > 64:
		return nil, o, fmt.Errorf("-x %d: not a GID index", c.gidIndex)
	case c.qpTimeout < 0 || c.qpTimeout > 31:
		return nil, o, fmt.Errorf("-u %d: the QP timeout is a 5-bit code", c.qpTimeout)
	case c.sl < 0 || c.sl > 15:
		return nil, o, fmt.Errorf("-S %d: only 16 service levels", c.sl)
	case c.set("duration") && c.duration < 1:
		return nil, o, fmt.Errorf("-D %d: the duration must be positive", c.duration)
	case c.margin < 0:
		return nil, o, fmt.Errorf("-f %d: the margin cannot be negative", c.margin)
	case c.set("cq-mod") && (c.cqMod < 1 || c.cqMod > maxCQMod):
		return nil, o, fmt.Errorf("-Q %d: CQ moderation must be in [1, %d]", c.cqMod, maxCQMod)
	case c.set("inline_size") && (c.inline < 0 || c.inline > maxInline):
		return nil, o, fmt.Errorf("-I %d: inline size must be in [0, %d]", c.inline, maxInline)
	case c.set("outs") && c.outReads < 1:
		return nil, o, fmt.Errorf("-o %d: outstanding reads must be positive", c.outReads)
	case c.trafficClass < 0 || c.trafficClass > 255:
		return nil, o, fmt.Errorf("--tclass %d: not a traffic class", c.trafficClass)
	case pkey != 0:
		return nil, o, fmt.Errorf("--pkey_index %d: the P_Key table has one entry", pkey)
	case c.set("tos") && !c.rdmaCM:
		return nil, o, fmt.Errorf("-T: the type of service applies to rdma_cm QPs: give -R too")
	case c.tos < 0 || c.tos > 255:
		return nil, o, fmt.Errorf("-T %d: not a type of service", c.tos)
	case c.rdmaCM && c.conn != connRC:
		return nil, o, fmt.Errorf("-R: only RC QPs through rdma_cm (UC has no rdma_cm, and UD's SIDR is not supported)")
	case c.rdmaCM && c.server == "" && c.Device == "":
		return nil, o, fmt.Errorf("-R: the server needs -d, the address it listens on (a goroce device binds one address)")
	case c.output != "" && c.output != "bandwidth" && c.output != "message_rate" && c.output != "latency":
		return nil, o, fmt.Errorf("--output %s: bandwidth, message_rate or latency", c.output)
	case c.output == "latency" && !c.test.lat, c.output != "" && c.output != "latency" && c.test.lat:
		return nil, o, fmt.Errorf("--output %s: does not fit %s", c.output, c.test)
	}
	if err := c.applyDefaults(); err != nil {
		return nil, o, err
	}
	return c, o, nil
}

// errVersion is -V: perftest prints its version and exits.
var errVersion = errors.New("version requested")

// run is main without the exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if version.Requested(args) {
		version.Print(stdout, "roce-perftest")
		return 0
	}
	c, o, err := parseArgs(args)
	switch {
	case errors.Is(err, errVersion):
		version.Print(stdout, "roce-perftest")
		return 0
	case errors.Is(err, cli.ErrHelp):
		o.PrintUsage(stdout, "TEST [OPTIONS] [SERVER]",
			"perftest's "+testList+" on goroce: without SERVER it waits",
			"for a client, with SERVER it connects to it. Options and operands may come in any order.")
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "roce-perftest: %v (see --help)\n", err)
		return 1
	}
	ctx, cancel := c.Context()
	defer cancel()
	if err := perftest(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "roce-perftest: %v\n", err)
		return 1
	}
	return 0
}
