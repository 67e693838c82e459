package roce

import (
	"fmt"
	"syscall"

	"github.com/goroce/goroce/internal/core/transport"
)

// mwState is the state of a memory window (rxe enum rxe_mw_state, IBA 10.6.7.2).
type mwState uint8

const (
	mwInvalid mwState = iota // deallocated
	mwFree                   // a type 2 window with no binding
	mwValid                  // type 1 always (possibly zero length); type 2 bound
)

// window is a memory window in the key registry. Its bind state changes under
// memory.mwMu and its shard's write lock, and lookups see a bind whole or not at all.
type window struct {
	typ MWType
	pd  uint32

	// The shard lock of the window's index guards the fields below.
	rkey         uint32
	state        mwState
	region       *transport.Region // what RemoteRegion returns; nil while zero length
	mr           *transport.Region // the MR bound to; nil while zero length
	qpn          uint32            // type 2: the QP the window is bound to
	addr, length uint64
	access       Access
}

// accessMW is what a bind may grant: rxe's RXE_ACCESS_SUPPORTED_MW (EOPNOTSUPP else).
const accessMW = accessSupported | AccessZeroBased

// bindErr is a refused bind; the WR completes with IBV_WC_MW_BIND_ERR in any case.
func bindErr(errno syscall.Errno, format string, args ...any) error {
	return newErr("bind_mw", "", errno, format, args...)
}

// allocWindow registers a window of pd: type 1 valid, zero length; type 2 free (rxe).
func (m *memory) allocWindow(typ MWType, pd uint32) (*window, error) {
	w := &window{typ: typ, pd: pd, state: mwValid}
	if typ == MWType2 {
		w.state = mwFree
	}
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	k, err := m.newKeyLocked(0)
	if err != nil {
		return nil, err
	}
	w.rkey = k
	m.insert(&keyEntry{kind: kindWindow, key: k, w: w})
	return w, nil
}

// deallocWindow is rxe_dealloc_mw: unbound, invalid, its index freed. Lookups under way
// may still hold its region (MW.Close).
func (m *memory) deallocWindow(w *window) {
	m.mwMu.Lock()
	defer m.mwMu.Unlock()
	s := m.shard(w.rkey)
	s.mu.Lock()
	m.unbindLocked(w)
	w.state = mwInvalid
	delete(s.keys, w.rkey>>8)
	s.mu.Unlock()
}

// unbindLocked drops the window's MR and bounds, under mwMu and the shard lock.
func (m *memory) unbindLocked(w *window) {
	if w.mr != nil {
		if m.boundMWs[w.mr]--; m.boundMWs[w.mr] <= 0 {
			delete(m.boundMWs, w.mr)
		}
	}
	w.mr, w.region, w.qpn, w.addr, w.length, w.access = nil, nil, 0, 0, 0, 0
}

// windowOf returns the live window the key's index names, or nil.
func (m *memory) windowOf(key uint32) *window {
	s := m.shard(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if e := s.keys[key>>8]; e != nil && e.kind == kindWindow {
		return e.w
	}
	return nil
}

// BindMW executes a bind (rxe_bind_mw, rxe_check_bind_mw, IBA 10.6.7.2.3), checking all
// before changing anything: the window takes the new key byte and grants access to
// [Addr, Addr+Length) of the MR (offsets from 0 when zero based); a type 2 window is
// bound to the executing QP, whose QPN its region carries.
func (m *memory) BindMW(b *transport.MWBind) error {
	m.mwMu.Lock()
	defer m.mwMu.Unlock()
	w := m.windowOf(b.MWRKey)
	if w == nil || w.rkey != b.MWRKey {
		return bindErr(syscall.EINVAL, "no memory window has rkey %#x", b.MWRKey)
	}
	var mr *transport.Region
	if b.Length > 0 {
		if mr = m.LocalRegion(b.MRLKey); mr == nil {
			return bindErr(syscall.EINVAL, "no MR has lkey %#x", b.MRLKey)
		}
	}
	if err := checkBind(w, b, mr); err != nil {
		return err
	}
	s := m.shard(w.rkey)
	s.mu.Lock()
	defer s.mu.Unlock()
	m.unbindLocked(w)
	w.rkey = w.rkey&^keyByteMask | b.NewRKey&keyByteMask
	w.state, w.access, w.addr, w.length = mwValid, b.Access, b.Addr, b.Length
	if w.typ == MWType2 {
		w.qpn = b.QPN
	}
	if mr != nil {
		w.mr = mr
		m.boundMWs[mr]++
		off := b.Addr - mr.Addr
		base := b.Addr
		if b.Access&AccessZeroBased != 0 {
			base = 0
		}
		w.region = &transport.Region{PD: w.pd, Addr: base, Buf: mr.Buf[off : off+b.Length : off+b.Length],
			Access: b.Access, RKey: w.rkey, QPN: w.qpn}
	}
	return nil
}

// checkBind holds a bind's rules, in rxe's order; mr is nil for a zero length bind.
func checkBind(w *window, b *transport.MWBind, mr *transport.Region) error {
	if b.Access&^accessMW != 0 {
		return bindErr(syscall.EOPNOTSUPP, "access %#x not supported on a memory window", uint32(b.Access&^accessMW))
	}
	if b.Access&AccessFlushPersistent != 0 {
		return bindErr(syscall.EINVAL, "FLUSH_PERSISTENT needs persistent memory, and no MR of this device is")
	}
	switch w.typ {
	case MWType1:
		if w.state != mwValid {
			return bindErr(syscall.EINVAL, "type 1 window not in the valid state")
		}
		if b.Access&AccessZeroBased != 0 {
			return bindErr(syscall.EINVAL, "o10-36.2.2: a type 1 window cannot be zero based")
		}
	case MWType2:
		if w.state != mwFree {
			return bindErr(syscall.EINVAL, "o10-37.2.30: a type 2 window is bound only from the free state (invalidate it first)")
		}
		if b.PD != w.pd {
			return bindErr(syscall.EINVAL, "C10-72: the QP's PD is not the window's")
		}
		if mr == nil {
			return bindErr(syscall.EINVAL, "o10-37.2.40: a type 2 window cannot be bound with zero length")
		}
	}
	if mr == nil {
		return nil
	}
	switch {
	case mr.PD != w.pd:
		return bindErr(syscall.EPERM, "the MR's PD is not the window's")
	case mr.Access&AccessMWBind == 0:
		return bindErr(syscall.EACCES, "C10-73: the MR was not registered with MW_BIND")
	case b.Access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && mr.Access&AccessLocalWrite == 0:
		return bindErr(syscall.EACCES, "C10-74: a writable window needs an MR with LOCAL_WRITE")
	case b.Addr < mr.Addr || b.Length > uint64(len(mr.Buf)) || b.Addr-mr.Addr > uint64(len(mr.Buf))-b.Length:
		return bindErr(syscall.EINVAL, "C10-75: window [%#x, +%d) outside the MR [%#x, +%d)", b.Addr, b.Length, mr.Addr, len(mr.Buf))
	}
	return nil
}

// Invalidate is LOCAL_INV and SEND_WITH_INV's responder half (IBA 10.6.7.2.5,
// rxe_invalidate_mw): only a bound type 2 window, by its exact rkey, from a QP of its
// PD and, bound as 2B, from its QP. An ibv_reg_mr MR is no fast-registration MR and
// cannot be invalidated (rxe_invalidate_mr). The window becomes free, its rkey dead.
func (m *memory) Invalidate(rkey, qpn, pd uint32) error {
	m.mwMu.Lock()
	defer m.mwMu.Unlock()
	w := m.windowOf(rkey)
	if w == nil {
		if m.LocalRegion(rkey) != nil || m.RemoteRegion(rkey) != nil {
			return bindErr(syscall.EINVAL, "key %#x is an MR's; only type 2 memory windows can be invalidated", rkey)
		}
		return bindErr(syscall.EINVAL, "no memory window has rkey %#x", rkey)
	}
	switch {
	case w.rkey != rkey:
		return bindErr(syscall.EINVAL, "rkey %#x does not carry the window's key byte (%#x)", rkey, w.rkey)
	case w.typ == MWType1:
		return bindErr(syscall.EINVAL, "o10-37.2.26: a type 1 window cannot be invalidated")
	case w.state != mwValid:
		return bindErr(syscall.EINVAL, "the window is not bound")
	case w.pd != pd:
		return bindErr(syscall.EINVAL, "the QP's PD is not the window's")
	case w.qpn != qpn:
		return bindErr(syscall.EINVAL, "the window is bound to QP %#x, not %#x", w.qpn, qpn)
	}
	s := m.shard(w.rkey)
	s.mu.Lock()
	m.unbindLocked(w)
	w.state = mwFree
	s.mu.Unlock()
	return nil
}

// String describes the window for messages and tests.
func (w *window) String() string {
	return fmt.Sprintf("mw type %d rkey %#x", w.typ, w.rkey)
}
