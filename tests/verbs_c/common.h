/* Shared helpers for urxe's application-level verbs tests (tests/verbs_c/).
 *
 * Everything is bounded: TCP waits carry socket timeouts, completion polling has a deadline,
 * and a SIGALRM watchdog ends the process if anything else hangs. One line per check is
 * printed on stdout: "PASS <name>" or "FAIL <name>: <why>"; the exit code is 0 only if every
 * check passed.
 */
#ifndef URXE_TEST_COMMON_H
#define URXE_TEST_COMMON_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define POLL_DEADLINE_MS 10000
#define TCP_TIMEOUT_S 30
#define WATCHDOG_S 50

static int g_failures;
static int g_checks;
static const char *g_role = "?";

static inline void check(int ok, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void check(int ok, const char *name, const char *fmt, ...)
{
	g_checks++;
	if (ok) {
		printf("PASS %s %s\n", g_role, name);
	} else {
		va_list ap;
		g_failures++;
		printf("FAIL %s %s: ", g_role, name);
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
		printf("\n");
	}
	fflush(stdout);
}

static inline void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void die(const char *fmt, ...)
{
	va_list ap;
	int e = errno;
	printf("FAIL %s fatal: ", g_role);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf(" (errno %d: %s)\n", e, strerror(e));
	fflush(stdout);
	exit(2);
}

static inline int finish(void)
{
	printf("%s: %d checks, %d failed\n", g_role, g_checks, g_failures);
	fflush(stdout);
	return g_failures == 0 && g_checks > 0 ? 0 : 1;
}

static inline void on_alarm(int sig)
{
	static const char msg[] = "FAIL watchdog: test took too long\n";
	(void)sig;
	if (write(STDOUT_FILENO, msg, sizeof(msg) - 1) < 0) {
		/* nothing more to do */
	}
	_exit(3);
}

static inline void start_watchdog(unsigned seconds)
{
	signal(SIGALRM, on_alarm);
	alarm(seconds);
}

static inline uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Busy-polls `cq` for one completion until `ms` elapse. Returns 1 with *wc filled, 0 on
 * timeout, -1 if ibv_poll_cq fails. */
static inline int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, unsigned ms)
{
	uint64_t end = now_ms() + ms;
	unsigned spins = 0;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n < 0 ? -1 : 1;
		if (now_ms() > end)
			return 0;
		if (++spins % 64 == 0)
			sched_yield();
	}
}

/* Polls one completion and checks status/opcode/wr_id; returns 1 if all matched. */
static inline int expect_wc(struct ibv_cq *cq, struct ibv_wc *wc, const char *name, enum ibv_wc_status status,
		     int opcode, uint64_t wr_id)
{
	int r = poll_one(cq, wc, POLL_DEADLINE_MS);
	if (r <= 0) {
		check(0, name, "%s", r == 0 ? "no completion within deadline" : "ibv_poll_cq failed");
		return 0;
	}
	if (wc->status != status) {
		check(0, name, "completion status %s (%d), expected %s", ibv_wc_status_str(wc->status), wc->status,
		      ibv_wc_status_str(status));
		return 0;
	}
	if (status == IBV_WC_SUCCESS && opcode >= 0 && (int)wc->opcode != opcode) {
		check(0, name, "completion opcode %d, expected %d", wc->opcode, opcode);
		return 0;
	}
	if (wc->wr_id != wr_id) {
		check(0, name, "completion wr_id 0x%" PRIx64 ", expected 0x%" PRIx64, wc->wr_id, wr_id);
		return 0;
	}
	return 1;
}

/* Deterministic byte pattern, distinct per seed and position (also across 256-byte blocks, so
 * misplaced scatter/gather pieces are caught). */
static inline uint8_t pat(unsigned seed, size_t i)
{
	return (uint8_t)(seed * 131u + i * 7u + (i >> 8) * 13u + (i >> 16) * 29u + 1u);
}

static inline void fill(uint8_t *p, size_t n, unsigned seed, size_t start)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pat(seed, start + i);
}

/* Returns the index of the first mismatching byte, or -1 if all match. */
static inline long verify(const uint8_t *p, size_t n, unsigned seed, size_t start)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pat(seed, start + i))
			return (long)i;
	return -1;
}

/* ---- TCP out-of-band channel (127.0.0.1) ---- */

static inline void set_timeouts(int fd)
{
	struct timeval tv = { .tv_sec = TCP_TIMEOUT_S, .tv_usec = 0 };
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static inline int tcp_server(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int one = 1, lfd, fd;
	struct pollfd pfd;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0)
		die("socket");
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) || listen(lfd, 1))
		die("bind/listen 127.0.0.1:%d", port);
	printf("listening on 127.0.0.1:%d\n", port);
	fflush(stdout);
	pfd.fd = lfd;
	pfd.events = POLLIN;
	if (poll(&pfd, 1, TCP_TIMEOUT_S * 1000) != 1)
		die("no client connected within %d s", TCP_TIMEOUT_S);
	fd = accept(lfd, NULL, NULL);
	if (fd < 0)
		die("accept");
	close(lfd);
	set_timeouts(fd);
	return fd;
}

static inline int tcp_client(const char *host, int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		die("server address must be an IPv4 literal, got '%s'", host);
	for (int attempt = 0; attempt < 100; attempt++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			die("socket");
		if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
			set_timeouts(fd);
			return fd;
		}
		close(fd);
		usleep(100 * 1000);
	}
	die("could not connect to %s:%d within 10 s", host, port);
}

static inline void xfer(int fd, void *buf, size_t n, int sending)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = sending ? write(fd, p, n) : read(fd, p, n);
		if (r <= 0)
			die("TCP %s failed (peer gone or %d s timeout)", sending ? "write" : "read", TCP_TIMEOUT_S);
		p += r;
		n -= (size_t)r;
	}
}

/* Both sides call sync_point with the same tag; each sends it and waits for the peer's. */
static inline void sync_point(int fd, char tag)
{
	char got = 0;
	xfer(fd, &tag, 1, 1);
	xfer(fd, &got, 1, 0);
	if (got != tag)
		die("out of step with peer: expected sync '%c', got '%c'", tag, got);
}

/* What the peers exchange over TCP before connecting their QPs. */
struct peer_info {
	uint32_t qpn;
	uint32_t psn;
	uint32_t rkey;
	uint32_t qkey;
	uint64_t addr;
	uint64_t len;
	uint16_t lid;
	uint8_t gid[16];
};

static inline void exchange(int fd, const struct peer_info *mine, struct peer_info *theirs)
{
	xfer(fd, (void *)mine, sizeof(*mine), 1);
	xfer(fd, theirs, sizeof(*theirs), 0);
}

/* RESET->INIT happened already: move an RC QP to RTR and RTS towards `peer` (path MTU 1024,
 * timeout 14, retry 7, rnr_retry 7, `rd_atomic` outstanding reads/atomics each way). */
static inline void rc_qp_to_rts(struct ibv_qp *qp, const struct peer_info *me, const struct peer_info *peer,
				int gidx, uint8_t rd_atomic)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = rd_atomic;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.dlid = peer->lid;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify QP to RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = me->psn;
	a.max_rd_atomic = rd_atomic;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				  IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify QP to RTS");
}

/* ---- work requests ---- */

/* Posts one signaled work request with one SGE (`flags` added to IBV_SEND_SIGNALED): RDMA
 * WRITE/READ and SENDs use raddr/rkey as the RDMA target, FETCH_AND_ADD adds 5 at raddr.
 * Returns ibv_post_send's result. */
static inline int post_one(struct ibv_qp *qp, enum ibv_wr_opcode op, void *addr, uint32_t len, uint32_t lkey,
			   uint64_t raddr, uint32_t rkey, unsigned flags, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uint64_t)(uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED | flags;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 5;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

/* Posts one receive with one SGE; dies if ibv_post_recv refuses it. */
static inline void post_recv_one(struct ibv_qp *qp, void *addr, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uint64_t)(uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		die("ibv_post_recv");
}

/* ---- device ---- */

static inline void gid_str(const union ibv_gid *g, char *out, size_t n)
{
	if (!inet_ntop(AF_INET6, g->raw, out, (socklen_t)n))
		snprintf(out, n, "?");
}

static inline int gid_is_v4_loopback(const union ibv_gid *g)
{
	static const uint8_t prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	return memcmp(g->raw, prefix, 12) == 0 && g->raw[12] == 127;
}

struct dev {
	struct ibv_context *ctx;
	struct ibv_port_attr port;
	union ibv_gid gid;
	int gidx;
};

/* Opens device `name`, checks the port and the GID table (indices 1 and 3 both hold the
 * process's ::ffff:127.x.y.z) and returns the GID at `gidx`. */
static inline void open_dev(struct dev *d, const char *name, int gidx)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_device *found = NULL;
	union ibv_gid g1, g3;
	char s1[64], s3[64];

	if (!list)
		die("ibv_get_device_list");
	check(n >= 1, "device_list", "%d devices", n);
	for (int i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			found = list[i];
	if (!found)
		die("device %s not found among %d devices", name, n);
	d->ctx = ibv_open_device(found);
	if (!d->ctx)
		die("ibv_open_device(%s)", name);
	ibv_free_device_list(list);

	if (ibv_query_port(d->ctx, 1, &d->port))
		die("ibv_query_port");
	check(d->port.state == IBV_PORT_ACTIVE, "port_active", "state %d", d->port.state);
	check(d->port.link_layer == IBV_LINK_LAYER_ETHERNET, "link_layer_ethernet", "link_layer %d",
	      d->port.link_layer);

	if (ibv_query_gid(d->ctx, 1, 1, &g1) || ibv_query_gid(d->ctx, 1, 3, &g3))
		die("ibv_query_gid index 1/3");
	gid_str(&g1, s1, sizeof(s1));
	gid_str(&g3, s3, sizeof(s3));
	printf("gid[1]=%s gid[3]=%s\n", s1, s3);
	check(gid_is_v4_loopback(&g1), "gid1_v4_mapped_loopback", "gid[1] = %s", s1);
	check(memcmp(&g1, &g3, sizeof(g1)) == 0, "gid3_equals_gid1", "gid[1] = %s, gid[3] = %s", s1, s3);

	d->gidx = gidx;
	if (ibv_query_gid(d->ctx, 1, gidx, &d->gid))
		die("ibv_query_gid index %d", gidx);
}

static inline void parse_args(int argc, char **argv, int *is_server, const char **host, int *port, int *gidx,
		       const char **devname)
{
	int i = 2;
	if (argc < 2)
		goto usage;
	if (strcmp(argv[1], "server") == 0) {
		*is_server = 1;
	} else if (strcmp(argv[1], "client") == 0 && argc >= 3) {
		*is_server = 0;
		*host = argv[2];
		i = 3;
	} else {
		goto usage;
	}
	for (; i < argc; i++) {
		if (strcmp(argv[i], "-p") == 0 && i + 1 < argc)
			*port = atoi(argv[++i]);
		else if (strcmp(argv[i], "-g") == 0 && i + 1 < argc)
			*gidx = atoi(argv[++i]);
		else if (strcmp(argv[i], "-d") == 0 && i + 1 < argc)
			*devname = argv[++i];
		else
			goto usage;
	}
	g_role = *is_server ? "server" : "client";
	return;
usage:
	fprintf(stderr, "usage: %s server [-p port] [-g gid_index] [-d dev]\n"
			"       %s client HOST [-p port] [-g gid_index] [-d dev]\n",
		argv[0], argv[0]);
	exit(64);
}

#endif
