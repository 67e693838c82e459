package link

import "log/slog"

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
	// MaxReaders bounds Config.Readers.
	MaxReaders = 64
	// DefaultMulticastTTL is the TTL / hop limit of datagrams sent to a
	// multicast group when the message does not set one: the kernel's
	// default of 1 keeps group traffic on the local link.
	DefaultMulticastTTL = 1
)

// Config tunes a UDP link. The zero value is usable: GSO and GRO on where
// the kernel has them, one reader, silent.
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
	// either way. The kernel refuses UDP GSO without a checksum, so it turns
	// GSO off on an IPv6 link.
	ZeroChecksum6 bool
	// MaxSourcePorts is the most extra source ports (send-only sockets) the
	// link opens for SourcePort. 0 means DefaultMaxSourcePorts; negative
	// disables them, so every datagram leaves from the bound port.
	MaxSourcePorts int
	// Readers is the number of receive sockets bound to the address with
	// SO_REUSEPORT; the kernel spreads flows over them by a hash of the
	// 4-tuple, and UDP.ReceiveFuncs offers one function per socket. 0 or 1
	// means one socket and no SO_REUSEPORT (another socket on the same port
	// is then EADDRINUSE, as before); at most MaxReaders.
	Readers int
	// NoGSO sends trains one datagram per segment instead of as UDP GSO
	// super-datagrams (to compare, or to rule GSO out).
	NoGSO bool
	// NoGRO never enables UDP_GRO, so every datagram arrives on its own
	// even in MaxTrain buffers.
	NoGRO bool
	// MulticastTTL is the TTL / hop limit for datagrams to a multicast
	// group (IP_MULTICAST_TTL / IPV6_MULTICAST_HOPS) when the message does
	// not set one. 0 means DefaultMulticastTTL.
	MulticastTTL int
	// Logger receives the link's rare notices (GSO refused by the kernel,
	// flow label leases refused), each logged once. nil is silent.
	Logger *slog.Logger
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

func (c Config) readers() int {
	return max(1, min(c.Readers, MaxReaders))
}

func (c Config) multicastTTL() int {
	if c.MulticastTTL <= 0 {
		return DefaultMulticastTTL
	}
	return min(c.MulticastTTL, 255)
}
