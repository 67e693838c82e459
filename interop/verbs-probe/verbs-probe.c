/*
 * verbs-probe: a libibverbs program for goroce's interop suite that issues the verbs no stock
 * tool does - memory windows (type 1 through ibv_bind_mw, type 2 through IBV_WR_BIND_MW),
 * LOCAL_INV, SEND_WITH_INV, atomics checked by the value read back, and (rdma-core 45 and
 * kernel 6.2 on) FLUSH and ATOMIC_WRITE - over one RC QP.
 *
 *   verbs-probe [-d DEV] [-i PORT] [-g GIDX] [-p TCPPORT] [-n N] [-w SECS] -t TEST [SERVER]
 *
 * Without SERVER it is the server: it listens on TCPPORT and owns the memory (the
 * responder); with SERVER it connects there and issues the operations (the requester).
 * It prints one "verbs-probe TEST: PASS ..." line and exits 0, or prints the step that
 * failed and exits 1 (2: bad arguments or a test this build does not have).
 *
 * TESTS
 *   atomic        N FETCH_AND_ADD (add 1..N), a CMP_AND_SWAP that swaps and one that does
 *                 not, each checked by the value it returns, then an RDMA READ of the word
 *                 and the server's own look at it: every atomic applied exactly once.
 *   send_inv      the server binds a type 2 MW; a WRITE through it works; a SEND_WITH_INV
 *                 naming its rkey arrives with IBV_WC_WITH_INV and that rkey; a WRITE
 *                 through it afterwards completes with IBV_WC_REM_ACCESS_ERR and changes
 *                 nothing.
 *   send_inv_mr   a SEND_WITH_INV naming the rkey of an ordinary MR (ibv_reg_mr): only an
 *                 MW (type 2) or a fast-registration MR may be invalidated remotely, so the
 *                 receive completes with IBV_WC_REM_INV_REQ_ERR (rxe acknowledges the SEND
 *                 itself: the requester's status is reported, not checked).
 *   bind_mw1      type 1 MW bound by ibv_bind_mw: WRITE and READ through it, a rebind that
 *                 rolls the key byte of the rkey, WRITE and READ through the new rkey, and a
 *                 WRITE through the old one refused with IBV_WC_REM_ACCESS_ERR.
 *   bind_mw2      type 2 MW bound by an IBV_WR_BIND_MW work request: the same, with a
 *                 LOCAL_INV before the rebind.
 *   flush         WRITE, then FLUSH (global placement) of the range and of the whole MR,
 *                 then a FLUSH asking for persistent placement of an MR registered without
 *                 IBV_ACCESS_FLUSH_PERSISTENT, refused with IBV_WC_REM_ACCESS_ERR.
 *   atomic_write  two ATOMIC_WRITEs each checked by an RDMA READ and by the server, then one
 *                 to a read-only MR refused with IBV_WC_REM_ACCESS_ERR.
 *
 * THE TCP EXCHANGE (what a peer in another language implements)
 * Every message is one text line, at most 511 bytes and '\n': a verb, then key=value
 * fields separated by single spaces; numbers are 0x-prefixed hex or decimal. First each side
 * sends   hello test=TEST qpn=Q psn=P gid=32-hex-digits
 * (the client first; a server of another test answers "error msg=..." and closes), then both
 * bring their QP to RTS. After that, per test (C: client, S: server):
 *   atomic        S: target addr=A rkey=R value=V0     C: check value=V
 *                 S: result ok=1|0 value=V'
 *   send_inv      S: target addr rkey len              C: wrote len=L seed=X
 *                 S: verified ok                       C: sent_inv rkey=R
 *                 S: received ok inv=1|0 rkey=R'       C: refused status=NAME
 *                 S: result ok
 *   send_inv_mr   S: target addr rkey len              C: sent_inv rkey=R status=NAME
 *                 S: result ok recv=NAME
 *   bind_mw1/2    S: target addr rkey len              C: wrote len seed
 *                 S: verified ok
 *                 S: target addr rkey len (rebound)    C: wrote len seed
 *                 S: verified ok                       C: refused status=NAME (old rkey)
 *                 S: result ok
 *   flush         S: target addr rkey len              C: wrote len seed
 *                 S: verified ok                       C: refused status=NAME
 *                 S: result ok
 *   atomic_write  S: target addr rkey addr2 rkey2 value=V0    C: check value=V
 *                 S: verified ok                       C: refused status=NAME
 *                 S: result ok
 * "ok" is ok=1 or ok=0. The byte at offset i of a pattern with seed X is (X + 7*i) & 0xff.
 * NAME is ibv_wc_status_str's text with spaces as '_'.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define BUF_SIZE 8192
#define LINE_MAX_LEN 512
#define MAX_FIELDS 16

static const char *test_name;
static int poll_secs = 30;

static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stdout, "verbs-probe %s: FAIL: ", test_name ? test_name : "?");
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	exit(1);
}

static void note(const char *fmt, ...)
{
	va_list ap;

	fprintf(stdout, "verbs-probe %s: ", test_name);
	va_start(ap, fmt);
	vfprintf(stdout, fmt, ap);
	va_end(ap);
	fputc('\n', stdout);
	fflush(stdout);
}

/* ------------------------------------------------------------------ the line exchange */

struct msg {
	char line[LINE_MAX_LEN];
	char *verb;
	int n;
	char *key[MAX_FIELDS];
	char *val[MAX_FIELDS];
};

static int sock = -1;

static void send_line(const char *fmt, ...)
{
	char buf[LINE_MAX_LEN];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= (int)sizeof(buf) - 1)
		fail("message too long");
	buf[n++] = '\n';
	for (int off = 0; off < n;) {
		ssize_t w = write(sock, buf + off, n - off);

		if (w <= 0)
			fail("send: %s", strerror(errno));
		off += w;
	}
}

static void recv_msg(struct msg *m, const char *want)
{
	int len = 0;

	for (;;) {
		char c;
		ssize_t r = read(sock, &c, 1);

		if (r <= 0)
			fail("waiting for '%s': %s", want, r == 0 ? "peer closed" : strerror(errno));
		if (c == '\n')
			break;
		if (len == LINE_MAX_LEN - 1)
			fail("line too long while waiting for '%s'", want);
		m->line[len++] = c;
	}
	m->line[len] = 0;
	m->n = 0;
	m->verb = strtok(m->line, " ");
	if (!m->verb)
		fail("empty line while waiting for '%s'", want);
	for (char *f = strtok(NULL, " "); f; f = strtok(NULL, " ")) {
		char *eq = strchr(f, '=');

		if (!eq || m->n == MAX_FIELDS)
			fail("bad field '%s' in '%s'", f, m->verb);
		*eq = 0;
		m->key[m->n] = f;
		m->val[m->n++] = eq + 1;
	}
	if (strcmp(m->verb, "error") == 0)
		fail("peer: %s", m->n ? m->val[0] : "error");
	if (strcmp(m->verb, want) != 0)
		fail("got '%s', want '%s'", m->verb, want);
}

static const char *field(struct msg *m, const char *key)
{
	for (int i = 0; i < m->n; i++)
		if (strcmp(m->key[i], key) == 0)
			return m->val[i];
	fail("'%s' has no field %s", m->verb, key);
	return NULL;
}

static uint64_t num(struct msg *m, const char *key)
{
	const char *v = field(m, key);
	char *end;
	uint64_t x;

	errno = 0;
	x = strtoull(v, &end, 0);
	if (errno || *end || end == v)
		fail("'%s': field %s=%s is not a number", m->verb, key, v);
	return x;
}

/* status_name is ibv_wc_status_str with spaces as '_', so it fits one field. */
static const char *status_name(enum ibv_wc_status s)
{
	static char buf[64];

	snprintf(buf, sizeof(buf), "%s", ibv_wc_status_str(s));
	for (char *p = buf; *p; p++)
		if (*p == ' ')
			*p = '_';
	return buf;
}

static int connect_to(const char *host, const char *port, int wait_secs)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
	time_t deadline = time(NULL) + wait_secs;
	int err;

	if ((err = getaddrinfo(host, port, &hints, &res)) != 0)
		fail("%s: %s", host, gai_strerror(err));
	for (;;) {
		for (struct addrinfo *a = res; a; a = a->ai_next) {
			int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);

			if (fd < 0)
				continue;
			if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
				freeaddrinfo(res);
				return fd;
			}
			close(fd);
		}
		if (time(NULL) >= deadline)
			fail("couldn't connect to %s:%s", host, port);
		usleep(200 * 1000);
	}
}

static int accept_one(const char *port)
{
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons(atoi(port)),
				   .sin6_addr = IN6ADDR_ANY_INIT };
	int one = 1, lfd, fd;

	lfd = socket(AF_INET6, SOCK_STREAM, 0);
	if (lfd < 0)
		fail("socket: %s", strerror(errno));
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1))
		fail("listen on %s: %s", port, strerror(errno));
	note("listening on %s", port);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		fail("accept: %s", strerror(errno));
	close(lfd);
	return fd;
}

/* ------------------------------------------------------------------ verbs */

struct ctx {
	struct ibv_context *dev;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
#ifdef PROBE_HAVE_FLUSH
	struct ibv_qp_ex *qpx;
#endif
	uint8_t port;
	int gidx;
	enum ibv_mtu mtu;
	uint32_t psn;
	union ibv_gid gid;
	char *buf; /* BUF_SIZE bytes, page aligned */
	struct ibv_mr *mr;
};

static uint64_t addr_of(const void *p) { return (uint64_t)(uintptr_t)p; }

static void open_dev(struct ctx *c, const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_port_attr pa;

	if (!list)
		fail("ibv_get_device_list: %s", strerror(errno));
	for (int i = 0; list[i]; i++)
		if (!name || strcmp(ibv_get_device_name(list[i]), name) == 0) {
			c->dev = ibv_open_device(list[i]);
			break;
		}
	ibv_free_device_list(list);
	if (!c->dev)
		fail("no device %s", name ? name : "");
	if (ibv_query_port(c->dev, c->port, &pa))
		fail("ibv_query_port: %s", strerror(errno));
	c->mtu = pa.active_mtu;
	if (ibv_query_gid(c->dev, c->port, c->gidx, &c->gid))
		fail("ibv_query_gid %d: %s", c->gidx, strerror(errno));
	c->pd = ibv_alloc_pd(c->dev);
	c->cq = ibv_create_cq(c->dev, 64, NULL, NULL, 0);
	if (!c->pd || !c->cq)
		fail("ibv_alloc_pd/ibv_create_cq: %s", strerror(errno));
	if (posix_memalign((void **)&c->buf, 4096, BUF_SIZE))
		fail("out of memory");
	memset(c->buf, 0, BUF_SIZE);
}

static void create_qp(struct ctx *c, int extended)
{
	struct ibv_qp_init_attr_ex ia = {
		.send_cq = c->cq, .recv_cq = c->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD, .pd = c->pd,
	};
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = c->port,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };

#ifdef PROBE_HAVE_FLUSH
	if (extended) {
		/* A FLUSH passes the QP's access check first, then the MR's. */
		a.qp_access_flags |= IBV_ACCESS_FLUSH_GLOBAL | IBV_ACCESS_FLUSH_PERSISTENT;
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND |
				    IBV_QP_EX_WITH_FLUSH | IBV_QP_EX_WITH_ATOMIC_WRITE;
	}
#else
	(void)extended;
#endif
	c->qp = ibv_create_qp_ex(c->dev, &ia);
	if (!c->qp)
		fail("ibv_create_qp_ex: %s", strerror(errno));
#ifdef PROBE_HAVE_FLUSH
	if (extended && !(c->qpx = ibv_qp_to_qp_ex(c->qp)))
		fail("ibv_qp_to_qp_ex: %s", strerror(errno));
#endif
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		fail("modify QP to INIT: %s", strerror(errno));
	c->psn = lrand48() & 0xffffff;
}

static void gid_hex(const union ibv_gid *g, char *out)
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", g->raw[i]);
}

static void parse_gid(const char *s, union ibv_gid *g)
{
	if (strlen(s) != 32)
		fail("bad gid %s", s);
	for (int i = 0; i < 16; i++) {
		unsigned v;

		if (sscanf(s + 2 * i, "%2x", &v) != 1)
			fail("bad gid %s", s);
		g->raw[i] = v;
	}
}

/* connect_qp swaps the hello lines and brings the QP to RTS. */
static void connect_qp(struct ctx *c, int client)
{
	char gid[33];
	struct msg m;
	uint32_t rqpn, rpsn;
	union ibv_gid rgid;

	gid_hex(&c->gid, gid);
	if (client)
		send_line("hello test=%s qpn=0x%06x psn=0x%06x gid=%s", test_name, c->qp->qp_num, c->psn, gid);
	recv_msg(&m, "hello");
	if (strcmp(field(&m, "test"), test_name) != 0) {
		if (!client)
			send_line("error msg=server_runs_%s", test_name);
		fail("peer runs test %s", field(&m, "test"));
	}
	rqpn = num(&m, "qpn");
	rpsn = num(&m, "psn");
	parse_gid(field(&m, "gid"), &rgid);
	if (!client)
		send_line("hello test=%s qpn=0x%06x psn=0x%06x gid=%s", test_name, c->qp->qp_num, c->psn, gid);

	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = c->mtu, .dest_qp_num = rqpn, .rq_psn = rpsn,
		.max_dest_rd_atomic = 16, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = c->port,
			     .grh = { .dgid = rgid, .sgid_index = c->gidx, .hop_limit = 64 } },
	};
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		fail("modify QP to RTR: %s", strerror(errno));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = c->psn;
	a.max_rd_atomic = 16;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		fail("modify QP to RTS: %s", strerror(errno));
}

static struct ibv_mr *reg(struct ctx *c, void *p, size_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(c->pd, p, len, access);

	if (!mr)
		fail("ibv_reg_mr access 0x%x: %s", access, strerror(errno));
	return mr;
}

/* poll waits for one completion, at most poll_secs. */
static struct ibv_wc poll_one(struct ctx *c, const char *what)
{
	struct ibv_wc wc;
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int empty = 0;; empty++) {
		int n = ibv_poll_cq(c->cq, 1, &wc);

		if (n < 0)
			fail("%s: ibv_poll_cq", what);
		if (n == 1)
			return wc;
		/* The guests have one vCPU: leave it to rxe's own work between polls. */
		if (empty > 100)
			usleep(100);
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > poll_secs)
			fail("%s: no completion in %d s", what, poll_secs);
	}
}

/* expect_wc polls one completion and fails unless it has status and opcode. */
static struct ibv_wc expect_wc(struct ctx *c, const char *what, enum ibv_wc_status status, int opcode)
{
	struct ibv_wc wc = poll_one(c, what);

	if (wc.status != status)
		fail("%s: completion status %s, want %s", what, status_name(wc.status),
		     ibv_wc_status_str(status));
	if (status == IBV_WC_SUCCESS && opcode >= 0 && (int)wc.opcode != opcode)
		fail("%s: completion opcode %d, want %d", what, wc.opcode, opcode);
	return wc;
}

static void post(struct ctx *c, struct ibv_send_wr *wr, const char *what)
{
	struct ibv_send_wr *bad;

	wr->send_flags |= IBV_SEND_SIGNALED;
	if (ibv_post_send(c->qp, wr, &bad))
		fail("%s: ibv_post_send: %s", what, strerror(errno));
}

static void post_recv(struct ctx *c, void *p, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = addr_of(p), .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(c->qp, &wr, &bad))
		fail("ibv_post_recv: %s", strerror(errno));
}

/* rdma posts a WRITE or READ of len bytes between local p (in c->mr) and the remote address
 * and returns the completion's status. */
static enum ibv_wc_status rdma(struct ctx *c, enum ibv_wr_opcode op, void *p, uint32_t len,
			       uint64_t raddr, uint32_t rkey, const char *what)
{
	struct ibv_sge sge = { .addr = addr_of(p), .length = len, .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .wr.rdma = { .remote_addr = raddr, .rkey = rkey } };

	post(c, &wr, what);
	return poll_one(c, what).status;
}

static void must(enum ibv_wc_status s, const char *what)
{
	if (s != IBV_WC_SUCCESS)
		fail("%s: completion status %s", what, status_name(s));
}

static void fill(char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (char)(seed + 7 * i);
}

static int holds(const char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (char)(seed + 7 * i))
			return 0;
	return 1;
}

static uint64_t atomic(struct ctx *c, enum ibv_wr_opcode op, uint64_t raddr, uint32_t rkey,
		       uint64_t cmp_add, uint64_t swap, const char *what)
{
	uint64_t *res = (uint64_t *)(c->buf + 64);
	struct ibv_sge sge = { .addr = addr_of(res), .length = 8, .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 3, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .wr.atomic = { .remote_addr = raddr, .rkey = rkey,
						 .compare_add = cmp_add, .swap = swap } };

	*res = 0;
	post(c, &wr, what);
	expect_wc(c, what, IBV_WC_SUCCESS, op == IBV_WR_ATOMIC_CMP_AND_SWP ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD);
	return *res;
}

/* ------------------------------------------------------------------ tests */

/* Server memory layout: the target word or window lives at TARGET_OFF, with guard bytes
 * around it that no test may change. */
#define TARGET_OFF 1024
#define TARGET_LEN 1024
#define GUARD 0xa5
#define RECV_OFF (BUF_SIZE - 64) /* receive buffer of the server's one SEND */

static void guard_fill(struct ctx *c) { memset(c->buf, GUARD, BUF_SIZE); }

static int guards_intact(struct ctx *c)
{
	for (int i = 0; i < BUF_SIZE; i++)
		if ((i < TARGET_OFF || i >= TARGET_OFF + TARGET_LEN) && i < RECV_OFF &&
		    (unsigned char)c->buf[i] != GUARD)
			return 0;
	return 1;
}

static void reply_ok(const char *verb, int ok, const char *why)
{
	send_line("%s ok=%d", verb, ok);
	if (!ok)
		fail("%s", why);
}

static void atomic_server(struct ctx *c)
{
	struct msg m;
	uint64_t *word = (uint64_t *)(c->buf + TARGET_OFF);
	const uint64_t v0 = 0x0102030405060000ULL;

	guard_fill(c);
	*word = v0;
	c->mr = reg(c, c->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ);
	send_line("target addr=0x%" PRIx64 " rkey=0x%x value=0x%" PRIx64, addr_of(word), c->mr->rkey, v0);
	recv_msg(&m, "check");
	uint64_t want = num(&m, "value"), got = __atomic_load_n(word, __ATOMIC_SEQ_CST);
	int ok = got == want && guards_intact(c);
	send_line("result ok=%d value=0x%" PRIx64, ok, got);
	if (!ok)
		fail("word holds 0x%" PRIx64 ", client expects 0x%" PRIx64 "%s", got, want,
		     guards_intact(c) ? "" : " (and bytes around it changed)");
	note("PASS value=0x%" PRIx64, got);
}

static void atomic_client(struct ctx *c, int n)
{
	struct msg m;

	c->mr = reg(c, c->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	recv_msg(&m, "target");
	uint64_t raddr = num(&m, "addr"), v = num(&m, "value");
	uint32_t rkey = num(&m, "rkey");
	for (int i = 1; i <= n; i++) {
		uint64_t old = atomic(c, IBV_WR_ATOMIC_FETCH_AND_ADD, raddr, rkey, i, 0, "FETCH_AND_ADD");
		if (old != v)
			fail("FETCH_AND_ADD %d returned 0x%" PRIx64 ", want 0x%" PRIx64, i, old, v);
		v += i;
	}
	uint64_t swap = v ^ 0x5a5a5a5a5a5a5a5aULL;
	uint64_t old = atomic(c, IBV_WR_ATOMIC_CMP_AND_SWP, raddr, rkey, v, swap, "CMP_AND_SWAP");
	if (old != v)
		fail("CMP_AND_SWAP (equal) returned 0x%" PRIx64 ", want 0x%" PRIx64, old, v);
	v = swap;
	old = atomic(c, IBV_WR_ATOMIC_CMP_AND_SWP, raddr, rkey, v + 1, 0, "CMP_AND_SWAP (unequal)");
	if (old != v)
		fail("CMP_AND_SWAP (unequal) returned 0x%" PRIx64 ", want 0x%" PRIx64, old, v);
	uint64_t *rd = (uint64_t *)(c->buf + 128);
	*rd = 0;
	struct ibv_sge sge = { .addr = addr_of(rd), .length = 8, .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 4, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				  .wr.rdma = { .remote_addr = raddr, .rkey = rkey } };
	post(c, &wr, "READ");
	must(poll_one(c, "READ").status, "READ");
	if (*rd != v)
		fail("READ after the atomics returned 0x%" PRIx64 ", want 0x%" PRIx64, *rd, v);
	send_line("check value=0x%" PRIx64, v);
	recv_msg(&m, "result");
	if (!num(&m, "ok"))
		fail("server sees 0x%s, want 0x%" PRIx64, field(&m, "value"), v);
	note("PASS fetch_add=%d cmp_swap=2 read=1 value=0x%" PRIx64, n, v);
}

/* target_line sends the server's target: a window or MR at TARGET_OFF. */
static void target_line(struct ctx *c, uint32_t rkey)
{
	send_line("target addr=0x%" PRIx64 " rkey=0x%x len=%d", addr_of(c->buf + TARGET_OFF), rkey, TARGET_LEN);
}

/* serve_write answers a "wrote" step: the pattern must be at TARGET_OFF. */
static void serve_write(struct ctx *c)
{
	struct msg m;

	recv_msg(&m, "wrote");
	uint64_t len = num(&m, "len"), seed = num(&m, "seed");
	reply_ok("verified", len <= TARGET_LEN && holds(c->buf + TARGET_OFF, len, seed) && guards_intact(c),
		 "the WRITE did not land where it should");
}

/* serve_refused answers the last step: the refused WRITE (pattern seed+1) changed nothing. */
static void serve_refused(struct ctx *c, unsigned seed, int len)
{
	struct msg m;

	recv_msg(&m, "refused");
	reply_ok("result", holds(c->buf + TARGET_OFF, len, seed) && guards_intact(c),
		 "a refused operation changed the memory");
	note("PASS (client's refused operation: %s)", field(&m, "status"));
}

struct target {
	uint64_t addr;
	uint32_t rkey;
	uint32_t len;
};

static struct target recv_target(void)
{
	struct msg m;
	struct target t;

	recv_msg(&m, "target");
	t.addr = num(&m, "addr");
	t.rkey = num(&m, "rkey");
	t.len = num(&m, "len");
	return t;
}

/* write_and_read WRITEs len bytes of pattern seed to t, READs them back and tells the
 * server, which checks them too. */
static void write_and_read(struct ctx *c, struct target t, uint32_t len, unsigned seed)
{
	struct msg m;

	fill(c->buf, len, seed);
	must(rdma(c, IBV_WR_RDMA_WRITE, c->buf, len, t.addr, t.rkey, "WRITE"), "WRITE");
	memset(c->buf + 4096, 0, len);
	must(rdma(c, IBV_WR_RDMA_READ, c->buf + 4096, len, t.addr, t.rkey, "READ"), "READ");
	if (!holds(c->buf + 4096, len, seed))
		fail("READ through rkey 0x%x returned other bytes than were written", t.rkey);
	send_line("wrote len=%u seed=%u", len, seed);
	recv_msg(&m, "verified");
	if (!num(&m, "ok"))
		fail("the server did not find the WRITE through rkey 0x%x", t.rkey);
}

/* refused WRITEs pattern seed through t and requires a remote access error. */
static void refused(struct ctx *c, struct target t, uint32_t len, unsigned seed, const char *what)
{
	struct msg m;

	fill(c->buf, len, seed);
	enum ibv_wc_status s = rdma(c, IBV_WR_RDMA_WRITE, c->buf, len, t.addr, t.rkey, what);
	send_line("refused status=%s", status_name(s));
	if (s != IBV_WC_REM_ACCESS_ERR)
		fail("%s: completion status %s, want %s", what, status_name(s),
		     ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	recv_msg(&m, "result");
	if (!num(&m, "ok"))
		fail("the server found its memory changed by the refused %s", what);
}

#define MW_ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
#define RXE_WC_WITH_INVALIDATE (1 << 2)
#define MR_MW_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND)

/* bind2 binds type 2 MW mw to the target range with a BIND_MW work request and returns its
 * new rkey (the key byte one up). */
static uint32_t bind2(struct ctx *c, struct ibv_mw *mw, uint32_t from)
{
	struct ibv_send_wr wr = { .wr_id = 5, .opcode = IBV_WR_BIND_MW };

	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(from);
	wr.bind_mw.bind_info.mr = c->mr;
	wr.bind_mw.bind_info.addr = addr_of(c->buf + TARGET_OFF);
	wr.bind_mw.bind_info.length = TARGET_LEN;
	wr.bind_mw.bind_info.mw_access_flags = MW_ACCESS;
	post(c, &wr, "BIND_MW");
	expect_wc(c, "BIND_MW", IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	/* The MW's rkey is now the new one; libibverbs updates ibv_mw.rkey itself only in
	 * ibv_bind_mw (type 1). rxe finds an MW by its whole current rkey, so a later bind
	 * naming the old one would fail with IBV_WC_MW_BIND_ERR. */
	mw->rkey = wr.bind_mw.rkey;
	return wr.bind_mw.rkey;
}

/* bind1 binds type 1 MW mw with ibv_bind_mw and returns the rkey it got. */
static uint32_t bind1(struct ctx *c, struct ibv_mw *mw)
{
	struct ibv_mw_bind b = { .wr_id = 6, .send_flags = IBV_SEND_SIGNALED };

	b.bind_info.mr = c->mr;
	b.bind_info.addr = addr_of(c->buf + TARGET_OFF);
	b.bind_info.length = TARGET_LEN;
	b.bind_info.mw_access_flags = MW_ACCESS;
	if (ibv_bind_mw(c->qp, mw, &b))
		fail("ibv_bind_mw: %s", strerror(errno));
	expect_wc(c, "ibv_bind_mw", IBV_WC_SUCCESS, IBV_WC_BIND_MW);
	return mw->rkey;
}

static void check_rolled(uint32_t old, uint32_t new)
{
	if ((old >> 8) != (new >> 8) || (old & 0xff) == (new & 0xff))
		fail("rebind gave rkey 0x%x after 0x%x: want the same index and another key byte", new, old);
}

static void bind_mw_server(struct ctx *c, int type)
{
	struct ibv_mw *mw;
	uint32_t r1, r2;

	guard_fill(c);
	c->mr = reg(c, c->buf, BUF_SIZE, MR_MW_ACCESS);
	mw = ibv_alloc_mw(c->pd, type == 1 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2);
	if (!mw)
		fail("ibv_alloc_mw type %d: %s", type, strerror(errno));
	r1 = type == 1 ? bind1(c, mw) : bind2(c, mw, mw->rkey);
	target_line(c, r1);
	serve_write(c);
	if (type == 2) {
		struct ibv_send_wr wr = { .wr_id = 7, .opcode = IBV_WR_LOCAL_INV, .invalidate_rkey = r1 };

		post(c, &wr, "LOCAL_INV");
		expect_wc(c, "LOCAL_INV", IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	}
	r2 = type == 1 ? bind1(c, mw) : bind2(c, mw, r1);
	check_rolled(r1, r2);
	target_line(c, r2);
	serve_write(c);
	serve_refused(c, 2, 256);
	note("rkeys 0x%x then 0x%x", r1, r2);
}

static void bind_mw_client(struct ctx *c)
{
	c->mr = reg(c, c->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	struct target t1 = recv_target();
	write_and_read(c, t1, 256, 1);
	struct target t2 = recv_target();
	check_rolled(t1.rkey, t2.rkey);
	write_and_read(c, t2, 256, 2);
	refused(c, t1, 256, 3, "WRITE through the rkey of the previous bind");
	note("PASS rkeys 0x%x then 0x%x, the old one refused", t1.rkey, t2.rkey);
}

static void send_inv_server(struct ctx *c)
{
	struct msg m;
	struct ibv_mw *mw;
	uint32_t r;

	guard_fill(c);
	c->mr = reg(c, c->buf, BUF_SIZE, MR_MW_ACCESS);
	mw = ibv_alloc_mw(c->pd, IBV_MW_TYPE_2);
	if (!mw)
		fail("ibv_alloc_mw type 2: %s", strerror(errno));
	r = bind2(c, mw, mw->rkey);
	post_recv(c, c->buf + RECV_OFF, 64, c->mr->lkey);
	target_line(c, r);
	serve_write(c);
	recv_msg(&m, "sent_inv");
	struct ibv_wc wc = expect_wc(c, "receive of SEND_WITH_INV", IBV_WC_SUCCESS, IBV_WC_RECV);
	/* rxe writes the kernel's wc_flags into its user-space completions, where the kernel's
	 * IB_WC_WITH_INVALIDATE (1 << 2) reads as IBV_WC_IP_CSUM_OK: accept either bit. */
	int inv = !!(wc.wc_flags & (IBV_WC_WITH_INV | RXE_WC_WITH_INVALIDATE));
	if (inv)
		note("receive: wc_flags 0x%x (%s)", wc.wc_flags,
		     wc.wc_flags & IBV_WC_WITH_INV ? "IBV_WC_WITH_INV" : "the kernel's IB_WC_WITH_INVALIDATE bit");
	send_line("received ok=%d inv=%d rkey=0x%x", inv && wc.invalidated_rkey == r, inv,
		  inv ? wc.invalidated_rkey : 0);
	if (!inv || wc.invalidated_rkey != r)
		fail("receive: wc_flags 0x%x invalidated_rkey 0x%x, want IBV_WC_WITH_INV and 0x%x", wc.wc_flags,
		     wc.invalidated_rkey, r);
	serve_refused(c, 1, 256);
}

static void send_inv_client(struct ctx *c)
{
	struct msg m;

	c->mr = reg(c, c->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	struct target t = recv_target();
	write_and_read(c, t, 256, 1);
	struct ibv_sge sge = { .addr = addr_of(c->buf), .length = 16, .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 8, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				  .invalidate_rkey = t.rkey };
	post(c, &wr, "SEND_WITH_INV");
	expect_wc(c, "SEND_WITH_INV", IBV_WC_SUCCESS, IBV_WC_SEND);
	send_line("sent_inv rkey=0x%x", t.rkey);
	recv_msg(&m, "received");
	if (!num(&m, "ok"))
		fail("the server's receive: inv=%s rkey=%s", field(&m, "inv"), field(&m, "rkey"));
	refused(c, t, 256, 2, "WRITE through the invalidated rkey");
	note("PASS rkey 0x%x invalidated by SEND_WITH_INV", t.rkey);
}

static void send_inv_mr_server(struct ctx *c)
{
	struct msg m;

	guard_fill(c);
	c->mr = reg(c, c->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	post_recv(c, c->buf + RECV_OFF, 64, c->mr->lkey);
	target_line(c, c->mr->rkey);
	recv_msg(&m, "sent_inv");
	struct ibv_wc wc = poll_one(c, "receive");
	send_line("result ok=%d recv=%s", wc.status == IBV_WC_REM_INV_REQ_ERR, status_name(wc.status));
	if (wc.status != IBV_WC_REM_INV_REQ_ERR)
		fail("the receive of a SEND_WITH_INV naming an MR's rkey completed %s (flags 0x%x), want %s",
		     status_name(wc.status), wc.wc_flags, ibv_wc_status_str(IBV_WC_REM_INV_REQ_ERR));
	note("PASS receive completed %s; the client's SEND: %s", status_name(wc.status), field(&m, "status"));
}

static void send_inv_mr_client(struct ctx *c)
{
	struct msg m;

	c->mr = reg(c, c->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	struct target t = recv_target();
	struct ibv_sge sge = { .addr = addr_of(c->buf), .length = 16, .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				  .invalidate_rkey = t.rkey };
	post(c, &wr, "SEND_WITH_INV");
	/* Whether the requester learns of the refusal is up to the responder: rxe acknowledges
	 * the SEND and fails only the receive. */
	enum ibv_wc_status s = poll_one(c, "SEND_WITH_INV").status;
	send_line("sent_inv rkey=0x%x status=%s", t.rkey, status_name(s));
	recv_msg(&m, "result");
	if (!num(&m, "ok"))
		fail("the server received it: %s", field(&m, "recv"));
	note("PASS SEND_WITH_INV naming an MR's rkey: the server's receive completed %s (our SEND: %s)",
	     field(&m, "recv"), status_name(s));
}

#ifdef PROBE_HAVE_FLUSH
static void flush_server(struct ctx *c)
{
	struct ibv_mr *pm;

	guard_fill(c);
	c->mr = reg(c, c->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						 IBV_ACCESS_FLUSH_GLOBAL);
	/* Only persistent memory may be registered for persistent placement. */
	pm = ibv_reg_mr(c->pd, c->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_FLUSH_PERSISTENT);
	note("ibv_reg_mr with IBV_ACCESS_FLUSH_PERSISTENT on ordinary memory: %s",
	     pm ? "registered" : strerror(errno));
	if (pm)
		ibv_dereg_mr(pm);
	target_line(c, c->mr->rkey);
	serve_write(c);
	serve_refused(c, 1, 512);
}

/* flush_wr posts a FLUSH and returns its completion status. */
static enum ibv_wc_status flush_wr(struct ctx *c, struct target t, uint32_t len, uint8_t type, uint8_t level,
				   const char *what)
{
	ibv_wr_start(c->qpx);
	c->qpx->wr_id = 10;
	c->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_flush(c->qpx, t.rkey, t.addr, len, type, level);
	if (ibv_wr_complete(c->qpx))
		fail("%s: ibv_wr_complete: %s", what, strerror(errno));
	struct ibv_wc wc = poll_one(c, what);
	if (wc.status == IBV_WC_SUCCESS && wc.opcode != IBV_WC_FLUSH)
		fail("%s: completion opcode %d, want IBV_WC_FLUSH", what, wc.opcode);
	return wc.status;
}

static void flush_client(struct ctx *c)
{
	struct msg m;

	c->mr = reg(c, c->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	struct target t = recv_target();
	fill(c->buf, 512, 1);
	must(rdma(c, IBV_WR_RDMA_WRITE, c->buf, 512, t.addr, t.rkey, "WRITE"), "WRITE");
	must(flush_wr(c, t, 512, IBV_FLUSH_GLOBAL, IBV_FLUSH_RANGE, "FLUSH global range"), "FLUSH global range");
	must(flush_wr(c, t, 0, IBV_FLUSH_GLOBAL, IBV_FLUSH_MR, "FLUSH global MR"), "FLUSH global MR");
	send_line("wrote len=512 seed=1");
	recv_msg(&m, "verified");
	if (!num(&m, "ok"))
		fail("the server did not find the flushed WRITE");
	enum ibv_wc_status s = flush_wr(c, t, 512, IBV_FLUSH_PERSISTENT, IBV_FLUSH_RANGE, "FLUSH persistent");
	send_line("refused status=%s", status_name(s));
	if (s != IBV_WC_REM_ACCESS_ERR)
		fail("FLUSH persistent of an MR without IBV_ACCESS_FLUSH_PERSISTENT: %s, want %s", status_name(s),
		     ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	recv_msg(&m, "result");
	if (!num(&m, "ok"))
		fail("the server's memory changed");
	note("PASS FLUSH global (range and MR) completed; FLUSH persistent refused");
}

static void atomic_write_server(struct ctx *c)
{
	struct msg m;
	struct ibv_mr *ro;
	uint64_t *word = (uint64_t *)(c->buf + TARGET_OFF), *roword = (uint64_t *)(c->buf + TARGET_OFF + 512);
	const uint64_t v0 = 0x1111111111111111ULL, ro0 = 0x2222222222222222ULL;

	guard_fill(c);
	*word = v0;
	*roword = ro0;
	c->mr = reg(c, c->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	ro = reg(c, c->buf, BUF_SIZE, IBV_ACCESS_REMOTE_READ);
	send_line("target addr=0x%" PRIx64 " rkey=0x%x addr2=0x%" PRIx64 " rkey2=0x%x value=0x%" PRIx64, addr_of(word),
		  c->mr->rkey, addr_of(roword), ro->rkey, v0);
	recv_msg(&m, "check");
	uint64_t want = num(&m, "value");
	reply_ok("verified", *word == want, "the ATOMIC_WRITE did not land");
	recv_msg(&m, "refused");
	reply_ok("result", *roword == ro0, "an ATOMIC_WRITE to a read-only MR changed it");
	note("PASS value=0x%" PRIx64 " (client's refused ATOMIC_WRITE: %s)", want, field(&m, "status"));
}

static enum ibv_wc_status atomic_write(struct ctx *c, uint64_t raddr, uint32_t rkey, uint64_t v, const char *what)
{
	ibv_wr_start(c->qpx);
	c->qpx->wr_id = 11;
	c->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_write(c->qpx, rkey, raddr, &v);
	if (ibv_wr_complete(c->qpx))
		fail("%s: ibv_wr_complete: %s", what, strerror(errno));
	struct ibv_wc wc = poll_one(c, what);
	if (wc.status == IBV_WC_SUCCESS && wc.opcode != IBV_WC_ATOMIC_WRITE)
		fail("%s: completion opcode %d, want IBV_WC_ATOMIC_WRITE", what, wc.opcode);
	return wc.status;
}

static void atomic_write_client(struct ctx *c)
{
	struct msg m;
	uint64_t *rd = (uint64_t *)(c->buf + 128);

	c->mr = reg(c, c->buf, BUF_SIZE, IBV_ACCESS_LOCAL_WRITE);
	recv_msg(&m, "target");
	uint64_t raddr = num(&m, "addr"), raddr2 = num(&m, "addr2");
	uint32_t rkey = num(&m, "rkey"), rkey2 = num(&m, "rkey2");
	uint64_t v = num(&m, "value");
	for (int i = 1; i <= 2; i++) {
		v = v * 31 + 0x0123456789abcdefULL * i;
		must(atomic_write(c, raddr, rkey, v, "ATOMIC_WRITE"), "ATOMIC_WRITE");
		*rd = 0;
		must(rdma(c, IBV_WR_RDMA_READ, rd, 8, raddr, rkey, "READ"), "READ");
		if (*rd != v)
			fail("READ after ATOMIC_WRITE %d returned 0x%" PRIx64 ", want 0x%" PRIx64, i, *rd, v);
	}
	send_line("check value=0x%" PRIx64, v);
	recv_msg(&m, "verified");
	if (!num(&m, "ok"))
		fail("the server does not hold 0x%" PRIx64, v);
	enum ibv_wc_status s = atomic_write(c, raddr2, rkey2, v, "ATOMIC_WRITE to a read-only MR");
	send_line("refused status=%s", status_name(s));
	if (s != IBV_WC_REM_ACCESS_ERR)
		fail("ATOMIC_WRITE to a read-only MR: %s, want %s", status_name(s),
		     ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	recv_msg(&m, "result");
	if (!num(&m, "ok"))
		fail("the server's read-only word changed");
	note("PASS two ATOMIC_WRITEs read back, value=0x%" PRIx64 "; one to a read-only MR refused", v);
}
#endif

/* ------------------------------------------------------------------ main */

static void usage(void)
{
	fprintf(stderr, "usage: verbs-probe [-d DEV] [-i PORT] [-g GIDX] [-p TCPPORT] [-n N] [-w SECS] -t TEST [SERVER]\n"
			"tests: atomic send_inv send_inv_mr bind_mw1 bind_mw2 flush atomic_write\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct ctx c = { .port = 1, .gidx = 1 };
	const char *dev = "rxe0", *tcp = "18600";
	int n = 16, wait_secs = 20, opt, extended = 0;

	while ((opt = getopt(argc, argv, "d:i:g:p:n:w:t:T:")) != -1) {
		switch (opt) {
		case 'd': dev = optarg; break;
		case 'i': c.port = atoi(optarg); break;
		case 'g': c.gidx = atoi(optarg); break;
		case 'p': tcp = optarg; break;
		case 'n': n = atoi(optarg); break;
		case 'w': wait_secs = atoi(optarg); break;
		case 't': test_name = optarg; break;
		case 'T': poll_secs = atoi(optarg); break;
		default: usage();
		}
	}
	if (!test_name || optind < argc - 1 || n < 1)
		usage();
	const char *server = optind < argc ? argv[optind] : NULL;
	int client = server != NULL;
	static const char *const known[] = { "atomic", "send_inv", "send_inv_mr", "bind_mw1", "bind_mw2",
					     "flush", "atomic_write", NULL };
	int found = 0;
	for (int i = 0; known[i]; i++)
		found |= strcmp(known[i], test_name) == 0;
	if (!found)
		usage();
	if (!strcmp(test_name, "flush") || !strcmp(test_name, "atomic_write")) {
#ifdef PROBE_HAVE_FLUSH
		extended = 1;
#else
		printf("verbs-probe %s: not in this build (its libibverbs has no FLUSH or ATOMIC_WRITE)\n", test_name);
		return 2;
#endif
	}
	srand48(time(NULL) ^ getpid());

	open_dev(&c, dev);
	create_qp(&c, extended);
	sock = client ? connect_to(server, tcp, wait_secs) : accept_one(tcp);
	struct timeval tv = { .tv_sec = 60 };
	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	connect_qp(&c, client);

	if (!strcmp(test_name, "atomic"))
		client ? atomic_client(&c, n) : atomic_server(&c);
	else if (!strcmp(test_name, "send_inv"))
		client ? send_inv_client(&c) : send_inv_server(&c);
	else if (!strcmp(test_name, "send_inv_mr"))
		client ? send_inv_mr_client(&c) : send_inv_mr_server(&c);
	else if (!strcmp(test_name, "bind_mw1"))
		client ? bind_mw_client(&c) : bind_mw_server(&c, 1);
	else if (!strcmp(test_name, "bind_mw2"))
		client ? bind_mw_client(&c) : bind_mw_server(&c, 2);
#ifdef PROBE_HAVE_FLUSH
	else if (!strcmp(test_name, "flush"))
		client ? flush_client(&c) : flush_server(&c);
	else if (!strcmp(test_name, "atomic_write"))
		client ? atomic_write_client(&c) : atomic_write_server(&c);
#endif
	close(sock);
	return 0;
}
