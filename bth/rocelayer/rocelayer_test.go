package rocelayer_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/bth/internal/tracetest"
	"github.com/goroce/goroce/bth/rocelayer"
)

// wantLayers lists the layer types gopacket must produce above UDP.
func wantLayers(p bth.Packet) []gopacket.LayerType {
	op := p.Opcode()
	out := []gopacket.LayerType{rocelayer.LayerTypeBTH}
	for _, e := range []struct {
		has bool
		t   gopacket.LayerType
	}{
		{op.HasDETH(), rocelayer.LayerTypeDETH}, {op.HasFETH(), rocelayer.LayerTypeFETH}, {op.HasRETH(), rocelayer.LayerTypeRETH},
		{op.HasAtomicETH(), rocelayer.LayerTypeAtomicETH}, {op.HasAETH(), rocelayer.LayerTypeAETH},
		{op.HasAtomicAckETH(), rocelayer.LayerTypeAtomicAckETH}, {op.HasImm(), rocelayer.LayerTypeImmDt},
		{op.HasIETH(), rocelayer.LayerTypeIETH},
	} {
		if e.has {
			out = append(out, e.t)
		}
	}
	if len(p.Payload()) > 0 || op == bth.CNP {
		out = append(out, gopacket.LayerTypePayload)
	}
	return out
}

func TestTraces(t *testing.T) {
	n := 0
	for _, name := range tracetest.Names(t) {
		for _, fr := range tracetest.Frames(t, name) {
			n++
			pkt := gopacket.NewPacket(fr.Data, layers.LayerTypeEthernet, gopacket.Default)
			if el := pkt.ErrorLayer(); el != nil {
				t.Fatalf("%s frame %d: %v", name, fr.No, el.Error())
			}
			want, err := bth.Parse(fr.UDP)
			if err != nil {
				t.Fatal(err)
			}
			var got []gopacket.LayerType
			for _, l := range pkt.Layers()[3:] { // after Ethernet, IP, UDP
				got = append(got, l.LayerType())
			}
			if w := wantLayers(want); len(got) != len(w) || !equalTypes(got, w) {
				t.Fatalf("%s frame %d: layers %v, want %v", name, fr.No, got, w)
			}
			b := pkt.Layer(rocelayer.LayerTypeBTH).(*rocelayer.BTH)
			if b.Fields != want.Fields() || b.ICRCValue() != want.ICRC() || b.PadCount != want.PadCount() {
				t.Errorf("%s frame %d: BTH layer %+v", name, fr.No, b.Fields)
			}
			if pl := pkt.ApplicationLayer(); len(want.Payload()) > 0 && (pl == nil || !bytes.Equal(pl.Payload(), want.Payload())) {
				t.Errorf("%s frame %d: payload layer differs", name, fr.No)
			}
			if l, ok := pkt.Layer(rocelayer.LayerTypeRETH).(*rocelayer.RETH); ok && l.RETH != want.RETH() {
				t.Errorf("%s frame %d: RETH %+v", name, fr.No, l.RETH)
			}
			if l, ok := pkt.Layer(rocelayer.LayerTypeAETH).(*rocelayer.AETH); ok && l.AETH != want.AETH() {
				t.Errorf("%s frame %d: AETH %+v", name, fr.No, l.AETH)
			}
			if l, ok := pkt.Layer(rocelayer.LayerTypeDETH).(*rocelayer.DETH); ok && l.DETH != want.DETH() {
				t.Errorf("%s frame %d: DETH %+v", name, fr.No, l.DETH)
			}
			reserialize(t, name, fr, pkt)
		}
	}
	if n < 1000 {
		t.Errorf("only %d RoCE frames", n)
	}
}

func equalTypes(a, b []gopacket.LayerType) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// reserialize rebuilds the frame from its decoded layers with BTH's
// SerializeTo plus bth.PutICRC, and expects the captured bytes.
func reserialize(t *testing.T, name string, fr tracetest.Frame, pkt gopacket.Packet) {
	t.Helper()
	eth := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
	b := pkt.Layer(rocelayer.LayerTypeBTH).(*rocelayer.BTH)
	payload := gopacket.Payload(b.Packet().Payload())
	if b.Opcode == bth.CNP {
		payload = nil
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true}, eth, ip, udp, b, payload); err != nil {
		t.Fatal(err)
	}
	out := buf.Bytes()
	bth.PutICRC(&fr.Env, out[len(out)-len(fr.UDP):])
	if !bytes.Equal(out, fr.Data) {
		t.Errorf("%s frame %d: reserialized frame differs\n got %x\nwant %x", name, fr.No, out, fr.Data)
	}
}

func TestDecodingLayerParser(t *testing.T) {
	var (
		eth layers.Ethernet
		ip4 layers.IPv4
		udp layers.UDP
		b   rocelayer.BTH
	)
	parser := gopacket.NewDecodingLayerParser(layers.LayerTypeEthernet, &eth, &ip4, &udp, &b)
	parser.IgnoreUnsupported = true
	var decoded []gopacket.LayerType
	for _, fr := range tracetest.Frames(t, "ib_write_bw") {
		if err := parser.DecodeLayers(fr.Data, &decoded); err != nil {
			t.Fatal(err)
		}
		if decoded[len(decoded)-1] != rocelayer.LayerTypeBTH {
			t.Fatalf("decoded %v", decoded)
		}
		p, _ := bth.Parse(fr.UDP)
		if b.Fields != p.Fields() {
			t.Fatalf("frame %d: %+v", fr.No, b.Fields)
		}
	}
}

func TestMalformed(t *testing.T) {
	frames := tracetest.Frames(t, "rc_pingpong_s64")
	data := bytes.Clone(frames[0].Data)
	udpOff := len(data) - len(frames[0].UDP)
	cases := []struct {
		name string
		mod  func([]byte) []byte
		err  error
	}{
		{"bad tver", func(b []byte) []byte { b[udpOff+1] |= 1; return b }, bth.ErrBadTVer},
		{"unknown opcode", func(b []byte) []byte { b[udpOff] = 0x1F; return b }, bth.ErrUnknownOpcode},
		{"truncated", func(b []byte) []byte { return b[:udpOff+10] }, bth.ErrTruncated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pkt := gopacket.NewPacket(c.mod(bytes.Clone(data)), layers.LayerTypeEthernet, gopacket.Default)
			el := pkt.ErrorLayer()
			if el == nil || !errors.Is(el.Error(), c.err) {
				t.Fatalf("error layer %v, want %v", el, c.err)
			}
		})
	}
}

func TestSerializeCNP(t *testing.T) {
	b := &rocelayer.BTH{Fields: bth.Fields{Opcode: bth.CNP, BECN: true, PKey: 0xFFFF, DestQP: 0x11}}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, b); err != nil {
		t.Fatal(err)
	}
	want := bth.Append(nil, &b.Fields, nil)
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("got %x want %x", buf.Bytes(), want)
	}
	bad := &rocelayer.BTH{Fields: bth.Fields{Opcode: bth.RCAck}}
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{}, bad, gopacket.Payload{1}); !errors.Is(err, bth.ErrUnexpectedPayload) {
		t.Fatalf("ACK with payload: %v", err)
	}
}

// TestFlushAndAtomicWriteLayers: a FLUSH decodes as BTH, FETH, RETH (the FETH
// first), an ATOMIC WRITE as BTH, RETH and its 8-byte payload.
func TestFlushAndAtomicWriteLayers(t *testing.T) {
	for _, f := range []bth.Fields{
		{Opcode: bth.RCFlush, PKey: 0xFFFF, DestQP: 0x11, PSN: 5, AckReq: true,
			FETH: bth.FETH{PlacementType: bth.FlushGlobal | bth.FlushPersistent, Selectivity: bth.FlushMR},
			RETH: bth.RETH{VA: 0x1000, RKey: 0x2233, DMALen: 64}},
		{Opcode: bth.RCAtomicWrite, PKey: 0xFFFF, DestQP: 0x11, PSN: 6, AckReq: true,
			RETH: bth.RETH{VA: 0x1008, RKey: 0x2233, DMALen: 8}},
	} {
		var payload []byte
		if f.Opcode == bth.RCAtomicWrite {
			payload = []byte{1, 2, 3, 4, 5, 6, 7, 8}
		}
		b := bth.Append(nil, &f, payload)
		pkt := gopacket.NewPacket(b, rocelayer.LayerTypeBTH, gopacket.Default)
		p, _ := bth.Parse(b)
		var got []gopacket.LayerType
		for _, l := range pkt.Layers() {
			got = append(got, l.LayerType())
		}
		if want := wantLayers(p); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%v: layers %v, want %v", f.Opcode, got, want)
		}
		if r := pkt.Layer(rocelayer.LayerTypeRETH).(*rocelayer.RETH); r.RETH != f.RETH {
			t.Fatalf("%v: RETH %+v", f.Opcode, r.RETH)
		}
		if l := pkt.Layer(rocelayer.LayerTypeFETH); l != nil && l.(*rocelayer.FETH).FETH != f.FETH {
			t.Fatalf("FETH %+v", l.(*rocelayer.FETH).FETH)
		}
	}
}
