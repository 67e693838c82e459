package main

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/goroce/goroce/cm/rping"
	"github.com/goroce/goroce/internal/tool/cli"
	"github.com/pborman/getopt/v2"
)

// Size limits of rping (rping.c RPING_MIN_BUFSIZE, RPING_BUFSIZE).
const (
	minSize = rping.MinSize
	bufSize = rping.BufSize
)

// options are rping's command line (getopt string "a:I:Pp:C:S:t:scvVdq").
type options struct {
	server     int // -1 unset, 0 client, 1 server
	addr       string
	src        string
	persistent bool
	port       int
	count      int
	size       int
	tos        int
	verbose    bool
	validate   bool
	debug      bool
	udpPort    int  // --udp-port: the RoCEv2 UDP port (4791); ours, for tests
	stats      bool // --stats: the engine's counters on stderr at exit; ours
}

// role is -s or -c: the last one given wins, as in rping's getopt loop.
type role struct {
	o *options
	v int
}

func (r role) Set(string, getopt.Option) error { r.o.server = r.v; return nil }
func (r role) String() string                  { return strconv.Itoa(r.v) }

// parseOpts parses args with rping's getopt string "a:I:Pp:C:S:t:scvVdq" (and
// rping-go's --udp-port and --stats): grouped flags (-vVd), attached or
// separate arguments (-p7174, -p 7174), options after operands, which rping
// ignores. Numbers are read as rping's atoi reads them. It prints what rping
// prints for bad input (the usage, on stdout) and returns the exit status
// (EINVAL = 22) when the program must stop.
func parseOpts(args []string, stdout, stderr io.Writer) (options, int, bool) {
	o := options{server: -1, port: 7174, size: 64, udpPort: 4791}
	set := cli.NewOptions("rping-go")
	var addr, src, port, count, size, tos string
	for _, f := range []struct {
		p     *string
		short rune
		help  string
	}{{&addr, 'a', "address"}, {&src, 'I', "source address to bind to for client"}, {&port, 'p', "port"},
		{&count, 'C', "ping count times"}, {&size, 'S', "ping data size"}, {&tos, 't', "type of service"}} {
		set.Flag(f.p, f.short, f.help, "ARG")
	}
	set.Flag(role{&o, 1}, 's', "server side").SetFlag()
	set.Flag(role{&o, 0}, 'c', "client side").SetFlag()
	var selfQP bool
	set.Flag(&o.persistent, 'P', "persistent server mode allowing multiple connections")
	set.Flag(&o.verbose, 'v', "display ping data to stdout")
	set.Flag(&o.validate, 'V', "validate ping data")
	set.Flag(&o.debug, 'd', "debug printfs")
	set.Flag(&selfQP, 'q', "use self-created, self-modified QP (rping-go always does)")
	set.FlagLong(&o.udpPort, "udp-port", 0, "RoCEv2 UDP port (rping-go only)", "N")
	set.FlagLong(&o.stats, "stats", 0, "print the engine's counters to stderr at exit (rping-go only)")
	if _, err := set.Parse(args); err != nil {
		if !errors.Is(err, cli.ErrHelp) {
			fmt.Fprintf(stderr, "%v\n", err)
		}
		usage(stdout)
		return o, 22, false
	}
	if o.udpPort <= 0 || o.udpPort > 65535 {
		fmt.Fprintf(stderr, "invalid --udp-port %d\n", o.udpPort)
		return o, 22, false
	}
	bad := false
	for _, a := range []struct {
		c byte
		v string
	}{{'a', addr}, {'I', src}, {'p', port}, {'C', count}, {'S', size}, {'t', tos}} {
		if set.IsSet(rune(a.c)) && !o.setArg(a.c, a.v, stderr) {
			bad = true
		}
	}
	if bad {
		return o, 22, false
	}
	if o.server == -1 {
		usage(stdout)
		return o, 22, false
	}
	return o, 0, true
}

// atoi is C's atoi: leading digits, 0 if none.
func atoi(s string) int {
	s = strings.TrimLeft(s, " \t")
	n, neg, i := 0, false, 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		neg = s[i] == '-'
		i++
	}
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		n = n*10 + int(s[i]-'0')
	}
	if neg {
		return -n
	}
	return n
}

func (o *options) setArg(c byte, v string, stderr io.Writer) bool {
	switch c {
	case 'a':
		o.addr = v
	case 'I':
		o.src = v
	case 'p':
		o.port = atoi(v)
	case 't':
		o.tos = atoi(v)
	case 'S':
		o.size = atoi(v)
		if o.size < minSize || o.size > bufSize-1 {
			fmt.Fprintf(stderr, "Invalid size %d (valid range is %d to %d)\n", o.size, minSize, bufSize)
			return false
		}
	case 'C':
		o.count = atoi(v)
		if o.count < 0 {
			fmt.Fprintf(stderr, "Invalid count %d\n", o.count)
			return false
		}
	}
	return true
}

func usage(w io.Writer) {
	const name = "rping-go"
	fmt.Fprintf(w, "%s -s [-vVd] [-S size] [-C count] [-a addr] [-p port]\n", name)
	fmt.Fprintf(w, "%s -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]\n", name)
	fmt.Fprintf(w, "\t-c\t\tclient side\n")
	fmt.Fprintf(w, "\t-I\t\tSource address to bind to for client.\n")
	fmt.Fprintf(w, "\t-s\t\tserver side.  To bind to any address with IPv6 use -a ::0\n")
	fmt.Fprintf(w, "\t-v\t\tdisplay ping data to stdout\n")
	fmt.Fprintf(w, "\t-V\t\tvalidate ping data\n")
	fmt.Fprintf(w, "\t-d\t\tdebug printfs\n")
	fmt.Fprintf(w, "\t-S size \tping data size\n")
	fmt.Fprintf(w, "\t-C count\tping count times\n")
	fmt.Fprintf(w, "\t-a addr\t\taddress\n")
	fmt.Fprintf(w, "\t-p port\t\tport\n")
	fmt.Fprintf(w, "\t-P\t\tpersistent server mode allowing multiple connections\n")
	fmt.Fprintf(w, "\t-q\t\tuse self-created, self-modified QP\n")
	fmt.Fprintf(w, "\t--udp-port N\tRoCEv2 UDP port (default 4791; rping-go only)\n")
	fmt.Fprintf(w, "\t--stats\t\tprint the engine's counters to stderr at exit (rping-go only)\n")
}
