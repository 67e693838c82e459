package link

import "hash/crc32"

// UDP GSO limits a UDP link splits trains by. They are fixed, not probed, so
// that the split, and with it every segment's IPv4 Identification, is the
// same on every kernel (TrainIPv4ID).
const (
	// GSOMaxSegments is the most segments in one super-datagram:
	// UDP_MAX_SEGMENTS of the first kernels with UDP GSO (4.18; 6.x allows
	// 128, which a portable split cannot rely on).
	GSOMaxSegments = 64
	// GSOMaxBytes is the most UDP payload in one super-datagram: an IPv4
	// packet of 65535 bytes less its 20-byte header and the 8-byte UDP
	// header. IPv6 could carry 20 bytes more; the split ignores that so it
	// does not depend on the family.
	GSOMaxBytes = 65535 - 20 - 8
)

// GSOSegments returns how many segments of segSize bytes one UDP GSO
// super-datagram carries. A UDP link splits a longer train into
// super-datagrams of exactly this many segments, the last one taking the
// rest: 15 for 4112-byte segments, 64 for small ones.
func GSOSegments(segSize int) int {
	if segSize <= 0 {
		return 1
	}
	return max(1, min(GSOMaxSegments, GSOMaxBytes/segSize))
}

// GSOSegmentIPv4ID is the IPv4 Identification Linux gives segment i
// (0-based) of one UDP GSO super-datagram sent from an unconnected socket
// with DF set, as a UDP link sends: i, modulo 2^16.
//
// Why (kernel source, measured in TestGSOSegmentIDsOnWire): udp_sendmsg
// builds one IPv4 header for the whole super-datagram, and
// ip_select_ident_segs gives an unconnected socket's DF packet ID 0 (a
// connected socket would draw from its inet_id counter instead). When the
// super-datagram is split in software (__udp_gso_segment via
// inet_gso_segment, on a device without UDP segmentation offload, or at a
// receiver without UDP_GRO), inet_gso_segment writes id, id+1, ... into the
// segments' headers: no fixed-ID flag exists for UDP. Every super-datagram
// starts again at 0. A NIC with hardware UDP segmentation offload builds the
// headers itself; the drivers we know increment the ID the same way, but no
// test here covers hardware.
func GSOSegmentIPv4ID(i int) uint16 { return uint16(i) }

// TrainIPv4ID is the IPv4 Identification that segment i (0-based) of a
// train with segments of segSize bytes carries on the wire when a UDP link
// sends it: GSOSegmentIPv4ID of its index in its super-datagram (see
// GSOSegments). The engine computes each segment's ICRC with this ID. If the
// link has to send the train one datagram per segment instead (GSO refused,
// or a Link without GSO below a wrapper that splits trains), it re-keys the
// ICRC to the ID that datagram gets (see ICRCIDDelta), so the rule holds for
// every Link.
func TrainIPv4ID(segSize, i int) uint16 {
	return GSOSegmentIPv4ID(i % GSOSegments(segSize))
}

// zeros feeds crc32 the zero bytes after the ID field.
var zeros [4096]byte

// ICRCIDDelta returns what to XOR into the ICRC of an IPv4 RoCEv2 datagram
// of n UDP payload bytes (ICRC included) when its IPv4 Identification
// changes from a to b. The ICRC is a CRC-32 over 8 bytes of ones, the IPv4
// header (ID at byte 4), the UDP header and the payload less its last 4
// bytes, so the ID field is followed by n+18 bytes; the CRC is affine in its
// input, so the change is the bare CRC (zero start, no final inversion) of
// a^b followed by those n+18 zero bytes. For the ICRC as stored (little
// endian), XOR each byte with the delta's little-endian bytes.
func ICRCIDDelta(n int, a, b uint16) uint32 {
	d := a ^ b
	if d == 0 {
		return 0
	}
	// crc32.Update inverts the register on entry and on exit: starting it
	// at all ones and inverting the result gives the bare CRC.
	r := ^crc32.Update(0xFFFFFFFF, crc32.IEEETable, []byte{byte(d >> 8), byte(d)})
	for z := n + 18; z > 0; {
		k := min(z, len(zeros))
		r = ^crc32.Update(^r, crc32.IEEETable, zeros[:k])
		z -= k
	}
	return r
}
