package attach

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxFiles is the most descriptors one message carries (a Grant's one
// socket); a peer that sends more has them closed unseen.
const maxFiles = 1

// Conn carries messages over a SOCK_SEQPACKET Unix socket: one message per
// packet, so the kernel keeps the boundaries, with descriptors beside a
// message as SCM_RIGHTS. Send may be called from several goroutines, Recv
// from one.
type Conn struct {
	c    *net.UnixConn
	wmu  sync.Mutex
	wbuf []byte
	rbuf []byte
	oob  []byte
}

// NewConn wraps c, a "unixpacket" connection.
func NewConn(c *net.UnixConn) *Conn {
	return &Conn{c: c, rbuf: make([]byte, MaxMessage+1), oob: make([]byte, unix.CmsgSpace(4*maxFiles))}
}

// Send writes m with files (descriptors the receiver gets duplicates of).
func (c *Conn) Send(m *Msg, files ...*os.File) error {
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			rc, err := f.SyscallConn()
			if err != nil {
				return err
			}
			// The descriptor number only; Fd would make the shared socket
			// blocking for every process that holds it.
			if err := rc.Control(func(fd uintptr) { fds[i] = int(fd) }); err != nil {
				return err
			}
		}
		oob = unix.UnixRights(fds...)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b, err := m.Append(c.wbuf[:0])
	if err != nil {
		return err
	}
	c.wbuf = b
	_, _, err = c.c.WriteMsgUnix(b, oob, nil)
	return err
}

// Recv reads one message and the descriptors that came with it (closed by
// the caller). A malformed message is an error wrapping EPROTO, EMSGSIZE or
// EPROTONOSUPPORT, and the connection stays usable; io.EOF means the peer
// closed.
func (c *Conn) Recv() (Msg, []*os.File, error) {
	n, oobn, flags, _, err := c.c.ReadMsgUnix(c.rbuf, c.oob)
	if errors.Is(err, io.EOF) {
		return Msg{}, nil, errEOF
	}
	if err != nil {
		return Msg{}, nil, err
	}
	files := parseFiles(c.oob[:oobn])
	if n == 0 && oobn == 0 {
		return Msg{}, nil, errEOF
	}
	switch {
	case flags&unix.MSG_CTRUNC != 0:
		closeFiles(files)
		return Msg{}, nil, fmt.Errorf("attach: more descriptors than %d beside a message: %w", maxFiles, syscall.EPROTO)
	case flags&unix.MSG_TRUNC != 0 || n > MaxMessage:
		closeFiles(files)
		return Msg{}, nil, fmt.Errorf("attach: message over %d bytes: %w", MaxMessage, syscall.EMSGSIZE)
	}
	m, err := Decode(c.rbuf[:n])
	if err != nil {
		closeFiles(files)
		return Msg{}, nil, err
	}
	return m, files, nil
}

// errEOF is what Recv returns when the peer closed: a zero-length packet.
var errEOF = fmt.Errorf("attach: peer closed: %w", net.ErrClosed)

// IsClosed reports whether err from Recv or Send means the connection is
// gone for good (peer closed, or closed here).
func IsClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ENOTCONN)
}

// Peer returns the credentials of the process at the other end, as the
// kernel recorded them at connect (SO_PEERCRED).
func (c *Conn) Peer() (*unix.Ucred, error) {
	rc, err := c.c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}

// Close closes the socket; a Recv in progress returns.
func (c *Conn) Close() error { return c.c.Close() }

func parseFiles(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, cm := range msgs {
		fds, err := unix.ParseUnixRights(&cm)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			// A plain File, not a pollable one (os.NewFile polls a non-blocking
			// descriptor): the block's reader, link.FromFile, polls its own
			// duplicate, and a second registration in epoll would take a second
			// event for every datagram. O_NONBLOCK belongs to the open file that
			// roced shares; roced reads it with MSG_DONTWAIT, and FromFile turns
			// it back on.
			_ = unix.SetNonblock(fd, false)
			files = append(files, os.NewFile(uintptr(fd), "attach"))
		}
	}
	return files
}

func closeFiles(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
