package roce

import "syscall"

// Access flags beyond the four remote/local rights (enum ibv_access_flags, with the
// libibverbs values).
const (
	// AccessMWBind lets memory windows be bound to the MR (C10-73).
	AccessMWBind Access = 1 << 4 // IBV_ACCESS_MW_BIND
	// AccessZeroBased addresses a memory window by its offset rather than by
	// address. Only a type 2 window bound through a BIND_MW work request may be
	// zero based (o10-36.2.2); an MR may not, as on rxe.
	AccessZeroBased Access = 1 << 5 // IBV_ACCESS_ZERO_BASED
	// AccessOnDemand asks for on-demand paging, which the device does not
	// offer: RegMR fails with EOPNOTSUPP, as the kernel answers without ODP.
	AccessOnDemand Access = 1 << 6 // IBV_ACCESS_ON_DEMAND
	// AccessHugeTLB promises huge pages behind an on-demand MR; rxe refuses it
	// with EOPNOTSUPP, and so does RegMR.
	AccessHugeTLB Access = 1 << 7 // IBV_ACCESS_HUGETLB
	// AccessFlushGlobal allows remote FLUSH with global-visibility placement.
	AccessFlushGlobal Access = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL
	// AccessFlushPersistent allows remote FLUSH with persistence placement. It
	// needs persistent memory, which Go memory never is: RegMR refuses it with
	// EINVAL, as rxe does for pages that are not pmem; a QP may carry it.
	AccessFlushPersistent Access = 1 << 9 // IBV_ACCESS_FLUSH_PERSISTENT
	// AccessRelaxedOrdering is the first optional flag (IBV_ACCESS_OPTIONAL_FIRST).
	AccessRelaxedOrdering Access = 1 << 20 // IBV_ACCESS_RELAXED_ORDERING
	// AccessOptionalRange is IBV_ACCESS_OPTIONAL_RANGE, bits 20 to 29: flags a
	// device may ignore. libibverbs strips them when the kernel cannot take
	// them, so a program that passes them still gets its MR; RegMR and Modify
	// accept and drop them the same way.
	AccessOptionalRange Access = (1<<30 - 1) &^ (1<<20 - 1)
)

// accessKnown is every flag the kernel knows (IB_ACCESS_SUPPORTED: bits 0 to 9
// and the optional range). Other bits are EINVAL.
const accessKnown = 1<<10 - 1 | AccessOptionalRange

// accessSupported is rxe's RXE_ACCESS_SUPPORTED_MR, which is also its
// RXE_ACCESS_SUPPORTED_QP: the remote rights, LOCAL_WRITE, MW_BIND, ON_DEMAND,
// both FLUSH placements and the optional range.
const accessSupported = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic |
	AccessMWBind | AccessOnDemand | AccessFlushGlobal | AccessFlushPersistent | AccessOptionalRange

// checkMRAccess applies the access rules of ibv_reg_mr(3), the kernel's
// ib_check_mr_access and rxe_reg_user_mr, and returns the flags to keep: the
// optional range removed. EINVAL for a bit the kernel does not know and for
// REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE ("If
// IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
// IBV_ACCESS_LOCAL_WRITE must be set too"); EOPNOTSUPP for ON_DEMAND (no ODP),
// ZERO_BASED and HUGETLB (outside RXE_ACCESS_SUPPORTED_MR); EINVAL for
// FLUSH_PERSISTENT, which only persistent memory may carry (rxe: "Page can't
// be persistent").
func checkMRAccess(op, obj string, access Access) (Access, error) {
	switch {
	case access&^accessKnown != 0:
		return 0, newErr(op, obj, syscall.EINVAL, "unknown access flags %#x", uint32(access&^accessKnown))
	case access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0:
		return 0, newErr(op, obj, syscall.EINVAL, "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE")
	case access&AccessOnDemand != 0:
		return 0, newErr(op, obj, syscall.EOPNOTSUPP, "on-demand paging is not supported")
	case access&^accessSupported != 0:
		return 0, newErr(op, obj, syscall.EOPNOTSUPP, "access flags %#x not supported on an MR", uint32(access&^accessSupported))
	case access&AccessFlushPersistent != 0:
		return 0, newErr(op, obj, syscall.EINVAL, "FLUSH_PERSISTENT needs persistent memory, and Go memory is not")
	}
	return access &^ AccessOptionalRange, nil
}

// checkQPAccess applies rxe's rule for qp_access_flags: EINVAL outside
// RXE_ACCESS_SUPPORTED_QP. It returns the flags to keep, the optional range
// removed as for an MR.
func checkQPAccess(op, obj string, access Access) (Access, error) {
	if access&^accessSupported != 0 {
		return 0, newErr(op, obj, syscall.EINVAL, "unsupported access flags %#x", uint32(access&^accessSupported))
	}
	return access &^ AccessOptionalRange, nil
}
