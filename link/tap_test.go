package link_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/link"
)

// rocePayload is a UD SEND ONLY with DETH and a 5-byte payload plus pad, and
// an ICRC computed for src->dst assuming IPv4 ID 0 and DF.
func rocePayload(src, dst netip.AddrPort) []byte {
	p := make([]byte, 12+8+8+4)
	p[0] = 0x64
	p[1] = 3 << 4 // pad count 3
	binary.BigEndian.PutUint16(p[2:], 0xffff)
	binary.BigEndian.PutUint32(p[4:], 0x11)
	copy(p[20:], "hello")
	if src.Addr().Is4() {
		h := make([]byte, 28)
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(28+len(p)))
		binary.BigEndian.PutUint16(h[6:], 0x4000)
		h[9] = 17
		s, d := src.Addr().As4(), dst.Addr().As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		binary.BigEndian.PutUint16(h[20:], src.Port())
		binary.BigEndian.PutUint16(h[22:], dst.Port())
		binary.BigEndian.PutUint16(h[24:], uint16(8+len(p)))
		binary.LittleEndian.PutUint32(p[len(p)-4:], link.ICRCv4(h, p))
	}
	return p
}

func inetChecksumOK(b ...[]byte) bool {
	var s uint32
	for _, x := range b {
		for i := 0; i+1 < len(x); i += 2 {
			s += uint32(x[i])<<8 | uint32(x[i+1])
		}
		if len(x)%2 == 1 {
			s += uint32(x[len(x)-1]) << 8
		}
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return s == 0xffff
}

type captured struct {
	src, dst netip.AddrPort
	payload  []byte
	id       uint16 // IPv4 Identification
	tos, ttl uint8
	flow     uint32 // IPv6 flow label
}

// readPcap decodes every record and checks the headers the Tap synthesized,
// the ICRC of RoCE-looking IPv4 payloads included.
func readPcap(t *testing.T, r io.Reader, lt link.LinkType) []captured {
	t.Helper()
	return readPcapICRC(t, r, lt, true)
}

// readPcapICRC is readPcap, with the ICRC check optional: a received train
// is recorded with ID 0, which is not the ID its segments had on the wire.
func readPcapICRC(t *testing.T, r io.Reader, lt link.LinkType, checkICRC bool) []captured {
	t.Helper()
	pr, err := pcapgo.NewReader(r)
	if err != nil {
		t.Fatalf("pcapgo.NewReader: %v", err)
	}
	first := layers.LayerTypeEthernet
	if lt == link.LinkTypeRaw {
		first = layers.LayerTypeIPv4
	}
	if got := uint32(pr.LinkType()); got != uint32(lt) {
		t.Fatalf("pcap link type %d, want %d", got, lt)
	}
	var out []captured
	for {
		data, ci, err := pr.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("ReadPacketData: %v", err)
		}
		if ci.CaptureLength != ci.Length || ci.Length != len(data) {
			t.Fatalf("record lengths %d/%d/%d", ci.CaptureLength, ci.Length, len(data))
		}
		if lt == link.LinkTypeRaw && data[0]>>4 == 6 {
			first = layers.LayerTypeIPv6
		}
		pkt := gopacket.NewPacket(data, first, gopacket.Default)
		if el := pkt.ErrorLayer(); el != nil {
			t.Fatalf("gopacket: %v", el.Error())
		}
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp == nil {
			t.Fatalf("no UDP layer in %v", pkt)
		}
		var c captured
		if ip4, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
			if ip4.Flags != layers.IPv4DontFragment || ip4.TTL == 0 {
				t.Errorf("IPv4 flags %v TTL %d, want DF", ip4.Flags, ip4.TTL)
			}
			c.id, c.tos, c.ttl = ip4.Id, ip4.TOS, ip4.TTL
			if !inetChecksumOK(ip4.Contents) {
				t.Errorf("bad IPv4 header checksum %#x", ip4.Checksum)
			}
			if !inetChecksumOK(ip4.Contents[12:20], []byte{0, 17}, udp.Contents[4:6], udp.Contents, udp.Payload) {
				t.Errorf("bad UDP checksum %#x", udp.Checksum)
			}
			if checkICRC && len(udp.Payload) > 4 && rocePayloadLike(udp.Payload) {
				hdr := append(bytes.Clone(ip4.Contents), udp.Contents...)
				if got, want := link.ICRCv4(hdr, udp.Payload), binary.LittleEndian.Uint32(udp.Payload[len(udp.Payload)-4:]); got != want {
					t.Errorf("ICRC over the captured headers %#08x, packet carries %#08x", got, want)
				}
			}
			c.src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip4.SrcIP.To4())), uint16(udp.SrcPort))
			c.dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip4.DstIP.To4())), uint16(udp.DstPort))
		} else if ip6, ok := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
			if ip6.NextHeader != layers.IPProtocolUDP || int(ip6.Length) != len(udp.Contents)+len(udp.Payload) {
				t.Errorf("IPv6 next header %v length %d", ip6.NextHeader, ip6.Length)
			}
			if !inetChecksumOK(ip6.Contents[8:40], []byte{0, 17}, udp.Contents[4:6], udp.Contents, udp.Payload) {
				t.Errorf("bad UDP checksum %#x", udp.Checksum)
			}
			c.tos, c.ttl, c.flow = ip6.TrafficClass, ip6.HopLimit, ip6.FlowLabel
			c.src = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip6.SrcIP)), uint16(udp.SrcPort))
			c.dst = netip.AddrPortFrom(netip.AddrFrom16([16]byte(ip6.DstIP)), uint16(udp.DstPort))
		} else {
			t.Fatalf("no IP layer in %v", pkt)
		}
		c.payload = bytes.Clone(udp.Payload)
		out = append(out, c)
	}
}

func rocePayloadLike(p []byte) bool { return p[0] == 0x64 }

// newTap wraps l in a Tap writing to the returned buffer, closed at the end
// of the test.
func newTap(t *testing.T, l link.Link, lt link.LinkType) (*link.Tap, *bytes.Buffer) {
	t.Helper()
	pcap := new(bytes.Buffer)
	tap, err := link.NewTap(l, pcap, lt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tap.Close() })
	return tap, pcap
}

func TestTap(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		lt   link.LinkType
	}{
		{"ipv4 ethernet", "10.0.0.1:4791", "10.0.0.2:4791", link.LinkTypeEthernet},
		{"ipv4 raw", "10.0.0.1:4791", "10.0.0.2:49152", link.LinkTypeRaw},
		{"ipv6 ethernet", "[fd00::1]:4791", "[fd00::2]:4791", link.LinkTypeEthernet},
		{"ipv6 raw", "[fd00::1]:4791", "[fd00::2]:4791", link.LinkTypeRaw},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				aAddr, bAddr := netip.MustParseAddrPort(tt.a), netip.MustParseAddrPort(tt.b)
				pa, pb := link.Pipe(aAddr, bAddr)
				defer pb.Close()
				tap, pcap := newTap(t, pa, tt.lt)
				out := []link.Message{
					{Buf: rocePayload(aAddr, bAddr), Addr: bAddr},
					{Buf: []byte("second"), Addr: bAddr},
				}
				if _, err := tap.WriteBatch(out); err != nil {
					t.Fatal(err)
				}
				back := rocePayload(bAddr, aAddr)
				pb.WriteBatch([]link.Message{{Buf: back, Addr: aAddr}})
				in := []link.Message{{Buf: link.GetBuffer()[:]}}
				if n, err := tap.ReadBatch(in); n != 1 || err != nil {
					t.Fatalf("ReadBatch = %d, %v", n, err)
				}
				got := readPcap(t, pcap, tt.lt)
				want := []captured{
					{src: aAddr, dst: bAddr, payload: out[0].Buf},
					{src: aAddr, dst: bAddr, payload: out[1].Buf},
					{src: bAddr, dst: aAddr, payload: back},
				}
				if len(got) != len(want) {
					t.Fatalf("%d records, want %d", len(got), len(want))
				}
				for i := range want {
					if got[i].src != want[i].src || got[i].dst != want[i].dst || !bytes.Equal(got[i].payload, want[i].payload) || got[i].id != 0 {
						t.Errorf("record %d: %v -> %v %q, want %v -> %v %q", i, got[i].src, got[i].dst, got[i].payload, want[i].src, want[i].dst, want[i].payload)
					}
				}
				if tap.WriteErrors() != 0 || tap.Err() != nil {
					t.Fatalf("tap errors: %d, %v", tap.WriteErrors(), tap.Err())
				}
			})
		})
	}
}

type failWriter struct{ ok int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.ok == 0 {
		return 0, os.ErrClosed
	}
	w.ok--
	return len(p), nil
}

func TestTapReopenAndErrors(t *testing.T) {
	a, b := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
	pa, pb := link.Pipe(a, b)
	defer pb.Close()
	if _, err := link.NewTap(pa, &failWriter{}, link.LinkTypeEthernet); err == nil {
		t.Fatal("NewTap with a failing writer succeeded")
	}
	if _, err := link.NewTap(pa, io.Discard, 42); err == nil {
		t.Fatal("NewTap with link type 42 succeeded")
	}
	fw := &failWriter{ok: 1} // the header only
	tap, err := link.NewTap(pa, fw, link.LinkTypeEthernet)
	if err != nil {
		t.Fatal(err)
	}
	msg := []link.Message{{Buf: []byte("x"), Addr: b}}
	if n, err := tap.WriteBatch(msg); n != 1 || err != nil {
		t.Fatalf("a failing pcap writer must not fail the link: %d, %v", n, err)
	}
	if tap.WriteErrors() != 1 || !errors.Is(tap.Err(), os.ErrClosed) {
		t.Fatalf("WriteErrors %d, Err %v", tap.WriteErrors(), tap.Err())
	}
	// SIGHUP-style rotation to a file.
	path := filepath.Join(t.TempDir(), "rotated.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := tap.Reopen(f); err != nil {
		t.Fatal(err)
	}
	if tap.Err() != nil {
		t.Fatalf("Err after Reopen = %v", tap.Err())
	}
	tap.WriteBatch(msg)
	tap.WriteBatch(msg)
	f.Close()
	f, _ = os.Open(path)
	defer f.Close()
	if got := readPcap(t, f, link.LinkTypeEthernet); len(got) != 2 {
		t.Fatalf("rotated file has %d records, want 2", len(got))
	}
}

// TestTapReceivePaths: a Tap over a link with several receive paths records
// what each of them reads, and a group joined through it too.
func TestTapReceivePaths(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		aAddr, bAddr := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
		pa, pb := link.NewPipe(aAddr, bAddr, link.PipeConfig{}, link.PipeConfig{Readers: 2})
		defer pa.Close()
		tap, pcap := newTap(t, pb, link.LinkTypeRaw)
		group := netip.MustParseAddr("239.0.0.9")
		fg, err := tap.JoinGroup(group)
		if err != nil {
			t.Fatal(err)
		}
		var out []link.Message
		for port := uint16(1000); port < 1016; port++ {
			out = append(out, link.Message{Buf: []byte{byte(port)}, Addr: bAddr, SrcPort: port})
		}
		out = append(out, link.Message{Buf: []byte("group"), Addr: netip.AddrPortFrom(group, 4791)})
		pa.WriteBatch(out)
		n := 0
		for _, fn := range append(link.ReceiveFuncs(tap), fg) {
			k, err := fn(msgs(16))
			if err != nil || k == 0 {
				t.Fatalf("receive path read %d, %v", k, err)
			}
			n += k
		}
		got := readPcap(t, pcap, link.LinkTypeRaw)
		if n != len(out) || len(got) != n || got[n-1].dst.Addr() != group {
			t.Fatalf("read %d, recorded %d of %d datagrams", n, len(got), len(out))
		}
	})
}

// TestTapRecordsReceivedIPv4ID: a received datagram is recorded with the IPv4
// ID its sender computed its ICRC over, which the socket never reports (rxe
// draws one per packet; a train the kernel split arrives as lone datagrams
// with IDs 1, 2, ...), so its ICRC verifies in the capture; a datagram no ID
// fits is recorded with ID 0.
func TestTapRecordsReceivedIPv4ID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		aAddr, bAddr := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
		pa, pb := link.NewPipe(aAddr, bAddr, link.PipeConfig{}, link.PipeConfig{})
		defer pa.Close()
		tap, pcap := newTap(t, pb, link.LinkTypeRaw)
		const id = 0x1234
		good := rocePayload(aAddr, bAddr)
		env := bth.Envelope{Src: aAddr.Addr(), Dst: bAddr.Addr(), IPID: id, DF: true, SrcPort: aAddr.Port(), DstPort: bAddr.Port()}
		bth.PutICRC(&env, good)
		bad := rocePayload(aAddr, bAddr)
		bad[len(bad)-1] ^= 0xFF // a corrupted trailer fits some ID with probability 2^-16: checked below
		if _, err := pa.WriteBatch([]link.Message{{Buf: good, Addr: bAddr}, {Buf: bad, Addr: bAddr}}); err != nil {
			t.Fatal(err)
		}
		if k, err := tap.ReadBatch(msgs(4)); err != nil || k != 2 {
			t.Fatalf("read %d, %v", k, err)
		}
		got := readPcapICRC(t, pcap, link.LinkTypeRaw, false)
		if len(got) != 2 || got[0].id != id || got[1].id != 0 {
			t.Fatalf("recorded %d datagrams, IDs %v; want IDs %#x and 0", len(got), ids(got), id)
		}
		if _, ok := bth.SolveIPv4ID(&env, bad); ok {
			t.Fatal("the corrupted datagram fits an ID; pick another corruption")
		}
		if !bth.CheckICRC(&env, got[0].payload) {
			t.Fatal("the recorded ID does not verify the ICRC")
		}
	})
}

func ids(c []captured) []uint16 {
	var out []uint16
	for _, x := range c {
		out = append(out, x.id)
	}
	return out
}
