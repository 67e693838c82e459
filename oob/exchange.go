package oob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// ClientExchange runs the client side of a pingpong exchange on conn: it writes n
// records (local, then zero placeholders), reads the server's n records, and writes
// "done". n is 1 for ibv_rc/uc/ud_pingpong and SRQRecords for ibv_srq_pingpong. It
// returns the server's records, placeholders included. ctx bounds the whole exchange.
func ClientExchange(ctx context.Context, conn net.Conn, local []Dest, n int) ([]Dest, error) {
	if n < 1 {
		return nil, fmt.Errorf("oob: %d records: %w", n, syscall.EINVAL)
	}
	out, err := AppendRecords(make([]byte, 0, n*RecordLen), local, n)
	if err != nil {
		return nil, err
	}
	defer bindContext(ctx, conn)()
	if _, err := conn.Write(out); err != nil {
		return nil, wrapIO(ctx, "send local address", err)
	}
	in := make([]byte, n*RecordLen)
	if _, err := io.ReadFull(conn, in); err != nil {
		return nil, wrapIO(ctx, "read remote address", err)
	}
	remote, err := ParseRecords(in)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(doneMsg[:]); err != nil {
		return nil, wrapIO(ctx, "send \"done\"", err)
	}
	return remote, nil
}

// ServerExchange runs the server side of a pingpong exchange on an accepted conn: it
// reads the client's n records, calls connect with them, writes the records connect
// returns (padded to n), then waits for "done". connect is where the caller moves its
// QPs to RTR and RTS: the stock client starts sending as soon as it has the answer, so
// the server must be ready before it answers. An error from connect ends the exchange
// without an answer, as the stock server does. It returns the client's records.
func ServerExchange(ctx context.Context, conn net.Conn, n int, connect func(remote []Dest) ([]Dest, error)) ([]Dest, error) {
	if n < 1 {
		return nil, fmt.Errorf("oob: %d records: %w", n, syscall.EINVAL)
	}
	defer bindContext(ctx, conn)()
	in := make([]byte, n*RecordLen)
	if _, err := io.ReadFull(conn, in); err != nil {
		return nil, wrapIO(ctx, "read remote address", err)
	}
	remote, err := ParseRecords(in)
	if err != nil {
		return nil, err
	}
	local, err := connect(remote)
	if err != nil {
		return remote, err
	}
	out, err := AppendRecords(make([]byte, 0, n*RecordLen), local, n)
	if err != nil {
		return remote, err
	}
	if _, err := conn.Write(out); err != nil {
		return remote, wrapIO(ctx, "send local address", err)
	}
	var done [len(doneMsg)]byte
	if _, err := io.ReadFull(conn, done[:]); err != nil {
		return remote, wrapIO(ctx, "read \"done\"", err)
	}
	if done != doneMsg {
		return remote, fmt.Errorf("oob: expected \"done\", got %q: %w", printable(done[:]), ErrRecord)
	}
	return remote, nil
}

// bindContext makes ctx's deadline and cancellation apply to conn's I/O and returns the
// function that undoes it.
func bindContext(ctx context.Context, conn net.Conn) func() {
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		conn.SetDeadline(time.Time{})
	}
}

// wrapIO names the step that failed; a short stream is EPROTO, a cancelled ctx its
// error.
func wrapIO(ctx context.Context, step string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("oob: %s: %w", step, ctx.Err())
	}
	// The conn's deadline is ctx's, and it may fire a moment before ctx reports it.
	if d, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(d) {
		return fmt.Errorf("oob: %s: %w", step, context.DeadlineExceeded)
	}
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("oob: %s: connection closed by peer: %w", step, syscall.EPROTO)
	}
	return fmt.Errorf("oob: %s: %w", step, err)
}
