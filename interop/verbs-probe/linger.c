/*
 * linger.so: preloaded into rdmacm-utils' mckey when it sends (LD_PRELOAD). mckey posts
 * its SENDs unsignaled and leaves the group right after posting; rxe of kernel 6.12
 * sends a user QP's work requests from a work queue, so most of them were still queued
 * when mckey destroyed its QP, and they were flushed, not sent (6.1 sent them in the
 * caller's context). This holds rdma_leave_multicast for $LINGER_MS milliseconds
 * (default 1000) before calling the real one. The types do not matter to the symbol
 * lookup, so no librdmacm header is needed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

int rdma_leave_multicast(void *id, void *addr)
{
	int (*real)(void *, void *) = (int (*)(void *, void *))dlsym(RTLD_NEXT, "rdma_leave_multicast");
	const char *ms = getenv("LINGER_MS");
	long n = ms ? atol(ms) : 1000;
	struct timespec ts = { .tv_sec = n / 1000, .tv_nsec = (n % 1000) * 1000000L };

	nanosleep(&ts, NULL);
	return real ? real(id, addr) : -1;
}
