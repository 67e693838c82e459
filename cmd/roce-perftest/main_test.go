package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goroce/goroce/oob"
)

func TestParseArgs(t *testing.T) {
	ok := []struct {
		name string
		args []string
		want func(*config) bool
	}{
		{"bw server defaults", []string{"write_bw", "-d", "127.0.0.1"}, func(c *config) bool {
			return c.server == "" && c.size == 65536 && c.iters == 5000 && c.mtu == 0 && c.TCPPort == 18515 && c.gidIndex == -1 && c.txDepth == 128
		}},
		{"lat defaults", []string{"write_lat", "-d", "127.0.0.1"}, func(c *config) bool { return c.size == 2 && c.iters == 1000 }},
		{"client with perftest flags", []string{"send_bw", "-d", "198.18.0.1", "-x", "1", "-n", "200", "-s", "64", "-F", "-q", "1", "-m", "4096", "-p", "1234", "198.18.0.11"}, func(c *config) bool {
			return c.server == "198.18.0.11" && c.gidIndex == 1 && c.iters == 200 && c.size == 64 && c.mtu == 4096 && c.TCPPort == 1234
		}},
		{"read_bw", []string{"read_bw", "-d", "::1", "-s", "1"}, func(c *config) bool { return c.test == readBW && c.size == 1 }},
	}
	for _, tt := range ok {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseArgs(tt.args, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(c) {
				t.Errorf("config %+v", c)
			}
		})
	}
	bad := []struct {
		name string
		args []string
	}{
		{"no test", nil},
		{"unknown test", []string{"atomic_bw", "-d", "127.0.0.1"}},
		{"no -d", []string{"write_bw"}},
		{"device name instead of address", []string{"write_bw", "-d", "rxe0"}},
		{"bad mtu", []string{"write_bw", "-d", "127.0.0.1", "-m", "1500"}},
		{"negative size", []string{"write_bw", "-d", "127.0.0.1", "-s", "-1"}},
		{"size above perftest's max", []string{"write_bw", "-d", "127.0.0.1", "-s", "8388609"}},
		{"negative iters", []string{"write_bw", "-d", "127.0.0.1", "-n", "-5"}},
		{"two QPs", []string{"write_bw", "-d", "127.0.0.1", "-q", "2"}},
		{"zero tx depth", []string{"write_bw", "-d", "127.0.0.1", "-t", "0"}},
		{"bad port", []string{"write_bw", "-d", "127.0.0.1", "-p", "70000"}},
		{"two servers", []string{"write_bw", "-d", "127.0.0.1", "a", "b"}},
		{"unknown flag", []string{"write_bw", "-d", "127.0.0.1", "-R"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if c, err := parseArgs(tt.args, io.Discard); err == nil {
				t.Errorf("parseArgs(%q) = %+v, want an error", tt.args, c)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want float64
	}{{"6.06", 6.06}, {"5.70", 5.70}, {"6.28", 6.28}, {"6.29.", 6.29}, {"25.01-x", 25.01}, {"", 0}, {"abc", 0}} {
		if got := parseVersion(tt.in); got != tt.want {
			t.Errorf("parseVersion(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestXchgReports checks the report exchange byte for byte against what perftest's
// xchg_bw_reports writes: five 8-byte big-endian values, each its own step.
func TestXchgReports(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	s := &session{conn: oob.NewPerftestConn(a, true)}
	mine := bwReport{size: 65536, iters: 200, peak: 12.5, avg: 11.25, msgRatep: 0.000180}
	peer := bwReport{size: 65536, iters: 200, peak: 1, avg: 2, msgRatep: 3}
	var wg sync.WaitGroup
	var got []byte
	var perr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The stock server's side: read each value, then answer with its own.
		for _, v := range []uint64{peer.size, peer.iters, math.Float64bits(peer.peak), math.Float64bits(peer.avg), math.Float64bits(peer.msgRatep)} {
			var in [8]byte
			if _, err := io.ReadFull(b, in[:]); err != nil {
				perr = err
				return
			}
			got = append(got, in[:]...)
			var out [8]byte
			binary.BigEndian.PutUint64(out[:], v)
			if _, err := b.Write(out[:]); err != nil {
				perr = err
				return
			}
		}
	}()
	rem, err := s.xchgReports(context.Background(), mine)
	wg.Wait()
	if err != nil || perr != nil {
		t.Fatal(err, perr)
	}
	if rem != peer {
		t.Errorf("remote report %+v, want %+v", rem, peer)
	}
	want := binary.BigEndian.AppendUint64(nil, 65536)
	want = binary.BigEndian.AppendUint64(want, 200)
	for _, f := range []float64{12.5, 11.25, 0.000180} {
		want = binary.BigEndian.AppendUint64(want, math.Float64bits(f))
	}
	if !bytes.Equal(got, want) {
		t.Errorf("sent % x\nwant % x", got, want)
	}
}

// freeTCPPort and freeUDPPort return ports that were free a moment ago.
func freeTCPPort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func freeUDPPort(t *testing.T) int {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

// row returns the bytes, iterations and figure of the results row, zeros if none.
func row(t *testing.T, who, out string, lat bool) (int, int, float64) {
	t.Helper()
	header := bwHeader
	col := 3
	if lat {
		header, col = latHeader, 5
	}
	_, rest, ok := strings.Cut(out, header+"\n")
	if !ok {
		return 0, 0, 0
	}
	line, _, _ := strings.Cut(rest, "\n")
	f := strings.Fields(line)
	if len(f) <= col {
		t.Fatalf("%s: short row %q", who, line)
	}
	b, _ := strconv.Atoi(f[0])
	n, _ := strconv.Atoi(f[1])
	v, _ := strconv.ParseFloat(f[col], 64)
	return b, n, v
}

// TestLoopback runs our server and our client of every test against each other over
// loopback UDP (127.0.0.1 and 127.0.0.2) and checks both results rows.
func TestLoopback(t *testing.T) {
	for _, tt := range []struct {
		test       test
		size, iter int
	}{
		{writeBW, 64, 300}, {writeBW, 65536, 50},
		{readBW, 64, 300}, {readBW, 65536, 50},
		{sendBW, 64, 300}, {sendBW, 65536, 50},
		{writeLat, 2, 200}, {writeLat, 65536, 50},
		{readLat, 64, 200}, {readLat, 65536, 50},
		{sendLat, 64, 200}, {sendLat, 65536, 50},
	} {
		t.Run(fmt.Sprintf("%s/s%d", tt.test, tt.size), func(t *testing.T) {
			tcp, udp := freeTCPPort(t), freeUDPPort(t)
			common := []string{"-p", strconv.Itoa(tcp), "-roce-port", strconv.Itoa(udp), "-s", strconv.Itoa(tt.size),
				"-n", strconv.Itoa(tt.iter), "-timeout", "30s", "-linger", "50ms", "-stats"}
			var srvOut, srvErr bytes.Buffer
			srvRC := make(chan int, 1)
			go func() {
				srvRC <- run(append([]string{string(tt.test), "-d", "127.0.0.1"}, common...), &srvOut, &srvErr)
			}()
			var cliOut, cliErr bytes.Buffer
			cargs := append([]string{string(tt.test), "-d", "127.0.0.2"}, common...)
			var rc int
			for deadline := time.Now().Add(10 * time.Second); ; {
				cliOut.Reset()
				cliErr.Reset()
				rc = run(append(cargs, "127.0.0.1"), &cliOut, &cliErr)
				if rc == 0 || !strings.Contains(cliErr.String(), "couldn't connect") || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if rc != 0 {
				t.Errorf("client exit %d:\n%s%s", rc, cliOut.String(), cliErr.String())
			}
			select {
			case src := <-srvRC:
				if src != 0 {
					t.Errorf("server exit %d:\n%s%s", src, srvOut.String(), srvErr.String())
				}
			case <-time.After(40 * time.Second):
				t.Fatal("server did not exit")
			}
			if t.Failed() {
				return
			}
			lat := !tt.test.bw()
			for _, side := range []struct{ who, out, errs string }{{"client", cliOut.String(), cliErr.String()}, {"server", srvOut.String(), srvErr.String()}} {
				// read_lat's server measures nothing, as perftest's.
				if b, n, v := row(t, side.who, side.out, lat); !(tt.test == readLat && side.who == "server") &&
					(b != tt.size || n != tt.iter || !(v > 0)) {
					t.Errorf("%s row: %d bytes, %d iterations, figure %v; want %d, %d, > 0", side.who, b, n, v, tt.size, tt.iter)
				}
				for _, bad := range []string{"icrc_err", "malformed", "unknown_qp", "retry_exceeded", "tx_errors", "cq_overruns",
					"bad_pkey", "bad_qkey", "bad_source"} {
					if !strings.Contains(side.errs, " "+bad+"=0") {
						t.Errorf("%s counted %s: %s", side.who, bad, side.errs)
					}
				}
			}
		})
	}
}

// TestClientNoServer fails, and says why, when nothing listens.
func TestClientNoServer(t *testing.T) {
	var out, errs bytes.Buffer
	rc := run([]string{"write_bw", "-d", "127.0.0.2", "-p", strconv.Itoa(freeTCPPort(t)), "-roce-port",
		strconv.Itoa(freeUDPPort(t)), "-timeout", "5s", "127.0.0.1"}, &out, &errs)
	if rc == 0 || !strings.Contains(errs.String(), "couldn't connect") {
		t.Errorf("exit %d, stderr %q; want 1 and couldn't connect", rc, errs.String())
	}
}

// TestServerTimeout ends a server nobody connects to with -timeout.
func TestServerTimeout(t *testing.T) {
	var out, errs bytes.Buffer
	start := time.Now()
	rc := run([]string{"send_bw", "-d", "127.0.0.1", "-p", strconv.Itoa(freeTCPPort(t)), "-roce-port",
		strconv.Itoa(freeUDPPort(t)), "-timeout", "300ms"}, &out, &errs)
	if rc == 0 || !strings.Contains(errs.String(), "no client") || time.Since(start) > 10*time.Second {
		t.Errorf("exit %d after %v, stderr %q; want 1 with no client", rc, time.Since(start), errs.String())
	}
}

// TestOldPeer refuses a peer older than 5.70, as perftest does.
func TestOldPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var v [oob.PerftestVersionLen]byte
		io.ReadFull(c, v[:])
		copy(v[:], "5.60\x00\x00")
		c.Write(v[:])
		io.Copy(io.Discard, c)
	}()
	var out, errs bytes.Buffer
	rc := run([]string{"write_bw", "-d", "127.0.0.2", "-p", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), "-roce-port",
		strconv.Itoa(freeUDPPort(t)), "-timeout", "5s", "127.0.0.1"}, &out, &errs)
	if rc == 0 || !strings.Contains(errs.String(), "older than 5.70") {
		t.Errorf("exit %d, stderr %q; want 1 and a version error", rc, errs.String())
	}
}

// TestPrintLat pins perftest's latency statistics: round trips halved (or not, for
// READ), the two largest dropped, the median of an even count averaged.
func TestPrintLat(t *testing.T) {
	base := time.Unix(0, 0)
	at := func(us ...int) []time.Time {
		var ts []time.Time
		for _, u := range us {
			ts = append(ts, base.Add(time.Duration(u)*time.Microsecond))
		}
		return ts
	}
	for _, tt := range []struct {
		name   string
		posted []time.Time
		rtt    float64
		want   []string // t_min t_max t_typical t_avg t_stdev 99% 99.9%
	}{
		// Gaps 10, 10, 30, 20, 1000, 500: 1000 and 500 dropped; 10 10 20 30 left.
		{"halved, tail dropped", at(0, 10, 20, 50, 70, 1070, 1570), 2,
			[]string{"5.00", "15.00", "7.50", "8.75", "4.15", "15.00", "15.00"}},
		{"read: whole round trip", at(0, 10, 20, 50, 70, 1070, 1570), 1,
			[]string{"10.00", "30.00", "15.00", "17.50", "8.29", "30.00", "30.00"}},
		{"odd count", at(0, 4, 8, 14, 1014, 2014), 1,
			[]string{"4.00", "6.00", "4.00", "4.67", "0.94", "6.00", "6.00"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			printLat(&b, 64, len(tt.posted), tt.posted, tt.rtt)
			f := strings.Fields(b.String())
			if len(f) != 9 || f[0] != "64" || f[1] != strconv.Itoa(len(tt.posted)) {
				t.Fatalf("row %q", b.String())
			}
			if got := f[2:]; !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
