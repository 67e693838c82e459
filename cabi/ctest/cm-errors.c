/*
 * cm-errors: the error paths of rdma_cm, as librdmacm reports them to a program.
 *
 *   cm-errors -t noport      -a ADDR -p PORT   connect to a port nobody listens on
 *   cm-errors -t unreachable -a ADDR -p PORT   connect to an address that never answers
 *   cm-errors -t reject      -a ADDR -p PORT   connect to a reject-server
 *   cm-errors -t reject-server -b ADDR -p PORT  reject one request with private data
 *   cm-errors -t withdraw    -a ADDR           destroy an id whose event waits unread
 *   cm-errors -t late-reader -a ADDR           rdma_get_cm_event after the channel's destroy
 *
 * A client prints "cm-errors TEST: EVENT status S [private_data TEXT]" for the event that
 * ended its rdma_connect and exits 0; withdraw prints "cm-errors withdraw: quiet" when the
 * channel's fd stopped polling readable with the id, and late-reader prints "cm-errors
 * late-reader: blocked" when a thread that calls rdma_get_cm_event on a destroyed channel
 * sleeps in a system call instead of returning; the checks are the caller's (the same binary runs
 * on goroce's librdmacm and on rxe's). It exits 1 when a step before the connect fails, 2
 * on bad arguments.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <rdma/rdma_cma.h>

#define REJECT_DATA "no thanks"

static int fail(const char *what)
{
	printf("cm-errors: FAIL: %s (errno %d: %s)\n", what, errno, strerror(errno));
	return 1;
}

/* next waits for the id's next event and returns it (acked by the caller). */
static struct rdma_cm_event *next(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev;

	return rdma_get_cm_event(ch, &ev) ? NULL : ev;
}

static int get_addr(const char *host, const char *port, int passive, struct rdma_addrinfo **res)
{
	struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_TCP, .ai_flags = passive ? RAI_PASSIVE : 0};

	return rdma_getaddrinfo(host, port, &hints, res);
}

static int server(const char *addr, const char *port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen;
	struct rdma_addrinfo *res;
	struct rdma_cm_event *ev;

	if (!ch || rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP))
		return fail("create id");
	if (get_addr(addr, port, 1, &res) || rdma_bind_addr(listen, res->ai_src_addr) || rdma_listen(listen, 1))
		return fail("listen");
	printf("cm-errors reject-server: listening\n");
	fflush(stdout);
	while ((ev = next(ch))) {
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct rdma_cm_id *id = ev->id;

			if (rdma_reject(id, REJECT_DATA, sizeof(REJECT_DATA)))
				return fail("rdma_reject");
			rdma_ack_cm_event(ev);
			rdma_destroy_id(id);
			printf("cm-errors reject-server: rejected\n");
			return 0;
		}
		rdma_ack_cm_event(ev);
	}
	return fail("rdma_get_cm_event");
}

static int client(const char *test, const char *addr, const char *port)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param param = {.retry_count = 7, .rnr_retry_count = 7};
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct rdma_addrinfo *res;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return fail("create id");
	if (get_addr(addr, port, 0, &res))
		return fail("rdma_getaddrinfo");
	if (rdma_resolve_addr(id, NULL, res->ai_dst_addr, 2000))
		return fail("rdma_resolve_addr");
	if (!(ev = next(ch)) || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
		return fail("address not resolved");
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 2000) || !(ev = next(ch)) || ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED)
		return fail("route not resolved");
	rdma_ack_cm_event(ev);
	if (rdma_create_qp(id, NULL, &qa))
		return fail("rdma_create_qp");
	if (rdma_connect(id, &param))
		return fail("rdma_connect");
	if (!(ev = next(ch)))
		return fail("rdma_get_cm_event");
	printf("cm-errors %s: %s status %d", test, rdma_event_str(ev->event), ev->status);
	if (ev->event == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data_len) {
		const char *p = ev->param.conn.private_data;
		int n = strnlen(p, ev->param.conn.private_data_len);

		printf(" private_data %.*s", n, p);
	}
	printf("\n");
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	rdma_freeaddrinfo(res);
	return 0;
}

/* withdraw: an event the program never read goes with its id, as the kernel's
 * ucma drops them, so the channel no longer polls readable and a thread blocked
 * in rdma_get_cm_event is not woken for nothing. */
static int withdraw(const char *addr)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct pollfd p = {.events = POLLIN};
	struct rdma_addrinfo *res;
	struct rdma_cm_id *id;

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return fail("create id");
	if (get_addr(addr, "7471", 0, &res) || rdma_resolve_addr(id, NULL, res->ai_dst_addr, 2000))
		return fail("rdma_resolve_addr");
	p.fd = ch->fd;
	if (poll(&p, 1, 30000) != 1)
		return fail("no ADDR_RESOLVED event within 30 s");
	if (rdma_destroy_id(id))
		return fail("rdma_destroy_id");
	p.revents = 0;
	if (poll(&p, 1, 0) != 0) {
		printf("cm-errors withdraw: the destroyed id's event still makes the channel readable\n");
		return 1;
	}
	printf("cm-errors withdraw: quiet\n");
	rdma_destroy_event_channel(ch);
	rdma_freeaddrinfo(res);
	return 0;
}

struct late {
	struct rdma_event_channel *ch;
	atomic_int tid, returned, err;
};

static void *late_read(void *arg)
{
	struct late *l = arg;
	struct rdma_cm_event *ev;

	atomic_store(&l->tid, (int)syscall(SYS_gettid));
	rdma_get_cm_event(l->ch, &ev);
	atomic_store(&l->err, errno);
	atomic_store(&l->returned, 1);
	return NULL;
}

/* in_syscall reports whether thread tid sleeps in a system call: the first field
 * of /proc/self/task/TID/syscall is its number then, "running" when it runs. */
static int in_syscall(int tid)
{
	char path[64], buf[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	if (!(f = fopen(path, "r")))
		return 0;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return buf[0] >= '0' && buf[0] <= '9';
}

/* late_reader: rping's event thread loops back into rdma_get_cm_event while its
 * main thread destroys the channel. A reader that comes after the destroy must
 * sleep, as one that came a moment before does, not return (EBADF, on which rping
 * exits 255). */
static int late_reader(void)
{
	struct late l = {.ch = rdma_create_event_channel()};
	struct timespec nap = {.tv_nsec = 1000000};
	pthread_t th;
	int i, asleep;

	if (!l.ch)
		return fail("rdma_create_event_channel");
	rdma_destroy_event_channel(l.ch);
	if (pthread_create(&th, NULL, late_read, &l))
		return fail("pthread_create");
	/* Bounded: 30 s for the thread to reach its sleep. Asleep is in a system call
	 * at 3 looks in a row, 1 ms apart: a call on the way (malloc's mmap) is over
	 * in microseconds. */
	for (i = 0, asleep = 0; i < 30000 && asleep < 3; i++) {
		int tid = atomic_load(&l.tid);

		if (atomic_load(&l.returned)) {
			int e = atomic_load(&l.err);

			printf("cm-errors late-reader: rdma_get_cm_event returned (errno %d: %s)\n", e, strerror(e));
			return 1;
		}
		asleep = tid && in_syscall(tid) ? asleep + 1 : 0;
		nanosleep(&nap, NULL);
	}
	if (asleep == 3 && !atomic_load(&l.returned)) {
		printf("cm-errors late-reader: blocked\n");
		return 0;
	}
	return fail("the late reader neither slept nor returned in 30 s");
}

int main(int argc, char **argv)
{
	const char *test = NULL, *addr = NULL, *port = "7480";
	int c;

	while ((c = getopt(argc, argv, "t:a:b:p:")) != -1) {
		switch (c) {
		case 't': test = optarg; break;
		case 'a':
		case 'b': addr = optarg; break;
		case 'p': port = optarg; break;
		default: goto usage;
		}
	}
	if (!test || !addr)
		goto usage;
	if (!strcmp(test, "reject-server"))
		return server(addr, port);
	if (!strcmp(test, "withdraw"))
		return withdraw(addr);
	if (!strcmp(test, "late-reader"))
		return late_reader();
	if (!strcmp(test, "noport") || !strcmp(test, "unreachable") || !strcmp(test, "reject"))
		return client(test, addr, port);
usage:
	fprintf(stderr, "usage: cm-errors -t noport|unreachable|reject -a ADDR -p PORT | -t reject-server -b ADDR -p PORT | -t withdraw|late-reader -a ADDR\n");
	return 2;
}
