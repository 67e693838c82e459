package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/goroce/goroce/internal/tool/cli"
	"github.com/goroce/goroce/internal/tool/version"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the parsed command line.
type config struct {
	cli.Flags
	mode     string
	server   string // empty: serve
	size     int
	mtu      int
	rxDepth  int
	iters    int
	sl       int
	events   bool
	gidIndex int // -1: the device's RoCEv2 index
	numQP    int
	validate bool
	pcap     string
	// lastAckWait bounds the wait for the last send completions once every receive
	// has completed (0: wait as long as it takes, as the stock tools do).
	lastAckWait time.Duration
	portMTU     roce.MTU // tests: the device's active MTU instead of its interface's
}

// stockMessage is an error the stock tool prints in these words; it is printed
// as it is, without the program name, so that what matches the stock tool's
// output matches ours.
type stockMessage string

func (m stockMessage) Error() string { return string(m) }

// parseArgs parses the command line: MODE, the options and the optional SERVER, in
// any order, as the stock tools' getopt_long does.
func parseArgs(args []string) (*config, *cli.Options, error) {
	c := &config{mtu: 1024, rxDepth: 500, iters: 1000, gidIndex: -1, numQP: 16}
	o := cli.NewOptions("roce-pingpong")
	c.Register(o)
	o.FlagLong(&c.size, "size", 's', "message size (default 4096; ud 2048)", "SIZE")
	o.FlagLong(&c.mtu, "mtu", 'm', "path MTU in bytes: 256, 512, 1024, 2048 or 4096 (not ud)", "MTU")
	o.FlagLong(&c.rxDepth, "rx-depth", 'r', "receives posted at a time", "DEPTH")
	o.FlagLong(&c.iters, "iters", 'n', "number of exchanges (srq: in total over all QPs)", "ITERS")
	o.FlagLong(&c.sl, "sl", 'l', "service level (accepted; RoCEv2 without VLANs has no use for it)", "SL")
	o.FlagLong(&c.events, "events", 'e', "sleep on completion events (always done)")
	o.FlagLong(&c.gidIndex, "gid-idx", 'g', "local GID index (default: the device's RoCEv2 GID)", "INDEX")
	o.FlagLong(&c.numQP, "num-qp", 'q', "srq: number of QPs", "NUM")
	o.FlagLong(&c.validate, "chk", 'c', "validate received buffers")
	var ignored, ts, dm bool
	// On-demand paging (-o, -O, -P), the new post-send API (-N) and the
	// unprotected-CC opt-in (-U) change nothing here: Go memory is always
	// resident, there is one post-send API, and there is no congestion control.
	o.FlagLong(&ignored, "odp", 'o', "accepted and ignored (on-demand paging)")
	o.FlagLong(&ignored, "iodp", 'O', "accepted and ignored (implicit on-demand paging)")
	o.FlagLong(&ignored, "prefetch", 'P', "accepted and ignored (prefetch of on-demand pages)")
	o.FlagLong(&ignored, "new_send", 'N', "accepted and ignored (the new post-send API)")
	o.FlagLong(&ignored, "allow-cc-unprotected", 'U', "accepted and ignored")
	o.FlagLong(&ts, "ts", 't', "completion timestamps (not supported)")
	o.FlagLong(&dm, "dm", 'j', "device memory (not supported)")
	o.FlagLong(&c.pcap, "pcap", 0, "write our RoCEv2 datagrams to this pcap file", "FILE")
	o.FlagLong(&c.lastAckWait, "last-ack-wait", 0, "once every receive has completed, wait at most this long for the last sends' ACKs (0: forever, as the stock tools)", "DURATION")
	ops, err := o.Parse(args)
	if err != nil {
		return nil, o, err
	}
	if c.mode, c.server, err = cli.Operands(ops, "MODE (rc, uc, ud or srq)"); err != nil {
		return nil, o, err
	}
	switch c.mode {
	case "rc", "uc", "ud", "srq":
	default:
		return nil, o, fmt.Errorf("unknown MODE %q (rc, uc, ud or srq)", c.mode)
	}
	if err := c.Check(c.server); err != nil {
		return nil, o, err
	}
	if c.size == 0 {
		c.size = 4096
		if c.mode == "ud" {
			c.size = 2048
		}
	}
	switch {
	case ts:
		return nil, o, fmt.Errorf("-t: completion timestamps are not supported")
	case dm:
		return nil, o, fmt.Errorf("-j: device memory is not supported")
	case c.size < 1:
		return nil, o, fmt.Errorf("-s %d: size must be positive", c.size)
	case roce.MTUFromBytes(c.mtu) == 0:
		return nil, o, fmt.Errorf("-m %d: MTU must be 256, 512, 1024, 2048 or 4096", c.mtu)
	case c.rxDepth < 1:
		return nil, o, fmt.Errorf("-r %d: rx depth must be positive", c.rxDepth)
	case c.iters < 1:
		return nil, o, fmt.Errorf("-n %d: iterations must be positive", c.iters)
	case c.mode == "srq" && (c.numQP < 1 || c.numQP > oob.SRQRecords):
		return nil, o, fmt.Errorf("-q %d: between 1 and %d QPs", c.numQP, oob.SRQRecords)
	case c.mode == "srq" && c.rxDepth <= c.numQP:
		return nil, o, fmt.Errorf("-r %d: srq needs more receives than QPs (%d)", c.rxDepth, c.numQP)
	}
	if c.mode != "srq" {
		c.numQP = 1
	}
	return c, o, nil
}

// run is main without the exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if version.Requested(args) {
		version.Print(stdout, "roce-pingpong")
		return 0
	}
	c, o, err := parseArgs(args)
	if errors.Is(err, cli.ErrHelp) {
		o.PrintUsage(stdout, "rc|uc|ud|srq [OPTIONS] [SERVER]",
			"ibv_rc_pingpong, ibv_uc_pingpong, ibv_ud_pingpong and ibv_srq_pingpong on goroce: without SERVER",
			"it waits for a client, with SERVER it connects to it. Options and operands may come in any order.")
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "roce-pingpong: %v (see --help)\n", err)
		return 1
	}
	ctx, cancel := c.Context()
	defer cancel()
	return report(stderr, runPingpong(ctx, c, stdout, stderr))
}

// report prints a failed run's error on stderr and returns the exit code.
func report(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	var sm stockMessage
	if errors.As(err, &sm) {
		fmt.Fprintln(stderr, sm)
	} else {
		fmt.Fprintf(stderr, "roce-pingpong: %v\n", err)
	}
	return 1
}
