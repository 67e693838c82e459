package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// source reads a capture's records in file order, each with the link type
// of its interface. Link types are 16-bit numbers (SLL2 is 276), which
// gopacket's 8-bit layers.LinkType truncates, so they are read from the
// file here.
type source struct {
	next func() (data []byte, link uint32, ts time.Time, err error)
}

// open detects pcap or pcapng by the file's magic number.
func open(r io.Reader) (*source, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, fmt.Errorf("reading magic: %w", err)
	}
	switch m := hex.EncodeToString(magic); m {
	case "0a0d0d0a": // pcapng section header block
		tap := &ngTap{r: br}
		section := 0 // pcapgo's section, counted as it ends each one
		opts := pcapgo.DefaultNgReaderOptions
		// Every interface's packets, so that frame numbers are tshark's.
		opts.WantMixedLinkType = true
		opts.SectionEndCallback = func([]pcapgo.NgInterface, pcapgo.NgSectionInfo) { section++ }
		ng, err := pcapgo.NewNgReader(tap, opts)
		if err != nil {
			return nil, err
		}
		return &source{next: func() ([]byte, uint32, time.Time, error) {
			d, ci, err := ng.ReadPacketData()
			if err != nil {
				return nil, 0, time.Time{}, err
			}
			return d, tap.linkType(section, &ci), ci.Timestamp, nil
		}}, nil
	case "a1b2c3d4", "d4c3b2a1", "a1b23c4d", "4d3cb2a1": // pcap, µs or ns, either byte order
		var link uint32
		if h, err := br.Peek(24); err == nil { // else pcapgo reports the short header
			var bo binary.ByteOrder = binary.LittleEndian
			if m[:2] == "a1" {
				bo = binary.BigEndian
			}
			link = bo.Uint32(h[20:]) & 0xFFFF // the upper bits are FCS information
		}
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, err
		}
		return &source{next: func() ([]byte, uint32, time.Time, error) {
			d, ci, err := pr.ReadPacketData()
			return d, link, ci.Timestamp, err
		}}, nil
	}
	return nil, fmt.Errorf("not a pcap or pcapng file (magic %x)", magic)
}

// ngTap passes a pcapng stream through to pcapgo and records the link type
// of every Interface Description Block on the way, by section, in full: pcapgo
// keeps only the low 8 bits. It sees each block before pcapgo returns the
// packets that refer to it.
type ngTap struct {
	r        io.Reader
	hdr      []byte // the first 12 bytes of the current block, as they arrive
	skip     int    // bytes left in the current block after hdr
	big      bool   // the current section is big-endian
	lost     bool   // a block length made no sense; pcapgo will report it
	sections [][]uint32
}

func (t *ngTap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.scan(p[:n])
	return n, err
}

// scan walks the block headers in b, continuing from the previous call.
func (t *ngTap) scan(b []byte) {
	for len(b) > 0 && !t.lost {
		if t.skip > 0 {
			k := min(t.skip, len(b))
			t.skip, b = t.skip-k, b[k:]
			continue
		}
		k := min(12-len(t.hdr), len(b))
		t.hdr, b = append(t.hdr, b[:k]...), b[k:]
		if len(t.hdr) == 12 {
			t.block(t.hdr)
			t.hdr = t.hdr[:0]
		}
	}
}

// block reads a block's type, length and first body word (every block has
// one: the minimum block length is 12).
func (t *ngTap) block(h []byte) {
	const shb, idb = 0x0A0D0D0A, 1
	if binary.LittleEndian.Uint32(h) == shb { // a palindrome: either byte order
		t.big = binary.BigEndian.Uint32(h[8:]) == 0x1A2B3C4D // byte-order magic
		t.sections = append(t.sections, nil)
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if t.big {
		bo = binary.BigEndian
	}
	n := bo.Uint32(h[4:])
	if n < 12 || n > 1<<30 {
		t.lost = true
		return
	}
	if bo.Uint32(h) == idb && len(t.sections) > 0 {
		s := &t.sections[len(t.sections)-1]
		*s = append(*s, uint32(bo.Uint16(h[8:])))
	}
	t.skip = int(n) - 12
}

// linkType returns the link type of packet ci of section (0-based).
func (t *ngTap) linkType(section int, ci *gopacket.CaptureInfo) uint32 {
	if !t.lost && section < len(t.sections) && ci.InterfaceIndex < len(t.sections[section]) {
		return t.sections[section][ci.InterfaceIndex]
	}
	if len(ci.AncillaryData) > 0 {
		if lt, ok := ci.AncillaryData[0].(layers.LinkType); ok {
			return uint32(lt)
		}
	}
	return 1 << 16 // unknown: not a link type number
}
