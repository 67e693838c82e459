//go:build linux

package link

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
)

// TestMulticastLoopback: two links on lo join a group on the same port (two
// addresses, so two devices of one host); a third sends one datagram to the
// group and both members get it from their group ReceiveFunc, with the group
// as Local and the multicast TTL. Joining twice, joining a unicast address
// and leaving a group not joined are refused; after LeaveGroup the function
// ends with net.ErrClosed.
func TestMulticastLoopback(t *testing.T) {
	group := netip.MustParseAddr("239.7.7.7")
	b := listen(t, "127.0.0.2:0", Config{})
	c := listen(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.3"), b.LocalAddr().Port()).String(), Config{})
	a := listen(t, "127.0.0.1:0", Config{})
	var fns []ReceiveFunc
	for _, l := range []*UDP{b, c} {
		fn, err := l.JoinGroup(group)
		if err != nil {
			t.Fatalf("JoinGroup on %v: %v", l.LocalAddr(), err)
		}
		fns = append(fns, fn)
	}
	to := netip.AddrPortFrom(group, b.LocalAddr().Port())
	if _, err := a.WriteBatch([]Message{{Buf: []byte("to the group"), Addr: to}}); err != nil {
		t.Fatal(err)
	}
	for i, fn := range fns {
		m := readDatagrams(t, fn, 4, 1)[0]
		if string(m.Buf) != "to the group" || m.Local != group || m.Addr != a.LocalAddr() || m.TTL != DefaultMulticastTTL {
			t.Fatalf("member %d got %q to %v from %v TTL %d", i, m.Buf, m.Local, m.Addr, m.TTL)
		}
	}
	if _, err := b.JoinGroup(group); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("second JoinGroup = %v, want EEXIST", err)
	}
	for _, g := range []string{"127.0.0.9", "ff12::1"} {
		if _, err := b.JoinGroup(netip.MustParseAddr(g)); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("JoinGroup(%s) = %v, want EINVAL", g, err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		_, err := fns[0](newMsgs(1))
		errc <- err
	}()
	if err := b.LeaveGroup(group); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("group read after LeaveGroup = %v, want net.ErrClosed", err)
	}
	if err := b.LeaveGroup(group); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("second LeaveGroup = %v, want EADDRNOTAVAIL", err)
	}
	// c is still a member; a group can be joined again after leaving.
	if _, err := a.WriteBatch([]Message{{Buf: []byte("again"), Addr: to}}); err != nil {
		t.Fatal(err)
	}
	if m := readDatagrams(t, fns[1], 4, 1)[0]; string(m.Buf) != "again" {
		t.Fatalf("remaining member got %q", m.Buf)
	}
	if _, err := b.JoinGroup(group); err != nil {
		t.Fatalf("rejoin: %v", err)
	}
}

// TestMulticastAcrossVeth: in two test namespaces joined by a veth pair, a
// member in each receives a datagram sent to the group on the RoCEv2 port,
// IPv4 and IPv6 (a site-local and a link-local scope group): the remote one
// over the wire, the local one through the kernel's multicast loopback. The
// sender's MulticastTTL and a per-message TTL arrive as set. JoinGroup and
// SourcePort are called from the test's goroutine, outside the namespaces:
// the link opens those sockets in its own namespace all the same.
func TestMulticastAcrossVeth(t *testing.T) {
	nsA, nsB := newNetns(t), newNetns(t)
	vethPair(nsA, nsB, "mva", "mvb", []string{"10.202.0.1/24", "fd00:202::1/64"}, []string{"10.202.0.2/24", "fd00:202::2/64"})
	for _, tt := range []struct{ a, b, group string }{
		{"10.202.0.1:4791", "10.202.0.2:4791", "239.1.2.3"},
		{"[fd00:202::1]:4791", "[fd00:202::2]:4791", "ff02::1:3"},
		{"[fd00:202::1]:4791", "[fd00:202::2]:4791", "ff12::1:2"},
	} {
		t.Run(tt.group, func(t *testing.T) {
			group := netip.MustParseAddr(tt.group)
			a, b := listenIn(nsA, t, tt.a, Config{MulticastTTL: 5}), listenIn(nsB, t, tt.b, Config{})
			fa, errA := a.JoinGroup(group)
			fb, errB := b.JoinGroup(group)
			if errA != nil || errB != nil {
				t.Fatalf("JoinGroup: %v, %v", errA, errB)
			}
			to := netip.AddrPortFrom(group, RoCEv2Port)
			const sport = 50001
			if !a.SourcePort(sport) {
				t.Fatalf("SourcePort(%d) refused", sport)
			}
			if _, err := a.WriteBatch([]Message{{Buf: []byte("one"), Addr: to}, {Buf: []byte("two"), Addr: to, TTL: 9, SrcPort: sport}}); err != nil {
				t.Fatal(err)
			}
			for name, fn := range map[string]ReceiveFunc{"remote": fb, "local": fa} {
				got := readDatagrams(t, fn, 4, 2)
				if string(got[0].Buf) != "one" || got[0].TTL != 5 || string(got[1].Buf) != "two" || got[1].TTL != 9 {
					t.Fatalf("%s member got %q TTL %d, %q TTL %d", name, got[0].Buf, got[0].TTL, got[1].Buf, got[1].TTL)
				}
				if got[0].Local.WithZone("") != group || got[0].Addr.Addr().WithZone("") != a.LocalAddr().Addr() || got[1].Addr.Port() != sport {
					t.Fatalf("%s member: datagram to %v from %v", name, got[0].Local, got[0].Addr)
				}
			}
		})
	}
}
