package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"golang.org/x/net/bpf"
)

func rocedump(t *testing.T, stdin []byte, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, bytes.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func trace(name string) string { return filepath.Join(traceDir, name) }

func TestCommandLine(t *testing.T) {
	rping := trace("rping.pcap")
	data, err := os.ReadFile(rping)
	if err != nil {
		t.Fatal(err)
	}
	_, all, _ := rocedump(t, nil, "-t", "-r", rping)
	n := strings.Count(all, "\n")
	for _, tt := range []struct {
		name  string
		args  []string
		stdin []byte
		lines int
		check func(out string) bool
	}{
		{"-r FILE", []string{"-t", "-r", rping}, nil, n, nil},
		{"-r - reads stdin", []string{"-t", "-r", "-"}, data, n, func(out string) bool { return out == all }},
		{"a FILE operand, as before", []string{"-t", rping}, nil, n, nil},
		{"-tsv, as before", []string{"-tsv", rping}, nil, n + 1, func(out string) bool { return strings.HasPrefix(out, "frame\tsrc\t") }},
		{"-c 3", []string{"-c", "3", "-t", "-r", rping}, nil, 3, nil},
		{"-c3 with a filter", []string{"-c3", "-r", rping, "-t", "cm"}, nil, 3, func(out string) bool { return strings.Contains(out, "CM ConnectRequest") }},
		{"-# numbers the frames as tshark", []string{"-#", "-t", "-r", rping}, nil, n, func(out string) bool { return strings.HasPrefix(out, "1 198.18.0.12:55410 > ") }},
		{"default: time of day", []string{"-r", rping, "-c", "1"}, nil, 1, func(out string) bool { return len(out) > 16 && out[2] == ':' && out[15] == ' ' }},
		{"-tt: seconds since the epoch", []string{"-tt", "-r", rping, "-c", "1"}, nil, 1, func(out string) bool { return strings.HasPrefix(out, "1") && out[10] == '.' }},
		{"-ttt: delta, 0 first", []string{"-ttt", "-r", rping, "-c", "2"}, nil, 2, func(out string) bool { return strings.HasPrefix(out, "00:00:00.000000 ") }},
		{"-tttt: date and time", []string{"-tttt", "-r", rping, "-c", "1"}, nil, 1, func(out string) bool { return out[4] == '-' && out[10] == ' ' }},
		{"-ttttt: since the first", []string{"-ttttt", "-r", rping}, nil, n, func(out string) bool {
			l := strings.Split(strings.TrimSpace(out), "\n")
			return strings.HasPrefix(l[0], "00:00:00.000000 ") && l[len(l)-1] > l[1]
		}},
		{"--tsv time column", []string{"--tsv", "-r", rping, "-c", "1"}, nil, 2, func(out string) bool {
			return strings.Split(strings.Split(out, "\n")[1], "\t")[23] != ""
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := rocedump(t, tt.stdin, tt.args...)
			if code != 0 || strings.Count(out, "\n") != tt.lines || tt.check != nil && !tt.check(out) {
				t.Errorf("exit %d, %d lines (want %d), stderr %q:\n%s", code, strings.Count(out, "\n"), tt.lines, errs, out)
			}
		})
	}
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{nil, "nothing to read"},
		{[]string{"-r", rping, "-i", "lo"}, "not both"},
		{[]string{"-c", "-1", "-r", rping}, "-c -1"},
		{[]string{"-r", rping, "qpn"}, "qpn needs a number"},
		{[]string{"-r", rping, "frobnicate"}, `unknown word "frobnicate"`},
		{[]string{"-r", rping, "op", "NO_SUCH_OP"}, "no opcode is called"},
		{[]string{"-r", rping, "(", "cm"}, "missing )"},
		{[]string{"-x"}, "unknown option: -x"},
	} {
		code, out, errs := rocedump(t, nil, tt.args...)
		if code != 2 || out != "" || !strings.Contains(errs, tt.msg) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line with %q", tt.args, code, out, errs, tt.msg)
		}
	}
	if code, out, _ := rocedump(t, nil, "-h"); code != 0 || !strings.Contains(out, "FILTER is an expression") {
		t.Errorf("-h: exit %d\n%s", code, out)
	}
	if code, out, _ := rocedump(t, nil, "--version"); code != 0 || !strings.HasPrefix(out, "rocedump ") {
		t.Errorf("--version: exit %d %q", code, out)
	}
}

// TestFilter runs expressions over the rping trace (5 CM MADs; QPs 0x1a each
// side; SEND, READ and WRITE with ACKs) and counts the lines.
func TestFilter(t *testing.T) {
	rping := trace("rping.pcap")
	count := func(expr ...string) int {
		code, out, errs := rocedump(t, nil, append([]string{"-t", "-r", rping}, expr...)...)
		if code != 0 {
			t.Fatalf("%q: exit %d %s", expr, code, errs)
		}
		return strings.Count(out, "\n")
	}
	total := count()
	for _, tt := range []struct {
		expr []string
		want int
	}{
		{[]string{"cm"}, 5},
		{[]string{"ud"}, 5},
		{[]string{"not", "cm"}, total - 5},
		{[]string{"!cm"}, -1},  // "!cm" is one word: unknown
		{[]string{"send"}, 25}, // 20 RC SEND ONLY and the 5 MADs (UD SEND ONLY)
		{[]string{"send", "and", "rc"}, 20},
		{[]string{"rc", "send"}, 20}, // adjacent primitives: and
		{[]string{"op", "rc_send_only"}, 20},
		{[]string{"op", "SEND_ONLY"}, 25}, // RC, UC and UD's
		{[]string{"op", "0x04"}, 20},
		{[]string{"write"}, 5},
		{[]string{"read"}, 10},
		{[]string{"read_request"}, 5},
		{[]string{"ack"}, 25},
		{[]string{"write", "or", "read_request"}, 10},
		{[]string{"write", "||", "read_request"}, 10},
		{[]string{"(write", "or", "read_request)", "and", "not", "ack"}, 10},
		{[]string{"qpn", "0x1a", "and", "not", "ack"}, 35},
		{[]string{"qpn", "1"}, 5},
		{[]string{"psn", "0"}, -2}, // checked below against the trace
	} {
		if tt.want < 0 {
			continue
		}
		if got := count(tt.expr...); got != tt.want {
			t.Errorf("%q: %d packets, want %d", tt.expr, got, tt.want)
		}
	}
	// A PSN range holds what its ends hold, and wraps past 2^24.
	if all, lo, hi := count("psn", "0-16777215"), count("psn", "0-100"), count("psn", "101-16777215"); lo+hi != all || all != total {
		t.Errorf("psn 0-100 %d + 101-max %d != all %d (total %d)", lo, hi, all, total)
	}
	if w, a, b := count("psn", "16777000-100"), count("psn", "16777000-16777215"), count("psn", "0-100"); w != a+b {
		t.Errorf("wrapping range %d, want %d + %d", w, a, b)
	}
}

// TestHumanLine: each length is labelled by its meaning, and a CM MAD reads as
// tshark names it, with its identifiers.
func TestHumanLine(t *testing.T) {
	_, out, _ := rocedump(t, nil, "-t", "-r", trace("ib_write_bw.pcap"), "-c", "1", "op", "rdma_write_first")
	if !strings.Contains(out, " va 0x556d8e083000 rkey 0xf3c dma-len 4096 payload 1024 icrc ok") || strings.Contains(out, " len ") {
		t.Errorf("WRITE FIRST: %q", out)
	}
	_, out, _ = rocedump(t, nil, "-t", "-r", trace("rping.pcap"), "cm")
	for _, want := range []string{
		"UD_SEND_ONLY qp 0x000001 psn 0 ackreq qkey 0x80010000 srcqp 0x1 payload 256 CM ConnectRequest tid 0x2f5f998c9 comm-id 0xc998f9f5 " +
			"service-id 0x1061c06 (rdma_cm tcp port 7174) qpn 0x00001a start-psn 0x33c73d resp-res 1 init-depth 1 mtu 1024 rdma_cm 198.18.0.12:43297 > 198.18.0.11 icrc ok",
		"CM ConnectReply tid 0x2f5f998c9 comm-id 0xaf190a1a remote-comm-id 0xc998f9f5 qpn 0x00001a start-psn 0xd74912",
		"CM ReadyToUse tid 0x2f5f998c9 comm-id 0xc998f9f5 remote-comm-id 0xaf190a1a icrc ok",
		"CM DisconnectRequest tid 0x2f5f998c9 comm-id 0xc998f9f5 remote-comm-id 0xaf190a1a remote-qpn 0x00001a icrc ok",
		"CM DisconnectReply tid 0x2f5f998c9 comm-id 0xaf190a1a remote-comm-id 0xc998f9f5 icrc ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}

// TestBPF runs the capture filter in x/net/bpf's VM over the IP packets of
// the traces: it keeps exactly the RoCEv2 datagrams.
func TestBPF(t *testing.T) {
	vm, err := bpf.NewVM(rocev2Filter)
	if err != nil {
		t.Fatal(err)
	}
	kept, dropped := 0, 0
	for _, name := range []string{"rping.pcap", "rc_pingpong_s64.pcap", "ud_pingpong.pcap"} {
		eachFrame(t, trace(name), func(frame []byte, link uint32) {
			if link != linkEthernet || len(frame) < 14 {
				return
			}
			_, xerr := extract(link, frame)
			n, err := vm.Run(frame[14:]) // SOCK_DGRAM: from the IP header on
			if err != nil {
				t.Fatal(err)
			}
			if (n > 0) != (xerr == nil) {
				t.Errorf("%s: filter %d, extract %v", name, n, xerr)
			}
			if n > 0 {
				kept++
			} else {
				dropped++
			}
		})
	}
	// IPv6, a later IPv4 fragment, and junk.
	eth6 := ethIPv6(firstRoCE(t, "ud_pingpong.pcap"), 17, nil)
	if n, _ := vm.Run(eth6[14:]); n == 0 {
		t.Error("IPv6 RoCEv2 dropped")
	}
	frag := append([]byte(nil), firstRoCE(t, "ud_pingpong.pcap")[14:]...)
	frag[6], frag[7] = 0x00, 0x10
	for name, pkt := range map[string][]byte{"fragment": frag, "arp": make([]byte, 28), "short": {0x45}} {
		if n, _ := vm.Run(pkt); n != 0 {
			t.Errorf("%s kept", name)
		}
	}
	if kept < 100 || dropped < 10 {
		t.Errorf("kept %d, dropped %d: the traces hold both", kept, dropped)
	}
}

// TestLiveCapture captures an RC SEND between two goroce devices on
// loopback addresses of its own through -i lo (root: AF_PACKET).
func TestLiveCapture(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root, and live capture needs it")
		}
		code, _, errs := rocedump(t, nil, "-i", "lo", "-c", "1")
		if code != 1 || !strings.Contains(errs, "needs root or CAP_NET_RAW") {
			t.Errorf("without root: exit %d, %q", code, errs)
		}
		t.Skip("live capture needs root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type result struct {
		code      int
		out, errs string
	}
	done := make(chan result, 1)
	started := make(chan struct{})
	go func() {
		var out bytes.Buffer
		errs := &notifyWriter{ready: started}
		// The SEND ONLY and its ACK, picked out by their PSN: lo also carries
		// the traffic of other packages' tests running at the same time.
		code := run(ctx, []string{"-i", "lo", "-c", "2", "-t", "psn", strconv.Itoa(livePSN), "and", "(", "qpn", "0x11", "or", "qpn", "0x12", ")"}, nil, &out, errs)
		done <- result{code, out.String(), errs.String()}
	}()
	select {
	case <-started:
	case r := <-done:
		t.Fatalf("capture ended: %d %s", r.code, r.errs)
	}
	sendBetween(t, "127.0.0.201", "127.0.0.202")
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		t.Fatal("no capture")
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if r.code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "127.0.0.201:") || !strings.Contains(lines[0], "RC_SEND_ONLY") ||
		!strings.Contains(lines[1], "RC_ACKNOWLEDGE") || !strings.HasSuffix(lines[0], "payload 64 icrc ok") {
		t.Errorf("exit %d:\n%s\n%s", r.code, r.out, r.errs)
	}
}

// notifyWriter closes ready on the first write: rocedump says it listens.
type notifyWriter struct {
	bytes.Buffer
	ready chan struct{}
	once  bool
}

func (w *notifyWriter) Write(b []byte) (int, error) {
	if !w.once {
		w.once = true
		close(w.ready)
	}
	return w.Buffer.Write(b)
}

// FuzzParseFilter: no expression panics the parser, and a filter that
// compiles runs on any packet, even a malformed one, without panicking.
func FuzzParseFilter(f *testing.F) {
	for _, e := range []string{"qpn 0x11", "psn 1-2 and not ack", "(write or read) cm", "op send_only || !", "psn 16777215-0"} {
		f.Add(e, []byte{0x04, 0, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1})
	}
	f.Fuzz(func(t *testing.T, expr string, pkt []byte) {
		flt, err := parseFilter(strings.Fields(expr))
		if err != nil || flt == nil {
			return
		}
		if p, err := bth.Parse(pkt); err == nil {
			flt(&p)
		}
	})
}
