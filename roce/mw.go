package roce

import (
	"fmt"
	"sync"
	"syscall"
)

// MWType is the type of a memory window (enum ibv_mw_type).
type MWType uint8

// Memory window types with their libibverbs values.
const (
	// MWType1 is bound with QP.BindMW (ibv_bind_mw), stays bound until it is
	// bound again (a zero-length bind unbinds it) or deallocated, and cannot be
	// invalidated.
	MWType1 MWType = 1 // IBV_MW_TYPE_1
	// MWType2 is type 2B, as on rxe: bound by a BIND_MW work request to the QP
	// that posts it, used only through that QP, and freed again by LOCAL_INV
	// or by a peer's SEND_WITH_INV naming its rkey.
	MWType2 MWType = 2 // IBV_MW_TYPE_2
)

// String returns "type 1" or "type 2".
func (t MWType) String() string { return fmt.Sprintf("type %d", uint8(t)) }

// MW is a memory window (struct ibv_mw): a window onto part of an MR with its own
// rkey and its own remote access rights, which can be moved or revoked without
// deregistering the MR.
type MW struct {
	pd  *PD
	typ MWType
	w   *window
	obj string

	// mu guards: closed.
	mu     sync.Mutex
	closed bool
}

// AllocMW is ibv_alloc_mw. The window grants nothing until it is bound. EINVAL for
// a type other than MWType1 and MWType2; ENOMEM when max_mw windows exist.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	const op = "ibv_alloc_mw"
	d := pd.dev
	obj := d.obj("pd", pd.id)
	if typ != MWType1 && typ != MWType2 {
		return nil, newErr(op, obj, syscall.EINVAL, "memory window type %d", typ)
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	if !reserve(&d.nMW, d.limits.MaxMW) {
		pd.release()
		return nil, newErr(op, obj, syscall.ENOMEM, "max_mw %d reached", d.limits.MaxMW)
	}
	w, err := d.mem.allocWindow(typ, pd.id)
	if err != nil {
		d.nMW.Add(-1)
		pd.release()
		return nil, newErr(op, obj, syscall.ENOMEM, "no key: %v", err)
	}
	return &MW{pd: pd, typ: typ, w: w, obj: fmt.Sprintf("mw %#x", w.rkey>>8)}, nil
}

// RKey returns the window's current rkey (mw->rkey): its index, fixed for the
// window's life, and the key byte of its latest bind. A peer must use the rkey of
// the bind it was told about; an older one resolves to nothing.
func (mw *MW) RKey() uint32 {
	m := mw.pd.dev.mem
	s := m.shard(mw.w.rkey)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return mw.w.rkey
}

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// PD returns the protection domain of the window.
func (mw *MW) PD() *PD { return mw.pd }

// String formats the window as "mw type 2 rkey 0x…".
func (mw *MW) String() string { return fmt.Sprintf("mw %v rkey %#x", mw.typ, mw.RKey()) }

// Close is ibv_dealloc_mw. A bound window is unbound first, so its MR may be
// deregistered afterwards. Once Close returns, the window's rkey resolves to
// nothing and no access the engine started through it is still running (the same
// barrier as MR.Close).
func (mw *MW) Close() error {
	const op = "ibv_dealloc_mw"
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if mw.closed {
		return newClosedObjErr(op, mw.obj, "mw")
	}
	mw.closed = true
	d := mw.pd.dev
	d.mem.deallocWindow(mw.w)
	if !d.closed.Load() {
		d.barrier()
	}
	d.nMW.Add(-1)
	mw.pd.release()
	return nil
}

// IncRKey is ibv_inc_rkey: rkey with its key byte (the low 8 bits) advanced by
// one. Pass IncRKey(mw.RKey()) as the new rkey of a BIND_MW work request, so a
// peer still holding the previous rkey is refused.
func IncRKey(rkey uint32) uint32 { return rkey&^keyByteMask | (rkey+1)&keyByteMask }
