// Package cq is the completion queue: a fixed-capacity ring of work
// completions (struct ibv_wc) filled by the transport engine and drained by
// the user, with the semantics of the libibverbs CQ verbs.
//
// Mapping to libibverbs:
//
//	New(cqe, maxCQE)        ibv_create_cq       cqe in [1..max_cqe], else EINVAL; Cap() is cq->cqe
//	(*Queue).Poll(wc)       ibv_poll_cq         never blocks; (0, err) once an overrun CQ is drained
//	(*Queue).ReqNotify(s)   ibv_req_notify_cq   one-shot arm; solicited-only also fires on error status
//	(*Queue).Notify()       ibv_comp_channel +  select-able channel, capacity 1, events coalesce
//	                        ibv_get_cq_event
//	(*Queue).Resize(n, max) ibv_resize_cq       keeps completions and arming; EINVAL below count held
//	(*Queue).Close()        ibv_destroy_cq      EBUSY while QPs are attached
//	(*Queue).Attach/Detach  ibv_create_qp /     counts the QPs using the CQ
//	                        ibv_destroy_qp
//	(*Queue).Push(wc, se)   (device side)       rxe_cq_post: the engine posting a completion
//	verbs.WCStatus.String() ibv_wc_status_str
//
// Errors: every verb returns the verbs' one error type (roce.Error, defined in
// internal/core/verbserr), whose cause is a syscall.Errno, so
// errors.Is(err, syscall.EINVAL) works. The errnos used are:
//
//	EINVAL  bad cqe (create, resize), resize below the completions held,
//	        nil work completion; also (with net.ErrClosed) any use after Close
//	EBUSY   Close while QPs are attached
//	ENOSPC  the Push that overran the CQ (also matches ErrOverrun)
//	EIO     Push, ReqNotify and Resize on a CQ in the error state
//
// Overrun follows rxe: the completion that does not fit is the one lost,
// nothing already held is lost, and the CQ enters a permanent error state
// (Err() != nil). The engine raises IBV_EVENT_CQ_ERR and moves the QPs that
// feed the CQ to the error state. Held completions can still be polled.
//
// Concurrency: one mutex per queue (producers are engine shards, the
// consumer is the user). Push and Poll do not allocate.
package cq
