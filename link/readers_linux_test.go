//go:build linux

package link

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestReadersSpreadFlows: a link with Readers 2 binds two SO_REUSEPORT
// sockets; datagrams from many source ports (flows) are spread over them by
// the kernel's 4-tuple hash. Every datagram arrives exactly once, each flow
// on one reader only, and both readers get some.
func TestReadersSpreadFlows(t *testing.T) {
	const flows, each = 32, 20
	a := listen(t, "127.0.0.1:0", Config{MaxSourcePorts: flows})
	b, err := ListenUDP(netip.MustParseAddrPort("127.0.0.2:0"), Config{Readers: 2, BatchSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fns := b.ReceiveFuncs()
	if len(fns) != 2 || len(ReceiveFuncs(b)) != 2 {
		t.Fatalf("%d receive functions, want 2", len(fns))
	}
	var ports []uint16
	for len(ports) < flows {
		if p := freeUDPPort(t); a.SourcePort(p) {
			ports = append(ports, p)
		}
	}
	var out []Message
	for _, p := range ports {
		for i := 0; i < each; i++ {
			out = append(out, Message{Buf: binary.BigEndian.AppendUint16(nil, uint16(i)), Addr: b.LocalAddr(), SrcPort: p})
		}
	}
	type rx struct {
		reader int
		port   uint16
		seq    uint16
	}
	var mu sync.Mutex
	var got []rx
	var wg sync.WaitGroup
	for r, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := newMsgs(8)
			for {
				n, err := fn(msgs)
				if err != nil {
					if !errors.Is(err, net.ErrClosed) {
						t.Error(err)
					}
					return
				}
				mu.Lock()
				for _, m := range msgs[:n] {
					got = append(got, rx{r, m.Addr.Port(), binary.BigEndian.Uint16(m.Buf)})
				}
				full := len(got) >= flows*each
				mu.Unlock()
				if full {
					b.Close() // unblocks the other reader
				}
			}
		}()
	}
	if n, err := a.WriteBatch(out); n != len(out) || err != nil {
		t.Fatalf("WriteBatch = %d, %v", n, err)
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		b.Close()
		<-waited
		t.Fatalf("received %d of %d datagrams", len(got), flows*each)
	}
	seen := map[[2]uint16]bool{}
	readerOf := map[uint16]int{}
	perReader := [2]int{}
	for _, g := range got {
		k := [2]uint16{g.port, g.seq}
		if seen[k] {
			t.Fatalf("datagram %d of port %d received twice", g.seq, g.port)
		}
		seen[k] = true
		if r, ok := readerOf[g.port]; ok && r != g.reader {
			t.Fatalf("flow from port %d landed on both readers", g.port)
		}
		readerOf[g.port] = g.reader
		perReader[g.reader]++
	}
	if len(seen) != flows*each {
		t.Fatalf("received %d distinct datagrams of %d", len(seen), flows*each)
	}
	if perReader[0] == 0 || perReader[1] == 0 {
		t.Fatalf("datagrams per reader %v: the kernel did not spread %d flows", perReader, flows)
	}
	t.Logf("datagrams per reader: %v", perReader)
}

// TestReadersPortSharing: one reader binds without SO_REUSEPORT, so the port
// stays exclusive; with several, another socket still cannot join unless it
// asks for SO_REUSEPORT too (the same user only).
func TestReadersPortSharing(t *testing.T) {
	one := listen(t, "127.0.0.1:0", Config{})
	if len(one.ReceiveFuncs()) != 1 {
		t.Fatalf("%d receive functions with Readers 0", len(one.ReceiveFuncs()))
	}
	if _, err := ListenUDP(one.LocalAddr(), Config{}); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("second listen on a one-reader port = %v, want EADDRINUSE", err)
	}
	two := listen(t, "127.0.0.1:0", Config{Readers: 2})
	if _, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(two.LocalAddr())); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("plain socket on a two-reader port = %v, want EADDRINUSE", err)
	}
}
