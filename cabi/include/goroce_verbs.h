/*
 * goroce_verbs.h: what the two halves of goroce's libibverbs share.
 *
 * The C half (cabi/verbs) lays out rdma-core's ABI structs and fills the ops
 * tables; the Go half (cabi/engine, built into libgoroce.so) runs the verbs on
 * package roce. Every object a program sees is allocated by the C half as one of
 * the structs below: the libibverbs struct first, so the pointer the program holds
 * is also ours, then the Go handle (a runtime/cgo.Handle) of the object behind it.
 *
 * The structs follow the headers of the rdma-core release the library is built
 * against (Debian 12: rdma-core 44); the C half checks their sizes at build time.
 */
#ifndef GOROCE_VERBS_H
#define GOROCE_VERBS_H

#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <infiniband/verbs.h>

/* A device context. verbs_context must end with the ibv_context the program
 * holds, so our fields come before it. */
struct gr_context {
	uintptr_t h;
	int dev_index;
	struct verbs_context vctx;
};

struct gr_pd {
	struct ibv_pd pd;
	uintptr_t h;
};

struct gr_mr {
	struct ibv_mr mr;
	uintptr_t h;
};

struct gr_mw {
	struct ibv_mw mw;
	uintptr_t h;
};

struct gr_ah {
	struct ibv_ah ah;
	uintptr_t h;
};

struct gr_channel {
	struct ibv_comp_channel ch;
	uintptr_t h;
};

/* GR_CQ_EX_BATCH is how many completions ibv_start_poll takes from the engine at
 * once; the ibv_cq_ex read_* functions then read them one by one. */
#define GR_CQ_EX_BATCH 16

/* Every CQ is allocated as an ibv_cq_ex (whose head is struct ibv_cq), so one
 * type serves ibv_create_cq and ibv_create_cq_ex. */
struct gr_cq {
	struct ibv_cq_ex cq;
	uintptr_t h;
	uint64_t wc_flags;          /* ibv_create_cq_ex's wc_flags; 0 for ibv_create_cq */
	uint32_t comp_events_delivered;  /* returned by ibv_get_cq_event */
	uint32_t async_events_delivered; /* returned by ibv_get_async_event */
	/* The extended poll state: batch[pos] is the current completion. */
	int n, pos;
	struct ibv_wc batch[GR_CQ_EX_BATCH];
};

struct gr_srq {
	struct ibv_srq srq;
	uintptr_t h;
	uint32_t events_delivered;
};

/* GR_WR_MAX_SGE bounds the SGEs of one WR built through ibv_qp_ex. */
#define GR_WR_MAX_SGE 32

/* One WR under construction between ibv_wr_start and ibv_wr_complete. */
struct gr_wr {
	struct ibv_send_wr wr;
	struct ibv_sge sge[GR_WR_MAX_SGE];
	unsigned char *inl;  /* inline data copied at ibv_wr_set_inline_data*, owned */
};

/* Every QP is allocated as an ibv_qp_ex (whose head is struct ibv_qp). */
struct gr_qp {
	struct ibv_qp_ex qpx;
	uintptr_t h;
	int is_ex;          /* created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS */
	uint64_t send_ops_flags;
	uint32_t events_delivered;
	/* The extended send API's WRs, between wr_start and wr_complete. */
	struct gr_wr *wrs;
	int nwr, capwr;
	int wr_err;         /* the first error a wr_* call met; wr_complete returns it */
};

/* Views of the unions of struct ibv_send_wr and struct ibv_wc, which cgo cannot
 * name: the Go half reads a union member through its view at the union's offset. */
struct gr_wr_rdma {
	uint64_t remote_addr;
	uint32_t rkey;
};
struct gr_wr_atomic {
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint32_t rkey;
};
struct gr_wr_ud {
	struct ibv_ah *ah;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
};
struct gr_wr_bind_mw {
	struct ibv_mw *mw;
	uint32_t rkey;
	struct ibv_mw_bind_info bind_info;
};

enum {
	GR_OFF_SWR_IMM = offsetof(struct ibv_send_wr, imm_data),
	GR_OFF_SWR_WR = offsetof(struct ibv_send_wr, wr),
	GR_OFF_SWR_BIND = offsetof(struct ibv_send_wr, bind_mw),
	GR_OFF_WC_IMM = offsetof(struct ibv_wc, imm_data),
};

/* An asynchronous event as the Go half queues it for ibv_get_async_event:
 * element is the C object it concerns (0 for a port or device event). */
struct gr_async_event {
	uintptr_t element;
	uint32_t type;
	uint32_t port;
};

#endif
