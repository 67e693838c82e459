// Package rocelayer teaches gopacket to decode RoCEv2: the InfiniBand BTH
// and its extension headers on UDP port 4791. Importing it registers the
// port, so gopacket.NewPacket on any RoCEv2 Ethernet frame yields
//
//	Ethernet / IPv4|IPv6 / UDP / BTH / [DETH] [RETH] [AtomicETH] [AETH] [AtomicAckETH] [ImmDt] [IETH] / Payload
//
// It is for tests and tools (cmd/rocedump, golden captures); the data path
// uses package bth directly and never gopacket. Decoding goes through
// bth.Parse, so a malformed packet becomes a gopacket decode failure with
// the bth sentinel error, never a panic.
package rocelayer
