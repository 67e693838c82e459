//go:build linux

package bench

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/link"
)

// Datagram sizes of the engine's packets at path MTU 4096: BTH (12) + payload +
// ICRC (4). A full middle or SEND packet is 4112 bytes; a 64-byte SEND ONLY is 80.
// WRITE ONLY adds a 16-byte RETH (4128 and 96), close enough to share a baseline.
const (
	bigDatagram   = 12 + 4096 + 4
	smallDatagram = 12 + 64 + 4
)

// rawWindow is the most datagrams the raw-UDP senders keep in flight. It keeps the
// receiver's socket buffer (link.DefaultSocketBuffer, 4 MiB when the kernel grants
// it) from overflowing, so the baselines measure rate, not loss.
const rawWindow = 256

// rawPath is one way of moving datagrams from 127.0.0.1 to 127.0.0.2.
type rawPath interface {
	// batch is the most datagrams one send call carries.
	batch() int
	// send sends n <= batch() datagrams.
	send(n int) error
	// recv blocks until datagrams arrive and returns how many.
	recv() (int, error)
	close()
}

// streamRaw sends total datagrams through p from a sender goroutine while this
// goroutine receives them, with at most rawWindow in flight. It returns the time
// taken. A stall (a lost datagram would cause one) fails after 5 s of no progress.
func streamRaw(p rawPath, total int) (time.Duration, error) {
	bs := p.batch()
	credits := make(chan struct{}, max(2, rawWindow/bs))
	for range cap(credits) {
		credits <- struct{}{}
	}
	var progress atomic.Int64
	stop := make(chan struct{})
	var stalled atomic.Bool
	go func() { // watchdog
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last, idle := int64(-1), 0
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if cur := progress.Load(); cur != last {
				last, idle = cur, 0
				continue
			}
			if idle++; idle >= 5 {
				stalled.Store(true)
				p.close()
				return
			}
		}
	}()
	defer close(stop)
	sendErr := make(chan error, 1)
	start := time.Now()
	go func() {
		for sent := 0; sent < total; {
			select {
			case <-credits:
			case <-stop:
				sendErr <- nil
				return
			}
			k := min(bs, total-sent)
			if err := p.send(k); err != nil {
				sendErr <- err
				return
			}
			sent += k
		}
		sendErr <- nil
	}()
	got, returned := 0, 0
	for got < total {
		n, err := p.recv()
		if err != nil {
			if stalled.Load() {
				return 0, fmt.Errorf("stalled at %d of %d datagrams (lost?)", got, total)
			}
			return 0, err
		}
		got += n
		progress.Store(int64(got))
		for ; returned < got/bs; returned++ {
			credits <- struct{}{}
		}
	}
	elapsed := time.Since(start)
	return elapsed, <-sendErr
}

// listenPlain opens a net.UDPConn on addr with an ephemeral port.
func listenPlain(addr netip.Addr) (*net.UDPConn, error) {
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		return nil, err
	}
	_ = c.SetReadBuffer(link.DefaultSocketBuffer)
	_ = c.SetWriteBuffer(link.DefaultSocketBuffer)
	return c, nil
}

// plainPath is net.UDPConn, one datagram per system call.
type plainPath struct {
	tx, rx *net.UDPConn
	dst    netip.AddrPort
	out    []byte
	in     []byte
}

func newPlainPath(size int) (*plainPath, error) {
	tx, err := listenPlain(addrA)
	if err != nil {
		return nil, err
	}
	rx, err := listenPlain(addrB)
	if err != nil {
		tx.Close()
		return nil, err
	}
	return &plainPath{tx: tx, rx: rx, dst: rx.LocalAddr().(*net.UDPAddr).AddrPort(),
		out: make([]byte, size), in: make([]byte, link.MaxDatagram)}, nil
}

func (p *plainPath) batch() int { return 64 }

func (p *plainPath) send(n int) error {
	for range n {
		if _, err := p.tx.WriteToUDPAddrPort(p.out, p.dst); err != nil {
			return err
		}
	}
	return nil
}

func (p *plainPath) recv() (int, error) {
	_, _, err := p.rx.ReadFromUDPAddrPort(p.in)
	return 1, err
}

func (p *plainPath) close() { p.tx.Close(); p.rx.Close() }

// batchPath is link.UDP: sendmmsg/recvmmsg with link.DefaultBatchSize messages.
type batchPath struct {
	tx, rx *link.UDP
	out    []link.Message
	in     []link.Message
}

func newBatchPath(size int) (*batchPath, error) {
	tx, err := link.ListenUDP(netip.AddrPortFrom(addrA, 0), link.Config{})
	if err != nil {
		return nil, err
	}
	rx, err := link.ListenUDP(netip.AddrPortFrom(addrB, 0), link.Config{})
	if err != nil {
		tx.Close()
		return nil, err
	}
	p := &batchPath{tx: tx, rx: rx, out: make([]link.Message, tx.BatchSize()), in: make([]link.Message, rx.BatchSize())}
	for i := range p.out {
		p.out[i] = link.Message{Buf: make([]byte, size), Addr: rx.LocalAddr()}
	}
	for i := range p.in {
		p.in[i].Buf = make([]byte, link.MaxDatagram)
	}
	return p, nil
}

func (p *batchPath) batch() int { return len(p.out) }

func (p *batchPath) send(n int) error {
	_, err := p.tx.WriteBatch(p.out[:n])
	return err
}

func (p *batchPath) recv() (int, error) {
	for i := range p.in {
		p.in[i].Buf = p.in[i].Buf[:cap(p.in[i].Buf)]
	}
	return p.rx.ReadBatch(p.in)
}

func (p *batchPath) close() { p.tx.Close(); p.rx.Close() }

// gsoPath is a plain socket with UDP_SEGMENT on the sender (one sendmsg carries up
// to 64 datagrams, at most 64 KiB) and UDP_GRO on the receiver (one recvmsg returns
// a train of same-sized datagrams and their size in a control message).
type gsoPath struct {
	tx, rx *net.UDPConn
	dst    netip.AddrPort
	size   int
	segs   int
	out    []byte
	in     []byte
	oob    []byte
}

// errNoGSO says the kernel refused UDP_SEGMENT or UDP_GRO.
var errNoGSO = errors.New("UDP GSO/GRO unsupported")

func setInt(c *net.UDPConn, level, opt, v int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, v) }); err != nil {
		return err
	}
	return serr
}

func newGSOPath(size int) (*gsoPath, error) {
	tx, err := listenPlain(addrA)
	if err != nil {
		return nil, err
	}
	rx, err := listenPlain(addrB)
	if err != nil {
		tx.Close()
		return nil, err
	}
	p := &gsoPath{tx: tx, rx: rx, dst: rx.LocalAddr().(*net.UDPAddr).AddrPort(), size: size,
		segs: min(64, 65000/size), in: make([]byte, 1<<16), oob: make([]byte, unix.CmsgSpace(4))}
	p.out = make([]byte, p.segs*size)
	if err := setInt(tx, unix.SOL_UDP, unix.UDP_SEGMENT, size); err != nil {
		p.close()
		return nil, fmt.Errorf("%w: setsockopt UDP_SEGMENT: %v", errNoGSO, err)
	}
	if err := setInt(rx, unix.SOL_UDP, unix.UDP_GRO, 1); err != nil {
		p.close()
		return nil, fmt.Errorf("%w: setsockopt UDP_GRO: %v", errNoGSO, err)
	}
	return p, nil
}

func (p *gsoPath) batch() int { return p.segs }

func (p *gsoPath) send(n int) error {
	_, err := p.tx.WriteToUDPAddrPort(p.out[:n*p.size], p.dst)
	return err
}

func (p *gsoPath) recv() (int, error) {
	n, oobn, _, _, err := p.rx.ReadMsgUDPAddrPort(p.in, p.oob)
	if err != nil {
		return 0, err
	}
	seg := n
	if oobn >= unix.CmsgLen(4) {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&p.oob[0]))
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO {
			seg = int(*(*int32)(unsafe.Pointer(&p.oob[unix.CmsgLen(0)])))
		}
	}
	if seg <= 0 {
		return 1, nil
	}
	return (n + seg - 1) / seg, nil
}

func (p *gsoPath) close() { p.tx.Close(); p.rx.Close() }

// linkGSOPath is link.UDP with trains: each WriteBatch carries up to
// linkTrains GSO trains of link.GSOSegments(size) datagrams, and the
// receiver reads MaxTrain buffers, so UDP_GRO hands it whole trains (split
// by Message.Segment, no copy). It is the ceiling the engine can reach
// through the link's GSO/GRO path.
type linkGSOPath struct {
	tx, rx *link.UDP
	segs   int // datagrams per train
	out    []link.Message
	in     []link.Message
}

const linkTrains = 4

func newLinkGSOPath(size int) (*linkGSOPath, error) {
	tx, err := link.ListenUDP(netip.AddrPortFrom(addrA, 0), link.Config{})
	if err != nil {
		return nil, err
	}
	rx, err := link.ListenUDP(netip.AddrPortFrom(addrB, 0), link.Config{})
	if err != nil {
		tx.Close()
		return nil, err
	}
	if !tx.GSO() {
		tx.Close()
		rx.Close()
		return nil, fmt.Errorf("%w: the link has GSO off", errNoGSO)
	}
	p := &linkGSOPath{tx: tx, rx: rx, segs: link.GSOSegments(size), in: make([]link.Message, linkTrains)}
	payload := make([]byte, p.segs*size)
	for range linkTrains {
		p.out = append(p.out, link.Message{Buf: payload, SegSize: size, Addr: rx.LocalAddr()})
	}
	for i := range p.in {
		p.in[i].Buf = link.GetTrainBuffer()[:]
	}
	return p, nil
}

func (p *linkGSOPath) batch() int { return linkTrains * p.segs }

func (p *linkGSOPath) send(n int) error {
	k := 0
	for ; n > 0; k++ {
		d := min(n, p.segs)
		p.out[k].Buf = p.out[k].Buf[:d*p.out[k].SegSize]
		n -= d
	}
	_, err := p.tx.WriteBatch(p.out[:k])
	for i := range p.out[:k] {
		p.out[i].Buf = p.out[i].Buf[:cap(p.out[i].Buf)]
	}
	return err
}

func (p *linkGSOPath) recv() (int, error) {
	for i := range p.in {
		p.in[i].Buf = p.in[i].Buf[:cap(p.in[i].Buf)]
	}
	n, err := p.rx.ReadBatch(p.in)
	got := 0
	for i := range p.in[:n] {
		got += p.in[i].NumSegments()
	}
	return got, err
}

func (p *linkGSOPath) close() { p.tx.Close(); p.rx.Close() }

// benchRaw runs b.N datagrams of size bytes through the path newPath makes.
func benchRaw(b *testing.B, size int, newPath func(int) (rawPath, error)) {
	p, err := newPath(size)
	if errors.Is(err, errNoGSO) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer p.close()
	if _, err := streamRaw(p, rawWindow); err != nil { // warm up, and check GSO works
		if errors.Is(err, unix.EIO) || errors.Is(err, unix.EINVAL) {
			b.Skipf("UDP GSO send refused: %v", err)
		}
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	m := startCPU()
	b.ResetTimer()
	elapsed, err := streamRaw(p, b.N)
	if err != nil {
		b.Fatal(err)
	}
	c := m.stop(float64(b.N))
	c.report(b)
	pps := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(pps, "pkts/s")
	if b.Name() == fmt.Sprintf("BenchmarkRawUDP/gso/%dB", bigDatagram) {
		gsoRuns.add(b.N, rawRun{pps: pps, cpu: c})
	}
}

// rawPaths are the baselines by name.
var rawPaths = []struct {
	name string
	open func(int) (rawPath, error)
}{
	{"plain", func(n int) (rawPath, error) { return newPlainPath(n) }},
	{"batch", func(n int) (rawPath, error) { return newBatchPath(n) }},
	{"gso", func(n int) (rawPath, error) { return newGSOPath(n) }},
	{"linkgso", func(n int) (rawPath, error) { return newLinkGSOPath(n) }},
}

// BenchmarkRawUDP is the raw-UDP datagram rate from 127.0.0.1 to 127.0.0.2 at the
// engine's packet sizes, a sender goroutine against a receiver with rawWindow
// datagrams in flight.
func BenchmarkRawUDP(b *testing.B) {
	for _, size := range []int{smallDatagram, bigDatagram} {
		for _, rp := range rawPaths {
			b.Run(fmt.Sprintf("%s/%dB", rp.name, size), func(b *testing.B) { benchRaw(b, size, rp.open) })
		}
	}
}

// pingPongRaw measures n round trips of a size-byte datagram between two plain
// sockets, with an echo goroutine on the far side.
func pingPongRaw(n, size int) (time.Duration, error) { return pingPongRawWith(n, size, false) }

// pingPongSpin is pingPongRaw with both sides busy-polling.
func pingPongSpin(n, size int) (time.Duration, error) { return pingPongRawWith(n, size, true) }

// spinReader reads a socket without ever sleeping in the kernel or the
// netpoller: a non-blocking recvfrom, retried with a yield until a datagram is
// there (busy polling).
type spinReader struct {
	rc  syscall.RawConn
	buf []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

func newSpinReader(c *net.UDPConn) (*spinReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &spinReader{rc: rc, buf: make([]byte, link.MaxDatagram)}
	r.fn = func(fd uintptr) bool {
		r.n, _, r.err = unix.Recvfrom(int(fd), r.buf, unix.MSG_DONTWAIT)
		return true
	}
	return r, nil
}

// read returns the next datagram's length and its sender.
func (r *spinReader) read() (int, error) {
	for {
		if err := r.rc.Read(r.fn); err != nil {
			return 0, err
		}
		switch {
		case r.err == nil:
			return r.n, nil
		case errors.Is(r.err, unix.EAGAIN):
			runtime.Gosched()
		default:
			return 0, r.err
		}
	}
}

// pingPongRawWith runs n round trips; spin reads both sockets by busy polling
// instead of blocking.
func pingPongRawWith(n, size int, spin bool) (time.Duration, error) {
	a, err := listenPlain(addrA)
	if err != nil {
		return 0, err
	}
	defer a.Close()
	e, err := listenPlain(addrB)
	if err != nil {
		return 0, err
	}
	defer e.Close()
	src := a.LocalAddr().(*net.UDPAddr).AddrPort()
	es, err := newSpinReader(e)
	if err != nil {
		return 0, err
	}
	as, err := newSpinReader(a)
	if err != nil {
		return 0, err
	}
	go func() {
		buf := make([]byte, link.MaxDatagram)
		for {
			var k int
			var err error
			if spin {
				k, err = es.read()
				buf = es.buf
			} else {
				k, _, err = e.ReadFromUDPAddrPort(buf)
			}
			if err != nil {
				return
			}
			if _, err := e.WriteToUDPAddrPort(buf[:k], src); err != nil {
				return
			}
		}
	}()
	dst := e.LocalAddr().(*net.UDPAddr).AddrPort()
	out, in := make([]byte, size), make([]byte, link.MaxDatagram)
	if err := a.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return 0, err
	}
	start := time.Now()
	for range n {
		if _, err := a.WriteToUDPAddrPort(out, dst); err != nil {
			return 0, err
		}
		if spin {
			_, err = as.read()
		} else {
			_, _, err = a.ReadFromUDPAddrPort(in)
		}
		if err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// BenchmarkRawUDPPingPong is the raw-UDP round trip of a 64-byte message (80-byte
// datagram, as the engine's SEND ONLY).
func BenchmarkRawUDPPingPong(b *testing.B) { benchRoundTrips(b, pingPongRaw) }

// BenchmarkRawUDPPingPongSpin is BenchmarkRawUDPPingPong with both sides busy
// polling their sockets (non-blocking reads, yielding in between) instead of
// sleeping in the netpoller: raw UDP's own figure for the way BenchmarkRCPingPong
// waits.
func BenchmarkRawUDPPingPongSpin(b *testing.B) { benchRoundTrips(b, pingPongSpin) }

// roundTrips runs n round trips of size-byte datagrams and returns how long
// they took.
type roundTrips func(n, size int) (time.Duration, error)

// benchRoundTrips is a raw ping-pong benchmark: 100 round trips to warm up,
// then b.N timed ones.
func benchRoundTrips(b *testing.B, run roundTrips) {
	if _, err := run(100, smallDatagram); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	m := startCPU()
	b.ResetTimer()
	d, err := run(b.N, smallDatagram)
	if err != nil {
		b.Fatal(err)
	}
	m.stop(2 * float64(b.N)).report(b) // a round trip is two datagrams
	b.ReportMetric(float64(d.Microseconds())/float64(b.N), "µs/rt")
}

// BenchmarkRawUDPPingPongAcked is the floor of an RC round trip over UDP: the
// datagrams and system calls of BenchmarkRCPingPong with no protocol work. Both
// sides busy-poll link.UDP sockets (non-blocking recvmmsg, yielding in
// between), and each message goes out in one sendmmsg with a 20-byte datagram
// (the size of an RC ACK: BTH, AETH, ICRC) acknowledging the message received
// before it, as the engine's run-to-completion poller sends its reply with the
// held ACK. A round trip so carries four datagrams, where RawUDPPingPongSpin
// carries two.
func BenchmarkRawUDPPingPongAcked(b *testing.B) { benchRoundTrips(b, pingPongAcked) }

// ackedEnd is one side of pingPongAcked.
type ackedEnd struct {
	u    *link.UDP
	poll link.ReceiveFunc
	out  []link.Message // the message, then the ACK
	in   []link.Message
}

const ackDatagram = 20 // BTH 12 + AETH 4 + ICRC 4

func newAckedEnd(addr netip.Addr, size int) (*ackedEnd, error) {
	u, err := link.ListenUDP(netip.AddrPortFrom(addr, 0), link.Config{})
	if err != nil {
		return nil, err
	}
	fns := link.PollFuncs(u)
	if len(fns) == 0 {
		u.Close()
		return nil, errors.New("link.UDP cannot be polled")
	}
	e := &ackedEnd{u: u, poll: fns[0], out: []link.Message{{Buf: make([]byte, size)}, {Buf: make([]byte, ackDatagram)}},
		in: make([]link.Message, u.BatchSize())}
	for i := range e.in {
		e.in[i].Buf = make([]byte, link.MaxDatagram)
	}
	return e, nil
}

// send sends the message and, after the first round, the ACK of the last one
// received, in one batch.
func (e *ackedEnd) send(to netip.AddrPort, ack bool) error {
	e.out[0].Addr, e.out[1].Addr = to, to
	n := 1
	if ack {
		n = 2
	}
	_, err := e.u.WriteBatch(e.out[:n])
	return err
}

// recv polls until a message (not an ACK) has arrived.
func (e *ackedEnd) recv() error {
	for deadline := time.Now().Add(30 * time.Second); ; {
		for i := range e.in {
			e.in[i].Buf = e.in[i].Buf[:cap(e.in[i].Buf)]
		}
		n, err := e.poll(e.in)
		if err != nil {
			return err
		}
		for _, m := range e.in[:n] {
			if len(m.Buf) != ackDatagram {
				return nil
			}
		}
		if n == 0 {
			if time.Now().After(deadline) {
				return errors.New("acked ping-pong: nothing for 30 s")
			}
			runtime.Gosched()
		}
	}
}

// pingPongAcked runs n acked round trips (BenchmarkRawUDPPingPongAcked).
func pingPongAcked(n, size int) (time.Duration, error) {
	a, err := newAckedEnd(addrA, size)
	if err != nil {
		return 0, err
	}
	defer a.u.Close()
	e, err := newAckedEnd(addrB, size)
	if err != nil {
		return 0, err
	}
	defer e.u.Close()
	done := make(chan error, 1)
	go func() {
		for range n {
			if err := e.recv(); err != nil {
				done <- err
				return
			}
			if err := e.send(a.u.LocalAddr(), true); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	start := time.Now()
	for i := range n {
		if err := a.send(e.u.LocalAddr(), i > 0); err != nil {
			return 0, err
		}
		if err := a.recv(); err != nil {
			return 0, err
		}
	}
	d := time.Since(start)
	return d, <-done
}

// baseline is the raw-UDP reference the engine benchmarks compare against, measured
// once per process.
type baseline struct {
	batchPPS map[int]float64 // link.UDP datagrams per second, by datagram size
	batchCPU map[int]cpuCost // the CPU per datagram of the best batchPPS run
	gsoPPS   float64         // raw-socket UDP GSO/GRO datagrams per second at bigDatagram; 0 without GSO
	gsoCPU   cpuCost         // the CPU per datagram of the best gsoPPS run
	rtt      time.Duration   // plain-socket 64-byte round trip
	spinRTT  time.Duration   // the same with both sides busy-polling (RawUDPPingPongSpin)
	ackedRTT time.Duration   // busy-polling, with an ACK datagram per message (RawUDPPingPongAcked)
	rttCPU   cpuCost         // the CPU per datagram of the best rtt run
	spinCPU  cpuCost         // ... of the best spinRTT run
	ackedCPU cpuCost         // ... of the best ackedRTT run
	err      error
}

var (
	baseOnce sync.Once
	base     baseline
)

// bestRate is the best datagram rate of runs runs of about 300 ms through p (0 if
// every run failed), and the CPU per datagram of that run.
func bestRate(p rawPath, runs int) (float64, cpuCost) {
	best, bestCPU := 0.0, cpuCost{}
	for range runs {
		n := 20000
		d, err := streamRaw(p, n) // sizes the measured run
		if err != nil {
			continue
		}
		if d < 300*time.Millisecond {
			n = int(float64(n) * float64(300*time.Millisecond) / float64(max(d, time.Millisecond)))
		}
		m := startCPU()
		d, err = streamRaw(p, n)
		c := m.stop(float64(n))
		if rate := float64(n) / d.Seconds(); err == nil && rate > best {
			best, bestCPU = rate, c
		}
	}
	return best, bestCPU
}

// rawBaseline measures, once per process, the batched raw-UDP datagram rate at both
// engine packet sizes and the GSO/GRO rate at 4112 B (each the best of three 300 ms
// runs) and the raw-UDP ping-pong time
// (the best of three runs of 2000 round trips). Best-of, because the machine is shared
// and the question is what the kernel can do.
func rawBaseline() baseline {
	baseOnce.Do(func() {
		base.batchPPS, base.batchCPU = map[int]float64{}, map[int]cpuCost{}
		for _, size := range []int{smallDatagram, bigDatagram} {
			p, err := newBatchPath(size)
			if err != nil {
				base.err = err
				return
			}
			base.batchPPS[size], base.batchCPU[size] = bestRate(p, 3)
			p.close()
			if base.batchPPS[size] == 0 {
				base.err = fmt.Errorf("raw UDP at %d B moved nothing", size)
				return
			}
		}
		if p, err := newGSOPath(bigDatagram); err == nil {
			base.gsoPPS, base.gsoCPU = bestRate(p, 3)
			p.close()
		}
		const n = 2000
		for range 3 {
			for _, m := range []struct {
				run  roundTrips
				best *time.Duration
				cpu  *cpuCost
			}{{pingPongRaw, &base.rtt, &base.rttCPU}, {pingPongSpin, &base.spinRTT, &base.spinCPU}, {pingPongAcked, &base.ackedRTT, &base.ackedCPU}} {
				cm := startCPU()
				d, err := m.run(n, smallDatagram)
				if err != nil {
					base.err = err
					return
				}
				c := cm.stop(2 * n)
				if rt := d / n; *m.best == 0 || rt < *m.best {
					*m.best, *m.cpu = rt, c
				}
			}
		}
	})
	return base
}

// BenchmarkRawUDPReaders is the receive side's scaling with SO_REUSEPORT:
// two flows (two sending link.UDP sockets, so two 4-tuples, each with its
// own sender goroutine) of 4112-byte datagrams in GSO trains into one
// address, read with GRO by one socket ("readers1") or by two SO_REUSEPORT
// sockets with a goroutine each ("readers2", link.Config.Readers 2, the
// flows placed one per socket). rawWindow datagrams in flight in all, half
// per flow.
func BenchmarkRawUDPReaders(b *testing.B) {
	for _, readers := range []int{1, 2} {
		b.Run(fmt.Sprintf("readers%d/%dB", readers, bigDatagram), func(b *testing.B) { benchReaders(b, readers, bigDatagram) })
	}
}

// flowSender is one flow of BenchmarkRawUDPReaders.
type flowSender struct {
	tx      *link.UDP
	out     []link.Message
	credits chan struct{}
	got     atomic.Int64 // datagrams received
	back    atomic.Int64 // credits returned, in batches
}

func benchReaders(b *testing.B, readers, size int) {
	rx, err := link.ListenUDP(netip.AddrPortFrom(addrB, 0), link.Config{Readers: readers})
	if err != nil {
		b.Fatal(err)
	}
	defer rx.Close()
	segs := link.GSOSegments(size)
	flows, err := placeFlows(rx, readers)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, f := range flows {
			f.tx.Close()
		}
	}()
	byPort := map[uint16]*flowSender{}
	payload := make([]byte, segs*size)
	perFlow := max(2, rawWindow/2/(linkTrains*segs))
	for _, f := range flows {
		byPort[f.tx.LocalAddr().Port()] = f
		for range linkTrains {
			f.out = append(f.out, link.Message{Buf: payload, SegSize: size, Addr: rx.LocalAddr()})
		}
		f.credits = make(chan struct{}, perFlow)
		for range perFlow {
			f.credits <- struct{}{}
		}
	}
	batch := int64(linkTrains * segs)
	total := int64(b.N)
	var received atomic.Int64
	done := make(chan struct{})
	var rwg sync.WaitGroup
	for _, fn := range rx.ReceiveFuncs() {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			in := make([]link.Message, linkTrains)
			for i := range in {
				in[i].Buf = link.GetTrainBuffer()[:]
			}
			for {
				for i := range in {
					in[i].Buf = in[i].Buf[:cap(in[i].Buf)]
				}
				n, err := fn(in)
				if err != nil {
					return
				}
				for _, m := range in[:n] {
					f := byPort[m.Addr.Port()]
					if f == nil || (m.SegSize == 0 && len(m.Buf) != size) {
						continue
					}
					got := f.got.Add(int64(m.NumSegments()))
					for f.back.Load() < got/batch {
						f.back.Add(1)
						f.credits <- struct{}{}
					}
					if received.Add(int64(m.NumSegments())) == total {
						close(done)
					}
				}
			}
		}()
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var swg sync.WaitGroup
	for i, f := range flows {
		share := total / 2
		if i == 1 {
			share = total - total/2
		}
		swg.Add(1)
		go func() {
			defer swg.Done()
			for sent := int64(0); sent < share; {
				select {
				case <-f.credits:
				case <-done:
					return
				}
				n := min(batch, share-sent)
				k := 0
				for left := n; left > 0; k++ {
					d := min(left, int64(segs))
					f.out[k].Buf = payload[:d*int64(size)]
					left -= d
				}
				if _, err := f.tx.WriteBatch(f.out[:k]); err != nil {
					b.Error(err)
					return
				}
				sent += n
			}
		}()
	}
	select {
	case <-done:
	case <-time.After(time.Duration(b.N/10000+10) * time.Second):
		b.Fatalf("received %d of %d datagrams (lost?)", received.Load(), total)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	swg.Wait()
	rx.Close()
	rwg.Wait()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pkts/s")
}

// placeFlows opens two sending links whose flows the kernel puts on
// different reader sockets of rx (any two for one reader): each candidate
// sends a probe and the reader that gets it is its socket.
func placeFlows(rx *link.UDP, readers int) ([]*flowSender, error) {
	fns := rx.ReceiveFuncs()
	type hit struct {
		port   uint16
		reader int
	}
	hits := make(chan hit, 64)
	var wg sync.WaitGroup
	for r, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := []link.Message{{Buf: make([]byte, link.MaxDatagram)}}
			for {
				in[0].Buf = in[0].Buf[:cap(in[0].Buf)]
				if _, err := fn(in); err != nil || string(in[0].Buf) == "stop" {
					return
				}
				hits <- hit{in[0].Addr.Port(), r}
			}
		}()
	}
	var flows []*flowSender
	var spare []*link.UDP
	taken := map[int]bool{}
	for try := 0; try < 32 && len(flows) < 2; try++ {
		tx, err := link.ListenUDP(netip.AddrPortFrom(addrA, 0), link.Config{})
		if err != nil {
			return nil, err
		}
		if _, err := tx.WriteBatch([]link.Message{{Buf: []byte("probe"), Addr: rx.LocalAddr()}}); err != nil {
			return nil, err
		}
		h := <-hits
		if readers == 1 || !taken[h.reader] {
			taken[h.reader] = true
			flows = append(flows, &flowSender{tx: tx})
		} else {
			spare = append(spare, tx)
		}
	}
	for _, s := range spare {
		s.Close()
	}
	if len(flows) < 2 {
		return nil, fmt.Errorf("32 flows all landed on one of %d SO_REUSEPORT sockets", readers)
	}
	// Each prober ends on a "stop" from the flow placed on it.
	for _, f := range flows[:readers] {
		if _, err := f.tx.WriteBatch([]link.Message{{Buf: []byte("stop"), Addr: rx.LocalAddr()}}); err != nil {
			return nil, err
		}
	}
	wg.Wait()
	return flows, nil
}
