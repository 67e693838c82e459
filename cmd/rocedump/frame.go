package main

import (
	"encoding/binary"
	"errors"
	"math/bits"
	"net/netip"

	"github.com/goroce/goroce/bth"
)

// rocePort is the RoCEv2 UDP port.
const rocePort = 4791

// errNotRoCE marks frames that are skipped silently.
var errNotRoCE = errors.New("not RoCEv2")

// errLinkType marks frames of a link type extract does not decode; dump
// counts them for a warning.
var errLinkType = errors.New("link type not supported")

// Framing problems of a frame that is RoCE by its UDP port; reported on the
// packet's line.
var (
	errCaptureCut = errors.New("frame cut short by the capture (snaplen)")
	errUDPLength  = errors.New("UDP length disagrees with the IP length")
	errFragment   = errors.New("first IP fragment of a datagram not reassembled")
)

// datagram is one UDP datagram to or from port 4791, cut out of a frame.
type datagram struct {
	env     bth.Envelope
	payload []byte // the UDP payload (BTH .. ICRC), trimmed to the UDP length
	hdr     []byte // the IP header (with options or extension headers) and UDP header, as captured
	// extra: IPv4 options or IPv6 extension headers, which bth.Envelope
	// cannot describe; the ICRC is then computed over hdr (bth.ICRCOverHeaders).
	extra bool
	err   error // errCaptureCut, errUDPLength or errFragment; payload is then unreliable
}

// Link-layer header types rocedump understands (LINKTYPE_* numbers, read
// from the file as 16 bits: gopacket's layers.LinkType is 8 bits wide).
const (
	linkNull     = 0   // BSD loopback: 4-byte address family, host byte order
	linkEthernet = 1   // with 802.1Q, 802.1ad and 0x9100 tags
	linkRawAlt   = 12  // DLT_RAW on most BSDs
	linkRawBSD   = 14  // DLT_RAW on OpenBSD
	linkRaw      = 101 // LINKTYPE_RAW: IPv4 or IPv6 by the version nibble
	linkLoop     = 108 // OpenBSD loopback: address family in network byte order
	linkSLL      = 113 // Linux cooked capture v1 (tcpdump -i any before libpcap 1.10)
	linkIPv4     = 228
	linkIPv6     = 229
	linkSLL2     = 276 // Linux cooked capture v2 (tcpdump -i any since libpcap 1.10)
)

const (
	etherTypeIPv4    = 0x0800
	etherTypeIPv6    = 0x86DD
	etherTypeVLAN    = 0x8100
	etherTypeQinQ    = 0x88A8
	etherTypeQinQOld = 0x9100 // pre-802.1ad QinQ outer tag
)

// extract finds the RoCEv2 UDP datagram in a captured frame. It returns
// errNotRoCE for anything that is not UDP to or from port 4791, and
// errLinkType for link types it does not know; it never panics on short or
// inconsistent frames.
func extract(link uint32, b []byte) (datagram, error) {
	switch link {
	case linkEthernet:
		if len(b) < 14 {
			return datagram{}, errNotRoCE
		}
		return fromEtherType(binary.BigEndian.Uint16(b[12:]), b[14:])
	case linkSLL:
		if len(b) < 16 {
			return datagram{}, errNotRoCE
		}
		return fromEtherType(binary.BigEndian.Uint16(b[14:]), b[16:])
	case linkSLL2: // protocol type first, then 18 bytes of interface and address
		if len(b) < 20 {
			return datagram{}, errNotRoCE
		}
		return fromEtherType(binary.BigEndian.Uint16(b[0:]), b[20:])
	case linkNull, linkLoop:
		if len(b) < 4 {
			return datagram{}, errNotRoCE
		}
		// The writer's byte order is unknown for NULL (and LOOP files are
		// not always written right): families fit in 16 bits, so a value
		// that does not is the other byte order.
		af := binary.LittleEndian.Uint32(b)
		if af > 0xFFFF {
			af = bits.ReverseBytes32(af)
		}
		switch af {
		case 2: // AF_INET everywhere
			return fromIPv4(b[4:])
		case 10, 24, 28, 30: // AF_INET6: Linux, Net/OpenBSD, FreeBSD, macOS
			return fromIPv6(b[4:])
		}
		return datagram{}, errNotRoCE
	case linkRaw, linkRawAlt, linkRawBSD, linkIPv4, linkIPv6:
		if len(b) == 0 {
			return datagram{}, errNotRoCE
		}
		switch b[0] >> 4 {
		case 4:
			return fromIPv4(b)
		case 6:
			return fromIPv6(b)
		}
		return datagram{}, errNotRoCE
	}
	return datagram{}, errLinkType
}

// fromEtherType decodes b as the payload of EtherType et, skipping VLAN
// tags (cooked captures carry them as the protocol too).
func fromEtherType(et uint16, b []byte) (datagram, error) {
	for et == etherTypeVLAN || et == etherTypeQinQ || et == etherTypeQinQOld {
		if len(b) < 4 {
			return datagram{}, errNotRoCE
		}
		et = binary.BigEndian.Uint16(b[2:])
		b = b[4:]
	}
	switch et {
	case etherTypeIPv4:
		return fromIPv4(b)
	case etherTypeIPv6:
		return fromIPv6(b)
	}
	return datagram{}, errNotRoCE
}

func fromIPv4(b []byte) (datagram, error) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return datagram{}, errNotRoCE
	}
	ihl := int(b[0]&0x0F) * 4
	total := int(binary.BigEndian.Uint16(b[2:]))
	if ihl < 20 || b[9] != 17 || total < ihl || ihl > len(b) {
		return datagram{}, errNotRoCE
	}
	var d datagram
	if total > len(b) {
		total, d.err = len(b), errCaptureCut
	}
	frag := binary.BigEndian.Uint16(b[6:])
	switch {
	case frag&0x1FFF != 0: // a later fragment: no UDP header
		return datagram{}, errNotRoCE
	case frag&0x2000 != 0 && d.err == nil: // MF: the UDP header but not the whole datagram
		d.err = errFragment
	}
	d.env.Src = netip.AddrFrom4([4]byte(b[12:16]))
	d.env.Dst = netip.AddrFrom4([4]byte(b[16:20]))
	d.env.IPID = binary.BigEndian.Uint16(b[4:])
	d.env.DF = frag&0x4000 != 0
	d.extra = ihl > 20
	return fromUDP(d, b[:total], ihl)
}

// IPv6 next-header values rocedump follows to reach UDP (RFC 8200 4, RFC
// 4302 for AH).
const (
	ipv6HopByHop = 0
	ipv6Routing  = 43
	ipv6Fragment = 44
	ipv6AH       = 51
	ipv6DestOpts = 60
	ipv6Mobility = 135
	ipv6HIP      = 139
	ipv6Shim6    = 140
)

func fromIPv6(b []byte) (datagram, error) {
	if len(b) < 40 || b[0]>>4 != 6 {
		return datagram{}, errNotRoCE
	}
	plen := int(binary.BigEndian.Uint16(b[4:]))
	var d datagram
	if 40+plen > len(b) {
		plen, d.err = len(b)-40, errCaptureCut
	}
	b = b[:40+plen]
	nh, off := b[6], 40
	for nh != 17 {
		if len(b) < off+8 {
			return datagram{}, errNotRoCE
		}
		var n int
		switch nh {
		case ipv6HopByHop, ipv6Routing, ipv6DestOpts, ipv6Mobility, ipv6HIP, ipv6Shim6:
			n = (int(b[off+1]) + 1) * 8
		case ipv6AH:
			n = (int(b[off+1]) + 2) * 4
		case ipv6Fragment:
			n = 8
			fo := binary.BigEndian.Uint16(b[off+2:])
			if fo&0xFFF8 != 0 { // a later fragment: no UDP header
				return datagram{}, errNotRoCE
			}
			if fo&1 != 0 && d.err == nil {
				d.err = errFragment
			}
		default: // ESP, no next header, another IP layer, ...
			return datagram{}, errNotRoCE
		}
		nh, off = b[off], off+n
	}
	d.env.Src = netip.AddrFrom16([16]byte(b[8:24]))
	d.env.Dst = netip.AddrFrom16([16]byte(b[24:40]))
	d.extra = off > 40
	return fromUDP(d, b, off)
}

// fromUDP decodes the UDP header at b[off:], b being the IP packet.
func fromUDP(d datagram, b []byte, off int) (datagram, error) {
	if len(b) < off+8 {
		return datagram{}, errNotRoCE
	}
	d.hdr, b = b[:off+8], b[off:]
	d.env.SrcPort = binary.BigEndian.Uint16(b[0:])
	d.env.DstPort = binary.BigEndian.Uint16(b[2:])
	if d.env.DstPort != rocePort && d.env.SrcPort != rocePort {
		return datagram{}, errNotRoCE
	}
	n := int(binary.BigEndian.Uint16(b[4:]))
	if n != len(b) && d.err == nil {
		d.err = errUDPLength
	}
	d.payload = b[8:min(max(n, 8), len(b))]
	return d, nil
}

// icrc computes the packet's ICRC: with bth when the envelope describes its
// headers, else with bth.ICRCOverHeaders.
func icrc(d *datagram) uint32 {
	if d.extra {
		return bth.ICRCOverHeaders(d.hdr, d.payload)
	}
	return bth.ICRC(&d.env, d.payload)
}
