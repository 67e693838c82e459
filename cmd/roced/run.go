package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/internal/tool/attachd"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/metrics"
	"github.com/goroce/goroce/roce"
)

// Exit codes of run.
const (
	exitOK    = 0
	exitError = 1 // could not start: address, port, file
	exitUsage = 2 // bad command line, as the flag package uses
)

// run is the whole daemon: it parses args, serves until ctx is done, then shuts down
// and returns the process exit code. Start-up errors print one line to stderr.
// stdout gets the human-readable "serving" lines; logs go to stderr or -log-file.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(stderr, "roced: %v\n", err)
		return exitUsage
	}
	if err := checkLocal(cfg.binds); err != nil {
		fmt.Fprintf(stderr, "roced: %v\n", err)
		return exitError
	}
	// Catch SIGHUP before anything is open: its default action would kill us.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	d, err := start(cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "roced: %v\n", err)
		return exitError
	}
	d.announce(stdout)
	sd := newNotifier()
	if err := sd.notify("READY=1\nSTATUS=" + d.status()); err != nil {
		d.log.Warn("telling systemd we are ready", "err", err)
	}
	go sd.watch(d.health.check, d.stopHealth)
	err = d.wait(ctx, hup)
	_ = sd.notify("STOPPING=1")
	if err != nil {
		d.log.Error("stopping after a fatal error", "err", err)
		d.shutdown()
		fmt.Fprintf(stderr, "roced: %v\n", err)
		return exitError
	}
	d.log.Info("shutting down", "drain_timeout", cfg.drainTimeout)
	// shutdown is bounded by the drain deadline at every step that waits for peers;
	// the watchdog only fires if something below us hangs, and then exiting (non-zero,
	// so a supervisor notices) beats hanging.
	done := make(chan struct{})
	go func() { d.shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(cfg.drainTimeout + shutdownGrace):
		d.log.Error("shutdown did not finish; exiting anyway", "after", cfg.drainTimeout+shutdownGrace)
		fmt.Fprintf(stderr, "roced: shutdown did not finish within %v; exiting anyway\n", cfg.drainTimeout+shutdownGrace)
		return exitError
	}
	d.log.Info("stopped")
	return exitOK
}

// shutdownGrace is how long past the drain deadline closing devices and the HTTP
// server may take before run gives up on them.
const shutdownGrace = 5 * time.Second

// wait serves SIGHUPs until ctx is done (nil) or a server fails (its error).
func (d *daemon) wait(ctx context.Context, hup <-chan os.Signal) error {
	for {
		select {
		case <-hup:
			d.reopen()
		case err := <-d.fatal:
			return err
		case <-ctx.Done():
			return nil
		}
	}
}

// served is one bound device and what belongs to it.
type served struct {
	dev      *roce.Device
	udp      *link.UDP // its socket, for the link counters
	tap      *link.Tap // nil without -pcap
	pcapPath string
	pcap     *os.File
	mads     *gsi.Conn   // QP1 for the CM; nil without -rping or sharing
	cm       *cm.Manager // the CM on mads; the rping responder closes it
	shared   *view       // the address's attached processes; nil when not shared
}

// daemon holds everything run starts, so shutdown can stop it in order.
type daemon struct {
	cfg     *config
	log     *slog.Logger
	logFile *reopenFile // nil when logging to stderr

	devs       []*served
	share      *attachd.Server // the attach socket; nil when not sharing
	responders []responder
	metrics    net.Listener
	http       *http.Server
	debugLn    net.Listener // -debug; nil serves /debug/* on metrics (loopback) or nowhere
	debugHTTP  *http.Server
	health     *health
	stopHealth chan struct{}
	ready      atomic.Bool
	fatal      chan error
	pingpong   ppStats
	rping      rpStats
	events     eventCounts

	wg sync.WaitGroup // server goroutines: HTTP and responders
}

// responder is a built-in service that remote RDMA tools talk to (the pingpong
// responders, rping; perftest later). Serve runs until Close; Close stops accepting
// new sessions, moves the QPs of running sessions to ERR (so their peers see flushes)
// and waits up to the drain deadline for the sessions to finish.
type responder interface {
	// Name is a short label for logs, e.g. "pingpong".
	Name() string
	// Addr is the TCP address clients connect to.
	Addr() net.Addr
	// Serve accepts sessions until Close; it returns nil after Close.
	Serve() error
	// Close stops the responder; sessions still running at deadline are abandoned.
	Close(deadline time.Time)
}

// start opens the log, the devices, the metrics listener and the responders. On error
// everything opened so far is closed again.
func start(cfg *config, stderr io.Writer) (_ *daemon, err error) {
	d := &daemon{cfg: cfg, fatal: make(chan error, 1)}
	defer func() {
		if err != nil {
			d.closeAll()
		}
	}()
	var logw io.Writer = stderr
	if cfg.logFile != "" {
		d.logFile, err = openReopenFile(cfg.logFile, os.O_APPEND)
		if err != nil {
			return nil, fmt.Errorf("-log-file: %w", err)
		}
		logw = d.logFile
	}
	d.log = newLogger(logw, cfg)
	defer func() {
		if err != nil && d.stopHealth != nil {
			close(d.stopHealth)
		}
	}()

	if err := d.startSharing(); err != nil {
		return nil, err
	}
	for _, a := range cfg.binds {
		s, err := d.openDevice(a)
		if err != nil {
			return nil, err
		}
		d.devs = append(d.devs, s)
	}

	agers := make([]shardAger, len(d.devs))
	for i, s := range d.devs {
		agers[i] = s.dev
	}
	d.health, d.stopHealth = newHealth(agers, cfg.health), make(chan struct{})
	go d.health.run(d.stopHealth)

	if cfg.metrics != "" {
		d.metrics, err = net.Listen("tcp", cfg.metrics)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return nil, fmt.Errorf("-metrics %s: TCP port in use (another roced, or a Prometheus exporter, may hold it); pick another with -metrics", cfg.metrics)
			}
			return nil, fmt.Errorf("-metrics %s: %w", cfg.metrics, unwrapOp(err))
		}
		devs := make([]metrics.Device, len(d.devs))
		var cms []metrics.CMSource
		links := make([]metrics.LinkSource, len(d.devs))
		for i, s := range d.devs {
			devs[i] = s.dev
			if s.shared != nil {
				devs[i] = sharedMetricsDevice{s.shared, d.share}
			}
			links[i] = metrics.LinkSource{Addr: s.dev.Addr(), Link: s.udp}
			if s.mads != nil {
				cms = append(cms, metrics.CMSource{Addr: s.dev.Addr(), GSI: s.mads, CM: s.cm})
			}
		}
		// With several addresses each device's series carry its address.
		opt := metrics.Options{PerAddress: len(d.devs) > 1}
		reg := newRegistry(metrics.NewCollector(opt, devs...), metrics.NewCMCollector(opt, cms...), metrics.NewLinkCollector(opt, links...),
			newResponderCollector(&d.pingpong, &d.rping, &d.events), d.health)
		if d.share != nil {
			reg.MustRegister(newShareCollector(d, opt))
		}
		ep := endpoints{reg: reg, ready: &d.ready, health: d.health.check, log: d.log}
		if cfg.debug == "" && debugHere(cfg.metrics) {
			ep.debug = d.debugMux()
		}
		d.http = d.newHTTPServer(newMux(ep))
	}
	if cfg.debug != "" {
		if d.debugLn, err = net.Listen("tcp", cfg.debug); err != nil {
			return nil, fmt.Errorf("-debug %s: %w", cfg.debug, unwrapOp(err))
		}
		d.debugHTTP = d.newHTTPServer(d.debugMux())
	}

	for _, s := range d.devs {
		pp := pingpongConfig{stats: &d.pingpong, mtu: roce.MTU(mtuCode(cfg.mtu)), maxSize: cfg.ppMaxSize, idle: cfg.ppIdle,
			exchange: cfg.ppExchange, maxSessions: cfg.ppMaxSess}
		if cfg.pingpong || cfg.srqPingpong {
			var tools []string
			pp.kinds = nil
			if cfg.pingpong {
				pp.kinds, tools = append(pp.kinds, kindRC), append(tools, "ibv_rc_pingpong")
			}
			if cfg.srqPingpong {
				pp.kinds, tools = append(pp.kinds, kindSRQ), append(tools, "ibv_srq_pingpong")
			}
			name := "pingpong (" + strings.Join(tools, ", ") + ")"
			r, err := newPingpongResponder(name, s.dev, netip.AddrPortFrom(s.dev.Addr(), cfg.pingpongPort), pp, d.log)
			if err != nil {
				return nil, err
			}
			d.responders = append(d.responders, r)
		}
		if cfg.udPingpong {
			pp.kinds = []pingpongKind{kindUD}
			r, err := newPingpongResponder("ud_pingpong (ibv_ud_pingpong)", s.dev, netip.AddrPortFrom(s.dev.Addr(), cfg.udPingPort), pp, d.log)
			if err != nil {
				return nil, err
			}
			d.responders = append(d.responders, r)
		}
		if cfg.rping {
			rc := rpingConfig{stats: &d.rping, maxSessions: cfg.rpingMaxSess, idle: cfg.rpingIdle, accept: cfg.cmPendingTimeout}
			r, err := newRpingResponder(s.dev, s.cm, netip.AddrPortFrom(s.dev.Addr(), cfg.rpingPort), rc, d.log)
			if err != nil {
				return nil, fmt.Errorf("-rping-port %d on %s: %w", cfg.rpingPort, s.dev.Addr(), err)
			}
			d.responders = append(d.responders, r)
		}
	}

	// Everything is bound: start serving.
	d.ready.Store(true)
	if d.http != nil {
		d.goServe("metrics", func() error { return serveHTTP(d.http, d.metrics) })
	}
	if d.debugHTTP != nil {
		d.goServe("debug", func() error { return serveHTTP(d.debugHTTP, d.debugLn) })
	}
	for _, r := range d.responders {
		d.goServe(r.Name(), r.Serve)
	}
	if d.share != nil {
		d.goServe("attach socket", d.share.Serve)
	}
	for _, s := range d.devs {
		d.goServe("device "+s.dev.Addr().String(), func() error { return d.watchEvents(s.dev) })
	}
	return d, nil
}

// watchEvents logs the device's async events until Close ends the stream. Errors
// a program would act on (CQ_ERR, QP_FATAL, ...) are warnings; DEVICE_FATAL (its
// socket is gone) stops the daemon non-zero, so a supervisor restarts it.
func (d *daemon) watchEvents(dev *roce.Device) error {
	for ev := range dev.Events() {
		if int(ev.Type) < len(d.events) {
			d.events[ev.Type].Add(1)
		}
		switch ev.Type {
		case roce.EventDeviceFatal:
			d.log.Error("async event", "addr", dev.Addr(), "event", ev.String())
			return errors.New("DEVICE_FATAL: the RoCEv2 socket is gone")
		case roce.EventPortActive, roce.EventCommEst, roce.EventSQDrained, roce.EventSRQLimitReached,
			roce.EventQPLastWQEReached:
			d.log.Debug("async event", "addr", dev.Addr(), "event", ev.String())
		default:
			d.log.Warn("async event", "addr", dev.Addr(), "event", ev.String())
		}
	}
	return nil
}

// openDevice binds one address. With -pcap it builds the socket and the capture tap
// itself, so SIGHUP can point the tap at a new file.
func (d *daemon) openDevice(a netip.Addr) (*served, error) {
	cfg := d.cfg
	ap := netip.AddrPortFrom(a, cfg.port)
	lcfg := link.Config{MaxSourcePorts: cfg.sourcePorts, NoGSO: !cfg.gso, NoGRO: !cfg.gro, Readers: cfg.readers}
	if cfg.sourcePorts == 0 {
		lcfg.MaxSourcePorts = -1 // link.Config's 0 means its default
	}
	var u *link.UDP
	var sd *attachd.Device
	var err error
	if d.share != nil {
		u, sd, err = d.listenShared(ap, lcfg)
	} else {
		u, err = link.ListenUDP(ap, lcfg)
	}
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("-bind %s: UDP %d is in use — a loaded rdma_rxe module (soft-RoCE) or another roced usually holds it", a, cfg.port)
		}
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil, fmt.Errorf("-bind %s: no interface of this host has that address", a)
		}
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("-bind %s: UDP %d: permission denied", a, cfg.port)
		}
		return nil, fmt.Errorf("-bind %s: UDP %d: %w", a, cfg.port, unwrapOp(err))
	}
	s := &served{udp: u}
	if sd != nil {
		s.shared = &view{s: s, sd: sd}
	}
	var l link.Link = u
	if cfg.pcapFile != "" {
		s.pcapPath = pcapPath(cfg.pcapFile, a, len(cfg.binds))
		s.pcap, err = os.OpenFile(s.pcapPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
		if err != nil {
			u.Close()
			return nil, fmt.Errorf("-pcap: %w", err)
		}
		s.tap, err = link.NewTap(u, s.pcap, link.LinkTypeEthernet)
		if err != nil {
			u.Close()
			s.pcap.Close()
			return nil, fmt.Errorf("-pcap %s: %w", s.pcapPath, err)
		}
		l = s.tap
	}
	if cfg.rping || sd != nil {
		// The CM's MADs go to QP1, which the gsi agent takes off the link before the
		// engine sees it; inside the tap, so captures show the CM exchange too.
		// A shared address's QP1 is every attached process's CM too.
		l, s.mads = gsi.Wrap(l)
	}
	s.dev, err = roce.OpenLink(l, roce.WithMTU(roce.MTU(mtuCode(cfg.mtu))),
		roce.WithRunToCompletion(cfg.runToCompletion), roce.WithCongestionControl(cfg.cc))
	if err != nil {
		l.Close()
		if s.pcap != nil {
			s.pcap.Close()
		}
		return nil, fmt.Errorf("-bind %s: %w", a, err)
	}
	if s.mads != nil {
		var mc cm.MADConn = s.mads
		if sd != nil {
			mc = sd.StartCM(s.mads).Home()
		}
		if s.cm, err = newCM(s.dev, mc, cfg); err != nil {
			s.dev.Close()
			if s.pcap != nil {
				s.pcap.Close()
			}
			return nil, fmt.Errorf("-bind %s: %w", a, err)
		}
	}
	return s, nil
}

// pcapPath is the capture file of address a: the -pcap path itself with one bind
// address, or the path with the address inserted before the extension with several
// (a pcap file holds one stream, and each device has its own tap).
func pcapPath(p string, a netip.Addr, nbinds int) string {
	if nbinds == 1 {
		return p
	}
	ext := filepath.Ext(p)
	return strings.TrimSuffix(p, ext) + "-" + strings.ReplaceAll(a.String(), ":", "_") + ext
}

// mtuCode converts a validated path MTU in bytes to its ibv_mtu code.
func mtuCode(bytes int) uint8 {
	code := uint8(1)
	for b := 256; b < bytes; b <<= 1 {
		code++
	}
	return code
}

// unwrapOp drops the *net.OpError wrapping, whose text repeats the address we print.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}

func (d *daemon) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(d.log.Handler(), slog.LevelWarn),
	}
}

// serveHTTP serves srv on ln until Shutdown.
func serveHTTP(srv *http.Server, ln net.Listener) error {
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (d *daemon) goServe(name string, serve func() error) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := serve(); err != nil {
			select {
			case d.fatal <- fmt.Errorf("%s: %w", name, err):
			default:
			}
		}
	}()
}

// announce prints what the daemon serves, one line per endpoint.
func (d *daemon) announce(w io.Writer) {
	for _, s := range d.devs {
		fmt.Fprintf(w, "roced: serving RoCEv2 on %s UDP %d (GID index %d %s, active MTU %d)\n",
			s.dev.Addr(), s.dev.LocalAddr().Port(), s.dev.GIDIndex(), s.dev.GID(), d.cfg.mtu)
		if cc := s.dev.CongestionControl(); cc.Enabled {
			fmt.Fprintf(w, "roced: congestion control on %s: DCQCN, line rate %d Mb/s\n", s.dev.Addr(), cc.LineRate/1_000_000)
		} else {
			fmt.Fprintf(w, "roced: congestion control on %s: off (no ECT, no CNPs, no pacing, as rxe)\n", s.dev.Addr())
		}
		if s.pcap != nil {
			fmt.Fprintf(w, "roced: capturing %s packets to %s\n", s.dev.Addr(), s.pcapPath)
		}
	}
	for _, r := range d.responders {
		network := "TCP"
		if r.Addr().Network() != "tcp" {
			network = r.Addr().Network() + " port"
		}
		fmt.Fprintf(w, "roced: %s responder on %s %s\n", r.Name(), network, r.Addr())
	}
	if d.metrics != nil {
		also := "/healthz, /readyz"
		if d.debugLn == nil && debugHere(d.cfg.metrics) {
			also += ", /debug/qps"
		}
		fmt.Fprintf(w, "roced: metrics on http://%s/metrics (also %s)\n", d.metrics.Addr(), also)
	}
	if d.debugLn != nil {
		fmt.Fprintf(w, "roced: debug endpoints on http://%s/debug/qps\n", d.debugLn.Addr())
	}
	d.log.Info("started", "binds", d.cfg.binds, "port", d.cfg.port, "mtu", d.cfg.mtu, "metrics", d.cfg.metrics)
}

// status is the one-line STATUS= systemd shows for the running daemon.
func (d *daemon) status() string {
	addrs := make([]string, len(d.devs))
	for i, s := range d.devs {
		addrs[i] = s.dev.Addr().String()
	}
	return fmt.Sprintf("serving RoCEv2 on %s with %d responders", strings.Join(addrs, ", "), len(d.responders))
}

// reopen handles SIGHUP: the log file and the pcap files start afresh at their paths.
func (d *daemon) reopen() {
	if d.logFile != nil {
		if err := d.logFile.Reopen(); err != nil {
			d.log.Error("SIGHUP: reopening the log file failed; still writing the old one", "err", err)
		}
	}
	for _, s := range d.devs {
		if s.tap == nil {
			continue
		}
		f, err := os.OpenFile(s.pcapPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
		if err != nil {
			d.log.Error("SIGHUP: reopening the pcap file failed; still writing the old one", "path", s.pcapPath, "err", err)
			continue
		}
		if err := s.tap.Reopen(f); err != nil {
			f.Close()
			d.log.Error("SIGHUP: restarting the capture failed", "path", s.pcapPath, "err", err)
			continue
		}
		old := s.pcap
		s.pcap = f
		old.Close() // the tap switched under its lock; nothing writes old any more
	}
	d.log.Info("SIGHUP: reopened log and capture files")
}

// shutdown stops in dependency order: health goes red, responders stop accepting and
// drain (their QPs go to ERR so peers see flushes), devices close, HTTP stops last so
// scrapes work while draining.
func (d *daemon) shutdown() {
	d.ready.Store(false)
	deadline := time.Now().Add(d.cfg.drainTimeout)
	var wg sync.WaitGroup
	for _, r := range d.responders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.Close(deadline)
		}()
	}
	wg.Wait()
	d.closeDevices()
	for _, srv := range []*http.Server{d.http, d.debugHTTP} {
		if srv == nil {
			continue
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(time.Second))
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
		cancel()
	}
	close(d.stopHealth)
	d.wg.Wait()
	d.closeFiles()
}

// closeAll releases whatever start managed to open, after a start-up failure.
func (d *daemon) closeAll() {
	for _, r := range d.responders {
		r.Close(time.Now())
	}
	d.closeDevices()
	if d.metrics != nil {
		d.metrics.Close()
	}
	if d.debugLn != nil {
		d.debugLn.Close()
	}
	d.closeFiles()
}

func (d *daemon) closeDevices() {
	if d.share != nil {
		// Attached processes see DEVICE_FATAL: roced restarts without them.
		d.share.Close()
	}
	for _, s := range d.devs {
		if !d.cfg.rping && s.cm != nil {
			s.cm.Close() // the home CM of a shared address; the rping responder closes its own
		}
		if err := s.dev.Close(); err != nil && d.log != nil {
			d.log.Warn("closing device", "addr", s.dev.Addr(), "err", err)
		}
	}
}

func (d *daemon) closeFiles() {
	for _, s := range d.devs {
		if s.pcap != nil {
			s.pcap.Close()
		}
	}
	if d.logFile != nil {
		d.logFile.Close()
	}
}
