package roce

import "syscall"

// accessKnown is every flag the kernel knows (IB_ACCESS_SUPPORTED: bits 0 to 9
// and the optional range). Other bits are EINVAL.
const accessKnown = 1<<10 - 1 | AccessOptionalRange

// accessSupported is rxe's RXE_ACCESS_SUPPORTED_MR, which is also its
// RXE_ACCESS_SUPPORTED_QP: the remote rights, LOCAL_WRITE, MW_BIND, ON_DEMAND,
// both FLUSH placements and the optional range.
const accessSupported = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic |
	AccessMWBind | AccessOnDemand | AccessFlushGlobal | AccessFlushPersistent | AccessOptionalRange

// checkMRAccess applies the access rules of ibv_reg_mr(3), the kernel's
// ib_check_mr_access and rxe_reg_user_mr (RegMR lists them), and returns the
// flags to keep: the optional range removed.
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
