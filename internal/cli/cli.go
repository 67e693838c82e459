// Package cli is what goroce's counterparts of the stock rdma tools
// (cmd/roce-pingpong, cmd/roce-perftest) share, so that they behave alike: the
// device and run flags, the out-of-band TCP connection, teardown in reverse
// order of creation, and the counter line that -stats prints and the interop
// tests parse.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

// Flags are the flags every tool has.
type Flags struct {
	Addr     netip.Addr    // -d: the local address the device binds (the stock tools' -d rxe0)
	TCPPort  int           // -p: the out-of-band exchange
	RoCEPort int           // -roce-port: both sides must agree
	Timeout  time.Duration // -timeout: 0 is never
	Linger   time.Duration // -linger: see Hold
	Stats    bool          // -stats: print Stats to stderr at exit

	addr string
}

// Register adds -d, -p, -roce-port, -timeout, -linger and -stats to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "d", "", "local IP `address` the device binds (required)")
	fs.IntVar(&f.TCPPort, "p", oob.DefaultPort, "TCP `port` of the out-of-band exchange")
	fs.IntVar(&f.RoCEPort, "roce-port", 4791, "UDP port of RoCEv2 (both sides must agree)")
	fs.DurationVar(&f.Timeout, "timeout", 0, "fail after this long (0: never)")
	fs.DurationVar(&f.Linger, "linger", 500*time.Millisecond, "keep answering retransmissions this long after the last completion")
	fs.BoolVar(&f.Stats, "stats", false, "print the device's counters to stderr at exit")
}

// Check validates the flags after fs.Parse and sets Addr.
func (f *Flags) Check() error {
	var err error
	if f.Addr, err = netip.ParseAddr(f.addr); err != nil {
		return fmt.Errorf("-d: need the local IP address the device binds: %v", err)
	}
	switch {
	case f.TCPPort < 1 || f.TCPPort > 65535:
		return fmt.Errorf("-p %d: not a TCP port", f.TCPPort)
	case f.RoCEPort < 1 || f.RoCEPort > 65535:
		return fmt.Errorf("-roce-port %d: not a UDP port", f.RoCEPort)
	}
	return nil
}

// Server returns the optional SERVER argument left after fs.Parse: empty to
// serve, else the host to connect to.
func Server(fs *flag.FlagSet) (string, error) {
	switch fs.NArg() {
	case 0:
		return "", nil
	case 1:
		return fs.Arg(0), nil
	}
	return "", fmt.Errorf("too many arguments: %q", fs.Args())
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
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", ":"+port)
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
		"bad_pkey=%d bad_qkey=%d bad_source=%d",
		sent, rcvd, st.ICRCErrors, st.Malformed, st.UnknownQP, st.OutOfSequence, st.DuplicateRequests,
		naksSent, naksRcvd, st.Retransmits, st.Timeouts, st.RetryExceeded, st.RNRRetryExceeded,
		st.RxQueueDrops, st.TxErrors, st.CQOverruns, st.BadPKey, st.BadQKey, st.BadSource)
}
