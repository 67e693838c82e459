package devapi

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/core/transport"
	"github.com/goroce/goroce/roce"
)

func TestCounterKey(t *testing.T) {
	for _, tt := range []struct {
		c    Counter
		want string
	}{
		{Counter{Name: "icrc_errors_total"}, "icrc_errors"},
		{Counter{Name: "packets_total", Labels: map[string]string{"op_class": "send", "direction": "tx"}}, "packets_tx_send"},
		{Counter{Name: "naks_total", Labels: map[string]string{"kind": "rnr", "direction": "rx"}}, "naks_rx_rnr"},
		{Counter{Name: "ack_latency_seconds_count"}, "ack_latency_seconds_count"},
	} {
		if got := tt.c.Key(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.c, got, tt.want)
		}
	}
}

// TestCounters: every row of the engine's table is listed, with its labels.
func TestCounters(t *testing.T) {
	var s transport.Stats
	s.ICRCErrors.Add(3)
	s.SentPackets[transport.ClassWrite].Add(5)
	got := map[string]uint64{}
	for _, c := range Counters(s.Snapshot()) {
		got[c.Key()] = c.Value
	}
	if got["icrc_errors"] != 3 || got["packets_tx_write"] != 5 || got["packets_rx_write"] != 0 {
		t.Errorf("counters %v", got)
	}
	if _, ok := got["ack_latency_seconds_count"]; !ok || len(got) < 50 {
		t.Errorf("%d counters, histogram count missing: %v", len(got), got)
	}
}

func TestDescribe(t *testing.T) {
	dev, err := roce.Open(netip.MustParseAddr("127.0.0.91"), roce.WithPort(0))
	if err != nil {
		t.Skip(err)
	}
	defer dev.Close()
	d, err := Describe(dev)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "goroce(127.0.0.91)" || d.Addr != "127.0.0.91" || len(d.Ports) != 1 || d.Ports[0].State != "PORT_ACTIVE" ||
		len(strings.Split(d.NodeGUID, ":")) != 4 || d.QPs == nil {
		t.Errorf("%+v", d)
	}
	g := d.Ports[0].GIDs
	if len(g) != 2 || g[1].GID != "0000:0000:0000:0000:0000:ffff:7f00:005b" || g[1].IPv4 != "127.0.0.91" || !g[1].Bound || g[0].Bound {
		t.Errorf("GIDs %+v", g)
	}
}

// TestQPCC: a QP shows a QP's DCQCN rate, target, α and cuts
// when congestion control is on, and nothing of it when off.
func TestQPCC(t *testing.T) {
	on := QPOf("127.0.0.1", roce.QPInfo{QPN: 0x11, CCRate: 5_000_000_000, CCTargetRate: 10_000_000_000, CCAlpha: 512, CCCuts: 3})
	b, _ := json.Marshal(on)
	for _, want := range []string{`"cc_rate_mbps":5000`, `"cc_target_rate_mbps":10000`, `"cc_alpha":0.5`, `"cc_rate_cuts":3`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	b, _ = json.Marshal(QPOf("127.0.0.1", roce.QPInfo{QPN: 0x12}))
	if strings.Contains(string(b), "cc_") {
		t.Errorf("congestion control off: %s", b)
	}
}
