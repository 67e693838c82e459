package labtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseSummary(t *testing.T) {
	out := `  local address:  LID 0x0000, QPN 0x000011, PSN 0x67a3f8, GID ::ffff:198.18.0.11
  remote address: LID 0x0000, QPN 0x000011, PSN 0xebc3f9, GID ::ffff:198.18.0.12
102400 bytes in 0.11 seconds = 7.70 Mbit/sec
50 iters in 0.11 seconds = 2128.18 usec/iter
`
	s, err := ParseSummary(out)
	if err != nil {
		t.Fatal(err)
	}
	want := Summary{Bytes: 102400, Seconds: 0.11, Mbps: 7.70, Iters: 50, USecIter: 2128.18}
	if s != want {
		t.Errorf("ParseSummary = %+v, want %+v", s, want)
	}
	for _, bad := range []string{"", "102400 bytes in 0.11 seconds = 7.70 Mbit/sec\n", "50 iters in 0.11 seconds = 2128.18 usec/iter\n"} {
		if _, err := ParseSummary(bad); err == nil {
			t.Errorf("ParseSummary(%q) succeeded", bad)
		}
	}
}

func TestLoad(t *testing.T) {
	run := filepath.Join(t.TempDir(), "interop", "run")
	dir := filepath.Join(run, "trixie")
	os.MkdirAll(dir, 0o755)
	env := `GOROCE_LAB_NS=goroce-lab
GOROCE_LAB_DIST=trixie
GOROCE_LAB_LANE=1
GOROCE_LAB_BR=labbr1
GOROCE_LAB_HOST_IP=198.18.1.1
GOROCE_LAB_EXEC_PORT=5555
GOROCE_LAB_MTU=1500
GOROCE_LAB_ACCEL=tcg
GOROCE_LAB_GUESTS="a b"
GOROCE_LAB_A_IP=198.18.1.11
GOROCE_LAB_A_GID_INDEX=1
GOROCE_LAB_A_GID=0000:0000:0000:0000:0000:ffff:c612:010b
GOROCE_LAB_A_GID0=fe80:0000:0000:0000:5054:00ff:fec6:130b
GOROCE_LAB_KERNEL=6.12.117+deb13-amd64
GOROCE_LAB_B_IP=198.18.1.12
GOROCE_LAB_B_GID_INDEX=1
GOROCE_LAB_B_GID=0000:0000:0000:0000:0000:ffff:c612:010c
GOROCE_LAB_B_GID0=fe80:0000:0000:0000:5054:00ff:fec6:130c
`
	path := filepath.Join(dir, "lab.env")
	if err := os.WriteFile(path, []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.NS != "goroce-lab" || l.Dist != "trixie" || l.Gen != Gen612 || l.Bridge != "labbr1" ||
		l.HostIP.String() != "198.18.1.1" || l.MTU != 1500 || l.Dir != filepath.Dir(run) {
		t.Errorf("lab = %+v", l)
	}
	a := l.Guest(t, "a")
	if a.IP.String() != "198.18.1.11" || a.GIDIndex != 1 || a.GID.String() != "::ffff:198.18.1.11" || a.GID0.String() != "fe80::5054:ff:fec6:130b" {
		t.Errorf("guest a = %+v", a)
	}
	if got := strings.Join(l.GuestNames(), ","); got != "a,b" {
		t.Errorf("GuestNames = %s", got)
	}
	if !l.isTap("labtap1b") || l.isTap("labtap0b") || l.isTap("labbr1") {
		t.Error("isTap does not know the lane's taps")
	}

	// The top-level file names the lanes: GOROCE_LAB_DIST picks one, default the first.
	top := filepath.Join(run, "lab.env")
	os.WriteFile(top, []byte("GOROCE_LAB_NS=goroce-lab\nGOROCE_LAB_DISTS=\"trixie\"\n"), 0o644)
	if l, err := Load(top); err != nil || l.Dist != "trixie" {
		t.Errorf("Load(top) = %+v, %v", l, err)
	}
	t.Setenv(EnvDist, "bookworm")
	if _, err := Load(top); err == nil {
		t.Error("Load(top) accepted a lane that is not up")
	}

	// A broken file is an error, not a half-filled lab.
	for _, bad := range []string{
		strings.Replace(env, "GOROCE_LAB_B_GID=0000", "GOROCE_LAB_B_GID=zzzz", 1),
		strings.Replace(env, "GOROCE_LAB_KERNEL=6.12", "GOROCE_LAB_KERNEL=x", 1),
		strings.Replace(env, "GOROCE_LAB_BR=labbr1\n", "", 1),
	} {
		os.WriteFile(path, []byte(bad), 0o644)
		if _, err := Load(path); err == nil {
			t.Errorf("Load accepted a bad file:\n%s", bad)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.env")); err == nil {
		t.Error("Load accepted a missing file")
	}
}

func TestGen(t *testing.T) {
	for _, tt := range []struct {
		release string
		gen     Gen
	}{
		{"6.1.0-56-amd64", Gen61}, {"6.12.117+deb13-amd64", Gen612}, {"7.0", "7.0"}, {"linux", ""}, {"", ""},
	} {
		if got := GenOf(tt.release); got != tt.gen {
			t.Errorf("GenOf(%q) = %q, want %q", tt.release, got, tt.gen)
		}
	}
	for _, tt := range []struct {
		g, o Gen
		want bool
	}{
		{Gen612, Gen61, true}, {Gen61, Gen612, false}, {Gen612, "6.2", true}, {Gen61, "6.2", false}, {Gen61, Gen61, true}, {"7.0", Gen612, true},
	} {
		if got := tt.g.AtLeast(tt.o); got != tt.want {
			t.Errorf("%s.AtLeast(%s) = %v", tt.g, tt.o, got)
		}
	}
	if !(Gens{}).Has(Gen61) || !(Gens{Gen612}).Has(Gen612) || (Gens{Gen612}).Has(Gen61) {
		t.Error("Gens.Has")
	}
}

func TestCounters(t *testing.T) {
	before := Counters{"rcvd_pkts": 10, "out_of_seq_request": 1, "completer_retry_err": 0}
	after := Counters{"rcvd_pkts": 110, "out_of_seq_request": 3, "completer_retry_err": 2, "send_err": 0}
	d := after.Sub(before)
	if d["rcvd_pkts"] != 100 || d["out_of_seq_request"] != 2 || d["completer_retry_err"] != 2 {
		t.Errorf("Sub = %v", d)
	}
	if got := d.Unexpected(); len(got) != 1 || got[0] != "out_of_seq_request=2" {
		t.Errorf("Unexpected() = %v", got)
	}
	if got := d.Unexpected("out_of_seq_request"); len(got) != 0 {
		t.Errorf("Unexpected(allowed) = %v", got)
	}
	if got := d.String(); got != "completer_retry_err=2 out_of_seq_request=2 rcvd_pkts=100" {
		t.Errorf("String() = %q", got)
	}
	// A gap after the lab dropped frames is the lab's loss; a failed send is not.
	d[LabDropped], d["send_err"] = 3, 1
	if got := d.Unexpected(); len(got) != 1 || got[0] != "send_err=1" {
		t.Errorf("Unexpected() with lab drops = %v", got)
	}
	// After an RNR NAK of rxe's, the requests behind it arrive out of
	// sequence; a NAK rxe received for a gap (rcvd_seq_err) still counts.
	rnr := Counters{"send_rnr_err": 1, "out_of_seq_request": 1, "rcvd_seq_err": 1}
	if got := rnr.Unexpected(); len(got) != 1 || got[0] != "rcvd_seq_err=1" {
		t.Errorf("Unexpected() after an RNR NAK = %v", got)
	}
}

func TestOpenSkipsWithoutEnv(t *testing.T) {
	if os.Getenv(EnvEnable) == "1" {
		t.Skip("interop mode")
	}
	ran := false
	t.Run("inner", func(t *testing.T) {
		Open(t)
		ran = true
	})
	if ran {
		t.Error("Open did not skip without " + EnvEnable + "=1")
	}
}
