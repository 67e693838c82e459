package roce

import (
	"encoding/binary"
	"hash/fnv"
	"net/netip"
)

// GID is a 128-bit global identifier (union ibv_gid). On RoCEv2 it is an IPv6
// address, or an IPv4 address in its IPv4-mapped form ::ffff:a.b.c.d. The bytes are
// in network order, as they travel in a GRH and in the pingpong/perftest exchanges.
type GID [16]byte

// GIDFromAddr returns the RoCEv2 GID of an IP address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// Addr returns the IP address the GID stands for; an IPv4-mapped GID yields the IPv4
// address.
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// IsZero reports whether the GID is all zeros (an empty table slot).
func (g GID) IsZero() bool { return g == GID{} }

// String formats the GID the way ibv_devinfo -v does: an IPv6 address, with
// IPv4-mapped GIDs as ::ffff:a.b.c.d.
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// GID table layout. It mirrors rxe so that the usual command lines carry over: rxe's
// index 0 is the link-local GID derived from the MAC and index 1 is the IPv4-mapped
// address, which is why rxe users pass -g 1 (perftest -x 1) for RoCEv2 over IPv4.
//
//	index 0 (GIDIndexDefault): fe80::<node GUID>, the default GID. It is listed so
//	        the indexes line up with rxe, but the device's socket is not bound to it,
//	        so a QP or AH that names it as its source GID is refused with EINVAL.
//	index 1 (GIDIndexRoCEv2):  the address the Device was opened on: ::ffff:a.b.c.d
//	        for IPv4, the IPv6 address itself for IPv6.
//
// A Device opened on an IPv6 link-local address has only that address, at index 0,
// since it already is the link-local GID.
const (
	GIDIndexDefault = 0
	GIDIndexRoCEv2  = 1
)

// NodeGUID is the node GUID of the device on address a (ibv_get_device_guid,
// DeviceAttr.NodeGUID), known before the device is opened. It is derived from the
// address as rxe derives it from the MAC, so the same address gives the same GUID
// on every open.
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
