package main

import (
	"io"
	"strings"
	"testing"
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
