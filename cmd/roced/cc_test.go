package main

import (
	"encoding/json"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/goroce/goroce/roce"
)

func TestCCFlags(t *testing.T) {
	c, err := parseFlags(nil, io.Discard)
	if err != nil || !c.cc.Enabled || c.cc.Params.RPGTimeReset != 300 {
		t.Fatalf("default: %+v %v", c.cc, err)
	}
	c, err = parseFlags([]string{"-cc=false"}, io.Discard)
	if err != nil || c.cc.Enabled {
		t.Fatalf("-cc=false: %+v %v", c.cc, err)
	}
	c, err = parseFlags([]string{"-cc-param", "min_time_between_cnps=50", "-cc-line-rate", "10000"}, io.Discard)
	if err != nil || c.cc.Params.MinTimeBetweenCNPs != 50 || c.cc.LineRate != 10_000_000_000 {
		t.Fatalf("-cc-param: %+v %v", c.cc, err)
	}
	if _, err := parseFlags([]string{"-cc-param", "rpg_gd=99"}, io.Discard); err == nil || !strings.Contains(err.Error(), "rpg_gd") {
		t.Fatalf("-cc-param rpg_gd=99: %v", err)
	}
}

// TestDebugQPsCC: /debug/qps shows a QP's DCQCN rate, target, α and cuts
// when congestion control is on, and nothing of it when off.
func TestDebugQPsCC(t *testing.T) {
	dev, err := roce.Open(netip.MustParseAddr("127.0.0.1"), roce.WithPort(0))
	if err != nil {
		t.Skip(err)
	}
	defer dev.Close()
	on := qpRow(dev, roce.QPInfo{QPN: 0x11, CCRate: 5_000_000_000, CCTargetRate: 10_000_000_000, CCAlpha: 512, CCCuts: 3})
	b, _ := json.Marshal(on)
	for _, want := range []string{`"cc_rate_mbps":5000`, `"cc_target_rate_mbps":10000`, `"cc_alpha":0.5`, `"cc_rate_cuts":3`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	b, _ = json.Marshal(qpRow(dev, roce.QPInfo{QPN: 0x12}))
	if strings.Contains(string(b), "cc_") {
		t.Errorf("congestion control off: %s", b)
	}
}
