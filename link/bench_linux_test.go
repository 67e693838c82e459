//go:build linux

package link

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
)

// BenchmarkLoopback is the raw-UDP baseline: datagrams from 127.0.0.1 to
// 127.0.0.2 through this package, in lockstep (write a batch, read it back),
// so nothing is lost and the number measures system-call cost per datagram.
// "plain" is net.UDPConn, one datagram per system call; "single" is this
// Link with batches of 1; "batch" uses DefaultBatchSize.
func BenchmarkLoopback(b *testing.B) {
	for _, size := range []int{64, 1024} {
		for _, mode := range []struct {
			name  string
			batch int
		}{{"plain", 0}, {"single", 1}, {"batch", DefaultBatchSize}} {
			b.Run(fmt.Sprintf("%s/%dB", mode.name, size), func(b *testing.B) {
				if mode.batch == 0 {
					benchPlain(b, size)
					return
				}
				benchLink(b, size, mode.batch)
			})
		}
	}
}

func benchLink(b *testing.B, size, batch int) {
	tx := listen(b, "127.0.0.1:0", Config{BatchSize: batch})
	rx := listen(b, "127.0.0.2:0", Config{BatchSize: batch})
	out := make([]Message, batch)
	for i := range out {
		out[i] = Message{Buf: make([]byte, size), Addr: rx.LocalAddr()}
	}
	in := newMsgs(batch)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		k := min(batch, b.N-sent)
		if _, err := tx.WriteBatch(out[:k]); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < k; {
			n, err := rx.ReadBatch(in)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
		sent += k
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkt/s")
}

func benchPlain(b *testing.B, size int) {
	tx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Close()
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		b.Fatal(err)
	}
	defer rx.Close()
	dst := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	out := make([]byte, size)
	in := make([]byte, MaxDatagram)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := tx.WriteToUDPAddrPort(out, dst); err != nil {
			b.Fatal(err)
		}
		if _, _, err := rx.ReadFromUDPAddrPort(in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkt/s")
}

// BenchmarkXNetReadBatch measures golang.org/x/net/ipv4.PacketConn.ReadBatch
// on the same traffic, to show why UDP does its own recvmmsg: allocs/op here
// is per datagram (a net.IP and a *net.UDPAddr each), where BenchmarkLoopback
// reports 0.
func BenchmarkXNetReadBatch(b *testing.B) {
	const batch = DefaultBatchSize
	tx := listen(b, "127.0.0.1:0", Config{BatchSize: batch})
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	pc := ipv4.NewPacketConn(c)
	dst := netip.MustParseAddrPort(c.LocalAddr().String())
	out := make([]Message, batch)
	for i := range out {
		out[i] = Message{Buf: make([]byte, 64), Addr: dst}
	}
	ms := make([]ipv4.Message, batch)
	for i := range ms {
		ms[i].Buffers = [][]byte{make([]byte, MaxDatagram)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		k := min(batch, b.N-sent)
		if _, err := tx.WriteBatch(out[:k]); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < k; {
			n, err := pc.ReadBatch(ms, 0)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
		sent += k
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkt/s")
}

// BenchmarkLoopbackStream is the concurrent form: one goroutine writes
// b.N datagrams as fast as it can, another reads them, as the engine's
// shards and reader do. Loopback UDP drops when the receiver falls behind;
// the rate counts only what arrived, and packet-loss reports the rest.
func BenchmarkLoopbackStream(b *testing.B) {
	for _, size := range []int{64, 1024} {
		for _, batch := range []int{1, DefaultBatchSize} {
			b.Run(fmt.Sprintf("batch%d/%dB", batch, size), func(b *testing.B) {
				tx := listen(b, "127.0.0.1:0", Config{BatchSize: batch})
				rx := listen(b, "127.0.0.2:0", Config{BatchSize: batch})
				out := make([]Message, batch)
				for i := range out {
					out[i] = Message{Buf: make([]byte, size), Addr: rx.LocalAddr()}
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				got := make(chan int, 1)
				go func() {
					in := newMsgs(batch)
					n := 0
					for {
						k, err := rx.ReadBatch(in)
						n += k
						if err != nil {
							got <- n
							return
						}
					}
				}()
				b.ResetTimer()
				for sent := 0; sent < b.N; {
					k := min(batch, b.N-sent)
					if _, err := tx.WriteBatch(out[:k]); err != nil {
						b.Fatal(err)
					}
					sent += k
				}
				time.Sleep(20 * time.Millisecond) // let the reader drain
				elapsed := b.Elapsed() - 20*time.Millisecond
				rx.Close()
				n := <-got
				b.ReportMetric(float64(n)/elapsed.Seconds(), "pkt/s")
				b.ReportMetric(1-float64(n)/float64(b.N), "packet-loss")
			})
		}
	}
}

// BenchmarkGROSplit compares the ways a reader can get 4112-byte datagrams
// (full RoCE packets at MTU 4096) sent as GSO trains of 15: "reslice" reads
// GRO trains into MaxTrain buffers and takes each segment as a view;
// "copy" does the same and copies each segment into its own pooled
// MaxDatagram buffer (what splitting into caller buffers costs); "nogro"
// reads with MaxDatagram buffers, so the kernel splits each train into
// datagrams before the socket. Lockstep: write a batch of trains, read it
// all back. pkt/s counts datagrams.
func BenchmarkGROSplit(b *testing.B) {
	const seg, perTrain, trains = 4112, 15, 4
	for _, mode := range []string{"reslice", "copy", "nogro"} {
		b.Run(mode, func(b *testing.B) {
			tx := listen(b, "127.0.0.1:0", Config{})
			rx := listen(b, "127.0.0.2:0", Config{})
			payload := make([]byte, seg*perTrain)
			out := make([]Message, trains)
			for i := range out {
				out[i] = Message{Buf: payload, SegSize: seg, Addr: rx.LocalAddr()}
			}
			in := newMsgs(DefaultBatchSize)
			if mode != "nogro" {
				in = make([]Message, trains)
				for i := range in {
					in[i].Buf = GetTrainBuffer()[:]
				}
			}
			var sink byte
			b.SetBytes(seg)
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += trains * perTrain {
				if _, err := tx.WriteBatch(out); err != nil {
					b.Fatal(err)
				}
				for got := 0; got < trains*perTrain; {
					n, err := rx.ReadBatch(in)
					if err != nil {
						b.Fatal(err)
					}
					for i := range in[:n] {
						m := &in[i]
						for j := range m.NumSegments() {
							s := m.Segment(j)
							if mode == "copy" {
								buf := GetBuffer()
								copy(buf[:], s)
								sink ^= buf[100]
								PutBuffer(buf)
							} else {
								sink ^= s[100]
							}
							got++
						}
					}
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pkt/s")
			_ = sink
		})
	}
}
