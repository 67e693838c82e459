// Package verbsprobe is the Go side of interop/verbs-probe, the C program the interop lab
// builds against each guest generation's libibverbs: the line exchange it speaks over TCP
// (its source describes it), and goroce's half of each of its tests written against the
// roce API, so that the suite can pair the C program in an rxe guest with goroce in either
// role. The server owns the memory (the responder); the client issues the operations.
package verbsprobe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
)

// MaxLine is the longest line either side sends, without its '\n'.
const MaxLine = 511

// ErrLine is wrapped by every error about a malformed or unexpected line.
var ErrLine = errors.New("verbsprobe: bad line")

// Field is one key=value of a line.
type Field struct{ Key, Value string }

// Msg is one line: a verb and its fields, in order.
type Msg struct {
	Verb   string
	Fields []Field
}

// ParseLine parses a line without its '\n': a verb, then key=value fields separated by
// single spaces, keys and values non-empty and free of spaces and '='.
func ParseLine(line string) (Msg, error) {
	if len(line) > MaxLine {
		return Msg{}, fmt.Errorf("%w: %d bytes", ErrLine, len(line))
	}
	parts := strings.Split(line, " ")
	m := Msg{Verb: parts[0]}
	if !token(m.Verb) {
		return Msg{}, fmt.Errorf("%w: verb %q", ErrLine, m.Verb)
	}
	for _, f := range parts[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok || !token(k) || !token(v) {
			return Msg{}, fmt.Errorf("%w: field %q", ErrLine, f)
		}
		m.Fields = append(m.Fields, Field{k, v})
	}
	return m, nil
}

// token reports whether s is a non-empty run of printable characters other than space
// and '='.
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' || s[i] == '=' {
			return false
		}
	}
	return true
}

// String formats m as a line, without '\n'.
func (m Msg) String() string {
	var b strings.Builder
	b.WriteString(m.Verb)
	for _, f := range m.Fields {
		b.WriteString(" " + f.Key + "=" + f.Value)
	}
	return b.String()
}

// Get returns the value of key.
func (m Msg) Get(key string) (string, error) {
	for _, f := range m.Fields {
		if f.Key == key {
			return f.Value, nil
		}
	}
	return "", fmt.Errorf("%w: %q has no field %s", ErrLine, m.Verb, key)
}

// Uint returns the value of key as a number: 0x-prefixed hex or decimal, as strtoull
// with base 0 reads it.
func (m Msg) Uint(key string) (uint64, error) {
	v, err := m.Get(key)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(v, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q: %s=%s is not a number", ErrLine, m.Verb, key, v)
	}
	return n, nil
}

// Conn is one side of the exchange.
type Conn struct {
	c net.Conn
	r *bufio.Reader
}

// NewConn wraps an established TCP connection.
func NewConn(c net.Conn) *Conn { return &Conn{c: c, r: bufio.NewReaderSize(c, MaxLine+1)} }

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Send writes one line. kv alternates keys and values; a value is a string, an int
// (decimal), a uint32 or uint64 (0x hex) or a bool (1 or 0).
func (c *Conn) Send(ctx context.Context, verb string, kv ...any) error {
	m := Msg{Verb: verb}
	if len(kv)%2 != 0 {
		return fmt.Errorf("verbsprobe: Send %s: odd key/value list: %w", verb, syscall.EINVAL)
	}
	for i := 0; i < len(kv); i += 2 {
		var v string
		switch x := kv[i+1].(type) {
		case string:
			v = x
		case int:
			v = strconv.Itoa(x)
		case uint32:
			v = fmt.Sprintf("0x%x", x)
		case uint64:
			v = fmt.Sprintf("0x%x", x)
		case bool:
			v = "0"
			if x {
				v = "1"
			}
		default:
			return fmt.Errorf("verbsprobe: Send %s: value of type %T: %w", verb, x, syscall.EINVAL)
		}
		m.Fields = append(m.Fields, Field{kv[i].(string), v})
	}
	line := m.String()
	if _, err := ParseLine(line); err != nil {
		return fmt.Errorf("verbsprobe: Send: %w", err)
	}
	deadline(ctx, c.c)
	_, err := c.c.Write([]byte(line + "\n"))
	return err
}

// Recv reads one line and requires its verb. A peer's "error" line is returned as an
// error naming what the peer said.
func (c *Conn) Recv(ctx context.Context, verb string) (Msg, error) {
	deadline(ctx, c.c)
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return Msg{}, fmt.Errorf("%w: longer than %d bytes while waiting for %q", ErrLine, MaxLine, verb)
		}
		return Msg{}, fmt.Errorf("verbsprobe: waiting for %q: %w", verb, err)
	}
	m, err := ParseLine(strings.TrimSuffix(string(line), "\n"))
	if err != nil {
		return Msg{}, err
	}
	switch {
	case m.Verb == "error":
		msg, _ := m.Get("msg")
		return m, fmt.Errorf("verbsprobe: peer: %s", msg)
	case m.Verb != verb:
		return m, fmt.Errorf("%w: got %q, want %q", ErrLine, m.Verb, verb)
	}
	return m, nil
}

// deadline bounds the connection's next I/O by ctx's deadline, if it has one.
func deadline(ctx context.Context, c net.Conn) {
	d, _ := ctx.Deadline()
	c.SetDeadline(d)
}
