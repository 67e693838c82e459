package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/tool/ccflags"
	"github.com/goroce/goroce/link"
)

// Defaults of the embedded configuration: what `go run ./cmd/roced` serves on a fresh
// machine. Loopback only, so starting it never exposes anything.
const (
	defaultBind         = "127.0.0.1"
	defaultPort         = 4791
	defaultMTU          = 1024
	defaultMetrics      = "127.0.0.1:9464"
	defaultPingpongPort = 18515
	defaultUDPingpong   = 18516
	defaultPingpongMax  = 64 << 10
	defaultPingpongIdle = 30 * time.Second
	defaultExchange     = 5 * time.Second
	defaultMaxSessions  = 64
	defaultRpingIdle    = 30 * time.Second
	defaultCMPending    = 64
	defaultCMPerSource  = 8
	defaultCMPendingFor = 20 * time.Second
	defaultRpingPort    = 7174 // rping's default rdma_cm port
	defaultDrainTimeout = 5 * time.Second
	defaultSourcePorts  = 64
	defaultHealth       = 5 * time.Second
)

// config is the daemon's validated configuration.
type config struct {
	binds        []netip.Addr
	port         uint16
	mtu          int
	metrics      string // host:port, or "" for no HTTP endpoint
	debug        string // host:port serving /debug/*; "" serves it on a loopback metrics address only
	health       time.Duration
	logLevel     slog.Level
	logJSON      bool
	logFile      string // "" logs to stderr
	pcapFile     string // "" captures nothing
	pingpong     bool   // ibv_rc_pingpong
	srqPingpong  bool   // ibv_srq_pingpong (same TCP port as rc: the stock tools share 18515)
	pingpongPort uint16
	udPingpong   bool
	udPingPort   uint16
	ppMaxSize    int
	ppIdle       time.Duration
	ppExchange   time.Duration // a pingpong client must finish the TCP exchange within this
	ppMaxSess    int           // pingpong sessions served at once, per responder
	rping        bool          // rping clients, through the CM on QP1
	rpingPort    uint16        // rdma_cm port (RDMA_PS_TCP) of the rping responder
	rpingMaxSess int           // rping connections served at once, per address
	rpingIdle    time.Duration // an rping connection with no completion for this long ends

	cmMaxPending          int           // passive CM connections waiting for RTU, per address
	cmMaxPendingPerSource int           // those of one source address whose REP went unanswered
	cmPendingTimeout      time.Duration // a pending connection not established by then is withdrawn
	drainTimeout          time.Duration
	sourcePorts           int // per-QP UDP source ports per address; 0 sends everything from -port
	gso, gro              bool
	readers               int          // SO_REUSEPORT receive sockets per address
	runToCompletion       bool         // the goroutine that has the work does it (roce.WithRunToCompletion)
	cc                    dcqcn.Config // congestion control of every device (-cc, -cc-param, ...)
	share                 shareConfig  // -socket and its siblings
}

// addrList is a repeatable flag of IP addresses; "-bind a,b" and "-bind a -bind b"
// both work.
type addrList struct {
	addrs []netip.Addr
	set   bool
}

func (l *addrList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(l.addrs))
	for i, a := range l.addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func (l *addrList) Set(v string) error {
	if !l.set {
		l.addrs, l.set = nil, true // the first -bind replaces the default
	}
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		a, err := netip.ParseAddr(f)
		if err != nil {
			return fmt.Errorf("%q is not an IP address", f)
		}
		if a.Zone() != "" || a.Is6() && a.IsLinkLocalUnicast() {
			return fmt.Errorf("%s: roced does not serve link-local (zoned) IPv6; bind an IPv4 or a global IPv6 address", f)
		}
		a = a.Unmap()
		if a.IsUnspecified() || a.IsMulticast() {
			return fmt.Errorf("%s: bind a unicast address of this host (RoCE derives the GID from it)", a)
		}
		for _, b := range l.addrs {
			if b == a {
				return fmt.Errorf("%s given twice", a)
			}
		}
		l.addrs = append(l.addrs, a)
	}
	return nil
}

// usageError is a command-line mistake; run exits 2 for it, as the flag package does.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// oneLine escapes control characters, so an error that quotes user input (the flag
// package echoes flag names verbatim) stays on one line.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// parseFlags turns args into a config. Every error is one line that names the flag.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("roced", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // we print one line ourselves; -h prints usage below
	binds := &addrList{addrs: []netip.Addr{netip.MustParseAddr(defaultBind)}}
	fs.Var(binds, "bind", "IP `address` to serve RoCEv2 on; repeat or comma-separate for several)")
	port := fs.Int("port", defaultPort, "UDP `port` for RoCEv2 (IANA: 4791; peers only talk to 4791)")
	mtu := fs.Int("mtu", defaultMTU, "path MTU in `bytes`: 256, 512, 1024, 2048 or 4096")
	metrics := fs.String("metrics", defaultMetrics, "`host:port` for /metrics, /healthz, /readyz (and /debug/* when it is a loopback address); empty disables")
	debug := fs.String("debug", "", "serve /debug/* (every QP's peer, QPN and PSNs) on `host:port` instead of a loopback -metrics address")
	healthDeadline := fs.Duration("health-deadline", defaultHealth, "/healthz fails when an engine shard has not finished a pass for this long")
	logLevel := fs.String("log-level", "info", "log `level`: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "log `format`: text or json")
	logFile := fs.String("log-file", "", "append logs to `file` instead of stderr; SIGHUP reopens it")
	pcapFile := fs.String("pcap", "", "write every RoCEv2 packet in and out to `file` (pcap); SIGHUP reopens it")
	pingpong := fs.Bool("pingpong", true, "serve ibv_rc_pingpong clients on -pingpong-port")
	srqPingpong := fs.Bool("srq-pingpong", true, "serve ibv_srq_pingpong clients on -pingpong-port")
	pingpongPort := fs.Int("pingpong-port", defaultPingpongPort, "TCP `port` of the rc/srq pingpong exchange")
	udPingpong := fs.Bool("ud-pingpong", true, "serve ibv_ud_pingpong clients on -ud-pingpong-port (they need -p)")
	udPingPort := fs.Int("ud-pingpong-port", defaultUDPingpong, "TCP `port` of the ud pingpong exchange")
	ppMax := fs.Int("pingpong-max-size", defaultPingpongMax, "largest message in `bytes` a pingpong client may send (its -s)")
	ppIdle := fs.Duration("pingpong-idle", defaultPingpongIdle, "end a pingpong session after this long without a message")
	ppExchange := fs.Duration("pingpong-exchange-timeout", defaultExchange, "a pingpong client must finish the TCP address exchange within this")
	ppMaxSess := fs.Int("pingpong-max-sessions", defaultMaxSessions, "pingpong sessions served at once per port; more clients are refused")
	rpingOn := fs.Bool("rping", true, "serve rping clients (rdma_cm, connection manager on QP1) on -rping-port")
	rpingPort := fs.Int("rping-port", defaultRpingPort, "rdma_cm `port` of the rping responder (rping -p)")
	rpingMaxSess := fs.Int("rping-max-sessions", defaultMaxSessions, "established rping connections served at once per address; a request beyond them is rejected (REJ consumer defined)")
	rpingIdle := fs.Duration("rping-idle", defaultRpingIdle, "end an rping connection when nothing completes for this long (a client that died)")
	cmPending := fs.Int("cm-max-pending", defaultCMPending, "CM connections waiting for their RTU per address; a REQ beyond them evicts the oldest unanswered REP (REJ timeout), or is dropped unanswered if none")
	cmPerSource := fs.Int("cm-max-pending-per-source", defaultCMPerSource, "CM connections of one source address whose REP went unanswered (no RTU in the time the peer promised); while it has this many, its REQs are dropped unanswered")
	cmPendingFor := fs.Duration("cm-pending-timeout", defaultCMPendingFor, "withdraw a CM connection (REJ timeout) not established this long after its REQ")
	drain := fs.Duration("drain-timeout", defaultDrainTimeout, "on SIGINT/SIGTERM, how long to wait for sessions to finish")
	sourcePorts := fs.Int("source-ports", defaultSourcePorts, "most per-QP UDP source `ports` (rxe's, for ECMP entropy; one socket each) per address; 0 sends all from -port")
	gso := fs.Bool("gso", true, "send runs of one UDP flow's equal-size packets as UDP GSO segment trains (false: one datagram per packet)")
	gro := fs.Bool("gro", true, "receive with UDP GRO: coalesced datagrams split by the engine (false: one datagram per read slot)")
	readers := fs.Int("readers", 1, "receive sockets per address (SO_REUSEPORT), each read by its own goroutine; the kernel spreads QPs over them by source port")
	rtc := fs.Bool("run-to-completion", false, "the goroutine that has the work does it when the engine shard is idle (posts send their own packets, the socket reader runs the receive side), saving hand-offs")
	var ccf ccflags.Flags
	ccf.Register(fs)
	var sf shareFlags
	sf.register(fs)
	fs.Usage = func() {} // a mistake gets one line, not the whole usage
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "Usage: roced [flags]\n\nroced serves RoCEv2 on UDP 4791 without an RDMA NIC and exports its counters to Prometheus.\n\nFlags:\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, &usageError{oneLine(err.Error())}
	}
	if fs.NArg() > 0 {
		return nil, &usageError{fmt.Sprintf("unexpected argument %q (roced takes only flags)", fs.Arg(0))}
	}
	c := &config{
		binds:        binds.addrs,
		metrics:      *metrics,
		debug:        *debug,
		health:       *healthDeadline,
		logFile:      *logFile,
		pcapFile:     *pcapFile,
		pingpong:     *pingpong,
		srqPingpong:  *srqPingpong,
		udPingpong:   *udPingpong,
		ppMaxSize:    *ppMax,
		ppIdle:       *ppIdle,
		ppExchange:   *ppExchange,
		ppMaxSess:    *ppMaxSess,
		rping:        *rpingOn,
		rpingMaxSess: *rpingMaxSess,
		rpingIdle:    *rpingIdle,

		cmMaxPending:          *cmPending,
		cmMaxPendingPerSource: *cmPerSource,
		cmPendingTimeout:      *cmPendingFor,
		drainTimeout:          *drain,
		sourcePorts:           *sourcePorts,
		gso:                   *gso,
		gro:                   *gro,
		readers:               *readers,
		runToCompletion:       *rtc,
	}
	if c.readers < 1 || c.readers > link.MaxReaders {
		return nil, &usageError{fmt.Sprintf("invalid value %d for flag -readers: want 1..%d", c.readers, link.MaxReaders)}
	}
	var err error
	if c.cc, err = ccf.Config(); err != nil {
		return nil, &usageError{oneLine(err.Error())}
	}
	if c.share, err = sf.config(); err != nil {
		return nil, err
	}
	if c.sourcePorts < 0 || c.sourcePorts > 16384 {
		return nil, &usageError{fmt.Sprintf("invalid value %d for flag -source-ports: want 0..16384", c.sourcePorts)}
	}
	if *port < 1 || *port > 65535 {
		return nil, &usageError{fmt.Sprintf("invalid value %d for flag -port: want 1..65535", *port)}
	}
	c.port = uint16(*port)
	switch *mtu {
	case 256, 512, 1024, 2048, 4096:
		c.mtu = *mtu
	default:
		return nil, &usageError{fmt.Sprintf("invalid value %d for flag -mtu: want 256, 512, 1024, 2048 or 4096", *mtu)}
	}
	if *pingpongPort < 1 || *pingpongPort > 65535 {
		return nil, &usageError{fmt.Sprintf("invalid value %d for flag -pingpong-port: want 1..65535", *pingpongPort)}
	}
	c.pingpongPort = uint16(*pingpongPort)
	if *rpingPort < 1 || *rpingPort > 65535 {
		return nil, &usageError{fmt.Sprintf("invalid value %d for flag -rping-port: want 1..65535", *rpingPort)}
	}
	c.rpingPort = uint16(*rpingPort)
	if *udPingPort < 1 || *udPingPort > 65535 {
		return nil, &usageError{fmt.Sprintf("invalid value %d for flag -ud-pingpong-port: want 1..65535", *udPingPort)}
	}
	c.udPingPort = uint16(*udPingPort)
	if c.pingpong && c.udPingpong && c.pingpongPort == c.udPingPort {
		return nil, &usageError{fmt.Sprintf("-pingpong-port and -ud-pingpong-port are both %d: the exchanges look alike, so each needs its own port", c.udPingPort)}
	}
	if c.ppMaxSize < 1 || c.ppMaxSize > 16<<20 {
		return nil, &usageError{fmt.Sprintf("invalid value %d for flag -pingpong-max-size: want 1..16777216", c.ppMaxSize)}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"pingpong-idle", c.ppIdle}, {"pingpong-exchange-timeout", c.ppExchange}, {"rping-idle", c.rpingIdle}, {"cm-pending-timeout", c.cmPendingTimeout}} {
		if d.v <= 0 {
			return nil, &usageError{fmt.Sprintf("invalid value %s for flag -%s: want > 0", d.v, d.name)}
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"pingpong-max-sessions", c.ppMaxSess}, {"rping-max-sessions", c.rpingMaxSess}, {"cm-max-pending", c.cmMaxPending}, {"cm-max-pending-per-source", c.cmMaxPendingPerSource}} {
		if n.v < 1 || n.v > 1<<16 {
			return nil, &usageError{fmt.Sprintf("invalid value %d for flag -%s: want 1..65536", n.v, n.name)}
		}
	}
	if c.metrics != "" {
		_, p, err := net.SplitHostPort(c.metrics)
		if err != nil {
			return nil, &usageError{fmt.Sprintf("invalid value %q for flag -metrics: want host:port", c.metrics)}
		}
		if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 65535 {
			return nil, &usageError{fmt.Sprintf("invalid value %q for flag -metrics: bad port %q", c.metrics, p)}
		}
	}
	if c.debug != "" {
		if _, _, err := net.SplitHostPort(c.debug); err != nil {
			return nil, &usageError{fmt.Sprintf("invalid value %q for flag -debug: want host:port", c.debug)}
		}
		if c.debug == c.metrics {
			return nil, &usageError{fmt.Sprintf("-debug and -metrics are both %s: /debug/* gets its own address", c.debug)}
		}
	}
	if c.health <= 0 {
		return nil, &usageError{fmt.Sprintf("invalid value %s for flag -health-deadline: want > 0", c.health)}
	}
	if err := c.logLevel.UnmarshalText([]byte(*logLevel)); err != nil {
		return nil, &usageError{fmt.Sprintf("invalid value %q for flag -log-level: want debug, info, warn or error", *logLevel)}
	}
	switch *logFormat {
	case "text":
	case "json":
		c.logJSON = true
	default:
		return nil, &usageError{fmt.Sprintf("invalid value %q for flag -log-format: want text or json", *logFormat)}
	}
	if c.drainTimeout <= 0 {
		return nil, &usageError{fmt.Sprintf("invalid value %s for flag -drain-timeout: want > 0", c.drainTimeout)}
	}
	return c, nil
}

// checkLocal reports an error for the first bind address that no interface of this
// host carries. Every 127/8 address is local on Linux even though only 127.0.0.1/8 is
// listed, so loopback addresses pass when an up loopback interface exists.
func checkLocal(binds []netip.Addr) error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("listing network interfaces: %w", err)
	}
	type pfx struct {
		p        netip.Prefix
		loopback bool
	}
	var have []pfx
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			have = append(have, pfx{netip.PrefixFrom(ip.Unmap(), ones), ifc.Flags&net.FlagLoopback != 0})
		}
	}
next:
	for _, b := range binds {
		for _, h := range have {
			if h.p.Addr() == b || (h.loopback && b.IsLoopback() && h.p.Contains(b)) {
				continue next
			}
		}
		return fmt.Errorf("-bind %s: no interface of this host has that address (see `ip -brief addr`)", b)
	}
	return nil
}
