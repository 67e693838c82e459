/*
 * verbs-fork: what fork() does to a program on goroce's libibverbs.
 *
 *   verbs-fork [-d DEV]
 *
 * The parent opens the device and allocates a PD, forks, and then allocates another PD
 * and registers memory: it must keep working. The child, whose copy of the Go engine
 * lost its threads in the fork, must get EOPNOTSUPP from a verb instead of hanging, and
 * must be able to exec. ibv_fork_init succeeds and ibv_is_fork_initialized says
 * IBV_FORK_UNNEEDED: the engine does no DMA, so no page needs protecting from
 * copy-on-write. Prints "verbs-fork: PASS" and exits 0, or the step that failed and 1.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static int fail(const char *what)
{
	printf("verbs-fork: FAIL: %s (errno %d: %s)\n", what, errno, strerror(errno));
	return 1;
}

int main(int argc, char **argv)
{
	static char buf[8192];
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd, *pd2;
	struct ibv_mr *mr;
	const char *dev = argc > 2 && !strcmp(argv[1], "-d") ? argv[2] : NULL;
	int n, status;
	pid_t pid;

	if (ibv_fork_init())
		return fail("ibv_fork_init");
	if (ibv_is_fork_initialized() != IBV_FORK_UNNEEDED)
		return fail("ibv_is_fork_initialized is not IBV_FORK_UNNEEDED");
	list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n && !ctx; i++)
		if (!dev || !strcmp(ibv_get_device_name(list[i]), dev))
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		return fail("open the device");
	if (!(pd = ibv_alloc_pd(ctx)))
		return fail("ibv_alloc_pd before fork");
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return fail("fork");
	if (pid == 0) {
		struct ibv_pd *p = ibv_alloc_pd(ctx);

		if (p || errno != EOPNOTSUPP) {
			printf("verbs-fork: FAIL: ibv_alloc_pd in the child: %p, errno %d; want NULL, EOPNOTSUPP\n",
			       (void *)p, errno);
			_exit(1);
		}
		execl("/bin/true", "true", (char *)NULL);
		_exit(2);
	}
	if (waitpid(pid, &status, 0) != pid)
		return fail("waitpid");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		printf("verbs-fork: FAIL: the child exited with status %#x\n", status);
		return 1;
	}
	if (!(pd2 = ibv_alloc_pd(ctx)))
		return fail("ibv_alloc_pd after fork");
	if (!(mr = ibv_reg_mr(pd2, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE)))
		return fail("ibv_reg_mr after fork");
	if (ibv_dereg_mr(mr) || ibv_dealloc_pd(pd2) || ibv_dealloc_pd(pd) || ibv_close_device(ctx))
		return fail("tear down");
	ibv_free_device_list(list);
	printf("verbs-fork: PASS\n");
	return 0;
}
