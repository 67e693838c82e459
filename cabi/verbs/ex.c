/*
 * ex.c: the extended QP (ibv_qp_ex: ibv_wr_start, ibv_wr_*, ibv_wr_complete)
 * and CQ (ibv_cq_ex: ibv_start_poll, ibv_next_poll, ibv_wc_read_*) interfaces.
 *
 * Both are built on the classic ones: ibv_wr_* collect struct ibv_send_wr that
 * ibv_wr_complete posts as one list, and ibv_start_poll takes a batch of
 * struct ibv_wc that the read_* functions then read one by one.
 */
#include "gr.h"

/* GR_WR_MAX bounds the WRs between ibv_wr_start and ibv_wr_complete; a send
 * queue is never deeper, so a longer batch could not be posted anyway. */
#define GR_WR_MAX (1 << 16)

static struct gr_qp *qpx(struct ibv_qp_ex *x)
{
	return (struct gr_qp *)x;
}

/* cur is the WR the last ibv_wr_<op> started, NULL before any. */
static struct gr_wr *cur(struct gr_qp *q)
{
	return q->nwr ? &q->wrs[q->nwr - 1] : NULL;
}

static void free_wrs(struct gr_qp *q)
{
	for (int i = 0; i < q->nwr; i++) {
		free(q->wrs[i].inl);
		q->wrs[i].inl = NULL;
	}
	q->nwr = 0;
	q->wr_err = 0;
}

/* begin starts a WR of opcode with the QP's wr_id and wr_flags. */
static struct gr_wr *begin(struct ibv_qp_ex *x, enum ibv_wr_opcode op)
{
	struct gr_qp *q = qpx(x);
	struct gr_wr *w;

	if (q->nwr == q->capwr) {
		int n = q->capwr ? 2 * q->capwr : 16;
		struct gr_wr *p;

		if (n > GR_WR_MAX || !(p = realloc(q->wrs, n * sizeof(*p)))) {
			if (!q->wr_err)
				q->wr_err = ENOMEM;
			return NULL;
		}
		q->wrs = p;
		q->capwr = n;
	}
	w = &q->wrs[q->nwr++];
	memset(w, 0, sizeof(*w));
	w->wr.wr_id = x->wr_id;
	w->wr.send_flags = x->wr_flags;
	w->wr.opcode = op;
	return w;
}

static void wr_rdma(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr)
{
	struct gr_wr *w = begin(x, op);

	if (w) {
		w->wr.wr.rdma.rkey = rkey;
		w->wr.wr.rdma.remote_addr = addr;
	}
}

static void gr_wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	wr_rdma(x, IBV_WR_RDMA_WRITE, rkey, addr);
}

static void gr_wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, __be32 imm)
{
	wr_rdma(x, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr);
	if (cur(qpx(x)))
		cur(qpx(x))->wr.imm_data = imm;
}

static void gr_wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	wr_rdma(x, IBV_WR_RDMA_READ, rkey, addr);
}

static void wr_atomic(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr, uint64_t compare_add,
		      uint64_t swap)
{
	struct gr_wr *w = begin(x, op);

	if (w) {
		w->wr.wr.atomic.rkey = rkey;
		w->wr.wr.atomic.remote_addr = addr;
		w->wr.wr.atomic.compare_add = compare_add;
		w->wr.wr.atomic.swap = swap;
	}
}

static void gr_wr_atomic_cmp_swp(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	wr_atomic(x, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, compare, swap);
}

static void gr_wr_atomic_fetch_add(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
	wr_atomic(x, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, add, 0);
}

static void gr_wr_atomic_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, const void *data)
{
	uint64_t v;

	memcpy(&v, data, sizeof(v));
	wr_atomic(x, IBV_WR_ATOMIC_WRITE, rkey, addr, 0, v);
}

static void gr_wr_send(struct ibv_qp_ex *x)
{
	begin(x, IBV_WR_SEND);
}

static void gr_wr_send_imm(struct ibv_qp_ex *x, __be32 imm)
{
	struct gr_wr *w = begin(x, IBV_WR_SEND_WITH_IMM);

	if (w)
		w->wr.imm_data = imm;
}

static void gr_wr_send_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct gr_wr *w = begin(x, IBV_WR_SEND_WITH_INV);

	if (w)
		w->wr.invalidate_rkey = rkey;
}

static void gr_wr_local_inv(struct ibv_qp_ex *x, uint32_t rkey)
{
	struct gr_wr *w = begin(x, IBV_WR_LOCAL_INV);

	if (w)
		w->wr.invalidate_rkey = rkey;
}

static void gr_wr_bind_mw(struct ibv_qp_ex *x, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
	struct gr_wr *w = begin(x, IBV_WR_BIND_MW);

	if (w) {
		w->wr.bind_mw.mw = mw;
		w->wr.bind_mw.rkey = rkey;
		w->wr.bind_mw.bind_info = *info;
	}
}

static void gr_wr_send_tso(struct ibv_qp_ex *x, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
	struct gr_qp *q = qpx(x);

	(void)hdr, (void)hdr_sz, (void)mss;
	/* TSO is for raw Ethernet QPs, which goroce does not have. */
	if (!q->wr_err)
		q->wr_err = EOPNOTSUPP;
}

static void gr_wr_set_xrc_srqn(struct ibv_qp_ex *x, uint32_t srqn)
{
	struct gr_qp *q = qpx(x);

	(void)srqn;
	if (!q->wr_err)
		q->wr_err = EOPNOTSUPP;
}

static void gr_wr_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct gr_wr *w = cur(qpx(x));

	if (w) {
		w->wr.wr.ud.ah = ah;
		w->wr.wr.ud.remote_qpn = qpn;
		w->wr.wr.ud.remote_qkey = qkey;
	}
}

static void gr_wr_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *l)
{
	struct gr_qp *q = qpx(x);
	struct gr_wr *w = cur(q);

	if (!w)
		return;
	if (n > GR_WR_MAX_SGE) {
		if (!q->wr_err)
			q->wr_err = EINVAL; /* more SGEs than any QP takes */
		return;
	}
	memcpy(w->sge, l, n * sizeof(*l));
	w->wr.sg_list = w->sge;
	w->wr.num_sge = n;
}

static void gr_wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge g = {.addr = addr, .length = length, .lkey = lkey};

	gr_wr_set_sge_list(x, 1, &g);
}

static void gr_wr_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *l)
{
	struct gr_qp *q = qpx(x);
	struct gr_wr *w = cur(q);
	size_t total = 0;
	unsigned char *p;

	if (!w)
		return;
	for (size_t i = 0; i < n; i++)
		total += l[i].length;
	free(w->inl);
	w->inl = p = malloc(total ? total : 1);
	if (!p) {
		if (!q->wr_err)
			q->wr_err = ENOMEM;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		memcpy(p, l[i].addr, l[i].length);
		p += l[i].length;
	}
	w->sge[0].addr = (uintptr_t)w->inl;
	w->sge[0].length = total;
	w->wr.sg_list = w->sge;
	w->wr.num_sge = 1;
	w->wr.send_flags |= IBV_SEND_INLINE;
}

static void gr_wr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};

	gr_wr_set_inline_data_list(x, 1, &b);
}

static void gr_wr_start(struct ibv_qp_ex *x)
{
	free_wrs(qpx(x));
}

static void gr_wr_abort(struct ibv_qp_ex *x)
{
	free_wrs(qpx(x));
}

/* gr_wr_complete posts the batch. An error a wr_* call met refuses the whole
 * batch; an error of the post itself leaves the WRs before the refused one
 * posted, as ibv_post_send does. */
static int gr_wr_complete(struct ibv_qp_ex *x)
{
	struct gr_qp *q = qpx(x);
	struct ibv_send_wr *bad;
	int e = q->wr_err;

	if (!e && q->nwr) {
		for (int i = 0; i < q->nwr; i++)
			q->wrs[i].wr.next = i + 1 < q->nwr ? &q->wrs[i + 1].wr : NULL;
		e = gr_op_post_send(&x->qp_base, &q->wrs[0].wr, &bad);
	}
	free_wrs(q);
	return e;
}

void gr_qp_ex_init(struct gr_qp *q)
{
	struct ibv_qp_ex *x = &q->qpx;

	x->comp_mask = 0;
	x->wr_atomic_cmp_swp = gr_wr_atomic_cmp_swp;
	x->wr_atomic_fetch_add = gr_wr_atomic_fetch_add;
	x->wr_bind_mw = gr_wr_bind_mw;
	x->wr_local_inv = gr_wr_local_inv;
	x->wr_rdma_read = gr_wr_rdma_read;
	x->wr_rdma_write = gr_wr_rdma_write;
	x->wr_rdma_write_imm = gr_wr_rdma_write_imm;
	x->wr_send = gr_wr_send;
	x->wr_send_imm = gr_wr_send_imm;
	x->wr_send_inv = gr_wr_send_inv;
	x->wr_send_tso = gr_wr_send_tso;
	x->wr_set_ud_addr = gr_wr_set_ud_addr;
	x->wr_set_xrc_srqn = gr_wr_set_xrc_srqn;
	x->wr_set_inline_data = gr_wr_set_inline_data;
	x->wr_set_inline_data_list = gr_wr_set_inline_data_list;
	x->wr_set_sge = gr_wr_set_sge;
	x->wr_set_sge_list = gr_wr_set_sge_list;
	x->wr_start = gr_wr_start;
	x->wr_complete = gr_wr_complete;
	x->wr_abort = gr_wr_abort;
	x->wr_atomic_write = gr_wr_atomic_write;
}

void gr_qp_ex_free(struct gr_qp *q)
{
	free_wrs(q);
	free(q->wrs);
	q->wrs = NULL;
	q->capwr = 0;
}

/* ---- ibv_cq_ex ---- */

static struct gr_cq *cqx(struct ibv_cq_ex *x)
{
	return (struct gr_cq *)x;
}

static struct ibv_wc *cur_wc(struct ibv_cq_ex *x)
{
	struct gr_cq *c = cqx(x);

	return &c->batch[c->pos];
}

/* load makes batch[pos] the current completion: status and wr_id are fields
 * of ibv_cq_ex the program reads directly. */
static void load(struct ibv_cq_ex *x)
{
	struct ibv_wc *w = cur_wc(x);

	x->status = w->status;
	x->wr_id = w->wr_id;
}

static int gr_start_poll(struct ibv_cq_ex *x, struct ibv_poll_cq_attr *attr)
{
	struct gr_cq *c = cqx(x);
	int n;

	if (attr && attr->comp_mask)
		return EINVAL;
	n = gr_op_poll_cq((struct ibv_cq *)x, GR_CQ_EX_BATCH, c->batch);
	if (n < 0)
		return EIO; /* the CQ overran */
	if (n == 0)
		return ENOENT;
	c->n = n;
	c->pos = 0;
	load(x);
	return 0;
}

static int gr_next_poll(struct ibv_cq_ex *x)
{
	struct gr_cq *c = cqx(x);
	int n;

	if (c->pos + 1 < c->n) {
		c->pos++;
		load(x);
		return 0;
	}
	n = gr_op_poll_cq((struct ibv_cq *)x, GR_CQ_EX_BATCH, c->batch);
	if (n < 0)
		return EIO;
	if (n == 0) {
		c->n = c->pos = 0;
		return ENOENT;
	}
	c->n = n;
	c->pos = 0;
	load(x);
	return 0;
}

static void gr_end_poll(struct ibv_cq_ex *x)
{
	struct gr_cq *c = cqx(x);

	c->n = c->pos = 0;
}

static enum ibv_wc_opcode gr_read_opcode(struct ibv_cq_ex *x)
{
	return cur_wc(x)->opcode;
}

static uint32_t gr_read_vendor_err(struct ibv_cq_ex *x)
{
	return cur_wc(x)->vendor_err;
}

static uint32_t gr_read_byte_len(struct ibv_cq_ex *x)
{
	return cur_wc(x)->byte_len;
}

static __be32 gr_read_imm_data(struct ibv_cq_ex *x)
{
	return cur_wc(x)->imm_data;
}

static uint32_t gr_read_qp_num(struct ibv_cq_ex *x)
{
	return cur_wc(x)->qp_num;
}

static uint32_t gr_read_src_qp(struct ibv_cq_ex *x)
{
	return cur_wc(x)->src_qp;
}

static unsigned int gr_read_wc_flags(struct ibv_cq_ex *x)
{
	return cur_wc(x)->wc_flags;
}

static uint32_t gr_read_slid(struct ibv_cq_ex *x)
{
	return cur_wc(x)->slid;
}

static uint8_t gr_read_sl(struct ibv_cq_ex *x)
{
	return cur_wc(x)->sl;
}

static uint8_t gr_read_dlid_path_bits(struct ibv_cq_ex *x)
{
	return cur_wc(x)->dlid_path_bits;
}

void gr_cq_ex_init(struct gr_cq *c)
{
	struct ibv_cq_ex *x = &c->cq;

	x->start_poll = gr_start_poll;
	x->next_poll = gr_next_poll;
	x->end_poll = gr_end_poll;
	x->read_opcode = gr_read_opcode;
	x->read_vendor_err = gr_read_vendor_err;
	x->read_byte_len = gr_read_byte_len;
	x->read_imm_data = gr_read_imm_data;
	x->read_qp_num = gr_read_qp_num;
	x->read_src_qp = gr_read_src_qp;
	x->read_wc_flags = gr_read_wc_flags;
	x->read_slid = gr_read_slid;
	x->read_sl = gr_read_sl;
	x->read_dlid_path_bits = gr_read_dlid_path_bits;
}
