package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/version"
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
	loss     float64
	seed     int64
	pcap     string
	// lastAckWait bounds the wait for the last send completions once every receive
	// has completed (0: wait as long as it takes, as the stock tools do).
	lastAckWait time.Duration
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: roce-pingpong rc|uc|ud|srq -d ADDR [flags] [SERVER]\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseArgs parses MODE, the flags and the optional SERVER.
func parseArgs(args []string, stderr io.Writer) (*config, error) {
	c := &config{gidIndex: -1}
	fs := flag.NewFlagSet("roce-pingpong", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.Register(fs)
	fs.IntVar(&c.size, "s", 0, "message `size` (default 4096; ud 2048)")
	fs.IntVar(&c.mtu, "m", 1024, "path `MTU` in bytes: 256, 512, 1024, 2048 or 4096")
	fs.IntVar(&c.rxDepth, "r", 500, "receives posted at a time")
	fs.IntVar(&c.iters, "n", 1000, "number of exchanges")
	fs.IntVar(&c.sl, "l", 0, "service level (accepted, unused on RoCEv2)")
	fs.BoolVar(&c.events, "e", false, "sleep on completion events (always done)")
	fs.IntVar(&c.gidIndex, "g", -1, "local GID `index` (default: the device's RoCEv2 GID)")
	fs.IntVar(&c.numQP, "q", 16, "srq: number of QPs")
	fs.BoolVar(&c.validate, "c", false, "validate received buffers")
	fs.Float64Var(&c.loss, "loss", 0, "drop this share of the datagrams we send (0..1)")
	fs.Int64Var(&c.seed, "seed", 0, "seed of -loss (0: from the clock)")
	fs.StringVar(&c.pcap, "pcap", "", "write our RoCEv2 datagrams to this pcap `file`")
	fs.DurationVar(&c.lastAckWait, "last-ack-wait", 0, "once every receive has completed, wait at most this long for the last sends' ACKs (0: forever, as the stock tools); a peer that exited after its last receive can never ACK a retransmission")
	if len(args) == 0 {
		usage(stderr, fs)
		return nil, fmt.Errorf("missing MODE")
	}
	c.mode = args[0]
	switch c.mode {
	case "rc", "uc", "ud", "srq":
	case "-h", "-help", "--help":
		usage(stderr, fs)
		return nil, fmt.Errorf("help requested")
	default:
		usage(stderr, fs)
		return nil, fmt.Errorf("unknown MODE %q (rc, uc, ud, srq)", c.mode)
	}
	if err := fs.Parse(args[1:]); err != nil {
		usage(stderr, fs)
		return nil, err
	}
	var err error
	if c.server, err = cli.Server(fs); err != nil {
		usage(stderr, fs)
		return nil, err
	}
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.size == 0 {
		c.size = 4096
		if c.mode == "ud" {
			c.size = 2048
		}
	}
	switch {
	case c.size < 1:
		return nil, fmt.Errorf("-s %d: size must be positive", c.size)
	case roce.MTUFromBytes(c.mtu) == 0:
		return nil, fmt.Errorf("-m %d: MTU must be 256, 512, 1024, 2048 or 4096", c.mtu)
	case c.rxDepth < 1:
		return nil, fmt.Errorf("-r %d: rx depth must be positive", c.rxDepth)
	case c.iters < 1:
		return nil, fmt.Errorf("-n %d: iterations must be positive", c.iters)
	case c.mode == "srq" && (c.numQP < 1 || c.numQP > oob.SRQRecords):
		return nil, fmt.Errorf("-q %d: between 1 and %d QPs", c.numQP, oob.SRQRecords)
	case c.mode == "srq" && c.rxDepth <= c.numQP:
		return nil, fmt.Errorf("-r %d: srq needs more receives than QPs (%d)", c.rxDepth, c.numQP)
	case c.loss < 0 || c.loss >= 1:
		return nil, fmt.Errorf("-loss %v: must be in [0, 1)", c.loss)
	}
	if c.mode != "srq" {
		c.numQP = 1
	}
	return c, nil
}

// run is main without the exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if version.Requested(args) {
		version.Print(stdout, "roce-pingpong")
		return 0
	}
	c, err := parseArgs(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "roce-pingpong: %v\n", err)
		return 1
	}
	ctx, cancel := c.Context()
	defer cancel()
	if err := runPingpong(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "roce-pingpong: %v\n", err)
		return 1
	}
	return 0
}
