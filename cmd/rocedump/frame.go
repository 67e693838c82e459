package main

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"github.com/google/gopacket/layers"

	"github.com/goroce/goroce/bth"
)

// rocePort is the RoCEv2 UDP port.
const rocePort = 4791

// errNotRoCE marks frames that are skipped silently.
var errNotRoCE = errors.New("not RoCEv2")

// Framing problems of a frame that is RoCE by its UDP port; reported on the
// packet's line.
var (
	errCaptureCut = errors.New("frame cut short by the capture (snaplen)")
	errUDPLength  = errors.New("UDP length disagrees with the IP length")
)

// datagram is one UDP datagram to or from port 4791, cut out of a frame.
type datagram struct {
	env     bth.Envelope
	payload []byte // the UDP payload (BTH .. ICRC), trimmed to the UDP length
	ipOpts  bool   // IPv4 options present: the ICRC over them is not modelled
	err     error  // errCaptureCut or errUDPLength; payload is then unreliable
}

// Link-layer header types rocedump understands (LINKTYPE_* numbers).
const (
	linkEthernet = layers.LinkTypeEthernet
	linkRaw      = layers.LinkTypeRaw
	linkRawAlt   = 12 // LINKTYPE_RAW on OpenBSD-derived captures (DLT_RAW)
	linkSLL      = layers.LinkTypeLinuxSLL
	linkIPv4     = layers.LinkTypeIPv4
	linkIPv6     = layers.LinkTypeIPv6
)

const (
	etherTypeIPv4 = 0x0800
	etherTypeIPv6 = 0x86DD
	etherTypeVLAN = 0x8100
	etherTypeQinQ = 0x88A8
)

// extract finds the RoCEv2 UDP datagram in a captured frame. It returns
// errNotRoCE for anything that is not UDP to or from port 4791; it never
// panics on short or inconsistent frames.
func extract(link layers.LinkType, b []byte) (datagram, error) {
	switch link {
	case linkEthernet:
		if len(b) < 14 {
			return datagram{}, errNotRoCE
		}
		et := binary.BigEndian.Uint16(b[12:])
		b = b[14:]
		for et == etherTypeVLAN || et == etherTypeQinQ {
			if len(b) < 4 {
				return datagram{}, errNotRoCE
			}
			et = binary.BigEndian.Uint16(b[2:])
			b = b[4:]
		}
		return fromEtherType(et, b)
	case linkSLL:
		if len(b) < 16 {
			return datagram{}, errNotRoCE
		}
		return fromEtherType(binary.BigEndian.Uint16(b[14:]), b[16:])
	case linkRaw, linkRawAlt, linkIPv4, linkIPv6:
		if len(b) == 0 {
			return datagram{}, errNotRoCE
		}
		switch b[0] >> 4 {
		case 4:
			return fromIPv4(b)
		case 6:
			return fromIPv6(b)
		}
	}
	return datagram{}, errNotRoCE
}

func fromEtherType(et uint16, b []byte) (datagram, error) {
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
	if frag&0x3FFF != 0 { // MF set or non-zero offset: not a whole datagram
		return datagram{}, errNotRoCE
	}
	d.env.Src = netip.AddrFrom4([4]byte(b[12:16]))
	d.env.Dst = netip.AddrFrom4([4]byte(b[16:20]))
	d.env.IPID = binary.BigEndian.Uint16(b[4:])
	d.env.DF = frag&0x4000 != 0
	d.ipOpts = ihl > 20
	return fromUDP(d, b[ihl:total])
}

func fromIPv6(b []byte) (datagram, error) {
	if len(b) < 40 || b[0]>>4 != 6 || b[6] != 17 { // extension headers not followed
		return datagram{}, errNotRoCE
	}
	plen := int(binary.BigEndian.Uint16(b[4:]))
	var d datagram
	if 40+plen > len(b) {
		plen, d.err = len(b)-40, errCaptureCut
	}
	d.env.Src = netip.AddrFrom16([16]byte(b[8:24]))
	d.env.Dst = netip.AddrFrom16([16]byte(b[24:40]))
	return fromUDP(d, b[40:40+plen])
}

func fromUDP(d datagram, b []byte) (datagram, error) {
	if len(b) < 8 {
		return datagram{}, errNotRoCE
	}
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
