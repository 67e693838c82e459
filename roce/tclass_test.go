package roce

import (
	"net/netip"
	"testing"

	"github.com/goroce/goroce/dcqcn"
	"github.com/goroce/goroce/link"
)

// pipePairAt opens two devices on a Pipe at addresses a and b, with
// congestion control off: the traffic class goes out exactly as given (on,
// data carries ECT(0) in its ECN bits: cc_test.go).
func pipePairAt(t testing.TB, a, b netip.Addr) (*Device, *Device) {
	t.Helper()
	la, lb := link.Pipe(netip.AddrPortFrom(a, RoCEv2Port), netip.AddrPortFrom(b, RoCEv2Port))
	da, err := OpenLink(la, WithMTU(MTU1024), WithCongestionControl(dcqcn.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	db, err := OpenLink(lb, WithMTU(MTU1024), WithCongestionControl(dcqcn.Config{}))
	if err != nil {
		da.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close(); db.Close() })
	return da, db
}

// TestUDAddressHandleGRHFieldsArriveInTheGRHArea: a UD datagram sent through an
// AH carries the AH's traffic class, hop limit and (IPv6) flow label in its IP
// header, and the receiver's GRH area reports the header as it arrived, so
// ibv_init_ah_from_wc answers with the same traffic class.
func TestUDAddressHandleGRHFieldsArriveInTheGRHArea(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b netip.Addr
		flow bool // the flow label travels (IPv6 only)
	}{
		{"IPv4", netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), false},
		{"IPv6", netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			da, db := pipePairAt(t, tc.a, tc.b)
			a := newSide(t, da, QPTypeUD, 4096, nil, nil)
			b := newSide(t, db, QPTypeUD, 4096, nil, nil)
			readyUD(t, a, b, 0x1234)
			av := AHAttr{DGID: db.Addr(), SGIDIndex: uint8(da.GIDIndex()), IsGlobal: true,
				TrafficClass: 0x68 | 1, HopLimit: 7, FlowLabel: 0x12345}
			ah := must[*AH](t)(a.pd.CreateAH(av))
			_ = must[int](t)(b.qp.PostRecv([]RecvWR{{WRID: 1, SGL: []SGE{{Addr: b.mr.Addr(), Length: 4096, LKey: b.mr.LKey()}}}}))
			_ = must[int](t)(a.qp.PostSend([]SendWR{{WRID: 2, Opcode: WRSend, Flags: SendSignaled,
				SGL: []SGE{{Addr: a.mr.Addr(), Length: 16, LKey: a.mr.LKey()}}, AH: ah.AV(), RemoteQPN: b.qp.QPN(), RemoteQKey: 0x1234}}))
			wc := pollN(t, b.rcq, 1, wcTimeout)[0]
			checkWC(t, wc, 1, WCRecv, GRHLen+16)
			got := must[AHAttr](t)(db.InitAHFromWC(&wc, b.buf[:GRHLen]))
			want := AHAttr{DGID: da.Addr(), SGIDIndex: uint8(db.GIDIndex()), IsGlobal: true, TrafficClass: 0x69, HopLimit: 7}
			if tc.flow {
				want.FlowLabel = 0x12345
			}
			if got != want {
				t.Fatalf("GRH area reports %+v\nwant %+v\n% x", got, want, b.buf[:GRHLen])
			}
		})
	}
}
