package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/interop/labtest"
)

// TestRxePingpong runs the stock ibv_rc_pingpong, ibv_srq_pingpong and ibv_ud_pingpong
// clients in a real rxe guest against roced in the interop lab, with data validation
// where the tool has it, and checks roced's counters and rxe's. It skips unless
// GOROCE_INTEROP=1 (interop/run.sh boots the lab and sets it).
func TestRxePingpong(t *testing.T) {
	lab := labtest.Open(t)
	g := lab.Guest(t, "a")
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return lab.Dial(ctx, addr) },
	}}
	host := lab.HostIP.String()
	p := startDaemonCmd(t, func(args []string) *exec.Cmd {
		return lab.Command(context.Background(), rocedBin, args...)
	}, client, "-bind", host, "-metrics", net.JoinHostPort(host, "0"), "-pingpong-idle", "3s")

	tests := []struct {
		name    string
		cmd     string
		class   string
		msgs    int // messages each way (srq: per QP; the tool's total differs)
		pktsPer int // packets per message at MTU 1024
	}{
		{"rc", fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %d -n 100 -s 4096 -c %s", g.GIDIndex, host), "send", 100, 4},
		{"rc-small", fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g %d -n 50 -s 1 %s", g.GIDIndex, host), "send", 50, 1},
		{"srq", fmt.Sprintf("ibv_srq_pingpong -d rxe0 -g %d -q 4 -n 25 -s 2048 %s", g.GIDIndex, host), "send", 4 * 25, 2},
		{"ud", fmt.Sprintf("ibv_ud_pingpong -d rxe0 -g %d -p 18516 -n 50 -s 1024 %s", g.GIDIndex, host), "ud_send", 50, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			before := p.scrape(t)
			gBefore, err := g.Counters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			res, err := g.Run(ctx, tt.cmd)
			if err != nil {
				t.Fatal(err)
			}
			if res.RC != 0 {
				t.Fatalf("%s: exit %d:\n%s\nroced stderr:\n%s", tt.cmd, res.RC, res.Out, p.stderr.String())
			}
			if !strings.Contains(res.Out, "iters in") {
				t.Errorf("%s printed no summary:\n%s", tt.cmd, res.Out)
			}
			after := p.scrape(t)
			delta := func(name string, labels ...string) float64 {
				return value(t, after, name, labels...) - value(t, before, name, labels...)
			}
			gAfter, err := g.Counters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			d := gAfter.Sub(gBefore)
			t.Logf("rxe counters: %v", d)
			// ibv_srq_pingpong counts iterations over all QPs and may send up to
			// num_qp-1 extra messages, so rxe's own counts are the reference.
			if tt.name != "srq" && (d["rdma_sends"] != uint64(tt.msgs) || d["rdma_recvs"] != uint64(tt.msgs)) {
				t.Errorf("rxe sent %d and received %d messages, want %d each", d["rdma_sends"], d["rdma_recvs"], tt.msgs)
			}
			// Every data packet rxe sent arrived once, plus rxe's retransmissions, which
			// roced counts as duplicates; every echo went out exactly once.
			//
			// ibv_srq_pingpong stops when its total is reached, with up to num_qp-1
			// exchanges still in flight: rxe counts neither a SEND it sent but saw no
			// completion of, nor an echo that came after its QPs were gone (roced then
			// retransmits that echo until its session ends). So srq allows 3 such
			// messages each way.
			slack := 0.0
			if tt.name == "srq" {
				slack = 3 * float64(tt.pktsPer)
			}
			dups := delta("roce_duplicate_requests_total")
			if got, want := delta("roce_packets_total", "direction", "rx", "op_class", tt.class), float64(d["rdma_sends"])*float64(tt.pktsPer)+dups; got < want || got > want+slack {
				t.Errorf("roce_packets_total{rx,%s} moved by %v, want %v (%d duplicates, %v slack)", tt.class, got, want, int(dups), slack)
			}
			// Every echo went out once, plus roced's timer retransmissions: with the lab's
			// lanes running at once, rxe's ACK can come later than roced's timeout. rxe
			// counts each that arrived as a duplicate. UD has no retransmission: any
			// counted meanwhile belongs to an RC session of an earlier row.
			rtx := delta("roce_retransmits_total")
			if tt.class == "ud_send" {
				rtx = 0
			}
			if got, want := delta("roce_packets_total", "direction", "tx", "op_class", tt.class), float64(d["rdma_recvs"])*float64(tt.pktsPer)+rtx; got < want || got > want+slack {
				t.Errorf("roce_packets_total{tx,%s} moved by %v, want %v (%v retransmitted, %v slack)", tt.class, got, want, rtx, slack)
			}
			if rtx > float64(d["duplicate_request"])+slack {
				t.Errorf("roced retransmitted %v packets, rxe counted %d duplicates", rtx, d["duplicate_request"])
			} else if rtx > 0 {
				t.Logf("roced retransmitted %v packets (rxe duplicate_request=%d): rxe acknowledged late", rtx, d["duplicate_request"])
			}
			for _, name := range []string{"roce_icrc_errors_total", "roce_malformed_packets_total",
				"roce_unknown_qp_total", "roce_out_of_sequence_total"} {
				if got := delta(name); got != 0 {
					t.Errorf("%s moved by %v, want 0", name, got)
				}
			}
			if dups > 0 {
				t.Logf("rxe retransmitted %v packets (completer_retry_err=%d): roced acknowledged late", dups, d["completer_retry_err"])
			}
			if bad := d.Unexpected("completer_retry_err"); len(bad) > 0 {
				t.Errorf("rxe counted errors: %v", bad)
			}
		})
	}
}
