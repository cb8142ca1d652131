/* cm_bugs.c - reproducers of issue #35's four rdma_cm bugs, server and client in one process
 * (two event channels, one thread), over urxe's librdmacm.so.1 and libibverbs.so.1.
 *
 *   cm_bugs disconnect ADDR PORT   (1) a connection whose client QP the application destroyed
 *                                  with ibv_destroy_qp (made with rdma_create_qp, as fio does)
 *                                  is disconnected by the server: the library must not touch
 *                                  the freed QP (run with ASAN_OPTIONS max_free_fill_size, the
 *                                  freed QP is garbage, a touch crashes); on a second
 *                                  connection, DISCONNECTED leaves the client's QP in RTS (as
 *                                  librdmacm: only rdma_disconnect moves it to ERR); a rejected
 *                                  connection's QP is in ERR once rdma_get_cm_event returned
 *                                  REJECTED.
 *   cm_bugs migrate ADDR           (2) an ID with a queued event is migrated to another channel:
 *                                  the old channel's fd stops being readable, a non-blocking
 *                                  rdma_get_cm_event there gives EAGAIN, the new one is readable
 *                                  and gives the event; an ID destroyed with a queued event
 *                                  leaves its channel's fd unreadable.
 *   cm_bugs atomic ADDR PORT       (3) QPs made with rdma_create_qp_ex and
 *                                  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS (ATOMIC_WRITE): the client
 *                                  connects, ibv_qp_to_qp_ex works on its CM QP, an ATOMIC WRITE
 *                                  (ibv_wr_atomic_write) lands in the server's buffer.
 *   cm_bugs linklocal ADDR%IF PORT (4) rdma_bind_addr to an IPv6 link-local address with its
 *                                  scope id, rdma_listen on it; rdma_get_local_addr gives both
 *                                  back.
 *
 * Exit 0 and "all checks passed" only if every check passed. Built with -Wall -Wextra -Werror
 * -fsanitize=address,undefined by tests/rdmacm_bugs.rs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#define PROG "cm_bugs"
#include "check.h"


static int readable(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* The next event of `ch` (waiting at most 10 s), which must be `want` for `id` (NULL: any ID).
 * Returns the event (acknowledged by the caller). */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
				    struct rdma_cm_id *id)
{
	if (!readable(ch, 10000))
		DIE("no event within 10 s (wanted %s)", rdma_event_str(want));
	struct rdma_cm_event *ev = NULL;
	if (rdma_get_cm_event(ch, &ev))
		DIE("rdma_get_cm_event (wanted %s)", rdma_event_str(want));
	if (ev->event != want || (id && ev->id != id))
		DIE("got %s status %d, wanted %s", rdma_event_str(ev->event), ev->status, rdma_event_str(want));
	return ev;
}

static void expect_ack(struct rdma_event_channel *ch, enum rdma_cm_event_type want, struct rdma_cm_id *id)
{
	rdma_ack_cm_event(expect(ch, want, id));
}

struct pair {
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *listen, *server, *client;
	struct ibv_cq *scq, *ccq;
};

static void listen_on(struct pair *p, int port)
{
	p->sch = rdma_create_event_channel();
	p->cch = rdma_create_event_channel();
	if (!p->sch || !p->cch)
		DIE("rdma_create_event_channel");
	if (rdma_create_id(p->sch, &p->listen, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id");
	((struct sockaddr_in *)&server_addr)->sin_port = htons((uint16_t)port);
	if (rdma_bind_addr(p->listen, (struct sockaddr *)&server_addr) || rdma_listen(p->listen, 8))
		DIE("bind/listen");
}

typedef int (*make_qp_fn)(struct rdma_cm_id *id, struct ibv_cq *cq);

static int plain_qp(struct rdma_cm_id *id, struct ibv_cq *cq)
{
	(void)cq;
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	return rdma_create_qp(id, NULL, &a);
}

/* The client's route and QP, then rdma_connect; the server's CONNECT_REQUEST. */
static struct rdma_cm_id *start_connect(struct pair *p, make_qp_fn make_qp)
{
	if (rdma_create_id(p->cch, &p->client, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id (client)");
	if (rdma_resolve_addr(p->client, NULL, (struct sockaddr *)&server_addr, 2000))
		DIE("rdma_resolve_addr");
	expect_ack(p->cch, RDMA_CM_EVENT_ADDR_RESOLVED, p->client);
	if (rdma_resolve_route(p->client, 2000))
		DIE("rdma_resolve_route");
	expect_ack(p->cch, RDMA_CM_EVENT_ROUTE_RESOLVED, p->client);
	if (make_qp(p->client, p->ccq))
		DIE("client QP");
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(p->client, &cp))
		DIE("rdma_connect");
	struct rdma_cm_event *ev = expect(p->sch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL);
	struct rdma_cm_id *req = ev->id;
	rdma_ack_cm_event(ev);
	return req;
}

static void connect_pair(struct pair *p, make_qp_fn make_qp)
{
	p->server = start_connect(p, make_qp);
	if (make_qp(p->server, p->scq))
		DIE("server QP");
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = cp.initiator_depth = 1;
	cp.rnr_retry_count = 7;
	if (rdma_accept(p->server, &cp))
		DIE("rdma_accept");
	expect_ack(p->cch, RDMA_CM_EVENT_ESTABLISHED, p->client);
	expect_ack(p->sch, RDMA_CM_EVENT_ESTABLISHED, p->server);
}

static void disconnect(int port)
{
	struct pair p;
	memset(&p, 0, sizeof(p));
	listen_on(&p, port);

	/* 1. The application destroys the client's QP itself, then the server disconnects. */
	connect_pair(&p, plain_qp);
	struct ibv_qp *qp = p.client->qp;
	CHECK(ibv_destroy_qp(qp) == 0, "client_qp_destroyed_by_application", "ibv_destroy_qp");
	if (rdma_disconnect(p.server))
		DIE("rdma_disconnect (server)");
	expect_ack(p.cch, RDMA_CM_EVENT_DISCONNECTED, p.client);
	CHECK(1, "disconnected_after_application_destroyed_its_qp", "ok");
	p.client->qp = NULL; /* what the application left behind is not the library's to free */
	rdma_destroy_id(p.client);
	expect_ack(p.sch, RDMA_CM_EVENT_DISCONNECTED, p.server);
	rdma_destroy_qp(p.server);
	rdma_destroy_id(p.server);

	/* 2. DISCONNECTED does not touch the QP. */
	connect_pair(&p, plain_qp);
	CHECK(qp_state(p.client->qp) == IBV_QPS_RTS, "client_qp_rts_when_established", "state %d",
	      qp_state(p.client->qp));
	if (rdma_disconnect(p.server))
		DIE("rdma_disconnect (server)");
	expect_ack(p.cch, RDMA_CM_EVENT_DISCONNECTED, p.client);
	enum ibv_qp_state s = qp_state(p.client->qp);
	CHECK(s == IBV_QPS_RTS, "disconnected_leaves_the_qp_alone", "state %d (RTS is %d)", s, IBV_QPS_RTS);
	CHECK(rdma_disconnect(p.client) == 0, "rdma_disconnect_after_disconnected", "errno %d", errno);
	s = qp_state(p.client->qp);
	CHECK(s == IBV_QPS_ERR, "rdma_disconnect_moves_the_qp_to_err", "state %d", s);
	expect_ack(p.sch, RDMA_CM_EVENT_DISCONNECTED, p.server);
	rdma_destroy_qp(p.client);
	rdma_destroy_id(p.client);
	rdma_destroy_qp(p.server);
	rdma_destroy_id(p.server);

	/* 3. REJECTED: the QP is in ERR once the application has the event. */
	struct rdma_cm_id *req = start_connect(&p, plain_qp);
	if (rdma_reject(req, NULL, 0))
		DIE("rdma_reject");
	expect_ack(p.cch, RDMA_CM_EVENT_REJECTED, p.client);
	s = qp_state(p.client->qp);
	CHECK(s == IBV_QPS_ERR, "rejected_qp_in_err_after_get_cm_event", "state %d", s);
	rdma_destroy_qp(p.client);
	rdma_destroy_id(p.client);
	rdma_destroy_id(req);

	rdma_destroy_id(p.listen);
	rdma_destroy_event_channel(p.sch);
	rdma_destroy_event_channel(p.cch);
}

static void migrate(void)
{
	struct rdma_event_channel *a = rdma_create_event_channel(), *b = rdma_create_event_channel();
	if (!a || !b)
		DIE("rdma_create_event_channel");
	if (fcntl(a->fd, F_SETFL, fcntl(a->fd, F_GETFL) | O_NONBLOCK))
		DIE("O_NONBLOCK");
	struct rdma_cm_id *id = NULL;
	if (rdma_create_id(a, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id");
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&server_addr, 2000))
		DIE("rdma_resolve_addr");
	CHECK(readable(a, 5000), "old_channel_readable_with_the_event", "not readable");
	CHECK(rdma_migrate_id(id, b) == 0, "rdma_migrate_id", "errno %d", errno);
	CHECK(!readable(a, 0), "old_channel_unreadable_after_migrate", "still readable");
	struct rdma_cm_event *ev = NULL;
	errno = 0;
	int r = rdma_get_cm_event(a, &ev);
	CHECK(r == -1 && errno == EAGAIN, "old_channel_eagain_after_migrate", "returned %d errno %d", r, errno);
	CHECK(readable(b, 0), "new_channel_readable_after_migrate", "not readable");
	r = rdma_get_cm_event(b, &ev);
	CHECK(r == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == id, "new_channel_has_the_event",
	      "returned %d", r);
	if (r == 0)
		rdma_ack_cm_event(ev);
	CHECK(!readable(b, 0), "new_channel_unreadable_when_empty", "still readable");
	rdma_destroy_id(id);

	/* An ID destroyed with its event still queued. */
	if (rdma_create_id(a, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id");
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&server_addr, 2000))
		DIE("rdma_resolve_addr");
	CHECK(readable(a, 5000), "channel_readable_with_the_event", "not readable");
	rdma_destroy_id(id);
	CHECK(!readable(a, 0), "channel_unreadable_after_destroy_dropped_its_event", "still readable");
	errno = 0;
	r = rdma_get_cm_event(a, &ev);
	CHECK(r == -1 && errno == EAGAIN, "channel_eagain_after_destroy", "returned %d errno %d", r, errno);
	rdma_destroy_event_channel(a);
	rdma_destroy_event_channel(b);
}

static struct ibv_pd *atomic_pd;

static int atomic_qp(struct rdma_cm_id *id, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.send_cq = a.recv_cq = cq;
	a.cap.max_send_wr = a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = atomic_pd;
	a.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_RDMA_WRITE;
	int r = rdma_create_qp_ex(id, &a);
	if (r)
		fprintf(stderr, "cm_bugs: rdma_create_qp_ex with SEND_OPS_FLAGS: %d errno %d %s\n", r, errno,
			strerror(errno));
	return r;
}

static void atomic(int port)
{
	struct pair p;
	memset(&p, 0, sizeof(p));
	listen_on(&p, port);
	struct ibv_context *ctx = p.listen->verbs;
	if (!ctx)
		DIE("no device on the bound ID");
	atomic_pd = ibv_alloc_pd(ctx);
	p.scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	p.ccq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!atomic_pd || !p.scq || !p.ccq)
		DIE("PD/CQs");
	static uint8_t mem[64], src[8];
	memset(mem, 0x5A, sizeof(mem));
	struct ibv_mr *mr = ibv_reg_mr(atomic_pd, mem, sizeof(mem),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr)
		DIE("ibv_reg_mr");
	connect_pair(&p, atomic_qp);
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(p.client->qp);
	CHECK(qx != NULL, "ibv_qp_to_qp_ex_on_the_cm_qp", "NULL, errno %d", errno);
	if (qx) {
		for (int i = 0; i < 8; i++)
			src[i] = (uint8_t)(0xA0 + i);
		ibv_wr_start(qx);
		qx->wr_id = 77;
		qx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_atomic_write(qx, mr->rkey, (uint64_t)(uintptr_t)(mem + 16), src);
		int r = ibv_wr_complete(qx);
		CHECK(r == 0, "ibv_wr_complete", "returned %d", r);
		struct ibv_wc wc;
		int n = 0;
		for (int i = 0; i < 10000 && n == 0; i++) {
			n = ibv_poll_cq(p.ccq, 1, &wc);
			if (n == 0)
				usleep(1000);
		}
		CHECK(n == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_ATOMIC_WRITE && wc.wr_id == 77,
		      "atomic_write_completes", "n %d status %d opcode %d", n, n == 1 ? (int)wc.status : -1,
		      n == 1 ? (int)wc.opcode : -1);
		CHECK(memcmp(mem + 16, src, 8) == 0 && mem[15] == 0x5A && mem[24] == 0x5A,
		      "atomic_write_landed_on_the_server", "word %02x..%02x", mem[16], mem[23]);
	}
	rdma_disconnect(p.client);
	expect_ack(p.sch, RDMA_CM_EVENT_DISCONNECTED, p.server);
	expect_ack(p.cch, RDMA_CM_EVENT_DISCONNECTED, p.client);
	rdma_destroy_qp(p.client);
	rdma_destroy_qp(p.server);
	rdma_destroy_id(p.client);
	rdma_destroy_id(p.server);
	rdma_destroy_id(p.listen);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(p.scq);
	ibv_destroy_cq(p.ccq);
	ibv_dealloc_pd(atomic_pd);
	rdma_destroy_event_channel(p.sch);
	rdma_destroy_event_channel(p.cch);
}

static void linklocal(const char *spec, const char *port)
{
	char host[128];
	snprintf(host, sizeof(host), "%s", spec);
	char *pct = strchr(host, '%');
	if (!pct)
		DIE("want fe80::X%%IF");
	unsigned scope = if_nametoindex(pct + 1);
	if (!scope)
		DIE("no interface %s", pct + 1);
	parse_addr(spec, port);
	struct sockaddr_in6 *want = (struct sockaddr_in6 *)&server_addr;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id");
	int r = rdma_bind_addr(id, (struct sockaddr *)want);
	CHECK(r == 0, "bind_link_local_with_scope", "returned %d errno %d (%s)", r, errno, strerror(errno));
	if (r == 0) {
		struct sockaddr_in6 *got = (struct sockaddr_in6 *)rdma_get_local_addr(id);
		CHECK(got->sin6_family == AF_INET6 && !memcmp(&got->sin6_addr, &want->sin6_addr, 16) &&
			      got->sin6_port == want->sin6_port && got->sin6_scope_id == scope,
		      "local_addr_keeps_address_port_and_scope", "family %d scope %u (want %u)", got->sin6_family,
		      got->sin6_scope_id, scope);
		r = rdma_listen(id, 4);
		CHECK(r == 0, "listen_on_link_local", "returned %d errno %d", r, errno);
	}
	/* The same address without its scope id names no interface: the kernel refuses it. */
	struct rdma_cm_id *id2 = NULL;
	if (rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id");
	struct sockaddr_in6 noscope = *want;
	noscope.sin6_scope_id = 0;
	noscope.sin6_port = 0;
	r = rdma_bind_addr(id2, (struct sockaddr *)&noscope);
	CHECK(r == -1, "bind_link_local_without_scope_refused", "returned %d errno %d", r, errno);
	rdma_destroy_id(id2);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc >= 4 && !strcmp(argv[1], "disconnect")) {
		parse_addr(argv[2], NULL);
		disconnect(atoi(argv[3]));
	} else if (argc >= 3 && !strcmp(argv[1], "migrate")) {
		parse_addr(argv[2], NULL);
		migrate();
	} else if (argc >= 4 && !strcmp(argv[1], "atomic")) {
		parse_addr(argv[2], NULL);
		atomic(atoi(argv[3]));
	} else if (argc >= 4 && !strcmp(argv[1], "linklocal")) {
		linklocal(argv[2], argv[3]);
	} else {
		fprintf(stderr, "usage: cm_bugs disconnect|migrate|atomic|linklocal ADDR [PORT]\n");
		return 2;
	}
	return check_summary();
}
