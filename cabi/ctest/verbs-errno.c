/*
 * verbs-errno: libibverbs calls with invalid arguments, one per row, and the errno each
 * returns, checked against the man pages. The same binary runs on any libibverbs:
 * goroce's (LD_LIBRARY_PATH=cabi/lib) or the system's with a kernel device (rxe), so the
 * interop suite compares goroce's answers with rxe's row by row.
 *
 *   verbs-errno [-d DEV] [-g GIDX] [-r ROW]
 *
 * Each row prints one line, "ROW got=ERRNO want=ERRNO ok|MISMATCH", where ERRNO is a name
 * (EINVAL) or 0 for success; the exit status is 0 when every row got what it wants, 1
 * otherwise, 2 when the device could not be set up. A row's calls need only the local
 * device: RC QPs that must be in RTS are connected to themselves.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

struct env {
	struct ibv_context *ctx;
	struct ibv_device_attr dev;
	struct ibv_port_attr port;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	union ibv_gid gid;
	int gidx;
	char buf[65536] __attribute__((aligned(4096)));
};

/* err is the errno of a call that returned a pointer (NULL on failure). */
static int err(void *p)
{
	return p ? 0 : errno;
}

/* ret is the errno of a call that returns 0 or an errno. */
static int ret(int r)
{
	return r;
}

/* WC_BASE + status is a row's result when the call was taken and its completion is
 * what the row checks. */
#define WC_BASE 1000

/* completion polls e's CQ for the completion of a WR just posted, for up to two
 * seconds, and returns WC_BASE + its status, or ETIMEDOUT. */
static int completion(struct env *e)
{
	struct ibv_wc wc;
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		int n = ibv_poll_cq(e->cq, 1, &wc);

		if (n < 0)
			return EIO;
		if (n == 1)
			return WC_BASE + wc.status;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 2000000000L);
	return ETIMEDOUT;
}

/* neg is the errno of a call that returns 0 or -1 with errno set. */
static int neg(int r)
{
	return r ? errno : 0;
}

static struct ibv_qp *new_qp(struct env *e, enum ibv_qp_type type, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a = {
		.send_cq = e->cq,
		.recv_cq = e->cq,
		.srq = srq,
		.qp_type = type,
		.cap = {.max_send_wr = 4, .max_recv_wr = srq ? 0 : 4, .max_send_sge = 1, .max_recv_sge = 1},
	};

	return ibv_create_qp(e->pd, &a);
}

/* rts brings an RC QP to RTS connected to itself, or a UD QP to RTS. */
static int rts(struct env *e, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = 0x11111111};
	int rc, ud = qp->qp_type == IBV_QPT_UD;

	rc = ibv_modify_qp(qp, &a,
			   IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | (ud ? IBV_QP_QKEY : IBV_QP_ACCESS_FLAGS));
	if (rc)
		return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	if (ud) {
		rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	} else {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = qp->qp_num;
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 12;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = e->gid;
		a.ah_attr.grh.sgid_index = e->gidx;
		a.ah_attr.grh.hop_limit = 1;
		a.ah_attr.port_num = 1;
		rc = ibv_modify_qp(qp, &a,
				   IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	}
	if (rc)
		return rc;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_SQ_PSN |
				     (ud ? 0 : IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
}

/* ---- rows ---- */

static int reg_mr_remote_write_needs_local_write(struct env *e)
{
	return err(ibv_reg_mr(e->pd, e->buf, 4096, IBV_ACCESS_REMOTE_WRITE));
}

static int reg_mr_remote_atomic_needs_local_write(struct env *e)
{
	return err(ibv_reg_mr(e->pd, e->buf, 4096, IBV_ACCESS_REMOTE_ATOMIC));
}

static int reg_mr_iova_other_page_offset(struct env *e)
{
	return err(ibv_reg_mr_iova(e->pd, e->buf, 4096, 0x10000 + 8, IBV_ACCESS_LOCAL_WRITE));
}

static int create_cq_zero(struct env *e)
{
	return err(ibv_create_cq(e->ctx, 0, NULL, NULL, 0));
}

static int create_cq_above_max_cqe(struct env *e)
{
	return err(ibv_create_cq(e->ctx, e->dev.max_cqe + 1, NULL, NULL, 0));
}

static int create_cq_bad_vector(struct env *e)
{
	return err(ibv_create_cq(e->ctx, 4, NULL, NULL, e->ctx->num_comp_vectors));
}

static int resize_cq_above_max_cqe(struct env *e)
{
	return ret(ibv_resize_cq(e->cq, e->dev.max_cqe + 1));
}

static int create_qp_above_max_qp_wr(struct env *e)
{
	struct ibv_qp_init_attr a = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = e->dev.max_qp_wr + 1, .max_recv_wr = 1,
					     .max_send_sge = 1, .max_recv_sge = 1}};

	return err(ibv_create_qp(e->pd, &a));
}

static int create_qp_above_max_sge(struct env *e)
{
	struct ibv_qp_init_attr a = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 1, .max_recv_wr = 1,
					     .max_send_sge = e->dev.max_sge + 1, .max_recv_sge = 1}};

	return err(ibv_create_qp(e->pd, &a));
}

static int create_qp_huge_inline(struct env *e)
{
	struct ibv_qp_init_attr a = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
					     .max_recv_sge = 1, .max_inline_data = 1 << 20}};

	return err(ibv_create_qp(e->pd, &a));
}

static int modify_qp_reset_to_rtr(struct env *e)
{
	struct ibv_qp *qp = new_qp(e, IBV_QPT_RC, NULL);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR};
	int r;

	if (!qp)
		return -1;
	r = ret(ibv_modify_qp(qp, &a, IBV_QP_STATE));
	ibv_destroy_qp(qp);
	return r;
}

static int modify_qp_init_without_port(struct env *e)
{
	struct ibv_qp *qp = new_qp(e, IBV_QPT_RC, NULL);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT};
	int r;

	if (!qp)
		return -1;
	r = ret(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS));
	ibv_destroy_qp(qp);
	return r;
}

static int modify_qp_wrong_cur_state(struct env *e)
{
	struct ibv_qp *qp = new_qp(e, IBV_QPT_RC, NULL);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .cur_qp_state = IBV_QPS_RTS, .port_num = 1};
	int r;

	if (!qp)
		return -1;
	r = ret(ibv_modify_qp(qp, &a,
			      IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
	ibv_destroy_qp(qp);
	return r;
}

static int post_recv_too_many_sge(struct env *e)
{
	struct ibv_qp *qp = new_qp(e, IBV_QPT_RC, NULL);
	struct ibv_mr *mr = ibv_reg_mr(e->pd, e->buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge g[2] = {{(uintptr_t)e->buf, 8, 0}, {(uintptr_t)e->buf + 8, 8, 0}};
	struct ibv_recv_wr wr = {.sg_list = g, .num_sge = 2}, *bad = NULL;
	int r = -1;

	if (qp && mr && !rts(e, qp)) {
		g[0].lkey = g[1].lkey = mr->lkey;
		r = ret(ibv_post_recv(qp, &wr, &bad));
		if (r && bad != &wr)
			r = -1;
	}
	if (qp)
		ibv_destroy_qp(qp);
	if (mr)
		ibv_dereg_mr(mr);
	return r;
}

static int post_recv_queue_full(struct env *e)
{
	struct ibv_qp *qp = new_qp(e, IBV_QPT_RC, NULL);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;
	struct ibv_recv_wr *wr = NULL, *bad = NULL;
	int r = -1, n;

	if (qp && !rts(e, qp) && !ibv_query_qp(qp, &qa, IBV_QP_CAP, &ia)) {
		/* One more than the receive queue holds (the device may have rounded it up). */
		n = qa.cap.max_recv_wr + 1;
		wr = calloc(n, sizeof(*wr));
		if (wr) {
			for (int i = 0; i + 1 < n; i++)
				wr[i].next = &wr[i + 1];
			r = ret(ibv_post_recv(qp, wr, &bad));
			if (r && bad != &wr[n - 1])
				r = -1;
		}
	}
	free(wr);
	if (qp)
		ibv_destroy_qp(qp);
	return r;
}

static int post_send_too_many_sge(struct env *e)
{
	struct ibv_qp *qp = new_qp(e, IBV_QPT_RC, NULL);
	struct ibv_mr *mr = ibv_reg_mr(e->pd, e->buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge g[2] = {{(uintptr_t)e->buf, 8, 0}, {(uintptr_t)e->buf + 8, 8, 0}};
	struct ibv_send_wr wr = {.sg_list = g, .num_sge = 2, .opcode = IBV_WR_SEND}, *bad = NULL;
	int r = -1;

	if (qp && mr && !rts(e, qp)) {
		g[0].lkey = g[1].lkey = mr->lkey;
		r = ret(ibv_post_send(qp, &wr, &bad));
		if (r && bad != &wr)
			r = -1;
	}
	if (qp)
		ibv_destroy_qp(qp);
	if (mr)
		ibv_dereg_mr(mr);
	return r;
}

/* ud_send posts on a UD QP in RTS a WR of opcode carrying len bytes to itself and
 * returns the post's errno, or with complete its completion's status. */
static int ud_send(struct env *e, enum ibv_wr_opcode opcode, int len, int complete)
{
	struct ibv_qp *qp = new_qp(e, IBV_QPT_UD, NULL);
	struct ibv_mr *mr = ibv_reg_mr(e->pd, e->buf, sizeof(e->buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_ah_attr aa = {.is_global = 1, .port_num = 1, .grh = {.dgid = e->gid, .sgid_index = e->gidx}};
	struct ibv_ah *ah = ibv_create_ah(e->pd, &aa);
	struct ibv_sge g = {(uintptr_t)e->buf, len, 0};
	struct ibv_send_wr wr = {.sg_list = &g, .num_sge = 1, .opcode = opcode, .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *bad = NULL;
	int r = -1;

	if (qp && mr && ah && !rts(e, qp)) {
		g.lkey = mr->lkey;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = qp->qp_num;
		wr.wr.ud.remote_qkey = 0x11111111;
		r = ret(ibv_post_send(qp, &wr, &bad));
		if (!r && complete)
			r = completion(e);
	}
	if (qp)
		ibv_destroy_qp(qp);
	if (ah)
		ibv_destroy_ah(ah);
	if (mr)
		ibv_dereg_mr(mr);
	return r;
}

static int post_send_rdma_write_on_ud(struct env *e)
{
	return ud_send(e, IBV_WR_RDMA_WRITE, 8, 0);
}

/* A UD message must fit in one packet: the WR is taken and completes with a
 * local length error, nothing sent. */
static int post_send_ud_above_mtu(struct env *e)
{
	return ud_send(e, IBV_WR_SEND, (128 << e->port.active_mtu) + 1, 1);
}

static int create_srq_above_max_srq_wr(struct env *e)
{
	struct ibv_srq_init_attr a = {.attr = {.max_wr = e->dev.max_srq_wr + 1, .max_sge = 1}};

	return err(ibv_create_srq(e->pd, &a));
}

static int modify_srq_limit_above_max_wr(struct env *e)
{
	struct ibv_srq_init_attr a = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(e->pd, &a);
	struct ibv_srq_attr m = {.srq_limit = 1000};
	int r;

	if (!srq)
		return -1;
	r = ret(ibv_modify_srq(srq, &m, IBV_SRQ_LIMIT));
	ibv_destroy_srq(srq);
	return r;
}

static int post_srq_recv_too_many_sge(struct env *e)
{
	struct ibv_srq_init_attr a = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(e->pd, &a);
	struct ibv_sge g[2] = {{(uintptr_t)e->buf, 8, 0}, {(uintptr_t)e->buf + 8, 8, 0}};
	struct ibv_recv_wr wr = {.sg_list = g, .num_sge = 2}, *bad = NULL;
	int r;

	if (!srq)
		return -1;
	r = ret(ibv_post_srq_recv(srq, &wr, &bad));
	ibv_destroy_srq(srq);
	return r;
}

static int destroy_cq_in_use(struct env *e)
{
	struct ibv_cq *cq = ibv_create_cq(e->ctx, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr a = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				     .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *qp;
	int r;

	if (!cq)
		return -1;
	qp = ibv_create_qp(e->pd, &a);
	if (!qp) {
		ibv_destroy_cq(cq);
		return -1;
	}
	r = ret(ibv_destroy_cq(cq));
	ibv_destroy_qp(qp);
	if (r)
		ibv_destroy_cq(cq);
	return r;
}

static int dealloc_pd_in_use(struct env *e)
{
	struct ibv_pd *pd = ibv_alloc_pd(e->ctx);
	struct ibv_mr *mr;
	int r;

	if (!pd)
		return -1;
	mr = ibv_reg_mr(pd, e->buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	if (!mr) {
		ibv_dealloc_pd(pd);
		return -1;
	}
	r = ret(ibv_dealloc_pd(pd));
	ibv_dereg_mr(mr);
	if (r)
		ibv_dealloc_pd(pd);
	return r;
}

static int destroy_comp_channel_in_use(struct env *e)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(e->ctx);
	struct ibv_cq *cq;
	int r;

	if (!ch)
		return -1;
	cq = ibv_create_cq(e->ctx, 4, NULL, ch, 0);
	if (!cq) {
		ibv_destroy_comp_channel(ch);
		return -1;
	}
	r = ret(ibv_destroy_comp_channel(ch));
	ibv_destroy_cq(cq);
	if (r)
		ibv_destroy_comp_channel(ch);
	return r;
}

static int query_gid_past_table(struct env *e)
{
	union ibv_gid g;

	return neg(ibv_query_gid(e->ctx, 1, e->port.gid_tbl_len, &g));
}

static int query_port_2(struct env *e)
{
	struct ibv_port_attr p;

	return ret(ibv_query_port(e->ctx, 2, &p));
}

static int create_ah_without_grh(struct env *e)
{
	struct ibv_ah_attr a = {.is_global = 0, .dlid = 1, .port_num = 1};

	return err(ibv_create_ah(e->pd, &a));
}

static int create_ah_bad_sgid_index(struct env *e)
{
	struct ibv_ah_attr a = {.is_global = 1, .port_num = 1, .grh = {.dgid = e->gid, .sgid_index = 255}};

	return err(ibv_create_ah(e->pd, &a));
}

static int alloc_mw_bad_type(struct env *e)
{
	return err(ibv_alloc_mw(e->pd, (enum ibv_mw_type)3));
}

static int attach_mcast_on_rc(struct env *e)
{
	struct ibv_qp *qp = new_qp(e, IBV_QPT_RC, NULL);
	union ibv_gid g = {.raw = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3}};
	int r;

	if (!qp)
		return -1;
	r = ret(ibv_attach_mcast(qp, &g, 0));
	ibv_destroy_qp(qp);
	return r;
}

struct row {
	const char *name;
	int (*run)(struct env *);
	int want;
};

static const struct row rows[] = {
	{"reg_mr_remote_write_needs_local_write", reg_mr_remote_write_needs_local_write, EINVAL},
	{"reg_mr_remote_atomic_needs_local_write", reg_mr_remote_atomic_needs_local_write, EINVAL},
	{"reg_mr_iova_other_page_offset", reg_mr_iova_other_page_offset, EINVAL},
	{"create_cq_zero", create_cq_zero, EINVAL},
	{"create_cq_above_max_cqe", create_cq_above_max_cqe, EINVAL},
	{"create_cq_bad_vector", create_cq_bad_vector, EINVAL},
	{"resize_cq_above_max_cqe", resize_cq_above_max_cqe, EINVAL},
	{"create_qp_above_max_qp_wr", create_qp_above_max_qp_wr, EINVAL},
	{"create_qp_above_max_sge", create_qp_above_max_sge, EINVAL},
	{"create_qp_huge_inline", create_qp_huge_inline, EINVAL},
	{"modify_qp_reset_to_rtr", modify_qp_reset_to_rtr, EINVAL},
	{"modify_qp_init_without_port", modify_qp_init_without_port, EINVAL},
	{"modify_qp_wrong_cur_state", modify_qp_wrong_cur_state, EINVAL},
	{"post_recv_too_many_sge", post_recv_too_many_sge, EINVAL},
	{"post_recv_queue_full", post_recv_queue_full, ENOMEM},
	{"post_send_too_many_sge", post_send_too_many_sge, EINVAL},
	{"post_send_rdma_write_on_ud", post_send_rdma_write_on_ud, EINVAL},
	{"post_send_ud_above_mtu", post_send_ud_above_mtu, WC_BASE + IBV_WC_LOC_LEN_ERR},
	{"create_srq_above_max_srq_wr", create_srq_above_max_srq_wr, EINVAL},
	{"modify_srq_limit_above_max_wr", modify_srq_limit_above_max_wr, EINVAL},
	{"post_srq_recv_too_many_sge", post_srq_recv_too_many_sge, EINVAL},
	{"destroy_cq_in_use", destroy_cq_in_use, EBUSY},
	{"dealloc_pd_in_use", dealloc_pd_in_use, EBUSY},
	{"destroy_comp_channel_in_use", destroy_comp_channel_in_use, EBUSY},
	{"query_gid_past_table", query_gid_past_table, EINVAL},
	{"query_port_2", query_port_2, EINVAL},
	{"create_ah_without_grh", create_ah_without_grh, EINVAL},
	{"create_ah_bad_sgid_index", create_ah_bad_sgid_index, EINVAL},
	{"alloc_mw_bad_type", alloc_mw_bad_type, EINVAL},
	{"attach_mcast_on_rc", attach_mcast_on_rc, EINVAL},
};

/* wcname is a completion status by its enum name, without IBV_WC_. */
static const char *wcname(int s)
{
	static const char *const names[] = {
		"SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR", "WR_FLUSH_ERR",
		"MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR",
		"REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR",
		"REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR", "GENERAL_ERR",
	};

	return s >= 0 && s < (int)(sizeof(names) / sizeof(names[0])) ? names[s] : "UNKNOWN";
}

static const char *errname(int e)
{
	static char bufs[2][64];
	static int k;
	char *other = bufs[k++ & 1]; /* two names per printf */

	switch (e) {
	case 0: return "0";
	case -1: return "SETUP_FAILED";
	case EINVAL: return "EINVAL";
	case ENOMEM: return "ENOMEM";
	case EBUSY: return "EBUSY";
	case ENOSYS: return "ENOSYS";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case EPERM: return "EPERM";
	case EACCES: return "EACCES";
	case EFAULT: return "EFAULT";
	case ENODATA: return "ENODATA";
	case ENOENT: return "ENOENT";
	case EAGAIN: return "EAGAIN";
	case ENODEV: return "ENODEV";
	case EIO: return "EIO";
	case ETIMEDOUT: return "ETIMEDOUT";
	case ERANGE: return "ERANGE";
	}
	if (e >= WC_BASE) {
		snprintf(other, sizeof(bufs[0]), "wc:%s", wcname(e - WC_BASE));
		return other;
	}
	snprintf(other, sizeof(bufs[0]), "errno%d", e);
	return other;
}

int main(int argc, char **argv)
{
	static struct env e;
	struct ibv_device **list;
	const char *dev = NULL, *only = NULL;
	int c, n, bad = 0;

	e.gidx = 1;
	while ((c = getopt(argc, argv, "d:g:r:")) != -1) {
		switch (c) {
		case 'd': dev = optarg; break;
		case 'g': e.gidx = atoi(optarg); break;
		case 'r': only = optarg; break;
		default:
			fprintf(stderr, "usage: verbs-errno [-d DEV] [-g GIDX] [-r ROW]\n");
			return 2;
		}
	}
	list = ibv_get_device_list(&n);
	if (!list || n == 0) {
		fprintf(stderr, "verbs-errno: no device\n");
		return 2;
	}
	for (int i = 0; i < n && !e.ctx; i++)
		if (!dev || !strcmp(ibv_get_device_name(list[i]), dev))
			e.ctx = ibv_open_device(list[i]);
	if (!e.ctx || ibv_query_device(e.ctx, &e.dev) || ibv_query_port(e.ctx, 1, &e.port) ||
	    ibv_query_gid(e.ctx, 1, e.gidx, &e.gid) || !(e.pd = ibv_alloc_pd(e.ctx)) ||
	    !(e.cq = ibv_create_cq(e.ctx, 64, NULL, NULL, 0))) {
		fprintf(stderr, "verbs-errno: cannot set up %s: %s\n", dev ? dev : "the first device", strerror(errno));
		return 2;
	}
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		int got;

		if (only && strcmp(only, rows[i].name))
			continue;
		got = rows[i].run(&e);
		printf("%s got=%s want=%s %s\n", rows[i].name, errname(got), errname(rows[i].want),
		       got == rows[i].want ? "ok" : "MISMATCH");
		bad |= got != rows[i].want;
	}
	ibv_destroy_cq(e.cq);
	ibv_dealloc_pd(e.pd);
	ibv_close_device(e.ctx);
	ibv_free_device_list(list);
	return bad;
}
