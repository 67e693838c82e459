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
	dir := filepath.Join(t.TempDir(), "interop", "run")
	os.MkdirAll(dir, 0o755)
	env := `GOROCE_LAB_NS=goroce-lab
GOROCE_LAB_HOST_IP=198.18.0.1
GOROCE_LAB_EXEC_PORT=5555
GOROCE_LAB_MTU=1500
GOROCE_LAB_ACCEL=tcg
GOROCE_LAB_GUESTS="a b"
GOROCE_LAB_A_IP=198.18.0.11
GOROCE_LAB_A_GID_INDEX=1
GOROCE_LAB_A_GID=0000:0000:0000:0000:0000:ffff:c612:000b
GOROCE_LAB_A_GID0=fe80:0000:0000:0000:5054:00ff:fec6:120b
GOROCE_LAB_B_IP=198.18.0.12
GOROCE_LAB_B_GID_INDEX=1
GOROCE_LAB_B_GID=0000:0000:0000:0000:0000:ffff:c612:000c
GOROCE_LAB_B_GID0=fe80:0000:0000:0000:5054:00ff:fec6:120c
`
	path := filepath.Join(dir, "lab.env")
	if err := os.WriteFile(path, []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.NS != "goroce-lab" || l.HostIP.String() != "198.18.0.1" || l.MTU != 1500 || l.Dir != filepath.Dir(dir) {
		t.Errorf("lab = %+v", l)
	}
	a := l.Guest(t, "a")
	if a.IP.String() != "198.18.0.11" || a.GIDIndex != 1 || a.GID.String() != "::ffff:198.18.0.11" || a.GID0.String() != "fe80::5054:ff:fec6:120b" {
		t.Errorf("guest a = %+v", a)
	}
	if got := strings.Join(l.GuestNames(), ","); got != "a,b" {
		t.Errorf("GuestNames = %s", got)
	}
	// A broken file is an error, not a half-filled lab.
	os.WriteFile(path, []byte(strings.Replace(env, "GOROCE_LAB_B_GID=0000", "GOROCE_LAB_B_GID=zzzz", 1)), 0o644)
	if _, err := Load(path); err == nil {
		t.Error("Load accepted a bad GID")
	}
	if _, err := Load(filepath.Join(dir, "missing.env")); err == nil {
		t.Error("Load accepted a missing file")
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
