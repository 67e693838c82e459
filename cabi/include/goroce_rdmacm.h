/*
 * goroce_rdmacm.h: what the two halves of goroce's librdmacm share. The Go half
 * (cabi/engine/ucma.go) plays the kernel's rdma_ucm; the C half (cabi/rdmacm)
 * keeps librdmacm's structs and moves QPs through libibverbs.
 */
#ifndef GOROCE_RDMACM_H
#define GOROCE_RDMACM_H

#include <stdint.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* An event as the Go half queues it: C memory the C half frees. */
struct gr_cm_event {
	uintptr_t id;        /* the C struct of the id it concerns */
	uintptr_t listen_id; /* CONNECT_REQUEST: the listening id */
	uintptr_t child_h;   /* CONNECT_REQUEST: the Go handle of the new id */
	int event;           /* enum rdma_cm_event_type */
	int status;
	/* param.conn */
	uint8_t responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count, srq;
	uint32_t qp_num;
	/* param.ud */
	int has_ah;
	struct ibv_ah_attr ah_attr;
	uint32_t ud_qp_num, qkey;
	uintptr_t mc_context; /* MULTICAST_JOIN: the context the program gave */
	uint8_t private_data_len;
	uint8_t private_data[255];
};

/* What a side offers (struct rdma_conn_param, flattened). */
struct gr_conn_param {
	uint32_t qp_num, qkey;
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count, srq;
	uint8_t private_data_len;
	uint8_t private_data[255];
};

/* What an rdma_cm_id shows of its addresses. */
struct gr_cm_query {
	int dev_index; /* -1: not bound to one device */
	struct sockaddr_storage src, dst;
	union ibv_gid sgid, dgid;
	uint8_t mtu; /* enum ibv_mtu of the port, 0 when unknown */
};

#endif
