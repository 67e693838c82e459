package ccflags

import (
	"errors"
	"flag"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/pborman/getopt/v2"
)

func parse(t *testing.T, args ...string) (*Flags, error) {
	t.Helper()
	var f Flags
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs)
	return &f, fs.Parse(args)
}

func TestFlags(t *testing.T) {
	f, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Config()
	if err != nil || !c.Enabled || c.LineRate != 0 || c.Params.RPGTimeReset != 300 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	f, _ = parse(t, "-cc=false")
	if c, _ := f.Config(); c.Enabled {
		t.Fatal("-cc=false left it on")
	}
	f, _ = parse(t, "-cc-param", "rpg_time_reset=55", "-cc-param", "rp_rpg_ai_rate=10", "-cc-line-rate", "25000", "-cc-pacing-burst", "20us")
	c, err = f.Config()
	if err != nil || c.Params.RPGTimeReset != 55 || c.Params.RPGAIRate != 10 || c.LineRate != 25_000_000_000 || c.PacingBurst != 20*time.Microsecond {
		t.Fatalf("%+v %v", c, err)
	}
	for _, bad := range [][]string{{"-cc-param", "nope=1"}, {"-cc-param", "rpg_gd=0"}, {"-cc-pacing-burst", "-1s"}} {
		f, _ := parse(t, bad...)
		if _, err := f.Config(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%v: %v, want EINVAL", bad, err)
		}
	}
}

func TestGetopt(t *testing.T) {
	var f Flags
	s := getopt.New()
	f.RegisterGetopt(s)
	if err := s.Getopt([]string{"prog", "--cc=false", "--cc-param", "rpg_ai_rate=10", "--cc-param=rpg_hai_rate=20", "--cc-line-rate", "25000"}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := f.Config()
	if err != nil || c.Enabled || c.Params.RPGAIRate != 10 || c.Params.RPGHAIRate != 20 || c.LineRate != 25_000_000_000 {
		t.Fatalf("%+v %v", c, err)
	}
	var d Flags
	s = getopt.New()
	d.RegisterGetopt(s)
	if err := s.Getopt([]string{"prog"}, nil); err != nil {
		t.Fatal(err)
	}
	if c, err := d.Config(); err != nil || !c.Enabled {
		t.Fatalf("default: %+v %v", c, err)
	}
}
