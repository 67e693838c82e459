// Package cnptest checks captures of RoCEv2 CNPs with tshark and the
// repository's Wireshark dissector deploy/wireshark/roce_cnp.lua (stock
// Wireshark 4.0 does not dissect opcode 0x81 as a CNP). Tests only.
package cnptest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// CNP is one frame tshark dissected as a CNP.
type CNP struct {
	Frame    int
	TOS      uint8 // IPv4 DSCP<<2 | ECN
	PKey     uint16
	DestQP   uint32
	BECN     bool
	FECN     bool
	AckReq   bool
	PSN      uint32
	Reserved string // hex of the 16 reserved bytes
	Experts  string // tshark expert messages on the frame, if any
}

// Script is the path of the CNP dissector.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "deploy", "wireshark", "roce_cnp.lua")
}

// Tshark returns tshark's path. Without it the test fails under CI (where
// scripts/test.sh installs it) and is skipped elsewhere.
func Tshark(tb testing.TB) string {
	tb.Helper()
	p, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatal("tshark not installed; scripts/test.sh installs it under CI")
		}
		tb.Skip("tshark not installed: skipping the Wireshark decode check")
	}
	return p
}

// Dissect runs tshark with the CNP dissector over the pcap and returns the
// frames it dissected as CNPs, in order.
func Dissect(tb testing.TB, pcap []byte) []CNP {
	tb.Helper()
	tshark := Tshark(tb)
	path := filepath.Join(tb.TempDir(), "cnp.pcap")
	if err := os.WriteFile(path, pcap, 0o644); err != nil {
		tb.Fatal(err)
	}
	fields := []string{"frame.number", "ip.dsfield", "roce_cnp.pkey", "roce_cnp.destqp", "roce_cnp.becn",
		"roce_cnp.fecn", "roce_cnp.ackreq", "roce_cnp.psn", "roce_cnp.reserved", "_ws.expert.message"}
	args := []string{"-n", "-X", "lua_script:" + Script(), "-r", path, "-Y", "roce_cnp", "-T", "fields", "-E", "separator=/t"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(tshark, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		tb.Fatalf("tshark: %v\n%s", err, stderr.Bytes())
	}
	var cnps []CNP
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		for len(f) < len(fields) {
			f = append(f, "")
		}
		n := func(s string) uint64 {
			v, _ := strconv.ParseUint(strings.TrimPrefix(s, "0x"), pick(strings.HasPrefix(s, "0x"), 16, 10), 32)
			return v
		}
		flag := func(s string) bool { return s == "1" || s == "True" || s == "true" }
		cnps = append(cnps, CNP{
			Frame: int(n(f[0])), TOS: uint8(n(f[1])), PKey: uint16(n(f[2])), DestQP: uint32(n(f[3])),
			BECN: flag(f[4]), FECN: flag(f[5]), AckReq: flag(f[6]), PSN: uint32(n(f[7])),
			Reserved: strings.ReplaceAll(f[8], ":", ""), Experts: f[9],
		})
	}
	return cnps
}

func pick(c bool, a, b int) int {
	if c {
		return a
	}
	return b
}
