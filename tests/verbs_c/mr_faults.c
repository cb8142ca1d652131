/* Memory that is not there, through the real ABI.
 *
 * Server (the target): ibv_reg_mr of ranges the kernel refuses must fail with its errno (NULL,
 * 1 TiB over a small buffer, PROT_NONE, read-only with write access, an unmapped hole, a
 * wrapping range). Then it registers three pages, connects five RC QPs to the client and
 * unmaps those pages. The client (the peer) sends an RDMA WRITE, an RDMA READ, a FETCH_ADD and
 * a SEND (into a receive posted on the unmapped pages), one per QP: each must end in an error
 * completion, the server must stay alive, the QPs it NAKed must be in the error state, and the
 * fifth QP must still carry a SEND and an RDMA WRITE/READ. Last, the server's own SEND gathered
 * from the unmapped pages and an inline SEND copied from them must fail cleanly.
 *
 *
 * With --syscall-mode anywhere, the program re-executes itself with ASan told to refuse user
 * SIGSEGV handlers, so urxe falls back to process_vm_readv/writev: the same checks must pass.
 *
 *   mr_faults server [-p port] [-g gid_index] [-d dev] [--syscall-mode]
 *   mr_faults client 127.0.0.1 [-p port] [-g gid_index] [-d dev] [--syscall-mode]
 */
#include "common.h"

#include <sys/mman.h>
#include <sys/wait.h>

#define NQP 5
enum { Q_WRITE, Q_READ, Q_ATOMIC, Q_SEND, Q_CTRL };
#define GOOD_LEN 65536u
#define MSG_LEN 4096u
#define SEED_CTRL 21
#define SEED_WRITE 22

struct wire {
	struct peer_info qp[NQP];
	uint64_t gone_addr, good_addr;
	uint32_t gone_rkey, good_rkey;
};

struct ctx {
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_cq *cq[NQP];
	struct ibv_qp *qp[NQP];
	struct ibv_mr *good_mr, *gone_mr;
	uint8_t *good, *gone;
	size_t page;
	struct wire me, peer;
};

static const int all_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			      IBV_ACCESS_REMOTE_ATOMIC;

static void *map_pages(size_t n, size_t page, int prot)
{
	void *p = mmap(NULL, n * page, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	return p;
}

/* ibv_reg_mr must fail with `want`; deregisters if it wrongly succeeds. */
static void expect_reg_fails(struct ctx *c, const char *name, void *addr, size_t len, int access, int want)
{
	struct ibv_mr *mr;
	errno = 0;
	mr = ibv_reg_mr(c->pd, addr, len, access);
	check(!mr && errno == want, name, "ibv_reg_mr returned %p errno %d (%s), expected NULL with errno %d (%s)",
	      (void *)mr, errno, strerror(errno), want, strerror(want));
	if (mr)
		ibv_dereg_mr(mr);
}

static void bad_registrations(struct ctx *c)
{
	size_t pg = c->page;
	uint8_t *three = map_pages(3, pg, PROT_READ | PROT_WRITE);
	struct ibv_mr *mr;

	expect_reg_fails(c, "reg_null_efault", NULL, 1u << 20, all_access, EFAULT);
	expect_reg_fails(c, "reg_1tib_over_small_buffer_efault", three, (size_t)1 << 40, all_access, EFAULT);
	expect_reg_fails(c, "reg_wrapping_einval", (void *)(UINTPTR_MAX - 100), pg, all_access, EINVAL);
	if (mprotect(three + 2 * pg, pg, PROT_NONE))
		die("mprotect PROT_NONE");
	expect_reg_fails(c, "reg_prot_none_efault", three + 2 * pg, pg, IBV_ACCESS_REMOTE_READ, EFAULT);
	if (mprotect(three + pg, pg, PROT_READ))
		die("mprotect PROT_READ");
	expect_reg_fails(c, "reg_readonly_remote_write_efault", three + pg, pg,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, EFAULT);
	mr = ibv_reg_mr(c->pd, three + pg, pg, IBV_ACCESS_REMOTE_READ);
	check(mr != NULL, "reg_readonly_remote_read_ok", "errno %d (%s)", errno, strerror(errno));
	if (mr)
		ibv_dereg_mr(mr);
	mr = ibv_reg_mr(c->pd, three, 2 * pg, IBV_ACCESS_REMOTE_READ);
	check(mr != NULL, "reg_rw_then_ro_pages_read_ok", "errno %d (%s)", errno, strerror(errno));
	if (mr)
		ibv_dereg_mr(mr);
	if (munmap(three + pg, pg))
		die("munmap");
	expect_reg_fails(c, "reg_over_hole_efault", three, 3 * pg, IBV_ACCESS_LOCAL_WRITE, EFAULT);
	munmap(three, pg);
	munmap(three + 2 * pg, pg);
}

/* After urxe installed its fault handler (the device is open), the application's own bad
 * access must still reach the handler installed before it (here ASan's, which reports a SEGV
 * and exits non-zero). Done in a forked child whose stderr the parent reads. */
static void app_fault_still_reported(struct ctx *c)
{
	int pfd[2], status = 0;
	char out[8192];
	size_t got = 0;
	ssize_t n;
	pid_t pid, w = 0;
	uint8_t *none = map_pages(1, c->page, PROT_NONE);

	if (pipe(pfd))
		die("pipe");
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		alarm(20);
		close(pfd[0]);
		dup2(pfd[1], STDERR_FILENO);
		dup2(pfd[1], STDOUT_FILENO);
		printf("child read %d\n", *(volatile uint8_t *)none);
		_exit(0);
	}
	close(pfd[1]);
	while (got < sizeof(out) - 1 && (n = read(pfd[0], out + got, sizeof(out) - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = 0;
	close(pfd[0]);
	for (int i = 0; i < 200 && w == 0; i++) {
		w = waitpid(pid, &status, WNOHANG);
		if (w == 0)
			usleep(100 * 1000);
	}
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	check(w == pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0) && strstr(out, "SEGV") != NULL,
	      "app_fault_reaches_previous_handler", "wait %d status 0x%x, child said: %.200s", (int)w, status, out);
	munmap(none, c->page);
}

static void setup(struct ctx *c, const char *devname, int gidx)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;

	open_dev(&c->d, devname, gidx);
	c->page = (size_t)sysconf(_SC_PAGESIZE);
	c->pd = ibv_alloc_pd(c->d.ctx);
	if (!c->pd)
		die("ibv_alloc_pd");
	if (posix_memalign((void **)&c->good, 4096, GOOD_LEN))
		die("posix_memalign");
	memset(c->good, 0, GOOD_LEN);
	c->good_mr = ibv_reg_mr(c->pd, c->good, GOOD_LEN, all_access);
	if (!c->good_mr)
		die("ibv_reg_mr good");
	c->gone = map_pages(3, c->page, PROT_READ | PROT_WRITE);
	c->gone_mr = ibv_reg_mr(c->pd, c->gone, 3 * c->page, all_access);
	if (!c->gone_mr)
		die("ibv_reg_mr of three mapped pages");
	srand48(getpid() * 7919L + (long)now_ms());
	for (int i = 0; i < NQP; i++) {
		c->cq[i] = ibv_create_cq(c->d.ctx, 16, NULL, NULL, 0);
		if (!c->cq[i])
			die("ibv_create_cq");
		memset(&ia, 0, sizeof(ia));
		ia.send_cq = c->cq[i];
		ia.recv_cq = c->cq[i];
		ia.qp_type = IBV_QPT_RC;
		ia.cap.max_send_wr = 8;
		ia.cap.max_recv_wr = 8;
		ia.cap.max_send_sge = 1;
		ia.cap.max_recv_sge = 1;
		ia.cap.max_inline_data = 64;
		c->qp[i] = ibv_create_qp(c->pd, &ia);
		if (!c->qp[i])
			die("ibv_create_qp");
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_INIT;
		a.port_num = 1;
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
		if (ibv_modify_qp(c->qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			die("modify QP to INIT");
		c->me.qp[i].qpn = c->qp[i]->qp_num;
		c->me.qp[i].psn = (uint32_t)lrand48() & 0xffffff;
		c->me.qp[i].lid = c->d.port.lid;
		memcpy(c->me.qp[i].gid, c->d.gid.raw, 16);
	}
	c->me.gone_addr = (uint64_t)(uintptr_t)c->gone;
	c->me.gone_rkey = c->gone_mr->rkey;
	c->me.good_addr = (uint64_t)(uintptr_t)c->good;
	c->me.good_rkey = c->good_mr->rkey;
}

static void connect_all(struct ctx *c, int fd)
{
	xfer(fd, &c->me, sizeof(c->me), 1);
	xfer(fd, &c->peer, sizeof(c->peer), 0);
	for (int i = 0; i < NQP; i++)
		rc_qp_to_rts(c->qp[i], &c->me.qp[i], &c->peer.qp[i], c->d.gidx, 4);
}

static void post_recv(struct ctx *c, int q, void *addr, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
	post_recv_one(c->qp[q], addr, len, lkey, wr_id);
}

/* Posts one signaled work request on QP `q` (FETCH_AND_ADD adds 5); returns ibv_post_send's
 * result. */
static int post(struct ctx *c, int q, enum ibv_wr_opcode op, void *addr, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey, unsigned flags, uint64_t wr_id)
{
	return post_one(c->qp[q], op, addr, len, lkey, raddr, rkey, flags, wr_id);
}

/* Expects one completion with `status` (and `opcode` if >= 0) and reports it as one check. */
static void expect_done(struct ibv_cq *cq, const char *name, enum ibv_wc_status status, int opcode, uint64_t wr_id)
{
	struct ibv_wc wc;
	if (expect_wc(cq, &wc, name, status, opcode, wr_id))
		check(1, name, "-");
}

static void expect_qp_state(struct ctx *c, int q, const char *name, enum ibv_qp_state want)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int r = ibv_query_qp(c->qp[q], &a, IBV_QP_STATE, &ia);
	check(r == 0 && a.qp_state == want, name, "ibv_query_qp %d, state %d, expected %d", r, a.qp_state, want);
}

static void server(struct ctx *c, int fd)
{
	struct ibv_wc wc;
	long bad;
	int r;

	post_recv(c, Q_SEND, c->gone + 16, MSG_LEN, c->gone_mr->lkey, 300);
	post_recv(c, Q_CTRL, c->good, MSG_LEN, c->good_mr->lkey, 400);
	sync_point(fd, 'R');
	if (munmap(c->gone, 3 * c->page))
		die("munmap of the registered pages");
	sync_point(fd, 'U');
	/* The client's four operations into the unmapped pages, then the control QP's traffic. */
	sync_point(fd, 'D');

	check(1, "target_alive_after_remote_faults", "-");
	expect_done(c->cq[Q_SEND], "recv_into_unmapped_loc_prot_err", IBV_WC_LOC_PROT_ERR, -1, 300);
	expect_qp_state(c, Q_WRITE, "write_responder_qp_in_error", IBV_QPS_ERR);
	expect_qp_state(c, Q_READ, "read_responder_qp_in_error", IBV_QPS_ERR);
	expect_qp_state(c, Q_ATOMIC, "atomic_responder_qp_in_error", IBV_QPS_ERR);
	expect_qp_state(c, Q_SEND, "send_responder_qp_in_error", IBV_QPS_ERR);
	if (expect_wc(c->cq[Q_CTRL], &wc, "ctrl_recv_after_faults", IBV_WC_SUCCESS, IBV_WC_RECV, 400)) {
		bad = verify(c->good, MSG_LEN, SEED_CTRL, 0);
		check(wc.byte_len == MSG_LEN && bad < 0, "ctrl_recv_after_faults", "byte_len %u, differs at %ld",
		      wc.byte_len, bad);
	}
	bad = verify(c->good + MSG_LEN, MSG_LEN, SEED_WRITE, 0);
	check(bad < 0, "ctrl_write_after_faults", "written data differs at byte %ld", bad);
	expect_qp_state(c, Q_CTRL, "ctrl_qp_still_rts", IBV_QPS_RTS);

	/* Local accesses: an inline SEND copied from the unmapped pages fails at post or completes
	 * with an error; a gathered SEND from them completes with IBV_WC_LOC_PROT_ERR. */
	r = post(c, Q_CTRL, IBV_WR_SEND, c->gone, 32, c->gone_mr->lkey, 0, 0, IBV_SEND_INLINE, 500);
	if (r == 0) {
		r = poll_one(c->cq[Q_CTRL], &wc, POLL_DEADLINE_MS);
		check(r == 1 && wc.wr_id == 500 && wc.status == IBV_WC_LOC_PROT_ERR, "inline_from_unmapped_fails",
		      "posted; completion %d status %s", r, r == 1 ? ibv_wc_status_str(wc.status) : "-");
	} else {
		check(r == EINVAL || r == EFAULT, "inline_from_unmapped_fails", "ibv_post_send returned %d", r);
	}
	r = post(c, Q_CTRL, IBV_WR_SEND, c->gone, MSG_LEN, c->gone_mr->lkey, 0, 0, 0, 501);
	check(r == 0, "gather_from_unmapped_posts", "ibv_post_send returned %d", r);
	if (r == 0)
		expect_done(c->cq[Q_CTRL], "gather_from_unmapped_loc_prot_err", IBV_WC_LOC_PROT_ERR, -1, 501);
	sync_point(fd, 'E');
}

/* ------------------------------------------------------------------ client */

static void expect_error(struct ctx *c, int q, const char *name, enum ibv_wc_status want, uint64_t wr_id)
{
	expect_done(c->cq[q], name, want, -1, wr_id);
}

static void client(struct ctx *c, int fd)
{
	struct ibv_wc wc;
	uint32_t lk = c->good_mr->lkey;
	uint64_t gone = c->peer.gone_addr + 64;
	long bad;

	sync_point(fd, 'R');
	sync_point(fd, 'U');
	fill(c->good, MSG_LEN, SEED_WRITE, 0);
	if (post(c, Q_WRITE, IBV_WR_RDMA_WRITE, c->good, MSG_LEN, lk, gone, c->peer.gone_rkey, 0, 100))
		die("post WRITE");
	expect_error(c, Q_WRITE, "write_into_unmapped_rem_access_err", IBV_WC_REM_ACCESS_ERR, 100);
	if (post(c, Q_READ, IBV_WR_RDMA_READ, c->good + MSG_LEN, MSG_LEN, lk, gone, c->peer.gone_rkey, 0, 101))
		die("post READ");
	expect_error(c, Q_READ, "read_from_unmapped_rem_access_err", IBV_WC_REM_ACCESS_ERR, 101);
	if (post(c, Q_ATOMIC, IBV_WR_ATOMIC_FETCH_AND_ADD, c->good + 2 * MSG_LEN, 8, lk, c->peer.gone_addr + 8,
		 c->peer.gone_rkey, 0, 102))
		die("post FETCH_ADD");
	expect_error(c, Q_ATOMIC, "atomic_on_unmapped_rem_access_err", IBV_WC_REM_ACCESS_ERR, 102);
	if (post(c, Q_SEND, IBV_WR_SEND, c->good, 64, lk, 0, 0, 0, 103))
		die("post SEND");
	expect_error(c, Q_SEND, "send_into_unmapped_rem_op_err", IBV_WC_REM_OP_ERR, 103);

	/* The target's other QP still works: a SEND and an RDMA WRITE, read back. */
	fill(c->good + 3 * MSG_LEN, MSG_LEN, SEED_CTRL, 0);
	if (post(c, Q_CTRL, IBV_WR_SEND, c->good + 3 * MSG_LEN, MSG_LEN, lk, 0, 0, 0, 110))
		die("post ctrl SEND");
	expect_done(c->cq[Q_CTRL], "ctrl_send_after_faults", IBV_WC_SUCCESS, IBV_WC_SEND, 110);
	if (post(c, Q_CTRL, IBV_WR_RDMA_WRITE, c->good, MSG_LEN, lk, c->peer.good_addr + MSG_LEN, c->peer.good_rkey, 0,
		 111))
		die("post ctrl WRITE");
	expect_done(c->cq[Q_CTRL], "ctrl_write_after_faults", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 111);
	memset(c->good + 4 * MSG_LEN, 0, MSG_LEN);
	if (post(c, Q_CTRL, IBV_WR_RDMA_READ, c->good + 4 * MSG_LEN, MSG_LEN, lk, c->peer.good_addr + MSG_LEN,
		 c->peer.good_rkey, 0, 112))
		die("post ctrl READ");
	if (expect_wc(c->cq[Q_CTRL], &wc, "ctrl_read_after_faults", IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 112)) {
		bad = verify(c->good + 4 * MSG_LEN, MSG_LEN, SEED_WRITE, 0);
		check(bad < 0, "ctrl_read_after_faults", "read back differs at byte %ld", bad);
	}
	sync_point(fd, 'D');
	sync_point(fd, 'E');
}

int main(int argc, char **argv)
{
	struct ctx c;
	int is_server = 0, port = 18931, gidx = 1, fd;
	const char *host = NULL, *devname = "urxe0";

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++) {
		const char *opts = getenv("ASAN_OPTIONS");
		if (strcmp(argv[i], "--syscall-mode") != 0)
			continue;
		if (!opts || !strstr(opts, "allow_user_segv_handler=0")) {
			char buf[512];
			snprintf(buf, sizeof(buf), "%s%sallow_user_segv_handler=0", opts ? opts : "", opts ? ":" : "");
			setenv("ASAN_OPTIONS", buf, 1);
			execv("/proc/self/exe", argv);
			die("re-exec with ASAN_OPTIONS=%s", buf);
		}
		printf("syscall mode: ASAN_OPTIONS=%s\n", opts);
		memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof(argv[0]));
		argc--;
		break;
	}
	parse_args(argc, argv, &is_server, &host, &port, &gidx, &devname);
	start_watchdog(WATCHDOG_S);
	memset(&c, 0, sizeof(c));
	setup(&c, devname, gidx);
	if (is_server) {
		bad_registrations(&c);
		app_fault_still_reported(&c);
	}
	fd = is_server ? tcp_server(port) : tcp_client(host, port);
	connect_all(&c, fd);
	if (is_server)
		server(&c, fd);
	else
		client(&c, fd);
	close(fd);
	for (int i = 0; i < NQP; i++) {
		ibv_destroy_qp(c.qp[i]);
		ibv_destroy_cq(c.cq[i]);
	}
	ibv_dereg_mr(c.gone_mr);
	ibv_dereg_mr(c.good_mr);
	ibv_dealloc_pd(c.pd);
	ibv_close_device(c.d.ctx);
	free(c.good);
	return finish();
}
