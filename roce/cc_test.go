package roce

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/testsupport/cnptest"
	"github.com/goroce/goroce/internal/testsupport/syncbuf"
	"github.com/goroce/goroce/link"
)

// ceLink marks CE on every ECN-capable datagram it reads, as a congested
// switch in front of the device would.
type ceLink struct{ link.Link }

func (l ceLink) ReadBatch(msgs []link.Message) (int, error) {
	n, err := l.Link.ReadBatch(msgs)
	for i := range msgs[:n] {
		if msgs[i].TOS&dcqcn.CE != 0 {
			msgs[i].TOS |= dcqcn.CE
		}
	}
	return n, err
}

// TestCongestionNotification: device B sits behind a CE-marking link. A
// receives B's CNPs for its WRITEs and its rate is cut; the capture of B's
// side shows data in with ECT/CE, CNPs out as ConnectX sends them (tshark
// with deploy/wireshark/roce_cnp.lua), and the transfer completes.
func TestCongestionNotification(t *testing.T) {
	la, lb := link.Pipe(netip.AddrPortFrom(addrA, RoCEv2Port), netip.AddrPortFrom(addrB, RoCEv2Port))
	cc := dcqcn.DefaultConfig()
	cc.LineRate = 10_000_000_000
	var capture syncbuf.Buffer
	da := must[*Device](t)(OpenLink(la, WithMTU(MTU1024), WithCongestionControl(cc)))
	defer da.Close()
	db := must[*Device](t)(OpenLink(ceLink{lb}, WithMTU(MTU1024), WithCongestionControl(cc), WithPcap(&capture)))
	defer db.Close()
	a := newSide(t, da, QPTypeRC, 256<<10, nil, nil)
	b := newSide(t, db, QPTypeRC, 256<<10, nil, nil)
	connectRC(t, a, b, MTU1024)
	_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: 1, Opcode: WRRDMAWrite, Flags: SendSignaled,
		SGL: []SGE{{Addr: a.mr.Addr(), Length: 256 << 10, LKey: a.mr.LKey()}}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}}))
	checkWC(t, pollN(t, a.scq, 1, wcTimeout)[0], 1, WCRDMAWrite, -1)

	sa, sb := da.Stats(), db.Stats()
	if sb.ECNMarked == 0 || sb.CNPsSent == 0 || sa.CNPsRcvd == 0 || sa.RateCuts == 0 || sa.CNPsRcvd > sb.CNPsSent {
		t.Fatalf("B: %d CE, %d CNPs sent; A: %d CNPs received, %d cuts", sb.ECNMarked, sb.CNPsSent, sa.CNPsRcvd, sa.RateCuts)
	}
	var qi QPInfo
	for _, q := range da.QPs() {
		if q.QPN == a.qp.QPN() {
			qi = q
		}
	}
	if qi.CCCuts == 0 || qi.CCRate == 0 || qi.CCRate > cc.LineRate {
		t.Errorf("A's QP: rate %d, %d cuts", qi.CCRate, qi.CCCuts)
	}
	db.Close()

	cnps := cnptest.Dissect(t, capture.Bytes())
	if len(cnps) == 0 || uint64(len(cnps)) != sb.CNPsSent {
		t.Fatalf("tshark dissected %d CNPs, B sent %d", len(cnps), sb.CNPsSent)
	}
	for _, c := range cnps {
		want := cnptest.CNP{Frame: c.Frame, TOS: 48 << 2, PKey: 0xFFFF, DestQP: a.qp.QPN(), BECN: true, Reserved: string(bytes.Repeat([]byte("00"), 16))}
		if c != want {
			t.Fatalf("CNP %+v, want %+v", c, want)
		}
	}
	// The WRITEs arrived ECT(0) and were marked CE; B's ACKs left Not-ECT.
	tos := tosByOpcode(t, capture.Bytes())
	if len(tos[bth.RCWriteMiddle]) != 1 || !tos[bth.RCWriteMiddle][dcqcn.CE] {
		t.Errorf("WRITE MIDDLE TOS seen %v, want only CE", tos[bth.RCWriteMiddle])
	}
	if len(tos[bth.RCAck]) != 1 || !tos[bth.RCAck][0] {
		t.Errorf("ACK TOS seen %v, want only 0", tos[bth.RCAck])
	}
}

// tosByOpcode returns the IPv4 TOS values seen in a pcap per BTH opcode.
func tosByOpcode(t *testing.T, file []byte) map[bth.Opcode]map[uint8]bool {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	out := map[bth.Opcode]map[uint8]bool{}
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			return out
		}
		pkt := gopacket.NewPacket(data, r.LinkType(), gopacket.Default)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil || len(udp.Payload) == 0 {
			continue
		}
		op := bth.Opcode(udp.Payload[0])
		if out[op] == nil {
			out[op] = map[uint8]bool{}
		}
		out[op][ip.TOS] = true
	}
}
