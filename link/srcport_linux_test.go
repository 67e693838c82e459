//go:build linux

package link

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
)

// freeUDPPort returns a UDP port on 127.0.0.1 that was free a moment ago.
func freeUDPPort(t *testing.T) uint16 {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}

// TestSourcePort: a granted port is where datagrams come from, runs of
// different ports in one batch each leave from their own, an ungranted port
// is EINVAL with nothing of it sent, and a port in use, the limit and
// MaxSourcePorts < 0 say false.
func TestSourcePort(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Config{MaxSourcePorts: 2})
	b := listen(t, "127.0.0.2:0", Config{})
	p1, p2 := freeUDPPort(t), freeUDPPort(t)
	if !a.SourcePort(0) || !a.SourcePort(a.LocalAddr().Port()) {
		t.Fatal("the link's own port refused")
	}
	if !a.SourcePort(p1) || !a.SourcePort(p1) || !a.SourcePort(p2) {
		t.Fatalf("free ports %d, %d refused", p1, p2)
	}
	if p3 := freeUDPPort(t); a.SourcePort(p3) {
		t.Errorf("a third port granted over MaxSourcePorts 2")
	}
	to := b.LocalAddr()
	msgs := []Message{
		{Buf: []byte("own"), Addr: to},
		{Buf: []byte("p1-a"), Addr: to, SrcPort: p1},
		{Buf: []byte("p1-b"), Addr: to, SrcPort: p1},
		{Buf: []byte("p2"), Addr: to, SrcPort: p2},
		{Buf: []byte("own again"), Addr: to, SrcPort: a.LocalAddr().Port()},
	}
	if n, err := a.WriteBatch(msgs); n != len(msgs) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	want := map[string]uint16{"own": a.LocalAddr().Port(), "p1-a": p1, "p1-b": p1, "p2": p2, "own again": a.LocalAddr().Port()}
	for _, m := range readN(t, b, len(msgs)) {
		if w, ok := want[string(m.Buf)]; !ok || m.Addr.Port() != w || m.Addr.Addr() != a.LocalAddr().Addr() {
			t.Errorf("%q from %v, want port %d", m.Buf, m.Addr, w)
		}
	}

	// A port nobody granted: the messages before it are sent, it is not.
	bad := freeUDPPort(t)
	n, err := a.WriteBatch([]Message{{Buf: []byte("ok"), Addr: to}, {Buf: []byte("bad"), Addr: to, SrcPort: bad}})
	if n != 1 || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("ungranted port: %d, %v", n, err)
	}
	if got := readN(t, b, 1); string(got[0].Buf) != "ok" {
		t.Fatalf("got %q", got[0].Buf)
	}

	// A port some other socket holds is refused, and not retried.
	busy, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	c := listen(t, "127.0.0.1:0", Config{})
	if c.SourcePort(uint16(busy.LocalAddr().(*net.UDPAddr).Port)) {
		t.Error("a port in use was granted")
	}
	if d := listen(t, "127.0.0.1:0", Config{MaxSourcePorts: -1}); d.SourcePort(freeUDPPort(t)) {
		t.Error("MaxSourcePorts -1 granted a port")
	}

	// After Close nothing is granted and the extra sockets are gone.
	a.Close()
	if a.SourcePort(freeUDPPort(t)) {
		t.Error("granted after Close")
	}
	if r, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(p1)}); err != nil {
		t.Errorf("port %d still bound after Close: %v", p1, err)
	} else {
		r.Close()
	}
}

// TestSourcePortLinkLocal: on an IPv6 link-local address, whose zone is an
// interface name, a send-only socket binds in the link's zone and its
// datagrams arrive from its port.
func TestSourcePortLinkLocal(t *testing.T) {
	nsA, nsB := newNetns(t), newNetns(t)
	vethPair(nsA, nsB, "lla", "llb", []string{"fe80::a1/64"}, []string{"fe80::b1/64"})
	a := listenIn(nsA, t, "[fe80::a1%lla]:4791", Config{})
	b := listenIn(nsB, t, "[fe80::b1%llb]:4791", Config{})
	const port = 0xC123
	if !a.SourcePort(port) {
		t.Fatalf("port %#x refused on %v", port, a.LocalAddr())
	}
	to := netip.AddrPortFrom(netip.MustParseAddr("fe80::b1").WithZone("lla"), 4791)
	if n, err := a.WriteBatch([]Message{{Buf: []byte("ll"), Addr: to, SrcPort: port}}); n != 1 || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	m := readN(t, b, 1)[0]
	if string(m.Buf) != "ll" || m.Addr.Port() != port || m.Addr.Addr().WithZone("") != netip.MustParseAddr("fe80::a1") {
		t.Fatalf("%q from %v, want from [fe80::a1]:%d", m.Buf, m.Addr, port)
	}
}
