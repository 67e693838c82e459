package main

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/bth"
)

// superFrame builds a raw IPv4 frame holding the packets built from fs and
// payload sizes end to end, each with the ICRC of the ID the kernel gives its
// segment (id0 + k), as a capture before GSO segmentation holds it.
func superFrame(id0 uint16, fs []bth.Fields, sizes []int) []byte {
	env := bth.Envelope{Src: netip.MustParseAddr("198.18.0.1"), Dst: netip.MustParseAddr("198.18.0.11"), DF: true,
		SrcPort: 50001, DstPort: rocePort}
	var udp []byte
	for k, f := range fs {
		p := bth.Append(nil, &f, make([]byte, sizes[k]))
		env.IPID = id0 + uint16(k)
		bth.PutICRC(&env, p)
		udp = append(udp, p...)
	}
	b := make([]byte, 28, 28+len(udp))
	b[0], b[8], b[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(b[2:], uint16(28+len(udp)))
	binary.BigEndian.PutUint16(b[4:], id0)
	b[6] = 0x40
	copy(b[12:], []byte{198, 18, 0, 1, 198, 18, 0, 11})
	binary.BigEndian.PutUint16(b[20:], 50001)
	binary.BigEndian.PutUint16(b[22:], rocePort)
	binary.BigEndian.PutUint16(b[24:], uint16(8+len(udp)))
	return append(b, udp...)
}

func TestSegmentsSplitsSuperDatagram(t *testing.T) {
	mid := func(psn bth.PSN) bth.Fields {
		return bth.Fields{Opcode: bth.RCWriteMiddle, PKey: 0xFFFF, DestQP: 0x12, PSN: psn}
	}
	ack := func(psn bth.PSN) bth.Fields {
		return bth.Fields{Opcode: bth.RCAck, PKey: 0xFFFF, DestQP: 0x12, PSN: psn, AETH: bth.AETH{Syndrome: 0x1F}}
	}
	last := mid(5)
	last.Opcode = bth.RCWriteLast
	tests := []struct {
		name    string
		fs      []bth.Fields
		sizes   []int
		corrupt int // byte of the UDP payload to flip, -1 none
		want    int // datagrams, each with a good ICRC unless corrupt
	}{
		{"one packet", []bth.Fields{mid(1)}, []int{1024}, -1, 1},
		{"MIDDLEs and a shorter LAST", []bth.Fields{mid(1), mid(2), mid(3), mid(4), last}, []int{1024, 1024, 1024, 1024, 100}, -1, 5},
		{"ACKs of one QP", []bth.Fields{ack(7), ack(9), ack(12)}, []int{0, 0, 0}, -1, 3},
		{"corrupt first packet: not split", []bth.Fields{mid(1), mid(2)}, []int{1024, 1024}, 100, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := superFrame(40, tc.fs, tc.sizes)
			if tc.corrupt >= 0 {
				f[28+tc.corrupt] ^= 1
			}
			d, err := extract(linkRaw, f)
			if err != nil {
				t.Fatal(err)
			}
			segs := segments(&d)
			if len(segs) != tc.want {
				t.Fatalf("%d datagrams, want %d", len(segs), tc.want)
			}
			for k, s := range segs {
				if ok := icrcOK(&s); ok != (tc.corrupt < 0) {
					t.Fatalf("segment %d: ICRC ok %v", k, ok)
				}
				if tc.corrupt < 0 && s.env.IPID != 40+uint16(k) {
					t.Fatalf("segment %d: IPv4 ID %d", k, s.env.IPID)
				}
			}
		})
	}
}
