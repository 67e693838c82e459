package bottleneck

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/goroce/goroce/link"
)

var (
	addrA = netip.MustParseAddrPort("10.0.0.1:4791")
	addrB = netip.MustParseAddrPort("10.0.0.2:4791")
	addrC = netip.MustParseAddrPort("10.0.0.3:4791")
)

const mbit = 1_000_000

// datagrams returns n datagrams of size bytes to dst, numbered in their
// first 4 bytes, with the given TOS.
func datagrams(n, size int, dst netip.AddrPort, tos uint8) []link.Message {
	out := make([]link.Message, n)
	for i := range out {
		b := make([]byte, size)
		binary.BigEndian.PutUint32(b, uint32(i))
		out[i] = link.Message{Buf: b, Addr: dst, TOS: tos}
	}
	return out
}

// arrival is one datagram read at a host.
type arrival struct {
	at  time.Duration
	num uint32
	src netip.AddrPort
	tos uint8
	n   int
}

// collect reads at p until it is closed, recording arrivals relative to
// start. The result is complete once the returned channel yields.
func collect(p *Port, start time.Time) <-chan []arrival {
	out := make(chan []arrival, 1)
	go func() {
		var got []arrival
		msgs := make([]link.Message, 64)
		for i := range msgs {
			msgs[i].Buf = make([]byte, link.MaxDatagram)
		}
		for {
			n, err := p.ReadBatch(msgs)
			if err != nil {
				out <- got
				return
			}
			for _, m := range msgs[:n] {
				got = append(got, arrival{time.Since(start), binary.BigEndian.Uint32(m.Buf), m.Addr, m.TOS, len(m.Buf)})
			}
		}
	}()
	return out
}

// pair attaches A and B and returns them with a collector on B.
func pair(t *testing.T, sw *Switch, cfgA, cfgB PortConfig) (*Port, *Port) {
	t.Helper()
	a, err := sw.Attach(addrA, cfgA)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sw.Attach(addrB, cfgB)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

func TestSerializationAndDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sw := New(1)
		// 8 Mb/s = 1 byte per µs toward B, 50 µs of cable.
		a, b := pair(t, sw, PortConfig{}, PortConfig{Rate: 8 * mbit, Delay: 50 * time.Microsecond})
		start := time.Now()
		res := collect(b, start)
		a.WriteBatch(datagrams(3, 1000, addrB, 0))
		time.Sleep(10 * time.Millisecond)
		a.Close()
		b.Close()
		got := <-res
		if len(got) != 3 {
			t.Fatalf("got %d datagrams", len(got))
		}
		for i, g := range got {
			want := time.Duration(i+1)*time.Millisecond + 50*time.Microsecond
			if g.at != want || g.num != uint32(i) || g.src != addrA || g.n != 1000 {
				t.Errorf("datagram %d: %+v, want at %v", i, g, want)
			}
		}
		st := b.Egress()
		if st.Enqueued != 3 || st.Delivered != 3 || st.DeliveredBytes != 3000 || st.MaxBytes != 3000 || st.Dropped != 0 {
			t.Errorf("stats %+v", st)
		}
	})
}

func TestUplinkRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sw := New(1)
		a, b := pair(t, sw, PortConfig{Uplink: 80 * mbit, UplinkDelay: time.Microsecond}, PortConfig{})
		start := time.Now()
		res := collect(b, start)
		a.WriteBatch(datagrams(4, 500, addrB, 0))
		time.Sleep(time.Millisecond)
		a.Close()
		b.Close()
		got := <-res
		for i, g := range got {
			if want := time.Duration(i+1)*50*time.Microsecond + time.Microsecond; g.at != want {
				t.Errorf("datagram %d at %v, want %v", i, g.at, want)
			}
		}
		if len(got) != 4 {
			t.Fatalf("got %d", len(got))
		}
	})
}

func TestTailDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sw := New(1)
		a, b := pair(t, sw, PortConfig{}, PortConfig{Rate: 8 * mbit, Buffer: 2500})
		res := collect(b, time.Now())
		a.WriteBatch(datagrams(5, 1000, addrB, 0))
		time.Sleep(10 * time.Millisecond)
		a.Close()
		b.Close()
		got := <-res
		st := b.Egress()
		if len(got) != 2 || got[0].num != 0 || got[1].num != 1 || st.Dropped != 3 || st.MaxBytes != 2000 {
			t.Fatalf("delivered %d, stats %+v; want the first 2 through, 3 tail-dropped", len(got), st)
		}
	})
}

func TestThresholdMarking(t *testing.T) {
	tests := []struct {
		name string
		tos  uint8
		want []uint8 // TOS of each of 5 datagrams on arrival
	}{
		// Bytes left behind at departure: 4000, 3000, 2000, 1000, 0; K = 1500.
		{"ECT(0)", 0x02, []uint8{0x03, 0x03, 0x03, 0x02, 0x02}},
		{"ECT(1) with DSCP", 0x69, []uint8{0x6B, 0x6B, 0x6B, 0x69, 0x69}},
		{"Not-ECT passes unmarked", 0xC0, []uint8{0xC0, 0xC0, 0xC0, 0xC0, 0xC0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sw := New(1)
				a, b := pair(t, sw, PortConfig{}, PortConfig{Rate: 8 * mbit, Mark: Marking{MinBytes: 1500, MaxBytes: 1500}})
				res := collect(b, time.Now())
				a.WriteBatch(datagrams(5, 1000, addrB, tt.tos))
				time.Sleep(10 * time.Millisecond)
				a.Close()
				b.Close()
				got := <-res
				if len(got) != 5 {
					t.Fatalf("got %d", len(got))
				}
				marked := 0
				for i, g := range got {
					if g.tos != tt.want[i] {
						t.Errorf("datagram %d TOS %#x, want %#x", i, g.tos, tt.want[i])
					}
					if g.tos != tt.tos {
						marked++
					}
				}
				if st := b.Egress(); st.Marked != uint64(marked) {
					t.Errorf("Marked = %d, want %d", st.Marked, marked)
				}
			})
		})
	}
}

// TestREDProbability keeps the queue deep and checks the marked fraction
// against the RED line at each depth.
func TestREDProbability(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sw := New(7)
		mark := Marking{MinBytes: 0, MaxBytes: 100_000, PMax: 0.5}
		a, b := pair(t, sw, PortConfig{}, PortConfig{Rate: 8 * mbit, Mark: mark})
		res := collect(b, time.Now())
		const n = 2000 // datagram i leaves 50·(n-1-i) bytes behind (50-byte datagrams)
		a.WriteBatch(datagrams(n, 50, addrB, 0x02))
		time.Sleep(200 * time.Millisecond)
		a.Close()
		b.Close()
		got := <-res
		if len(got) != n {
			t.Fatalf("got %d", len(got))
		}
		// Expected marks: sum over the depths q = 50·i left behind of
		// p = 0.5·q/100000 (1 from the max on).
		var exp, variance float64
		for i := 0; i < n; i++ {
			q := 50 * i
			p := 1.0
			if q < mark.MaxBytes {
				p = 0.5 * float64(q) / float64(mark.MaxBytes)
			}
			exp += p
			variance += p * (1 - p)
		}
		m := float64(b.Egress().Marked)
		if math.Abs(m-exp) > 5*math.Sqrt(variance) {
			t.Fatalf("marked %v, want %.0f ± %.0f", m, exp, 5*math.Sqrt(variance))
		}
	})
}

// TestFairLineRate: two hosts blast one; the egress delivers exactly its
// rate and each sender's share is counted.
func TestLineRateAndSources(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sw := New(1)
		a, b := pair(t, sw, PortConfig{Uplink: 100 * mbit}, PortConfig{Rate: 100 * mbit})
		c, err := sw.Attach(addrC, PortConfig{Uplink: 100 * mbit})
		if err != nil {
			t.Fatal(err)
		}
		res := collect(b, time.Now())
		ms := datagrams(2000, 1250, addrB, 0) // 100 µs each at 100 Mb/s
		for i := range ms {
			ms[i].SrcPort = 49152
		}
		a.WriteBatch(ms)
		c.WriteBatch(datagrams(2000, 1250, addrB, 0))
		time.Sleep(100 * time.Millisecond) // 1000 datagrams' worth at the egress
		// A delivery falls due at this very instant (one every 100 µs): let it finish,
		// so that the counters below are read from one state, not across it.
		synctest.Wait()
		st := b.Egress()
		fromA := b.DeliveredFrom(netip.AddrPortFrom(addrA.Addr(), 49152))
		fromC := b.DeliveredFrom(addrC)
		if b.DeliveredFromAddr(addrA.Addr()) != fromA || len(b.Sources()) != 2 {
			t.Errorf("DeliveredFromAddr %d, want %d; sources %v", b.DeliveredFromAddr(addrA.Addr()), fromA, b.Sources())
		}
		a.Close()
		b.Close()
		c.Close()
		<-res
		// The first datagrams reach the egress after 100 µs of uplink.
		if st.Delivered < 998 || st.Delivered > 1000 {
			t.Fatalf("delivered %d datagrams in 100 ms at 100 Mb/s, want ~999", st.Delivered)
		}
		if fromA+fromC != st.DeliveredBytes || fromA == 0 || fromC == 0 {
			t.Fatalf("per source %d + %d, total %d", fromA, fromC, st.DeliveredBytes)
		}
		if d := int64(fromA) - int64(fromC); d > 1250 || d < -1250 {
			t.Fatalf("FIFO shares differ by %d bytes", d)
		}
	})
}

func TestRoutingAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sw := New(1)
		a, b := pair(t, sw, PortConfig{}, PortConfig{})
		if _, err := sw.Attach(addrA, PortConfig{}); err == nil {
			t.Fatal("attached an address twice")
		}
		a.WriteBatch(datagrams(2, 10, addrC, 0))
		synctest.Wait()
		if sw.Unroutable.Load() != 2 {
			t.Fatalf("Unroutable = %d", sw.Unroutable.Load())
		}
		b.Close()
		a.WriteBatch(datagrams(1, 10, addrB, 0)) // B is gone: unroutable now
		synctest.Wait()
		if sw.Unroutable.Load() != 3 {
			t.Fatalf("Unroutable after close = %d", sw.Unroutable.Load())
		}
		if _, err := b.ReadBatch(make([]link.Message, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("ReadBatch after Close = %v", err)
		}
		if _, err := b.WriteBatch(datagrams(1, 10, addrA, 0)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("WriteBatch after Close = %v", err)
		}
		a.Close()
		a.Close()
	})
}

// TestTrainSerialized: a train (a GSO super-datagram, given as a gather
// list) enters the switch segment by segment, each serialized on its own
// with the message's TOS.
func TestTrainSerialized(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sw := New(1)
		a, b := pair(t, sw, PortConfig{}, PortConfig{Rate: 8 * mbit})
		start := time.Now()
		res := collect(b, start)
		var pieces [][]byte
		for i := range 3 {
			s := make([]byte, 1000)
			binary.BigEndian.PutUint32(s, uint32(i))
			pieces = append(pieces, s[:4], s[4:])
		}
		a.WriteBatch([]link.Message{{Pieces: pieces[:5], SegSize: 1000, Addr: addrB, TOS: 2}})
		time.Sleep(10 * time.Millisecond)
		a.Close()
		b.Close()
		got := <-res
		if len(got) != 3 || got[2].n != 4 || got[1].n != 1000 {
			t.Fatalf("got %+v", got)
		}
		for i, g := range got[:2] { // 1000 bytes take 1 ms at 8 Mb/s
			if g.num != uint32(i) || g.tos != 2 || g.at != time.Duration(i+1)*time.Millisecond {
				t.Errorf("segment %d: %+v", i, g)
			}
		}
		if got[2].tos != 2 || got[2].at != 2*time.Millisecond+4*time.Microsecond {
			t.Errorf("last segment: %+v", got[2])
		}
	})
}
