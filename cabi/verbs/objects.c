/*
 * objects.c: the verbs objects of goroce's libibverbs.so.1 (PD, MR, MW, CQ and
 * completion channels, SRQ, QP, AH), each a libibverbs struct with the Go
 * handle of the object behind it.
 */
#include <time.h>
#include <unistd.h>
#include "gr.h"

/* ---- PD ---- */

struct ibv_pd *gr_alloc_pd_1_1(struct ibv_context *ctx)
{
	struct gr_pd *p;
	int e;

	if (gr_child_refuses())
		return NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return gr_fail(ENOMEM);
	e = gr_alloc_pd(GR_CTX(ctx)->h, &p->h);
	if (e) {
		free(p);
		return gr_fail(e);
	}
	p->pd.context = ctx;
	return &p->pd;
}
SYMVER(gr_alloc_pd_1_1, ibv_alloc_pd, "IBVERBS_1.1");

int gr_dealloc_pd_1_1(struct ibv_pd *pd)
{
	int e;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	e = gr_dealloc_pd(GR_PD(pd)->h);
	if (e)
		return e;
	free(pd);
	return 0;
}
SYMVER(gr_dealloc_pd_1_1, ibv_dealloc_pd, "IBVERBS_1.1");

/* ---- MR ---- */

/* The access flags a program may pass that the device may ignore
 * (IBV_ACCESS_OPTIONAL_RANGE): libibverbs drops them for a device that does not
 * take them, and so does goroce. */
#define GR_ACCESS_OPTIONAL 0x3ff00000u

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				unsigned int access)
{
	struct gr_mr *m;
	uint32_t lkey, rkey;
	int e;

	if (gr_child_refuses())
		return NULL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return gr_fail(ENOMEM);
	e = gr_reg_mr(GR_PD(pd)->h, addr, length, iova, access & ~GR_ACCESS_OPTIONAL, &m->h, &lkey, &rkey);
	if (e) {
		free(m);
		return gr_fail(e);
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.lkey = lkey;
	m->mr.rkey = rkey;
	return &m->mr;
}

#undef ibv_reg_mr
struct ibv_mr *gr_reg_mr_1_1(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}
SYMVER(gr_reg_mr_1_1, ibv_reg_mr, "IBVERBS_1.1");

#undef ibv_reg_mr_iova
struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}

int gr_dereg_mr_1_1(struct ibv_mr *mr)
{
	int e;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	e = gr_dereg_mr(GR_MR(mr)->h);
	if (e)
		return e;
	free(mr);
	return 0;
}
SYMVER(gr_dereg_mr_1_1, ibv_dereg_mr, "IBVERBS_1.1");

/* ibv_rereg_mr: the engine's MRs are immutable (as rxe's, which has no
 * rereg_mr), so every change is refused as a failed command. */
int gr_rereg_mr_1_1(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)mr, (void)pd, (void)addr, (void)length, (void)access;
	if (flags & ~(IBV_REREG_MR_FLAGS_SUPPORTED - 1)) {
		errno = EINVAL;
		return IBV_REREG_MR_ERR_INPUT;
	}
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_CMD;
}
SYMVER(gr_rereg_mr_1_1, ibv_rereg_mr, "IBVERBS_1.1");

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
				 int access)
{
	(void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
	/* A dma-buf is device memory a CPU engine cannot address. */
	return gr_fail(EOPNOTSUPP);
}

/* ---- MW (ops of struct ibv_context) ---- */

static struct ibv_mw *gr_op_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct gr_mw *w;
	uint32_t rkey;
	int e;

	if (gr_child_refuses())
		return NULL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return gr_fail(ENOMEM);
	e = gr_alloc_mw(GR_PD(pd)->h, type, &w->h, &rkey);
	if (e) {
		free(w);
		return gr_fail(e);
	}
	w->mw.context = pd->context;
	w->mw.pd = pd;
	w->mw.rkey = rkey;
	w->mw.type = type;
	return &w->mw;
}

static int gr_op_dealloc_mw(struct ibv_mw *mw)
{
	int e;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	e = gr_dealloc_mw(GR_MW(mw)->h);
	if (e)
		return e;
	free(mw);
	return 0;
}

static int gr_op_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw, struct ibv_mw_bind *bind)
{
	uint32_t rkey;
	int e;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	e = gr_bind_mw(GR_QP(qp)->h, GR_MW(mw)->h, bind, &rkey);
	if (e)
		return e;
	mw->rkey = rkey;
	return 0;
}

/* ---- completion channels ---- */

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct gr_channel *c;
	int e, fd;

	if (gr_child_refuses())
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return gr_fail(ENOMEM);
	e = gr_create_channel(GR_CTX(ctx)->h, &c->h, &fd);
	if (e) {
		free(c);
		return gr_fail(e);
	}
	c->ch.context = ctx;
	c->ch.fd = fd;
	return &c->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	struct ibv_context *ctx = ch->context;
	int e = 0;

	pthread_mutex_lock(&ctx->mutex);
	if (ch->refcnt)
		e = EBUSY;
	else
		e = gr_destroy_channel(GR_CH(ch)->h);
	pthread_mutex_unlock(&ctx->mutex);
	if (!e)
		free(ch);
	return e;
}

int gr_get_cq_event_1_1(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
	uintptr_t elem;
	uint64_t n;
	struct gr_cq *c;

	if (gr_child_refuses())
		return -1;
	for (;;) {
		/* Blocks, or fails with EAGAIN, as the program set the fd. */
		if (read(ch->fd, &n, sizeof(n)) != sizeof(n))
			return -1;
		if (gr_channel_pop(GR_CH(ch)->h, &elem) == 0)
			break;
	}
	c = (struct gr_cq *)elem;
	pthread_mutex_lock(&c->cq.mutex);
	c->comp_events_delivered++;
	pthread_mutex_unlock(&c->cq.mutex);
	*cq = (struct ibv_cq *)c;
	*cq_context = c->cq.cq_context;
	return 0;
}
SYMVER(gr_get_cq_event_1_1, ibv_get_cq_event, "IBVERBS_1.1");

void gr_ack_cq_events_1_1(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}
SYMVER(gr_ack_cq_events_1_1, ibv_ack_cq_events, "IBVERBS_1.1");

/* ---- CQ ---- */

static struct gr_cq *new_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *ch,
			    int comp_vector, uint64_t wc_flags)
{
	struct gr_cq *c;
	int e, got;

	if (gr_child_refuses())
		return NULL;
	if (comp_vector < 0 || comp_vector >= ctx->num_comp_vectors)
		return gr_fail(EINVAL);
	c = calloc(1, sizeof(*c));
	if (!c)
		return gr_fail(ENOMEM);
	e = gr_create_cq(GR_CTX(ctx)->h, cqe, ch ? GR_CH(ch)->h : 0, (uintptr_t)c, &c->h, &got);
	if (e) {
		free(c);
		return gr_fail(e);
	}
	c->cq.context = ctx;
	c->cq.channel = ch;
	c->cq.cq_context = cq_context;
	c->cq.cqe = got;
	c->wc_flags = wc_flags;
	pthread_mutex_init(&c->cq.mutex, NULL);
	pthread_cond_init(&c->cq.cond, NULL);
	if (ch) {
		pthread_mutex_lock(&ctx->mutex);
		ch->refcnt++;
		pthread_mutex_unlock(&ctx->mutex);
	}
	gr_cq_ex_init(c);
	return c;
}

struct ibv_cq *gr_create_cq_1_1(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *ch,
				int comp_vector)
{
	struct gr_cq *c = new_cq(ctx, cqe, cq_context, ch, comp_vector, 0);

	return c ? (struct ibv_cq *)c : NULL;
}
SYMVER(gr_create_cq_1_1, ibv_create_cq, "IBVERBS_1.1");

/* The completion fields an extended CQ can report (rxe's set). */
#define GR_WC_EX_FLAGS                                                                                       \
	(IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |       \
	 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS)

struct ibv_cq_ex *gr_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	struct gr_cq *c;

	if (attr->comp_mask & ~(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD))
		return gr_fail(EINVAL);
	/* Completion timestamps, flow tags, VLANs and tag matching need a NIC. */
	if (attr->wc_flags & ~(uint64_t)GR_WC_EX_FLAGS)
		return gr_fail(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) &&
	    (attr->flags & ~(IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN)))
		return gr_fail(EOPNOTSUPP);
	c = new_cq(ctx, attr->cqe, attr->cq_context, attr->channel, attr->comp_vector, attr->wc_flags);
	return c ? &c->cq : NULL;
}

int gr_resize_cq_1_1(struct ibv_cq *cq, int cqe)
{
	int e, got;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	e = gr_resize_cq(GR_CQ(cq)->h, cqe, &got);
	if (e)
		return e;
	cq->cqe = got;
	return 0;
}
SYMVER(gr_resize_cq_1_1, ibv_resize_cq, "IBVERBS_1.1");

int gr_destroy_cq_1_1(struct ibv_cq *cq)
{
	struct gr_cq *c = GR_CQ(cq);
	struct ibv_comp_channel *ch = cq->channel;
	int e;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	e = gr_destroy_cq(c->h);
	if (e)
		return e;
	gr_wait_events(&cq->mutex, &cq->cond, &cq->comp_events_completed, c->comp_events_delivered);
	gr_wait_events(&cq->mutex, &cq->cond, &cq->async_events_completed, c->async_events_delivered);
	if (ch) {
		pthread_mutex_lock(&ch->context->mutex);
		ch->refcnt--;
		pthread_mutex_unlock(&ch->context->mutex);
	}
	pthread_cond_destroy(&cq->cond);
	pthread_mutex_destroy(&cq->mutex);
	free(c);
	return 0;
}
SYMVER(gr_destroy_cq_1_1, ibv_destroy_cq, "IBVERBS_1.1");

/* ---- SRQ ---- */

static struct ibv_srq *new_srq(struct ibv_pd *pd, void *srq_context, struct ibv_srq_attr *attr)
{
	struct gr_srq *s;
	int e;

	if (gr_child_refuses())
		return NULL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return gr_fail(ENOMEM);
	e = gr_create_srq(GR_PD(pd)->h, attr, (uintptr_t)s, &s->h);
	if (e) {
		free(s);
		return gr_fail(e);
	}
	s->srq.context = pd->context;
	s->srq.srq_context = srq_context;
	s->srq.pd = pd;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	return &s->srq;
}

struct ibv_srq *gr_create_srq_1_1(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	return new_srq(pd, attr->srq_context, &attr->attr);
}
SYMVER(gr_create_srq_1_1, ibv_create_srq, "IBVERBS_1.1");

struct ibv_srq *gr_create_srq_ex(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *attr)
{
	(void)ctx;
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd)
		return gr_fail(EINVAL);
	if (attr->comp_mask & ~(IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD))
		return gr_fail(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && attr->srq_type != IBV_SRQT_BASIC)
		return gr_fail(EOPNOTSUPP); /* XRC and tag-matching SRQs */
	return new_srq(attr->pd, attr->srq_context, &attr->attr);
}

int gr_modify_srq_1_1(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	if (gr_child_refuses())
		return EOPNOTSUPP;
	return gr_modify_srq(GR_SRQ(srq)->h, attr, mask);
}
SYMVER(gr_modify_srq_1_1, ibv_modify_srq, "IBVERBS_1.1");

int gr_query_srq_1_1(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	if (gr_child_refuses())
		return EOPNOTSUPP;
	return gr_query_srq(GR_SRQ(srq)->h, attr);
}
SYMVER(gr_query_srq_1_1, ibv_query_srq, "IBVERBS_1.1");

int gr_destroy_srq_1_1(struct ibv_srq *srq)
{
	struct gr_srq *s = GR_SRQ(srq);
	int e;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	e = gr_destroy_srq(s->h);
	if (e)
		return e;
	gr_wait_events(&srq->mutex, &srq->cond, &srq->events_completed, s->events_delivered);
	pthread_cond_destroy(&srq->cond);
	pthread_mutex_destroy(&srq->mutex);
	free(s);
	return 0;
}
SYMVER(gr_destroy_srq_1_1, ibv_destroy_srq, "IBVERBS_1.1");

/* ---- QP ---- */

/* The ibv_wr_* operations goroce's QPs execute (rxe's set without TSO). */
#define GR_SEND_OPS                                                                                          \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |                \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |         \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW |              \
	 IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_ATOMIC_WRITE)

static struct ibv_qp *new_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr, int is_ex, uint64_t ops)
{
	struct gr_qp *q;
	uint32_t qpn;
	int e;

	if (gr_child_refuses())
		return NULL;
	q = calloc(1, sizeof(*q));
	if (!q)
		return gr_fail(ENOMEM);
	e = gr_create_qp(GR_PD(pd)->h, attr, (uintptr_t)q, &q->h, &qpn);
	if (e) {
		free(q);
		return gr_fail(e);
	}
	q->qpx.qp_base.context = pd->context;
	q->qpx.qp_base.qp_context = attr->qp_context;
	q->qpx.qp_base.pd = pd;
	q->qpx.qp_base.send_cq = attr->send_cq;
	q->qpx.qp_base.recv_cq = attr->recv_cq;
	q->qpx.qp_base.srq = attr->srq;
	q->qpx.qp_base.qp_num = qpn;
	q->qpx.qp_base.state = IBV_QPS_RESET;
	q->qpx.qp_base.qp_type = attr->qp_type;
	pthread_mutex_init(&q->qpx.qp_base.mutex, NULL);
	pthread_cond_init(&q->qpx.qp_base.cond, NULL);
	q->is_ex = is_ex;
	q->send_ops_flags = ops;
	if (is_ex)
		gr_qp_ex_init(q);
	return &q->qpx.qp_base;
}

struct ibv_qp *gr_create_qp_1_1(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	return new_qp(pd, attr, 0, 0);
}
SYMVER(gr_create_qp_1_1, ibv_create_qp, "IBVERBS_1.1");

struct ibv_qp *gr_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_init_attr a;
	struct ibv_qp *qp;
	uint64_t ops = 0;

	(void)ctx;
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd)
		return gr_fail(EINVAL);
	if (attr->comp_mask & ~(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS))
		return gr_fail(EOPNOTSUPP);
	if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags)
		return gr_fail(EOPNOTSUPP);
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		ops = attr->send_ops_flags;
		if (ops & ~(uint64_t)GR_SEND_OPS)
			return gr_fail(EOPNOTSUPP);
	}
	memset(&a, 0, sizeof(a));
	a.qp_context = attr->qp_context;
	a.send_cq = attr->send_cq;
	a.recv_cq = attr->recv_cq;
	a.srq = attr->srq;
	a.cap = attr->cap;
	a.qp_type = attr->qp_type;
	a.sq_sig_all = attr->sq_sig_all;
	qp = new_qp(attr->pd, &a, !!(attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS), ops);
	if (qp)
		attr->cap = a.cap;
	return qp;
}

struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct gr_qp *q = GR_QP(qp);

	return q->is_ex ? &q->qpx : NULL;
}

int gr_modify_qp_1_1(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	int e;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	e = gr_modify_qp(GR_QP(qp)->h, attr, mask);
	if (e)
		return e;
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}
SYMVER(gr_modify_qp_1_1, ibv_modify_qp, "IBVERBS_1.1");

int gr_query_qp_1_1(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	struct ibv_qp_init_attr ia;
	int e;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	memset(&ia, 0, sizeof(ia));
	e = gr_query_qp(GR_QP(qp)->h, attr, &ia);
	if (e)
		return e;
	if (init) {
		ia.qp_context = qp->qp_context;
		ia.send_cq = qp->send_cq;
		ia.recv_cq = qp->recv_cq;
		ia.srq = qp->srq;
		*init = ia;
	}
	if (mask & IBV_QP_STATE)
		qp->state = attr->qp_state;
	return 0;
}
SYMVER(gr_query_qp_1_1, ibv_query_qp, "IBVERBS_1.1");

int gr_destroy_qp_1_1(struct ibv_qp *qp)
{
	struct gr_qp *q = GR_QP(qp);
	int e;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	e = gr_destroy_qp(q->h);
	if (e)
		return e;
	gr_wait_events(&qp->mutex, &qp->cond, &qp->events_completed, q->events_delivered);
	gr_qp_ex_free(q);
	pthread_cond_destroy(&qp->cond);
	pthread_mutex_destroy(&qp->mutex);
	free(q);
	return 0;
}
SYMVER(gr_destroy_qp_1_1, ibv_destroy_qp, "IBVERBS_1.1");

int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp, (void)op, (void)flags;
	/* No promise beyond the verbs' own: data is placed in order only as the
	 * completion says. */
	return 0;
}

int gr_attach_mcast_1_1(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (gr_child_refuses())
		return EOPNOTSUPP;
	return gr_attach_mcast(GR_QP(qp)->h, (union ibv_gid *)gid, lid);
}
SYMVER(gr_attach_mcast_1_1, ibv_attach_mcast, "IBVERBS_1.1");

int gr_detach_mcast_1_1(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	if (gr_child_refuses())
		return EOPNOTSUPP;
	return gr_detach_mcast(GR_QP(qp)->h, (union ibv_gid *)gid, lid);
}
SYMVER(gr_detach_mcast_1_1, ibv_detach_mcast, "IBVERBS_1.1");

/* ---- AH ---- */

struct ibv_ah *gr_create_ah_1_1(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct gr_ah *a;
	int e;

	if (gr_child_refuses())
		return NULL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return gr_fail(ENOMEM);
	e = gr_create_ah(GR_PD(pd)->h, attr, &a->h);
	if (e) {
		free(a);
		return gr_fail(e);
	}
	a->ah.context = pd->context;
	a->ah.pd = pd;
	return &a->ah;
}
SYMVER(gr_create_ah_1_1, ibv_create_ah, "IBVERBS_1.1");

int gr_destroy_ah_1_1(struct ibv_ah *ah)
{
	int e;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	e = gr_destroy_ah(GR_AH(ah)->h);
	if (e)
		return e;
	free(ah);
	return 0;
}
SYMVER(gr_destroy_ah_1_1, ibv_destroy_ah, "IBVERBS_1.1");

int gr_init_ah_from_wc_1_1(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
			   struct ibv_ah_attr *attr)
{
	int e;

	if (gr_child_refuses())
		return -1;
	e = gr_init_ah_from_wc(GR_CTX(ctx)->h, port, wc, grh, attr);
	if (e) {
		errno = e;
		return -1;
	}
	return 0;
}
SYMVER(gr_init_ah_from_wc_1_1, ibv_init_ah_from_wc, "IBVERBS_1.1");

struct ibv_ah *gr_create_ah_from_wc_1_1(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr attr;

	if (gr_init_ah_from_wc_1_1(pd->context, port, wc, grh, &attr))
		return NULL;
	return gr_create_ah_1_1(pd, &attr);
}
SYMVER(gr_create_ah_from_wc_1_1, ibv_create_ah_from_wc, "IBVERBS_1.1");

/* ---- the ops tables ---- */

static int gr_op_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	if (gr_child_refuses())
		return EOPNOTSUPP;
	return gr_req_notify_cq(GR_CQ(cq)->h, solicited_only);
}

static int gr_op_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	if (gr_child_refuses()) {
		*bad = wr;
		return EOPNOTSUPP;
	}
	return gr_post_recv(GR_QP(qp)->h, wr, bad);
}

static int gr_op_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	if (gr_child_refuses()) {
		*bad = wr;
		return EOPNOTSUPP;
	}
	return gr_post_srq_recv(GR_SRQ(srq)->h, wr, bad);
}

int gr_op_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	if (gr_child_refuses()) {
		*bad = wr;
		return EOPNOTSUPP;
	}
	return gr_post_send(GR_QP(qp)->h, wr, bad);
}

/* GR_POLL_NAP_NS is how long an empty poll sleeps when it gives the core up. */
#define GR_POLL_NAP_NS 10000

int gr_op_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	if (gr_child_refuses())
		return -1;
	int yield = 0;
	int got = gr_poll_cq(GR_CQ(cq)->h, n, wc, &yield);

	/* A program that polls an empty CQ in a loop gives its core up once per
	 * empty poll when the Go half says so: while the device carries a stream,
	 * whose progress needs the peer and a core on a host with more runnable
	 * threads than cores, or after a millisecond of empty polls. It sleeps
	 * (GR_POLL_NAP_NS, plus the timer slack, 50 us by default): sched_yield
	 * gives the core to nothing outside the thread's own run queue, and a
	 * stock ib_send_bw client that yielded instead ran at 74-97 MB/s beside a
	 * CPU hog against 141-164 sleeping. Waiting for the answer to a request it
	 * spins: any give-up costs a round trip a wake-up. */
	if (got == 0 && yield) {
		struct timespec nap = {0, GR_POLL_NAP_NS};
		nanosleep(&nap, NULL);
	}
	return got;
}

void gr_set_ops(struct gr_context *c)
{
	struct ibv_context_ops *o = &c->vctx.context.ops;
	struct verbs_context *v = &c->vctx;

	o->alloc_mw = gr_op_alloc_mw;
	o->bind_mw = gr_op_bind_mw;
	o->dealloc_mw = gr_op_dealloc_mw;
	o->poll_cq = gr_op_poll_cq;
	o->req_notify_cq = gr_op_req_notify_cq;
	o->post_srq_recv = gr_op_post_srq_recv;
	o->post_send = gr_op_post_send;
	o->post_recv = gr_op_post_recv;

	v->query_port = gr_query_port_ex;
	v->query_device_ex = gr_query_device_ex;
	v->create_cq_ex = gr_create_cq_ex;
	v->create_qp_ex = gr_create_qp_ex;
	v->create_srq_ex = gr_create_srq_ex;
}
