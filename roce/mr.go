package roce

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"github.com/goroce/goroce/internal/core/attach"
	"github.com/goroce/goroce/internal/core/transport"
)

// MR is a registered memory region (struct ibv_mr) over a Go byte slice, which the
// engine reads and writes directly, as a NIC does DMA: while a WR names the MR or the
// peer may RDMA into it, the program must not touch the bytes (as in C; the race
// detector cannot see the engine's accesses as synchronised with yours).
type MR struct {
	pd  *PD
	reg *transport.Region

	// mu guards: closed.
	mu     sync.Mutex
	closed bool
}

// RegMR is ibv_reg_mr. The MR's Addr is that of buf[0] in this process, so addresses
// are computed as in C: mr.Addr()+offset. The lkey and rkey differ and are random.
//
// Errors: EINVAL for an empty buf, a length above max_mr_size, unknown access bits, or
// REMOTE_WRITE / REMOTE_ATOMIC without LOCAL_WRITE (ibv_reg_mr(3)); EOPNOTSUPP for
// ON_DEMAND, ZERO_BASED and HUGETLB, as on rxe; ENOMEM when max_mr MRs exist. Flags of
// AccessOptionalRange (AccessRelaxedOrdering, ...) are accepted and dropped, as
// libibverbs does when the kernel cannot take them: Access does not report them.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	return pd.regMR("ibv_reg_mr", buf, goAddr(buf), access)
}

// RegMRIOVA is ibv_reg_mr_iova: RegMR with iova as the address of buf[0] on the wire
// and in SGEs: iova+off is buf[off], and anything outside [iova, iova+len(buf)) is
// refused (a remote access error for a peer). An iova of 0 makes the MR zero based, as
// the man page says.
//
// Errors: those of RegMR, and EINVAL when iova+len(buf) wraps around 2^64 or when iova
// and buf[0] lie at different page offsets (the kernel's ib_uverbs_reg_mr rule).
func (pd *PD) RegMRIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	const op = "ibv_reg_mr_iova"
	obj := pd.dev.obj("pd", pd.id)
	page := uint64(os.Getpagesize())
	switch {
	case len(buf) > 0 && iova+uint64(len(buf)) < iova:
		return nil, newErr(op, obj, syscall.EINVAL, "iova %#x + length %d wraps around", iova, len(buf))
	case iova%page != goAddr(buf)%page:
		return nil, newErr(op, obj, syscall.EINVAL, "iova %#x and the buffer (%#x) lie at different page offsets", iova, goAddr(buf))
	}
	return pd.regMR(op, buf, iova, access)
}

// goAddr is the process address of buf[0] (0 for an empty slice).
func goAddr(buf []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))) }

func (pd *PD) regMR(op string, buf []byte, iova uint64, access Access) (*MR, error) {
	obj := pd.dev.obj("pd", pd.id)
	switch {
	case len(buf) == 0:
		return nil, newErr(op, obj, syscall.EINVAL, "empty buffer")
	case uint64(len(buf)) > pd.dev.limits.MaxMRSize:
		return nil, newErr(op, obj, syscall.EINVAL, "length %d above max_mr_size %d", len(buf), pd.dev.limits.MaxMRSize)
	}
	access, err := checkMRAccess(op, obj, access)
	if err != nil {
		return nil, err
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	d := pd.dev
	if !reserve(&d.nMR, d.limits.MaxMR) {
		pd.release()
		return nil, newErr(op, obj, syscall.ENOMEM, "max_mr %d reached", d.limits.MaxMR)
	}
	if err := d.charge(attach.KindMR, op, obj); err != nil {
		d.nMR.Add(-1)
		pd.release()
		return nil, err
	}
	r := &transport.Region{
		PD:     pd.id,
		Addr:   iova,
		Buf:    buf,
		Access: access,
	}
	if err := d.mem.register(r); err != nil {
		d.uncharge(attach.KindMR)
		d.nMR.Add(-1)
		pd.release()
		return nil, newErr(op, obj, syscall.ENOMEM, "no key: %v", err)
	}
	return &MR{pd: pd, reg: r}, nil
}

// LKey returns the local key, for SGEs.
func (mr *MR) LKey() uint32 { return mr.reg.LKey }

// RKey returns the remote key, for the peer's RDMA and atomic WRs.
func (mr *MR) RKey() uint32 { return mr.reg.RKey }

// Addr returns the region's address: of buf[0] in this process, or RegMRIOVA's iova.
func (mr *MR) Addr() uint64 { return mr.reg.Addr }

func (mr *MR) Len() int { return len(mr.reg.Buf) }

func (mr *MR) Buf() []byte { return mr.reg.Buf }

func (mr *MR) Access() Access { return mr.reg.Access }

func (mr *MR) PD() *PD { return mr.pd }

// String formats the MR as "mr lkey 0x… rkey 0x… len N".
func (mr *MR) String() string {
	return fmt.Sprintf("mr lkey %#x rkey %#x len %d", mr.reg.LKey, mr.reg.RKey, len(mr.reg.Buf))
}

// Close is ibv_dereg_mr. Once it returns, the keys resolve to nothing and no access
// through them is still running (Engine.Barrier), so no remote write lands in the
// buffer afterwards; WRs that still name the keys complete with an error, as in C.
// EBUSY, changing nothing, while memory windows are bound to the MR (rxe says EINVAL;
// EBUSY is this device's errno for every object destroyed while in use).
func (mr *MR) Close() error {
	const op = "ibv_dereg_mr"
	mr.mu.Lock()
	defer mr.mu.Unlock()
	if mr.closed {
		return newClosedObjErr(op, fmt.Sprintf("mr %#x", mr.reg.LKey), "mr")
	}
	d := mr.pd.dev
	if !d.mem.unregister(mr.reg) {
		return newErr(op, fmt.Sprintf("mr %#x", mr.reg.LKey), syscall.EBUSY, "memory windows are still bound to it")
	}
	mr.closed = true
	if !d.closed.Load() {
		d.barrier()
	}
	d.nMR.Add(-1)
	d.uncharge(attach.KindMR)
	mr.pd.release()
	return nil
}
