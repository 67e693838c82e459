package main

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm/rping"
)

// TestRpingResponder runs cm/rping's client (what rping-go -c is) against the roced
// binary over loopback and checks that the daemon's counters moved by exactly what one
// rping session puts on the wire, and that the client's device saw the same packets.
func TestRpingResponder(t *testing.T) {
	tests := []struct {
		size, count int
	}{
		{64, 20},
		{1000, 10},
		{16384, 10},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("size=%d", tt.size), func(t *testing.T) {
			addrs := testAddrs(2)
			port := freeUDPPort(t, addrs...)
			p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)),
				"-pingpong=false", "-ud-pingpong=false", "-rping-port", "7999")
			if !strings.Contains(p.stdout.String(), "rping responder on rdma_cm port "+addrs[0].String()+":7999") {
				t.Errorf("announce lines:\n%s", p.stdout.String())
			}
			dev, mgr := cmPeer(t, addrs[1], port)

			var out, errw bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := rping.Client(ctx, dev, mgr, netip.AddrPortFrom(addrs[1], 0), netip.AddrPortFrom(addrs[0], 7999),
				rping.Options{Size: tt.size, Count: tt.count, Verbose: true, Validate: true, Out: &out, Err: &errw})
			if err != nil {
				t.Fatalf("rping client: %v\nstderr: %s\nroced stderr:\n%s", err, errw.String(), p.stderr.String())
			}
			if n := strings.Count(out.String(), "ping data: rdma-ping-"); n != tt.count {
				t.Errorf("client printed %d ping lines, want %d", n, tt.count)
			}

			// The session ends once the daemon has seen the client's DREQ; every
			// ACK has been counted on both sides when the two views agree. The
			// client's last ACK and its DREQ reach different shards of the daemon
			// (the data QP's and QP1's), so the DREQ can end the session first:
			// an ACK that then finds its QP destroyed is dropped and counted in
			// roce_destroyed_qp_drops_total (about 2% of runs), so received ACKs
			// and those drops add up to what the client sent, and at most that
			// one is dropped.
			cs := dev.Stats()
			var mfs map[string]*dto.MetricFamily
			waitFor(t, "the session to end and ACK counts to settle", func() bool {
				cs = dev.Stats()
				mfs = p.scrape(t)
				rxAck, sent := value(t, mfs, "roce_packets_total", "direction", "rx", "op_class", "ack"), float64(cs.SentPackets[classIndex("ack")])
				late := value(t, mfs, "roce_destroyed_qp_drops_total")
				return value(t, mfs, "roce_rping_active_sessions") == 0 &&
					value(t, mfs, "roce_rping_session_ends_total", "reason", "disconnect") == 1 &&
					rxAck+late == sent && late <= 1 &&
					value(t, mfs, "roce_packets_total", "direction", "tx", "op_class", "ack") == float64(cs.RcvdPackets[classIndex("ack")])
			})
			// Per ping: the client SENDs its source buffer and later its sink buffer
			// (16 bytes each); the server READs size bytes, SENDs go-ahead, WRITEs the
			// size bytes back and SENDs go-ahead again.
			segs, readBytes := seqPackets(bth.RCReadResponseFirst, bth.RCReadResponseMiddle, bth.RCReadResponseLast, bth.RCReadResponseOnly, tt.size)
			_, writeBytes := seqPackets(bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLast, bth.RCWriteOnly, tt.size)
			adv := float64(bth.PacketLen(bth.RCSendOnly, 16))
			n := float64(tt.count)
			checkCounters(t, mfs, []counterDelta{
				{"roce_rping_pings_total", nil, n},
				{"roce_rping_sessions_total", nil, 1},
				{"roce_rping_session_ends_total", []string{"reason", "error"}, 0},
				{"roce_rping_accept_errors_total", nil, 0},
				{"roce_packets_total", []string{"direction", "rx", "op_class", "send"}, 2 * n},
				{"roce_bytes_total", []string{"direction", "rx", "op_class", "send"}, 2 * adv * n},
				{"roce_bytes_total", []string{"direction", "tx", "op_class", "send"}, 2 * adv * n},
				{"roce_packets_total", []string{"direction", "tx", "op_class", "send"}, 2 * n},
				{"roce_packets_total", []string{"direction", "tx", "op_class", "read_request"}, n},
				{"roce_packets_total", []string{"direction", "rx", "op_class", "read_response"}, n * float64(segs)},
				{"roce_bytes_total", []string{"direction", "rx", "op_class", "read_response"}, n * float64(readBytes)},
				{"roce_packets_total", []string{"direction", "tx", "op_class", "write"}, n * float64(segs)},
				{"roce_bytes_total", []string{"direction", "tx", "op_class", "write"}, n * float64(writeBytes)},
				{"roce_retransmits_total", nil, 0},
				{"roce_timeouts_total", nil, 0},
				{"roce_malformed_packets_total", nil, 0},
				{"roce_icrc_errors_total", nil, 0},
				{"roce_unknown_qp_total", nil, 0},
				{"roce_duplicate_requests_total", nil, 0},
			})
			// The client's device counted the same traffic from the other side.
			for _, c := range []struct {
				class string
				got   uint64
				want  float64
			}{
				{"send", cs.SentPackets[classIndex("send")], value(t, mfs, "roce_packets_total", "direction", "rx", "op_class", "send")},
				{"read_response", cs.SentPackets[classIndex("read_response")], value(t, mfs, "roce_packets_total", "direction", "rx", "op_class", "read_response")},
				{"write", cs.RcvdPackets[classIndex("write")], value(t, mfs, "roce_packets_total", "direction", "tx", "op_class", "write")},
			} {
				if float64(c.got) != c.want {
					t.Errorf("client counted %d %s packets, roced %v", c.got, c.class, c.want)
				}
			}
			// Its QP is gone after the disconnect.
			waitFor(t, "the session's QP to be destroyed", func() bool {
				m := p.scrape(t)
				return value(t, m, "roce_queue_pairs", "state", "rts") == 0 && value(t, m, "roce_queue_pairs", "state", "err") == 0
			})
			if code, took := p.stop(10 * time.Second); code != 0 {
				t.Errorf("roced exited %d after SIGTERM (%v); stderr:\n%s", code, took, p.stderr.String())
			}
		})
	}
}

// seqPackets is how many packets and UDP payload bytes a size-byte message of one
// opcode family (first, middle, last, only) takes at path MTU 1024.
func seqPackets(first, middle, last, only bth.Opcode, size int) (pkts, bytes int) {
	const mtu = 1024
	if size <= mtu {
		return 1, bth.PacketLen(only, size)
	}
	for off := 0; off < size; off += mtu {
		op := middle
		switch {
		case off == 0:
			op = first
		case off+mtu >= size:
			op = last
		}
		pkts++
		bytes += bth.PacketLen(op, min(size-off, mtu))
	}
	return pkts, bytes
}

// TestRpingShutdownWithSession stops roced with SIGTERM while an rping client is in
// the middle of an endless run: the daemon must end the session (the client sees its
// connection go) and exit 0 within the drain deadline.
func TestRpingShutdownWithSession(t *testing.T) {
	addrs := testAddrs(2)
	port := freeUDPPort(t, addrs...)
	const drain = time.Second
	p := startDaemon(t, "-bind", addrs[0].String(), "-port", strconv.Itoa(int(port)),
		"-pingpong=false", "-ud-pingpong=false", "-drain-timeout", drain.String())
	dev, mgr := cmPeer(t, addrs[1], port)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- rping.Client(ctx, dev, mgr, netip.AddrPortFrom(addrs[1], 0), netip.AddrPortFrom(addrs[0], defaultRpingPort),
			rping.Options{Size: 100, Validate: true, Timeout: 5 * time.Second})
	}()
	waitFor(t, "pings to flow", func() bool {
		return value(t, p.scrape(t), "roce_rping_pings_total") >= 5
	})
	// The margin over -drain-timeout is the teardown on a loaded host; the
	// limit stays below the default drain, so a daemon that ignored the
	// flag fails.
	code, took := p.stop(10 * time.Second)
	if limit := drain + 3*time.Second; code != 0 || took > limit || limit >= defaultDrainTimeout {
		t.Errorf("roced exited %d after %v (limit -drain-timeout %v + 3 s); stderr:\n%s", code, took, drain, p.stderr.String())
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("the endless client returned nil although the server went away")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the client did not notice the server's shutdown in 20 s")
	}
}
