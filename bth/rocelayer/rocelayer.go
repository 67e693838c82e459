package rocelayer

import (
	"encoding/binary"
	"fmt"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/goroce/goroce/bth"
)

// Port is the IANA UDP destination port of RoCEv2.
const Port = 4791

// Layer type numbers, in gopacket's application range (1000-1999 are
// array-backed and fast).
const firstLayerNumber = 1791

// Layer types for the BTH and each extension header.
var (
	LayerTypeBTH          = register(0, "BTH", decodeBTH)
	LayerTypeDETH         = register(1, "DETH", nil)
	LayerTypeRETH         = register(2, "RETH", nil)
	LayerTypeAtomicETH    = register(3, "AtomicETH", nil)
	LayerTypeAETH         = register(4, "AETH", nil)
	LayerTypeAtomicAckETH = register(5, "AtomicAckETH", nil)
	LayerTypeImmDt        = register(6, "ImmDt", nil)
	LayerTypeIETH         = register(7, "IETH", nil)
	LayerTypeFETH         = register(8, "FETH", nil)
)

func register(n int, name string, dec func([]byte, gopacket.PacketBuilder) error) gopacket.LayerType {
	var d gopacket.Decoder = gopacket.DecodeFunc(decodeExtAlone)
	if dec != nil {
		d = gopacket.DecodeFunc(dec)
	}
	return gopacket.RegisterLayerType(firstLayerNumber+n, gopacket.LayerTypeMetadata{Name: name, Decoder: d})
}

func init() {
	layers.RegisterUDPPortLayerType(layers.UDPPort(Port), LayerTypeBTH)
}

// decodeExtAlone is the decoder of extension layer types: they only make
// sense after a BTH, which decodes them itself.
func decodeExtAlone([]byte, gopacket.PacketBuilder) error {
	return fmt.Errorf("rocelayer: extension header without a BTH")
}

// BTH is the Base Transport Header layer. Decoding it parses the whole
// RoCEv2 packet with bth.Parse: the embedded Fields carry every extension
// header too, so users of gopacket.DecodingLayerParser need only this
// layer (set IgnoreUnsupported: the next layer type is the first extension
// header). Contents is the 12-byte BTH; Payload is everything after it up
// to the pad (extension headers and data).
type BTH struct {
	layers.BaseLayer
	bth.Fields
	PadCount int
	Pad      []byte // the pad bytes
	ICRC     []byte // the 4 trailer bytes in wire order
	pkt      bth.Packet
}

// LayerType returns LayerTypeBTH.
func (b *BTH) LayerType() gopacket.LayerType { return LayerTypeBTH }

// CanDecode returns LayerTypeBTH.
func (b *BTH) CanDecode() gopacket.LayerClass { return LayerTypeBTH }

// NextLayerType returns the first extension header's layer type, or
// gopacket.LayerTypePayload.
func (b *BTH) NextLayerType() gopacket.LayerType { return nextAfter(b.Opcode, 0) }

// Packet returns the bth view of the decoded packet.
func (b *BTH) Packet() bth.Packet { return b.pkt }

// ICRCValue returns the trailer as the CRC value (little-endian on the wire).
func (b *BTH) ICRCValue() uint32 { return binary.LittleEndian.Uint32(b.ICRC) }

// DecodeFromBytes decodes a whole RoCEv2 UDP payload (BTH through ICRC).
func (b *BTH) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	p, err := bth.Parse(data)
	if err != nil {
		if err == bth.ErrTruncated {
			df.SetTruncated()
		}
		return err
	}
	n := len(data)
	end := n - bth.ICRCLen - p.PadCount()
	b.pkt = p
	b.Fields = p.Fields()
	b.PadCount = p.PadCount()
	b.Pad = data[end : n-bth.ICRCLen]
	b.ICRC = data[n-bth.ICRCLen:]
	b.BaseLayer = layers.BaseLayer{Contents: data[:bth.BTHLen], Payload: data[bth.BTHLen:end]}
	return nil
}

// SerializeTo writes the BTH and every extension header the opcode
// carries in front of the already-serialized payload, then the pad and 4
// zero ICRC bytes. The ICRC depends on the IP and UDP headers serialized
// after this layer: fill it afterwards with bth.PutICRC on the UDP payload.
// PadCount and the pad are derived from the payload length.
func (b *BTH) SerializeTo(buf gopacket.SerializeBuffer, _ gopacket.SerializeOptions) error {
	if !b.Opcode.Valid() {
		return fmt.Errorf("rocelayer: serialize: %w", bth.ErrUnknownOpcode)
	}
	payload := buf.Bytes()
	if len(payload) > 0 && !b.Opcode.HasPayload() {
		return fmt.Errorf("rocelayer: serialize: %w", bth.ErrUnexpectedPayload)
	}
	hdr := b.Opcode.HeaderLen()
	total := bth.PacketLen(b.Opcode, len(payload))
	var scratch [64]byte
	pkt := bth.Append(scratch[:0], &b.Fields, nil)[:hdr]
	front, err := buf.PrependBytes(hdr)
	if err != nil {
		return err
	}
	copy(front, pkt)
	front[1] |= byte(bth.PadCount(len(payload))) << 4
	tail, err := buf.AppendBytes(total - hdr - len(payload))
	if err != nil {
		return err
	}
	clear(tail)
	return nil
}

// decodeBTH adds the BTH, one layer per extension header, and the payload.
func decodeBTH(data []byte, p gopacket.PacketBuilder) error {
	b := &BTH{}
	if err := b.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(b)
	pkt := b.pkt
	op := pkt.Opcode()
	off := bth.BTHLen
	end := bth.BTHLen + len(b.Payload)
	add := func(l gopacket.Layer, base *layers.BaseLayer, size int) {
		base.Contents = data[off : off+size]
		base.Payload = data[off+size : end]
		off += size
		p.AddLayer(l)
	}
	if op.HasDETH() {
		l := &DETH{DETH: pkt.DETH(), Opcode: op}
		add(l, &l.BaseLayer, bth.DETHLen)
	}
	if op.HasFETH() {
		l := &FETH{FETH: pkt.FETH(), Opcode: op}
		add(l, &l.BaseLayer, bth.FETHLen)
	}
	if op.HasRETH() {
		l := &RETH{RETH: pkt.RETH(), Opcode: op}
		add(l, &l.BaseLayer, bth.RETHLen)
	}
	if op.HasAtomicETH() {
		l := &AtomicETH{AtomicETH: pkt.AtomicETH(), Opcode: op}
		add(l, &l.BaseLayer, bth.AtomicETHLen)
	}
	if op.HasAETH() {
		l := &AETH{AETH: pkt.AETH(), Opcode: op}
		add(l, &l.BaseLayer, bth.AETHLen)
	}
	if op.HasAtomicAckETH() {
		l := &AtomicAckETH{AtomicAckETH: pkt.AtomicAckETH(), Opcode: op}
		add(l, &l.BaseLayer, bth.AtomicAckETHLen)
	}
	if op.HasImm() {
		l := &ImmDt{Imm: pkt.Imm(), Opcode: op}
		add(l, &l.BaseLayer, bth.ImmDtLen)
	}
	if op.HasIETH() {
		l := &IETH{RKey: pkt.IETH(), Opcode: op}
		add(l, &l.BaseLayer, bth.IETHLen)
	}
	// A CNP's 16 reserved bytes, and any data, decode as Payload.
	return p.NextDecoder(gopacket.LayerTypePayload)
}

// extOrder is the wire order of the extension headers (IBA 9.2).
var extOrder = []struct {
	typ *gopacket.LayerType
	has func(bth.Opcode) bool
}{
	{&LayerTypeDETH, bth.Opcode.HasDETH},
	{&LayerTypeFETH, bth.Opcode.HasFETH},
	{&LayerTypeRETH, bth.Opcode.HasRETH},
	{&LayerTypeAtomicETH, bth.Opcode.HasAtomicETH},
	{&LayerTypeAETH, bth.Opcode.HasAETH},
	{&LayerTypeAtomicAckETH, bth.Opcode.HasAtomicAckETH},
	{&LayerTypeImmDt, bth.Opcode.HasImm},
	{&LayerTypeIETH, bth.Opcode.HasIETH},
}

// nextAfter returns the layer type following position pos (0 = BTH, i =
// extOrder[i-1]) for opcode op.
func nextAfter(op bth.Opcode, pos int) gopacket.LayerType {
	for _, e := range extOrder[pos:] {
		if e.has(op) {
			return *e.typ
		}
	}
	return gopacket.LayerTypePayload
}

// DETH is the Datagram Extended Transport Header layer (UD).
type DETH struct {
	layers.BaseLayer
	bth.DETH
	Opcode bth.Opcode // of the packet, to find the next layer
}

// LayerType returns LayerTypeDETH.
func (l *DETH) LayerType() gopacket.LayerType { return LayerTypeDETH }

// NextLayerType returns the layer after the DETH.
func (l *DETH) NextLayerType() gopacket.LayerType { return nextAfter(l.Opcode, 1) }

// FETH is the FLUSH Extended Transport Header layer.
type FETH struct {
	layers.BaseLayer
	bth.FETH
	Opcode bth.Opcode
}

// LayerType returns LayerTypeFETH.
func (l *FETH) LayerType() gopacket.LayerType { return LayerTypeFETH }

// NextLayerType returns the layer after the FETH.
func (l *FETH) NextLayerType() gopacket.LayerType { return nextAfter(l.Opcode, 2) }

// RETH is the RDMA Extended Transport Header layer.
type RETH struct {
	layers.BaseLayer
	bth.RETH
	Opcode bth.Opcode
}

// LayerType returns LayerTypeRETH.
func (l *RETH) LayerType() gopacket.LayerType { return LayerTypeRETH }

// NextLayerType returns the layer after the RETH.
func (l *RETH) NextLayerType() gopacket.LayerType { return nextAfter(l.Opcode, 3) }

// AtomicETH is the Atomic Extended Transport Header layer.
type AtomicETH struct {
	layers.BaseLayer
	bth.AtomicETH
	Opcode bth.Opcode
}

// LayerType returns LayerTypeAtomicETH.
func (l *AtomicETH) LayerType() gopacket.LayerType { return LayerTypeAtomicETH }

// NextLayerType returns the layer after the AtomicETH.
func (l *AtomicETH) NextLayerType() gopacket.LayerType { return nextAfter(l.Opcode, 4) }

// AETH is the ACK Extended Transport Header layer.
type AETH struct {
	layers.BaseLayer
	bth.AETH
	Opcode bth.Opcode
}

// LayerType returns LayerTypeAETH.
func (l *AETH) LayerType() gopacket.LayerType { return LayerTypeAETH }

// NextLayerType returns the layer after the AETH.
func (l *AETH) NextLayerType() gopacket.LayerType { return nextAfter(l.Opcode, 5) }

// AtomicAckETH is the Atomic ACK Extended Transport Header layer.
type AtomicAckETH struct {
	layers.BaseLayer
	bth.AtomicAckETH
	Opcode bth.Opcode
}

// LayerType returns LayerTypeAtomicAckETH.
func (l *AtomicAckETH) LayerType() gopacket.LayerType { return LayerTypeAtomicAckETH }

// NextLayerType returns the layer after the AtomicAckETH.
func (l *AtomicAckETH) NextLayerType() gopacket.LayerType { return nextAfter(l.Opcode, 6) }

// ImmDt is the immediate data layer.
type ImmDt struct {
	layers.BaseLayer
	Imm    uint32
	Opcode bth.Opcode
}

// LayerType returns LayerTypeImmDt.
func (l *ImmDt) LayerType() gopacket.LayerType { return LayerTypeImmDt }

// NextLayerType returns the layer after the ImmDt.
func (l *ImmDt) NextLayerType() gopacket.LayerType { return nextAfter(l.Opcode, 7) }

// IETH is the Invalidate Extended Transport Header layer.
type IETH struct {
	layers.BaseLayer
	RKey   uint32 // R_Key to invalidate
	Opcode bth.Opcode
}

// LayerType returns LayerTypeIETH.
func (l *IETH) LayerType() gopacket.LayerType { return LayerTypeIETH }

// NextLayerType returns the layer after the IETH.
func (l *IETH) NextLayerType() gopacket.LayerType { return nextAfter(l.Opcode, 8) }
