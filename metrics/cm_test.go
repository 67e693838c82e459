package metrics

import (
	"net/netip"
	"testing"
	"time"

	"github.com/goroce/goroce/bth"
	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/link"
)

// TestCMCollector: a junk datagram to QP1 shows as a GSI drop, a REQ over the
// pending cap as a CM drop, and the admitted one as a pending connection.
func TestCMCollector(t *testing.T) {
	a, b := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
	la, lb := link.Pipe(a, b)
	defer lb.Close()
	wl, qp1 := gsi.Wrap(la)
	defer wl.Close()
	// Junk for QP1 (an RC SEND, not a UD MAD), then one datagram for another QP
	// so that ReadBatch returns.
	junk := bth.Append(nil, &bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: cm.GSIQPN}, make([]byte, 8))
	other := bth.Append(nil, &bth.Fields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: 0x11}, make([]byte, 8))
	if _, err := lb.WriteBatch([]link.Message{{Buf: junk, Addr: a}, {Buf: other, Addr: a}}); err != nil {
		t.Fatal(err)
	}
	msgs := []link.Message{{Buf: make([]byte, link.MaxDatagram)}}
	if n, err := wl.ReadBatch(msgs); n != 1 || err != nil {
		t.Fatalf("ReadBatch = %d, %v", n, err)
	}

	pa, pb := cm.Pipe(a.Addr(), b.Addr())
	mgr := cm.NewManager(pa, cm.ManagerConfig{Machine: cm.Config{MaxPending: 1}})
	defer mgr.Close()
	l, err := mgr.Listen(netip.AddrPortFrom(a.Addr(), 7174), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for id := uint32(1); id <= 2; id++ {
		priv, err := cm.AppendCMA(nil, cm.CMAHeader{Version: 0, SrcPort: 40000, Src: b.Addr(), Dst: a.Addr()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		req := cm.REQ{LocalCommID: id, ServiceID: cm.ServiceID(cm.PortSpaceTCP, 7174), LocalQPN: 0x11,
			TransportServiceType: cm.TransportRC, PKey: cm.GSIPKey, PathMTU: 3, MaxCMRetries: 3,
			LocalCMResponseTimeout: 20, RemoteCMResponseTimeout: 20, PrivateData: priv}
		mad, err := cm.Marshal(uint64(id), &req)
		if err != nil {
			t.Fatal(err)
		}
		if err := pb.WriteMAD(mad, a.Addr()); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for mgr.Stats().RxMADs < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}

	got := gather(t, NewCMCollector(Options{}, CMSource{Addr: a.Addr(), GSI: qp1, CM: mgr}))
	wantValues(t, got, map[string]float64{
		"roce_gsi_drops_total,reason=malformed":    1,
		"roce_gsi_drops_total,reason=bad_icrc":     0,
		"roce_gsi_mads_total,direction=rx":         0,
		"roce_cm_mads_total,direction=rx":          2,
		"roce_cm_drops_total,reason=pending_limit": 1,
		"roce_cm_pending_connections":              1,
		"roce_cm_rejects_total,direction=tx":       0,
	})
	per := gather(t, NewCMCollector(Options{PerAddress: true}, CMSource{Addr: a.Addr(), GSI: qp1, CM: mgr}, CMSource{Addr: b.Addr()}))
	if per["roce_cm_pending_connections,address=10.0.0.1"] != 1 || per["roce_gsi_drops_total,address=10.0.0.2,reason=malformed"] != 0 {
		t.Errorf("per address: %v", per)
	}
}
