package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// reopenFile is an append-only file that Reopen swaps for a fresh open of the same
// path, so logrotate can move the old file away and send SIGHUP (the classic
// "copytruncate"-free rotation). Writes and Reopen may run concurrently.
type reopenFile struct {
	path string
	mode int // extra os.OpenFile flags: os.O_APPEND or os.O_TRUNC

	// mu guards: f
	mu sync.Mutex
	f  *os.File
}

func openReopenFile(path string, mode int) (*reopenFile, error) {
	r := &reopenFile{path: path, mode: mode}
	if err := r.Reopen(); err != nil {
		return nil, err
	}
	return r, nil
}

// Write implements io.Writer.
func (r *reopenFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return 0, os.ErrClosed
	}
	return r.f.Write(p)
}

// Reopen opens the path again and closes the previous file. On failure the previous
// file stays in use.
func (r *reopenFile) Reopen() error {
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|r.mode, 0o640)
	if err != nil {
		return fmt.Errorf("open %s: %w", r.path, err)
	}
	r.mu.Lock()
	old := r.f
	r.f = f
	r.mu.Unlock()
	if old != nil {
		return old.Close()
	}
	return nil
}

// Close closes the file; later writes fail with os.ErrClosed.
func (r *reopenFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

// newLogger builds the daemon's slog.Logger over w.
func newLogger(w io.Writer, c *config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: c.logLevel}
	if c.logJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// logEveryPeriod is the shortest gap between two lines of one logEvery.
const logEveryPeriod = 10 * time.Second

// logEvery rate-limits one repeated warning (refusals under a flood): at most
// one line per logEveryPeriod, saying how many times it happened since the
// last line.
type logEvery struct {
	// mu guards: last, n.
	mu   sync.Mutex
	last time.Time
	n    int
}

func (l *logEvery) log(log *slog.Logger, msg string, args ...any) {
	l.mu.Lock()
	l.n++
	if !l.last.IsZero() && time.Since(l.last) < logEveryPeriod {
		l.mu.Unlock()
		return
	}
	n := l.n
	l.n, l.last = 0, time.Now()
	l.mu.Unlock()
	log.Warn(msg, append(args, "times", n)...)
}
