package attachd

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestFreeBlockDrops sends datagrams to the QPNs of a block nobody holds and
// to those of an attached process's block after it left: roced reads and
// counts both (its free set takes a released block back).
func TestFreeBlockDrops(t *testing.T) {
	dm := startDaemon(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0), Config{})
	dev, _ := dm.attachGSI(t)
	d := dm.dev
	held := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		for b := 1; b < len(d.owner); b++ {
			if d.owner[b] != nil {
				return b
			}
		}
		return -1
	}
	own := held()
	if own < 0 {
		t.Fatal("the attached process holds no block")
	}
	free := own%(d.g.Blocks()-1) + 1
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dm.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send := func(b, n int) {
		t.Helper()
		first, _ := d.g.Range(b)
		for i := range n {
			var pkt [16]byte // a BTH (SEND only) and an ICRC's room: the steering reads DestQP
			pkt[0], pkt[2], pkt[3] = 0x04, 0xff, 0xff
			binary.BigEndian.PutUint32(pkt[4:], first+uint32(i))
			if _, err := conn.Write(pkt[:]); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitDrops := func(want uint64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); d.Drops() < want; time.Sleep(drainEvery / 4) {
			if time.Now().After(deadline) {
				t.Fatalf("roce_steer_drops %d after 10 s, want %d", d.Drops(), want)
			}
		}
	}
	base := d.Drops()
	send(free, 3)
	waitDrops(base + 3)
	dev.Close()
	for deadline := time.Now().Add(10 * time.Second); held() == own; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the block is still held 10 s after its process closed the device")
		}
	}
	send(own, 4)
	waitDrops(base + 7)
}
