package interop

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/google/gopacket/pcapgo"
	"github.com/goroce/goroce/bth"
)

// TestRxeFlushICRC pins a fact of kernel 6.12's rxe that the verbs-probe flush row found
// (testdata/rxe-6.12-flush.pcap: rxe's WRITE, goroce's ACK, then rxe's FLUSH and its
// retransmissions, which goroce dropped): the ICRC of rxe's FLUSH packets (opcode 0x1c) is
// not the one IBA defines. rxe's opcode table gives RC_FLUSH no payload offset, so its ICRC
// code takes the payload to begin at the BTH: the CRC runs over the masked IP, UDP and
// BTH headers and the FETH and RETH, as for any packet, then over those 32 bytes once more,
// unmasked. rxe checks a received FLUSH the same way. Its other packets carry IBA's ICRC.
func TestRxeFlushICRC(t *testing.T) {
	f, err := os.Open("testdata/rxe-6.12-flush.pcap")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	const ipUDPLen = 20 + 8
	var flushes, others int
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		ipUDP, pl := data[14:14+ipUDPLen], data[14+ipUDPLen:]
		wire := binary.LittleEndian.Uint32(pl[len(pl)-bth.ICRCLen:])
		iba := bth.ICRCOverHeaders(ipUDP, pl)
		if pl[0] != 0x1c {
			others++
			if iba != wire {
				t.Errorf("opcode %#x: ICRC %#x on the wire, IBA's %#x", pl[0], wire, iba)
			}
			continue
		}
		flushes++
		const hdrs = bth.BTHLen + 4 + 16 // BTH, FETH, RETH: the whole FLUSH but its ICRC
		if len(pl) != hdrs+bth.ICRCLen {
			t.Fatalf("FLUSH of %d bytes, want %d", len(pl), hdrs+bth.ICRCLen)
		}
		twice := append(append(append([]byte(nil), pl[:hdrs]...), pl[:hdrs]...), 0, 0, 0, 0)
		if got := bth.ICRCOverHeaders(ipUDP, twice); got != wire {
			t.Errorf("FLUSH: ICRC %#x on the wire, %#x over the headers twice (IBA's: %#x)", wire, got, iba)
		}
		if iba == wire {
			t.Errorf("FLUSH: the wire carries IBA's ICRC %#x", iba)
		}
	}
	if flushes == 0 || others == 0 {
		t.Fatalf("%d FLUSH and %d other packets in the capture", flushes, others)
	}
}
