package rping

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/internal/testsupport/syncbuf"
	"github.com/goroce/goroce/link"
	"github.com/goroce/goroce/roce"
)

// TestPingDataMatchesRping checks fillPing and the -v format against what
// the stock rping printed in testdata/rping.client.txt (rping -C 5 -v).
func TestPingDataMatchesRping(t *testing.T) {
	want := verboseLines(t, "testdata/rping.client.txt", "ping data: ")
	var got bytes.Buffer
	buf := make([]byte, 64)
	start := byte(65)
	for i := 0; i < 5; i++ {
		start = Fill(buf, i, start)
		fmt.Fprintf(&got, "ping data: %s\n", cstr(buf))
	}
	if got.String() != want {
		t.Errorf("got\n%s\nwant\n%s", got.String(), want)
	}
	// The server side prints the same data with a prefix.
	if sw := verboseLines(t, "testdata/rping.server.txt", "server ping data: "); strings.ReplaceAll(sw, "server ", "") != want {
		t.Errorf("server lines differ:\n%s", sw)
	}
}

// verboseLines returns the lines of a captured rping output that start with
// prefix, newline-terminated.
func verboseLines(t *testing.T, file, prefix string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			out.WriteString(l + "\n")
		}
	}
	return out.String()
}

func TestFillPingWraps(t *testing.T) {
	// After 58 pings the start character wraps from 'z' back to 'A'.
	start := byte(65)
	buf := make([]byte, 26)
	for i := 0; i < 58; i++ {
		start = Fill(buf, i, start)
	}
	if start != 65 {
		t.Errorf("start %q after 58 pings", start)
	}
	if buf[25] != 0 || string(buf[:14]) != "rdma-ping-57: " || buf[14] != 'z' || buf[15] != 'A' {
		t.Errorf("buf %q", buf)
	}
}

// pair is two devices joined by an in-memory link, each with its CM.
type pair struct {
	devA, devB *roce.Device
	mgrA, mgrB *cm.Manager
	wireA      link.Link // A's end of the wire: closing it silences A at once
	madA       *gsi.Conn // A's QP1: closing it silences A's CM alone
}

func newPair(t *testing.T) *pair {
	a, b := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
	la, lb := link.Pipe(a, b)
	wa, ca := gsi.Wrap(la)
	wb, cb := gsi.Wrap(lb)
	da, err := roce.OpenLink(wa)
	if err != nil {
		t.Fatal(err)
	}
	db, err := roce.OpenLink(wb)
	if err != nil {
		da.Close()
		t.Fatal(err)
	}
	p := &pair{devA: da, devB: db, mgrA: cm.NewManager(ca, cm.ManagerConfig{}), mgrB: cm.NewManager(cb, cm.ManagerConfig{}), wireA: la, madA: ca}
	t.Cleanup(func() { p.mgrA.Close(); p.mgrB.Close(); da.Close(); db.Close() })
	return p
}

// run serves one connection on B and runs the client on A.
func (p *pair) run(t *testing.T, co, so Options) (clientErr, serverErr error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := p.mgrB.Listen(netip.MustParseAddrPort("10.0.0.2:7174"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan error, 1)
	go func() {
		r, err := l.GetRequest(ctx)
		if err == nil {
			err = ServeConn(ctx, p.devB, r, so)
		}
		done <- err
	}()
	clientErr = Client(ctx, p.devA, p.mgrA, netip.AddrPort{}, netip.MustParseAddrPort("10.0.0.2:7174"), co)
	return clientErr, <-done
}

func TestPipe(t *testing.T) {
	for _, size := range []int{MinSize, 64, 1000, 16384, MaxSize} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			p := newPair(t)
			var cout, sout, serr syncbuf.Buffer
			cerr, serverErr := p.run(t, Options{Size: size, Count: 3, Verbose: true, Validate: true, Out: &cout},
				Options{Size: size, Verbose: true, Out: &sout, Err: &serr})
			if cerr != nil || serverErr != nil {
				t.Fatalf("client %v, server %v", cerr, serverErr)
			}
			var want bytes.Buffer
			buf := make([]byte, size)
			start := byte('A')
			for i := 0; i < 3; i++ {
				start = Fill(buf, i, start)
				fmt.Fprintf(&want, "ping data: %s\n", cstr(buf))
			}
			if cout.String() != want.String() {
				t.Errorf("client output differs")
			}
			if sout.String() != strings.ReplaceAll(want.String(), "ping data", "server ping data") {
				t.Errorf("server output differs")
			}
			if serr.String() != "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n" {
				t.Errorf("server stderr %q", serr.String())
			}
			for _, d := range []*roce.Device{p.devA, p.devB} {
				if s := d.Stats(); s.ICRCErrors+s.Malformed+s.Retransmits+s.UnknownQP != 0 {
					t.Errorf("%v counters %+v", d.Addr(), s)
				}
			}
		})
	}
}

// TestValidateMismatch: a server that echoes wrong data makes the client
// print rping's "data mismatch!" and fail with ErrMismatch.
func TestValidateMismatch(t *testing.T) {
	p := newPair(t)
	var cout, cerr syncbuf.Buffer
	var trace syncbuf.Buffer
	err, _ := p.run(t, Options{Count: 3, Verbose: true, Validate: true, Out: &cout, Err: &cerr,
		Debug: func(f string, a ...any) { fmt.Fprintf(&trace, f, a...) }}, Options{corruptEcho: true})
	if !errors.Is(err, ErrMismatch) || cerr.String() != "data mismatch!\n" {
		t.Errorf("err %v, stderr %q", err, cerr.String())
	}
	if cout.String() != "" {
		t.Errorf("printed a ping that failed validation: %q", cout.String())
	}
	if !strings.Contains(trace.String(), "recv completion") || !strings.Contains(trace.String(), "rdma_connect successful") {
		t.Errorf("-d trace: %q", trace.String())
	}
}

func TestOptionErrors(t *testing.T) {
	p := newPair(t)
	for _, o := range []Options{{Size: MinSize - 1}, {Size: MaxSize + 1}, {Count: -1}} {
		if err := Client(context.Background(), p.devA, p.mgrA, netip.AddrPort{}, netip.MustParseAddrPort("10.0.0.2:7174"), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
