package gsi

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/link"
)

// fakeLink replays datagrams to ReadBatch, then blocks until Close.
type fakeLink struct {
	local netip.AddrPort
	rx    []link.Message
	sent  []link.Message
	done  chan struct{}
	once  sync.Once
}

func (f *fakeLink) ReadBatch(msgs []link.Message) (int, error) {
	n := 0
	for n < len(msgs) && len(f.rx) > 0 {
		msgs[n].Buf = append(msgs[n].Buf[:0], f.rx[0].Buf...)
		msgs[n].Addr, msgs[n].Local, msgs[n].SegSize = f.rx[0].Addr, f.rx[0].Local, f.rx[0].SegSize
		f.rx = f.rx[1:]
		n++
	}
	if n > 0 {
		return n, nil
	}
	if f.done == nil {
		return 0, net.ErrClosed // replay finished
	}
	<-f.done
	return 0, net.ErrClosed
}

func (f *fakeLink) WriteBatch(msgs []link.Message) (int, error) {
	for _, m := range msgs {
		f.sent = append(f.sent, link.Message{Buf: append([]byte(nil), m.Buf...), Addr: m.Addr, SrcPort: m.SrcPort})
	}
	return len(msgs), nil
}
func (f *fakeLink) LocalAddr() netip.AddrPort { return f.local }
func (f *fakeLink) SourcePort(uint16) bool    { return true }
func (f *fakeLink) BatchSize() int            { return 8 }
func (f *fakeLink) Close() error              { f.once.Do(func() { close(f.done) }); return nil }

// captured returns every RoCEv2 datagram of testdata/rping.pcap to 198.18.0.11.
func captured(t *testing.T) []link.Message {
	d, err := os.ReadFile("testdata/rping.pcap")
	if err != nil {
		t.Fatal(err)
	}
	var out []link.Message
	for off := 24; off+16 <= len(d); {
		incl := int(binary.LittleEndian.Uint32(d[off+8:]))
		p := d[off+16 : off+16+incl]
		off += 16 + incl
		if len(p) < 42 || binary.BigEndian.Uint16(p[12:]) != 0x0800 || p[23] != 17 {
			continue
		}
		ip, udp := p[14:], p[34:]
		if binary.BigEndian.Uint16(udp[2:]) != 4791 || netip.AddrFrom4([4]byte(ip[16:20])).String() != "198.18.0.11" {
			continue
		}
		out = append(out, link.Message{Buf: udp[8:binary.BigEndian.Uint16(udp[4:])],
			Addr:  netip.AddrPortFrom(netip.AddrFrom4([4]byte(ip[12:16])), binary.BigEndian.Uint16(udp[0:])),
			Local: netip.AddrFrom4([4]byte(ip[16:20]))})
	}
	return out
}

// TestDivertCapture feeds the server side of a real rxe rping exchange: the
// CM MADs (REQ, RTU, DREQ from rxe's QP1, hashed IPv4 IDs) go to ReadMAD,
// everything else to the engine untouched.
func TestDivertCapture(t *testing.T) {
	rx := captured(t)
	bad := link.Message{Buf: append([]byte(nil), rx[0].Buf...), Addr: rx[0].Addr, Local: rx[0].Local}
	bad.Buf[100] ^= 1 // corrupt a MAD byte: the ICRC must catch it
	fl := &fakeLink{local: netip.MustParseAddrPort("198.18.0.11:4791"), rx: append(rx, bad)}
	l, c := Wrap(fl)
	var engine []link.Message
	msgs := make([]link.Message, 8)
	var bufs [8][]byte // the caller's own index → buffer table, as the engine keeps
	for i := range msgs {
		bufs[i] = make([]byte, link.MaxDatagram)
	}
	for {
		for i := range msgs {
			msgs[i].Buf = bufs[i][:0]
		}
		n, err := l.ReadBatch(msgs)
		for i := 0; i < n; i++ {
			// Each returned message must still live in the slot's own buffer.
			if &msgs[i].Buf[0] != &bufs[i][0] {
				t.Fatalf("slot %d buffer replaced", i)
			}
			engine = append(engine, link.Message{Buf: append([]byte(nil), bufs[i][:len(msgs[i].Buf)]...), Addr: msgs[i].Addr})
		}
		if err != nil {
			break
		}
	}
	if len(engine) != len(rx)-3 {
		t.Errorf("%d datagrams reached the engine, want %d", len(engine), len(rx)-3)
	}
	for _, m := range engine {
		if qpn := uint32(m.Buf[5])<<16 | uint32(m.Buf[6])<<8 | uint32(m.Buf[7]); qpn == 1 {
			t.Fatalf("QP1 datagram reached the engine")
		}
	}
	want := []cm.AttrID{cm.AttrREQ, cm.AttrRTU, cm.AttrDREQ}
	if len(c.in) != len(want) {
		t.Fatalf("%d MADs diverted, want %d; stats %+v", len(c.in), len(want), c.Stats())
	}
	buf := make([]byte, 512)
	for _, w := range want {
		n, from, err := c.ReadMAD(buf)
		if err != nil {
			t.Fatal(err)
		}
		h, _, err := cm.Parse(buf[:n])
		if err != nil || h.AttrID != w || from != netip.MustParseAddr("198.18.0.12") {
			t.Errorf("MAD %v from %v (%v), want %v", h.AttrID, from, err, w)
		}
	}
	c.Close()
	if s := c.Stats(); s.RxMADs != 3 || s.BadICRC != 1 || s.Malformed != 0 {
		t.Errorf("stats %+v", s)
	}
	if _, _, err := c.ReadMAD(buf); err == nil {
		t.Error("ReadMAD after Close")
	}
}

// TestDivertGROTrain: a GRO train of QP1 MADs (one flow, coalesced by the
// kernel) is diverted MAD by MAD, each checked on its own, and a train of
// another QP after it reaches the engine whole, its segment size kept.
func TestDivertGROTrain(t *testing.T) {
	from, to := netip.MustParseAddrPort("10.0.0.2:55410"), netip.MustParseAddrPort("10.0.0.1:4791")
	mad, _ := cm.Marshal(1, &cm.RTU{LocalCommID: 5})
	env := bth.Envelope{Src: from.Addr(), Dst: to.Addr(), DF: true, SrcPort: from.Port(), DstPort: to.Port()}
	train := func(qpn uint32, n int, corrupt int) link.Message {
		var b []byte
		seg := 0
		for i := range n {
			f := bth.Fields{Opcode: bth.UDSendOnly, PKey: cm.GSIPKey, DestQP: qpn, PSN: bth.PSN(i),
				DETH: bth.DETH{QKey: cm.GSIQKey, SrcQP: 1}}
			p := bth.Append(nil, &f, mad)
			env.IPID = link.TrainIPv4ID(len(p), i)
			bth.PutICRC(&env, p)
			if i == corrupt {
				p[40] ^= 1
			}
			seg = len(p)
			b = append(b, p...)
		}
		return link.Message{Buf: b, SegSize: seg, Addr: from, Local: to.Addr()}
	}
	other := train(0x11, 2, -1)
	fl := &fakeLink{local: to, rx: []link.Message{train(cm.GSIQPN, 3, 1), other}, done: make(chan struct{})}
	l, c := Wrap(fl)
	msgs := []link.Message{{Buf: make([]byte, 0, link.MaxTrain)}, {Buf: make([]byte, 0, link.MaxTrain)}}
	if len(l.PollFuncs()) != 0 {
		t.Fatal("poll paths over a link that has none")
	}
	recv := l.ReceiveFuncs() // the wrapped link's one path, QP1 diverted
	if len(recv) != 1 {
		t.Fatalf("%d receive paths, want 1", len(recv))
	}
	n, err := recv[0](msgs)
	if err != nil || n != 1 {
		t.Fatalf("ReadBatch %d, %v; want the other QP's train alone", n, err)
	}
	if msgs[0].SegSize != other.SegSize || !bytes.Equal(msgs[0].Buf, other.Buf) {
		t.Fatalf("the engine's train arrived with segment size %d, %d bytes", msgs[0].SegSize, len(msgs[0].Buf))
	}
	if s := c.Stats(); len(c.in) != 2 || s.BadICRC != 1 {
		t.Fatalf("%d MADs diverted, stats %+v; want 2 and one bad ICRC", len(c.in), s)
	}
	c.Close()
}

// TestWriteMAD checks the datagram a MAD goes out in: what rxe's QP1 sends.
func TestWriteMAD(t *testing.T) {
	fl := &fakeLink{local: netip.MustParseAddrPort("10.0.0.1:4791"), done: make(chan struct{})}
	_, c := Wrap(fl)
	mad, _ := cm.Marshal(1, &cm.RTU{LocalCommID: 5})
	for i := 0; i < 2; i++ {
		if err := c.WriteMAD(mad, netip.MustParseAddr("10.0.0.2")); err != nil {
			t.Fatal(err)
		}
	}
	// Feed our own output to a receiver as if it came from 10.0.0.1.
	var rx []link.Message
	for _, m := range fl.sent {
		// rxe's QP1 sends from UDP port 55410; the ICRC covers it.
		if m.Addr != netip.MustParseAddrPort("10.0.0.2:4791") || m.SrcPort != 55410 || len(m.Buf) != 12+8+256+4 {
			t.Fatalf("sent %v from port %d, %d bytes", m.Addr, m.SrcPort, len(m.Buf))
		}
		rx = append(rx, link.Message{Buf: m.Buf, Addr: netip.MustParseAddrPort("10.0.0.1:55410"), Local: netip.MustParseAddr("10.0.0.2")})
	}
	if fl.sent[0].Buf[8]&0x80 == 0 || fl.sent[1].Buf[11] != 1 {
		t.Errorf("AckReq/PSN: % x", fl.sent[1].Buf[:12])
	}
	fr := &fakeLink{local: netip.MustParseAddrPort("10.0.0.2:4791"), rx: rx, done: make(chan struct{})}
	lr, cr := Wrap(fr)
	go lr.ReadBatch(make([]link.Message, 4))
	buf := make([]byte, 256)
	for i := 0; i < 2; i++ {
		n, from, err := cr.ReadMAD(buf)
		if err != nil || n != 256 || from != netip.MustParseAddr("10.0.0.1") {
			t.Fatalf("ReadMAD %d %v %v", n, from, err)
		}
	}
	lr.Close()
	if err := c.WriteMAD(mad[:10], netip.MustParseAddr("10.0.0.2")); err == nil {
		t.Error("short MAD accepted")
	}
}

// TestManagersOverUDP connects two CMs through two roce devices on loopback
// UDP (127.0.0.1 and 127.0.0.2, one port), MADs going through QP1.
func TestManagersOverUDP(t *testing.T) {
	_, _, ca, cb := openPair(t)
	ma := cm.NewManager(ca, cm.ManagerConfig{})
	mb := cm.NewManager(cb, cm.ManagerConfig{})
	defer ma.Close()
	defer mb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := mb.Listen(netip.MustParseAddrPort("127.0.0.2:7174"), 0)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if r, err := l.GetRequest(ctx); err == nil {
			r.Accept(ctx, cm.ConnParam{QPN: 0x12})
		}
	}()
	c, err := ma.Dial(ctx, netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.2:7174"), cm.ConnParam{QPN: 0x11})
	if err != nil {
		t.Fatal(err)
	}
	if c.QP.RemoteQPN != 0x12 {
		t.Errorf("remote QPN %#x", c.QP.RemoteQPN)
	}
	if err := c.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if s := ca.Stats(); s.TxMADs != 3 || s.RxMADs != 2 || s.BadICRC+s.Malformed != 0 {
		t.Errorf("client GSI stats %+v (REQ, RTU, DREQ out; REP, DREP in)", s)
	}
}

// FuzzDivert feeds arbitrary datagrams addressed to QPN 1 (and others) to
// the divert check. Property: no panic; only well-formed QP1 MADs with a
// good ICRC are delivered, each exactly 256 bytes.
func FuzzDivert(f *testing.F) {
	fl := &fakeLink{local: netip.MustParseAddrPort("10.0.0.1:4791"), done: make(chan struct{})}
	_, src := Wrap(fl)
	mad, _ := cm.Marshal(1, &cm.REQ{})
	src.WriteMAD(mad, netip.MustParseAddr("10.0.0.2"))
	f.Add(fl.sent[0].Buf)                                      // a valid QP1 MAD
	f.Add(fl.sent[0].Buf[:40])                                 // truncated
	f.Add([]byte{0x64, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 0}) // BTH only
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &fakeLink{local: netip.MustParseAddrPort("10.0.0.2:4791"), done: make(chan struct{})}
		_, c := Wrap(r)
		m := link.Message{Buf: b, Addr: netip.MustParseAddrPort("10.0.0.1:4791"), Local: netip.MustParseAddr("10.0.0.2")}
		c.divert(&m)
		select {
		case got := <-c.in:
			if len(got.mad) != cm.MADLen {
				t.Fatalf("delivered %d bytes", len(got.mad))
			}
		default:
		}
	})
}
