/*
 * device.c: devices, contexts, queries and async events of goroce's
 * libibverbs.so.1.
 */
#include <endian.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
#include "gr.h"

/* A device of the list: GOROCE_DEVICES names its address (the Go half). */
struct gr_device {
	struct ibv_device dev;
	int index;
	__be64 guid;
};

/* At exit the devices still open are closed, as the kernel closes a process's
 * (gr_at_exit), unless the process is a forked child, whose engine is not its own. */
static void at_exit(void)
{
	if (!gr_forked)
		gr_at_exit();
}

__attribute__((constructor)) static void gr_register_at_exit(void)
{
	atexit(at_exit);
}

static pthread_once_t devices_once = PTHREAD_ONCE_INIT;
static struct gr_device *devices;
static int ndevices;

static void load_devices(void)
{
	int n = gr_device_count();
	struct gr_device *d;

	if (n <= 0)
		return;
	d = calloc(n, sizeof(*d));
	if (!d)
		return;
	for (int i = 0; i < n; i++) {
		uint64_t guid;

		d[i].index = i;
		d[i].dev.node_type = IBV_NODE_CA;
		d[i].dev.transport_type = IBV_TRANSPORT_IB;
		gr_device_describe(i, d[i].dev.name, sizeof(d[i].dev.name), &guid);
		d[i].guid = guid;
		/* No uverbs device stands behind it: the kernel's names stay empty. */
		snprintf(d[i].dev.dev_name, sizeof(d[i].dev.dev_name), "%s", d[i].dev.name);
	}
	devices = d;
	ndevices = n;
}

struct ibv_device **gr_get_device_list(int *num)
{
	struct ibv_device **l;

	if (gr_child_refuses())
		return NULL;
	pthread_once(&devices_once, load_devices);
	l = calloc(ndevices + 1, sizeof(*l));
	if (!l)
		return gr_fail(ENOMEM);
	for (int i = 0; i < ndevices; i++)
		l[i] = &devices[i].dev;
	if (num)
		*num = ndevices;
	return l;
}
SYMVER(gr_get_device_list, ibv_get_device_list, "IBVERBS_1.1");

void gr_free_device_list(struct ibv_device **list)
{
	free(list);
}
SYMVER(gr_free_device_list, ibv_free_device_list, "IBVERBS_1.1");

const char *gr_get_device_name(struct ibv_device *device)
{
	return device->name;
}
SYMVER(gr_get_device_name, ibv_get_device_name, "IBVERBS_1.1");

__be64 gr_get_device_guid(struct ibv_device *device)
{
	return ((struct gr_device *)device)->guid;
}
SYMVER(gr_get_device_guid, ibv_get_device_guid, "IBVERBS_1.1");

int ibv_get_device_index(struct ibv_device *device)
{
	return ((struct gr_device *)device)->index;
}

struct ibv_context *gr_open_device(struct ibv_device *device)
{
	struct gr_context *c;
	uintptr_t h;
	int fd, e;

	if (gr_child_refuses())
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return gr_fail(ENOMEM);
	c->dev_index = ((struct gr_device *)device)->index;
	e = gr_open(c->dev_index, &h, &fd);
	if (e) {
		free(c);
		return gr_fail(e);
	}
	c->h = h;
	c->vctx.sz = sizeof(struct verbs_context);
	c->vctx.context.device = device;
	c->vctx.context.cmd_fd = -1;
	c->vctx.context.async_fd = fd;
	c->vctx.context.num_comp_vectors = 1;
	c->vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	pthread_mutex_init(&c->vctx.context.mutex, NULL);
	gr_set_ops(c);
	return &c->vctx.context;
}
SYMVER(gr_open_device, ibv_open_device, "IBVERBS_1.1");

int gr_close_device(struct ibv_context *context)
{
	struct gr_context *c = GR_CTX(context);
	int e;

	if (gr_child_refuses())
		return -1;
	e = gr_close(c->h);
	if (e) {
		errno = e;
		return -1;
	}
	pthread_mutex_destroy(&context->mutex);
	free(c);
	return 0;
}
SYMVER(gr_close_device, ibv_close_device, "IBVERBS_1.1");

struct ibv_context *ibv_import_device(int cmd_fd)
{
	(void)cmd_fd;
	/* A context shared through a uverbs file needs the kernel's uverbs. */
	return gr_fail(EOPNOTSUPP);
}

/* ---- queries ---- */

int gr_query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
		       struct ibv_device_attr_ex *attr, size_t len)
{
	struct ibv_device_attr_ex a;
	uint64_t flags_ex;
	int e;

	if (in && in->comp_mask)
		return EINVAL;
	if (len < sizeof(struct ibv_device_attr))
		return EINVAL;
	if (gr_child_refuses())
		return EOPNOTSUPP;
	memset(&a, 0, sizeof(a));
	e = gr_query_device(GR_CTX(ctx)->h, &a.orig_attr, &flags_ex);
	if (e)
		return e;
	a.device_cap_flags_ex = flags_ex;
	a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	if (len > sizeof(a))
		memset((char *)attr + sizeof(a), 0, len - sizeof(a));
	return 0;
}

int gr_query_device_1_1(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	return gr_query_device_ex(ctx, NULL, (struct ibv_device_attr_ex *)attr, sizeof(*attr));
}
SYMVER(gr_query_device_1_1, ibv_query_device, "IBVERBS_1.1");

int gr_query_port_ex(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct ibv_port_attr a;
	int e;

	if (gr_child_refuses())
		return EOPNOTSUPP;
	e = gr_query_port(GR_CTX(ctx)->h, port, &a);
	if (e)
		return e;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

/* The struct ibv_port_attr of programs built before port_cap_flags2 existed:
 * ibv_query_port's exported symbol fills only that much. */
#define COMPAT_PORT_ATTR_LEN offsetof(struct ibv_port_attr, port_cap_flags2)

int gr_query_port_1_1(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	return gr_query_port_ex(ctx, port, attr, COMPAT_PORT_ATTR_LEN);
}
SYMVER(gr_query_port_1_1, ibv_query_port, "IBVERBS_1.1");

int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index,
		      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	struct ibv_gid_entry g;
	uint32_t type;
	int e;

	if (flags || entry_size < sizeof(g) || port > 255)
		return EINVAL;
	if (gr_child_refuses())
		return EOPNOTSUPP;
	memset(&g, 0, sizeof(g));
	e = gr_query_gid(GR_CTX(ctx)->h, port, index, &g.gid, &type);
	if (e)
		return e;
	g.gid_index = index;
	g.port_num = port;
	g.gid_type = type;
	memcpy(entry, &g, sizeof(g));
	return 0;
}

ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries,
			     size_t max_entries, uint32_t flags, size_t entry_size)
{
	struct ibv_port_attr pa;
	size_t n = 0;
	int e;

	if (flags || entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	e = gr_query_port_ex(ctx, 1, &pa, sizeof(pa));
	if (e)
		return -e;
	for (int i = 0; i < pa.gid_tbl_len; i++) {
		struct ibv_gid_entry *g = (void *)((char *)entries + n * entry_size);

		if (n == max_entries)
			return -EINVAL;
		e = _ibv_query_gid_ex(ctx, 1, i, g, 0, entry_size);
		if (e == ENODATA)
			continue;
		if (e)
			return -e;
		n++;
	}
	return n;
}

int gr_query_gid_1_1(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	struct ibv_gid_entry g;
	int e;

	e = _ibv_query_gid_ex(ctx, port, index, &g, 0, sizeof(g));
	if (e == ENODATA) {
		/* An empty entry reads as the zero GID, as libibverbs keeps it. */
		memset(gid, 0, sizeof(*gid));
		return 0;
	}
	if (e) {
		errno = e;
		return -1;
	}
	*gid = g.gid;
	return 0;
}
SYMVER(gr_query_gid_1_1, ibv_query_gid, "IBVERBS_1.1");

/* The GID types of the kernel's sysfs, as providers' driver.h names them. */
enum { GID_TYPE_SYSFS_IB_ROCE_V1 = 0, GID_TYPE_SYSFS_ROCE_V2 = 1 };

int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, unsigned int *type)
{
	struct ibv_gid_entry g;
	int e;

	e = _ibv_query_gid_ex(ctx, port, index, &g, 0, sizeof(g));
	if (e == ENODATA) {
		*type = GID_TYPE_SYSFS_IB_ROCE_V1;
		return 0;
	}
	if (e) {
		errno = e;
		return -1;
	}
	*type = g.gid_type == IBV_GID_TYPE_ROCE_V2 ? GID_TYPE_SYSFS_ROCE_V2 : GID_TYPE_SYSFS_IB_ROCE_V1;
	return 0;
}

int gr_query_pkey_1_1(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	uint16_t k;
	int e;

	if (gr_child_refuses())
		return -1;
	e = gr_query_pkey(GR_CTX(ctx)->h, port, index, &k);
	if (e) {
		errno = e;
		return -1;
	}
	*pkey = htobe16(k);
	return 0;
}
SYMVER(gr_query_pkey_1_1, ibv_query_pkey, "IBVERBS_1.1");

int gr_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	__be16 k;

	for (int i = 0;; i++) {
		if (gr_query_pkey_1_1(ctx, port, i, &k))
			return -1;
		if (k == pkey)
			return i;
	}
}
SYMVER(gr_get_pkey_index, ibv_get_pkey_index, "IBVERBS_1.5");

/* ---- async events ---- */

void gr_wait_events(pthread_mutex_t *mu, pthread_cond_t *cond, uint32_t *done, uint32_t delivered)
{
	pthread_mutex_lock(mu);
	while (*done != delivered)
		pthread_cond_wait(cond, mu);
	pthread_mutex_unlock(mu);
}

enum event_element { ELEM_NONE, ELEM_CQ, ELEM_QP, ELEM_SRQ, ELEM_PORT };

static enum event_element element_of(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_CQ_ERR:
		return ELEM_CQ;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return ELEM_QP;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return ELEM_SRQ;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		return ELEM_PORT;
	default:
		return ELEM_NONE;
	}
}

int gr_get_async_event_1_1(struct ibv_context *ctx, struct ibv_async_event *event)
{
	struct gr_async_event ev;
	uint64_t n;

	if (gr_child_refuses())
		return -1;
	for (;;) {
		/* Blocks, or fails with EAGAIN, as the program set the fd. */
		if (read(ctx->async_fd, &n, sizeof(n)) != sizeof(n))
			return -1;
		if (gr_get_async_event(GR_CTX(ctx)->h, &ev) == 0)
			break;
	}
	memset(event, 0, sizeof(*event));
	event->event_type = ev.type;
	switch (element_of(ev.type)) {
	case ELEM_CQ: {
		struct gr_cq *c = (struct gr_cq *)ev.element;

		event->element.cq = (struct ibv_cq *)c;
		pthread_mutex_lock(&c->cq.mutex);
		c->async_events_delivered++;
		pthread_mutex_unlock(&c->cq.mutex);
		break;
	}
	case ELEM_QP: {
		struct gr_qp *q = (struct gr_qp *)ev.element;

		event->element.qp = &q->qpx.qp_base;
		pthread_mutex_lock(&q->qpx.qp_base.mutex);
		q->events_delivered++;
		pthread_mutex_unlock(&q->qpx.qp_base.mutex);
		break;
	}
	case ELEM_SRQ: {
		struct gr_srq *s = (struct gr_srq *)ev.element;

		event->element.srq = &s->srq;
		pthread_mutex_lock(&s->srq.mutex);
		s->events_delivered++;
		pthread_mutex_unlock(&s->srq.mutex);
		break;
	}
	case ELEM_PORT:
		event->element.port_num = ev.port;
		break;
	case ELEM_NONE:
		break;
	}
	return 0;
}
SYMVER(gr_get_async_event_1_1, ibv_get_async_event, "IBVERBS_1.1");

void gr_ack_async_event_1_1(struct ibv_async_event *event)
{
	pthread_mutex_t *mu;
	pthread_cond_t *cond;
	uint32_t *done;

	switch (element_of(event->event_type)) {
	case ELEM_CQ:
		mu = &event->element.cq->mutex;
		cond = &event->element.cq->cond;
		done = &event->element.cq->async_events_completed;
		break;
	case ELEM_QP:
		mu = &event->element.qp->mutex;
		cond = &event->element.qp->cond;
		done = &event->element.qp->events_completed;
		break;
	case ELEM_SRQ:
		mu = &event->element.srq->mutex;
		cond = &event->element.srq->cond;
		done = &event->element.srq->events_completed;
		break;
	default:
		return;
	}
	pthread_mutex_lock(mu);
	++*done;
	pthread_cond_signal(cond);
	pthread_mutex_unlock(mu);
}
SYMVER(gr_ack_async_event_1_1, ibv_ack_async_event, "IBVERBS_1.1");
