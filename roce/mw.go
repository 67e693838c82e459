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
	// MWType1 is bound by QP.BindMW until rebound or deallocated; never invalidated.
	MWType1 MWType = 1 // IBV_MW_TYPE_1
	// MWType2 is type 2B: bound to the posting QP by a BIND_MW WR and used only through
	// it; freed by LOCAL_INV or a peer's SEND_WITH_INV.
	MWType2 MWType = 2 // IBV_MW_TYPE_2
)

func (t MWType) String() string { return fmt.Sprintf("type %d", uint8(t)) }

// MW is a memory window (struct ibv_mw): an rkey onto part of an MR with its own
// rights, moved or revoked without deregistering the MR.
type MW struct {
	pd  *PD
	typ MWType
	w   *window
	obj string

	// mu guards: closed.
	mu     sync.Mutex
	closed bool
}

// AllocMW is ibv_alloc_mw; the window grants nothing until bound. EINVAL for a type
// other than MWType1 and MWType2; ENOMEM when max_mw windows exist.
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

// RKey returns the window's current rkey (mw->rkey): its fixed index and the key byte
// of its latest bind; an older rkey resolves to nothing.
func (mw *MW) RKey() uint32 {
	m := mw.pd.dev.mem
	s := m.shard(mw.w.rkey)
	s.mu.RLock()
	defer s.mu.RUnlock()
	return mw.w.rkey
}

func (mw *MW) Type() MWType { return mw.typ }

func (mw *MW) PD() *PD { return mw.pd }

// String formats the window as "mw type 2 rkey 0x…".
func (mw *MW) String() string { return fmt.Sprintf("mw %v rkey %#x", mw.typ, mw.RKey()) }

// Close is ibv_dealloc_mw; a bound window is unbound first, freeing its MR. Once it
// returns the rkey resolves to nothing, with the same barrier as MR.Close.
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

// IncRKey is ibv_inc_rkey: rkey with its key byte (low 8 bits) advanced by one, the new
// rkey of a BIND_MW WR, so a peer holding the previous rkey is refused.
func IncRKey(rkey uint32) uint32 { return rkey&^keyByteMask | (rkey+1)&keyByteMask }

// MWBindInfo is struct ibv_mw_bind_info: the MR range a window opens onto and the
// rights it grants; MR nil with Addr and Length 0 unbinds a type 1 window.
type MWBindInfo struct {
	MR           *MR
	Addr, Length uint64 // the range of the MR, by its address (MR.Addr()+offset)
	Access       Access // mw_access_flags: AccessRemoteRead, Write, Atomic
}

// MWBind is struct ibv_mw_bind: the send WR that binds a type 1 window.
type MWBind struct {
	WRID  uint64
	Flags SendFlags // SendSignaled asks for the IBV_WC_BIND_MW completion
	Info  MWBindInfo
}

// Bind returns a BIND_MW WR body (SendWR.BindMW) binding the window to info with the
// next key byte (MWRKey now, RKey IncRKey of it). Post it with WRBindMW on an RC or UC
// QP of the window's PD; once it has completed, RKey is the window's rkey.
func (mw *MW) Bind(info MWBindInfo) MWBindWR {
	k := mw.RKey()
	b := MWBindWR{MWRKey: k, RKey: IncRKey(k), Addr: info.Addr, Length: info.Length, Access: info.Access}
	if info.MR != nil {
		b.MRLKey = info.MR.LKey()
	}
	return b
}

// BindMW is ibv_bind_mw for a type 1 window: it posts a BIND_MW WR on q and returns the
// window's rkey once it is executed (key byte plus one, as rxe's provider). The bind
// runs in order with q's send WRs and completes with WCBindMW (signaled) or
// WCMWBindErr, leaving the QP in ERR, when IBA 10.6.7.2 refuses it (the MR needs
// AccessMWBind, and LOCAL_WRITE for a writable window; the range must lie inside it).
// Post the window's next bind once this one has completed.
//
// Errors, as libibverbs and rxe: EINVAL for a window not of type 1, an MR-less bind
// with an address or length, AccessZeroBased, or a QP not RC or UC; EPERM for an MR of
// another PD; and PostSend's.
func (q *QP) BindMW(mw *MW, b MWBind) (uint32, error) {
	const op = "ibv_bind_mw"
	i := b.Info
	switch {
	case mw.typ != MWType1:
		return 0, newErr(op, q.obj, syscall.EINVAL, "%v: a type 2 window is bound by a BIND_MW work request", mw)
	case i.MR == nil && (i.Addr != 0 || i.Length != 0):
		return 0, newErr(op, q.obj, syscall.EINVAL, "an address or length without an MR")
	case i.MR != nil && i.MR.pd != mw.pd:
		return 0, newErr(op, q.obj, syscall.EPERM, "the MR and the window belong to different PDs")
	case i.Access&AccessZeroBased != 0:
		return 0, newErr(op, q.obj, syscall.EINVAL, "a type 1 window cannot be zero based")
	case q.init.Type != QPTypeRC && q.init.Type != QPTypeUC:
		return 0, newErr(op, q.obj, syscall.EINVAL, "windows are bound on RC and UC QPs")
	}
	wr := SendWR{WRID: b.WRID, Opcode: WRBindMW, Flags: b.Flags, BindMW: mw.Bind(i)}
	if _, err := q.PostSend([]SendWR{wr}); err != nil {
		return 0, wrapErr(op, q.obj, -1, err)
	}
	return wr.BindMW.RKey, nil
}
