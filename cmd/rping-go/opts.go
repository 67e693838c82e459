package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/goroce/goroce/cm/rping"
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

// parseOpts parses args the way rping's getopt loop does: grouped flags
// (-vVd), attached or separate arguments (-p7174, -p 7174). It prints what
// rping prints for bad input and returns the exit status (EINVAL = 22) when
// the program must stop.
func parseOpts(args []string, stdout, stderr io.Writer) (options, int, bool) {
	o := options{server: -1, port: 7174, size: 64, udpPort: 4791}
	withArg := "aIpCSt"
	bools := "PscvVdq"
	bad := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if a == "--stats" {
			o.stats = true
			continue
		}
		if strings.HasPrefix(a, "--udp-port") {
			v := strings.TrimPrefix(strings.TrimPrefix(a, "--udp-port"), "=")
			if v == "" && i+1 < len(args) {
				i++
				v = args[i]
			}
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || n > 65535 {
				fmt.Fprintf(stderr, "invalid --udp-port %q\n", v)
				return o, 22, false
			}
			o.udpPort = n
			continue
		}
		if len(a) < 2 || a[0] != '-' {
			continue // getopt leaves non-options; rping ignores them
		}
		for j := 1; j < len(a); j++ {
			c := a[j]
			if strings.IndexByte(withArg, c) >= 0 {
				var v string
				if j+1 < len(a) {
					v = a[j+1:]
				} else if i+1 < len(args) {
					i++
					v = args[i]
				} else {
					usage(stdout)
					return o, 22, false
				}
				if !o.setArg(c, v, stderr) {
					bad = true
				}
				break
			}
			if strings.IndexByte(bools, c) < 0 {
				usage(stdout)
				return o, 22, false
			}
			switch c {
			case 'P':
				o.persistent = true
			case 's':
				o.server = 1
			case 'c':
				o.server = 0
			case 'v':
				o.verbose = true
			case 'V':
				o.validate = true
			case 'd':
				o.debug = true
			case 'q': // rping's self-created QP: we always create our own
			}
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
