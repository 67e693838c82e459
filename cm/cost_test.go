package cm

import (
	"context"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"testing"
)

// feedConn is a MADConn that hands the Manager a fixed list of MADs once
// start is closed, then blocks; idle is closed when the Manager asks for the
// one after the last, which it does only once it has handled the last. What
// the Manager sends is counted and dropped.
type feedConn struct {
	addr  netip.Addr
	mads  [][]byte
	from  []netip.Addr
	start chan struct{}
	idle  chan struct{}
	done  chan struct{}
	once  sync.Once

	mu    sync.Mutex
	sent  map[AttrID]int
	wrote chan struct{} // a token after each MAD sent
}

func newFeedConn(addr netip.Addr) *feedConn {
	return &feedConn{addr: addr, start: make(chan struct{}), idle: make(chan struct{}), done: make(chan struct{}), sent: map[AttrID]int{},
		wrote: make(chan struct{}, 1)}
}

func (f *feedConn) ReadMAD(b []byte) (int, netip.Addr, error) {
	select {
	case <-f.start:
	case <-f.done:
		return 0, netip.Addr{}, net.ErrClosed
	}
	if len(f.mads) > 0 {
		n := copy(b, f.mads[0])
		from := f.from[0]
		f.mads, f.from = f.mads[1:], f.from[1:]
		return n, from, nil
	}
	close(f.idle)
	<-f.done
	return 0, netip.Addr{}, net.ErrClosed
}

func (f *feedConn) WriteMAD(mad []byte, to netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent[attrOf(mad)]++
	select {
	case f.wrote <- struct{}{}:
	default:
	}
	return nil
}

func (f *feedConn) LocalAddr() netip.Addr { return f.addr }
func (f *feedConn) Close() error          { f.once.Do(func() { close(f.done) }); return nil }

// spoofedREQs are n rdma_cm REQs for port 7174 at dst, each from its own
// address in 198.18.0.0/15 and never to be followed by an RTU.
func spoofedREQs(t *testing.T, f *feedConn, dst netip.Addr, n int) {
	t.Helper()
	for i := range n {
		src := netip.AddrFrom4([4]byte{198, 18 + byte(i>>16&1), byte(i >> 8), byte(i)})
		priv, err := AppendCMA(nil, CMAHeader{SrcPort: 40000, Src: src, Dst: dst}, nil)
		if err != nil {
			t.Fatal(err)
		}
		r := testREQ()
		r.LocalCommID, r.ServiceID, r.PrivateData = uint32(i+1), ServiceID(PortSpaceTCP, 7174), priv
		b, err := Marshal(uint64(i+1), &r)
		if err != nil {
			t.Fatal(err)
		}
		f.mads, f.from = append(f.mads, b), append(f.from, src)
	}
}

// heapAlloc is the live heap after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestPendingCost measures what a pending passive connection holds in the
// Manager (the Go heap; an accepting application's own goroutine and QP come on
// top), flooded with 5,000 REQs from as many addresses, at the defaults: with a
// listener that takes no request (its backlog holds MaxBacklog), and with one
// that accepts every request without a QP (each waits for its RTU with a REP
// sent); DefaultMaxPending of them either way, the rest refused unanswered or,
// accepted, evicted.
// The defaults are affordable only if a pending connection is cheap: at most
// maxPerPending bytes each.
func TestPendingCost(t *testing.T) {
	const flood, maxPerPending = 5000, 4096
	dst := netip.MustParseAddr("10.0.0.2")
	tests := []struct {
		name                    string
		accept                  bool
		pending, out, discarded int // out: refused or evicted
	}{
		{"backlog", false, MaxBacklog, flood - MaxBacklog, 0},
		{"accepted", true, DefaultMaxPending, flood - DefaultMaxPending, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFeedConn(dst)
			spoofedREQs(t, f, dst, flood)
			before := heapAlloc()
			mg := NewManager(f, ManagerConfig{})
			defer mg.Close()
			l, err := mg.Listen(netip.AddrPortFrom(dst, 7174), 0)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			if tt.accept {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						r, err := l.GetRequest(ctx)
						if err != nil {
							return
						}
						wg.Add(1)
						go func() {
							defer wg.Done()
							r.Accept(ctx, ConnParam{QPN: 0x100})
						}()
					}
				}()
			}
			close(f.start)
			<-f.idle
			// Accepted: wait until every pending connection has its REP.
			s := mg.Stats()
			for tt.accept && s.REPs-s.Retransmits-s.Evicted < uint64(tt.pending) {
				<-f.wrote
				s = mg.Stats()
			}
			// Signed: garbage of an earlier test freed meanwhile can make the
			// difference negative (seen once under load), which bounds nothing
			// but must not wrap into a failure.
			held := max(int64(heapAlloc())-int64(before), 0)
			per := held / int64(tt.pending)
			t.Logf("%d REQs: %d pending, %d refused, %d evicted, %d discarded, %d REPs; heap %.1f MB, %d B per pending connection",
				flood, mg.Pending(), s.Refused, s.Evicted, s.Discarded, s.REPs, float64(held)/1e6, per)
			if mg.Pending() != tt.pending || s.Refused+s.Evicted != uint64(tt.out) || s.Discarded != uint64(tt.discarded) {
				t.Errorf("pending %d, refused %d + evicted %d, discarded %d; want %d, %d, %d",
					mg.Pending(), s.Refused, s.Evicted, s.Discarded, tt.pending, tt.out, tt.discarded)
			}
			if per > maxPerPending {
				t.Errorf("%d B per pending connection, want at most %d", per, maxPerPending)
			}
		})
	}
}
