/*
 * addrinfo.c: rdma_getaddrinfo and rdma_freeaddrinfo. On RoCE an RDMA address
 * is an IP address, so the resolution is getaddrinfo's; what librdmacm adds is
 * the port space and QP type, and which side (source for RAI_PASSIVE,
 * destination otherwise) the address fills.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

static int copy_addr(struct sockaddr **dst, socklen_t *dlen, const struct sockaddr *src, socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return -1;
	memcpy(*dst, src, len);
	*dlen = len;
	return 0;
}

static int eai_errno(int e)
{
	switch (e) {
	case EAI_MEMORY: return ENOMEM;
	case EAI_SYSTEM: return errno;
	case EAI_NONAME:
	case EAI_NODATA: return EADDRNOTAVAIL;
	case EAI_FAMILY: return EAFNOSUPPORT;
	default: return EINVAL;
	}
}

int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	struct addrinfo ai_hints, *ai, *a;
	struct rdma_addrinfo *head = NULL, **tail = &head;
	int passive = hints && (hints->ai_flags & RAI_PASSIVE), ret;

	if (!res)
		return errno = EINVAL, -1;
	if (!node && !service && !passive)
		return errno = EINVAL, -1;
	memset(&ai_hints, 0, sizeof(ai_hints));
	ai_hints.ai_socktype = SOCK_STREAM;
	if (hints) {
		ai_hints.ai_family = hints->ai_family;
		if (hints->ai_flags & RAI_NUMERICHOST)
			ai_hints.ai_flags |= AI_NUMERICHOST;
		if (passive)
			ai_hints.ai_flags |= AI_PASSIVE;
		if (hints->ai_port_space == RDMA_PS_UDP)
			ai_hints.ai_socktype = SOCK_DGRAM;
	}
	ret = getaddrinfo(node, service, &ai_hints, &ai);
	if (ret)
		return errno = eai_errno(ret), -1;
	for (a = ai; a; a = a->ai_next) {
		struct rdma_addrinfo *r;

		if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
			continue;
		r = calloc(1, sizeof(*r));
		if (!r)
			goto nomem;
		*tail = r;
		tail = &r->ai_next;
		r->ai_flags = hints ? hints->ai_flags : 0;
		r->ai_family = a->ai_family;
		r->ai_port_space = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
		r->ai_qp_type = hints && hints->ai_qp_type ? hints->ai_qp_type :
				r->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC;
		if (passive) {
			if (copy_addr(&r->ai_src_addr, &r->ai_src_len, a->ai_addr, a->ai_addrlen))
				goto nomem;
		} else {
			if (copy_addr(&r->ai_dst_addr, &r->ai_dst_len, a->ai_addr, a->ai_addrlen))
				goto nomem;
			if (hints && hints->ai_src_addr &&
			    copy_addr(&r->ai_src_addr, &r->ai_src_len, hints->ai_src_addr, hints->ai_src_len))
				goto nomem;
		}
		if (a->ai_canonname) {
			char **name = passive ? &r->ai_src_canonname : &r->ai_dst_canonname;

			if (!(*name = strdup(a->ai_canonname)))
				goto nomem;
		}
	}
	freeaddrinfo(ai);
	if (!head)
		return errno = EADDRNOTAVAIL, -1;
	*res = head;
	return 0;
nomem:
	freeaddrinfo(ai);
	rdma_freeaddrinfo(head);
	return errno = ENOMEM, -1;
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}
