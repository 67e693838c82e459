package bth_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/goroce/goroce/bth"
)

// TestRxe612FlushICRC: rxe's opcode table gives RC FLUSH no payload offset,
// so its ICRC of a FLUSH runs over the masked headers as IBA's does and then
// over the BTH, FETH and RETH once more, unmasked; it checks a received FLUSH
// the same way. testdata/rxe-6.12-flush.pcap (kernel 6.12 rxe's WRITE, an
// ACK, then rxe's FLUSH and its retransmissions, captured by the interop lab)
// holds such packets. ICRC, ICRCOverHeaders and PutICRC give rxe's value for
// them, so goroce's FLUSH is rxe's byte for byte; CheckICRC, AcceptICRC and
// SolveIPv4ID take it (and IBA's); every other opcode keeps IBA's ICRC.
func TestRxe612FlushICRC(t *testing.T) {
	f, err := os.Open("testdata/rxe-6.12-flush.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var flushes, others int
	for no := 1; ; no++ {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		pkt := gopacket.NewPacket(data, r.LinkType(), gopacket.Default)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil {
			continue
		}
		src, _ := netip.AddrFromSlice(ip.SrcIP)
		dst, _ := netip.AddrFromSlice(ip.DstIP)
		env := bth.Envelope{Src: src, Dst: dst, IPID: ip.Id, DF: ip.Flags&layers.IPv4DontFragment != 0,
			SrcPort: uint16(udp.SrcPort), DstPort: uint16(udp.DstPort)}
		b := udp.Payload
		p, err := bth.Parse(b)
		if err != nil {
			t.Fatalf("frame %d: %v", no, err)
		}
		wire := binary.LittleEndian.Uint32(b[len(b)-bth.ICRCLen:])
		hdrs := append(append([]byte(nil), ip.Contents...), udp.Contents...)
		if got := bth.ICRC(&env, b); got != wire {
			t.Errorf("frame %d (%v): ICRC %#x, wire %#x", no, p.Opcode(), got, wire)
		}
		if got := bth.ICRCOverHeaders(hdrs, b); got != wire {
			t.Errorf("frame %d (%v): ICRCOverHeaders %#x, wire %#x", no, p.Opcode(), got, wire)
		}
		noID := env
		noID.IPID = 0
		if !bth.CheckICRC(&env, b) || !bth.AcceptICRC(&noID, b) {
			t.Errorf("frame %d (%v): CheckICRC %v AcceptICRC %v", no, p.Opcode(), bth.CheckICRC(&env, b), bth.AcceptICRC(&noID, b))
		}
		if id, ok := bth.SolveIPv4ID(&noID, b); !ok || id != ip.Id {
			t.Errorf("frame %d (%v): SolveIPv4ID %#x %v, pcap %#x", no, p.Opcode(), id, ok, ip.Id)
		}
		fl := p.Fields()
		again := bth.Append(nil, &fl, p.Payload())
		bth.PutICRC(&env, again)
		if !bytes.Equal(again, b) {
			t.Errorf("frame %d (%v): rebuilt\n%x\nwant\n%x", no, p.Opcode(), again, b)
		}
		iba := bth.IBAICRC(&env, b)
		if p.Opcode() != bth.RCFlush {
			others++
			if iba != wire {
				t.Errorf("frame %d (%v): IBA's ICRC %#x, wire %#x", no, p.Opcode(), iba, wire)
			}
			continue
		}
		flushes++
		if iba == wire || bth.IBAICRCOverHeaders(hdrs, b) == wire {
			t.Errorf("frame %d: rxe's FLUSH carries IBA's ICRC %#x", no, iba)
		}
		// A FLUSH with IBA's ICRC is accepted too.
		ibaPkt := append([]byte(nil), b...)
		binary.LittleEndian.PutUint32(ibaPkt[len(ibaPkt)-bth.ICRCLen:], iba)
		if !bth.CheckICRC(&env, ibaPkt) || !bth.AcceptICRC(&noID, ibaPkt) {
			t.Errorf("frame %d: a FLUSH with IBA's ICRC is refused", no)
		}
		// A corrupted one is not.
		bad := append([]byte(nil), b...)
		bad[20] ^= 1
		if bth.CheckICRC(&env, bad) {
			t.Errorf("frame %d: a corrupted FLUSH passes CheckICRC", no)
		}
	}
	if flushes == 0 || others == 0 {
		t.Fatalf("%d FLUSH and %d other packets in the capture", flushes, others)
	}
	t.Logf("%d FLUSH packets with rxe's ICRC, %d others with IBA's", flushes, others)
}
