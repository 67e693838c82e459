package link_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/goroce/goroce/link"
)

// TestReceiveFiltered feeds ReceiveFiltered scripted batches and checks what
// a caller gets: the kept messages in order, in the caller's own buffers, a
// batch rejected whole followed by another read, and an empty poll returned
// as it is.
func TestReceiveFiltered(t *testing.T) {
	tests := []struct {
		name    string
		batches [][]string // what successive reads return; "" ends the data
		want    []string
		reads   int
	}{
		{"all kept", [][]string{{"a1", "a2"}}, []string{"a1", "a2"}, 1},
		{"dropped in the middle", [][]string{{"a1", "x", "a2", "x", "a3"}}, []string{"a1", "a2", "a3"}, 1},
		{"dropped first", [][]string{{"x", "x", "a1"}}, []string{"a1"}, 1},
		{"whole batch dropped, read again", [][]string{{"x", "x"}, {"x"}, {"a1", "x"}}, []string{"a1"}, 3},
		{"empty poll", [][]string{{}}, nil, 1},
		{"dropped then empty poll", [][]string{{"x"}, {}}, nil, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reads := 0
			fn := func(msgs []link.Message) (int, error) {
				b := tc.batches[reads]
				reads++
				for i, s := range b {
					msgs[i].Buf = append(msgs[i].Buf[:0], s...)
					msgs[i].Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(1000+i))
					msgs[i].TOS = byte(i)
				}
				return len(b), nil
			}
			msgs := make([]link.Message, 8)
			bufs := make([][]byte, len(msgs))
			for i := range msgs {
				bufs[i] = make([]byte, 0, 16)
				msgs[i].Buf = bufs[i]
			}
			n, err := link.ReceiveFiltered(fn, msgs, func(m *link.Message) bool { return m.Buf[0] != 'x' })
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for i := 0; i < n; i++ {
				got = append(got, string(msgs[i].Buf))
				if &msgs[i].Buf[:1][0] != &bufs[i][:1][0] {
					t.Errorf("slot %d does not hold its own buffer", i)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || reads != tc.reads {
				t.Errorf("got %q after %d reads, want %q after %d", got, reads, tc.want, tc.reads)
			}
		})
	}
}

// TestReceiveFilteredKeepsMetadata checks that a message moved forward takes
// its address and IP header fields with it.
func TestReceiveFilteredKeepsMetadata(t *testing.T) {
	src := netip.MustParseAddrPort("127.0.0.9:4791")
	fn := func(msgs []link.Message) (int, error) {
		msgs[0].Buf = append(msgs[0].Buf[:0], 'x')
		msgs[1].Buf = append(msgs[1].Buf[:0], 'a')
		msgs[1].Addr, msgs[1].Local, msgs[1].TOS, msgs[1].TTL = src, src.Addr(), 3, 64
		msgs[1].FlowLabel, msgs[1].SegSize = 7, 1
		return 2, nil
	}
	msgs := []link.Message{{Buf: make([]byte, 0, 4)}, {Buf: make([]byte, 0, 4)}}
	n, err := link.ReceiveFiltered(fn, msgs, func(m *link.Message) bool { return m.Buf[0] != 'x' })
	m := msgs[0]
	if n != 1 || err != nil || string(m.Buf) != "a" || m.Addr != src || m.Local != src.Addr() || m.TOS != 3 || m.TTL != 64 || m.FlowLabel != 7 || m.SegSize != 1 {
		t.Fatalf("n=%d err=%v first=%+v", n, err, m)
	}
}
