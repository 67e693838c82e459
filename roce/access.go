package roce

import "syscall"

// accessKnown is IB_ACCESS_SUPPORTED (bits 0 to 9, the optional range); others: EINVAL.
const accessKnown = 1<<10 - 1 | AccessOptionalRange

// accessSupported is rxe's RXE_ACCESS_SUPPORTED_MR, also its RXE_ACCESS_SUPPORTED_QP.
const accessSupported = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic |
	AccessMWBind | AccessOnDemand | AccessFlushGlobal | AccessFlushPersistent | AccessOptionalRange

// checkMRAccess applies ibv_reg_mr(3)'s access rules (ib_check_mr_access,
// rxe_reg_user_mr) and returns the flags to keep, the optional range removed.
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

// checkQPAccess applies rxe's qp_access_flags rule (RXE_ACCESS_SUPPORTED_QP, else
// EINVAL) and returns the flags to keep, the optional range removed.
func checkQPAccess(op, obj string, access Access) (Access, error) {
	if access&^accessSupported != 0 {
		return 0, newErr(op, obj, syscall.EINVAL, "unsupported access flags %#x", uint32(access&^accessSupported))
	}
	return access &^ AccessOptionalRange, nil
}
