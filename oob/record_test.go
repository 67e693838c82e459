package oob

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The testdata/*.bin files are the TCP streams of real exchanges between two rxe guests
// (rdma-core 44.0), one file per direction, cut from tshark's "follow tcp" hex dumps.
func readStream(t *testing.T, name, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+"."+dir+".bin"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gid(s string) [16]byte { return netip.MustParseAddr(s).As16() }

func TestParseRecordGolden(t *testing.T) {
	tests := []struct {
		name           string
		client, server Dest
	}{
		{"rc_pingpong",
			Dest{QPN: 0x11, PSN: 0xac1e20, GID: gid("::ffff:198.18.0.12")},
			Dest{QPN: 0x11, PSN: 0xe82a19, GID: gid("::ffff:198.18.0.11")}},
		{"rc_pingpong_s64",
			Dest{QPN: 0x12, PSN: 0x27c6c8, GID: gid("::ffff:198.18.0.12")},
			Dest{QPN: 0x12, PSN: 0xbb8494, GID: gid("::ffff:198.18.0.11")}},
		{"ud_pingpong",
			Dest{QPN: 0x15, PSN: 0x41ba4e, GID: gid("::ffff:198.18.0.12")},
			Dest{QPN: 0x15, PSN: 0xbad2ff, GID: gid("::ffff:198.18.0.11")}},
		{"host_rc_active", // the Python host peer as client
			Dest{QPN: 0x321, PSN: 0x000100, GID: gid("::ffff:198.18.0.1")},
			Dest{QPN: 0x28, PSN: 0x7c3e1a, GID: gid("::ffff:198.18.0.11")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c2s := readStream(t, tt.name, "client-to-server")
			s2c := readStream(t, tt.name, "server-to-client")
			if len(c2s) != RecordLen+5 || !bytes.Equal(c2s[RecordLen:], []byte("done\x00")) {
				t.Fatalf("client stream %q: want one record then done", c2s)
			}
			for _, side := range []struct {
				b    []byte
				want Dest
			}{{c2s[:RecordLen], tt.client}, {s2c, tt.server}} {
				d, err := ParseRecord(side.b)
				if err != nil {
					t.Fatal(err)
				}
				if d != side.want {
					t.Errorf("ParseRecord(%q) = %v, want %v", side.b, d, side.want)
				}
				enc, err := d.AppendRecord(nil)
				if err != nil || !bytes.Equal(enc, side.b) {
					t.Errorf("AppendRecord(%v) = %q, %v; want %q", d, enc, err, side.b)
				}
			}
		})
	}
}

func TestSRQRecordsGolden(t *testing.T) {
	// ibv_srq_pingpong -q 4: 256 records each way, the first 4 real.
	for _, tt := range []struct {
		dir      string
		extra    int
		firstQPN uint32
		gid      string
	}{{"client-to-server", 5, 0x16, "::ffff:198.18.0.12"}, {"server-to-client", 0, 0x16, "::ffff:198.18.0.11"}} {
		t.Run(tt.dir, func(t *testing.T) {
			b := readStream(t, "srq_pingpong", tt.dir)
			if len(b) != SRQRecords*RecordLen+tt.extra {
				t.Fatalf("stream is %d bytes", len(b))
			}
			recs, err := ParseRecords(b[:SRQRecords*RecordLen])
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range recs {
				if real := i < 4; real != !d.IsZero() {
					t.Fatalf("record %d = %v: real=%v", i, d, real)
				}
				if i < 4 && (d.QPN != tt.firstQPN+uint32(i) || d.GID != gid(tt.gid)) {
					t.Errorf("record %d = %v", i, d)
				}
			}
			enc, err := AppendRecords(nil, recs[:4], SRQRecords)
			if err != nil || !bytes.Equal(enc, b[:SRQRecords*RecordLen]) {
				t.Errorf("AppendRecords did not reproduce the stream (err %v)", err)
			}
		})
	}
}

func TestDestString(t *testing.T) {
	d := Dest{QPN: 0x11, PSN: 0x67a3f8, GID: gid("::ffff:198.18.0.12")}
	// As ibv_rc_pingpong prints "  local address:  ..." and "  remote address: ...".
	const want = "LID 0x0000, QPN 0x000011, PSN 0x67a3f8, GID ::ffff:198.18.0.12"
	if got := d.String(); got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestParseRecordErrors(t *testing.T) {
	good := "0000:000011:ac1e20:00000000000000000000ffffc612000c\x00"
	tests := []struct {
		name, rec string
	}{
		{"empty", ""},
		{"short by one", good[:51]},
		{"long by one", good + "x"},
		{"no NUL", good[:51] + "0"},
		{"missing colon", strings.Replace(good, ":", "-", 1)},
		{"bad LID digit", "000g" + good[4:]},
		{"bad QPN digit", good[:5] + "00001z" + good[11:]},
		{"bad PSN digit", good[:12] + " c1e20" + good[18:]},
		{"bad GID digit", good[:19] + "x" + good[20:]},
		{"NUL inside", good[:30] + "\x00" + good[31:]},
		{"done instead", "done\x00" + strings.Repeat("\x00", 47)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRecord([]byte(tt.rec))
			if !errors.Is(err, syscall.EPROTO) {
				t.Errorf("ParseRecord(%q) err = %v, want EPROTO", tt.rec, err)
			}
		})
	}
	if _, err := ParseRecord([]byte(strings.ToUpper(good[:51]) + "\x00")); err != nil {
		t.Errorf("upper-case hex refused: %v", err)
	}
	if _, err := ParseRecords([]byte(good + good[:10])); !errors.Is(err, syscall.EPROTO) {
		t.Errorf("ParseRecords(partial) err = %v", err)
	}
}

func TestAppendRecordErrors(t *testing.T) {
	for _, d := range []Dest{{QPN: 1 << 24}, {PSN: 1 << 24}} {
		b, err := d.AppendRecord([]byte("x"))
		if !errors.Is(err, syscall.EINVAL) || string(b) != "x" {
			t.Errorf("AppendRecord(%+v) = %q, %v; want unchanged, EINVAL", d, b, err)
		}
	}
	b, err := AppendRecords([]byte("x"), []Dest{{QPN: 1}, {PSN: 1 << 24}}, 2)
	if !errors.Is(err, syscall.EINVAL) || string(b) != "x" {
		t.Errorf("AppendRecords(bad second) = %q, %v", b, err)
	}
	if _, err := AppendRecords(nil, make([]Dest, 3), 2); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("AppendRecords(3 into 2) err = %v", err)
	}
}

// FuzzParseRecord: no input panics; a record that parses re-encodes to the same bytes
// up to the case of its hex digits.
func FuzzParseRecord(f *testing.F) {
	for _, name := range []string{"rc_pingpong", "ud_pingpong", "host_rc_active"} {
		b, err := os.ReadFile(filepath.Join("testdata", name+".server-to-client.bin"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("done\x00"))                                                // the client's last message, not a record
	f.Add([]byte("0000:000000:000000:00000000000000000000000000000000\x00")) // srq placeholder
	f.Add([]byte("FFFF:FFFFFF:FFFFFF:FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF\x00")) // every field at its maximum, upper case
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseRecord(b)
		if err != nil {
			if !errors.Is(err, ErrRecord) {
				t.Fatalf("error %v does not wrap ErrRecord", err)
			}
			return
		}
		enc, err := d.AppendRecord(nil)
		if err != nil {
			t.Fatalf("parsed %q to %v but cannot encode it: %v", b, d, err)
		}
		if !bytes.Equal(enc, bytes.ToLower(b)) {
			t.Fatalf("round trip %q -> %v -> %q", b, d, enc)
		}
	})
}
