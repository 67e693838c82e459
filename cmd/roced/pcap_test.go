package main

import (
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/roce"
)

// TestPcapDecodesWithRocedump: the -pcap capture of a known RC exchange decodes with
// cmd/rocedump, packet for packet, every ICRC correct. It uses UDP 4791 (rocedump
// only decodes that port) on a random 127/8 address, and skips if that is taken.
func TestPcapDecodesWithRocedump(t *testing.T) {
	for _, sourcePorts := range []string{"64", "0"} {
		t.Run("source-ports="+sourcePorts, func(t *testing.T) { pcapDecodes(t, sourcePorts) })
	}
}

// pcapDecodes runs the exchange with roced -source-ports sourcePorts: with 0
// the daemon sends everything from 4791, else from per-QP ports.
func pcapDecodes(t *testing.T, sourcePorts string) {
	addrs := testAddrs(2)
	for _, a := range addrs {
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 4791)))
		if err != nil {
			t.Skipf("UDP 4791 on %s is taken: %v", a, err)
		}
		c.Close()
	}
	dir := t.TempDir()
	dump := filepath.Join(dir, "rocedump")
	if out, err := exec.Command("go", "build", "-o", dump, "../rocedump").CombinedOutput(); err != nil {
		t.Fatalf("building rocedump: %v\n%s", err, out)
	}
	pcap := filepath.Join(dir, "roce.pcap")
	_, tcpPort, _ := net.SplitHostPort(freeTCPAddr(t))
	p := startDaemon(t, "-bind", addrs[0].String(), "-ud-pingpong=false", "-pingpong-port", tcpPort, "-pcap", pcap,
		"-source-ports", sourcePorts)
	// The daemon's tap cannot see the IPv4 ID of what it receives and records 0
	// (package link): the client sends without GSO trains, whose segments
	// after the first carry IDs 1, 2, ..., so every ICRC in the capture can be
	// checked. The daemon's own trains are recorded with their real IDs.
	dev, err := roce.Open(addrs[1], roce.WithMTU(roce.MTU1024), roce.WithLinkConfig(link.Config{NoGSO: true}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	const iters = 3
	c := newPPClient(t, dev, kindRC, 1, 2000) // 2000 bytes at MTU 1024: FIRST + LAST
	c.exchange(net.JoinHostPort(addrs[0].String(), tcpPort))
	c.run(iters)
	// The last ACK (ours, for the last pong) may still be on its way to the daemon.
	// On a loaded machine an ACK can come after the 67 ms timeout: a resent packet
	// (and its ACK) adds to the capture, and the exact table below no longer holds.
	var retx int
	waitFor(t, "every packet in the capture", func() bool {
		retx = int(dev.Stats().Retransmits) + int(value(t, p.scrape(t), "roce_retransmits_total"))
		return pcapRecords(t, pcap) >= 6*iters+retx
	})
	if code, _ := p.stop(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}

	out, err := exec.Command(dump, "-tsv", pcap).CombinedOutput()
	if err != nil {
		t.Fatalf("rocedump: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	col := map[string]int{}
	for i, h := range strings.Split(lines[0], "\t") {
		col[h] = i
	}
	for _, h := range []string{"src", "sport", "dport", "opname", "icrc_ok"} {
		if _, ok := col[h]; !ok {
			t.Fatalf("rocedump -tsv has no %q column: %s", h, lines[0])
		}
	}
	count := map[string]int{}
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		if f[col["icrc_ok"]] != "1" {
			t.Errorf("bad ICRC in the capture: %s", l)
		}
		from := "client"
		if f[col["src"]] == addrs[0].String() {
			from = "daemon"
		}
		// Both sides send to 4791 from rxe's per-QP source port (49152..65535),
		// except the daemon with -source-ports 0.
		perQP := from == "client" || sourcePorts != "0"
		if sp, _ := strconv.Atoi(f[col["sport"]]); (sp >= 0xC000) != perQP || f[col["dport"]] != "4791" {
			t.Errorf("%s packet from port %s to %s (per-QP port wanted: %v)", from, f[col["sport"]], f[col["dport"]], perQP)
		}
		count[from+" "+f[col["opname"]]]++
	}
	want := map[string]int{
		"client RC_SEND_FIRST": iters, "client RC_SEND_LAST": iters, "client RC_ACKNOWLEDGE": iters,
		"daemon RC_SEND_FIRST": iters, "daemon RC_SEND_LAST": iters, "daemon RC_ACKNOWLEDGE": iters,
	}
	if retx > 0 {
		t.Logf("%d retransmissions: not checking the exact packet counts", retx)
		return
	}
	for k, v := range want {
		if count[k] != v {
			t.Errorf("%s: %d packets, want %d", k, count[k], v)
		}
	}
	if len(lines)-1 != 6*iters {
		t.Errorf("%d packets in the capture, want %d:\n%s", len(lines)-1, 6*iters, out)
	}
}
