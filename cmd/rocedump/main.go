package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/tool/cli"
	"github.com/goroce/goroce/internal/tool/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options is the parsed command line.
type options struct {
	read    string // -r FILE, "-" for stdin
	iface   string // -i IFACE: live capture
	count   int    // -c N: stop after N packets (0: no limit)
	tsv     bool
	number  bool // -#: frame numbers
	tstamps int  // how many -t: 0 time of day, 1 none, 2 epoch, 3 delta, 4 date and time, 5 since the first
	filter  filter
}

const synopsis = "[-t...] [-#] [-c COUNT] [--tsv] (-r FILE | -r - | -i IFACE) [FILTER]"

// parseArgs parses the tcpdump-style command line.
func parseArgs(args []string) (*options, *cli.Options, error) {
	o := &options{}
	set := cli.NewOptions("rocedump")
	set.FlagLong(&o.read, "read", 'r', "read packets from this pcap or pcapng FILE (- for stdin)", "FILE")
	set.FlagLong(&o.iface, "interface", 'i', "capture live on this interface (needs root or CAP_NET_RAW)", "IFACE")
	set.FlagLong(&o.count, "count", 'c', "stop after COUNT packets", "COUNT")
	set.FlagLong(&o.number, "number", '#', "print the frame number first (as tshark numbers frames)")
	set.FlagLong(&o.tsv, "tsv", 0, "tab-separated columns with a header line, for scripts")
	tflag := set.Counter('t', "no timestamp; -tt seconds since the epoch; -ttt the delta from the previous packet; -tttt date and time; -ttttt the delta from the first packet")
	// -tsv, the single-dash spelling of earlier versions, still works.
	for i, a := range args {
		if a == "-tsv" {
			args = slices.Clone(args)
			args[i] = "--tsv"
		}
	}
	ops, err := set.Parse(args)
	if err != nil {
		return nil, set, err
	}
	o.tstamps = *tflag
	// rocedump FILE, the usage of earlier versions: a first operand that is a
	// file, with neither -r nor -i.
	if o.read == "" && o.iface == "" && len(ops) > 0 {
		if st, err := os.Stat(ops[0]); err == nil && st.Mode().IsRegular() {
			o.read, ops = ops[0], ops[1:]
		}
	}
	switch {
	case o.read == "" && o.iface == "":
		return nil, set, fmt.Errorf("nothing to read: give -r FILE, -r - or -i IFACE")
	case o.read != "" && o.iface != "":
		return nil, set, fmt.Errorf("-r and -i: read a file or capture live, not both")
	case o.count < 0:
		return nil, set, fmt.Errorf("-c %d: the count cannot be negative", o.count)
	case o.tstamps > 5:
		return nil, set, fmt.Errorf("-t given %d times: at most -ttttt", o.tstamps)
	}
	if o.filter, err = parseFilter(ops); err != nil {
		return nil, set, err
	}
	return o, set, nil
}

// run is main with injectable I/O; it returns the exit status: 1 if the input
// cannot be read, or has frames but none of a link type rocedump decodes
// (frames of unsupported link types are never skipped silently: one warning per
// link type goes to stderr), and 2 for a bad command line, as tcpdump.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if version.Requested(args) {
		version.Print(stdout, "rocedump")
		return 0
	}
	o, set, err := parseArgs(args)
	if errors.Is(err, cli.ErrHelp) {
		set.PrintUsage(stdout, synopsis, filterHelp)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "rocedump: %v (see --help)\n", err)
		return 2
	}
	w := bufio.NewWriter(stdout)
	defer w.Flush()
	p := &printer{w: w, opts: o}
	if o.iface != "" {
		return capture(ctx, p, stderr)
	}
	return readFile(p, stdin, stderr)
}

// filterHelp is the FILTER part of --help.
const filterHelp = `tcpdump for RoCEv2: one line per RoCEv2 packet (UDP port 4791), with every BTH and
extension header field, IB CM messages decoded (tshark's names), and whether the ICRC verifies.

FILTER is an expression: qpn N, psn N or psn N-M, op NAME (RC_SEND_ONLY, send_only, ...),
a class (send, write, read, read_request, read_response, atomic, atomic_ack, ack, nak, cnp,
cm, request, response, rc, uc, ud), joined by and, or, not and parentheses.`

// readFile dumps -r's file or stdin.
func readFile(p *printer, stdin io.Reader, stderr io.Writer) int {
	name := p.opts.read
	var r io.Reader = stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(stderr, "rocedump:", err)
			return 1
		}
		defer f.Close()
		r = f
	} else {
		name = "stdin"
	}
	st, err := dump(p, r)
	if ferr := p.w.Flush(); err == nil {
		err = ferr
	}
	skipped := 0
	for _, link := range slices.Sorted(maps.Keys(st.unsupported)) {
		n := st.unsupported[link]
		skipped += n
		fmt.Fprintf(stderr, "rocedump: %s: link type %d not supported; %d %s skipped\n", name, link, n, plural(n, "frame"))
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

// capture dumps -i's live traffic until ^C, SIGTERM or -c packets.
func capture(ctx context.Context, p *printer, stderr io.Writer) int {
	l, err := openLive(p.opts.iface)
	if err != nil {
		fmt.Fprintln(stderr, "rocedump:", err)
		return 1
	}
	defer l.Close()
	fmt.Fprintf(stderr, "rocedump: listening on %s for UDP port %d\n", p.opts.iface, rocePort)
	for no := 1; ; no++ {
		d, ts, err := l.next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0
			}
			fmt.Fprintln(stderr, "rocedump:", err)
			return 1
		}
		if p.print(no, ts, &d) && p.done() {
			return 0
		}
		p.w.Flush()
	}
}

func plural(n int, s string) string {
	if n == 1 {
		return s
	}
	return s + "s"
}

// stats is what dump read besides the lines it printed.
type stats struct {
	frames      int            // records in the file
	unsupported map[uint32]int // frames by link type extract does not decode
}

// dump reads a pcap or pcapng stream from r and prints one line per RoCEv2
// packet that passes the filter, up to -c; frames are numbered by their record
// in the file, as tshark does. It returns an error only when the file itself
// cannot be read; a file cut short mid-record ends the dump with an error after
// the lines already printed.
func dump(p *printer, r io.Reader) (stats, error) {
	st := stats{unsupported: map[uint32]int{}}
	src, err := open(r)
	if err != nil {
		return st, err
	}
	p.header()
	for no := 1; ; no++ {
		data, link, ts, err := src.next()
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
		for _, seg := range segments(&d) { // a GSO super-datagram: each packet on its line
			if p.print(no, ts, &seg) && p.done() {
				return st, nil
			}
		}
	}
}

// timestamp formats ts as the -t options ask, with a trailing space ("" for -t).
func (p *printer) timestamp(ts time.Time) string {
	if p.first.IsZero() {
		p.first, p.prev = ts, ts
	}
	defer func() { p.prev = ts }()
	delta := func(d time.Duration) string {
		if d < 0 {
			d = 0
		}
		h, m := d/time.Hour, d%time.Hour/time.Minute
		s, us := d%time.Minute/time.Second, d%time.Second/time.Microsecond
		return fmt.Sprintf("%02d:%02d:%02d.%06d ", h, m, s, us)
	}
	switch p.opts.tstamps {
	case 1:
		return ""
	case 2:
		return fmt.Sprintf("%d.%06d ", ts.Unix(), ts.Nanosecond()/1000)
	case 3:
		return delta(ts.Sub(p.prev))
	case 4:
		return ts.Format("2006-01-02 15:04:05.000000 ")
	case 5:
		return delta(ts.Sub(p.first))
	}
	return ts.Format("15:04:05.000000 ")
}
