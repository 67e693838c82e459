package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/goroce/goroce/internal/cli"
	"github.com/goroce/goroce/internal/version"
	"github.com/goroce/goroce/roce"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// test is one perftest benchmark.
type test string

// The benchmarks, named as perftest's binaries without the ib_ prefix.
const (
	writeBW  test = "write_bw"
	readBW   test = "read_bw"
	sendBW   test = "send_bw"
	writeLat test = "write_lat"
	readLat  test = "read_lat"
	sendLat  test = "send_lat"
)

// bw reports whether t is a bandwidth test.
func (t test) bw() bool { return t == writeBW || t == readBW || t == sendBW }

// config is the parsed command line.
type config struct {
	cli.Flags
	test     test
	server   string // empty: serve
	size     int
	iters    int
	mtu      int // bytes; 0: the port's active MTU
	gidIndex int // -1: the device's RoCEv2 index
	txDepth  int
	rxDepth  int
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: roce-perftest write_bw|read_bw|send_bw|write_lat|read_lat|send_lat -d ADDR [flags] [SERVER]\n")
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseArgs parses TEST, the flags and the optional SERVER.
func parseArgs(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("roce-perftest", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var qps int
	c.Register(fs)
	fs.IntVar(&c.size, "s", 0, "message `size` (default 65536; the lat tests 2)")
	fs.IntVar(&c.iters, "n", 0, "`iterations` (default 5000; the lat tests 1000)")
	fs.IntVar(&c.mtu, "m", 0, "path `MTU` in bytes: 256, 512, 1024, 2048 or 4096 (default: the port's active MTU)")
	fs.IntVar(&c.gidIndex, "x", -1, "local GID `index` (default: the device's RoCEv2 GID)")
	fs.IntVar(&qps, "q", 1, "number of QPs (only 1)")
	fs.IntVar(&c.txDepth, "t", 128, "send queue `depth` of the bw tests")
	fs.IntVar(&c.rxDepth, "r", 512, "receives posted at a time by the send tests")
	fs.Bool("F", false, "accepted and ignored")
	if len(args) == 0 {
		usage(stderr, fs)
		return nil, fmt.Errorf("missing TEST")
	}
	c.test = test(args[0])
	switch c.test {
	case writeBW, readBW, sendBW, writeLat, readLat, sendLat:
	case "-h", "-help", "--help":
		usage(stderr, fs)
		return nil, fmt.Errorf("help requested")
	default:
		usage(stderr, fs)
		return nil, fmt.Errorf("unknown TEST %q (write_bw, read_bw, send_bw, write_lat, read_lat, send_lat)", c.test)
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
		c.size = 65536
		if !c.test.bw() {
			c.size = 2
		}
	}
	if c.iters == 0 {
		c.iters = 5000
		if !c.test.bw() {
			c.iters = 1000
		}
	}
	switch {
	case c.size < 1 || c.size > maxSize:
		return nil, fmt.Errorf("-s %d: size must be in [1, %d]", c.size, maxSize)
	case c.iters < 1:
		return nil, fmt.Errorf("-n %d: iterations must be positive", c.iters)
	case c.mtu != 0 && roce.MTUFromBytes(c.mtu) == 0:
		return nil, fmt.Errorf("-m %d: MTU must be 256, 512, 1024, 2048 or 4096", c.mtu)
	case qps != 1:
		return nil, fmt.Errorf("-q %d: only one QP is supported", qps)
	case c.txDepth < 1:
		return nil, fmt.Errorf("-t %d: tx depth must be positive", c.txDepth)
	case c.rxDepth < 1:
		return nil, fmt.Errorf("-r %d: rx depth must be positive", c.rxDepth)
	case c.gidIndex < -1:
		return nil, fmt.Errorf("-x %d: not a GID index", c.gidIndex)
	}
	return c, nil
}

// run is main without the exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	if version.Requested(args) {
		version.Print(stdout, "roce-perftest")
		return 0
	}
	c, err := parseArgs(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "roce-perftest: %v\n", err)
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
