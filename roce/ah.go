package roce

import (
	"sync"
	"syscall"
)

// AH is an address handle (struct ibv_ah): the destination of UD send WRs.
type AH struct {
	pd *PD
	av AddressVector

	// mu guards: closed.
	mu     sync.Mutex
	closed bool
}

// CreateAH is ibv_create_ah: EINVAL when attr is not a RoCEv2 route from this device
// (checkAV), ENOMEM when max_ah AHs exist. A multicast DGID makes an AH to the group.
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	const op = "ibv_create_ah"
	d := pd.dev
	obj := d.obj("pd", pd.id)
	if err := d.checkAV(op, obj, &attr, true); err != nil {
		return nil, err
	}
	if err := pd.use(op); err != nil {
		return nil, err
	}
	if !reserve(&d.nAH, d.limits.MaxAH) {
		pd.release()
		return nil, newErr(op, obj, syscall.ENOMEM, "max_ah %d reached", d.limits.MaxAH)
	}
	return &AH{pd: pd, av: attr}, nil
}

// AV returns the address vector for SendWR.AH. The engine only reads it.
func (ah *AH) AV() *AddressVector { return &ah.av }

// Attr returns a copy of the AH's attributes (ibv_query_ah).
func (ah *AH) Attr() AHAttr { return ah.av }

// Close is ibv_destroy_ah. UD WRs already posted with the AH keep their copy of it.
func (ah *AH) Close() error {
	ah.mu.Lock()
	defer ah.mu.Unlock()
	if ah.closed {
		return newClosedObjErr("ibv_destroy_ah", "", "ah")
	}
	ah.closed = true
	ah.pd.dev.nAH.Add(-1)
	ah.pd.release()
	return nil
}

// checkAV validates an address vector: IsGlobal (RoCE carries every packet in a GRH); a
// destination of the device's IP family; a multicast group only where group allows it
// (an AH, never a connected QP's path); the source GID index of the RoCEv2 entry the
// socket is bound to. It normalises the destination (IPv4-mapped to IPv4) in place.
func (d *Device) checkAV(op, obj string, av *AddressVector, group bool) error {
	switch {
	case !av.IsGlobal:
		return newErr(op, obj, syscall.EINVAL, "RoCE requires a GRH (is_global)")
	case !av.DGID.IsValid() || av.DGID.IsUnspecified():
		return newErr(op, obj, syscall.EINVAL, "no destination GID")
	case av.DGID.IsMulticast() && !group:
		return newErr(op, obj, syscall.EINVAL, "a connected QP's path cannot lead to multicast group %v", av.DGID.Unmap())
	case int(av.SGIDIndex) >= len(d.gids):
		return newErr(op, obj, syscall.EINVAL, "sgid_index %d outside the GID table (%d entries)", av.SGIDIndex, len(d.gids))
	case int(av.SGIDIndex) != d.gidIdx:
		return newErr(op, obj, syscall.EINVAL, "sgid_index %d is the default GID, which the device does not send from; use %d", av.SGIDIndex, d.gidIdx)
	case av.FlowLabel >= 1<<20:
		return newErr(op, obj, syscall.EINVAL, "flow_label %#x exceeds 20 bits", av.FlowLabel)
	}
	dst := av.DGID.Unmap()
	if dst.Is4() != d.addr.Is4() {
		return newErr(op, obj, syscall.EINVAL, "destination %v and device %v are of different IP families", dst, d.addr)
	}
	av.DGID = dst
	return nil
}
