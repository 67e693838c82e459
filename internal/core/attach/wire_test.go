package attach

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"os"
	"reflect"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRoundTrip(t *testing.T) {
	mad := bytes.Repeat([]byte{0xA5}, MADLen)
	tests := []Msg{
		{Type: THello, Seq: 1, Addr: netip.MustParseAddr("127.0.0.1"), Port: 4791, Name: "roce-perftest"},
		{Type: THello, Seq: 1, Addr: netip.MustParseAddr("2001:db8::1"), Port: 4791},
		{Type: TGrant, Seq: 1, Block: 3, First: 0x30000, Last: 0x3FFFF, CommIDs: 0x03000000, Flags: FlagGRO, MTU: 3},
		{Type: TError, Seq: 7, Errno: syscall.EADDRINUSE, Text: "service 0x106 is held by pid 12"},
		{Type: TOK, Seq: 9},
		{Type: TMADOut, Addr: netip.MustParseAddr("10.0.0.2"), MAD: mad},
		{Type: TMADIn, Addr: netip.MustParseAddr("10.0.0.2"), MAD: mad},
		{Type: TClaim, Seq: 4, ServiceID: 0x0106000000001c96, UD: true},
		{Type: TRelease, ServiceID: 0x0106000000001c96},
		{Type: TCharge, Seq: 5, Kind: KindMR, Delta: -3},
		{Type: TQuery, Seq: 6},
		{Type: TReport, Seq: 6, Body: []byte(`{"pds":1}`)},
	}
	for _, m := range tests {
		b, err := m.Append(nil)
		if err != nil {
			t.Fatalf("%v: %v", m.Type, err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%v: decode: %v", m.Type, err)
		}
		if got.Body == nil && m.Body == nil {
			got.Body = nil
		}
		if m.Type == TReport && len(m.Body) == 0 {
			got.Body = m.Body
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%v: round trip\n got  %+v\n want %+v", m.Type, got, m)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	hello, _ := (&Msg{Type: THello, Addr: netip.MustParseAddr("127.0.0.1"), Port: 4791}).Append(nil)
	grant, _ := (&Msg{Type: TGrant, First: 1, Last: 2, MTU: 3}).Append(nil)
	mod := func(b []byte, i int, v byte) []byte {
		c := append([]byte(nil), b...)
		c[i] = v
		return c
	}
	tests := []struct {
		name string
		b    []byte
		want syscall.Errno
	}{
		{"empty", nil, syscall.EPROTO},
		{"short header", hello[:5], syscall.EPROTO},
		{"other version", mod(hello, 0, 2), syscall.EPROTONOSUPPORT},
		{"unknown type", mod(hello, 1, 99), syscall.EPROTO},
		{"flags set", mod(hello, 2, 1), syscall.EPROTO},
		{"truncated body", hello[:len(hello)-1], syscall.EPROTO},
		{"trailing bytes", append(append([]byte(nil), hello...), 0), syscall.EPROTO},
		{"bad address length", mod(hello, headerLen, 5), syscall.EPROTO},
		{"grant MTU 0", grant[: len(grant)-1 : len(grant)-1], syscall.EPROTO},
		{"grant MTU 9", mod(grant, len(grant)-1, 9), syscall.EPROTO},
		{"too long", make([]byte, MaxMessage+1), syscall.EMSGSIZE},
	}
	for _, tc := range tests {
		if _, err := Decode(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	if _, err := (&Msg{Type: TMADOut, MAD: make([]byte, 10)}).Append(nil); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("short MAD: %v, want EINVAL", err)
	}
	if _, err := (&Msg{Type: TReport, Body: make([]byte, MaxMessage)}).Append(nil); !errors.Is(err, syscall.EMSGSIZE) {
		t.Errorf("oversized report: %v, want EMSGSIZE", err)
	}
	if _, err := (&Msg{Type: 0}).Append(nil); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("type 0: %v, want EINVAL", err)
	}
}

// FuzzDecode: any bytes decode to a message or an errno error, never a
// panic, and what decodes encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	for _, m := range []Msg{
		{Type: THello, Addr: netip.MustParseAddr("127.0.0.1"), Port: 4791, Name: "x"},
		{Type: TGrant, Block: 1, First: 0x10000, Last: 0x1FFFF, CommIDs: 1 << 24, MTU: 3},
		{Type: TMADIn, Addr: netip.MustParseAddr("10.0.0.2"), MAD: make([]byte, MADLen)},
		{Type: TClaim, ServiceID: 1},
		{Type: TCharge, Kind: KindQP, Delta: 1},
		{Type: TError, Errno: syscall.EPERM, Text: "no"},
	} {
		b, _ := m.Append(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			var e syscall.Errno
			if !errors.As(err, &e) {
				t.Fatalf("error without an errno: %v", err)
			}
			return
		}
		out, err := m.Append(nil)
		if err != nil {
			t.Fatalf("decoded %+v does not encode: %v", m, err)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip changed the bytes:\n in  %x\n out %x", b, out)
		}
	})
}

// TestRecvSeesPeerClose: a peer that closes is a closed connection to Recv,
// never a message or an error to retry (roced would spin on it).
func TestRecvSeesPeerClose(t *testing.T) {
	conns := connPair(t)
	if err := conns[0].Send(&Msg{Type: TOK, Seq: 3}); err != nil {
		t.Fatal(err)
	}
	conns[0].Close()
	m, _, err := conns[1].Recv()
	if err != nil || m.Type != TOK || m.Seq != 3 {
		t.Fatalf("first Recv: %+v %v", m, err)
	}
	for range 3 {
		if _, _, err := conns[1].Recv(); !IsClosed(err) {
			t.Fatalf("Recv after the peer closed: %v, want a closed connection", err)
		}
	}
	conns[1].Close()
}

// connPair returns the two ends of a connected SOCK_SEQPACKET pair, as roced's
// socket gives them.
func connPair(t *testing.T) [2]*Conn {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]*Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "pair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = NewConn(c.(*net.UnixConn))
	}
	return conns
}
