package cm

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fastConfig makes CM timers short enough for real-time tests: REQ/REP/DREQ
// are retransmitted every 4.096µs·2^12 + 2·4.096µs·2^8 ≈ 19 ms.
func fastConfig(events chan<- ConnEvent) ManagerConfig {
	return ManagerConfig{CMResponseTimeout: 12, PacketLifetime: 8, MaxCMRetries: 5, Events: events,
		Machine: Config{TimeWait: 50 * time.Millisecond}}
}

// dropFirst loses the first MAD of each listed attribute.
func dropFirst(attrs ...AttrID) func([]byte) bool {
	var mu sync.Mutex
	seen := map[AttrID]bool{}
	return func(mad []byte) bool {
		mu.Lock()
		defer mu.Unlock()
		a := attrOf(mad)
		for _, x := range attrs {
			if a == x && !seen[a] {
				seen[a] = true
				return true
			}
		}
		return false
	}
}

func checkGoroutines(t *testing.T) {
	n := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second) // a loaded host may run the exits late
		for runtime.NumGoroutine() > n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if g := runtime.NumGoroutine(); g > n {
			t.Errorf("goroutine leak: %d before, %d after", n, g)
		}
	})
}

func TestDialAcceptDisconnect(t *testing.T) {
	tests := []struct {
		name               string
		dropA, dropB       []AttrID // lost once on the way out of A (client) / B (server)
		serverDisconnects  bool
		wantRetransmitsAny bool
	}{
		{name: "clean"},
		{name: "REQ and RTU lost", dropA: []AttrID{AttrREQ, AttrRTU}, wantRetransmitsAny: true},
		{name: "REP and DREP lost", dropB: []AttrID{AttrREP, AttrDREP}, wantRetransmitsAny: true},
		{name: "server disconnects, DREQ lost", dropB: []AttrID{AttrDREQ}, serverDisconnects: true, wantRetransmitsAny: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ca, cb := Pipe(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
			ca.SetDrop(dropFirst(tt.dropA...))
			cb.SetDrop(dropFirst(tt.dropB...))
			evA, evB := make(chan ConnEvent, 32), make(chan ConnEvent, 32)
			client, server := NewManager(ca, fastConfig(evA)), NewManager(cb, fastConfig(evB))
			defer client.Close()
			defer server.Close()
			l, err := server.Listen(netip.MustParseAddrPort("0.0.0.0:7174"), 0)
			if err != nil {
				t.Fatal(err)
			}
			var sconn *Conn
			var serr error
			var sqp QPParams
			done := make(chan struct{})
			go func() {
				defer close(done)
				r, err := l.GetRequest(ctx)
				if err != nil {
					serr = err
					return
				}
				if string(r.PrivateData[:5]) != "hello" || r.Remote.Port() != 4242 || r.Local.Port() != 7174 {
					serr = errors.New("bad request: " + r.Remote.String())
					return
				}
				sconn, serr = r.Accept(ctx, ConnParam{QPN: 0x22, StartingPSN: 0xabcdef, RetryCount: 7, RNRRetryCount: 6,
					Ready: func(q QPParams) error { sqp = q; return nil }})
			}()
			var cqp QPParams
			c, err := client.Dial(ctx, netip.MustParseAddrPort("0.0.0.0:4242"), netip.MustParseAddrPort("127.0.0.2:7174"),
				ConnParam{QPN: 0x11, StartingPSN: 0x123456, RetryCount: 7, RNRRetryCount: 7, PrivateData: []byte("hello"),
					Ready: func(q QPParams) error { cqp = q; return nil }})
			if err != nil {
				t.Fatal(err)
			}
			<-done
			if serr != nil {
				t.Fatal(serr)
			}
			// The two sides' QP attributes mirror each other; each side's
			// advertised PSN is its own rq_psn (Linux CM semantics).
			if cqp.RemoteQPN != 0x22 || sqp.RemoteQPN != 0x11 || cqp.SQPSN != sqp.RQPSN || sqp.SQPSN != cqp.RQPSN ||
				cqp.RQPSN != 0x123456 || sqp.RQPSN != 0xabcdef || cqp.UDPSourcePort != sqp.UDPSourcePort ||
				cqp.FlowLabel != FlowLabel(4242, 7174) || cqp.PathMTU != 3 || sqp.Timeout != 9 ||
				cqp.RNRRetry != 6 || sqp.RNRRetry != 7 || cqp.MaxRdAtomic != 1 || sqp.MaxDestRdAtomic != 1 ||
				cqp.RemoteAddr != netip.MustParseAddr("127.0.0.2") || sqp.RemoteAddr != netip.MustParseAddr("127.0.0.1") {
				t.Errorf("QP params\nclient %+v\nserver %+v", cqp, sqp)
			}
			if c.LocalAddr.String() != "127.0.0.1:4242" || sconn.RemoteAddr.String() != "127.0.0.1:4242" {
				t.Errorf("addresses %v %v", c.LocalAddr, sconn.RemoteAddr)
			}
			closer, other := c, sconn
			if tt.serverDisconnects {
				closer, other = sconn, c
			}
			if err := closer.Disconnect(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-other.Done():
			case <-ctx.Done():
				t.Fatal("peer never saw the disconnect")
			}
			if other.Err() != nil || closer.Err() != nil {
				t.Errorf("errors after orderly disconnect: %v %v", other.Err(), closer.Err())
			}
			sa, sb := client.Stats(), server.Stats()
			if tt.wantRetransmitsAny != (sa.Retransmits+sb.Retransmits > 0) {
				t.Errorf("retransmits client %d server %d", sa.Retransmits, sb.Retransmits)
			}
			if sa.Malformed+sb.Malformed != 0 {
				t.Errorf("malformed MADs")
			}
			wantSeq(t, "client", evA, Established, Disconnected)
			wantSeq(t, "server", evB, ConnectRequest, Established, Disconnected)
		})
	}
}

// TestCloseDisconnects: closing a Manager sends a DREQ for each established
// connection, as the kernel does for a process that exits, so the peer sees
// the disconnect at once.
func TestCloseDisconnects(t *testing.T) {
	checkGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, cb := Pipe(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	client, server := NewManager(ca, fastConfig(nil)), NewManager(cb, fastConfig(nil))
	defer server.Close()
	l, err := server.Listen(netip.MustParseAddrPort("0.0.0.0:7174"), 0)
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan *Conn, 1)
	go func() {
		r, err := l.GetRequest(ctx)
		if err != nil {
			accepted <- nil
			return
		}
		c, _ := r.Accept(ctx, ConnParam{QPN: 0x22, StartingPSN: 1})
		accepted <- c
	}()
	if _, err := client.Dial(ctx, netip.MustParseAddrPort("0.0.0.0:4242"), netip.MustParseAddrPort("127.0.0.2:7174"),
		ConnParam{QPN: 0x11, StartingPSN: 2}); err != nil {
		t.Fatal(err)
	}
	sconn := <-accepted
	if sconn == nil {
		t.Fatal("no connection accepted")
	}
	client.Close()
	select {
	case <-sconn.Done():
	case <-ctx.Done():
		t.Fatal("the server never saw the closed client disconnect")
	}
}

// wantSeq checks that want appears in order in the events seen so far
// (ConnectResponse and others may interleave).
func wantSeq(t *testing.T, who string, ch chan ConnEvent, want ...ConnEventType) {
	t.Helper()
	var got []ConnEventType
	deadline := time.After(10 * time.Second) // events of a pipe's exchange, late only on a loaded host
	i := 0
	for i < len(want) {
		select {
		case ev := <-ch:
			got = append(got, ev.Type)
			if ev.Type == want[i] {
				i++
			}
		case <-deadline:
			t.Errorf("%s events %v, want in order %v", who, got, want)
			return
		}
	}
}

func TestDialDeadPeer(t *testing.T) {
	checkGoroutines(t)
	ca, _ := Pipe(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	cfg := fastConfig(nil)
	cfg.MaxCMRetries = 2
	client := NewManager(ca, cfg)
	defer client.Close()
	start := time.Now()
	_, err := client.Dial(context.Background(), netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.9:7174"), ConnParam{QPN: 0x11})
	el := time.Since(start)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, syscall.ETIMEDOUT) {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(err.Error(), "127.0.0.9:7174") || !strings.Contains(err.Error(), "did not answer") {
		t.Errorf("unclear error: %v", err)
	}
	// 3 REQs (MaxCMRetries 2), each waited a CM response timeout and two
	// packet lifetimes (≈ 19 ms); the margin above is a loaded host's timer
	// and scheduling delay, over 30 times the wait itself.
	want := 3 * (TimeoutDuration(cfg.CMResponseTimeout) + 2*TimeoutDuration(cfg.PacketLifetime))
	if el < want || el > want+2*time.Second {
		t.Errorf("gave up after %v, want %v (+ at most 2 s)", el, want)
	}
	if s := client.Stats(); s.TxMADs != 3 || s.Timeouts != 1 {
		t.Errorf("stats %+v", s)
	}
	// A context deadline also reads as a timeout and withdraws the REQ.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	_, err = client.Dial(ctx, netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.9:7174"), ConnParam{})
	if !errors.Is(err, syscall.ETIMEDOUT) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ctx err %v", err)
	}
}

func TestDialRejected(t *testing.T) {
	checkGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, cb := Pipe(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	client, server := NewManager(ca, fastConfig(nil)), NewManager(cb, fastConfig(nil))
	defer client.Close()
	defer server.Close()
	// Nobody listens on 7175.
	_, err := client.Dial(ctx, netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.2:7175"), ConnParam{})
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != RejInvalidServiceID || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err %v", err)
	}
	// A listener on another address of the port does not match either.
	l, _ := server.Listen(netip.MustParseAddrPort("127.0.0.3:7174"), 0)
	_, err = client.Dial(ctx, netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.2:7174"), ConnParam{})
	if !errors.As(err, &rej) || rej.Reason != RejInvalidServiceID {
		t.Fatalf("wrong address: %v", err)
	}
	l.Close()
	// The application rejects with private data.
	l, _ = server.Listen(netip.MustParseAddrPort("127.0.0.2:7174"), 0)
	go func() {
		if r, err := l.GetRequest(ctx); err == nil {
			r.Reject([]byte("go away"))
		}
	}()
	_, err = client.Dial(ctx, netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.2:7174"), ConnParam{})
	if !errors.As(err, &rej) || rej.Reason != RejConsumerDefined || string(rej.PrivateData[:7]) != "go away" {
		t.Fatalf("consumer reject: %v", err)
	}
	// Ready failing on the client rejects the REP.
	served := make(chan struct{})
	go func() {
		defer close(served)
		if r, err := l.GetRequest(ctx); err == nil {
			_, err := r.Accept(ctx, ConnParam{})
			if !errors.As(err, &rej) {
				t.Errorf("server saw %v", err)
			}
		}
	}()
	_, err = client.Dial(ctx, netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.2:7174"),
		ConnParam{Ready: func(QPParams) error { return syscall.EINVAL }})
	if !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("ready error: %v", err)
	}
	if _, err := server.Listen(netip.MustParseAddrPort("127.0.0.2:7174"), 0); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("double listen: %v", err)
	}
	<-served // the server goroutine's assertions are done (ctx bounds its wait)
}

func TestResolveUD(t *testing.T) {
	checkGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, cb := Pipe(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	// The client resends SIDR_REQ every 16.8 ms (code 12); the server's
	// timewait must outlast a resend that a loaded host delays (50 ms did not).
	sc := fastConfig(nil)
	sc.Machine.TimeWait = 100 * TimeoutDuration(sc.CMResponseTimeout)
	client, server := NewManager(ca, fastConfig(nil)), NewManager(cb, sc)
	defer client.Close()
	defer server.Close()
	// Nothing listens: status "unsupported".
	_, err := client.ResolveUD(ctx, netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.2:7174"), nil)
	var se *SIDRError
	if !errors.As(err, &se) || se.Status != SIDRUnsupported || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("no listener: %v", err)
	}
	l, err := server.ListenUD(netip.MustParseAddrPort("127.0.0.2:7174"), 0)
	if err != nil {
		t.Fatal(err)
	}
	cb.SetDrop(dropFirst(AttrSIDRREP)) // the first answer is lost: the request is resent
	requests := make(chan *UDRequest, 4)
	go func() {
		for {
			r, err := l.GetRequest(ctx)
			if err != nil {
				return
			}
			requests <- r
			if string(r.PrivateData[:2]) == "no" {
				r.Reject(nil)
			} else {
				r.Accept(0x33, UDPQKey, []byte("ok"))
			}
		}
	}()
	svc, err := client.ResolveUD(ctx, netip.MustParseAddrPort("127.0.0.1:5555"), netip.MustParseAddrPort("127.0.0.2:7174"), []byte("hi"))
	if err != nil || svc.QPN != 0x33 || svc.QKey != UDPQKey || string(svc.PrivateData[:2]) != "ok" {
		t.Fatalf("resolve: %+v %v", svc, err)
	}
	r := <-requests
	if r.Remote.String() != "127.0.0.1:5555" || r.Local.String() != "127.0.0.2:7174" {
		t.Errorf("request %v -> %v", r.Remote, r.Local)
	}
	if len(requests) != 0 {
		t.Error("the retransmitted SIDR_REQ was re-executed")
	}
	if s := server.Stats(); s.Duplicates != 1 {
		t.Errorf("server stats %+v", s)
	}
	_, err = client.ResolveUD(ctx, netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.2:7174"), []byte("no"))
	if !errors.As(err, &se) || se.Status != SIDRReject {
		t.Errorf("rejected: %v", err)
	}
	// A dead peer: retries run out.
	_, err = client.ResolveUD(ctx, netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.9:7174"), nil)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("dead peer: %v", err)
	}
}

// TestDialIPv6 connects over IPv6 addresses: IPv6 rdma_cm header, GIDs as
// the addresses themselves.
func TestDialIPv6(t *testing.T) {
	checkGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	ca, cb := Pipe(a, b)
	events := make(chan ConnEvent, 1) // too small on purpose: drops are counted
	client, server := NewManager(ca, fastConfig(events)), NewManager(cb, fastConfig(nil))
	defer client.Close()
	defer server.Close()
	l, _ := server.Listen(netip.AddrPortFrom(netip.IPv6Unspecified(), 7174), 0)
	got := make(chan *ConnRequest, 1)
	go func() {
		if r, err := l.GetRequest(ctx); err == nil {
			got <- r
			r.Accept(ctx, ConnParam{QPN: 0x22})
		}
	}()
	c, err := client.Dial(ctx, netip.AddrPort{}, netip.AddrPortFrom(b, 7174), ConnParam{QPN: 0x11})
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Remote.Addr() != a || r.Local.Addr() != b || r.REQ().Primary.LocalGID != GIDFromAddr(a) || c.QP.RemoteAddr != b {
		t.Errorf("request %v -> %v, REQ GID %v, conn remote %v", r.Remote, r.Local, r.REQ().Primary.LocalGID, c.QP.RemoteAddr)
	}
	if _, _, err := ParseCMA(r.REQ().PrivateData); err != nil || r.REQ().PrivateData[1] != 0x60 {
		t.Errorf("CMA header IP version byte %#x (%v)", r.REQ().PrivateData[1], err)
	}
	c.Disconnect(ctx)
	if client.DroppedEvents() == 0 {
		t.Error("no event drop counted with a 1-slot channel")
	}
}

// TestPathMTUFromREQ: the passive side takes the REQ's path MTU even above its own
// (cm.c's cm_init_qp_rtr_attr), so both QPs agree; the active side has no other.
func TestPathMTUFromREQ(t *testing.T) {
	for _, tt := range []struct{ client, server, want uint8 }{{5, 3, 5}, {3, 5, 3}, {4, 4, 4}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ca, cb := Pipe(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
		cc, sc := fastConfig(nil), fastConfig(nil)
		cc.PathMTU, sc.PathMTU = tt.client, tt.server
		client, server := NewManager(ca, cc), NewManager(cb, sc)
		l, err := server.Listen(netip.MustParseAddrPort("0.0.0.0:7174"), 0)
		if err != nil {
			t.Fatal(err)
		}
		sqp := make(chan QPParams, 1)
		go func() {
			if r, err := l.GetRequest(ctx); err == nil {
				r.Accept(ctx, ConnParam{QPN: 0x22, Ready: func(q QPParams) error { sqp <- q; return nil }})
			}
		}()
		var cqp QPParams
		if _, err := client.Dial(ctx, netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.2:7174"),
			ConnParam{QPN: 0x11, Ready: func(q QPParams) error { cqp = q; return nil }}); err != nil {
			t.Fatal(err)
		}
		if s := <-sqp; cqp.PathMTU != tt.want || s.PathMTU != tt.want {
			t.Errorf("client MTU %d, server %d: QPs at %d and %d, want both %d", tt.client, tt.server, cqp.PathMTU, s.PathMTU, tt.want)
		}
		client.Close()
		server.Close()
		cancel()
	}
}

// TestListenBacklog: Listen takes rdma_listen's backlog as ucma applies it;
// a REQ beyond it is dropped unanswered (no REJ: ucma's event handler fails
// with -ENOMEM and cm.c does not reject), and the peer's retransmission gets
// in once GetRequest has made room.
func TestListenBacklog(t *testing.T) {
	for _, c := range []struct{ in, want int }{{0, MaxBacklog}, {-1, MaxBacklog}, {1, 1}, {5, 5}, {MaxBacklog, MaxBacklog}, {MaxBacklog + 1, MaxBacklog}} {
		if got := backlogOf(c.in); got != c.want {
			t.Errorf("backlog %d: %d, want %d", c.in, got, c.want)
		}
	}
	checkGoroutines(t)
	const backlog, dials = 2, 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, cb := Pipe(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	evB := make(chan ConnEvent, 16)
	client, server := NewManager(ca, fastConfig(nil)), NewManager(cb, fastConfig(evB))
	defer client.Close()
	defer server.Close()
	l, err := server.Listen(netip.MustParseAddrPort("127.0.0.2:7174"), backlog)
	if err != nil {
		t.Fatal(err)
	}
	if cap(l.reqs) != backlog {
		t.Fatalf("backlog %d, want %d", cap(l.reqs), backlog)
	}
	errs := make(chan error, dials)
	for i := range dials {
		go func() {
			c, err := client.Dial(ctx, netip.AddrPortFrom(netip.Addr{}, uint16(4000+i)), netip.MustParseAddrPort("127.0.0.2:7174"), ConnParam{QPN: 0x11})
			if err == nil {
				err = c.Disconnect(ctx)
			}
			errs <- err
		}()
	}
	for server.Stats().Discarded == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("no REQ dropped at a backlog of %d: %+v", backlog, server.Stats())
		case <-time.After(time.Millisecond):
		}
	}
	for range dials {
		r, err := l.GetRequest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go r.Accept(ctx, ConnParam{QPN: 0x22})
	}
	for range dials {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s := server.Stats(); s.RejSent != 0 || s.Discarded == 0 || s.REPs != dials {
		t.Errorf("server sent %d REJs and %d REPs (want 0 and %d), discarded %d REQs", s.RejSent, s.REPs, dials, s.Discarded)
	}
}

// TestListenGrace: a REQ that reaches a port whose listener just closed waits
// for a listener that opens on the port again (perftest -R's second listen)
// instead of being refused; while a connection the closed listener accepted
// is up the grace outlasts ListenGrace (perftest's exchange runs over one);
// with none, the request is refused as on a port nobody listens on once
// ListenGrace passes.
func TestListenGrace(t *testing.T) {
	checkGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca, cb := Pipe(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	// REQ retries (≈1 s each) outlast the grace, so the REJ is what ends a dial.
	slow := ManagerConfig{CMResponseTimeout: 18, PacketLifetime: 8, MaxCMRetries: 5, Machine: Config{TimeWait: 50 * time.Millisecond}}
	client, server := NewManager(ca, slow), NewManager(cb, slow)
	defer client.Close()
	defer server.Close()
	to := netip.MustParseAddrPort("127.0.0.2:7174")
	held := func(n uint64) {
		t.Helper()
		for server.Stats().RxMADs < n {
			select {
			case <-ctx.Done():
				t.Fatalf("the server never received REQ %d", n)
			case <-time.After(time.Millisecond):
			}
		}
	}
	// relisten opens the port again and serves the request held for it.
	var conns []*Conn
	relisten := func(dialed <-chan error, qpn uint32) *Listener {
		t.Helper()
		l, err := server.Listen(to, 0)
		if err != nil {
			t.Fatal(err)
		}
		r, err := l.GetRequest(ctx)
		if err != nil {
			t.Fatalf("the new listener did not get the held request: %v", err)
		}
		c, err := r.Accept(ctx, ConnParam{QPN: qpn})
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
		if err := <-dialed; err != nil {
			t.Fatalf("dial through a re-listened port: %v", err)
		}
		conns = append(conns, c)
		return l
	}
	dial := func(qpn uint32) <-chan error {
		dialed := make(chan error, 1)
		go func() { _, err := client.Dial(ctx, netip.AddrPort{}, to, ConnParam{QPN: qpn}); dialed <- err }()
		return dialed
	}

	l, err := server.Listen(to, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	dialed := dial(0x11)
	held(1)
	l = relisten(dialed, 0x12)

	// The connection it accepted is up: the port stays in grace past ListenGrace.
	l.Close()
	closed := time.Now()
	rx := server.Stats().RxMADs
	dialed = dial(0x13)
	held(rx + 1)
	sid := ServiceID(PortSpaceTCP, to.Port())
	for inGrace := true; inGrace && time.Since(closed) < ListenGrace+ListenGrace/4; {
		select {
		case <-ctx.Done():
			t.Fatal("the grace never passed ListenGrace")
		case <-time.After(10 * time.Millisecond):
		}
		server.mu.Lock()
		inGrace = server.grace[sid] != nil
		server.mu.Unlock()
		if !inGrace {
			t.Fatalf("the grace ended after %v with an accepted connection up", time.Since(closed))
		}
	}
	l = relisten(dialed, 0x14)

	// No connection, no listener: the request is refused after the grace.
	for _, c := range conns {
		if err := c.Disconnect(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	l.Close()
	rx = server.Stats().RxMADs
	_, err = client.Dial(ctx, netip.AddrPort{}, to, ConnParam{QPN: 0x15})
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != RejInvalidServiceID || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("after the grace: %v", err)
	}
	if el := time.Since(start); el < ListenGrace || el >= ListenGraceMax {
		t.Errorf("refused %v after the listener closed, want the grace of a port with no connection (%v)", el, ListenGrace)
	}
	if server.Stats().RxMADs <= rx {
		t.Errorf("the server never saw the REQ")
	}
}

// claimer is a MADConn shared through roced: it records the service claims
// a Manager makes and gives back.
type claimer struct {
	*PipeConn
	mu       sync.Mutex
	claims   int
	released chan uint64
}

func (c *claimer) ClaimService(sid uint64, ud bool) error {
	c.mu.Lock()
	c.claims++
	c.mu.Unlock()
	return nil
}

func (c *claimer) ReleaseService(sid uint64, ud bool) { c.released <- sid }

// TestListenGraceKeepsClaim: on a device attached to roced, a listener
// that closes and opens again within ListenGrace keeps the one claim roced
// holds for the port (no second claim, no release in between), and the
// claim is given back when the grace ends with no listener.
func TestListenGraceKeepsClaim(t *testing.T) {
	checkGoroutines(t)
	_, cb := Pipe(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	c := &claimer{PipeConn: cb, released: make(chan uint64, 4)}
	server := NewManager(c, ManagerConfig{})
	defer server.Close()
	to := netip.MustParseAddrPort("127.0.0.2:7174")
	l, err := server.Listen(to, 0)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if l, err = server.Listen(to, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case sid := <-c.released:
		t.Fatalf("service %#x released within the grace", sid)
	default:
	}
	l.Close()
	// Bound: the grace plus a margin for a loaded host.
	select {
	case sid := <-c.released:
		if want := ServiceID(PortSpaceTCP, to.Port()); sid != want {
			t.Errorf("released %#x, want %#x", sid, want)
		}
	case <-time.After(ListenGrace + 10*time.Second):
		t.Fatal("the claim was not given back after the grace")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claims != 1 {
		t.Errorf("%d claims, want 1", c.claims)
	}
}
