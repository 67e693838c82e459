package roce

import (
	"encoding/binary"
	"hash/fnv"
	"net/netip"
)

// GID is a 128-bit global identifier (union ibv_gid): on RoCEv2 an IPv6 address, or an
// IPv4 one as ::ffff:a.b.c.d, in network order as in a GRH and the pingpong exchanges.
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the GID's IP address; an IPv4-mapped GID yields the IPv4 address.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsZero reports whether the GID is all zeros (an empty table slot).
func (g GID) IsZero() bool { return g == GID{} }

// String formats the GID as ibv_devinfo -v does, IPv4-mapped ones as ::ffff:a.b.c.d.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// GID table indexes, as on rxe (package doc, GID table): GIDIndexDefault is fe80::<node
// GUID>, listed but refused as a source GID (EINVAL); GIDIndexRoCEv2 is the device
// address. A device on an IPv6 link-local address has only that, at index 0.
const (
	GIDIndexDefault = 0
	GIDIndexRoCEv2  = 1
)

// NodeGUID is the node GUID of the device on address a (ibv_get_device_guid,
// DeviceAttr.NodeGUID): derived from the address as rxe derives it from the MAC, so it
// is known before Open and the same on every open.
func NodeGUID(a netip.Addr) uint64 {
	h := fnv.New64a()
	b := a.As16()
	h.Write([]byte("goroce"))
	h.Write(b[:])
	g := h.Sum64()
	// Locally administered, unicast (IEEE U/L and I/G bits of the first octet).
	g = g&^(uint64(0x03)<<56) | uint64(0x02)<<56
	return g
}

// buildGIDTable returns the GID table and the index of the RoCEv2 entry for addr.
func buildGIDTable(a netip.Addr, guid uint64) (table []GID, roce int) {
	if a.Is6() && !a.Is4In6() && a.IsLinkLocalUnicast() {
		return []GID{GIDFromAddr(a)}, 0
	}
	var def GID
	def[0], def[1] = 0xfe, 0x80
	binary.BigEndian.PutUint64(def[8:], guid)
	return []GID{def, GIDFromAddr(a)}, GIDIndexRoCEv2
}
