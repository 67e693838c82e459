// Package cli is what goroce's counterparts of the stock rdma tools
// (cmd/roce-pingpong, cmd/roce-perftest, cmd/rping-go) share, so that they
// behave alike: a getopt_long command line (Options), the device and run
// options, what -d means and which address a device binds without it, the
// message when another process holds that address, the out-of-band TCP
// connection, teardown in reverse order of creation, and the counter line
// that --stats prints and the interop tests parse.
package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/tool/ccflags"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/link/impair"
	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

// Flags are the options every tool has: the stock tools' -d, -i and -p, and
// goroce's own long options.
type Flags struct {
	Device   string        // -d, --ib-dev: an IP address or an interface ("" with none given)
	IBPort   int           // -i, --ib-port: the device has port 1 only
	TCPPort  int           // -p, --port: the out-of-band exchange
	RoCEPort int           // --roce-port: both sides must agree
	Timeout  time.Duration // --timeout: 0 is never
	Linger   time.Duration // --linger: see Hold
	Stats    bool          // --stats: print Stats to stderr at exit
	Loss     float64       // --loss: drop this share of the datagrams the device sends (Open)
	Seed     int64         // --seed: of --loss; 0 is from the clock
	CC       dcqcn.Config  // --cc, --cc-param, --cc-line-rate, --cc-pacing-burst (set by Check)
	cc       ccflags.Flags

	// Addr is the address the device binds, once resolved: from -d by Check,
	// or later from the TCP connection (see Resolve).
	Addr netip.Addr
}

// Register adds -d/--ib-dev, -i/--ib-port, -p/--port, --roce-port,
// --timeout, --linger, --stats, --loss, --seed and the congestion control
// options (internal/tool/ccflags) to o.
func (f *Flags) Register(o *Options) {
	f.IBPort, f.TCPPort, f.RoCEPort, f.Linger = 1, oob.DefaultPort, 4791, 500*time.Millisecond
	o.FlagLong(&f.Device, "ib-dev", 'd', "local IP address or network interface the device binds (default: the address the TCP connection uses)", "ADDR|IFACE")
	o.FlagLong(&f.IBPort, "ib-port", 'i', "port of the device (only 1)", "PORT")
	o.FlagLong(&f.TCPPort, "port", 'p', "TCP port of the out-of-band exchange", "PORT")
	o.FlagLong(&f.RoCEPort, "roce-port", 0, "UDP port of RoCEv2 (both sides must agree)", "PORT")
	o.FlagLong(&f.Timeout, "timeout", 0, "fail after this long (0: never)", "DURATION")
	o.FlagLong(&f.Linger, "linger", 0, "keep answering retransmissions this long after the last completion", "DURATION")
	o.FlagLong(&f.Stats, "stats", 0, "print the device's counters to stderr at exit")
	o.FlagLong(&f.Loss, "loss", 0, "drop this share of the datagrams we send (0..1)", "P")
	o.FlagLong(&f.Seed, "seed", 0, "seed of --loss (0: from the clock)", "SEED")
	f.cc.RegisterGetopt(o.Set)
}

// Check validates the options after Parse and resolves -d into Addr, with
// peer (the server the tool connects to; empty to serve) to choose among an
// interface's addresses.
func (f *Flags) Check(peer string) error {
	switch {
	case f.IBPort != 1:
		return fmt.Errorf("-i %d: a goroce device has port 1 only", f.IBPort)
	case f.TCPPort < 1 || f.TCPPort > 65535:
		return fmt.Errorf("-p %d: not a TCP port", f.TCPPort)
	case f.RoCEPort < 1 || f.RoCEPort > 65535:
		return fmt.Errorf("--roce-port %d: not a UDP port", f.RoCEPort)
	case f.Timeout < 0 || f.Linger < 0:
		return fmt.Errorf("--timeout and --linger cannot be negative")
	case f.Loss < 0 || f.Loss >= 1:
		return fmt.Errorf("--loss %v: must be in [0, 1)", f.Loss)
	}
	var err error
	if f.CC, err = f.cc.Config(); err != nil {
		return err
	}
	if f.Device == "" {
		return nil
	}
	p, _ := netip.ParseAddr(peer)
	f.Addr, err = LocalAddr("-d", f.Device, p)
	return err
}

// Resolve sets Addr, when -d did not, to the local address of the TCP
// connection conn: the address the peer reached this side at (server) or the
// one the route to the server chose (client), as rdma_cm binds.
func (f *Flags) Resolve(conn net.Conn) {
	if f.Addr.IsValid() {
		return
	}
	if ap, err := netip.ParseAddrPort(conn.LocalAddr().String()); err == nil {
		f.Addr = ap.Addr().Unmap()
	}
}

// Operands splits the operands of a tool whose synopsis is "WHAT [SERVER]":
// what names the test or mode, and server is empty to serve.
func Operands(ops []string, what string) (first, server string, err error) {
	switch len(ops) {
	case 0:
		return "", "", fmt.Errorf("missing %s", what)
	case 1:
		return ops[0], "", nil
	case 2:
		return ops[0], ops[1], nil
	}
	return "", "", fmt.Errorf("too many arguments: %q (one %s and at most one server)", ops, what)
}

// Context is the context of one run: cancelled by SIGINT or SIGTERM, and
// after Timeout when it is set.
func (f *Flags) Context() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if f.Timeout <= 0 {
		return ctx, stop
	}
	tctx, cancel := context.WithTimeout(ctx, f.Timeout)
	return tctx, func() { cancel(); stop() }
}

// Hold keeps the caller's QPs alive for Linger after its last completion, or
// until ctx ends: the peer may have lost our last ACK, and a retransmission
// that finds the QP gone leaves it retrying until it gives up.
func (f *Flags) Hold(ctx context.Context) {
	t := time.NewTimer(f.Linger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Connect makes the out-of-band TCP connection as the stock tools do: to
// server on TCPPort, or, with no server, from the first client that connects
// to TCPPort.
func (f *Flags) Connect(ctx context.Context, server string) (net.Conn, error) {
	port := strconv.Itoa(f.TCPPort)
	if server != "" {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(server, port))
		if err != nil {
			return nil, fmt.Errorf("couldn't connect to %s:%d: %w", server, f.TCPPort, err)
		}
		return conn, nil
	}
	// The exchange listens on every address, as the stock tools. When another
	// program holds the port on some address (roced's pingpong responder on
	// 127.0.0.1, say), it listens on -d's address only: servers on addresses of
	// their own share the port, one process per address.
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", ":"+port)
	if errors.Is(err, syscall.EADDRINUSE) && f.Addr.IsValid() {
		ln, err = lc.Listen(ctx, "tcp", net.JoinHostPort(f.Addr.String(), port))
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("couldn't listen to port %d: another program listens on it (roced's pingpong responder, or another server): give this one -p PORT, or -d with an address of its own", f.TCPPort)
	}
	if err != nil {
		return nil, fmt.Errorf("couldn't listen to port %d: %w", f.TCPPort, err)
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	conn, err := ln.Accept()
	stop()
	ln.Close()
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no client: %w", ctx.Err())
		}
		return nil, fmt.Errorf("accept() failed: %w", err)
	}
	return conn, nil
}

// Closers tears a run down in reverse order of creation, as the stock tools'
// cleanup does (QPs before CQs before MRs before PDs before the device).
type Closers struct {
	fs []func() error
}

// Add registers f to run at Close, before everything added earlier.
func (c *Closers) Add(f func() error) { c.fs = append(c.fs, f) }

// Close runs every registered function, newest first, and joins their errors.
func (c *Closers) Close() error {
	var errs []error
	for i := len(c.fs) - 1; i >= 0; i-- {
		errs = append(errs, c.fs[i]())
	}
	c.fs = nil
	return errors.Join(errs...)
}

// Stats is the one-line summary of dev's counters that -stats prints.
func Stats(dev *roce.Device) string {
	st := dev.Stats()
	var sent, rcvd, naksSent, naksRcvd uint64
	for i := range st.SentPackets {
		sent += st.SentPackets[i]
		rcvd += st.RcvdPackets[i]
	}
	for i := range st.NAKsSent {
		naksSent += st.NAKsSent[i]
		naksRcvd += st.NAKsRcvd[i]
	}
	return fmt.Sprintf("stats: sent_pkts=%d rcvd_pkts=%d icrc_err=%d malformed=%d unknown_qp=%d "+
		"out_of_seq=%d dup_req=%d naks_sent=%d naks_rcvd=%d retransmits=%d timeouts=%d "+
		"retry_exceeded=%d rnr_retry_exceeded=%d rx_queue_drops=%d tx_errors=%d cq_overruns=%d "+
		"bad_pkey=%d bad_qkey=%d bad_source=%d ecn_marked=%d cnps_sent=%d cnps_rcvd=%d cnps_ignored=%d rate_cuts=%d trailing_acks=%d",
		sent, rcvd, st.ICRCErrors, st.Malformed, st.UnknownQP, st.OutOfSequence, st.DuplicateRequests,
		naksSent, naksRcvd, st.Retransmits, st.Timeouts, st.RetryExceeded, st.RNRRetryExceeded,
		st.RxQueueDrops, st.TxErrors, st.CQOverruns, st.BadPKey, st.BadQKey, st.BadSource,
		st.ECNMarked, st.CNPsSent, st.CNPsRcvd, st.CNPsIgnored, st.RateCuts, st.TxTrailingACKs)
}

// Open opens the device on Addr and --roce-port with opts. With --loss it
// sends through a lossy link (link/impair) that drops that share
// of the datagrams, for the loss tests.
func (f *Flags) Open(opts ...roce.Option) (*roce.Device, error) {
	opts = append([]roce.Option{roce.WithPort(uint16(f.RoCEPort)), roce.WithCongestionControl(f.CC)}, opts...)
	if f.Loss == 0 {
		return roce.Open(f.Addr, opts...)
	}
	u, err := link.ListenUDP(netip.AddrPortFrom(f.Addr, uint16(f.RoCEPort)), link.Config{})
	if err != nil {
		return nil, err
	}
	seed := f.Seed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	d, err := roce.OpenLink(impair.NewLossy(u, impair.LossConfig{Seed: seed, Drop: f.Loss}), opts...)
	if err != nil {
		u.Close()
	}
	return d, err
}
