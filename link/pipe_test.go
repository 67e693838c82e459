package link_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/goroce/goroce/link"
)

var (
	addrA = netip.MustParseAddrPort("10.0.0.1:4791")
	addrB = netip.MustParseAddrPort("10.0.0.2:4791")
)

func msgs(n int) []link.Message {
	m := make([]link.Message, n)
	for i := range m {
		m[i].Buf = link.GetBuffer()[:]
	}
	return m
}

// numbered returns n datagrams carrying their index in the first 4 bytes.
func numbered(n int, dst netip.AddrPort) []link.Message {
	out := make([]link.Message, n)
	for i := range out {
		b := make([]byte, 16)
		binary.BigEndian.PutUint32(b, uint32(i))
		out[i] = link.Message{Buf: b, Addr: dst}
	}
	return out
}

func TestPipe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := link.Pipe(addrA, addrB)
		defer a.Close()
		defer b.Close()
		if n, err := a.WriteBatch(numbered(100, addrB)); n != 100 || err != nil {
			t.Fatalf("WriteBatch = %d, %v", n, err)
		}
		in := msgs(8)
		n, err := b.ReadBatch(in)
		if err != nil || n != 8 {
			t.Fatalf("ReadBatch = %d, %v; want a full batch of 8", n, err)
		}
		for i, m := range in[:n] {
			if m.Addr != addrA || m.Local != addrB.Addr() || binary.BigEndian.Uint32(m.Buf) != uint32(i) || len(m.Buf) != 16 {
				t.Fatalf("datagram %d: %+v", i, m)
			}
		}
		// And the other direction.
		if _, err := b.WriteBatch([]link.Message{{Buf: []byte("pong"), Addr: addrA}}); err != nil {
			t.Fatal(err)
		}
		if n, err := a.ReadBatch(in[:1]); n != 1 || err != nil || string(in[0].Buf) != "pong" || in[0].Addr != addrB {
			t.Fatalf("reverse ReadBatch = %d, %v, %+v", n, err, in[0])
		}
	})
}

func TestPipeCloseUnblocksRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := link.Pipe(addrA, addrB)
		defer a.Close()
		errc := make(chan error, 1)
		go func() {
			_, err := b.ReadBatch(msgs(1))
			errc <- err
		}()
		synctest.Wait() // the reader is durably blocked
		select {
		case err := <-errc:
			t.Fatalf("ReadBatch returned early: %v", err)
		default:
		}
		b.Close()
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close = %v, want net.ErrClosed", err)
		}
		// Writes to a closed peer vanish; writes on a closed end fail.
		if n, err := a.WriteBatch(numbered(1, addrB)); n != 1 || err != nil {
			t.Fatalf("write to closed peer = %d, %v", n, err)
		}
		if _, err := b.WriteBatch(numbered(1, addrA)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write on closed end = %v", err)
		}
	})
}

func TestPipeFullQueueDrops(t *testing.T) {
	a, b := link.Pipe(addrA, addrB)
	defer a.Close()
	defer b.Close()
	a.WriteBatch(numbered(link.PipeQueueLen+10, addrB))
	if got := b.(*link.PipeEnd).Dropped(); got != 10 {
		t.Fatalf("Dropped = %d, want 10", got)
	}
}

// pipeTrain is three segments of 100, 100 and 30 bytes given as a gather
// list of two pieces per segment.
func pipeTrain() (link.Message, [][]byte) {
	var segs, pieces [][]byte
	for i, n := range []int{100, 100, 30} {
		s := bytes.Repeat([]byte{byte(i + 1)}, n)
		segs = append(segs, s)
		pieces = append(pieces, s[:10], s[10:])
	}
	return link.Message{Pieces: pieces, SegSize: 100, Addr: addrB, TOS: 0x02, TTL: 0, FlowLabel: 0x55}, segs
}

// TestPipeTrainsAndFields: a train arrives segment by segment, with the
// message's TOS (TTL 0 arriving as 64, the kernel's default), or whole once
// the reader passes MaxTrain buffers (GRO); NoGRO keeps it in segments.
func TestPipeTrainsAndFields(t *testing.T) {
	for _, noGRO := range []bool{false, true} {
		a, b := link.NewPipe(addrA, addrB, link.PipeConfig{}, link.PipeConfig{NoGRO: noGRO})
		m, segs := pipeTrain()
		if _, err := a.WriteBatch([]link.Message{m}); err != nil {
			t.Fatal(err)
		}
		in := msgs(8)
		if n, err := b.ReadBatch(in); n != 3 || err != nil {
			t.Fatalf("ReadBatch = %d, %v; want 3 segments", n, err)
		}
		for i, g := range in[:3] {
			if !bytes.Equal(g.Buf, segs[i]) || g.SegSize != 0 || g.TOS != 0x02 || g.TTL != 64 || g.FlowLabel != 0 || g.Addr != addrA {
				t.Fatalf("segment %d: %d bytes SegSize %d TOS %#x TTL %d flow %#x from %v", i, len(g.Buf), g.SegSize, g.TOS, g.TTL, g.FlowLabel, g.Addr)
			}
		}
		big := []link.Message{{Buf: link.GetTrainBuffer()[:]}, {Buf: link.GetTrainBuffer()[:]}}
		a.WriteBatch([]link.Message{{Buf: []byte("x"), Addr: addrB}})
		b.ReadBatch(big) // the first big-buffer read turns GRO on
		m.TTL = 9
		a.WriteBatch([]link.Message{m})
		n, err := b.ReadBatch(big)
		if err != nil {
			t.Fatal(err)
		}
		if noGRO {
			if n != 2 || big[0].SegSize != 0 || !bytes.Equal(big[0].Buf, segs[0]) {
				t.Fatalf("NoGRO: %d messages, SegSize %d", n, big[0].SegSize)
			}
			continue
		}
		g := big[0]
		if n != 1 || g.SegSize != 100 || g.NumSegments() != 3 || g.TTL != 9 {
			t.Fatalf("GRO: %d messages, SegSize %d, %d segments, TTL %d", n, g.SegSize, g.NumSegments(), g.TTL)
		}
		for i := range segs {
			if !bytes.Equal(g.Segment(i), segs[i]) {
				t.Fatalf("GRO segment %d differs", i)
			}
		}
	}
}

// TestPipeReaders: with Readers 2 flows are spread over the two receive
// functions by source port, each flow on one, nothing lost or doubled.
func TestPipeReaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := link.NewPipe(addrA, addrB, link.PipeConfig{}, link.PipeConfig{Readers: 2})
		defer b.Close()
		var out []link.Message
		for port := uint16(50000); port < 50032; port++ {
			for i := range 5 {
				out = append(out, link.Message{Buf: []byte{byte(port), byte(i)}, Addr: addrB, SrcPort: port})
			}
		}
		a.WriteBatch(out)
		fns := link.ReceiveFuncs(b)
		if len(fns) != 2 {
			t.Fatalf("%d receive functions", len(fns))
		}
		seen := map[[2]byte]bool{}
		queueOf := map[uint16]int{}
		per := [2]int{}
		for q, fn := range fns {
			for { // read the queue until a read blocks (Close ends it)
				in := msgs(64)
				done := make(chan int, 1)
				go func() { n, _ := fn(in); done <- n }()
				synctest.Wait()
				var n int
				select {
				case n = <-done:
				default:
				}
				if n == 0 {
					break
				}
				for _, m := range in[:n] {
					k := [2]byte(m.Buf)
					if seen[k] {
						t.Fatalf("datagram %v twice", k)
					}
					seen[k] = true
					if r, ok := queueOf[m.Addr.Port()]; ok && r != q {
						t.Fatalf("port %d on both queues", m.Addr.Port())
					}
					queueOf[m.Addr.Port()] = q
					per[q]++
				}
			}
		}
		if len(seen) != len(out) || per[0] == 0 || per[1] == 0 {
			t.Fatalf("%d of %d datagrams, per queue %v", len(seen), len(out), per)
		}
	})
}

// TestPipeMulticast: a datagram to a group reaches the group function of
// each end that joined it, the sender's own included (multicast loopback),
// and not the unicast queue. After LeaveGroup the function ends with
// net.ErrClosed.
func TestPipeMulticast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := link.NewPipe(addrA, addrB, link.PipeConfig{}, link.PipeConfig{})
		defer a.Close()
		defer b.Close()
		group := netip.MustParseAddr("239.1.1.1")
		fb, err := b.JoinGroup(group)
		if err != nil {
			t.Fatal(err)
		}
		fa, err := a.JoinGroup(group)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.JoinGroup(group); !errors.Is(err, syscall.EEXIST) {
			t.Fatalf("second join = %v", err)
		}
		a.WriteBatch([]link.Message{{Buf: []byte("mc"), Addr: netip.AddrPortFrom(group, 4791)}})
		for name, fn := range map[string]link.ReceiveFunc{"peer": fb, "self": fa} {
			in := msgs(2)
			if n, err := fn(in); n != 1 || err != nil || string(in[0].Buf) != "mc" || in[0].Local != group || in[0].Addr != addrA {
				t.Fatalf("%s: %d, %v, %+v", name, n, err, in[0])
			}
		}
		errc := make(chan error, 1)
		go func() { _, err := b.ReadBatch(msgs(1)); errc <- err }()
		synctest.Wait()
		select {
		case err := <-errc:
			t.Fatalf("the unicast queue got something: %v", err)
		default:
		}
		go func() { _, err := fb(msgs(1)); errc <- err }()
		synctest.Wait()
		if err := b.LeaveGroup(group); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Fatalf("group read after leave = %v", err)
		}
		b.Close()
		<-errc
	})
}
