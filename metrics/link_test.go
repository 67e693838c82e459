package metrics

import (
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/goroce/goroce/link"
)

// TestLinkCollector exports a real UDP link's counters, summed or per address,
// and passes the metric linter.
func TestLinkCollector(t *testing.T) {
	u, err := link.ListenUDP(netip.MustParseAddrPort("127.0.0.1:0"), link.Config{MaxSourcePorts: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	src := LinkSource{Addr: netip.MustParseAddr("127.0.0.1"), Link: u}
	got := gather(t, NewLinkCollector(Options{}, src, LinkSource{Addr: netip.MustParseAddr("127.0.0.2")}))
	c := u.Counters()
	wantValues(t, got, map[string]float64{
		"roce_link_drops_total,reason=truncated": float64(c.Truncated),
		"roce_link_gso_sends_total":              float64(c.GSOSends),
		"roce_link_gro_segments_total":           float64(c.GROSegments),
	})
	per := gather(t, NewLinkCollector(Options{PerAddress: true}, src))
	if _, ok := per["roce_link_gso_fallbacks_total,address=127.0.0.1"]; !ok {
		t.Errorf("no per-address series: %v", per)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewLinkCollector(Options{}, src))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
