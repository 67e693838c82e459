package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/cm/rping"
	"github.com/goroce/goroce/internal/tool/cli"
	"github.com/goroce/goroce/internal/tool/version"
	"github.com/goroce/goroce/roce"
)

func parseAddr(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.LookupIP(s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo failed (%v) - invalid hostname or IP address", err)
	}
	a, _ := netip.AddrFromSlice(ips[0])
	return a.Unmap(), nil
}

// run is main with injectable I/O; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if version.Requested(args) {
		version.Print(stdout, "rping-go")
		return 0
	}
	o, code, ok := parseOpts(args, stdout, stderr)
	if !ok {
		return code
	}
	var mu sync.Mutex // serialises output of persistent-server goroutines
	out := &lockedWriter{w: stdout, mu: &mu}
	errw := &lockedWriter{w: stderr, mu: &mu}
	ro := rping.Options{Size: o.size, Count: o.count, Verbose: o.verbose, Validate: o.validate, Out: out, Err: errw}
	if o.debug {
		ro.Debug = func(format string, args ...any) { fmt.Fprintf(out, format, args...) }
	}
	if o.server == 1 {
		if err := runServer(ctx, &o, ro); err != nil {
			fmt.Fprintf(errw, "rping server failed: %v\n", err)
			return 1
		}
		return 0
	}
	if err := runClient(ctx, &o, ro); err != nil {
		return clientFailed(errw, err)
	}
	return 0
}

// clientFailed reports a failed client run and returns the exit status. A -V
// mismatch is rping_test_client's -1, which stock rping prints and returns from
// main, so the shell sees 255; anything else is 1.
func clientFailed(w io.Writer, err error) int {
	if errors.Is(err, rping.ErrMismatch) {
		fmt.Fprintf(w, "rping client failed: -1\n")
		return 255
	}
	fmt.Fprintf(w, "rping client failed: %v\n", err)
	return 1
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// endpoint is a device with its CM; close releases both.
type endpoint struct {
	dev   *roce.Device
	mgr   *cm.Manager
	trace chan cm.ConnEvent // -d: the CM event stream; nil otherwise
	stats io.Writer         // --stats: where the counters go at close; nil otherwise
	wg    sync.WaitGroup
}

// closeHook, if set (tests), sees each device just before it closes.
var closeHook func(*roce.Device)

func (e *endpoint) close() {
	if closeHook != nil {
		closeHook(e.dev)
	}
	e.mgr.Close()
	if e.trace != nil {
		close(e.trace) // the Manager publishes nothing after Close
		e.wg.Wait()
	}
	if e.stats != nil {
		fmt.Fprintln(e.stats, cli.Stats(e.dev))
	}
	e.dev.Close()
}

func openDevice(addr netip.Addr, o *options, ro rping.Options) (*endpoint, error) {
	dbg := ro.Debug
	dev, mads, err := openGSI(addr, uint16(o.udpPort))
	if err != nil {
		return nil, err
	}
	pa, err := dev.QueryPort(1)
	if err != nil {
		dev.Close()
		return nil, err
	}
	e := &endpoint{dev: dev}
	if o.stats {
		e.stats = ro.Err
	}
	cfg := cm.ManagerConfig{CAGUID: gsi.CAGUID(dev), PathMTU: uint8(pa.ActiveMTU), TrafficClass: uint8(o.tos)}
	if dbg != nil {
		e.trace = make(chan cm.ConnEvent, 64)
		cfg.Events = e.trace
		role := "parent"
		if o.server == 1 {
			role = "child"
		}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			for ev := range e.trace {
				dbg("cma_event type %s cma_id %#x (%s)\n", ev.Type, ev.ID, role)
			}
		}()
	}
	e.mgr = cm.NewManager(mads, cfg)
	return e, nil
}

func runClient(ctx context.Context, o *options, ro rping.Options) error {
	if o.addr == "" {
		usage(ro.Out)
		return errors.New("-a is required")
	}
	dst, err := parseAddr(o.addr)
	if err != nil {
		return err
	}
	var src netip.Addr
	if o.src != "" {
		if src, err = parseAddr(o.src); err != nil {
			return err
		}
	} else if src, err = cli.RouteSource(dst, o.udpPort); err != nil {
		return fmt.Errorf("rdma_resolve_addr: %w", err)
	}
	e, err := openDevice(src, o, ro)
	if err != nil {
		return cli.OpenError(err, src, o.udpPort, "-I", "--udp-port")
	}
	defer e.close()
	return rping.Client(ctx, e.dev, e.mgr, netip.AddrPortFrom(src, 0), netip.AddrPortFrom(dst, uint16(o.port)), ro)
}

func runServer(ctx context.Context, o *options, ro rping.Options) error {
	if o.addr == "" {
		usage(ro.Out)
		return errors.New("-a is required: a goroce device binds one address")
	}
	addr, err := parseAddr(o.addr)
	if err != nil {
		return err
	}
	e, err := openDevice(addr, o, ro)
	if err != nil {
		return cli.OpenError(err, addr, o.udpPort, "-a", "--udp-port")
	}
	defer e.close()
	l, err := e.mgr.Listen(netip.AddrPortFrom(addr, uint16(o.port)), 3) // rping's backlog
	if err != nil {
		return fmt.Errorf("rdma_listen: %w", err)
	}
	defer l.Close()
	if ro.Debug != nil {
		ro.Debug("rdma_bind_addr successful\n")
		ro.Debug("rdma_listen\n")
	}
	if o.persistent {
		return rping.Serve(ctx, e.dev, l, ro)
	}
	r, err := l.GetRequest(ctx)
	if err != nil {
		return err
	}
	return rping.ServeConn(ctx, e.dev, r, ro)
}
