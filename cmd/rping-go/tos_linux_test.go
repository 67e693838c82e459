//go:build linux

package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/internal/testsupport/nettest"
	"github.com/goroce/goroce/internal/testsupport/syncbuf"
)

// TestTOSReachesTheDataPath: rping-go -t puts its type of service in the REQ's
// path (rdma_set_option(RDMA_OPTION_ID_TOS)), and both sides' QPs send every
// data-path packet (SENDs, READs, WRITEs, their responses and ACKs) with it in
// the IP header, as an AF_PACKET capture on lo shows. Congestion control is
// on (the default): data packets carry it with ECT(0), ACKs with Not-ECT.
func TestTOSReachesTheDataPath(t *testing.T) {
	nettest.NeedRoot(t, "an AF_PACKET capture")
	const tos = 0x68
	port := freePort(t)
	sn := nettest.Sniff(t, "lo", uint16(port))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sout, serr, cout, cerr syncbuf.Buffer
	scode := make(chan int, 1)
	go func() {
		scode <- run(ctx, []string{"-s", "-a", "127.0.0.2", "-p", "7174", "--udp-port", fmt.Sprint(port)}, &sout, &serr)
	}()
	ccode := tryClient(ctx, []string{"-c", "-a", "127.0.0.2", "-I", "127.0.0.1", "-C", "3", "-S", "5000", "-t", fmt.Sprint(tos),
		"--udp-port", fmt.Sprint(port)}, &cout, &cerr)
	if ccode != 0 {
		t.Fatalf("client exit %d: %s", ccode, cerr.String())
	}
	if c := <-scode; c != 0 {
		t.Fatalf("server exit %d: %s", c, serr.String())
	}
	perSide := map[string]int{}
	for _, p := range sn.Stop() {
		if p.DestQP == 1 { // CM MADs on QP1
			continue
		}
		perSide[p.Src.String()]++
		want := dcqcn.DataTOS(tos, !p.Opcode.IsAck())
		if p.TOS != want {
			t.Errorf("%v %v -> %v QP %#x: TOS %#x, want %#x", p.Opcode, p.Src, p.Dst, p.DestQP, p.TOS, want)
		}
	}
	if perSide["127.0.0.1"] == 0 || perSide["127.0.0.2"] == 0 {
		t.Fatalf("data-path packets captured per sender: %v", perSide)
	}
	t.Logf("data-path packets with TOS %#x per sender: %v", tos, perSide)
}
