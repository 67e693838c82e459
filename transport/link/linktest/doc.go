// Package linktest provides in-memory link.Link doubles for tests: Pipe, a
// connected pair built on channels that runs inside testing/synctest bubbles,
// and Lossy, a wrapper that drops, duplicates, reorders, corrupts and delays
// datagrams deterministically from a seed. Wrap either in link.NewTap to get a
// pcap Wireshark opens. It is the analogue of wireguard-go's conn/bindtest.
package linktest
