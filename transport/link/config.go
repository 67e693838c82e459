package link

// Defaults for Config fields left zero.
const (
	// DefaultBatchSize is the messages per recvmmsg/sendmmsg call. 64 is
	// where loopback gains flatten out (see BenchmarkLoopback) and matches
	// wireguard-go's GSO segment limit; quic-go uses 8, wireguard-go 128.
	DefaultBatchSize = 64
	// MaxBatchSize is the kernel's UIO_MAXIOV, the most messages one
	// recvmmsg/sendmmsg call accepts.
	MaxBatchSize = 1024
	// DefaultSocketBuffer is SO_RCVBUF/SO_SNDBUF in bytes: about 1000
	// full-size RoCE packets, enough to ride out a scheduling hiccup of the
	// reader at line rate on a 10G link.
	DefaultSocketBuffer = 4 << 20
	// DefaultMaxSourcePorts bounds the send-only sockets a UDP link opens for
	// per-QP source ports (one file descriptor each); QPs beyond it share
	// the link's own port.
	DefaultMaxSourcePorts = 64
)

// Config tunes a UDP link. The zero value is usable.
type Config struct {
	// BatchSize is the number of datagrams per recvmmsg/sendmmsg call.
	// 0 means DefaultBatchSize; values above MaxBatchSize are clamped.
	BatchSize int
	// SocketBuffer is the requested SO_RCVBUF and SO_SNDBUF in bytes. 0 means
	// DefaultSocketBuffer; negative keeps the kernel defaults. As root (or
	// with CAP_NET_ADMIN) the FORCE variants lift the net.core.*mem_max
	// limits; otherwise the kernel clamps silently. UDP.SocketBuffers reports
	// what the kernel granted.
	SocketBuffer int
	// ZeroChecksum6 sends IPv6 datagrams with UDP checksum 0
	// (UDP_NO_CHECK6_TX), as rxe does. Receiving zero-checksum datagrams
	// (UDP_NO_CHECK6_RX) is always enabled. The ICRC covers the payload
	// either way.
	ZeroChecksum6 bool
	// MaxSourcePorts is the most extra source ports (send-only sockets) the
	// link opens for SourcePort. 0 means DefaultMaxSourcePorts; negative
	// disables them, so every datagram leaves from the bound port.
	MaxSourcePorts int
}

func (c Config) batchSize() int {
	switch {
	case c.BatchSize <= 0:
		return DefaultBatchSize
	case c.BatchSize > MaxBatchSize:
		return MaxBatchSize
	}
	return c.BatchSize
}

func (c Config) maxSourcePorts() int {
	switch {
	case c.MaxSourcePorts == 0:
		return DefaultMaxSourcePorts
	case c.MaxSourcePorts < 0:
		return 0
	}
	return c.MaxSourcePorts
}

func (c Config) socketBuffer() int {
	if c.SocketBuffer == 0 {
		return DefaultSocketBuffer
	}
	return c.SocketBuffer
}
