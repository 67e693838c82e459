/*
 * verbs-events: the file descriptors and extended interfaces of libibverbs, on one
 * device, with an RC QP connected to itself.
 *
 *   verbs-events [-d DEV] [-g GIDX]
 *
 *  1. A freshly opened context has no async event: its async_fd, made non-blocking,
 *     gives EAGAIN.
 *  2. A completion channel's fd, polled with poll(2), becomes readable when an armed CQ
 *     gets a completion; ibv_get_cq_event names that CQ and its cq_context.
 *  3. A SEND built with the extended send API (ibv_wr_start, ibv_wr_send,
 *     ibv_wr_set_sge, ibv_wr_complete) arrives through an SRQ, and an extended CQ
 *     (ibv_create_cq_ex) reports it through ibv_start_poll / ibv_next_poll /
 *     ibv_wc_read_*.
 *  4. Two more SENDs take the SRQ below its armed limit: async_fd polls readable with
 *     IBV_EVENT_SRQ_LIMIT_REACHED for that SRQ, once.
 *  5. ibv_destroy_* wait for their events to be acked, so they are acked first.
 *
 * Prints "verbs-events: PASS" and exits 0, or the step that failed and 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static int fail(const char *what)
{
	printf("verbs-events: FAIL: %s (errno %d: %s)\n", what, errno, strerror(errno));
	return 1;
}

static int readable(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

int main(int argc, char **argv)
{
	static char buf[8192];
	const char *dev = NULL;
	int gidx = 1, n;
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_async_event ae;
	union ibv_gid gid;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "-d"))
			dev = argv[i + 1];
		else if (!strcmp(argv[i], "-g"))
			gidx = atoi(argv[i + 1]);
	}
	list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && !ctx; i++)
		if (!dev || !strcmp(ibv_get_device_name(list[i]), dev))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		return fail("open the device");

	/* 1. async_fd */
	if (fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK))
		return fail("O_NONBLOCK on async_fd");
	if (ibv_get_async_event(ctx, &ae) == 0 || errno != EAGAIN) {
		printf("verbs-events: FAIL: a new context has an async event (%s), or no EAGAIN\n",
		       ibv_event_type_str(ae.event_type));
		return 1;
	}

	/* 2 and 3: an RC QP connected to itself, sending through ibv_qp_ex. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq_init_attr_ex cqa = {.cqe = 16, .cq_context = buf, .channel = ch,
					  .wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM};
	struct ibv_cq_ex *rcq = ch ? ibv_create_cq_ex(ctx, &cqa) : NULL;
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 4, .max_sge = 1}};
	struct ibv_srq *srq = pd ? ibv_create_srq(pd, &sa) : NULL;
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = scq, .recv_cq = rcq ? ibv_cq_ex_to_cq(rcq) : NULL, .srq = srq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND,
	};
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;

	if (!pd || !mr || !ch || !rcq || !scq || !srq)
		return fail("PD, MR, channel, CQs or SRQ");
	if (!(qp = ibv_create_qp_ex(ctx, &qa)) || !(qpx = ibv_qp_to_qp_ex(qp)))
		return fail("ibv_create_qp_ex with send ops");
	if (ibv_query_gid(ctx, 1, gidx, &gid))
		return fail("ibv_query_gid");
	{
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};

		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			return fail("INIT");
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTR;
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = qp->qp_num;
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 12;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = gid;
		a.ah_attr.grh.sgid_index = gidx;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.port_num = 1;
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
			return fail("RTR");
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
						  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
			return fail("RTS");
	}
	for (int i = 0; i < 4; i++) {
		struct ibv_sge g = {(uintptr_t)buf + 4096 + 64 * i, 64, mr->lkey};
		struct ibv_recv_wr rwr = {.wr_id = 7 + i, .sg_list = &g, .num_sge = 1}, *bad;

		if (ibv_post_srq_recv(srq, &rwr, &bad))
			return fail("ibv_post_srq_recv");
	}
	{
		struct ibv_srq_attr limit = {.srq_limit = 2};

		if (ibv_modify_srq(srq, &limit, IBV_SRQ_LIMIT))
			return fail("arm the SRQ limit");
	}
	if (ibv_req_notify_cq(ibv_cq_ex_to_cq(rcq), 0))
		return fail("ibv_req_notify_cq");
	strcpy(buf, "hello through ibv_wr_send");
	ibv_wr_start(qpx);
	qpx->wr_id = 9;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, mr->lkey, (uintptr_t)buf, 32);
	if (ibv_wr_complete(qpx))
		return fail("ibv_wr_complete");

	if (!readable(ch->fd, 5000))
		return fail("the completion channel never readable");
	{
		struct ibv_cq *ev_cq;
		void *ev_ctx;

		if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx))
			return fail("ibv_get_cq_event");
		if (ev_cq != ibv_cq_ex_to_cq(rcq) || ev_ctx != buf)
			return fail("ibv_get_cq_event named another CQ or context");
		ibv_ack_cq_events(ev_cq, 1);
	}
	{
		struct ibv_poll_cq_attr pa = {0};
		int got = 0;

		if (ibv_start_poll(rcq, &pa))
			return fail("ibv_start_poll found nothing after the event");
		do {
			if (rcq->status != IBV_WC_SUCCESS || rcq->wr_id != 7 || ibv_wc_read_opcode(rcq) != IBV_WC_RECV ||
			    ibv_wc_read_byte_len(rcq) != 32 || ibv_wc_read_qp_num(rcq) != qp->qp_num) {
				printf("verbs-events: FAIL: receive completion status %d wr_id %llu opcode %d len %u qp %u\n",
				       rcq->status, (unsigned long long)rcq->wr_id, ibv_wc_read_opcode(rcq),
				       ibv_wc_read_byte_len(rcq), ibv_wc_read_qp_num(rcq));
				return 1;
			}
			got++;
		} while (ibv_next_poll(rcq) == 0);
		ibv_end_poll(rcq);
		if (got != 1 || strcmp(buf + 4096, "hello through ibv_wr_send"))
			return fail("the SEND's data");
	}
	{
		struct ibv_wc wc;
		int k = 0;

		for (int i = 0; i < 5000000 && k == 0; i++)
			k = ibv_poll_cq(scq, 1, &wc);
		if (k != 1 || wc.status != IBV_WC_SUCCESS || wc.wr_id != 9 || wc.opcode != IBV_WC_SEND)
			return fail("the SEND's completion");
	}

	/* 4. Two more SENDs leave the SRQ one WR, below its limit of 2. */
	for (int i = 0; i < 2; i++) {
		struct ibv_sge g = {(uintptr_t)buf, 32, mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 10 + i, .sg_list = &g, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;

		if (ibv_post_send(qp, &wr, &bad))
			return fail("ibv_post_send");
	}
	if (!readable(ctx->async_fd, 5000))
		return fail("async_fd never readable after the SRQ went below its limit");
	if (ibv_get_async_event(ctx, &ae))
		return fail("ibv_get_async_event");
	if (ae.event_type != IBV_EVENT_SRQ_LIMIT_REACHED || ae.element.srq != srq) {
		printf("verbs-events: FAIL: async event %s, want SRQ limit reached on our SRQ\n",
		       ibv_event_type_str(ae.event_type));
		return 1;
	}
	ibv_ack_async_event(&ae);
	if (ibv_get_async_event(ctx, &ae) == 0 || errno != EAGAIN)
		return fail("a second SRQ limit event (it is one-shot), or no EAGAIN");
	{
		struct ibv_wc wc[4];
		int k = 0;

		for (int i = 0; i < 5000000 && k < 2; i++) {
			int r = ibv_poll_cq(scq, 4 - k, wc + k);

			if (r < 0)
				return fail("ibv_poll_cq");
			k += r;
		}
		if (k != 2)
			return fail("the two SENDs' completions");
	}
	if (ibv_destroy_qp(qp) || ibv_destroy_srq(srq) || ibv_destroy_cq(ibv_cq_ex_to_cq(rcq)) || ibv_destroy_cq(scq) ||
	    ibv_destroy_comp_channel(ch) || ibv_dereg_mr(mr) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		return fail("tear down");
	ibv_free_device_list(list);
	printf("verbs-events: PASS\n");
	return 0;
}
