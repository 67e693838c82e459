package bth

import (
	"encoding/binary"
	"net/netip"
)

// Envelope holds the IP and UDP header facts the ICRC covers but a UDP
// payload lacks (RoCEv2 Annex 17.3.3). Fields the ICRC
// masks (TOS/traffic class, TTL/hop limit, flow label, checksums) are absent.
// Lengths are derived from the UDP payload. The packet is IPv4 (20-byte
// header, no options) when Src is an IPv4 or IPv4-mapped IPv6 address (as a
// dual-stack socket reports IPv4 peers), else IPv6.
type Envelope struct {
	Src, Dst         netip.Addr
	IPID             uint16 // IPv4 Identification; ignored for IPv6
	DF               bool   // IPv4 Don't Fragment flag; rxe always sets it
	SrcPort, DstPort uint16 // UDP ports; DstPort is 4791 for RoCEv2
}

const (
	ipv4HdrLen = 20
	ipv6HdrLen = 40
	udpHdrLen  = 8
	// maskedLRH is the 8 bytes of 0xFF standing in for the LRH.
	maskedLRH = 8
	// maxPseudo is the masked prefix: LRH stand-in, IPv6, UDP, BTH.
	maxPseudo = maskedLRH + ipv6HdrLen + udpHdrLen + BTHLen
	// ipIDOffset is where the IPv4 Identification sits in the CRC input.
	ipIDOffset = maskedLRH + 4
)

// pseudo writes the masked LRH stand-in, IP, UDP header and BTH of the
// packet into ph and returns how many bytes it used and how many BTH bytes
// of udpPayload it consumed.
func pseudo(ph *[maxPseudo]byte, env *Envelope, udpPayload []byte, id uint16) (n, used int) {
	return pseudoHead(ph, env, len(udpPayload), udpPayload, id)
}

// pseudoHead is pseudo for a packet of total UDP payload bytes whose first
// bytes are head (at least the BTH, or the whole packet).
func pseudoHead(ph *[maxPseudo]byte, env *Envelope, total int, head []byte, id uint16) (n, used int) {
	udpLen := udpHdrLen + total
	for i := range maskedLRH {
		ph[i] = 0xFF
	}
	var ip []byte
	if is4(env) {
		ip = ph[maskedLRH : maskedLRH+ipv4HdrLen]
		ip[0] = 0x45
		ip[1] = 0xFF // TOS masked
		binary.BigEndian.PutUint16(ip[2:], uint16(ipv4HdrLen+udpLen))
		binary.BigEndian.PutUint16(ip[4:], id)
		ip[6], ip[7] = 0, 0
		if env.DF {
			ip[6] = 0x40
		}
		ip[8] = 0xFF // TTL masked
		ip[9] = 17
		ip[10], ip[11] = 0xFF, 0xFF // checksum masked
		s, d := env.Src.Unmap().As4(), env.Dst.Unmap().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
	} else {
		ip = ph[maskedLRH : maskedLRH+ipv6HdrLen]
		ip[0], ip[1], ip[2], ip[3] = 0x6F, 0xFF, 0xFF, 0xFF // traffic class, flow label masked
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = 17
		ip[7] = 0xFF // hop limit masked
		s, d := env.Src.As16(), env.Dst.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	}
	n = maskedLRH + len(ip)
	u := ph[n : n+udpHdrLen]
	binary.BigEndian.PutUint16(u[0:], env.SrcPort)
	binary.BigEndian.PutUint16(u[2:], env.DstPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0xFF, 0xFF // UDP checksum masked
	n += udpHdrLen
	used = min(BTHLen, max(total-ICRCLen, 0), len(head))
	copy(ph[n:], head[:used])
	if used > 4 {
		ph[n+4] = 0xFF // FECN, BECN, reserved masked
	}
	return n + used, used
}

// icrc computes IBA's ICRC with IPv4 Identification id.
func icrc(env *Envelope, udpPayload []byte, id uint16) uint32 {
	var ph [maxPseudo]byte
	n, used := pseudo(&ph, env, udpPayload, id)
	c := crcShort(0, ph[:n])
	if end := len(udpPayload) - ICRCLen; end > used {
		c = crcIEEE(c, udpPayload[used:end])
	}
	return c
}

// rxeFlush reports whether udpPayload is an RC FLUSH, whose ICRC rxe computes
// its own way (see ICRC).
func rxeFlush(udpPayload []byte) bool {
	return len(udpPayload) >= BTHLen+ICRCLen && Opcode(udpPayload[0]) == RCFlush
}

// rxeTwice continues c, IBA's ICRC of an RC FLUSH, into rxe's: the CRC once
// more over every byte before the trailer, unmasked.
func rxeTwice(c uint32, udpPayload []byte) uint32 {
	return crcIEEE(c, udpPayload[:len(udpPayload)-ICRCLen])
}

// wireICRC is the ICRC a packet carries on the wire: IBA's, or rxe's for an
// RC FLUSH.
func wireICRC(env *Envelope, udpPayload []byte, id uint16) uint32 {
	c := icrc(env, udpPayload, id)
	if rxeFlush(udpPayload) {
		c = rxeTwice(c, udpPayload)
	}
	return c
}

// ICRC returns the invariant CRC of a RoCEv2 packet as rxe puts it on the wire
// and checks it: CRC-32 (IEEE) over 8 bytes of 0xFF, the IP and UDP headers
// described by env with the variant fields set to ones, the BTH with byte 4
// set to ones, and everything after it except the last 4 bytes of udpPayload
// (the trailer), which is IBA's ICRC (IBAICRC) for every opcode but RC FLUSH
// (0x1c). rxe's opcode table gives FLUSH no payload offset, so rxe (Linux 6.2
// to at least 6.12) takes its payload to start at the BTH: its ICRC of a FLUSH
// continues IBA's over every byte before the trailer once more, unmasked
// (seen on rxe 6.12's FLUSH packets, testdata/rxe-6.12-flush.pcap). goroce
// sends that, to be understood by rxe, and accepts both (AcceptICRC,
// CheckICRC). It does not allocate or copy the packet.
func ICRC(env *Envelope, udpPayload []byte) uint32 {
	return wireICRC(env, udpPayload, env.IPID)
}

// IBAICRC is the ICRC as IBA Annex 17.3.3 defines it for every opcode. It
// differs from ICRC for RC FLUSH only.
func IBAICRC(env *Envelope, udpPayload []byte) uint32 {
	return icrc(env, udpPayload, env.IPID)
}

// ICRCParts is ICRC for a packet held as a gather list of three pieces:
// hdr (the BTH and extension headers, at least BTHLen bytes), payload, and
// tail (the pad bytes and the 4-byte trailer, which is not covered). The CRC
// runs over each piece where it lies, so a payload sent straight from
// registered memory is never copied. An RC FLUSH gets rxe's ICRC, as from ICRC.
func ICRCParts(env *Envelope, hdr, payload, tail []byte) uint32 {
	var ph [maxPseudo]byte
	n, used := pseudoHead(&ph, env, len(hdr)+len(payload)+len(tail), hdr, env.IPID)
	c := crcShort(0, ph[:n])
	c = crcIEEE(c, hdr[used:])
	c = crcIEEE(c, payload)
	c = crcIEEE(c, tail[:len(tail)-ICRCLen])
	if Opcode(hdr[0]) == RCFlush {
		c = crcIEEE(c, hdr)
		c = crcIEEE(c, payload)
		c = crcIEEE(c, tail[:len(tail)-ICRCLen])
	}
	return c
}

// ICRCOverHeaders is ICRC (rxe's formula for RC FLUSH) for a packet whose IP
// and UDP headers are at hand as bytes, such as a capture: ipUDP runs from the
// first byte of the IP header to the end of the UDP header. It covers what an
// Envelope cannot describe (IPv4 options, IPv6 extension headers) as they are,
// and masks the same variant fields as ICRC. It returns 0 when ipUDP or
// udpPayload is too short.
func ICRCOverHeaders(ipUDP, udpPayload []byte) uint32 {
	c := IBAICRCOverHeaders(ipUDP, udpPayload)
	if c != 0 && rxeFlush(udpPayload) {
		c = rxeTwice(c, udpPayload)
	}
	return c
}

// IBAICRCOverHeaders is ICRCOverHeaders with IBA's formula for every opcode
// (IBAICRC).
func IBAICRCOverHeaders(ipUDP, udpPayload []byte) uint32 {
	if len(ipUDP) < ipv4HdrLen+udpHdrLen || len(udpPayload) < BTHLen+ICRCLen {
		return 0
	}
	h := make([]byte, maskedLRH, maskedLRH+len(ipUDP)+BTHLen)
	for i := range h {
		h[i] = 0xFF
	}
	h = append(h, ipUDP...)
	ip := h[maskedLRH:]
	if ip[0]>>4 == 4 {
		ip[1] = 0xFF                // TOS
		ip[8] = 0xFF                // TTL
		ip[10], ip[11] = 0xFF, 0xFF // header checksum
	} else {
		ip[0] |= 0x0F // traffic class, flow label
		ip[1], ip[2], ip[3] = 0xFF, 0xFF, 0xFF
		ip[7] = 0xFF // hop limit
	}
	h[len(h)-2], h[len(h)-1] = 0xFF, 0xFF // UDP checksum
	bt := len(h)
	h = append(h, udpPayload[:BTHLen]...)
	h[bt+4] = 0xFF // FECN, BECN, reserved
	c := crcIEEE(0, h)
	return crcIEEE(c, udpPayload[BTHLen:len(udpPayload)-ICRCLen])
}

// PutICRC writes ICRC(env, udpPayload) little-endian into the last 4
// bytes of udpPayload, as rxe does (for an RC FLUSH, rxe's ICRC). udpPayload must be at least 4 bytes.
func PutICRC(env *Envelope, udpPayload []byte) {
	binary.LittleEndian.PutUint32(udpPayload[len(udpPayload)-ICRCLen:], ICRC(env, udpPayload))
}

// CheckICRC reports whether the trailer of udpPayload matches its ICRC: for
// an RC FLUSH, rxe's or IBA's. Packets shorter than BTH plus trailer never
// match.
func CheckICRC(env *Envelope, udpPayload []byte) bool {
	if len(udpPayload) < BTHLen+ICRCLen {
		return false
	}
	want := binary.LittleEndian.Uint32(udpPayload[len(udpPayload)-ICRCLen:])
	c := icrc(env, udpPayload, env.IPID)
	return want == c || rxeFlush(udpPayload) && want == rxeTwice(c, udpPayload)
}

// AcceptICRC is the receive check of a RoCEv2 packet that came through a
// UDP socket: it reports whether the trailer of udpPayload is the packet's
// ICRC. The socket cannot see the IPv4 Identification (rxe draws a new ID
// per packet; a sender such as a Link uses 0), so for IPv4 env.IPID is
// ignored and the packet is accepted when some ID makes it verify; IPv6 is
// checked exactly.
//
// It costs one CRC pass over the packet: the CRC with ID 0 is computed once,
// and when it does not match, the ID is solved from that same value (the
// CRC is affine in the ID bits, see SolveIPv4ID). An IPv4 packet is thus
// checked to 2^-16 (a corrupted one passes with probability 1 in 65536)
// instead of the 2^-32 of a full check. Packets shorter than BTH plus
// trailer never pass. An RC FLUSH passes with rxe's ICRC or IBA's (see ICRC).
func AcceptICRC(env *Envelope, udpPayload []byte) bool {
	if len(udpPayload) < BTHLen+ICRCLen {
		return false
	}
	return acceptC0(env, udpPayload, icrc(env, udpPayload, 0))
}

// AcceptICRCPlace is AcceptICRC that also copies the len(dst) bytes of
// udpPayload from off into dst, in the same pass over them: a receiver that
// places a payload while it checks the packet reads the bytes once instead
// of twice. dst is written whatever the verdict, so the caller must own it
// until the packet is accepted (a responder places only where the packet's
// own message lands, bytes that stay undefined until that message
// completes). When [off, off+len(dst)) is not within the packet's body
// (after the BTH, before the trailer), dst is left alone and the verdict is
// AcceptICRC's. dst and udpPayload must not overlap.
func AcceptICRCPlace(env *Envelope, udpPayload []byte, off int, dst []byte) bool {
	end := len(udpPayload) - ICRCLen
	if off < BTHLen || off+len(dst) > end || rxeFlush(udpPayload) {
		return AcceptICRC(env, udpPayload)
	}
	var ph [maxPseudo]byte
	n, used := pseudo(&ph, env, udpPayload, 0)
	c := crcShort(0, ph[:n])
	c = crcIEEE(c, udpPayload[used:off])
	c = crcCopy(c, dst, udpPayload[off:off+len(dst)])
	c = crcIEEE(c, udpPayload[off+len(dst):end])
	return acceptC0(env, udpPayload, c)
}

// acceptC0 is AcceptICRC's verdict given c0, the packet's ICRC with IPv4
// Identification 0.
func acceptC0(env *Envelope, udpPayload []byte, c0 uint32) bool {
	want := binary.LittleEndian.Uint32(udpPayload[len(udpPayload)-ICRCLen:])
	if want == c0 {
		return true
	}
	if is4(env) {
		if _, ok := solveID(len(udpPayload), 0, want^c0); ok {
			return true
		}
	}
	if !rxeFlush(udpPayload) {
		return false
	}
	_, ok := solveFlushID(env, udpPayload, want, c0)
	return ok
}

// solveFlushID checks an RC FLUSH's trailer want against rxe's ICRC, given c0,
// IBA's ICRC with ID 0: for IPv4 it returns the ID that makes it verify.
func solveFlushID(env *Envelope, udpPayload []byte, want, c0 uint32) (uint16, bool) {
	r0 := rxeTwice(c0, udpPayload)
	if want == r0 {
		return 0, true
	}
	if !is4(env) {
		return 0, false
	}
	return solveID(len(udpPayload), len(udpPayload)-ICRCLen, want^r0)
}

// SolveIPv4ID finds the IPv4 Identification that makes the trailer of
// udpPayload verify, for a receiver that cannot see the ID (a UDP socket;
// rxe draws a new ID per packet). env.IPID is ignored; env.DF is used as
// given. A receiver that only needs the verdict calls AcceptICRC.
//
// The CRC is affine over GF(2) in its input, so the ICRC with ID x is
// ICRC(0) xor L(x) with L linear and injective on 16 bits: the function
// computes one CRC over the packet (with ID 0) and inverts L, which costs
// about as much as a 64-byte CRC once the length's shift operator is cached.
// Exactly one ID matches a correct packet. A corrupted packet is falsely
// accepted with probability 2^-16 (1 in 65536), instead of the 2^-32 of a
// full check: a 16-bit integrity loss the caller should know about.
// ok is false for IPv6 envelopes, short packets, and when no ID matches.
//
// An RC FLUSH is solved for rxe's ICRC first, then IBA's (see ICRC).
func SolveIPv4ID(env *Envelope, udpPayload []byte) (id uint16, ok bool) {
	if !is4(env) || len(udpPayload) < BTHLen+ICRCLen {
		return 0, false
	}
	want := binary.LittleEndian.Uint32(udpPayload[len(udpPayload)-ICRCLen:])
	c0 := icrc(env, udpPayload, 0)
	if rxeFlush(udpPayload) {
		if id, ok := solveFlushID(env, udpPayload, want, c0); ok {
			return id, true
		}
	}
	return solveID(len(udpPayload), 0, want^c0)
}

// solveID returns the IPv4 ID x with L(x) = s, where s is the trailer xor
// the ICRC computed with ID 0 over an IPv4 packet of udpLen UDP payload
// bytes whose CRC input runs extra bytes past the packet (rxe's FLUSH). s is
// the bare CRC of the ID bits followed by the CRC input bytes after the ID
// field (solveAfter).
func solveID(udpLen, extra int, s uint32) (uint16, bool) {
	total := maskedLRH + ipv4HdrLen + udpHdrLen + udpLen - ICRCLen + extra
	return solveAfter(total-ipIDOffset-2, s)
}

// is4 reports whether env describes an IPv4 packet.
func is4(env *Envelope) bool { return env.Src.Is4() || env.Src.Is4In6() }
