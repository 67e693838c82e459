package pingpong

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/oob"
	"github.com/goroce/goroce/roce"
)

func TestConnectAttr(t *testing.T) {
	for _, tt := range []struct {
		name   string
		gid    string
		global bool
	}{
		{"IPv4-mapped GID: interface ID 0000:ffff:c612:000b", "::ffff:198.18.0.11", true},
		{"IPv6 GID", "fd00::11", true},
		{"zero interface ID: no GRH, as the stock tools", "fd00::", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := oob.Dest{QPN: 0x11, PSN: 0xabcdef, GID: netip.MustParseAddr(tt.gid).As16()}
			a := ConnectAttr(0x123456, r, 1, roce.MTU1024)
			want := roce.ConnectAttr{QKey: QKey,
				AV:      roce.AddressVector{DGID: netip.MustParseAddr(tt.gid).Unmap(), SGIDIndex: 1, HopLimit: 64, IsGlobal: tt.global},
				PathMTU: roce.MTU1024, DestQPN: 0x11, RQPSN: 0xabcdef, MaxDestRDAtomic: 1, MinRNRTimer: 12,
				SQPSN: 0x123456, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRDAtomic: 1}
			if a != want {
				t.Errorf("ConnectAttr =\n%+v, want\n%+v", a, want)
			}
		})
	}
}

// TestSession: each kind gets its QP type, an SRQ only in srq mode, and a
// buffer of Slots × SlotLen + Extra bytes; Close releases everything.
func TestSession(t *testing.T) {
	dev, err := roce.Open(netip.MustParseAddr("127.0.0.1"), roce.WithPort(0))
	if err != nil {
		t.Skip(err)
	}
	defer dev.Close()
	for _, tt := range []struct {
		kind Kind
		typ  roce.QPType
		qps  int
	}{
		{RC, roce.QPTypeRC, 1}, {UC, roce.QPTypeUC, 1}, {UD, roce.QPTypeUD, 1}, {SRQ, roce.QPTypeRC, 3},
	} {
		t.Run(tt.kind.String(), func(t *testing.T) {
			s, err := Open(dev, Spec{Kind: tt.kind, QPs: tt.qps, Slots: 4, SlotLen: 100, Extra: 7, SendWR: 1, RecvWR: 4, CQE: 8})
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Buf) != 407 || len(s.QPs) != tt.qps || (s.SRQ != nil) != (tt.kind == SRQ) {
				t.Errorf("buffer %d bytes, %d QPs, SRQ %v", len(s.Buf), len(s.QPs), s.SRQ != nil)
			}
			for _, qp := range s.QPs {
				a, err := qp.Query()
				if err != nil || a.State != roce.QPSInit {
					t.Errorf("QP %#x: %+v %v", qp.QPN(), a.State, err)
				}
				if qp.Type() != tt.typ {
					t.Errorf("QP %#x is %v, want %v", qp.QPN(), qp.Type(), tt.typ)
				}
			}
			if n, err := s.PostRecv(0, []roce.RecvWR{{WRID: 1, SGL: []roce.SGE{s.SGE(3, 0, 100)}}}); n != 1 || err != nil {
				t.Errorf("PostRecv: %d %v", n, err)
			}
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}
