//go:build linux

package link

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// train is a RoCE-shaped train: segments of seg bytes (the last one last
// bytes if nonzero), each a 12-byte BTH-like header, data and a 4-byte ICRC
// trailer, given to the link as three pieces per segment (a gather list,
// as the engine will pass header, MR slice and ICRC).
type train struct {
	seg    int
	segs   [][]byte // what each datagram must look like on arrival
	pieces [][]byte
}

// newTrain builds n segments from src to dst. For IPv4 each ICRC is
// computed over the header the segment has on the wire: its own lengths and
// the ID TrainIPv4ID gives it, as the engine will.
func newTrain(src, dst netip.AddrPort, seg, n, last int) *train {
	tr := &train{seg: seg}
	for i := 0; i < n; i++ {
		size := seg
		if i == n-1 && last > 0 {
			size = last
		}
		b := make([]byte, size)
		b[0] = 0x64 // UD SEND ONLY
		binary.BigEndian.PutUint16(b[2:], 0xffff)
		binary.BigEndian.PutUint32(b[8:], uint32(i)) // the "PSN"
		for j := 12; j < size-4; j++ {
			b[j] = byte(i*7 + j)
		}
		if src.Addr().Is4() {
			h := ipv4Header(src, dst, size, TrainIPv4ID(seg, i), 0x4000)
			binary.LittleEndian.PutUint32(b[size-4:], icrcV4(h, b))
		}
		tr.segs = append(tr.segs, b)
		tr.pieces = append(tr.pieces, b[:12], b[12:size-4], b[size-4:])
	}
	return tr
}

func (tr *train) msg(dst netip.AddrPort) Message {
	return Message{Pieces: tr.pieces, SegSize: tr.seg, Addr: dst}
}

// readDatagrams reads n datagrams from fn with MaxDatagram buffers (so GRO
// stays off and the kernel hands each segment on its own).
func readDatagrams(t testing.TB, fn ReceiveFunc, batch, n int) []Message {
	t.Helper()
	var got []Message
	done := make(chan error, 1)
	go func() {
		msgs := newMsgs(batch)
		for len(got) < n {
			k, err := fn(msgs)
			if err != nil {
				done <- err
				return
			}
			for _, m := range msgs[:k] {
				m.Buf = bytes.Clone(m.Buf)
				got = append(got, m)
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("read after %d datagrams: %v", len(got), err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out: %d of %d datagrams", len(got), n)
	}
	return got
}

// TestTrainSegments sends trains through the kernel's UDP GSO (or one
// datagram per segment) to a reader without GRO and checks every segment
// arrives byte for byte, in order, with the counters saying how it went.
func TestTrainSegments(t *testing.T) {
	tests := []struct {
		name         string
		a, b         string
		cfg          Config
		seg, n, last int
		wantSends    uint64 // super-datagrams
	}{
		{name: "ipv4 full segments", a: "127.0.0.1:0", b: "127.0.0.2:0", seg: 4112, n: 4, wantSends: 1},
		{name: "ipv4 shorter last", a: "127.0.0.1:0", b: "127.0.0.2:0", seg: 4112, n: 5, last: 1000, wantSends: 1},
		{name: "ipv4 split at 15 segments of 4112", a: "127.0.0.1:0", b: "127.0.0.2:0", seg: 4112, n: 20, last: 100, wantSends: 2},
		{name: "ipv4 split at 64 segments", a: "127.0.0.1:0", b: "127.0.0.2:0", seg: 80, n: 130, last: 40, wantSends: 3},
		{name: "ipv4 one segment is a datagram", a: "127.0.0.1:0", b: "127.0.0.2:0", seg: 4112, n: 1, last: 600, wantSends: 0},
		{name: "ipv4 NoGSO re-keys ICRCs", a: "127.0.0.1:0", b: "127.0.0.2:0", cfg: Config{NoGSO: true}, seg: 4112, n: 18, last: 99},
		{name: "ipv6", a: "[::1]:0", b: "[::1]:0", seg: 4112, n: 17, last: 20, wantSends: 2},
		{name: "ipv6 zero checksum means no GSO", a: "[::1]:0", b: "[::1]:0", cfg: Config{ZeroChecksum6: true}, seg: 1024, n: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := listen(t, tt.a, tt.cfg)
			b := listen(t, tt.b, Config{})
			tr := newTrain(a.LocalAddr(), b.LocalAddr(), tt.seg, tt.n, tt.last)
			msgs := []Message{{Buf: []byte("before"), Addr: b.LocalAddr()}, tr.msg(b.LocalAddr()), {Buf: []byte("after"), Addr: b.LocalAddr()}}
			if n, err := a.WriteBatch(msgs); n != 3 || err != nil {
				t.Fatalf("WriteBatch = %d, %v", n, err)
			}
			got := readDatagrams(t, b.ReadBatch, 16, tt.n+2)
			if string(got[0].Buf) != "before" || string(got[tt.n+1].Buf) != "after" {
				t.Fatalf("the train's neighbours arrived as %q ... %q", got[0].Buf, got[tt.n+1].Buf)
			}
			for i, m := range got[1 : tt.n+1] {
				want := tr.segs[i]
				if !a.GSO() && a.LocalAddr().Addr().Is4() {
					// Sent alone, segment i has ID 0 on the wire: its ICRC must
					// be the one for ID 0.
					want = bytes.Clone(want)
					h := ipv4Header(a.LocalAddr(), b.LocalAddr(), len(want), 0, 0x4000)
					binary.LittleEndian.PutUint32(want[len(want)-4:], icrcV4(h, want))
				}
				if !bytes.Equal(m.Buf, want) {
					t.Fatalf("segment %d: %d bytes, want %d; equal up to the trailer: %v", i, len(m.Buf), len(want),
						len(m.Buf) == len(want) && bytes.Equal(m.Buf[:len(want)-4], want[:len(want)-4]))
				}
				if m.SegSize != 0 || m.Addr != a.LocalAddr() {
					t.Fatalf("segment %d: SegSize %d from %v", i, m.SegSize, m.Addr)
				}
			}
			c := a.Counters()
			wantSegs, wantAlone := uint64(tt.n), uint64(0)
			if tt.wantSends == 0 {
				wantSegs = 0
				if tt.n > 1 {
					wantAlone = uint64(tt.n)
				}
			}
			if c.GSOSends != tt.wantSends || c.GSOSegments != wantSegs || c.GSOFallbackSegments != wantAlone || c.GSOFallbacks != 0 {
				t.Fatalf("counters %+v; want %d super-datagrams of %d segments, %d alone", c, tt.wantSends, wantSegs, wantAlone)
			}
		})
	}
}

// TestGROTrain: a reader with MaxTrain buffers turns UDP_GRO on, and a GSO
// train on lo arrives as one message with its segment size (the kernel
// never splits it); Segment gives back each datagram byte for byte. A plain
// datagram still arrives on its own.
func TestGROTrain(t *testing.T) {
	for _, addrs := range [][2]string{{"127.0.0.1:0", "127.0.0.2:0"}, {"[::1]:0", "[::1]:0"}} {
		t.Run(addrs[0], func(t *testing.T) {
			a := listen(t, addrs[0], Config{})
			b := listen(t, addrs[1], Config{})
			in := make([]Message, 4)
			for i := range in {
				in[i].Buf = GetTrainBuffer()[:]
			}
			// The first big-buffer read turns GRO on: prime it with a datagram.
			if _, err := a.WriteBatch([]Message{{Buf: []byte("prime"), Addr: b.LocalAddr()}}); err != nil {
				t.Fatal(err)
			}
			if n, err := b.ReadBatch(in); n != 1 || err != nil || string(in[0].Buf) != "prime" {
				t.Fatalf("ReadBatch = %d, %v", n, err)
			}
			tr := newTrain(a.LocalAddr(), b.LocalAddr(), 4112, 11, 333)
			if _, err := a.WriteBatch([]Message{tr.msg(b.LocalAddr()), {Buf: []byte("plain"), Addr: b.LocalAddr()}}); err != nil {
				t.Fatal(err)
			}
			var got []Message
			for len(got) < 2 {
				n, err := b.ReadBatch(in)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, in[:n]...)
			}
			m := got[0]
			if m.SegSize != 4112 || m.NumSegments() != 11 || len(m.Buf) != 10*4112+333 {
				t.Fatalf("train arrived as %d bytes, SegSize %d (%d segments); want one GRO train of 11", len(m.Buf), m.SegSize, m.NumSegments())
			}
			for i := range 11 {
				if !bytes.Equal(m.Segment(i), tr.segs[i]) {
					t.Fatalf("segment %d differs", i)
				}
			}
			if got[1].SegSize != 0 || string(got[1].Buf) != "plain" {
				t.Fatalf("plain datagram arrived as %q SegSize %d", got[1].Buf, got[1].SegSize)
			}
			if c := b.Counters(); c.GROTrains != 1 || c.GROSegments != 11 {
				t.Fatalf("counters %+v", c)
			}
			// Reading GRO trains into small buffers drops them, counted.
			if _, err := a.WriteBatch([]Message{tr.msg(b.LocalAddr()), {Buf: []byte("fits"), Addr: b.LocalAddr()}}); err != nil {
				t.Fatal(err)
			}
			small := newMsgs(4)
			if n, err := b.ReadBatch(small); n != 1 || err != nil || string(small[0].Buf) != "fits" || b.Truncated() != 1 {
				t.Fatalf("small-buffer read = %d, %v, %q, Truncated %d", n, err, small[0].Buf, b.Truncated())
			}
		})
	}
}

// TestGRONoGRO: Config.NoGRO keeps GRO off even with MaxTrain buffers.
func TestGRONoGRO(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Config{})
	b := listen(t, "127.0.0.2:0", Config{NoGRO: true})
	tr := newTrain(a.LocalAddr(), b.LocalAddr(), 1000, 5, 0)
	if _, err := a.WriteBatch([]Message{tr.msg(b.LocalAddr())}); err != nil {
		t.Fatal(err)
	}
	in := []Message{{Buf: GetTrainBuffer()[:]}}
	got := readDatagrams(t, func(m []Message) (int, error) {
		in[0].Buf = in[0].Buf[:cap(in[0].Buf)]
		n, err := b.ReadBatch(in)
		copy(m, in[:n])
		return n, err
	}, 1, 5)
	for i, m := range got {
		if m.SegSize != 0 || !bytes.Equal(m.Buf, tr.segs[i]) {
			t.Fatalf("datagram %d: SegSize %d", i, m.SegSize)
		}
	}
}

// logRecorder is a slog handler that keeps messages.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) matching(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			n++
		}
	}
	return n
}

// TestGSOFallback: a socket without a UDP checksum (SO_NO_CHECK) makes the
// kernel refuse UDP_SEGMENT with EINVAL, as an old kernel, an IPsec route or
// a device without checksum offload do with EIO. The link sends the train
// one datagram per segment instead, re-keys each segment's ICRC to the ID 0
// it now gets, logs once, counts, and keeps GSO off. As root a capture on lo
// checks every datagram's IPv4 ID and ICRC on the wire.
func TestGSOFallback(t *testing.T) {
	rec := &logRecorder{}
	a := listen(t, "127.0.0.1:0", Config{Logger: slog.New(rec)})
	b := listen(t, "127.0.0.2:0", Config{})
	var serr error
	a.main.rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1) })
	if serr != nil {
		t.Fatal(serr)
	}
	var sn *sniffer
	if unix.Geteuid() == 0 {
		sn = sniff(t, loIndex(t), b.LocalAddr().Port())
	}
	const n = 20
	tr := newTrain(a.LocalAddr(), b.LocalAddr(), 4112, n, 500)
	for round := 0; round < 2; round++ {
		if k, err := a.WriteBatch([]Message{tr.msg(b.LocalAddr())}); k != 1 || err != nil {
			t.Fatalf("round %d: WriteBatch = %d, %v", round, k, err)
		}
		got := readDatagrams(t, b.ReadBatch, 16, n)
		for i, m := range got {
			if len(m.Buf) != len(tr.segs[i]) || !bytes.Equal(m.Buf[:len(m.Buf)-4], tr.segs[i][:len(m.Buf)-4]) {
				t.Fatalf("round %d segment %d differs", round, i)
			}
		}
		if sn != nil {
			pkts := sn.collect(b.LocalAddr().Port(), n)
			if len(pkts) != n {
				t.Fatalf("captured %d of %d datagrams", len(pkts), n)
			}
			for i, p := range pkts {
				if p.ipv4ID() != 0 || !p.ipv4ChecksumOK() {
					t.Errorf("datagram %d: ID %d, header checksum ok %v", i, p.ipv4ID(), p.ipv4ChecksumOK())
				}
				if got, want := binary.LittleEndian.Uint32(p.payload[len(p.payload)-4:]), icrcV4(p.ipUDP, p.payload); got != want {
					t.Errorf("datagram %d: ICRC %#08x, over its wire header %#08x", i, got, want)
				}
			}
		} else {
			t.Log("not root: the wire check of IDs and ICRCs is skipped")
		}
	}
	c := a.Counters()
	if a.GSO() || c.GSOFallbacks != 1 || c.GSOFallbackSegments != 2*n || c.GSOSends != 0 {
		t.Fatalf("GSO %v, counters %+v; want GSO off after 1 refusal, %d segments sent alone", a.GSO(), c, 2*n)
	}
	if k := rec.matching("refused UDP GSO"); k != 1 {
		t.Fatalf("logged the refusal %d times, want once: %q", k, rec.msgs)
	}
}

func loIndex(t *testing.T) int {
	t.Helper()
	idx := interfaceOf(netip.MustParseAddr("127.0.0.1"), 0)
	if idx == 0 {
		t.Skip("no loopback interface")
	}
	return idx
}

// TestICRCIDDelta checks the re-keying against ICRCs computed from scratch.
func TestICRCIDDelta(t *testing.T) {
	src, dst := netip.MustParseAddrPort("192.0.2.1:49152"), netip.MustParseAddrPort("192.0.2.2:4791")
	for _, tt := range []struct {
		n    int
		a, b uint16
	}{{16, 1, 0}, {4112, 14, 0}, {4112, 0, 14}, {80, 63, 5}, {65000, 0xffff, 0x1234}, {100, 7, 7}} {
		p := make([]byte, tt.n)
		for i := range p {
			p[i] = byte(i * 13)
		}
		ca := icrcV4(ipv4Header(src, dst, tt.n, tt.a, 0x4000), p)
		cb := icrcV4(ipv4Header(src, dst, tt.n, tt.b, 0x4000), p)
		if d := ICRCIDDelta(tt.n, tt.a, tt.b); ca^d != cb {
			t.Errorf("n %d, ID %d -> %d: delta %#08x, want %#08x", tt.n, tt.a, tt.b, d, ca^cb)
		}
	}
}

func TestTrainIPv4ID(t *testing.T) {
	for _, tt := range []struct {
		seg, i int
		want   uint16
	}{{4112, 0, 0}, {4112, 14, 14}, {4112, 15, 0}, {4112, 31, 1}, {80, 63, 63}, {80, 64, 0}, {65507, 3, 0}, {100000, 2, 0}} {
		if got := TrainIPv4ID(tt.seg, tt.i); got != tt.want {
			t.Errorf("TrainIPv4ID(%d, %d) = %d, want %d", tt.seg, tt.i, got, tt.want)
		}
	}
	if GSOSegments(4112) != 15 || GSOSegments(80) != 64 || GSOSegments(0) != 1 {
		t.Fatalf("GSOSegments = %d, %d, %d", GSOSegments(4112), GSOSegments(80), GSOSegments(0))
	}
}

// TestGSOSegmentIDsOnWire proves the IPv4 ID rule on a path that really
// segments: two namespaces joined by a veth pair whose sending end has UDP
// segmentation offload off (ethtool tx-udp-segmentation), so the kernel
// splits each super-datagram in software before the device, where an
// AF_PACKET socket sees the segments with the headers the kernel wrote.
// Every segment's ID must be TrainIPv4ID, its header checksum valid, and
// the ICRC the test computed with that ID must verify over the wire header.
// The control turns the offload back on: then one super-datagram leaves,
// which shows the capture tells the two apart.
func TestGSOSegmentIDsOnWire(t *testing.T) {
	nsA, nsB := newNetns(t), newNetns(t)
	vethPair(nsA, nsB, "gva", "gvb", []string{"10.201.0.1/24", "fd00:201::1/64"}, []string{"10.201.0.2/24", "fd00:201::2/64"})
	for _, fam := range []struct{ a, b string }{{"10.201.0.1:4791", "10.201.0.2:4791"}, {"[fd00:201::1]:4791", "[fd00:201::2]:4791"}} {
		t.Run(fam.a, func(t *testing.T) {
			nsA.In(t, func() error { return ethtoolFeature("gva", "tx-udp-segmentation", false) })
			a, b := listenIn(nsA, t, fam.a, Config{}), listenIn(nsB, t, fam.b, Config{})
			sn := sniffIn(nsA, t, a.Interface())
			const n, seg = 60, 1200 // super-datagrams of 54 and 6
			tr := newTrain(a.LocalAddr(), b.LocalAddr(), seg, n, 700)
			for round := 0; round < 2; round++ { // IDs restart with every super-datagram
				if _, err := a.WriteBatch([]Message{tr.msg(b.LocalAddr())}); err != nil {
					t.Fatal(err)
				}
				got := readDatagrams(t, b.ReadBatch, 16, n)
				pkts := sn.collect(4791, n)
				if len(pkts) != n {
					t.Fatalf("round %d: captured %d of %d segments", round, len(pkts), n)
				}
				for i, p := range pkts {
					if !bytes.Equal(p.payload, tr.segs[i]) || !bytes.Equal(got[i].Buf, tr.segs[i]) {
						t.Fatalf("round %d segment %d: payload differs on the wire or at the receiver", round, i)
					}
					if p.is6() {
						continue // no ID; the ICRC masks everything that varies
					}
					if id := p.ipv4ID(); id != TrainIPv4ID(seg, i) || !p.ipv4ChecksumOK() {
						t.Errorf("round %d segment %d: IPv4 ID %d (want %d), header checksum ok %v", round, i, id, TrainIPv4ID(seg, i), p.ipv4ChecksumOK())
					}
					if got, want := binary.LittleEndian.Uint32(p.payload[len(p.payload)-4:]), icrcV4(p.ipUDP, p.payload); got != want {
						t.Errorf("round %d segment %d: ICRC %#08x, over the wire header %#08x", round, i, got, want)
					}
				}
				if ids := idsOf(pkts); len(ids) > 0 {
					t.Logf("round %d: %d segments on the wire; IPv4 IDs %v", round, n, ids)
				}
			}
			// Control: with the offload on, the veth carries the super-datagram whole.
			nsA.In(t, func() error { return ethtoolFeature("gva", "tx-udp-segmentation", true) })
			if _, err := a.WriteBatch([]Message{tr.msg(b.LocalAddr())}); err != nil {
				t.Fatal(err)
			}
			readDatagrams(t, b.ReadBatch, 16, n)
			pkts := sn.collect(4791, 2)
			if len(pkts) != 2 || len(pkts[0].payload) != GSOSegments(seg)*seg {
				t.Fatalf("control: captured %d packets, want 2 super-datagrams", len(pkts))
			}
		})
	}
}

func idsOf(pkts []wirePacket) []uint16 {
	var ids []uint16
	for _, p := range pkts {
		if !p.is6() {
			ids = append(ids, p.ipv4ID())
		}
	}
	return slices.Clip(ids)
}

var _ = fmt.Sprint
