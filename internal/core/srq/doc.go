// Package srq is the receive work queue used both as a shared receive queue
// (SRQ) and as a QP's own receive queue (rxe uses one type for both; a QP's
// RQ is simply never shared). The user posts receive WRs; the transport
// engine's shards take the head WR when a message that consumes one arrives.
//
// Mapping to libibverbs:
//
//	New(attr, caps)          ibv_create_srq     max_wr, max_sge in [1..device max]; actual values written back
//	(*Queue).PostRecv(wrs)   ibv_post_srq_recv  (n, err): err.Index is bad_wr; also ibv_post_recv on a QP's RQ
//	(*Queue).Modify(a, m)    ibv_modify_srq     verbs.SRQMaxWR, verbs.SRQLimit
//	(*Queue).Query()         ibv_query_srq      max_wr, max_sge, srq_limit
//	(*Queue).Close()         ibv_destroy_srq    EBUSY while QPs are attached
//	(*Queue).SetLimitHandler IBV_EVENT_SRQ_LIMIT_REACHED  one-shot; disarmed until armed again
//	(*Queue).SetError()      IBV_EVENT_SRQ_ERR  afterwards every verb but Close fails
//	(*Queue).Attach/Detach   ibv_create_qp /    counts the QPs using the SRQ
//	                         ibv_destroy_qp
//	(*Queue).Pop(dst)        (device side)      fetch of a receive request from the head, atomically
//	(*Queue).Flush(fn)       (device side)      flush of a QP's RQ with IBV_WC_WR_FLUSH_ERR
//
// Errors: every verb returns the verbs' one error type (roce.Error, defined in
// internal/core/verbserr), whose cause is a syscall.Errno, so
// errors.Is(err, syscall.ENOMEM) works. The errnos used are:
//
//	EINVAL  out-of-range max_wr, max_sge or srq_limit; resize below the WRs
//	        outstanding or the armed limit; unknown mask bits; num_sge above
//	        max_sge on post; also (with net.ErrClosed) any use after Close
//	ENOMEM  PostRecv on a full queue
//	ENOSYS  Modify with SRQMaxWR when Caps.Resize is false
//	EBUSY   Close while QPs are attached
//	EIO     PostRecv, Modify, Query after SetError (SRQ_ERR). The pages only
//	        say these verbs fail; EIO is what a device in catastrophic error
//	        returns from its verbs (mlx5's post_srq_recv does).
//
// Modify validates every attribute before changing any, so a failed Modify
// leaves the queue exactly as it was (ibv_modify_srq(3)).
//
// Concurrency: one mutex per queue; storage for every WR and its SGEs is
// preallocated, so PostRecv and Pop do not allocate in steady state. The
// limit handler runs outside the lock.
package srq
