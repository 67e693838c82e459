package roce

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/internal/testsupport/syncbuf"
)

// TestCaptureOfRCTransferVerifies captures an RC transfer (multi-packet SEND, WRITE and
// READ at PMTU 1024) through the device's pcap tap over real loopback UDP and checks
// that every packet in the file parses and carries a correct ICRC for the IP/UDP
// envelope that was on the wire, and that tshark decodes every frame as InfiniBand
// without a malformed-packet or error-level expert item. Under CI tshark must be
// present (scripts/test.sh installs it); elsewhere that part is skipped when absent.
func TestCaptureOfRCTransferVerifies(t *testing.T) {
	var capture syncbuf.Buffer // the pcap tap writes it while the test runs
	p := udpPort(t)
	da, err := Open(addrA, WithPort(p), WithMTU(MTU1024), WithPcap(&capture))
	if err != nil {
		t.Fatal(err)
	}
	db, err := Open(addrB, WithPort(p), WithMTU(MTU1024))
	if err != nil {
		da.Close()
		t.Fatal(err)
	}
	const n = 3*1024 + 5
	a := newSide(t, da, QPTypeRC, 2*n, nil, nil)
	b := newSide(t, db, QPTypeRC, 2*n, nil, nil)
	connectRC(t, a, b, MTU1024)

	fill(a.buf[:n], 1)
	_ = must[int](t)(b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{{Addr: b.mr.Addr(), Length: n, LKey: b.mr.LKey()}}}}))
	wrs := []SendWR{
		{WRID: 1, Opcode: WRSend, SGL: []SGE{{Addr: a.mr.Addr(), Length: n, LKey: a.mr.LKey()}}},
		{WRID: 2, Opcode: WRRDMAWrite, SGL: []SGE{{Addr: a.mr.Addr(), Length: n, LKey: a.mr.LKey()}},
			RemoteAddr: b.mr.Addr() + n, RKey: b.mr.RKey()},
		{WRID: 3, Opcode: WRRDMARead, Flags: SendFence, SGL: []SGE{{Addr: a.mr.Addr() + n, Length: n, LKey: a.mr.LKey()}},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()},
	}
	for i := range wrs {
		wrs[i].Flags |= SendSignaled
	}
	_ = must[int](t)(a.qp.PostSend(wrs))
	for i, wc := range pollN(t, a.scq, 3, wcTimeout) {
		checkWC(t, wc, uint64(i+1), []WCOpcode{WCSend, WCRDMAWrite, WCRDMARead}[i], -1)
	}
	checkWC(t, pollN(t, b.rcq, 1, wcTimeout)[0], 1, WCRecv, n)
	da.barrier()
	if !bytes.Equal(a.buf[:n], a.buf[n:2*n]) {
		t.Fatal("READ brought back different bytes")
	}
	da.Close()
	db.Close()

	file := capture.Bytes()
	r, err := pcapgo.NewReader(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[bth.Opcode]int{}
	frames := 0
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		frames++
		pkt := gopacket.NewPacket(data, r.LinkType(), gopacket.Default)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if ip == nil || udp == nil {
			t.Fatalf("frame %d: not IPv4/UDP", frames)
		}
		payload := udp.LayerPayload()
		bp, err := bth.Parse(payload)
		if err != nil {
			t.Fatalf("frame %d: %v", frames, err)
		}
		src, _ := netip.AddrFromSlice(ip.SrcIP.To4())
		dst, _ := netip.AddrFromSlice(ip.DstIP.To4())
		env := bth.Envelope{Src: src, Dst: dst, IPID: ip.Id, DF: ip.Flags&layers.IPv4DontFragment != 0,
			SrcPort: uint16(udp.SrcPort), DstPort: uint16(udp.DstPort)}
		if !bth.CheckICRC(&env, payload) {
			t.Fatalf("frame %d (%v psn %d): ICRC does not verify", frames, bp.Opcode(), bp.PSN())
		}
		seen[bp.Opcode()]++
	}
	for _, op := range []bth.Opcode{bth.RCSendFirst, bth.RCSendMiddle, bth.RCSendLast, bth.RCWriteFirst,
		bth.RCWriteMiddle, bth.RCWriteLast, bth.RCReadRequest, bth.RCReadResponseFirst,
		bth.RCReadResponseMiddle, bth.RCReadResponseLast, bth.RCAck} {
		if seen[op] == 0 {
			t.Errorf("capture has no %v packet (saw %v)", op, seen)
		}
	}

	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("tshark not installed; scripts/test.sh installs it under CI")
		}
		t.Skip("tshark not installed: skipping the Wireshark decode check")
	}
	path := filepath.Join(t.TempDir(), "rc.pcap")
	if err := os.WriteFile(path, file, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(filter string) []string {
		var stderr bytes.Buffer
		cmd := exec.Command(tshark, "-n", "-r", path,
			"-d", fmt.Sprintf("udp.port==%d,infiniband", p), "-Y", filter, "-T", "fields", "-e", "frame.number")
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("tshark -Y %q: %v\n%s", filter, err, stderr.Bytes())
		}
		return strings.Fields(string(out))
	}
	if ib := run("infiniband"); len(ib) != frames {
		t.Errorf("tshark decodes %d of %d frames as InfiniBand", len(ib), frames)
	}
	if bad := run("_ws.malformed || _ws.expert.severity >= \"error\""); len(bad) != 0 {
		t.Errorf("tshark flags frames %v as malformed or in error", bad)
	}
}
