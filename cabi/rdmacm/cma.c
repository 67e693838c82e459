/*
 * cma.c: goroce's librdmacm.so.1. The rdma_cm_id, its events and its QP are
 * librdmacm's structs; what the kernel's rdma_ucm does (addresses, the IB CM
 * on QP1, the event stream) is the Go half's (cabi/engine/ucma.go). QPs are
 * created and moved through libibverbs, as librdmacm does.
 */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include "goroce_verbs.h"
#include "goroce_rdmacm.h"
#include "libgoroce.h"

#define ERR(e) (errno = (e), -1)

/* A device as librdmacm keeps it: one context and one default PD per device,
 * opened on first use and kept for the process's life, as librdmacm's. */
struct cma_dev {
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	int max_qp_rd_atom, max_qp_init_rd_atom;
};

static pthread_mutex_t mut = PTHREAD_MUTEX_INITIALIZER;
static struct cma_dev *devs;
static int ndevs = -1;

/* A channel lives until it is destroyed and no thread is inside
 * rdma_get_cm_event on it: a thread blocked there when the program destroys the
 * channel stays blocked on the still-open fd, as one in the kernel's ucma does,
 * instead of waking to a closed fd (rping's event thread is one).
 *
 * A thread that enters rdma_get_cm_event only after the program destroyed the
 * channel blocks too. rping's event thread acks the DISCONNECTED event and
 * loops back into rdma_get_cm_event while its main thread tears down and
 * destroys the channel: librdmacm would read a closed fd (EBADF, on which rping
 * exits 255) or a reused one. Whichever thread runs first is the scheduler's
 * choice, and on a loaded host rping lost the race. So the memory of a channel
 * the program created stays after its destroy (its fd is closed), for such a
 * late reader to find it destroyed: a few dozen bytes per channel, and programs
 * create one or a few. Channels made for synchronous ids (internal) are freed,
 * as no program thread reads them. */
struct cma_channel {
	struct rdma_event_channel ch;
	uintptr_t h;
	int readers;    /* threads inside rdma_get_cm_event; chan_mut guards */
	int destroyed;  /* chan_mut guards */
	int internal;   /* made for a synchronous id: freed on destroy */
};

static pthread_mutex_t chan_mut = PTHREAD_MUTEX_INITIALIZER;

struct cma_id {
	struct rdma_cm_id id;
	uintptr_t h;
	struct cma_dev *dev;
	int sync;               /* created without a channel: every call waits for its event */
	pthread_mutex_t mut;
	pthread_cond_t cond;
	uint32_t events_delivered, events_completed;
	uint8_t initiator_depth, responder_resources;
	int connect_error;
	struct ibv_sa_path_rec path;
	struct ibv_qp_init_attr *qp_init_attr; /* rdma_create_ep's, for rdma_get_request */
};

struct cma_event {
	struct rdma_cm_event event;
	struct cma_id *id;
	uint8_t private_data[256];
};

static struct cma_id *ID(struct rdma_cm_id *id)
{
	return (struct cma_id *)id;
}

/* init opens every device once: librdmacm's ucma_init. */
static int init(void)
{
	struct ibv_device **list;
	int n = 0, ret = 0;

	pthread_mutex_lock(&mut);
	if (ndevs >= 0)
		goto out;
	list = ibv_get_device_list(&n);
	if (!list) {
		ret = -1;
		goto out;
	}
	devs = calloc(n ? n : 1, sizeof(*devs));
	if (!devs) {
		ibv_free_device_list(list);
		ret = ERR(ENOMEM);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		struct ibv_device_attr a;

		devs[i].verbs = ibv_open_device(list[i]);
		if (!devs[i].verbs)
			continue;
		if (!ibv_query_device(devs[i].verbs, &a)) {
			devs[i].max_qp_rd_atom = a.max_qp_rd_atom;
			devs[i].max_qp_init_rd_atom = a.max_qp_init_rd_atom;
		}
		devs[i].pd = ibv_alloc_pd(devs[i].verbs);
	}
	ibv_free_device_list(list);
	ndevs = n;
out:
	pthread_mutex_unlock(&mut);
	return ret;
}

struct ibv_context **rdma_get_devices(int *num)
{
	struct ibv_context **l;
	int n = 0;

	if (init())
		return NULL;
	l = calloc(ndevs + 1, sizeof(*l));
	if (!l)
		return errno = ENOMEM, NULL;
	for (int i = 0; i < ndevs; i++)
		if (devs[i].verbs)
			l[n++] = devs[i].verbs;
	if (num)
		*num = n;
	return l;
}

void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

/* ---- event channels ---- */

static struct rdma_event_channel *create_channel(int internal)
{
	struct cma_channel *c;
	int fd, e;

	if (init())
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return errno = ENOMEM, NULL;
	e = gr_cm_create_channel(&c->h, &fd);
	if (e) {
		free(c);
		return errno = e, NULL;
	}
	c->ch.fd = fd;
	c->internal = internal;
	return &c->ch;
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
	return create_channel(0);
}

/* channel_put ends one use of c: a reader leaving, or the program destroying
 * it; the last frees it. */
static void channel_put(struct cma_channel *c, int destroy)
{
	int last;

	pthread_mutex_lock(&chan_mut);
	if (destroy)
		c->destroyed = 1;
	else
		c->readers--;
	last = c->destroyed && !c->readers;
	pthread_mutex_unlock(&chan_mut);
	if (last) {
		close(c->ch.fd);
		if (c->internal)
			free(c);
	}
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct cma_channel *c = (struct cma_channel *)channel;

	gr_cm_destroy_channel(c->h);
	channel_put(c, 1);
}

/* ---- ids ---- */

/* refresh shows in id what the Go half knows of its addresses and device. */
static void refresh(struct cma_id *c)
{
	struct gr_cm_query q;
	struct rdma_addr *a = &c->id.route.addr;

	if (gr_cm_query(c->h, &q))
		return;
	memcpy(&a->src_storage, &q.src, sizeof(q.src));
	memcpy(&a->dst_storage, &q.dst, sizeof(q.dst));
	a->addr.ibaddr.sgid = q.sgid;
	a->addr.ibaddr.dgid = q.dgid;
	a->addr.ibaddr.pkey = htons(0xffff);
	if (q.dev_index >= 0 && q.dev_index < ndevs && devs[q.dev_index].verbs) {
		c->dev = &devs[q.dev_index];
		c->id.verbs = c->dev->verbs;
		c->id.port_num = 1;
		if (!c->id.pd)
			c->id.pd = c->dev->pd;
	}
	if (q.mtu) {
		c->path.mtu = q.mtu;
		c->path.mtu_selector = 2; /* exactly */
	}
}

static struct cma_id *new_id(struct rdma_event_channel *channel, void *context, enum rdma_port_space ps,
			     enum ibv_qp_type qp_type)
{
	struct cma_id *c = calloc(1, sizeof(*c));

	if (!c)
		return errno = ENOMEM, NULL;
	c->id.context = context;
	c->id.ps = ps;
	c->id.qp_type = qp_type;
	c->id.channel = channel;
	pthread_mutex_init(&c->mut, NULL);
	pthread_cond_init(&c->cond, NULL);
	return c;
}

static void free_id(struct cma_id *c)
{
	if (c->sync && c->id.channel)
		rdma_destroy_event_channel(c->id.channel);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mut);
	free(c->qp_init_attr);
	free(c);
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	enum ibv_qp_type qp_type = ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB ? IBV_QPT_UD : IBV_QPT_RC;
	struct cma_id *c;
	int e, sync = !channel;

	if (init())
		return -1;
	if (sync && !(channel = create_channel(1)))
		return -1;
	c = new_id(channel, context, ps, qp_type);
	if (!c)
		goto fail;
	c->sync = sync;
	e = gr_cm_create_id(((struct cma_channel *)channel)->h, (uintptr_t)c, ps, &c->h);
	if (e) {
		c->sync = 0;
		free_id(c);
		errno = e;
		goto fail;
	}
	*id = &c->id;
	return 0;
fail:
	if (sync)
		rdma_destroy_event_channel(channel);
	return -1;
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct cma_id *c = ID(id);

	gr_cm_destroy_id(c->h);
	if (id->event)
		rdma_ack_cm_event(id->event);
	pthread_mutex_lock(&c->mut);
	while (c->events_completed < c->events_delivered)
		pthread_cond_wait(&c->cond, &c->mut);
	pthread_mutex_unlock(&c->mut);
	free_id(c);
	return 0;
}

/* complete waits, for a synchronous id, for the event that ends the call it
 * made, and turns its status into errno, as librdmacm's ucma_complete. */
static int complete(struct cma_id *c)
{
	struct rdma_cm_event *ev;

	if (!c->sync)
		return 0;
	if (c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	if (rdma_get_cm_event(c->id.channel, &ev))
		return -1;
	c->id.event = ev;
	if (ev->status) {
		if (ev->event == RDMA_CM_EVENT_REJECTED)
			return ERR(ECONNREFUSED);
		return ERR(ev->status < 0 ? -ev->status : ev->status);
	}
	return 0;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	int e = gr_cm_bind_addr(ID(id)->h, addr);

	if (e)
		return ERR(e);
	refresh(ID(id));
	return 0;
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr, int timeout_ms)
{
	int e;

	if (!dst_addr)
		return ERR(EINVAL);
	e = gr_cm_resolve_addr(ID(id)->h, src_addr, dst_addr, timeout_ms);
	if (e)
		return ERR(e);
	return complete(ID(id));
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	int e = gr_cm_resolve_route(ID(id)->h, timeout_ms);

	if (e)
		return ERR(e);
	return complete(ID(id));
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	int e = gr_cm_listen(ID(id)->h, backlog);

	if (e)
		return ERR(e);
	refresh(ID(id));
	return 0;
}

/* ---- QPs ---- */

/* to_state moves the QP of id to state with the attributes rdma_init_qp_attr
 * gives; depth, when not RDMA_MAX_*, overrides the READ depth of RTR or RTS. */
static int to_state(struct cma_id *c, enum ibv_qp_state state, uint8_t depth)
{
	struct ibv_qp_attr a;
	int mask, ret;

	if (!c->id.qp)
		return 0;
	memset(&a, 0, sizeof(a));
	a.qp_state = state;
	ret = rdma_init_qp_attr(&c->id, &a, &mask);
	if (ret)
		return ret;
	if (state == IBV_QPS_RTR && depth != RDMA_MAX_RESP_RES)
		a.max_dest_rd_atomic = depth;
	if (state == IBV_QPS_RTS && depth != RDMA_MAX_INIT_DEPTH)
		a.max_rd_atomic = depth;
	ret = ibv_modify_qp(c->id.qp, &a, mask);
	return ret ? ERR(ret) : 0;
}

/* qp_to_rtr is librdmacm's ucma_modify_qp_rtr: INIT again with the access
 * the connection grants (through INIT first for a QP the program left in
 * RESET), then RTR. */
static int qp_to_rtr(struct cma_id *c, uint8_t resp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	if (!c->id.qp)
		return 0;
	if (!ibv_query_qp(c->id.qp, &a, IBV_QP_STATE, &ia) && a.qp_state == IBV_QPS_RESET &&
	    to_state(c, IBV_QPS_INIT, 0))
		return -1;
	if (to_state(c, IBV_QPS_INIT, 0))
		return -1;
	return to_state(c, IBV_QPS_RTR, resp);
}

static int qp_to_err(struct cma_id *c)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

	if (!c->id.qp)
		return 0;
	return ibv_modify_qp(c->id.qp, &a, IBV_QP_STATE) ? -1 : 0;
}

int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	struct cma_id *c = ID(id);
	int e = gr_cm_init_qp_attr(c->h, qp_attr, qp_attr_mask, c->responder_resources, c->initiator_depth);

	return e ? ERR(e) : 0;
}

static void destroy_cqs(struct rdma_cm_id *id)
{
	if (id->recv_cq) {
		ibv_destroy_cq(id->recv_cq);
		if (id->send_cq && id->send_cq != id->recv_cq)
			ibv_destroy_cq(id->send_cq);
	} else if (id->send_cq) {
		ibv_destroy_cq(id->send_cq);
	}
	id->recv_cq = id->send_cq = NULL;
	if (id->recv_cq_channel) {
		ibv_destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel)
			ibv_destroy_comp_channel(id->send_cq_channel);
	} else if (id->send_cq_channel) {
		ibv_destroy_comp_channel(id->send_cq_channel);
	}
	id->recv_cq_channel = id->send_cq_channel = NULL;
}

/* create_cqs makes the CQs rdma_create_qp was not given, each with a
 * completion channel, as librdmacm's ucma_create_cqs. */
static int create_cqs(struct rdma_cm_id *id, uint32_t send_size, uint32_t recv_size)
{
	if (recv_size) {
		id->recv_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->recv_cq_channel)
			goto err;
		id->recv_cq = ibv_create_cq(id->verbs, recv_size, id, id->recv_cq_channel, 0);
		if (!id->recv_cq)
			goto err;
	}
	if (send_size) {
		id->send_cq_channel = ibv_create_comp_channel(id->verbs);
		if (!id->send_cq_channel)
			goto err;
		id->send_cq = ibv_create_cq(id->verbs, send_size, id, id->send_cq_channel, 0);
		if (!id->send_cq)
			goto err;
	}
	return 0;
err:
	destroy_cqs(id);
	return -1;
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct cma_id *c = ID(id);
	struct ibv_qp *qp;

	if (id->qp || !id->verbs)
		return ERR(EINVAL);
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd;
	} else if (attr->pd->context != id->verbs) {
		return ERR(EINVAL);
	}
	if (!attr->pd)
		return ERR(EINVAL);
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return ERR(EINVAL);
	if (create_cqs(id, attr->send_cq || id->send_cq ? 0 : attr->cap.max_send_wr,
		       attr->recv_cq || id->recv_cq ? 0 : attr->cap.max_recv_wr))
		return -1;
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	qp = ibv_create_qp_ex(id->verbs, attr);
	if (!qp)
		goto err;
	id->qp = qp;
	if (id->qp_type == IBV_QPT_UD) {
		/* A UD QP is ready at once: INIT with rdma_cm's Q_Key, RTR, RTS. */
		if (to_state(c, IBV_QPS_INIT, 0) || to_state(c, IBV_QPS_RTR, 0) || to_state(c, IBV_QPS_RTS, 0))
			goto err_qp;
	} else if (to_state(c, IBV_QPS_INIT, 0)) {
		goto err_qp;
	}
	return 0;
err_qp:
	id->qp = NULL;
	ibv_destroy_qp(qp);
err:
	destroy_cqs(id);
	return -1;
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex a;
	int ret;

	memset(&a, 0, sizeof(a));
	memcpy(&a, qp_init_attr, sizeof(*qp_init_attr));
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	ret = rdma_create_qp_ex(id, &a);
	memcpy(qp_init_attr, &a, sizeof(*qp_init_attr));
	return ret;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	destroy_cqs(id);
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	struct ibv_srq *srq;

	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE))
		return ERR(EINVAL);
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd) {
		attr->pd = id->pd;
		attr->comp_mask |= IBV_SRQ_INIT_ATTR_PD;
	}
	if (attr->srq_type != IBV_SRQT_BASIC)
		return ERR(EOPNOTSUPP); /* XRC */
	srq = ibv_create_srq_ex(id->verbs, attr);
	if (!srq)
		return -1;
	if (!id->pd)
		id->pd = attr->pd;
	id->srq = srq;
	return 0;
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex a;
	int ret;

	memset(&a, 0, sizeof(a));
	memcpy(&a, attr, sizeof(*attr));
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	a.srq_type = IBV_SRQT_BASIC;
	a.pd = pd;
	ret = rdma_create_srq_ex(id, &a);
	memcpy(attr, &a, sizeof(*attr));
	return ret;
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	ibv_destroy_srq(id->srq);
	id->srq = NULL;
	destroy_cqs(id);
}

/* ---- connections ---- */

/* valid_param checks the READ depths against the device's, as librdmacm. */
static int valid_param(struct cma_id *c, struct rdma_conn_param *p)
{
	if (c->id.ps != RDMA_PS_TCP)
		return 0;
	if (!c->id.qp && !p)
		return ERR(EINVAL);
	if (!p || !c->dev)
		return 0;
	if (p->responder_resources != RDMA_MAX_RESP_RES && p->responder_resources > c->dev->max_qp_rd_atom)
		return ERR(EINVAL);
	if (p->initiator_depth != RDMA_MAX_INIT_DEPTH && p->initiator_depth > c->dev->max_qp_init_rd_atom)
		return ERR(EINVAL);
	return 0;
}

/* to_param fills what the Go half sends in a REQ or REP. */
static void to_param(struct cma_id *c, struct gr_conn_param *g, struct rdma_conn_param *p, uint32_t qp_num,
		     uint8_t srq)
{
	memset(g, 0, sizeof(*g));
	g->qp_num = qp_num;
	g->srq = srq;
	g->qkey = RDMA_UDP_QKEY;
	g->responder_resources = c->responder_resources;
	g->initiator_depth = c->initiator_depth;
	if (p) {
		g->retry_count = p->retry_count;
		g->rnr_retry_count = p->rnr_retry_count;
		if (p->private_data && p->private_data_len) {
			g->private_data_len = p->private_data_len;
			memcpy(g->private_data, p->private_data, p->private_data_len);
		}
	} else {
		g->retry_count = 7;
		g->rnr_retry_count = 7;
	}
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct cma_id *c = ID(id);
	uint32_t qp_num = conn_param ? conn_param->qp_num : 0;
	uint8_t srq = conn_param ? conn_param->srq : 0;
	struct gr_conn_param g;
	int e;

	if (valid_param(c, conn_param))
		return -1;
	if (c->dev) {
		c->initiator_depth = conn_param && conn_param->initiator_depth != RDMA_MAX_INIT_DEPTH ?
					     conn_param->initiator_depth :
					     c->dev->max_qp_init_rd_atom;
		c->responder_resources = conn_param && conn_param->responder_resources != RDMA_MAX_RESP_RES ?
						 conn_param->responder_resources :
						 c->dev->max_qp_rd_atom;
	}
	if (id->qp) {
		qp_num = id->qp->qp_num;
		srq = !!id->qp->srq;
	}
	to_param(c, &g, conn_param, qp_num, srq);
	e = gr_cm_connect(c->h, &g);
	if (e)
		return ERR(e);
	return complete(c);
}

int rdma_establish(struct rdma_cm_id *id)
{
	struct cma_id *c = ID(id);
	int e = gr_cm_establish(c->h, 0);

	if (e)
		return ERR(e);
	return 0;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct cma_id *c = ID(id);
	uint32_t qp_num = id->qp ? id->qp->qp_num : (conn_param ? conn_param->qp_num : 0);
	uint8_t srq = id->qp ? !!id->qp->srq : (conn_param ? conn_param->srq : 0);
	struct gr_conn_param g;
	int e;

	if (valid_param(c, conn_param))
		return -1;
	if (!conn_param || conn_param->initiator_depth == RDMA_MAX_INIT_DEPTH) {
		if (c->dev && c->initiator_depth > c->dev->max_qp_init_rd_atom)
			c->initiator_depth = c->dev->max_qp_init_rd_atom;
	} else {
		c->initiator_depth = conn_param->initiator_depth;
	}
	if (!conn_param || conn_param->responder_resources == RDMA_MAX_RESP_RES) {
		if (c->dev && c->responder_resources > c->dev->max_qp_rd_atom)
			c->responder_resources = c->dev->max_qp_rd_atom;
	} else {
		c->responder_resources = conn_param->responder_resources;
	}
	if (id->qp_type != IBV_QPT_UD) {
		if (qp_to_rtr(c, c->responder_resources) || to_state(c, IBV_QPS_RTS, c->initiator_depth))
			return -1;
	}
	to_param(c, &g, conn_param, qp_num, srq);
	if (id->qp_type == IBV_QPT_UD && id->qp) {
		struct ibv_qp_attr a;
		struct ibv_qp_init_attr ia;

		if (!ibv_query_qp(id->qp, &a, IBV_QP_QKEY, &ia))
			g.qkey = a.qkey;
	}
	e = gr_cm_accept(c->h, &g);
	if (e) {
		qp_to_err(c);
		return ERR(e);
	}
	if (id->qp_type == IBV_QPT_UD)
		return 0;
	return complete(c);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	int e = gr_cm_reject(ID(id)->h, (void *)private_data, private_data ? private_data_len : 0);

	return e ? ERR(e) : 0;
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	return rdma_reject(id, private_data, private_data_len);
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id;
	memset(ece, 0, sizeof(*ece)); /* no enhanced connection establishment on RoCE here */
	return 0;
}

int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	(void)id, (void)ece;
	return ERR(EOPNOTSUPP);
}

int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)id, (void)event;
	return 0; /* the Go half establishes a connection on its first packet already */
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	struct cma_id *c = ID(id);
	int e;

	if (qp_to_err(c))
		return -1;
	e = gr_cm_disconnect(c->h);
	if (e)
		return ERR(e);
	return complete(c);
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct cma_id *c = ID(id);
	struct rdma_event_channel *old = id->channel;
	int sync = !channel, e;

	if (c->sync && !channel)
		return ERR(EINVAL);
	if (sync && !(channel = create_channel(1)))
		return -1;
	e = gr_cm_migrate_id(c->h, ((struct cma_channel *)channel)->h);
	if (e) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return ERR(e);
	}
	if (c->sync) {
		if (id->event) {
			rdma_ack_cm_event(id->event);
			id->event = NULL;
		}
		rdma_destroy_event_channel(old);
	}
	c->sync = sync;
	id->channel = channel;
	return 0;
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	if (!optval)
		return ERR(EINVAL);
	if (level == RDMA_OPTION_ID) {
		switch (optname) {
		case RDMA_OPTION_ID_TOS:
			if (optlen != sizeof(uint8_t))
				return ERR(EINVAL);
			return gr_cm_set_tos(ID(id)->h, *(uint8_t *)optval) ? ERR(EINVAL) : 0;
		case RDMA_OPTION_ID_REUSEADDR:
		case RDMA_OPTION_ID_AFONLY:
			return optlen == sizeof(int) ? 0 : ERR(EINVAL);
		case RDMA_OPTION_ID_ACK_TIMEOUT:
			return optlen == sizeof(uint8_t) ? 0 : ERR(EINVAL);
		}
	}
	/* RDMA_OPTION_IB_PATH gives native InfiniBand path records. */
	return ERR(ENOSYS);
}

/* ---- events ---- */

static void deliver(struct cma_id *c)
{
	pthread_mutex_lock(&c->mut);
	c->events_delivered++;
	pthread_mutex_unlock(&c->mut);
}

/* conn_event fills param.conn from the Go half's record. */
static void conn_event(struct cma_event *e, struct gr_cm_event *g)
{
	struct rdma_conn_param *p = &e->event.param.conn;

	p->responder_resources = g->responder_resources;
	p->initiator_depth = g->initiator_depth;
	p->flow_control = g->flow_control;
	p->retry_count = g->retry_count;
	p->rnr_retry_count = g->rnr_retry_count;
	p->srq = g->srq;
	p->qp_num = g->qp_num;
	if (g->private_data_len) {
		memcpy(e->private_data, g->private_data, g->private_data_len);
		p->private_data = e->private_data;
		p->private_data_len = g->private_data_len;
	}
}

static void ud_event(struct cma_event *e, struct gr_cm_event *g)
{
	struct rdma_ud_param *p = &e->event.param.ud;

	p->ah_attr = g->ah_attr;
	p->qp_num = g->ud_qp_num;
	p->qkey = g->qkey;
	if (g->private_data_len) {
		memcpy(e->private_data, g->private_data, g->private_data_len);
		p->private_data = e->private_data;
		p->private_data_len = g->private_data_len;
	}
}

/* conn_request makes the id of a new request, as librdmacm's
 * ucma_process_conn_req; it returns -1 when the request was withdrawn. */
static int conn_request(struct cma_event *e, struct gr_cm_event *g)
{
	struct cma_id *l = (struct cma_id *)g->listen_id, *c;

	c = new_id(l->id.channel, l->id.context, l->id.ps, l->id.qp_type);
	if (!c) {
		gr_cm_destroy_id(g->child_h);
		return -1;
	}
	c->h = g->child_h;
	gr_cm_set_element(c->h, (uintptr_t)c);
	refresh(c);
	e->id = c;
	e->event.id = &c->id;
	e->event.listen_id = &l->id;
	if (c->id.qp_type == IBV_QPT_UD) {
		ud_event(e, g);
	} else {
		conn_event(e, g);
		c->initiator_depth = g->initiator_depth;
		c->responder_resources = g->responder_resources;
	}
	/* The request of a synchronous listener makes a synchronous id, with a
	 * channel of its own (librdmacm's ucma_process_conn_req). */
	if (l->sync && rdma_migrate_id(&c->id, NULL)) {
		rdma_destroy_id(&c->id);
		return -1;
	}
	return 0;
}

/* conn_response is librdmacm's handling of a REP for an id that has a QP:
 * RTR, RTS, RTU, and the program sees ESTABLISHED (or CONNECT_ERROR). */
static void conn_response(struct cma_event *e)
{
	struct cma_id *c = e->id;

	if (!c->id.qp) {
		e->event.event = RDMA_CM_EVENT_CONNECT_RESPONSE; /* the program moves its QP, then rdma_establish */
		return;
	}
	if (qp_to_rtr(c, RDMA_MAX_RESP_RES) || to_state(c, IBV_QPS_RTS, RDMA_MAX_INIT_DEPTH)) {
		gr_cm_establish(c->h, errno ? errno : EINVAL);
		qp_to_err(c);
		e->event.event = RDMA_CM_EVENT_CONNECT_ERROR;
		e->event.status = -errno;
		c->connect_error = 1;
		return;
	}
	e->event.status = -gr_cm_establish(c->h, 0);
	e->event.event = e->event.status ? RDMA_CM_EVENT_CONNECT_ERROR : RDMA_CM_EVENT_ESTABLISHED;
	if (e->event.status)
		c->connect_error = 1;
}

static int get_cm_event(struct cma_channel *ch, struct rdma_cm_event **event);

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct cma_channel *ch = (struct cma_channel *)channel;
	int ret, err;

	if (!event)
		return ERR(EINVAL);
	pthread_mutex_lock(&chan_mut);
	if (ch->destroyed) {
		/* A late reader of a destroyed channel (see struct cma_channel): it
		 * sleeps as a reader that came a moment earlier would, until the
		 * process ends. */
		pthread_mutex_unlock(&chan_mut);
		for (;;)
			pause();
	}
	ch->readers++;
	pthread_mutex_unlock(&chan_mut);
	ret = get_cm_event(ch, event);
	err = errno;
	channel_put(ch, 0);
	errno = err;
	return ret;
}

/* get_cm_event reads the channel's fd, then takes the event it counted. It
 * reads again when there is none: the event was withdrawn (its id destroyed)
 * after this thread took its count, or the channel was destroyed meanwhile,
 * whose fd no one writes again. */
static int get_cm_event(struct cma_channel *ch, struct rdma_cm_event **event)
{
	struct rdma_event_channel *channel = &ch->ch;
	struct gr_cm_event *g;
	struct cma_event *e;
	uint64_t n;

	e = malloc(sizeof(*e));
	if (!e)
		return ERR(ENOMEM);
retry:
	/* Blocks, or fails with EAGAIN, as the program set the channel's fd. */
	if (read(channel->fd, &n, sizeof(n)) != sizeof(n)) {
		free(e);
		return -1;
	}
	if (gr_cm_get_event(ch->h, &g))
		goto retry;
	memset(e, 0, sizeof(*e));
	e->event.event = g->event;
	e->event.status = g->status;
	if (g->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		if (conn_request(e, g)) {
			free(g);
			goto retry;
		}
	} else {
		e->id = (struct cma_id *)g->id;
		e->event.id = &e->id->id;
	}
	switch (g->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		refresh(e->id);
		if (g->event == RDMA_CM_EVENT_ROUTE_RESOLVED) {
			struct cma_id *c = e->id;

			c->path.dgid = c->id.route.addr.addr.ibaddr.dgid;
			c->path.sgid = c->id.route.addr.addr.ibaddr.sgid;
			c->path.pkey = htons(0xffff);
			c->path.hop_limit = 64;
			c->path.numb_path = 1;
			c->path.reversible = 1;
			c->id.route.path_rec = &c->path;
			c->id.route.num_paths = 1;
		}
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		refresh(e->id);
		conn_response(e);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		refresh(e->id);
		if (e->id->id.qp_type == IBV_QPT_UD)
			ud_event(e, g);
		else
			conn_event(e, g);
		break;
	case RDMA_CM_EVENT_REJECTED:
		if (e->id->connect_error) {
			free(g);
			goto retry;
		}
		conn_event(e, g);
		qp_to_err(e->id);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		if (e->id->connect_error) {
			free(g);
			goto retry;
		}
		break;
	case RDMA_CM_EVENT_MULTICAST_JOIN:
		ud_event(e, g);
		e->event.param.ud.private_data = (void *)g->mc_context;
		break;
	case RDMA_CM_EVENT_MULTICAST_ERROR:
		e->event.param.ud.private_data = (void *)g->mc_context;
		break;
	}
	free(g);
	deliver(e->id);
	*event = &e->event;
	return 0;
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct cma_event *e;
	struct cma_id *c;

	if (!event)
		return ERR(EINVAL);
	e = (struct cma_event *)event;
	c = e->id;
	pthread_mutex_lock(&c->mut);
	c->events_completed++;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->mut);
	free(e);
	return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	switch (event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
	case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
	case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
	case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
	case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
	case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
	case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
	case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
	case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
	case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
	case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
	case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
	case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
	case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
	case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
	case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
	default: return "UNKNOWN EVENT";
	}
}

/* ---- multicast ---- */

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *attr, void *context)
{
	int e;

	if (!(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_ADDRESS) || !(attr->comp_mask & RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS) ||
	    attr->comp_mask & ~(RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS))
		return ERR(EINVAL);
	if (!id->qp)
		return ERR(EINVAL); /* librdmacm attaches the id's QP to the group */
	e = gr_cm_join_multicast(ID(id)->h, (uintptr_t)((struct gr_qp *)id->qp)->h, attr->addr, attr->join_flags,
				 (uintptr_t)context);
	if (e)
		return ERR(e);
	return complete(ID(id));
}

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	struct rdma_cm_join_mc_attr_ex a = {
		.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
		.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER,
		.addr = addr,
	};

	return rdma_join_multicast_ex(id, &a, context);
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	int e = gr_cm_leave_multicast(ID(id)->h, addr);

	return e ? ERR(e) : 0;
}

/* ---- the synchronous helpers of rdma_verbs.h and rdma_cma.h ---- */

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct cma_id *l = ID(listen);
	struct rdma_cm_event *ev;
	int ret;

	if (!l->sync)
		return ERR(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	if (rdma_get_cm_event(listen->channel, &ev))
		return -1;
	if (ev->event == RDMA_CM_EVENT_REJECTED) {
		ret = ERR(ECONNREFUSED);
		goto err;
	}
	if (ev->status) {
		ret = ERR(ev->status < 0 ? -ev->status : ev->status);
		goto err;
	}
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		ret = ERR(EINVAL);
		goto err;
	}
	if (l->qp_init_attr) {
		struct ibv_qp_init_attr a;

		memcpy(&a, l->qp_init_attr, sizeof(a));
		ret = rdma_create_qp(ev->id, listen->pd, &a);
		if (ret)
			goto err;
	}
	*id = ev->id;
	(*id)->event = ev;
	return 0;
err:
	listen->event = ev;
	return ret;
}

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm_id;
	struct cma_id *c;
	int ret;

	if (!res || !id)
		return ERR(EINVAL);
	ret = rdma_create_id(NULL, &cm_id, NULL, res->ai_port_space);
	if (ret)
		return ret;
	c = ID(cm_id);
	if (res->ai_flags & RAI_PASSIVE) {
		ret = rdma_bind_addr(cm_id, res->ai_src_addr);
		if (ret)
			goto err;
		if (pd)
			cm_id->pd = pd;
		if (qp_init_attr) {
			c->qp_init_attr = calloc(1, sizeof(*c->qp_init_attr));
			if (!c->qp_init_attr) {
				ret = ERR(ENOMEM);
				goto err;
			}
			memcpy(c->qp_init_attr, qp_init_attr, sizeof(*qp_init_attr));
			c->qp_init_attr->qp_type = res->ai_qp_type;
		}
		*id = cm_id;
		return 0;
	}
	ret = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
	if (ret)
		goto err;
	ret = rdma_resolve_route(cm_id, 2000);
	if (ret)
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = res->ai_qp_type;
		ret = rdma_create_qp(cm_id, pd, qp_init_attr);
		if (ret)
			goto err;
	}
	*id = cm_id;
	return 0;
err:
	rdma_destroy_ep(cm_id);
	return ret;
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	struct sockaddr *sa = &id->route.addr.src_addr;

	return sa->sa_family == AF_INET6 ? ((struct sockaddr_in6 *)sa)->sin6_port : ((struct sockaddr_in *)sa)->sin_port;
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	struct sockaddr *sa = &id->route.addr.dst_addr;

	return sa->sa_family == AF_INET6 ? ((struct sockaddr_in6 *)sa)->sin6_port : ((struct sockaddr_in *)sa)->sin_port;
}
