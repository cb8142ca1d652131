/* rpma_multi.c - several connections on one librpma endpoint (Debian 12's librpma 1.2, its public
 * API only), the server waiting on the endpoint's fd and every connection's fd with epoll: the
 * pattern of issue #35's bug 2 (librpma migrates each accepted ID to a channel of its own).
 *
 *   rpma_multi server ADDR PORT N   accepts N connections, each with a 4 KiB buffer of its own
 *                                   whose descriptor goes in the accept's private data; every
 *                                   fd is non-blocking, and an fd that epoll calls readable but
 *                                   has no event (RPMA_E_NO_EVENT or an error) is counted as
 *                                   "spurious"; when a connection closes, its buffer must hold
 *                                   the pattern its client wrote. Exit 0 only if N buffers were
 *                                   verified and nothing was spurious.
 *   rpma_multi client ADDR PORT N   opens N connections at once (all requests first), then on
 *                                   each: rpma_write of its own pattern into the server's buffer,
 *                                   rpma_read of it back, compared byte for byte; then closes
 *                                   them all.
 *
 * Everything is bounded: epoll waits at most 30 s in all, a completion at most 10 s.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <librpma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define BUF 4096
#define MAX_CONN 16

#define DIE(...)                                                                                                       \
	do {                                                                                                           \
		fprintf(stderr, "rpma_multi: " __VA_ARGS__);                                                           \
		fprintf(stderr, "\n");                                                                                 \
		exit(2);                                                                                               \
	} while (0)
#define OK(call)                                                                                                       \
	do {                                                                                                           \
		int r_ = (call);                                                                                       \
		if (r_)                                                                                                \
			DIE("%s: %d (%s)", #call, r_, rpma_err_2str(r_));                                              \
	} while (0)

static uint8_t pattern(int seed, size_t i) { return (uint8_t)(seed * 31 + i * 7 + (i >> 8)); }

static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

static void nonblocking(int fd)
{
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK))
		DIE("fcntl O_NONBLOCK");
}

static struct rpma_peer *peer_for(const char *addr, enum rpma_util_ibv_context_type t)
{
	struct ibv_context *ctx = NULL;
	struct rpma_peer *peer = NULL;
	OK(rpma_utils_get_ibv_context(addr, t, &ctx));
	OK(rpma_peer_new(ctx, &peer));
	return peer;
}

struct sconn {
	struct rpma_conn *conn;
	struct rpma_mr_local *mr;
	uint8_t *buf;
	int fd;
};

static int server(const char *addr, const char *port, int n)
{
	struct rpma_peer *peer = peer_for(addr, RPMA_UTIL_IBV_CONTEXT_LOCAL);
	struct rpma_ep *ep = NULL;
	OK(rpma_ep_listen(peer, addr, port, &ep));
	int epfd = epoll_create1(EPOLL_CLOEXEC), lfd = -1;
	OK(rpma_ep_get_fd(ep, &lfd));
	nonblocking(lfd);
	struct epoll_event e = {.events = EPOLLIN, .data.u64 = (uint64_t)-1};
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &e))
		DIE("epoll_ctl");
	printf("server: listening on %s:%s\n", addr, port);
	struct sconn c[MAX_CONN];
	memset(c, 0, sizeof(c));
	int accepted = 0, closed = 0, verified = 0, spurious = 0, established = 0;
	uint64_t end = now_ms() + 30000;
	while (closed < n) {
		int left = (int)(end - now_ms());
		if (left <= 0)
			DIE("timed out: %d accepted, %d established, %d closed", accepted, established, closed);
		struct epoll_event ev[8];
		int m = epoll_wait(epfd, ev, 8, left);
		for (int k = 0; k < m; k++) {
			if (ev[k].data.u64 == (uint64_t)-1) {
				struct rpma_conn_req *req = NULL;
				int r = rpma_ep_next_conn_req(ep, NULL, &req);
				if (r) {
					printf("server: spurious: listening fd readable, rpma_ep_next_conn_req %d (%s)\n",
					       r, rpma_err_2str(r));
					spurious++;
					continue;
				}
				if (accepted == n || accepted == MAX_CONN)
					DIE("more requests than %d", n);
				struct sconn *s = &c[accepted];
				s->buf = aligned_alloc(4096, BUF);
				memset(s->buf, 0, BUF);
				OK(rpma_mr_reg(peer, s->buf, BUF, RPMA_MR_USAGE_WRITE_DST | RPMA_MR_USAGE_READ_SRC,
					       &s->mr));
				size_t dsize = 0;
				OK(rpma_mr_get_descriptor_size(s->mr, &dsize));
				static char desc[256];
				if (dsize > sizeof(desc))
					DIE("descriptor of %zu bytes", dsize);
				OK(rpma_mr_get_descriptor(s->mr, desc));
				struct rpma_conn_private_data pd = {.ptr = desc, .len = (uint8_t)dsize};
				OK(rpma_conn_req_connect(&req, &pd, &s->conn));
				OK(rpma_conn_get_event_fd(s->conn, &s->fd));
				nonblocking(s->fd);
				struct epoll_event ce = {.events = EPOLLIN, .data.u64 = (uint64_t)accepted};
				if (epoll_ctl(epfd, EPOLL_CTL_ADD, s->fd, &ce))
					DIE("epoll_ctl conn");
				accepted++;
				continue;
			}
			struct sconn *s = &c[ev[k].data.u64];
			enum rpma_conn_event ce;
			int r = rpma_conn_next_event(s->conn, &ce);
			if (r) {
				printf("server: spurious: connection fd readable, rpma_conn_next_event %d (%s)\n", r,
				       rpma_err_2str(r));
				spurious++;
				continue;
			}
			if (ce == RPMA_CONN_ESTABLISHED) {
				established++;
				continue;
			}
			/* Closed (or lost): the buffer holds what its client wrote. */
			int seed = -1;
			for (int q = 0; q < 256 && seed < 0; q++)
				if (pattern(q, 0) == s->buf[0] && pattern(q, 1) == s->buf[1])
					seed = q;
			int good = seed >= 0;
			for (size_t i = 0; good && i < BUF; i++)
				good = s->buf[i] == pattern(seed, i);
			verified += good;
			printf("server: connection %d %s, buffer %s\n", (int)ev[k].data.u64,
			       ce == RPMA_CONN_CLOSED ? "closed" : rpma_utils_conn_event_2str(ce),
			       good ? "verified" : "WRONG");
			epoll_ctl(epfd, EPOLL_CTL_DEL, s->fd, NULL);
			rpma_conn_disconnect(s->conn);
			OK(rpma_conn_delete(&s->conn));
			OK(rpma_mr_dereg(&s->mr));
			free(s->buf);
			closed++;
		}
	}
	OK(rpma_ep_shutdown(&ep));
	OK(rpma_peer_delete(&peer));
	close(epfd);
	printf("server: %d connections, %d established, %d buffers verified, %d spurious wakeups\n", closed,
	       established, verified, spurious);
	return verified == n && established == n && spurious == 0 ? 0 : 1;
}

static void wait_wc(struct rpma_conn *conn, const char *what)
{
	struct rpma_cq *cq = NULL;
	OK(rpma_conn_get_cq(conn, &cq));
	uint64_t end = now_ms() + 10000;
	for (;;) {
		struct ibv_wc wc;
		int got = 0;
		int r = rpma_cq_get_wc(cq, 1, &wc, &got);
		if (r == 0 && got == 1) {
			if (wc.status != IBV_WC_SUCCESS)
				DIE("%s completed with status %d", what, wc.status);
			return;
		}
		if (r && r != RPMA_E_NO_COMPLETION)
			DIE("rpma_cq_get_wc (%s): %d", what, r);
		if (now_ms() > end)
			DIE("no completion for %s within 10 s", what);
		usleep(100);
	}
}

static int client(const char *addr, const char *port, int n)
{
	if (n > MAX_CONN)
		DIE("at most %d connections", MAX_CONN);
	struct rpma_peer *peer = peer_for(addr, RPMA_UTIL_IBV_CONTEXT_REMOTE);
	struct rpma_conn *conn[MAX_CONN];
	for (int k = 0; k < n; k++) {
		struct rpma_conn_req *req = NULL;
		OK(rpma_conn_req_new(peer, addr, port, NULL, &req));
		OK(rpma_conn_req_connect(&req, NULL, &conn[k]));
	}
	uint8_t *src = aligned_alloc(4096, BUF), *back = aligned_alloc(4096, BUF);
	struct rpma_mr_local *smr = NULL, *bmr = NULL;
	OK(rpma_mr_reg(peer, src, BUF, RPMA_MR_USAGE_WRITE_SRC, &smr));
	OK(rpma_mr_reg(peer, back, BUF, RPMA_MR_USAGE_READ_DST, &bmr));
	int good = 0;
	for (int k = 0; k < n; k++) {
		enum rpma_conn_event ev;
		OK(rpma_conn_next_event(conn[k], &ev));
		if (ev != RPMA_CONN_ESTABLISHED)
			DIE("connection %d: %s", k, rpma_utils_conn_event_2str(ev));
		struct rpma_conn_private_data pd;
		OK(rpma_conn_get_private_data(conn[k], &pd));
		struct rpma_mr_remote *dst = NULL;
		OK(rpma_mr_remote_from_descriptor(pd.ptr, pd.len, &dst));
		int seed = 1 + k * 3;
		for (size_t i = 0; i < BUF; i++)
			src[i] = pattern(seed, i);
		memset(back, 0, BUF);
		OK(rpma_write(conn[k], dst, 0, smr, 0, BUF, RPMA_F_COMPLETION_ALWAYS, NULL));
		wait_wc(conn[k], "rpma_write");
		OK(rpma_read(conn[k], bmr, 0, dst, 0, BUF, RPMA_F_COMPLETION_ALWAYS, NULL));
		wait_wc(conn[k], "rpma_read");
		int same = memcmp(src, back, BUF) == 0;
		good += same;
		printf("client: connection %d: %d bytes written and read back %s\n", k, BUF,
		       same ? "verified" : "WRONG");
		OK(rpma_mr_remote_delete(&dst));
	}
	for (int k = 0; k < n; k++) {
		OK(rpma_conn_disconnect(conn[k]));
		enum rpma_conn_event ev;
		OK(rpma_conn_next_event(conn[k], &ev));
		OK(rpma_conn_delete(&conn[k]));
	}
	OK(rpma_mr_dereg(&smr));
	OK(rpma_mr_dereg(&bmr));
	free(src);
	free(back);
	OK(rpma_peer_delete(&peer));
	printf("client: %d of %d connections verified\n", good, n);
	return good == n ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc != 5)
		DIE("usage: rpma_multi server|client ADDR PORT N");
	int n = atoi(argv[4]);
	if (n < 1 || n > MAX_CONN)
		DIE("N must be 1..%d", MAX_CONN);
	if (!strcmp(argv[1], "server"))
		return server(argv[2], argv[3], n);
	if (!strcmp(argv[1], "client"))
		return client(argv[2], argv[3], n);
	DIE("usage: rpma_multi server|client ADDR PORT N");
}
