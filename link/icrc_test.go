package link

import (
	"bytes"
	"hash/crc32"
)

// icrcV4 computes the RoCEv2 ICRC (IBA A17.3.3) over an
// IPv4 header followed by the UDP header (28 bytes) and a UDP payload whose
// last 4 bytes are the ICRC field.
func icrcV4(hdr []byte, payload []byte) uint32 {
	buf := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	ip := bytes.Clone(hdr[:20])
	ip[1], ip[8], ip[10], ip[11] = 0xff, 0xff, 0xff, 0xff // TOS, TTL, checksum
	buf = append(buf, ip...)
	udp := bytes.Clone(hdr[20:28])
	udp[6], udp[7] = 0xff, 0xff // UDP checksum
	buf = append(buf, udp...)
	bth := bytes.Clone(payload[:len(payload)-4])
	bth[4] = 0xff // FECN, BECN, reserved
	buf = append(buf, bth...)
	return crc32.ChecksumIEEE(buf)
}
