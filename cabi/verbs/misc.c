/*
 * misc.c: the helpers of libibverbs that need no device (strings, rates, the
 * kernel ABI copies, sysfs and fork), the verbs goroce cannot offer, the
 * IBVERBS_1.0 compatibility symbols and the provider-private IBVERBS_PRIVATE_34
 * set.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_sa.h>
#include <infiniband/sa.h>
#include "gr.h"

/* ---- strings: the exact texts of libibverbs, which tools print ---- */

const char *ibv_node_type_str(enum ibv_node_type t)
{
	switch (t) {
	case IBV_NODE_CA: return "InfiniBand channel adapter";
	case IBV_NODE_SWITCH: return "InfiniBand switch";
	case IBV_NODE_ROUTER: return "InfiniBand router";
	case IBV_NODE_RNIC: return "iWARP NIC";
	case IBV_NODE_USNIC: return "usNIC";
	case IBV_NODE_USNIC_UDP: return "usNIC UDP";
	case IBV_NODE_UNSPECIFIED: return "unspecified";
	default: return "unknown";
	}
}

const char *ibv_port_state_str(enum ibv_port_state s)
{
	switch (s) {
	case IBV_PORT_NOP: return "no state change (NOP)";
	case IBV_PORT_DOWN: return "down";
	case IBV_PORT_INIT: return "init";
	case IBV_PORT_ARMED: return "armed";
	case IBV_PORT_ACTIVE: return "active";
	case IBV_PORT_ACTIVE_DEFER: return "active defer";
	default: return "unknown";
	}
}

const char *ibv_event_type_str(enum ibv_event_type e)
{
	switch (e) {
	case IBV_EVENT_CQ_ERR: return "CQ error";
	case IBV_EVENT_QP_FATAL: return "local work queue catastrophic error";
	case IBV_EVENT_QP_REQ_ERR: return "invalid request local work queue error";
	case IBV_EVENT_QP_ACCESS_ERR: return "local access violation work queue error";
	case IBV_EVENT_COMM_EST: return "communication established";
	case IBV_EVENT_SQ_DRAINED: return "send queue drained";
	case IBV_EVENT_PATH_MIG: return "path migrated";
	case IBV_EVENT_PATH_MIG_ERR: return "path migration request error";
	case IBV_EVENT_DEVICE_FATAL: return "local catastrophic error";
	case IBV_EVENT_PORT_ACTIVE: return "port active";
	case IBV_EVENT_PORT_ERR: return "port error";
	case IBV_EVENT_LID_CHANGE: return "LID change";
	case IBV_EVENT_PKEY_CHANGE: return "P_Key change";
	case IBV_EVENT_SM_CHANGE: return "SM change";
	case IBV_EVENT_SRQ_ERR: return "SRQ catastrophic error";
	case IBV_EVENT_SRQ_LIMIT_REACHED: return "SRQ limit reached";
	case IBV_EVENT_QP_LAST_WQE_REACHED: return "last WQE reached";
	case IBV_EVENT_CLIENT_REREGISTER: return "client reregistration";
	case IBV_EVENT_GID_CHANGE: return "GID table change";
	case IBV_EVENT_WQ_FATAL: return "WQ fatal";
	default: return "unknown";
	}
}

const char *ibv_wc_status_str(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS: return "success";
	case IBV_WC_LOC_LEN_ERR: return "local length error";
	case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
	case IBV_WC_LOC_EEC_OP_ERR: return "local EE context operation error";
	case IBV_WC_LOC_PROT_ERR: return "local protection error";
	case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
	case IBV_WC_MW_BIND_ERR: return "memory management operation error";
	case IBV_WC_BAD_RESP_ERR: return "bad response error";
	case IBV_WC_LOC_ACCESS_ERR: return "local access error";
	case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request error";
	case IBV_WC_REM_ACCESS_ERR: return "remote access error";
	case IBV_WC_REM_OP_ERR: return "remote operation error";
	case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
	case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
	case IBV_WC_LOC_RDD_VIOL_ERR: return "local RDD violation error";
	case IBV_WC_REM_INV_RD_REQ_ERR: return "remote invalid RD request";
	case IBV_WC_REM_ABORT_ERR: return "aborted error";
	case IBV_WC_INV_EECN_ERR: return "invalid EE context number";
	case IBV_WC_INV_EEC_STATE_ERR: return "invalid EE context state";
	case IBV_WC_FATAL_ERR: return "fatal error";
	case IBV_WC_RESP_TIMEOUT_ERR: return "response timeout error";
	case IBV_WC_GENERAL_ERR: return "general error";
	case IBV_WC_TM_ERR: return "TM error";
	case IBV_WC_TM_RNDV_INCOMPLETE: return "TM software rendezvous";
	default: return "unknown";
	}
}

/* ---- static rates: one table for the four conversions ---- */

static const struct {
	enum ibv_rate rate;
	int mbps;
	int mult; /* multiple of 2.5 Gb/s, 0 where the IBA defines none */
} rates[] = {
	{IBV_RATE_2_5_GBPS, 2500, 1},	 {IBV_RATE_5_GBPS, 5000, 2},	  {IBV_RATE_10_GBPS, 10000, 4},
	{IBV_RATE_20_GBPS, 20000, 8},	 {IBV_RATE_30_GBPS, 30000, 12},	  {IBV_RATE_40_GBPS, 40000, 16},
	{IBV_RATE_60_GBPS, 60000, 24},	 {IBV_RATE_80_GBPS, 80000, 32},	  {IBV_RATE_120_GBPS, 120000, 48},
	{IBV_RATE_14_GBPS, 14062, 0},	 {IBV_RATE_56_GBPS, 56250, 0},	  {IBV_RATE_112_GBPS, 112500, 0},
	{IBV_RATE_168_GBPS, 168750, 0},	 {IBV_RATE_25_GBPS, 25781, 0},	  {IBV_RATE_100_GBPS, 103125, 0},
	{IBV_RATE_200_GBPS, 206250, 0},	 {IBV_RATE_300_GBPS, 309375, 0},  {IBV_RATE_28_GBPS, 28125, 0},
	{IBV_RATE_50_GBPS, 53125, 0},	 {IBV_RATE_400_GBPS, 425000, 0},  {IBV_RATE_600_GBPS, 637500, 0},
	{IBV_RATE_800_GBPS, 850000, 0},	 {IBV_RATE_1200_GBPS, 1275000, 0},
};
#define NRATES (sizeof(rates) / sizeof(rates[0]))

int __attribute__((const)) ibv_rate_to_mult(enum ibv_rate rate)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].rate == rate)
			return rates[i].mult ? rates[i].mult : -1;
	return -1;
}

enum ibv_rate __attribute__((const)) mult_to_ibv_rate(int mult)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].mult && rates[i].mult == mult)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

int __attribute__((const)) ibv_rate_to_mbps(enum ibv_rate rate)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].rate == rate)
			return rates[i].mbps;
	return -1;
}

enum ibv_rate __attribute__((const)) mbps_to_ibv_rate(int mbps)
{
	for (size_t i = 0; i < NRATES; i++)
		if (rates[i].mbps == mbps)
			return rates[i].rate;
	return IBV_RATE_MAX;
}

/* ---- the kernel ABI copies (for programs that speak to uverbs or ucma themselves) ---- */

void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;
	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;
	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->reversible = src->reversible;
	dst->numb_path = src->numb_path;
	dst->pkey = src->pkey;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->mtu = src->mtu;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time_selector = src->packet_life_time_selector;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
}

void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src)
{
	memcpy(dst->dgid, src->dgid.raw, sizeof(dst->dgid));
	memcpy(dst->sgid, src->sgid.raw, sizeof(dst->sgid));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->reversible = src->reversible;
	dst->numb_path = src->numb_path;
	dst->pkey = src->pkey;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->mtu = src->mtu;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time_selector = src->packet_life_time_selector;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
}

/* ---- sysfs: real file reads, so a tool asking for a kernel device's file
 * (board_id, ...) learns there is none ---- */

const char *ibv_get_sysfs_path(void)
{
	const char *p = getenv("SYSFS_PATH");

	return p && *p ? p : "/sys";
}

int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size)
{
	char path[4096];
	ssize_t n;
	int fd;

	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, size);
	close(fd);
	if (n < 0)
		return -1;
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = 0;
	else if ((size_t)n < size)
		buf[n] = 0;
	return n;
}

/* ---- fork: the engine does no DMA, so pages copied on write after a fork()
 * are simply the parent's; the parent keeps working. The child cannot enter
 * the Go half (its threads are gone), so its verbs fail with EOPNOTSUPP. ---- */

volatile int gr_forked;

static void mark_child(void)
{
	gr_forked = 1;
}

__attribute__((constructor)) static void gr_atfork(void)
{
	pthread_atfork(NULL, NULL, mark_child);
}

int gr_fork_init(void)
{
	return 0;
}
SYMVER(gr_fork_init, ibv_fork_init, "IBVERBS_1.1");

enum ibv_fork_status ibv_is_fork_initialized(void)
{
	return IBV_FORK_UNNEEDED;
}

int gr_dontfork_range(void *base, size_t size)
{
	(void)base, (void)size;
	return 0;
}
SYMVER(gr_dontfork_range, ibv_dontfork_range, "IBVERBS_1.1");

int gr_dofork_range(void *base, size_t size)
{
	(void)base, (void)size;
	return 0;
}
SYMVER(gr_dofork_range, ibv_dofork_range, "IBVERBS_1.1");

/* ---- what needs a kernel device or hardware goroce has no counterpart of ---- */

int gr_resolve_eth_l2_from_gid(struct ibv_context *ctx, struct ibv_ah_attr *attr, uint8_t mac[6], uint16_t *vid)
{
	(void)ctx, (void)attr, (void)mac, (void)vid;
	/* The kernel's UDP socket resolves neighbours; there is no L2 to give. */
	errno = EOPNOTSUPP;
	return -1;
}
SYMVER(gr_resolve_eth_l2_from_gid, ibv_resolve_eth_l2_from_gid, "IBVERBS_1.1");

int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}

int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp, (void)ece;
	return EOPNOTSUPP;
}

struct ibv_pd *ibv_import_pd(struct ibv_context *ctx, uint32_t h)
{
	(void)ctx, (void)h;
	return gr_fail(EOPNOTSUPP);
}

void ibv_unimport_pd(struct ibv_pd *pd)
{
	(void)pd;
}

struct ibv_mr *ibv_import_mr(struct ibv_pd *pd, uint32_t h)
{
	(void)pd, (void)h;
	return gr_fail(EOPNOTSUPP);
}

void ibv_unimport_mr(struct ibv_mr *mr)
{
	(void)mr;
}

struct ibv_dm *ibv_import_dm(struct ibv_context *ctx, uint32_t h)
{
	(void)ctx, (void)h;
	return gr_fail(EOPNOTSUPP);
}

void ibv_unimport_dm(struct ibv_dm *dm)
{
	(void)dm;
}

/* ibv_register_driver is how a pre-rdma-core provider announced itself; there
 * is no provider to load here. */
void gr_register_driver(const char *name, void *init)
{
	(void)name, (void)init;
}
SYMVER_OLD(gr_register_driver, ibv_register_driver, "IBVERBS_1.1");

/* ---- IBVERBS_1.0: the ABI of libibverbs before 1.1 (2006), whose structs
 * differ from today's. No program built in this century links to it; each
 * symbol exists and fails with ENOSYS. ---- */

#define COMPAT10_PTR(name)                                                                                   \
	void *gr_compat10_##name(void)                                                                       \
	{                                                                                                    \
		errno = ENOSYS;                                                                              \
		return NULL;                                                                                 \
	}                                                                                                    \
	SYMVER_OLD(gr_compat10_##name, name, "IBVERBS_1.0")
#define COMPAT10_INT(name)                                                                                   \
	int gr_compat10_##name(void)                                                                         \
	{                                                                                                    \
		errno = ENOSYS;                                                                              \
		return ENOSYS;                                                                               \
	}                                                                                                    \
	SYMVER_OLD(gr_compat10_##name, name, "IBVERBS_1.0")
#define COMPAT10_VOID(name)                                                                                  \
	void gr_compat10_##name(void)                                                                        \
	{                                                                                                    \
	}                                                                                                    \
	SYMVER_OLD(gr_compat10_##name, name, "IBVERBS_1.0")

COMPAT10_VOID(ibv_ack_async_event);
COMPAT10_VOID(ibv_ack_cq_events);
COMPAT10_PTR(ibv_alloc_pd);
COMPAT10_INT(ibv_attach_mcast);
COMPAT10_INT(ibv_close_device);
COMPAT10_PTR(ibv_create_ah);
COMPAT10_PTR(ibv_create_cq);
COMPAT10_PTR(ibv_create_qp);
COMPAT10_PTR(ibv_create_srq);
COMPAT10_INT(ibv_dealloc_pd);
COMPAT10_INT(ibv_dereg_mr);
COMPAT10_INT(ibv_destroy_ah);
COMPAT10_INT(ibv_destroy_cq);
COMPAT10_INT(ibv_destroy_qp);
COMPAT10_INT(ibv_destroy_srq);
COMPAT10_INT(ibv_detach_mcast);
COMPAT10_VOID(ibv_free_device_list);
COMPAT10_INT(ibv_get_async_event);
COMPAT10_INT(ibv_get_cq_event);
COMPAT10_INT(ibv_get_device_guid);
COMPAT10_PTR(ibv_get_device_list);
COMPAT10_PTR(ibv_get_device_name);
COMPAT10_INT(ibv_modify_qp);
COMPAT10_INT(ibv_modify_srq);
COMPAT10_PTR(ibv_open_device);
COMPAT10_INT(ibv_query_device);
COMPAT10_INT(ibv_query_gid);
COMPAT10_INT(ibv_query_pkey);
COMPAT10_INT(ibv_query_port);
COMPAT10_INT(ibv_query_qp);
COMPAT10_INT(ibv_query_srq);
COMPAT10_PTR(ibv_reg_mr);
COMPAT10_INT(ibv_resize_cq);

/* ---- IBVERBS_PRIVATE_34: the interface between libibverbs and its kernel
 * providers (libmlx5, librxe, ...). goroce has no kernel device for a
 * provider to drive: a provider that registers is ignored, and every command
 * it would send to the kernel fails with EOPNOTSUPP. ---- */

bool verbs_allow_disassociate_destroy;

void verbs_register_driver_34(void *ops)
{
	(void)ops;
}

void __verbs_log(struct verbs_context *ctx, uint32_t level, const char *fmt, ...)
{
	(void)ctx, (void)level, (void)fmt;
}

unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, void *link)
{
	(void)link;
	return num_attrs;
}

void *_verbs_init_and_alloc_context(void *device, int cmd_fd, size_t alloc_size, void *context_offset,
				    uint32_t driver_id)
{
	(void)device, (void)cmd_fd, (void)alloc_size, (void)context_offset, (void)driver_id;
	return gr_fail(EOPNOTSUPP);
}

struct ibv_context *verbs_open_device(struct ibv_device *device, void *private_data)
{
	(void)device, (void)private_data;
	return gr_fail(EOPNOTSUPP);
}

void verbs_uninit_context(struct verbs_context *ctx)
{
	(void)ctx;
}

void verbs_set_ops(struct verbs_context *vctx, const void *ops)
{
	(void)vctx, (void)ops;
}

void verbs_init_cq(struct ibv_cq *cq, struct ibv_context *ctx, struct ibv_comp_channel *ch, void *cq_context)
{
	cq->context = ctx;
	cq->channel = ch;
	cq->cq_context = cq_context;
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
}

int ibv_read_ibdev_sysfs_file(char *buf, size_t size, void *sysfs_dev, const char *fnfmt, ...)
{
	(void)buf, (void)size, (void)sysfs_dev, (void)fnfmt;
	errno = ENOENT;
	return -1;
}

#define KERNEL_CMD(name)                                                                                     \
	int name(void)                                                                                       \
	{                                                                                                    \
		return EOPNOTSUPP;                                                                           \
	}

KERNEL_CMD(execute_ioctl)
KERNEL_CMD(ibv_cmd_advise_mr)
KERNEL_CMD(ibv_cmd_alloc_dm)
KERNEL_CMD(ibv_cmd_alloc_mw)
KERNEL_CMD(ibv_cmd_alloc_pd)
KERNEL_CMD(ibv_cmd_attach_mcast)
KERNEL_CMD(ibv_cmd_close_xrcd)
KERNEL_CMD(ibv_cmd_create_ah)
KERNEL_CMD(ibv_cmd_create_counters)
KERNEL_CMD(ibv_cmd_create_cq)
KERNEL_CMD(ibv_cmd_create_cq_ex)
KERNEL_CMD(ibv_cmd_create_flow)
KERNEL_CMD(ibv_cmd_create_flow_action_esp)
KERNEL_CMD(ibv_cmd_create_qp)
KERNEL_CMD(ibv_cmd_create_qp_ex)
KERNEL_CMD(ibv_cmd_create_qp_ex2)
KERNEL_CMD(ibv_cmd_create_rwq_ind_table)
KERNEL_CMD(ibv_cmd_create_srq)
KERNEL_CMD(ibv_cmd_create_srq_ex)
KERNEL_CMD(ibv_cmd_create_wq)
KERNEL_CMD(ibv_cmd_dealloc_mw)
KERNEL_CMD(ibv_cmd_dealloc_pd)
KERNEL_CMD(ibv_cmd_dereg_mr)
KERNEL_CMD(ibv_cmd_destroy_ah)
KERNEL_CMD(ibv_cmd_destroy_counters)
KERNEL_CMD(ibv_cmd_destroy_cq)
KERNEL_CMD(ibv_cmd_destroy_flow)
KERNEL_CMD(ibv_cmd_destroy_flow_action)
KERNEL_CMD(ibv_cmd_destroy_qp)
KERNEL_CMD(ibv_cmd_destroy_rwq_ind_table)
KERNEL_CMD(ibv_cmd_destroy_srq)
KERNEL_CMD(ibv_cmd_destroy_wq)
KERNEL_CMD(ibv_cmd_detach_mcast)
KERNEL_CMD(ibv_cmd_free_dm)
KERNEL_CMD(ibv_cmd_get_context)
KERNEL_CMD(ibv_cmd_modify_cq)
KERNEL_CMD(ibv_cmd_modify_flow_action_esp)
KERNEL_CMD(ibv_cmd_modify_qp)
KERNEL_CMD(ibv_cmd_modify_qp_ex)
KERNEL_CMD(ibv_cmd_modify_srq)
KERNEL_CMD(ibv_cmd_modify_wq)
KERNEL_CMD(ibv_cmd_open_qp)
KERNEL_CMD(ibv_cmd_open_xrcd)
KERNEL_CMD(ibv_cmd_poll_cq)
KERNEL_CMD(ibv_cmd_post_recv)
KERNEL_CMD(ibv_cmd_post_send)
KERNEL_CMD(ibv_cmd_post_srq_recv)
KERNEL_CMD(ibv_cmd_query_context)
KERNEL_CMD(ibv_cmd_query_device_any)
KERNEL_CMD(ibv_cmd_query_mr)
KERNEL_CMD(ibv_cmd_query_port)
KERNEL_CMD(ibv_cmd_query_qp)
KERNEL_CMD(ibv_cmd_query_srq)
KERNEL_CMD(ibv_cmd_read_counters)
KERNEL_CMD(ibv_cmd_reg_dm_mr)
KERNEL_CMD(ibv_cmd_reg_dmabuf_mr)
KERNEL_CMD(ibv_cmd_reg_mr)
KERNEL_CMD(ibv_cmd_req_notify_cq)
KERNEL_CMD(ibv_cmd_rereg_mr)
KERNEL_CMD(ibv_cmd_resize_cq)
