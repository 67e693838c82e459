package rocelayer_test

import (
	"testing"

	"github.com/google/gopacket"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/internal/tracetest"
	"github.com/goroce/goroce/bth/rocelayer"
)

// FuzzDecode: decoding any UDP payload as a BTH never panics, and a
// successful decode agrees with bth.Parse.
func FuzzDecode(f *testing.F) {
	for _, name := range []string{"rping", "ib_read_bw", "ud_pingpong"} {
		for i, fr := range tracetest.Frames(f, name) {
			if i < 8 {
				f.Add(fr.UDP)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		pkt := gopacket.NewPacket(b, rocelayer.LayerTypeBTH, gopacket.Default)
		p, err := bth.Parse(b)
		l, ok := pkt.Layer(rocelayer.LayerTypeBTH).(*rocelayer.BTH)
		if ok != (err == nil) {
			t.Fatalf("gopacket ok %v, Parse %v", ok, err)
		}
		if ok && l.Fields != p.Fields() {
			t.Fatal("fields differ")
		}
	})
}
