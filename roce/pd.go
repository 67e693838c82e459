package roce

import (
	"sync"
	"syscall"
)

// PD is a protection domain (struct ibv_pd): a QP touches only memory of its own PD.
type PD struct {
	dev *Device
	id  uint32

	// mu guards: users, closed.
	mu     sync.Mutex
	users  int // live MRs, AHs, SRQs and QPs
	closed bool
}

// AllocPD is ibv_alloc_pd.
func (d *Device) AllocPD() (*PD, error) {
	const op = "ibv_alloc_pd"
	if d.closed.Load() {
		return nil, closedErr(op, "")
	}
	if !reserve(&d.nPD, d.limits.MaxPD) {
		return nil, newErr(op, "", syscall.ENOMEM, "max_pd %d reached", d.limits.MaxPD)
	}
	return &PD{dev: d, id: d.ids.Add(1)}, nil
}

func (pd *PD) Device() *Device { return pd.dev }

// Handle returns the PD's number (the handle rdma-core prints).
func (pd *PD) Handle() uint32 { return pd.id }

// Close is ibv_dealloc_pd: EBUSY, changing nothing, while MRs, AHs, SRQs or QPs use the
// PD.
func (pd *PD) Close() error {
	const op = "ibv_dealloc_pd"
	obj := pd.dev.obj("pd", pd.id)
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return newClosedObjErr(op, obj, "pd")
	}
	if pd.users > 0 {
		return newErr(op, obj, syscall.EBUSY, "%d MRs, AHs, SRQs or QPs still use it", pd.users)
	}
	pd.closed = true
	pd.dev.nPD.Add(-1)
	return nil
}

// use takes a reference for a new child object, unless the PD or device is closed.
func (pd *PD) use(op string) error {
	if pd.dev.closed.Load() {
		return closedErr(op, "")
	}
	pd.mu.Lock()
	defer pd.mu.Unlock()
	if pd.closed {
		return newClosedObjErr(op, pd.dev.obj("pd", pd.id), "pd")
	}
	pd.users++
	return nil
}

// release drops a reference taken by use.
func (pd *PD) release() {
	pd.mu.Lock()
	pd.users--
	pd.mu.Unlock()
}
