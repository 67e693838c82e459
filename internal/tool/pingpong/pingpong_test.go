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
