package roce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/goroce/goroce/internal/testsupport/parked"
)

func TestErrorFormatAndUnwrap(t *testing.T) {
	e := newErr("ibv_modify_qp", "qp 0x11", syscall.EINVAL, "RTR requires DestQPN")
	if got, want := e.Error(), "roce: ibv_modify_qp qp 0x11: invalid argument: RTR requires DestQPN"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, syscall.EINVAL) || errors.Is(e, syscall.ENOMEM) {
		t.Fatal("errors.Is does not follow the errno")
	}
	var re *Error
	if !errors.As(fmt.Errorf("wrapped: %w", e), &re) || re.Op != "ibv_modify_qp" || re.Index != -1 {
		t.Fatalf("errors.As gave %+v", re)
	}
	idx := newErr("ibv_post_send", "qp 0x12", syscall.ENOMEM, "send queue full")
	idx.Index = 3
	if got, want := idx.Error(), "roce: ibv_post_send qp 0x12 wr[3]: cannot allocate memory: send queue full"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	c := closedErr("ibv_poll_cq", "cq 0x1")
	wantClosed(t, c)
	if !errors.Is(c, syscall.ENODEV) {
		t.Fatal("closed error is not ENODEV")
	}
}

func TestGIDTableMirrorsRxe(t *testing.T) {
	tests := []struct {
		addr    string
		entries int
		roce    int
		gid     string
	}{
		{"127.0.0.1", 2, 1, "::ffff:127.0.0.1"},
		{"198.18.0.11", 2, 1, "::ffff:198.18.0.11"},
		{"2001:db8::1", 2, 1, "2001:db8::1"},
		{"fe80::1", 1, 0, "fe80::1"},
	}
	for _, tc := range tests {
		t.Run(tc.addr, func(t *testing.T) {
			a := netip.MustParseAddr(tc.addr)
			tbl, idx := buildGIDTable(a, NodeGUID(a))
			if len(tbl) != tc.entries || idx != tc.roce {
				t.Fatalf("table %v index %d, want %d entries and index %d", tbl, idx, tc.entries, tc.roce)
			}
			if got := tbl[idx].String(); got != tc.gid {
				t.Fatalf("RoCEv2 GID %s, want %s", got, tc.gid)
			}
			if tbl[idx].Addr() != a {
				t.Fatalf("GID %v does not map back to %v", tbl[idx], a)
			}
			if tc.entries == 2 && (tbl[0][0] != 0xfe || tbl[0][1] != 0x80) {
				t.Fatalf("index 0 %v is not link-local", tbl[0])
			}
		})
	}
}

func TestNodeGUIDIsStablePerAddress(t *testing.T) {
	if NodeGUID(addrA) != NodeGUID(addrA) || NodeGUID(addrA) == NodeGUID(addrB) {
		t.Fatal("node GUID must be a function of the address")
	}
	if g := NodeGUID(addrA); g>>56&0x03 != 0x02 {
		t.Fatalf("node GUID %#x is not locally administered unicast", g)
	}
}

func TestDeviceQuery(t *testing.T) {
	d := pipeDevice(t)
	a, err := d.Query()
	noErr(t, err)
	if a.DeviceCapFlags&(DeviceMemWindow|DeviceMemWindow2B) != DeviceMemWindow|DeviceMemWindow2B || a.MaxMW != 1<<19-1 {
		t.Errorf("memory windows: caps %#x max_mw %d, want MEM_WINDOW, TYPE_2B and rxe's 524287", a.DeviceCapFlags, a.MaxMW)
	}
	if a.DeviceCapFlags&DeviceSRQResize == 0 {
		t.Error("SRQ_RESIZE not advertised")
	}
	// rxe 6.2+: FLUSH_GLOBAL, FLUSH_PERSISTENT and ATOMIC_WRITE in device_cap_flags_ex,
	// whose low 32 bits are device_cap_flags.
	if ex := DeviceFlushGlobal | DeviceFlushPersistent | DeviceAtomicWrite; a.DeviceCapFlagsEx&ex != ex ||
		uint32(a.DeviceCapFlagsEx) != uint32(a.DeviceCapFlags) {
		t.Errorf("device_cap_flags_ex %#x, want %#x and device_cap_flags %#x", a.DeviceCapFlagsEx, ex, a.DeviceCapFlags)
	}
	for name, v := range map[string]int{"max_qp": a.MaxQP, "max_qp_wr": a.MaxQPWR, "max_sge": a.MaxSGE,
		"max_cqe": a.MaxCQE, "max_srq": a.MaxSRQ, "max_srq_wr": a.MaxSRQWR, "max_srq_sge": a.MaxSRQSGE,
		"max_qp_rd_atom": a.MaxQPRdAtom, "max_qp_init_rd_atom": a.MaxQPInitRdAtom} {
		if v <= 0 {
			t.Errorf("%s = %d", name, v)
		}
	}
	if a.MaxMRSize == 0 || a.AtomicCap != AtomicHCA || a.NodeGUID == 0 || a.VendorID != 0xffffff || a.FWVer == "" {
		t.Errorf("attributes %+v", a)
	}
	p, err := d.QueryPort(1)
	noErr(t, err)
	if p.State != PortActive || p.MaxMTU != MTU4096 || p.ActiveMTU < MTU256 || p.GIDTblLen != 2 || p.PKeyTblLen != 1 {
		t.Errorf("port %+v", p)
	}
	_, err = d.QueryPort(2)
	wantErrno(t, err, syscall.EINVAL)
	g, err := d.QueryGID(GIDIndexRoCEv2)
	noErr(t, err)
	if g.Addr() != addrA || d.GID() != g || d.GIDIndex() != 1 {
		t.Errorf("GID[1] %v", g)
	}
	_, err = d.QueryGID(2)
	wantErrno(t, err, syscall.EINVAL)
	_, err = d.QueryGID(-1)
	wantErrno(t, err, syscall.EINVAL)
	k, err := d.QueryPKey(0)
	if err != nil || k != 0xffff {
		t.Errorf("pkey %#x %v", k, err)
	}
	_, err = d.QueryPKey(1)
	wantErrno(t, err, syscall.EINVAL)
}

func TestWithLimitsNoSRQResize(t *testing.T) {
	d := pipeDevice(t, WithLimits(Limits{NoSRQResize: true, MaxCQE: 100}))
	a := must[DeviceAttr](t)(d.Query())
	if a.DeviceCapFlags&DeviceSRQResize != 0 || a.MaxCQE != 100 {
		t.Fatalf("limits not applied: %+v", a)
	}
	pd := must[*PD](t)(d.AllocPD())
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 4, MaxSGE: 1}}))
	err := s.Modify(&SRQAttr{MaxWR: 8}, SRQMaxWR)
	wantErrno(t, err, syscall.ENOSYS)
	_, err = d.CreateCQ(101)
	wantErrno(t, err, syscall.EINVAL)
}

func TestPortActiveEventAtOpen(t *testing.T) {
	d := pipeDevice(t)
	select {
	case ev := <-d.Events():
		if ev.Type != EventPortActive || ev.Port != 1 {
			t.Fatalf("first event %v, want PORT_ACTIVE port 1", ev)
		}
	case <-time.After(time.Second):
		t.Fatal("no PORT_ACTIVE event")
	}
}

func TestRegMRAccessRules(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	buf := make([]byte, 64)
	const all = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
	tests := []struct {
		name   string
		buf    []byte
		access Access
		want   syscall.Errno
		keep   Access // what Access reports, when it differs from access
	}{
		{"no access is local read only", buf, 0, 0, 0},
		{"local write", buf, AccessLocalWrite, 0, 0},
		{"remote read alone", buf, AccessRemoteRead, 0, 0},
		{"remote write requires local write", buf, AccessRemoteWrite, syscall.EINVAL, 0},
		{"remote atomic requires local write", buf, AccessRemoteAtomic, syscall.EINVAL, 0},
		{"remote write with local write", buf, AccessLocalWrite | AccessRemoteWrite, 0, 0},
		{"remote atomic with local write", buf, AccessLocalWrite | AccessRemoteAtomic, 0, 0},
		{"everything", buf, all, 0, 0},
		{"mw bind", buf, AccessLocalWrite | AccessMWBind, 0, 0},
		{"flush global", buf, AccessRemoteRead | AccessFlushGlobal, 0, 0},
		{"flush persistent needs persistent memory, which Go memory is not", buf, AccessFlushPersistent, syscall.EINVAL, 0},
		{"relaxed ordering is optional: accepted and ignored", buf, all | AccessRelaxedOrdering, 0, all},
		{"every optional bit accepted and ignored", buf, AccessRemoteRead | AccessOptionalRange, 0, AccessRemoteRead},
		{"the optional range is bits 20 to 29", buf, 1 << 29, 0, 0},
		{"unknown flag below the optional range", buf, 1 << 10, syscall.EINVAL, 0},
		{"unknown flag above the optional range", buf, 1 << 30, syscall.EINVAL, 0},
		{"on demand is not supported", buf, AccessOnDemand, syscall.EOPNOTSUPP, 0},
		{"zero based MR is not supported", buf, AccessZeroBased, syscall.EOPNOTSUPP, 0},
		{"hugetlb is not supported", buf, AccessHugeTLB, syscall.EOPNOTSUPP, 0},
		{"empty buffer", nil, AccessLocalWrite, syscall.EINVAL, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mr, err := pd.RegMR(tc.buf, tc.access)
			if tc.want != 0 {
				wantErrno(t, err, tc.want)
				return
			}
			noErr(t, err)
			keep := tc.access
			if tc.keep != 0 || tc.access&AccessOptionalRange != 0 {
				keep = tc.keep
			}
			if mr.Len() != len(tc.buf) || mr.Access() != keep || mr.LKey() == mr.RKey() || mr.LKey() == 0 {
				t.Fatalf("mr %v access %v", mr, mr.Access())
			}
			if r := d.mem.LocalRegion(mr.LKey()); r == nil || &r.Buf[0] != &tc.buf[0] {
				t.Fatal("lkey does not resolve to the buffer")
			}
			if r := d.mem.RemoteRegion(mr.RKey()); r == nil || r.Access != keep {
				t.Fatal("rkey does not resolve")
			}
			noErr(t, mr.Close())
			if d.mem.LocalRegion(mr.LKey()) != nil || d.mem.RemoteRegion(mr.RKey()) != nil {
				t.Fatal("keys resolve after dereg")
			}
			wantErrno(t, mr.Close(), syscall.EINVAL)
		})
	}
}

func TestMRKeysAreRandomUniqueAndNeverSequential(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	buf := make([]byte, 16)
	const n = 10000
	seen := make(map[uint32]bool, 2*n)
	mrs := make([]*MR, 0, n)
	var prev uint32
	for i := 0; i < n; i++ {
		mr := must[*MR](t)(pd.RegMR(buf, AccessLocalWrite))
		mrs = append(mrs, mr)
		for _, k := range []uint32{mr.LKey(), mr.RKey()} {
			if seen[k] {
				t.Fatalf("key %#x issued twice", k)
			}
			seen[k] = true
			if i > 0 && (k-prev == 1 || prev-k == 1) {
				t.Fatalf("key %#x follows %#x", k, prev)
			}
			prev = k
		}
	}
	// A key that was never issued resolves to nothing.
	for k := uint32(1); k < 1000; k++ {
		if !seen[k] && (d.mem.LocalRegion(k) != nil || d.mem.RemoteRegion(k) != nil) {
			t.Fatalf("unissued key %#x resolves", k)
		}
	}
	for _, mr := range mrs {
		noErr(t, mr.Close())
	}
	noErr(t, pd.Close())
}

func TestMemoryLookupDoesNotAllocate(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	mr := must[*MR](t)(pd.RegMR(make([]byte, 64), AccessLocalWrite|AccessRemoteWrite))
	if n := testing.AllocsPerRun(1000, func() {
		d.mem.LocalRegion(mr.LKey())
		d.mem.RemoteRegion(mr.RKey())
		d.mem.RemoteRegion(12345)
	}); n != 0 {
		t.Fatalf("%v allocs per lookup", n)
	}
}

func TestPDCloseIsBusyWhileObjectsLive(t *testing.T) {
	d := pipeDevice(t)
	kinds := []struct {
		name   string
		create func(pd *PD) (func() error, error)
	}{
		{"mr", func(pd *PD) (func() error, error) {
			mr, err := pd.RegMR(make([]byte, 8), 0)
			if err != nil {
				return nil, err
			}
			return mr.Close, nil
		}},
		{"ah", func(pd *PD) (func() error, error) {
			ah, err := pd.CreateAH(AHAttr{DGID: addrB, SGIDIndex: 1, IsGlobal: true, HopLimit: 64})
			if err != nil {
				return nil, err
			}
			return ah.Close, nil
		}},
		{"srq", func(pd *PD) (func() error, error) {
			s, err := pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 4, MaxSGE: 1}})
			if err != nil {
				return nil, err
			}
			return s.Close, nil
		}},
		{"qp", func(pd *PD) (func() error, error) {
			c, err := d.CreateCQ(4)
			if err != nil {
				return nil, err
			}
			qp, err := pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: c, RecvCQ: c, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				return nil, err
			}
			return func() error {
				if err := qp.Close(); err != nil {
					return err
				}
				return c.Close()
			}, nil
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			pd := must[*PD](t)(d.AllocPD())
			destroy, err := k.create(pd)
			noErr(t, err)
			wantErrno(t, pd.Close(), syscall.EBUSY)
			noErr(t, destroy())
			noErr(t, pd.Close())
			wantErrno(t, pd.Close(), syscall.EINVAL)
			_, err = pd.RegMR(make([]byte, 8), 0)
			wantErrno(t, err, syscall.EINVAL)
			wantClosed(t, err)
		})
	}
}

func TestCreateAHChecks(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	good := AHAttr{DGID: addrB, SGIDIndex: 1, IsGlobal: true, HopLimit: 64}
	tests := []struct {
		name string
		mod  func(a *AHAttr)
		want syscall.Errno
	}{
		{"ok", func(a *AHAttr) {}, 0},
		{"ipv4-mapped destination", func(a *AHAttr) { a.DGID = netip.AddrFrom16(addrB.As16()) }, 0},
		{"no GRH", func(a *AHAttr) { a.IsGlobal = false }, syscall.EINVAL},
		{"no destination", func(a *AHAttr) { a.DGID = netip.Addr{} }, syscall.EINVAL},
		{"default GID as source", func(a *AHAttr) { a.SGIDIndex = 0 }, syscall.EINVAL},
		{"sgid index outside table", func(a *AHAttr) { a.SGIDIndex = 2 }, syscall.EINVAL},
		{"other family", func(a *AHAttr) { a.DGID = netip.MustParseAddr("2001:db8::2") }, syscall.EINVAL},
		{"flow label over 20 bits", func(a *AHAttr) { a.FlowLabel = 1 << 20 }, syscall.EINVAL},
		{"multicast group (UD multicast)", func(a *AHAttr) { a.DGID = netip.MustParseAddr("224.0.0.1") }, 0},
		{"multicast group of the other family", func(a *AHAttr) { a.DGID = netip.MustParseAddr("ff05::1") }, syscall.EINVAL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := good
			tc.mod(&a)
			ah, err := pd.CreateAH(a)
			if tc.want != 0 {
				wantErrno(t, err, tc.want)
				return
			}
			noErr(t, err)
			if ah.AV().DGID != a.DGID.Unmap() {
				t.Fatalf("destination %v not normalised", ah.AV().DGID)
			}
			noErr(t, ah.Close())
		})
	}
}

func TestCQVerbs(t *testing.T) {
	d := pipeDevice(t, WithLimits(Limits{MaxCQE: 64, MaxCQ: 2}))
	_, err := d.CreateCQ(0)
	wantErrno(t, err, syscall.EINVAL)
	_, err = d.CreateCQ(65)
	wantErrno(t, err, syscall.EINVAL)
	c := must[*CQ](t)(d.CreateCQ(10))
	if c.CQE() < 10 {
		t.Fatalf("cqe %d < 10", c.CQE())
	}
	_ = must[*CQ](t)(d.CreateCQ(1))
	_, err = d.CreateCQ(1)
	wantErrno(t, err, syscall.ENOMEM)
	n, err := c.Resize(40)
	if err != nil || n < 40 {
		t.Fatalf("resize: %d %v", n, err)
	}
	_, err = c.Resize(65)
	wantErrno(t, err, syscall.EINVAL)
	if c.CQE() != n {
		t.Fatal("failed resize changed the CQ")
	}
	noErr(t, c.ReqNotify(false))
	k, err := c.Poll(make([]WC, 4))
	if k != 0 || err != nil {
		t.Fatalf("poll of empty CQ: %d %v", k, err)
	}
	noErr(t, c.Close())
	wantErrno(t, c.Close(), syscall.EINVAL)
	_ = must[*CQ](t)(d.CreateCQ(1)) // the closed CQ no longer counts against max_cq
}

func TestCQCloseBusyWhileQPAttached(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	scq := must[*CQ](t)(d.CreateCQ(4))
	rcq := must[*CQ](t)(d.CreateCQ(4))
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 4, MaxSGE: 1}}))
	qp := must[*QP](t)(pd.CreateQP(QPInitAttr{Type: QPTypeRC, SendCQ: scq, RecvCQ: rcq, SRQ: s, Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}}))
	wantErrno(t, scq.Close(), syscall.EBUSY)
	wantErrno(t, rcq.Close(), syscall.EBUSY)
	wantErrno(t, s.Close(), syscall.EBUSY)
	_, err := qp.PostRecv([]RecvWR{{WRID: 1}})
	wantErrno(t, err, syscall.EINVAL)
	noErr(t, qp.Close())
	wantErrno(t, qp.Close(), syscall.EINVAL)
	noErr(t, scq.Close())
	noErr(t, rcq.Close())
	noErr(t, s.Close())
	noErr(t, pd.Close())
}

func TestCreateQPErrnos(t *testing.T) {
	d := pipeDevice(t, WithLimits(Limits{MaxQP: 2, MaxQPWR: 16, MaxSGE: 4, MaxInlineData: 64}))
	other := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	pd2 := must[*PD](t)(d.AllocPD())
	c := must[*CQ](t)(d.CreateCQ(16))
	oc := must[*CQ](t)(other.CreateCQ(16))
	s2 := must[*SRQ](t)(pd2.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 4, MaxSGE: 1}}))
	ok := QPInitAttr{Type: QPTypeRC, SendCQ: c, RecvCQ: c, Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}}
	tests := []struct {
		name string
		mod  func(a *QPInitAttr)
		want syscall.Errno
	}{
		{"no send cq", func(a *QPInitAttr) { a.SendCQ = nil }, syscall.EINVAL},
		{"no recv cq", func(a *QPInitAttr) { a.RecvCQ = nil }, syscall.EINVAL},
		{"cq of another device", func(a *QPInitAttr) { a.SendCQ = oc }, syscall.EINVAL},
		{"srq of another pd", func(a *QPInitAttr) { a.SRQ = s2 }, syscall.EINVAL},
		{"bad type", func(a *QPInitAttr) { a.Type = 9 }, syscall.EINVAL},
		{"max_send_wr above max_qp_wr", func(a *QPInitAttr) { a.Cap.MaxSendWR = 17 }, syscall.EINVAL},
		{"max_recv_wr above max_qp_wr", func(a *QPInitAttr) { a.Cap.MaxRecvWR = 17 }, syscall.EINVAL},
		{"max_send_sge above max_sge", func(a *QPInitAttr) { a.Cap.MaxSendSGE = 5 }, syscall.EINVAL},
		{"max_recv_sge above max_sge", func(a *QPInitAttr) { a.Cap.MaxRecvSGE = 5 }, syscall.EINVAL},
		{"max_inline_data above limit", func(a *QPInitAttr) { a.Cap.MaxInlineData = 65 }, syscall.EINVAL},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := ok
			tc.mod(&a)
			_, err := pd.CreateQP(a)
			wantErrno(t, err, tc.want)
		})
	}
	t.Run("receive caps ignored with an SRQ", func(t *testing.T) {
		a := ok
		a.SRQ = must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 4, MaxSGE: 1}}))
		a.Cap.MaxRecvWR, a.Cap.MaxRecvSGE = 1<<20, 99 // as rxe_qp_chk_cap: not checked, not kept
		q := must[*QP](t)(pd.CreateQP(a))
		noErr(t, q.Close())
		noErr(t, a.SRQ.Close())
	})
	t.Run("max_qp reached", func(t *testing.T) {
		q1 := must[*QP](t)(pd.CreateQP(ok))
		q2 := must[*QP](t)(pd.CreateQP(ok))
		_, err := pd.CreateQP(ok)
		wantErrno(t, err, syscall.ENOMEM)
		bad := ok
		bad.Cap.MaxSendWR = 17
		_, err = pd.CreateQP(bad) // validated before max_qp is counted: EINVAL still
		wantErrno(t, err, syscall.EINVAL)
		noErr(t, q1.Close())
		q3 := must[*QP](t)(pd.CreateQP(ok))
		noErr(t, q2.Close())
		noErr(t, q3.Close())
	})
}

func TestSRQLimitRaisesEventAndCounts(t *testing.T) {
	d := pipeDevice(t)
	<-d.Events() // PORT_ACTIVE
	pd := must[*PD](t)(d.AllocPD())
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 8, MaxSGE: 1}}))
	wrs := make([]RecvWR, 2)
	_ = must[int](t)(s.PostRecv(wrs))
	// Arming above the number outstanding raises the event at once.
	noErr(t, s.Modify(&SRQAttr{Limit: 4}, SRQLimit))
	select {
	case ev := <-d.Events():
		if ev.Type != EventSRQLimitReached || ev.SRQ != s {
			t.Fatalf("event %v, want SRQ_LIMIT_REACHED for the SRQ", ev)
		}
	case <-time.After(time.Second):
		t.Fatal("no SRQ_LIMIT_REACHED")
	}
	if got := d.Stats().SRQLimitEvents; got != 1 {
		t.Fatalf("SRQLimitEvents = %d", got)
	}
	a := must[SRQAttr](t)(s.Query())
	if a.Limit != 0 {
		t.Fatalf("limit %d after the event, want disarmed", a.Limit)
	}
	err := s.Modify(&SRQAttr{Limit: 9}, SRQLimit)
	wantErrno(t, err, syscall.EINVAL)
	n, err := s.PostRecv(make([]RecvWR, 7))
	if n != 6 {
		t.Fatalf("posted %d, want 6", n)
	}
	wantErrno(t, err, syscall.ENOMEM)
	var re *Error
	if !errors.As(err, &re) || re.Index != 6 {
		t.Fatalf("bad_wr index: %+v", re)
	}
	_, err = s.PostRecv([]RecvWR{{SGL: make([]SGE, 2)}})
	wantErrno(t, err, syscall.EINVAL)
}

func TestEventsNeverBlockAndCountDrops(t *testing.T) {
	d := pipeDevice(t, WithEventBuffer(2))
	pd := must[*PD](t)(d.AllocPD())
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 8, MaxSGE: 1}}))
	for i := 0; i < 5; i++ {
		noErr(t, s.Modify(&SRQAttr{Limit: 4}, SRQLimit)) // raises at once: 0 outstanding
	}
	// 1 PORT_ACTIVE + 5 limit events into a buffer of 2.
	if got := d.DroppedEvents(); got != 4 {
		t.Fatalf("dropped %d events, want 4", got)
	}
	if got := d.Stats().SRQLimitEvents; got != 5 {
		t.Fatalf("SRQLimitEvents %d, want 5", got)
	}
}

func TestVerbsAfterCloseMatchErrClosed(t *testing.T) {
	d := pipeDevice(t)
	pd := must[*PD](t)(d.AllocPD())
	c := must[*CQ](t)(d.CreateCQ(4))
	s := must[*SRQ](t)(pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 4, MaxSGE: 1}}))
	qp := must[*QP](t)(pd.CreateQP(QPInitAttr{Type: QPTypeUD, SendCQ: c, RecvCQ: c, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}))
	noErr(t, d.Close())
	noErr(t, d.Close())
	if _, ok := <-d.Events(); ok {
		for range d.Events() {
		}
	}
	errs := map[string]error{}
	_, errs["AllocPD"] = d.AllocPD()
	_, errs["Query"] = d.Query()
	_, errs["QueryPort"] = d.QueryPort(1)
	_, errs["QueryGID"] = d.QueryGID(1)
	_, errs["CreateCQ"] = d.CreateCQ(1)
	_, errs["RegMR"] = pd.RegMR(make([]byte, 1), 0)
	_, errs["CreateSRQ"] = pd.CreateSRQ(SRQInitAttr{Attr: SRQAttr{MaxWR: 1, MaxSGE: 1}})
	_, errs["CreateAH"] = pd.CreateAH(AHAttr{DGID: addrB, SGIDIndex: 1, IsGlobal: true})
	_, errs["Poll"] = c.Poll(make([]WC, 1))
	errs["ReqNotify"] = c.ReqNotify(false)
	_, errs["Resize"] = c.Resize(8)
	_, errs["SRQ.PostRecv"] = s.PostRecv([]RecvWR{{}})
	_, errs["SRQ.Query"] = s.Query()
	errs["SRQ.Modify"] = s.Modify(&SRQAttr{Limit: 1}, SRQLimit)
	_, errs["QP.PostSend"] = qp.PostSend([]SendWR{{Opcode: WRSend}})
	_, errs["QP.PostRecv"] = qp.PostRecv([]RecvWR{{}})
	_, errs["QP.Query"] = qp.Query()
	errs["QP.Modify"] = qp.Modify(&QPAttr{State: QPSInit}, QPAttrState)
	for name, err := range errs {
		if !errors.Is(err, net.ErrClosed) || !errors.Is(err, syscall.ENODEV) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	// Destroying objects after Close still works, so cleanup code need not care.
	noErr(t, qp.Close())
}

func TestCQWaitEndsWhenDeviceCloses(t *testing.T) {
	d := pipeDevice(t)
	c := must[*CQ](t)(d.CreateCQ(4))
	done := make(chan error, 1)
	go func() {
		_, err := c.Wait(context.Background(), make([]WC, 1))
		done <- err
	}()
	parked.Wait(t, "roce.(*CQ).Wait", 1, wcTimeout) // Wait armed and sleeps on Notify
	noErr(t, d.Close())
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) || !errors.Is(err, syscall.ENODEV) {
			t.Fatalf("Wait after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("CQ.Wait still blocked 5 s after Device.Close")
	}
}
