package oob

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// perftest stream layout (perftest 4.5-0.17, ib_write_bw/ib_read_bw -F -x 1, client
// side): version 16, cycle buffer 4, cache line 4, MTU 2, four hand-shakes of 108,
// five 8-byte report values, one more hand-shake, "done": 611 bytes each way.
const (
	pfVersionEnd = 16
	pfSysEnd     = pfVersionEnd + 8
	pfMTUEnd     = pfSysEnd + 2
	pfShakes     = 4
	pfReportEnd  = pfMTUEnd + pfShakes*PerftestRecordLen + 5*8
	pfTotal      = pfReportEnd + PerftestRecordLen + 5
)

func TestPerftestRecordGolden(t *testing.T) {
	tests := []struct {
		name, dir string
		want      PerftestDest
	}{
		{"ib_write_bw", "client-to-server", PerftestDest{OutReads: 1, QPN: 0x1e, PSN: 0xc74fee, RKey: 0x10ca, VAddr: 0x55c13b372000, GID: gid("::ffff:198.18.0.12")}},
		{"ib_write_bw", "server-to-client", PerftestDest{OutReads: 1, QPN: 0x1e, PSN: 0xd93a6e, RKey: 0xf3c, VAddr: 0x556d8e083000, GID: gid("::ffff:198.18.0.11")}},
		{"ib_read_bw", "client-to-server", PerftestDest{OutReads: 0x80, QPN: 0x1f, PSN: 0xbe3126, RKey: 0x11a6, VAddr: 0x56154a033000, GID: gid("::ffff:198.18.0.12")}},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.dir, func(t *testing.T) {
			b := readStream(t, tt.name, tt.dir)
			if len(b) != pfTotal {
				t.Fatalf("stream is %d bytes, want %d", len(b), pfTotal)
			}
			for _, off := range []int{pfMTUEnd, pfMTUEnd + 3*PerftestRecordLen, pfReportEnd} {
				rec := b[off : off+PerftestRecordLen]
				d, err := ParsePerftestRecord(rec)
				if err != nil {
					t.Fatal(err)
				}
				if d != tt.want {
					t.Errorf("record at %d = %+v, want %+v", off, d, tt.want)
				}
				enc, err := d.AppendRecord(nil)
				if err != nil || !bytes.Equal(enc, rec) {
					t.Errorf("AppendRecord = %q, %v; want %q", enc, err, rec)
				}
			}
		})
	}
}

// TestPerftestReplay plays each side of a recorded ib_write_bw exchange against the
// other side's bytes and checks that we write exactly what perftest wrote.
func TestPerftestReplay(t *testing.T) {
	for _, client := range []bool{true, false} {
		name := map[bool]string{true: "client", false: "server"}[client]
		t.Run(name, func(t *testing.T) {
			mine, peer := readStream(t, "ib_write_bw", "client-to-server"), readStream(t, "ib_write_bw", "server-to-client")
			if !client {
				mine, peer = peer, mine
			}
			c := newReplay(peer)
			p := NewPerftestConn(c, client)
			ctx := ctxTimeout(t)
			v, err := p.ExchangeVersion(ctx, "6.06")
			if err != nil || v != "6.06" {
				t.Fatalf("version %q, %v", v, err)
			}
			if cyc, err := p.ExchangeUint32(ctx, 0x1000); err != nil || cyc != 0x1000 {
				t.Fatalf("cycle buffer %#x, %v", cyc, err)
			}
			if cl, err := p.ExchangeUint32(ctx, 0x40); err != nil || cl != 0x40 {
				t.Fatalf("cache line %#x, %v", cl, err)
			}
			if m, err := p.ExchangeMTU(ctx, 3); err != nil || m != 3 {
				t.Fatalf("mtu %d, %v", m, err)
			}
			local, _ := ParsePerftestRecord(mine[pfMTUEnd : pfMTUEnd+PerftestRecordLen])
			want, _ := ParsePerftestRecord(peer[pfMTUEnd : pfMTUEnd+PerftestRecordLen])
			for i := 0; i < pfShakes; i++ {
				if r, err := p.HandShake(ctx, local); err != nil || r != want {
					t.Fatalf("hand-shake %d: %+v, %v", i, r, err)
				}
			}
			for i := 0; i < 5; i++ {
				off := pfMTUEnd + pfShakes*PerftestRecordLen + 8*i
				in := make([]byte, 8)
				if err := p.Exchange(ctx, mine[off:off+8], in); err != nil || !bytes.Equal(in, peer[off:off+8]) {
					t.Fatalf("report value %d: %x, %v", i, in, err)
				}
			}
			if _, err := p.HandShake(ctx, local); err != nil {
				t.Fatal(err)
			}
			if err := p.Done(ctx); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(c.w.Bytes(), mine) {
				t.Errorf("we wrote %d bytes that differ from perftest's %d", c.w.Len(), len(mine))
			}
		})
	}
}

func TestPerftestOverTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx := ctxTimeout(t)
	srvDest := PerftestDest{OutReads: 16, QPN: 0x22, PSN: 7, RKey: 9, VAddr: 1 << 40, GID: gid("fe80::2")}
	cliDest := PerftestDest{QPN: 0x11, PSN: 0xffffff, SRQN: 3, GID: gid("::ffff:127.0.0.1")}
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		p := NewPerftestConn(c, false)
		if v, err := p.ExchangeVersion(ctx, PerftestVersion); err != nil || v != "6.06" {
			errc <- errors.Join(err, errors.New("server: version "+v))
			return
		}
		if r, err := p.HandShake(ctx, srvDest); err != nil || r != cliDest {
			errc <- errors.Join(err, errors.New("server: wrong record"))
			return
		}
		errc <- p.Done(ctx)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := NewPerftestConn(c, true)
	if v, err := p.ExchangeVersion(ctx, "6.06"); err != nil || v != PerftestVersion {
		t.Fatalf("client: version %q, %v", v, err)
	}
	if r, err := p.HandShake(ctx, cliDest); err != nil || r != srvDest {
		t.Fatalf("client: %+v, %v", r, err)
	}
	if err := p.Done(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func TestPerftestErrors(t *testing.T) {
	good, _ := PerftestDest{QPN: 1}.AppendRecord(nil)
	for _, tt := range []struct{ name, rec string }{
		{"short", string(good[:107])},
		{"no NUL", string(good[:107]) + ":"},
		{"bad hex", "g" + string(good[1:])},
		{"missing colon", strings.Replace(string(good), ":", ";", 1)},
	} {
		if _, err := ParsePerftestRecord([]byte(tt.rec)); !errors.Is(err, syscall.EPROTO) {
			t.Errorf("%s: err = %v, want EPROTO", tt.name, err)
		}
	}
	if _, err := (PerftestDest{PSN: 1 << 24}).AppendRecord(nil); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("PSN overflow: %v", err)
	}
	p := NewPerftestConn(newReplay([]byte("9\x00")), true)
	if _, err := p.ExchangeMTU(ctxTimeout(t), 3); !errors.Is(err, ErrRecord) {
		t.Errorf("MTU 9: %v", err)
	}
	if _, err := p.ExchangeMTU(ctxTimeout(t), 6); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("local MTU 6: %v", err)
	}
	if _, err := p.ExchangeVersion(ctxTimeout(t), strings.Repeat("9", 16)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("long version: %v", err)
	}
	p = NewPerftestConn(newReplay([]byte("nope\x00")), false)
	if err := p.Done(ctxTimeout(t)); !errors.Is(err, ErrRecord) {
		t.Errorf("bad done: %v", err)
	}
	p = NewPerftestConn(newReplay(nil), false)
	if _, err := p.HandShake(ctxTimeout(t), PerftestDest{}); !errors.Is(err, syscall.EPROTO) {
		t.Errorf("closed peer: %v", err)
	}
}

// FuzzParsePerftestRecord: no input panics; a record that parses re-encodes to the same
// bytes up to hex case.
func FuzzParsePerftestRecord(f *testing.F) {
	for _, name := range []string{"ib_write_bw", "ib_read_bw"} {
		b, err := os.ReadFile("testdata/" + name + ".client-to-server.bin")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[pfMTUEnd : pfMTUEnd+PerftestRecordLen])
	}
	f.Add(bytes.Repeat([]byte{0}, PerftestRecordLen)) // all NULs: separators missing
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParsePerftestRecord(b)
		if err != nil {
			if !errors.Is(err, ErrRecord) {
				t.Fatalf("error %v does not wrap ErrRecord", err)
			}
			return
		}
		enc, err := d.AppendRecord(nil)
		if err != nil || !bytes.Equal(enc, bytes.ToLower(b)) {
			t.Fatalf("round trip %q -> %+v -> %q (%v)", b, d, enc, err)
		}
	})
}

// TestPerftestBinary: the rdma_cm record round-trips and has struct
// pingpong_dest's layout on x86-64.
func TestPerftestBinary(t *testing.T) {
	d := PerftestDest{LID: 0, OutReads: 0x80, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0x55ebed3e4000,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 15: 11}, SRQN: 7}
	b := d.AppendBinary(nil)
	want := "00000000" + "00000080" + "00000011" + "00abcdef" + "00001234" + "00000000" + "000055ebed3e4000" +
		"00000000000000000000ffffc612000b" + "00000007" + "00000000"
	if got := fmt.Sprintf("%x", b); got != want || len(b) != PerftestBinaryLen {
		t.Errorf("binary\n%s\nwant\n%s", got, want)
	}
	back, err := ParsePerftestBinary(b)
	if err != nil || back != d {
		t.Errorf("round trip %+v, %v", back, err)
	}
	if _, err := ParsePerftestBinary(b[:10]); err == nil {
		t.Error("short record accepted")
	}
}

// FuzzParsePerftestBinary: no input panics; a record that parses re-encodes to
// the bytes perftest's reader looks at.
func FuzzParsePerftestBinary(f *testing.F) {
	f.Add(PerftestDest{QPN: 0x11, PSN: 1, VAddr: 2}.AppendBinary(nil))
	f.Add(make([]byte, PerftestBinaryLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParsePerftestBinary(b)
		if err != nil {
			return
		}
		back, err := ParsePerftestBinary(d.AppendBinary(nil))
		if err != nil || back != d {
			t.Fatalf("%+v re-parses as %+v, %v", d, back, err)
		}
	})
}
