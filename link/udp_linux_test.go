//go:build linux

package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/goroce/goroce/internal/testsupport/parked"
)

func listen(t testing.TB, addr string, cfg Config) *UDP {
	t.Helper()
	u, err := ListenUDP(netip.MustParseAddrPort(addr), cfg)
	if err != nil {
		if errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT) {
			t.Skipf("address %s not available here: %v", addr, err)
		}
		t.Fatalf("ListenUDP(%s): %v", addr, err)
	}
	t.Cleanup(func() { u.Close() })
	return u
}

func newMsgs(n int) []Message {
	msgs := make([]Message, n)
	for i := range msgs {
		msgs[i].Buf = GetBuffer()[:]
	}
	return msgs
}

// readN reads until n datagrams arrived or the deadline passes.
func readN(t testing.TB, l Link, n int) []Message {
	t.Helper()
	type result struct {
		got []Message
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var got []Message
		msgs := newMsgs(l.BatchSize())
		for len(got) < n {
			k, err := l.ReadBatch(msgs)
			if err != nil {
				ch <- result{got, err}
				return
			}
			for _, m := range msgs[:k] {
				m.Buf = bytes.Clone(m.Buf)
				got = append(got, m)
			}
		}
		ch <- result{got, nil}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("ReadBatch after %d datagrams: %v", len(r.got), r.err)
		}
		return r.got
	case <-time.After(5 * time.Second):
		l.Close()
		t.Fatalf("timed out waiting for %d datagrams", n)
		return nil
	}
}

func TestUDPLoopback(t *testing.T) {
	tests := []struct {
		name     string
		a, b     string
		batch, n int
		size     int
		wantTOS  bool
	}{
		{name: "ipv4 one", a: "127.0.0.1:0", b: "127.0.0.2:0", batch: 8, n: 1, size: 64},
		{name: "ipv4 batch spanning calls", a: "127.0.0.1:0", b: "127.0.0.2:0", batch: 8, n: 50, size: 1024},
		{name: "ipv4 max datagram", a: "127.0.0.1:0", b: "127.0.0.2:0", batch: 4, n: 4, size: MaxDatagram},
		{name: "ipv4 empty datagram", a: "127.0.0.1:0", b: "127.0.0.2:0", batch: 4, n: 2, size: 0},
		{name: "ipv6 batch", a: "[::1]:0", b: "[::1]:0", batch: 16, n: 40, size: 256},
		{name: "ipv6 max datagram", a: "[::1]:0", b: "[::1]:0", batch: 4, n: 3, size: MaxDatagram},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := listen(t, tt.a, Config{BatchSize: tt.batch})
			b := listen(t, tt.b, Config{BatchSize: tt.batch})
			out := make([]Message, tt.n)
			for i := range out {
				buf := make([]byte, tt.size)
				for j := range buf {
					buf[j] = byte(i + j)
				}
				if tt.size >= 2 {
					binary.BigEndian.PutUint16(buf, uint16(i))
				}
				out[i] = Message{Buf: buf, Addr: b.LocalAddr()}
			}
			n, err := a.WriteBatch(out)
			if n != tt.n || err != nil {
				t.Fatalf("WriteBatch = %d, %v; want %d, nil", n, err, tt.n)
			}
			got := readN(t, b, tt.n)
			for i, m := range got {
				if m.Addr != a.LocalAddr() {
					t.Errorf("datagram %d: Addr %v, want %v", i, m.Addr, a.LocalAddr())
				}
				if m.Local != b.LocalAddr().Addr() {
					t.Errorf("datagram %d: Local %v, want %v (PKTINFO)", i, m.Local, b.LocalAddr().Addr())
				}
				// Loopback keeps order, so datagram i is out[i].
				if !bytes.Equal(m.Buf, out[i].Buf) {
					t.Errorf("datagram %d: payload differs (len %d, want %d)", i, len(m.Buf), len(out[i].Buf))
				}
			}
		})
	}
}

func TestUDPListenErrors(t *testing.T) {
	held := listen(t, "127.0.0.1:0", Config{})
	tests := []struct {
		addr string
		want error
	}{
		{held.LocalAddr().String(), syscall.EADDRINUSE},
		{"0.0.0.0:0", syscall.EINVAL},
		{"[::]:0", syscall.EINVAL},
		{"224.0.0.1:0", syscall.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			u, err := ListenUDP(netip.MustParseAddrPort(tt.addr), Config{})
			if err == nil {
				u.Close()
				t.Fatalf("ListenUDP(%s) succeeded, want %v", tt.addr, tt.want)
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("ListenUDP(%s) = %v, want errors.Is %v", tt.addr, err, tt.want)
			}
		})
	}
}

func TestUDPCloseUnblocksRead(t *testing.T) {
	u := listen(t, "127.0.0.1:0", Config{})
	errc := make(chan error, 1)
	go func() {
		_, err := u.ReadBatch(newMsgs(4))
		errc <- err
	}()
	parked.Wait(t, "link.(*UDP).ReadBatch", 1, 10*time.Second) // the reader sleeps in the netpoller
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadBatch still blocked 5s after Close")
	}
	if err := u.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if _, err := u.WriteBatch([]Message{{Buf: []byte{1}, Addr: u.LocalAddr()}}); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("WriteBatch after Close = %v, want net.ErrClosed", err)
	}
}

// rmemAlloc is the receive memory the kernel charges u's main socket
// (SO_MEMINFO's first field, SK_MEMINFO_RMEM_ALLOC): it grows with each
// datagram queued and shrinks only when one is read.
func rmemAlloc(t *testing.T, u *UDP) int {
	t.Helper()
	var v int
	var err error
	if cerr := u.readers[0].rc.Control(func(fd uintptr) { v, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MEMINFO) }); cerr != nil {
		t.Fatal(cerr)
	}
	if err != nil {
		t.Fatalf("SO_MEMINFO: %v", err)
	}
	return v
}

func TestUDPWriteWrongFamily(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Config{})
	b := listen(t, "127.0.0.2:0", Config{})
	msgs := []Message{
		{Buf: []byte("ok"), Addr: b.LocalAddr()},
		{Buf: []byte("v6"), Addr: netip.MustParseAddrPort("[::1]:4791")},
		{Buf: []byte("never"), Addr: b.LocalAddr()},
	}
	n, err := a.WriteBatch(msgs)
	if n != 1 || !errors.Is(err, syscall.EAFNOSUPPORT) {
		t.Fatalf("WriteBatch = %d, %v; want 1, EAFNOSUPPORT", n, err)
	}
	if got := readN(t, b, 1); string(got[0].Buf) != "ok" {
		t.Fatalf("got %q", got[0].Buf)
	}
	// An IPv4-mapped destination is fine on an IPv4 link.
	mapped := netip.AddrPortFrom(netip.AddrFrom16(b.LocalAddr().Addr().As16()), b.LocalAddr().Port())
	if n, err := a.WriteBatch([]Message{{Buf: []byte("mapped"), Addr: mapped}}); n != 1 || err != nil {
		t.Fatalf("WriteBatch to %v = %d, %v", mapped, n, err)
	}
	if got := readN(t, b, 1); string(got[0].Buf) != "mapped" {
		t.Fatalf("got %q", got[0].Buf)
	}
}

func TestUDPTruncatedDropped(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Config{})
	b := listen(t, "127.0.0.2:0", Config{BatchSize: 1})
	if _, err := a.WriteBatch([]Message{
		{Buf: make([]byte, 100), Addr: b.LocalAddr()},
		{Buf: []byte("short"), Addr: b.LocalAddr()},
	}); err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{Buf: make([]byte, 0, 16)}}
	n, err := b.ReadBatch(msgs)
	if err != nil || n != 1 || string(msgs[0].Buf) != "short" {
		t.Fatalf("ReadBatch = %d, %v, %q; want the short datagram only", n, err, msgs[0].Buf)
	}
	if b.Truncated() != 1 {
		t.Fatalf("Truncated = %d, want 1", b.Truncated())
	}
}

// TestUDPTruncatedKeepsBuffers: a datagram dropped inside a batch is compacted
// away by copying, so msgs[i].Buf still points into the buffer the caller put in
// slot i (the engine hands its own buffer i on with msgs[i]'s length).
func TestUDPTruncatedKeepsBuffers(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Config{})
	b := listen(t, "127.0.0.2:0", Config{BatchSize: 2})
	// Both queued before the read, so one recvmmsg takes both: each send
	// waits until the socket's receive memory grew by its datagram.
	for _, d := range [][]byte{make([]byte, 100), []byte("short")} {
		before := rmemAlloc(t, b)
		if _, err := a.WriteBatch([]Message{{Buf: d, Addr: b.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); rmemAlloc(t, b) <= before; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("a %d-byte datagram not queued on the receiver after 10 s", len(d))
			}
		}
	}
	bufs := [][]byte{make([]byte, 16), make([]byte, 16)}
	msgs := []Message{{Buf: bufs[0]}, {Buf: bufs[1]}}
	n, err := b.ReadBatch(msgs)
	if err != nil || n != 1 || string(msgs[0].Buf) != "short" {
		t.Fatalf("ReadBatch = %d, %v, %q; want the short datagram only", n, err, msgs[0].Buf)
	}
	for i := range msgs {
		if &msgs[i].Buf[:1][0] != &bufs[i][0] {
			t.Errorf("msgs[%d].Buf moved to another slot's buffer", i)
		}
	}
	if string(bufs[0][:5]) != "short" {
		t.Errorf("caller's buffer 0 holds %q", bufs[0][:5])
	}
}

// TestUDPZeroChecksum6 sends IPv6 datagrams with UDP checksum 0, as rxe does.
// Our link must accept them (UDP_NO_CHECK6_RX); a plain socket, the control,
// must not.
func TestUDPZeroChecksum6(t *testing.T) {
	tx := listen(t, "[::1]:0", Config{ZeroChecksum6: true})
	rx := listen(t, "[::1]:0", Config{})
	plain, err := net.ListenUDP("udp6", &net.UDPAddr{IP: net.IPv6loopback})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plainAddr := plain.LocalAddr().(*net.UDPAddr).AddrPort()

	if _, err := tx.WriteBatch([]Message{
		{Buf: []byte("to plain"), Addr: plainAddr},
		{Buf: []byte("to link"), Addr: rx.LocalAddr()},
	}); err != nil {
		t.Fatal(err)
	}
	if got := readN(t, rx, 1); string(got[0].Buf) != "to link" {
		t.Fatalf("link got %q", got[0].Buf)
	}
	plain.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var b [64]byte
	if n, _, err := plain.ReadFromUDP(b[:]); err == nil {
		t.Fatalf("a socket without UDP_NO_CHECK6_RX received %q: the sender did not zero the checksum, so this test proves nothing", b[:n])
	}
}

func TestUDPSocketBuffers(t *testing.T) {
	u := listen(t, "127.0.0.1:0", Config{SocketBuffer: 1 << 20})
	r, s := u.SocketBuffers()
	t.Logf("SO_RCVBUF %d, SO_SNDBUF %d", r, s)
	if r < 1<<20 || s < 1<<20 {
		// Without CAP_NET_ADMIN the kernel clamps to net.core.*mem_max.
		if unix.Geteuid() == 0 {
			t.Fatalf("as root, got SO_RCVBUF %d SO_SNDBUF %d, want >= 1 MiB", r, s)
		}
		t.Skip("not root: buffers clamped by net.core.rmem_max/wmem_max")
	}
}

// TestUDPZeroAlloc proves the steady-state data path does not allocate: a
// batch written and read back over loopback, as plain datagrams, as GSO
// trains with gather lists and header fields read one datagram each, and as
// trains read whole with GRO.
func TestUDPZeroAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under -race")
	}
	const batch = 16
	tests := []struct {
		name  string
		train bool
		big   bool // MaxTrain read buffers: GRO
	}{{"plain", false, false}, {"trains", true, false}, {"trains with GRO", true, true}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := listen(t, "127.0.0.1:0", Config{BatchSize: batch})
			b := listen(t, "127.0.0.2:0", Config{BatchSize: batch})
			out := make([]Message, batch)
			datagrams := batch
			for i := range out {
				out[i] = Message{Buf: make([]byte, 1024), Addr: b.LocalAddr()}
			}
			if tt.train {
				tr := newTrain(a.LocalAddr(), b.LocalAddr(), 1000, 4, 0)
				out = out[:2]
				for i := range out {
					out[i] = tr.msg(b.LocalAddr())
					out[i].TOS, out[i].TTL = 0x02, 7
				}
				datagrams = 8
			}
			in := newMsgs(batch)
			if tt.big {
				for i := range in {
					in[i].Buf = GetTrainBuffer()[:]
				}
			}
			round := func() {
				if n, err := a.WriteBatch(out); n != len(out) || err != nil {
					t.Fatalf("WriteBatch = %d, %v", n, err)
				}
				for got := 0; got < datagrams; {
					n, err := b.ReadBatch(in)
					if err != nil {
						t.Fatal(err)
					}
					for _, m := range in[:n] {
						got += m.NumSegments()
						m.Buf = m.Buf[:cap(m.Buf)]
					}
				}
			}
			round() // warm the pools
			if allocs := testing.AllocsPerRun(100, round); allocs != 0 {
				t.Fatalf("%v allocations per %d-datagram write+read round, want 0", allocs, datagrams)
			}
			if c := b.Counters(); tt.big && c.GROTrains == 0 {
				t.Fatalf("no GRO train received: %+v", c)
			}
		})
	}
}

// TestIPv4IDZeroOnWire captures on lo with an AF_PACKET socket and checks the
// IPv4 header the kernel built for our datagrams: ID 0 and DF, so the ICRC
// the engine computes with those values verifies at the peer. A connected
// socket, the control, gets nonzero IDs on the same capture.
func TestIPv4IDZeroOnWire(t *testing.T) {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Skipf("no lo interface: %v", err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
	if err != nil {
		t.Skipf("AF_PACKET capture needs CAP_NET_RAW (run as root): %v", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: lo.Index}); err != nil {
		t.Fatalf("bind AF_PACKET to lo: %v", err)
	}
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}

	a := listen(t, "127.0.0.1:0", Config{})
	b := listen(t, "127.0.0.2:0", Config{})
	// lo carries every other test's traffic too: without a filter the
	// capture socket's queue overflows on a busy machine and drops ours.
	filterUDPDstPort(t, fd, b.LocalAddr().Port())
	// A RoCE-shaped payload whose ICRC assumes ID 0 + DF, as the engine will.
	payload := make([]byte, 12+8+4)
	payload[0] = 0x64 // UD SEND ONLY
	binary.BigEndian.PutUint16(payload[2:], 0xffff)
	copy(payload[12:], fmt.Sprintf("id0-%08d", time.Now().UnixNano()%1e8))
	assumed := ipv4Header(a.LocalAddr(), b.LocalAddr(), len(payload), 0, 0x4000)
	binary.LittleEndian.PutUint32(payload[len(payload)-4:], icrcV4(assumed, payload))

	for i := 0; i < 3; i++ {
		if _, err := a.WriteBatch([]Message{{Buf: payload, Addr: b.LocalAddr()}}); err != nil {
			t.Fatal(err)
		}
	}
	hdrs := capture(t, fd, payload, 3)
	for i, h := range hdrs {
		id, flags := binary.BigEndian.Uint16(h[4:6]), binary.BigEndian.Uint16(h[6:8])
		t.Logf("link datagram %d: IPv4 ID %#04x flags/frag %#04x TTL %d", i, id, flags, h[8])
		if id != 0 || flags != 0x4000 {
			t.Errorf("datagram %d: IPv4 ID %#x flags %#x, want ID 0 and DF (0x4000)", i, id, flags)
		}
		if got, want := icrcV4(h, payload), binary.LittleEndian.Uint32(payload[len(payload)-4:]); got != want {
			t.Errorf("datagram %d: ICRC over the wire header %#08x, over the assumed header %#08x", i, got, want)
		}
	}

	// Control: a connected socket draws IDs from a per-socket counter.
	c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, net.UDPAddrFromAddrPort(b.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	marker := append([]byte("control-"), payload[12:24]...)
	for i := 0; i < 3; i++ {
		if _, err := c.Write(marker); err != nil {
			t.Fatal(err)
		}
	}
	nonzero := 0
	for _, h := range capture(t, fd, marker, 3) {
		if binary.BigEndian.Uint16(h[4:6]) != 0 {
			nonzero++
		}
	}
	if nonzero == 0 {
		t.Fatal("connected-socket control also showed ID 0 three times: the capture cannot tell the difference")
	}
}

// capture reads IPv4 packets from an AF_PACKET socket until n UDP datagrams
// with exactly this payload were seen, and returns their IP+UDP headers.
func capture(t *testing.T, fd int, payload []byte, n int) [][]byte {
	t.Helper()
	var hdrs [][]byte
	buf := make([]byte, 65536)
	deadline := time.Now().Add(5 * time.Second)
	for len(hdrs) < n && time.Now().Before(deadline) {
		k, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			t.Fatalf("recvfrom AF_PACKET: %v", err)
		}
		p := buf[:k]
		if len(p) < 28 || p[0]>>4 != 4 || p[9] != syscall.IPPROTO_UDP {
			continue
		}
		ihl := int(p[0]&0x0f) * 4
		if len(p) < ihl+8 || !bytes.Equal(p[ihl+8:], payload) {
			continue
		}
		hdrs = append(hdrs, bytes.Clone(p[:ihl+8]))
	}
	if len(hdrs) < n {
		t.Fatalf("captured %d of %d datagrams on lo", len(hdrs), n)
	}
	return hdrs
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// filterUDPDstPort attaches a classic BPF filter to an AF_PACKET socket
// (SOCK_DGRAM, so data starts at the IPv4 header) that keeps only unfragmented
// IPv4 UDP datagrams to port.
func filterUDPDstPort(t *testing.T, fd int, port uint16) {
	t.Helper()
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 1},                       // version/IHL
		bpf.ALUOpConstant{Op: bpf.ALUOpShiftRight, Val: 4},      // version
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: 4, SkipTrue: 7}, // not IPv4: drop
		bpf.LoadAbsolute{Off: 9, Size: 1},                       // protocol
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.IPPROTO_UDP, SkipTrue: 5},
		bpf.LoadAbsolute{Off: 6, Size: 2}, // flags/fragment offset
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: 3},
		bpf.LoadMemShift{Off: 0}, // X = IHL*4
		bpf.LoadIndirect{Off: 2, Size: 2},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(port), SkipTrue: 1},
		bpf.RetConstant{Val: 0},
		bpf.RetConstant{Val: 0xFFFF},
	})
	if err != nil {
		t.Fatal(err)
	}
	raw := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		raw[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(raw)), Filter: &raw[0]}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fprog); err != nil {
		t.Fatalf("attach BPF filter: %v", err)
	}
	// Drain what queued before the filter was attached.
	buf := make([]byte, 1<<16)
	for {
		if _, _, err := unix.Recvfrom(fd, buf, unix.MSG_DONTWAIT); err != nil {
			return
		}
	}
}

// ipv4Header builds the IPv4+UDP headers Linux should send for a datagram.
func ipv4Header(src, dst netip.AddrPort, payloadLen int, id, flags uint16) []byte {
	h := make([]byte, 20)
	h[0] = 0x45
	binary.BigEndian.PutUint16(h[2:], uint16(20+8+payloadLen))
	binary.BigEndian.PutUint16(h[4:], id)
	binary.BigEndian.PutUint16(h[6:], flags)
	h[8] = 64
	h[9] = syscall.IPPROTO_UDP
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(h[12:], s[:])
	copy(h[16:], d[:])
	// The UDP header is covered by the ICRC too.
	h = binary.BigEndian.AppendUint16(h, src.Port())
	h = binary.BigEndian.AppendUint16(h, dst.Port())
	h = binary.BigEndian.AppendUint16(h, uint16(8+payloadLen))
	return append(h, 0, 0)
}

// TestUDPConcurrent runs several writers against one reader, the engine's
// pattern (shards write, one goroutine reads), under -race in CI.
func TestUDPConcurrent(t *testing.T) {
	const writers, each = 4, 200
	a := listen(t, "127.0.0.1:0", Config{BatchSize: 8})
	b := listen(t, "127.0.0.2:0", Config{BatchSize: 8})
	done := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			for i := 0; i < each; i += 10 {
				batch := make([]Message, 10)
				for j := range batch {
					batch[j] = Message{Buf: []byte{byte(w), byte(i + j)}, Addr: b.LocalAddr()}
				}
				if _, err := a.WriteBatch(batch); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	got := readN(t, b, writers*each)
	for w := 0; w < writers; w++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	var seen [writers][each]bool
	for _, m := range got {
		if len(m.Buf) != 2 || seen[m.Buf[0]][m.Buf[1]] {
			t.Fatalf("unexpected or duplicate datagram %v", m.Buf)
		}
		seen[m.Buf[0]][m.Buf[1]] = true
	}
}

// TestUDPReceiveTOS checks the TOS / traffic class (ECN bits included) the
// sender set reaches Message.TOS, for DCQCN later.
func TestUDPReceiveTOS(t *testing.T) {
	tests := []struct {
		name, local, sender string
		level, opt          int
	}{
		{"ipv4", "127.0.0.2:0", "127.0.0.1:0", unix.IPPROTO_IP, unix.IP_TOS},
		{"ipv6", "[::1]:0", "[::1]:0", unix.IPPROTO_IPV6, unix.IPV6_TCLASS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rx := listen(t, tt.local, Config{})
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(tt.sender)))
			if err != nil {
				t.Skip(err)
			}
			defer c.Close()
			rc, _ := c.SyscallConn()
			var serr error
			rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), tt.level, tt.opt, 0xb9) }) // DSCP 46 (EF), ECN ECT(1)
			if serr != nil {
				t.Fatal(serr)
			}
			if _, err := c.WriteToUDPAddrPort([]byte("tos"), rx.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			if got := readN(t, rx, 1)[0]; got.TOS != 0xb9 {
				t.Fatalf("TOS %#x, want 0xb9", got.TOS)
			}
		})
	}
}
