package roce

import (
	"errors"
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/core/transport"
)

func TestAllocMW(t *testing.T) {
	d := pipeDevice(t, WithLimits(Limits{MaxMW: 2}))
	pd := must[*PD](t)(d.AllocPD())
	_, err := pd.AllocMW(0)
	wantErrno(t, err, syscall.EINVAL)
	_, err = pd.AllocMW(3)
	wantErrno(t, err, syscall.EINVAL)
	w1 := must[*MW](t)(pd.AllocMW(MWType1))
	w2 := must[*MW](t)(pd.AllocMW(MWType2))
	_, err = pd.AllocMW(MWType1)
	wantErrno(t, err, syscall.ENOMEM) // max_mw
	for _, w := range []*MW{w1, w2} {
		if w.RKey()>>8 == 0 || w.PD() != pd {
			t.Fatalf("%v: rkey %#x", w, w.RKey())
		}
		if d.mem.RemoteRegion(w.RKey()) != nil || d.mem.LocalRegion(w.RKey()) != nil {
			t.Fatalf("%v grants access before any bind", w)
		}
	}
	if w1.Type() != MWType1 || w2.Type() != MWType2 || w1.RKey()>>8 == w2.RKey()>>8 {
		t.Fatal("types or indexes wrong")
	}
	wantErrno(t, pd.Close(), syscall.EBUSY) // windows hold the PD
	noErr(t, w1.Close())
	wantErrno(t, w1.Close(), syscall.EINVAL)
	noErr(t, w2.Close())
	noErr(t, pd.Close())
}

func TestIncRKeyAdvancesOnlyTheKeyByte(t *testing.T) {
	for _, tc := range [][2]uint32{{0x12345600, 0x12345601}, {0x123456fe, 0x123456ff}, {0x123456ff, 0x12345600}} {
		if got := IncRKey(tc[0]); got != tc[1] {
			t.Errorf("IncRKey(%#x) = %#x, want %#x", tc[0], got, tc[1])
		}
	}
}

// mwFixture is a PD with an MR that allows binds and two windows.
type mwFixture struct {
	d      *Device
	pd     *PD
	buf    []byte
	mr     *MR
	w1, w2 *MW
}

const (
	qpA = 0x11 // the QP binding in the tests
	qpB = 0x12
)

func newMWFixture(t *testing.T) *mwFixture {
	d := pipeDevice(t)
	f := &mwFixture{d: d, pd: must[*PD](t)(d.AllocPD()), buf: make([]byte, 4096)}
	f.mr = must[*MR](t)(f.pd.RegMR(f.buf, AccessLocalWrite|AccessMWBind))
	f.w1 = must[*MW](t)(f.pd.AllocMW(MWType1))
	f.w2 = must[*MW](t)(f.pd.AllocMW(MWType2))
	return f
}

// bind2 is a valid type 2 bind of f.w2 on qpA: 1 KiB at offset 512, remote write.
func (f *mwFixture) bind2() transport.MWBind {
	return transport.MWBind{MWRKey: f.w2.RKey(), NewRKey: IncRKey(f.w2.RKey()), MRLKey: f.mr.LKey(),
		Addr: f.mr.Addr() + 512, Length: 1024, Access: AccessRemoteWrite | AccessRemoteRead, QPN: qpA, PD: f.pd.id}
}

func wantBindErr(t *testing.T, err error, errno syscall.Errno) {
	t.Helper()
	if err == nil || !errors.Is(err, errno) {
		t.Fatalf("bind: got %v, want %v", err, errno)
	}
}

// TestBindMWRules has one row per rule of a bind (IBA 10.6.7.2, rxe_check_bind_mw).
// Every refused bind leaves the window as it was.
func TestBindMWRules(t *testing.T) {
	tests := []struct {
		name string
		mod  func(f *mwFixture, b *transport.MWBind)
		want syscall.Errno // 0: the bind succeeds
	}{
		{"a valid type 2 bind", func(*mwFixture, *transport.MWBind) {}, 0},
		{"unknown window rkey", func(_ *mwFixture, b *transport.MWBind) { b.MWRKey ^= 0x100 }, syscall.EINVAL},
		{"window rkey with a stale key byte", func(_ *mwFixture, b *transport.MWBind) { b.MWRKey = IncRKey(b.MWRKey) }, syscall.EINVAL},
		{"unknown MR lkey", func(_ *mwFixture, b *transport.MWBind) { b.MRLKey ^= 0x100 }, syscall.EINVAL},
		{"the MR's rkey is no lkey", func(f *mwFixture, b *transport.MWBind) { b.MRLKey = f.mr.RKey() }, syscall.EINVAL},
		{"access outside RXE_ACCESS_SUPPORTED_MW", func(_ *mwFixture, b *transport.MWBind) { b.Access |= AccessHugeTLB }, syscall.EOPNOTSUPP},
		{"flush persistent over memory that is not persistent", func(_ *mwFixture, b *transport.MWBind) { b.Access |= AccessFlushPersistent }, syscall.EINVAL},
		{"C10-72: type 2 bound by a QP of another PD", func(_ *mwFixture, b *transport.MWBind) { b.PD++ }, syscall.EINVAL},
		{"o10-37.2.40: type 2 bound with zero length", func(_ *mwFixture, b *transport.MWBind) { b.Length = 0 }, syscall.EINVAL},
		{"C10-73: MR without MW_BIND", func(f *mwFixture, b *transport.MWBind) {
			b.MRLKey = must[*MR](t)(f.pd.RegMR(f.buf, AccessLocalWrite)).LKey()
		}, syscall.EACCES},
		{"C10-74: writable window on an MR without LOCAL_WRITE", func(f *mwFixture, b *transport.MWBind) {
			b.MRLKey = must[*MR](t)(f.pd.RegMR(f.buf, AccessMWBind)).LKey()
		}, syscall.EACCES},
		{"C10-74: a read-only window needs no LOCAL_WRITE", func(f *mwFixture, b *transport.MWBind) {
			b.MRLKey = must[*MR](t)(f.pd.RegMR(f.buf, AccessMWBind)).LKey()
			b.Access = AccessRemoteRead
		}, 0},
		{"C10-74: remote atomic is writing", func(f *mwFixture, b *transport.MWBind) {
			b.MRLKey = must[*MR](t)(f.pd.RegMR(f.buf, AccessMWBind)).LKey()
			b.Access = AccessRemoteAtomic
		}, syscall.EACCES},
		{"C10-75: window starts below the MR", func(f *mwFixture, b *transport.MWBind) { b.Addr = f.mr.Addr() - 1 }, syscall.EINVAL},
		{"C10-75: window ends past the MR", func(f *mwFixture, b *transport.MWBind) { b.Addr, b.Length = f.mr.Addr()+1, 4096 }, syscall.EINVAL},
		{"C10-75: window longer than the MR", func(f *mwFixture, b *transport.MWBind) { b.Addr, b.Length = f.mr.Addr(), 1<<63 }, syscall.EINVAL},
		{"C10-75: the whole MR", func(f *mwFixture, b *transport.MWBind) { b.Addr, b.Length = f.mr.Addr(), 4096 }, 0},
		{"C10-75: zero based windows lie inside the MR too", func(f *mwFixture, b *transport.MWBind) {
			b.Access |= AccessZeroBased
			b.Addr = f.mr.Addr() + 4000
		}, syscall.EINVAL},
		{"MR of another PD", func(f *mwFixture, b *transport.MWBind) {
			pd2 := must[*PD](t)(f.d.AllocPD())
			b.MRLKey = must[*MR](t)(pd2.RegMR(f.buf, AccessLocalWrite|AccessMWBind)).LKey()
		}, syscall.EPERM},
		{"o10-36.2.2: type 1 cannot be zero based", func(f *mwFixture, b *transport.MWBind) {
			b.MWRKey, b.NewRKey = f.w1.RKey(), IncRKey(f.w1.RKey())
			b.Access |= AccessZeroBased
		}, syscall.EINVAL},
		{"type 1 from any QP of any PD", func(f *mwFixture, b *transport.MWBind) {
			b.MWRKey, b.NewRKey = f.w1.RKey(), IncRKey(f.w1.RKey())
			b.PD++
		}, 0},
		{"type 1 zero-length bind", func(f *mwFixture, b *transport.MWBind) {
			b.MWRKey, b.NewRKey = f.w1.RKey(), IncRKey(f.w1.RKey())
			b.Length = 0
		}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newMWFixture(t)
			b := f.bind2()
			tc.mod(f, &b)
			w := f.d.mem.windowOf(b.MWRKey)
			var before window
			if w != nil {
				before = *w
			}
			err := f.d.mem.BindMW(&b)
			if tc.want != 0 {
				wantBindErr(t, err, tc.want)
				if w != nil && *w != before {
					t.Fatal("a refused bind changed the window")
				}
				return
			}
			noErr(t, err)
			if w.rkey != b.NewRKey {
				t.Fatalf("rkey %#x after the bind, want %#x", w.rkey, b.NewRKey)
			}
		})
	}
}

// TestBindMWEffects checks what a bind grants: the new rkey resolves to exactly the
// window (its bounds, its rights, the window's PD), the previous rkey to nothing;
// a zero-based window starts at offset 0; type 1 rebinds move the window and a
// zero-length bind revokes it; a bound window keeps its MR registered.
func TestBindMWEffects(t *testing.T) {
	f := newMWFixture(t)
	m := f.d.mem
	b := f.bind2()
	old := b.MWRKey
	noErr(t, m.BindMW(&b))
	if m.RemoteRegion(old) != nil {
		t.Fatal("the rkey before the bind still resolves")
	}
	r := m.RemoteRegion(b.NewRKey)
	if r == nil || r.Addr != b.Addr || len(r.Buf) != 1024 || &r.Buf[0] != &f.buf[512] ||
		r.Access != b.Access || r.PD != f.pd.id || f.w2.RKey() != b.NewRKey {
		t.Fatalf("window region %+v", r)
	}
	wantErrno(t, f.mr.Close(), syscall.EBUSY) // ibv_dereg_mr fails while a window is bound

	// Type 1: bind, move, revoke with zero length.
	k := f.w1.RKey()
	for i, where := range []struct{ off, n uint64 }{{0, 16}, {4000, 96}, {0, 0}} {
		nk := IncRKey(k)
		b1 := transport.MWBind{MWRKey: k, NewRKey: nk, MRLKey: f.mr.LKey(), Addr: f.mr.Addr() + where.off, Length: where.n,
			Access: AccessRemoteRead, QPN: qpB, PD: 77}
		noErr(t, m.BindMW(&b1))
		if m.RemoteRegion(k) != nil {
			t.Fatalf("bind %d: the previous rkey still resolves", i)
		}
		r := m.RemoteRegion(nk)
		if (where.n == 0) != (r == nil) || (r != nil && (r.Addr != f.mr.Addr()+where.off || uint64(len(r.Buf)) != where.n)) {
			t.Fatalf("bind %d: region %+v", i, r)
		}
		k = nk
	}

	// A zero-based type 2 window: offsets from 0.
	noErr(t, m.Invalidate(b.NewRKey, qpA, f.pd.id))
	zb := f.bind2()
	zb.Access |= AccessZeroBased
	noErr(t, m.BindMW(&zb))
	if r := m.RemoteRegion(zb.NewRKey); r == nil || r.Addr != 0 || &r.Buf[0] != &f.buf[512] || len(r.Buf) != 1024 {
		t.Fatalf("zero-based window %+v", r)
	}
	noErr(t, m.Invalidate(zb.NewRKey, qpA, f.pd.id))
	noErr(t, f.mr.Close()) // no window bound any more
}

// TestInvalidateRules has one row per rule of LOCAL_INV and the responder's
// SEND_WITH_INV (IBA 10.6.7.2.5, rxe_invalidate_mw, rxe_invalidate_mr).
func TestInvalidateRules(t *testing.T) {
	tests := []struct {
		name string
		key  func(f *mwFixture, bound uint32) uint32
		qpn  uint32
		pd   func(f *mwFixture) uint32
		ok   bool
	}{
		{"a bound type 2 window, by its QP", func(_ *mwFixture, k uint32) uint32 { return k }, qpA, nil, true},
		{"o10-37.2.26: a type 1 window cannot be invalidated", func(f *mwFixture, _ uint32) uint32 {
			noErr(t, f.d.mem.BindMW(&transport.MWBind{MWRKey: f.w1.RKey(), NewRKey: IncRKey(f.w1.RKey()), MRLKey: f.mr.LKey(),
				Addr: f.mr.Addr(), Length: 8, Access: AccessRemoteRead}))
			return f.w1.RKey()
		}, qpA, nil, false},
		{"an MR's rkey (no fast-registration MR)", func(f *mwFixture, _ uint32) uint32 {
			return must[*MR](t)(f.pd.RegMR(f.buf, AccessLocalWrite|AccessRemoteWrite)).RKey()
		}, qpA, nil, false},
		{"an MR's lkey", func(f *mwFixture, _ uint32) uint32 { return f.mr.LKey() }, qpA, nil, false},
		{"an unknown rkey", func(_ *mwFixture, k uint32) uint32 { return k ^ 0x100 }, qpA, nil, false},
		{"the window's previous key byte", func(_ *mwFixture, k uint32) uint32 { return k - 1 }, qpA, nil, false},
		{"a type 2 window that is not bound", func(f *mwFixture, k uint32) uint32 {
			noErr(t, f.d.mem.Invalidate(k, qpA, f.pd.id))
			return k
		}, qpA, nil, false},
		{"type 2B: from a QP other than the bound one", func(_ *mwFixture, k uint32) uint32 { return k }, qpB, nil, false},
		{"from a QP of another PD", func(_ *mwFixture, k uint32) uint32 { return k }, qpA,
			func(f *mwFixture) uint32 { return f.pd.id + 1 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newMWFixture(t)
			b := f.bind2()
			noErr(t, f.d.mem.BindMW(&b))
			key := tc.key(f, b.NewRKey)
			pd := f.pd.id
			if tc.pd != nil {
				pd = tc.pd(f)
			}
			wasBound := f.d.mem.RemoteRegion(b.NewRKey) != nil
			err := f.d.mem.Invalidate(key, tc.qpn, pd)
			if !tc.ok {
				wantBindErr(t, err, syscall.EINVAL)
				if wasBound && f.d.mem.RemoteRegion(b.NewRKey) == nil {
					t.Fatal("a refused invalidation unbound the window")
				}
				return
			}
			noErr(t, err)
			if f.d.mem.RemoteRegion(key) != nil {
				t.Fatal("the invalidated rkey still resolves")
			}
			if w := f.d.mem.windowOf(key); w.state != mwFree {
				t.Fatalf("state %d after invalidation, want free", w.state)
			}
			// Free again: it can be bound again, with the next key byte.
			nb := f.bind2()
			noErr(t, f.d.mem.BindMW(&nb))
			if f.d.mem.RemoteRegion(nb.NewRKey) == nil || f.d.mem.RemoteRegion(key) != nil {
				t.Fatal("rebind after invalidation")
			}
		})
	}
}

// TestDeallocBoundMW: ibv_dealloc_mw of a bound window revokes its rkey and lets
// its MR go.
func TestDeallocBoundMW(t *testing.T) {
	f := newMWFixture(t)
	b := f.bind2()
	noErr(t, f.d.mem.BindMW(&b))
	wantErrno(t, f.mr.Close(), syscall.EBUSY)
	noErr(t, f.w2.Close())
	if f.d.mem.RemoteRegion(b.NewRKey) != nil || f.d.mem.windowOf(b.NewRKey) != nil {
		t.Fatal("a deallocated window still resolves")
	}
	noErr(t, f.mr.Close())
}

func TestWindowLookupDoesNotAllocate(t *testing.T) {
	f := newMWFixture(t)
	b := f.bind2()
	noErr(t, f.d.mem.BindMW(&b))
	if n := testing.AllocsPerRun(1000, func() {
		f.d.mem.RemoteRegion(b.NewRKey)
		f.d.mem.RemoteRegion(b.MWRKey)
	}); n != 0 {
		t.Fatalf("%v allocs per lookup", n)
	}
}
