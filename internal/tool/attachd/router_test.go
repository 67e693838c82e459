package attachd

import (
	"errors"
	"net/netip"
	"sync"
	"syscall"
	"testing"

	"github.com/goroce/goroce/cm"
)

// sink records what the router sends from QP1.
type sink struct {
	mu   sync.Mutex
	sent int
}

func (s *sink) WriteMAD(mad []byte, to netip.Addr) error {
	s.mu.Lock()
	s.sent++
	s.mu.Unlock()
	return nil
}

// TestSIDRREPOwnService: a process may answer a SIDR_REQ for a UD service
// it listens on, and no other (the SIDR_REP's service ID is read where the
// message has it, after the QPN).
func TestSIDRREPOwnService(t *testing.T) {
	var w sink
	r := NewRouter(&w, netip.MustParseAddr("127.0.0.1"), 16)
	p, err := r.Add(3, func([]byte, netip.Addr) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	const svc, other = 0x1111c06, 0x1111c07
	if err := p.Claim(svc, true); err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddr("127.0.0.2")
	for _, tt := range []struct {
		sid  uint64
		want error
	}{
		{svc, nil},
		{other, syscall.EPERM},
	} {
		mad, err := cm.Marshal(7, &cm.SIDRREP{RequestID: 9, QPN: 0x30001, ServiceID: tt.sid, QKey: cm.UDPQKey})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Send(mad, peer); !errors.Is(err, tt.want) && err != tt.want {
			t.Errorf("SIDR_REP for service %#x: %v, want %v", tt.sid, err, tt.want)
		}
	}
	if w.sent != 1 {
		t.Errorf("%d MADs left QP1, want 1", w.sent)
	}
}
