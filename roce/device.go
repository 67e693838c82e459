package roce

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/core/attach"
	"github.com/goroce/goroce/internal/core/cq"
	"github.com/goroce/goroce/internal/core/srq"
	"github.com/goroce/goroce/internal/core/transport"
	"github.com/goroce/goroce/link"
)

// RoCEv2Port is the IANA UDP port of RoCEv2, the port Open binds by default.
const RoCEv2Port = 4791

// DefaultEventBuffer is the capacity of the Events channel.
const DefaultEventBuffer = 256

// Option configures Open and OpenLink.
type Option func(*options)

type options struct {
	port     uint16
	mtu      MTU
	shards   int
	pcap     io.Writer
	link     link.Link
	limits   Limits
	eventBuf int
	linkCfg  link.Config
	readers  int
	rtc      bool
	cc       *dcqcn.Config

	roced             string // the socket Open attaches through (WithRoced)
	rocedSet          bool
	wrap              func(link.Link) link.Link
	attachErr         error  // why attaching failed, for a bind that then fails
	firstQPN, lastQPN uint32 // the block roced granted
}

// WithPort binds a UDP port other than 4791. Both ends must use the same port: RoCEv2
// always sends to the port it listens on.
func WithPort(port uint16) Option { return func(o *options) { o.port = port } }

// WithMTU sets the port's active MTU instead of deriving it from the interface MTU. QPs
// may still ask for any path MTU up to MTU4096 (max_mtu), as on rxe.
func WithMTU(m MTU) Option { return func(o *options) { o.mtu = m } }

// WithShards sets the number of engine goroutines that own QPs (0: GOMAXPROCS).
func WithShards(n int) Option { return func(o *options) { o.shards = n } }

// WithPcap writes every datagram the device sends and receives to w in pcap format
// (Wireshark dissects UDP 4791 as InfiniBand).
func WithPcap(w io.Writer) Option { return func(o *options) { o.pcap = w } }

// WithLink makes Open use l instead of binding a UDP socket; the Device owns and closes
// it. Tests use it with link.Pipe.
func WithLink(l link.Link) Option { return func(o *options) { o.link = l } }

// WithLimits replaces the default limits (DefaultLimits); zero fields keep the default.
func WithLimits(l Limits) Option { return func(o *options) { o.limits = l } }

// WithEventBuffer sets the capacity of the Events channel. Events that do not fit are
// dropped and counted (Device.DroppedEvents): the engine never waits for a reader.
func WithEventBuffer(n int) Option { return func(o *options) { o.eventBuf = n } }

// WithCongestionControl sets the device's congestion control (package dcqcn; default
// dcqcn.DefaultConfig, on). LineRate 0 is the interface's speed, else DefaultLineRate.
// Enabled false turns it off: no ECT, no CNPs, no pacing, as rxe.
func WithCongestionControl(c dcqcn.Config) Option { return func(o *options) { o.cc = &c } }

// WithLinkConfig tunes the UDP socket Open binds: batch size, socket buffers, UDP GSO
// (sending a flow's equal-size packets as one train) and GRO (link.Config.NoGSO,
// NoGRO). The engine learns them from the link, as for WithLink and OpenLink.
func WithLinkConfig(c link.Config) Option { return func(o *options) { o.linkCfg = c } }

// WithRunToCompletion turns run-to-completion on (default off): when a QP's engine
// shard is idle, PostSend builds and sends its packets before it returns, and the
// goroutine that reads the socket (or polls an empty CQ) runs the receive side through
// to the completion, with no goroutine wake-up in a small message's round trip. A busy
// shard takes the work as in the default mode.
func WithRunToCompletion(on bool) Option { return func(o *options) { o.rtc = on } }

// WithReaders sets how many receive sockets Open binds to the address with
// SO_REUSEPORT, each read by its own goroutine (link.Config.Readers); the kernel
// spreads flows over them by source port, which RoCE varies per QP. 0 or 1 is one
// socket.
func WithReaders(n int) Option { return func(o *options) { o.readers = n } }

// Device is an opened RoCEv2 device (struct ibv_context): one UDP socket on one local
// IP address, the engine that runs its QPs, and its verbs objects. Safe for concurrent
// use.
type Device struct {
	addr   netip.Addr
	lport  uint16
	guid   uint64
	gids   []GID
	gidIdx int // index of the RoCEv2 entry
	attr   DeviceAttr
	limits Limits
	port   PortAttr

	lnk   link.Link
	eng   *transport.Engine
	sess  *attach.Session // roced's grant, when attached
	alink *attach.Link    // the block's socket, when attached
	mem   *memory

	closed   atomic.Bool
	done     chan struct{} // closed by Close, so CQ.Wait never outlives the device
	portDown atomic.Bool   // PORT_ERR seen (the link died): QueryPort says DOWN

	// evMu guards: events (sends and close), evClosed.
	evMu          sync.Mutex
	events        chan AsyncEvent
	evClosed      bool
	droppedEvents atomic.Uint64

	// objMu guards the handle tables the engine's event callback reads. It is never
	// held while calling into the engine, so an event cannot deadlock against a verb.
	objMu sync.RWMutex
	qps   map[uint32]*QP
	cqs   map[*cq.Queue]*CQ
	srqs  map[*srq.Queue]*SRQ

	// mcMu guards: mcast, and every QP's mcast.
	mcMu  sync.Mutex
	mcast mcastState

	// Resource counts against Limits; atomics so create/destroy stay cheap.
	nPD, nMR, nMW, nCQ, nQP, nSRQ, nAH atomic.Int64
	ids                                atomic.Uint32 // handle numbers for PD, CQ, SRQ, AH
}

// Open is ibv_open_device for the local IP address addr: it binds UDP port 4791 (or
// WithPort) on exactly that address and starts the engine. The port is ACTIVE at once,
// with a PORT_ACTIVE event queued, as rxe reports when its netdev is up.
func Open(addr netip.Addr, opts ...Option) (*Device, error) {
	o := options{port: RoCEv2Port}
	for _, f := range opts {
		f(&o)
	}
	addr = addr.Unmap()
	if !addr.IsValid() || addr.IsUnspecified() || addr.IsMulticast() {
		return nil, newErr("ibv_open_device", "", syscall.EINVAL, "need a specific unicast address, got %v", addr)
	}
	l := o.link
	if l == nil {
		s, err := dial(addr, &o)
		if err != nil {
			return nil, err
		}
		if s != nil {
			return openAttached(addr, s, &o)
		}
		cfg := o.linkCfg
		if o.readers > 0 {
			cfg.Readers = o.readers
		}
		u, err := link.ListenUDP(netip.AddrPortFrom(addr, o.port), cfg)
		if err != nil {
			return nil, o.attachHint(wrapOpenErr(err))
		}
		l = u
		if o.wrap != nil {
			l = o.wrap(u)
		}
	}
	d, err := newDevice(addr, l, &o)
	if err != nil {
		l.Close()
		return nil, err
	}
	return d, nil
}

// OpenLink is Open over an existing link (a test's, or a socket set up by the caller)
// on address l.LocalAddr().Addr(). The Device owns l and closes it on Close.
func OpenLink(l link.Link, opts ...Option) (*Device, error) {
	o := options{}
	for _, f := range opts {
		f(&o)
	}
	addr := l.LocalAddr().Addr().Unmap()
	if !addr.IsValid() {
		return nil, newErr("ibv_open_device", "", syscall.EINVAL, "link has no local address")
	}
	return newDevice(addr, l, &o)
}

func wrapOpenErr(err error) error {
	e := wrapErr("ibv_open_device", "", -1, err).(*Error)
	if e.Errno == syscall.EADDRINUSE {
		e.Detail += " (is the rdma_rxe module loaded? it owns UDP 4791; use WithPort)"
	}
	return e
}

func newDevice(addr netip.Addr, l link.Link, o *options) (*Device, error) {
	lim := o.limits.withDefaults()
	d := &Device{
		addr:   addr,
		lport:  l.LocalAddr().Port(),
		guid:   NodeGUID(addr),
		limits: lim,
		done:   make(chan struct{}),
		qps:    make(map[uint32]*QP),
		cqs:    make(map[*cq.Queue]*CQ),
		srqs:   make(map[*srq.Queue]*SRQ),
	}
	d.gids, d.gidIdx = buildGIDTable(addr, d.guid)
	d.attr = lim.deviceAttr(d.guid)
	active := o.mtu
	if active == 0 {
		active = activeMTU(addr)
	}
	if active < MTU256 || active > MTU4096 {
		return nil, newErr("ibv_open_device", "", syscall.EINVAL, "active MTU %d out of range", active)
	}
	d.port = PortAttr{
		State:        PortActive,
		MaxMTU:       MTU4096,
		ActiveMTU:    active,
		GIDTblLen:    len(d.gids),
		PortCapFlags: 0x00010000, // IB_PORT_CM_SUP, as rxe reports
		MaxMsgSz:     maxMsgSize,
		PKeyTblLen:   1,
		LinkLayer:    LinkLayerEthernet,
	}
	n := o.eventBuf
	if n <= 0 {
		n = DefaultEventBuffer
	}
	d.events = make(chan AsyncEvent, n)
	d.mem = newMemory()
	if o.pcap != nil {
		t, err := link.NewTap(l, o.pcap, link.LinkTypeEthernet)
		if err != nil {
			return nil, wrapErr("ibv_open_device", "", -1, err)
		}
		l = t
	}
	d.lnk = l
	eng, err := transport.NewEngine(transport.Config{
		Link:            l,
		Memory:          d.mem,
		Shards:          o.shards,
		OnEvent:         d.onEngineEvent,
		LocalAddr:       addr,
		MaxQPWR:         lim.MaxQPWR,
		MaxSGE:          lim.MaxSGE,
		MaxInline:       lim.MaxInlineData,
		MaxRDAtomic:     lim.MaxQPInitRdAtom,
		MaxDestRDAtomic: lim.MaxQPRdAtom,
		PortMTU:         active,
		RunToCompletion: o.rtc,
		CC:              congestionControl(addr, o.cc),
		FirstQPN:        o.firstQPN,
		LastQPN:         o.lastQPN,
	})
	if err != nil {
		return nil, wrapErr("ibv_open_device", "", -1, err)
	}
	d.eng = eng
	d.emit(AsyncEvent{Type: EventPortActive, Port: 1})
	return d, nil
}

// interfaceOf returns the interface that holds addr, or nil.
func interfaceOf(addr netip.Addr) *net.Interface {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var lo *net.Interface
	for i, ifi := range ifs {
		as, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			if p, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(p.IP); ok && ip.Unmap() == addr.WithZone("") {
					return &ifs[i]
				}
			}
		}
		if ifi.Flags&net.FlagLoopback != 0 && addr.IsLoopback() {
			// 127.0.0.0/8 is all on lo even when only 127.0.0.1 is listed.
			lo = &ifs[i]
		}
	}
	return lo
}

// congestionControl is c (nil: the default) with, for a LineRate of 0, the speed the
// kernel reports for addr's interface if it is a NIC (/sys/class/net/IF/speed, Mb/s).
// Virtual devices' speeds mean nothing (tap 10 Mb/s, veth 10 Gb/s, bridge none).
func congestionControl(addr netip.Addr, c *dcqcn.Config) dcqcn.Config {
	cfg := dcqcn.DefaultConfig()
	if c != nil {
		cfg = *c
	}
	if !cfg.Enabled || cfg.LineRate != 0 {
		return cfg
	}
	if ifi := interfaceOf(addr); ifi != nil && isNIC(ifi.Name) {
		b, err := os.ReadFile(filepath.Join("/sys/class/net", ifi.Name, "speed"))
		if mbps, err2 := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && err2 == nil && mbps > 0 {
			cfg.LineRate = uint64(mbps) * 1_000_000
		}
	}
	return cfg
}

// isNIC reports whether the interface is backed by a device (PCI, ...).
func isNIC(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", name, "device"))
	return err == nil
}

// activeMTU is the largest IB MTU that fits in the MTU of addr's interface less the
// RoCEv2 headers, as rxe derives it from its netdev; without an interface, Ethernet's
// 1500 gives 1024, rxe's usual value.
func activeMTU(addr netip.Addr) MTU {
	ifMTU := 1500
	if ifi := interfaceOf(addr); ifi != nil {
		ifMTU = ifi.MTU
	}
	// IPv6 40 + UDP 8 + BTH 12 + largest extension (RETH 16 + ImmDt 4) + ICRC 4 = 84.
	const hdr = 84
	for m := MTU4096; m > MTU256; m-- {
		if m.Bytes()+hdr <= ifMTU {
			return m
		}
	}
	return MTU256
}

// CongestionControl returns the device's congestion control, defaults filled in.
func (d *Device) CongestionControl() dcqcn.Config { return d.eng.Config().CC }

func (d *Device) Addr() netip.Addr { return d.addr }

// LocalAddr returns the address and UDP port the device is bound to.
func (d *Device) LocalAddr() netip.AddrPort { return netip.AddrPortFrom(d.addr, d.lport) }

// Name returns a name in the style of ibv_get_device_name: "goroce(127.0.0.1)".
func (d *Device) Name() string { return fmt.Sprintf("goroce(%v)", d.addr) }

// Query is ibv_query_device: the device's attributes and limits.
func (d *Device) Query() (DeviceAttr, error) {
	if d.closed.Load() {
		return DeviceAttr{}, closedErr("ibv_query_device", "")
	}
	return d.attr, nil
}

// QueryPort is ibv_query_port. The device has one port, number 1.
func (d *Device) QueryPort(port int) (PortAttr, error) {
	if d.closed.Load() {
		return PortAttr{}, closedErr("ibv_query_port", "")
	}
	if port != 1 {
		return PortAttr{}, newErr("ibv_query_port", fmt.Sprintf("port %d", port), syscall.EINVAL, "the device has only port 1")
	}
	pa := d.port
	if d.portDown.Load() {
		pa.State = PortDown
	}
	return pa, nil
}

// QueryGID is ibv_query_gid for port 1 (the GID table: see the package doc).
func (d *Device) QueryGID(index int) (GID, error) {
	if d.closed.Load() {
		return GID{}, closedErr("ibv_query_gid", "")
	}
	if index < 0 || index >= len(d.gids) {
		return GID{}, newErr("ibv_query_gid", "", syscall.EINVAL, "index %d outside the GID table (%d entries)", index, len(d.gids))
	}
	return d.gids[index], nil
}

// GIDIndex returns the index of the device address's RoCEv2 GID, 1 (0 on an IPv6
// link-local address): the SGIDIndex to use; exchange the GID itself with the peer.
func (d *Device) GIDIndex() int { return d.gidIdx }

// GID returns the RoCEv2 GID of the device address (the entry at GIDIndex).
func (d *Device) GID() GID { return d.gids[d.gidIdx] }

// QueryPKey is ibv_query_pkey: the table holds only the default P_Key 0xffff.
func (d *Device) QueryPKey(index int) (uint16, error) {
	if d.closed.Load() {
		return 0, closedErr("ibv_query_pkey", "")
	}
	if index != 0 {
		return 0, newErr("ibv_query_pkey", "", syscall.EINVAL, "index %d outside the P_Key table (1 entry)", index)
	}
	return DefaultPKey, nil
}

// Stats returns a snapshot of the engine's wire counters.
func (d *Device) Stats() Stats { return d.eng.Stats().Snapshot() }

// DroppedEvents returns how many async events did not fit in the Events channel.
func (d *Device) DroppedEvents() uint64 { return d.droppedEvents.Load() }

// Close is ibv_close_device: it stops the engine, closes the socket and the Events
// channel, and makes every later verb on the device or its objects fail with ENODEV,
// matching net.ErrClosed. Objects need not be destroyed first. Idempotent.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.eng.Close()
	close(d.done)
	err := d.lnk.Close()
	d.closeSession()
	d.evMu.Lock()
	d.evClosed = true
	close(d.events)
	d.evMu.Unlock()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return wrapErr("ibv_close_device", "", -1, err)
	}
	return nil
}

func (d *Device) obj(kind string, id uint32) string { return fmt.Sprintf("%s %#x", kind, id) }

// reserve counts one more object against limit; false at the limit.
func reserve(n interface {
	Add(int64) int64
}, limit int) bool {
	if n.Add(1) > int64(limit) {
		n.Add(-1)
		return false
	}
	return true
}

// barrier waits until no access through an unregistered key is in flight.
func (d *Device) barrier() { d.eng.Barrier() }

// QPs returns a snapshot of every QP, for debugging (roced's /debug/qps); per-QP data
// stays out of Stats to keep metrics low-cardinality.
func (d *Device) QPs() []QPInfo {
	if d.closed.Load() {
		return nil
	}
	return d.eng.QPs()
}
