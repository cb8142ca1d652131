/* cm_faults.c - the rdma_cm faults of a fault plan (URXE_FAULTS, site cm) as an application
 * meets them: server and client in one process (two event channels, one thread), over urxe's
 * librdmacm.so.1. Each mode checks the exact event and status sequence the kernel's CMA gives.
 *
 *   cm_faults addr ADDR STATUS         rdma_resolve_addr ends in ADDR_ERROR with STATUS
 *                                      (plan: cm-error=E; STATUS is -E)
 *   cm_faults route ADDR STATUS        ADDR_RESOLVED, then rdma_resolve_route ends in
 *                                      ROUTE_ERROR with STATUS (plan: cm-error=E:step=resolve-route)
 *   cm_faults cmid ADDR N STATUS       two IDs (created 0th and 1st) resolve the address: ID N
 *                                      gets ADDR_ERROR with STATUS, the other ADDR_RESOLVED
 *                                      (plan: cm-error=E:cm-id=N)
 *   cm_faults reject ADDR PORT REASON  the first connect is REJECTED with status REASON and the
 *                                      server sees no CONNECT_REQUEST; a second connect (a new
 *                                      ID: the reconnect) is ESTABLISHED (plan: reject=R:count=1)
 *   cm_faults unreachable ADDR PORT    the REQs are lost: UNREACHABLE, -ETIMEDOUT, after the
 *                                      CM's retries (16 tries of 2 x 1.07 s + 4.3 s: about 98 s);
 *                                      prints the time it took (plan: cm-error=ETIMEDOUT:step=connect)
 *   cm_faults disconnect ADDR PORT     a connection with receives posted on both QPs: the DREQ
 *                                      (plan: disconnect:at=T) gives DISCONNECTED on both
 *                                      sides, the injecting side's QPs in ERR and their receives
 *                                      flushed (IBV_WC_WR_FLUSH_ERR)
 *   cm_faults lostrtu ADDR PORT        the client is ESTABLISHED at once; the server, its RTU
 *                                      lost, only after its REP was sent again and answered
 *                                      (about 6 s: the REP timeout) (plan: lose-rtu)
 *   cm_faults removal ADDR PORT        a listener and a connection: DEVICE_REMOVAL, status 0,
 *                                      for the listener, the server's and the client's IDs
 *                                      (plan: device-removal:at=T)
 *
 * With CM_FAULTS_STAT=<path of urxe> set, each mode ends by running `urxe stat` on itself.
 *
 * Exit 0 and "all checks passed" only if every check passed. Built with -Wall -Wextra -Werror
 * -fsanitize=address,undefined by tests/faults_cm.rs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#define PROG "cm_faults"
#include "check.h"


static uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* The next event of `ch` within `ms`: its type, status and ID (type -1: none came). */
struct got {
	int event, status;
	struct rdma_cm_id *id;
};

static struct got next_event(struct rdma_event_channel *ch, int ms)
{
	struct got g = {-1, 0, NULL};
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	if (poll(&p, 1, ms) != 1)
		return g;
	struct rdma_cm_event *ev = NULL;
	if (rdma_get_cm_event(ch, &ev))
		DIE("rdma_get_cm_event");
	g.event = ev->event;
	g.status = ev->status;
	g.id = ev->id;
	printf("event %s status %d\n", rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	return g;
}

static const char *name_of(int ev)
{
	return ev < 0 ? "(none)" : rdma_event_str(ev);
}

/* Checks that the next event of `ch` is `want` with `status`; returns its ID. */
static struct rdma_cm_id *expect(struct rdma_event_channel *ch, int want, int status, const char *name, int ms)
{
	struct got g = next_event(ch, ms);
	CHECK(g.event == want && g.status == status, name, "got %s status %d, wanted %s status %d",
	      name_of(g.event), g.status, rdma_event_str(want), status);
	if (g.event != want)
		exit(1);
	return g.id;
}

struct pair {
	struct rdma_event_channel *sch, *cch;
	struct rdma_cm_id *listen, *server, *client;
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

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &a))
		DIE("rdma_create_qp");
}

/* A new client ID with its route and QP, and rdma_connect. */
static void client_connect(struct pair *p)
{
	if (rdma_create_id(p->cch, &p->client, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id (client)");
	if (rdma_resolve_addr(p->client, NULL, (struct sockaddr *)&server_addr, 2000))
		DIE("rdma_resolve_addr");
	expect(p->cch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, "addr resolved", 10000);
	if (rdma_resolve_route(p->client, 2000))
		DIE("rdma_resolve_route");
	expect(p->cch, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, "route resolved", 10000);
	make_qp(p->client);
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(p->client, &cp))
		DIE("rdma_connect");
}

static void server_accept(struct pair *p)
{
	p->server = expect(p->sch, RDMA_CM_EVENT_CONNECT_REQUEST, 0, "connect request", 10000);
	make_qp(p->server);
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = cp.initiator_depth = 1;
	cp.rnr_retry_count = 7;
	if (rdma_accept(p->server, &cp))
		DIE("rdma_accept");
}

static void connect_pair(struct pair *p)
{
	client_connect(p);
	server_accept(p);
	expect(p->cch, RDMA_CM_EVENT_ESTABLISHED, 0, "client established", 10000);
	expect(p->sch, RDMA_CM_EVENT_ESTABLISHED, 0, "server established", 10000);
}

static void resolve_fails(int route, int status)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id");
	((struct sockaddr_in *)&server_addr)->sin_port = htons(7471);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&server_addr, 2000) == 0, "rdma_resolve_addr returns 0",
	      "errno %d", errno);
	if (!route) {
		expect(ch, RDMA_CM_EVENT_ADDR_ERROR, status, "addr error with the planned status", 10000);
	} else {
		expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 0, "addr resolved", 10000);
		CHECK(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route returns 0", "errno %d", errno);
		expect(ch, RDMA_CM_EVENT_ROUTE_ERROR, status, "route error with the planned status", 10000);
	}
	CHECK(next_event(ch, 300).event == -1, "nothing after the error", "an event followed");
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

/* Two IDs, created 0th and 1st, each resolving the address: only ID `which` (the plan's
 * cm-id=) meets the plan's ADDR_ERROR with `status`; the other's address resolves. */
static void cm_id_scope(int which, int status)
{
	struct rdma_event_channel *ch[2];
	struct rdma_cm_id *id[2];
	for (int i = 0; i < 2; i++)
		if (!(ch[i] = rdma_create_event_channel()) || rdma_create_id(ch[i], &id[i], NULL, RDMA_PS_TCP))
			DIE("rdma_create_id %d", i);
	((struct sockaddr_in *)&server_addr)->sin_port = htons(7471);
	for (int i = 0; i < 2; i++) {
		CHECK(rdma_resolve_addr(id[i], NULL, (struct sockaddr *)&server_addr, 2000) == 0,
		      "rdma_resolve_addr returns 0", "ID %d: errno %d", i, errno);
		if (i == which)
			expect(ch[i], RDMA_CM_EVENT_ADDR_ERROR, status, "the chosen ID: addr error", 10000);
		else
			expect(ch[i], RDMA_CM_EVENT_ADDR_RESOLVED, 0, "the other ID: addr resolved", 10000);
	}
	for (int i = 0; i < 2; i++) {
		CHECK(next_event(ch[i], 200).event == -1, "nothing more", "ID %d had another event", i);
		rdma_destroy_id(id[i]);
		rdma_destroy_event_channel(ch[i]);
	}
}

static void reject(int port, int reason)
{
	struct pair p;
	memset(&p, 0, sizeof(p));
	listen_on(&p, port);
	client_connect(&p);
	expect(p.cch, RDMA_CM_EVENT_REJECTED, reason, "rejected with the planned reason", 10000);
	CHECK(qp_state(p.client->qp) == IBV_QPS_ERR, "rejected client's QP in ERR", "state %d", qp_state(p.client->qp));
	CHECK(next_event(p.sch, 200).event == -1, "the server saw no connect request", "it did");
	/* The reconnect: a new ID, as an application retrying does. */
	rdma_destroy_qp(p.client);
	rdma_destroy_id(p.client);
	connect_pair(&p);
	printf("reconnected after the reject\n");
}

static void unreachable(int port)
{
	struct pair p;
	memset(&p, 0, sizeof(p));
	listen_on(&p, port);
	uint64_t t0 = now_ms();
	client_connect(&p);
	expect(p.cch, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, "unreachable, -ETIMEDOUT", 200000);
	uint64_t took = now_ms() - t0;
	printf("unreachable after %llu ms\n", (unsigned long long)took);
	/* 16 tries of 2 x 2^(18-8) ms + 2^(20-8) ms = 6144 ms each. */
	CHECK(took >= 15 * 6144 && took < 16 * 6144 + 20000, "after the CM's 15 retries", "took %llu ms",
	      (unsigned long long)took);
	CHECK(next_event(p.sch, 100).event == -1, "the server saw no connect request", "it did");
}

static int post_recvs(struct rdma_cm_id *id, char *buf, struct ibv_mr *mr, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1}, *bad = NULL;
		if (ibv_post_recv(id->qp, &wr, &bad))
			return -1;
	}
	return 0;
}

/* Completions of `cq` within `ms`: how many, and how many with `status`. */
static int drain(struct ibv_cq *cq, int ms, enum ibv_wc_status status, int *with)
{
	int n = 0;
	uint64_t end = now_ms() + (uint64_t)ms;
	*with = 0;
	while (now_ms() < end) {
		struct ibv_wc wc;
		int r = ibv_poll_cq(cq, 1, &wc);
		if (r < 0)
			return -1;
		if (r == 0) {
			usleep(1000);
			continue;
		}
		n++;
		*with += wc.status == status;
	}
	return n;
}

static void disconnect(int port)
{
	struct pair p;
	memset(&p, 0, sizeof(p));
	listen_on(&p, port);
	connect_pair(&p);
	static char sbuf[64], cbuf[64];
	struct ibv_mr *smr = ibv_reg_mr(p.server->pd, sbuf, sizeof(sbuf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *cmr = ibv_reg_mr(p.client->pd, cbuf, sizeof(cbuf), IBV_ACCESS_LOCAL_WRITE);
	if (!smr || !cmr || post_recvs(p.server, sbuf, smr, 4) || post_recvs(p.client, cbuf, cmr, 4))
		DIE("receives");
	/* The transfer goes on until the plan's DREQ. */
	expect(p.cch, RDMA_CM_EVENT_DISCONNECTED, 0, "client disconnected", 10000);
	expect(p.sch, RDMA_CM_EVENT_DISCONNECTED, 0, "server disconnected", 10000);
	CHECK(qp_state(p.client->qp) == IBV_QPS_ERR, "client QP in ERR", "state %d", qp_state(p.client->qp));
	CHECK(qp_state(p.server->qp) == IBV_QPS_ERR, "server QP in ERR", "state %d", qp_state(p.server->qp));
	int with = 0;
	int n = drain(p.client->recv_cq, 300, IBV_WC_WR_FLUSH_ERR, &with);
	CHECK(n == 4 && with == 4, "client receives flushed", "%d completions, %d flushed", n, with);
	n = drain(p.server->recv_cq, 300, IBV_WC_WR_FLUSH_ERR, &with);
	CHECK(n == 4 && with == 4, "server receives flushed", "%d completions, %d flushed", n, with);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(cmr);
}

static void lost_rtu(int port)
{
	struct pair p;
	memset(&p, 0, sizeof(p));
	listen_on(&p, port);
	client_connect(&p);
	server_accept(&p);
	uint64_t t0 = now_ms();
	expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, 0, "client established", 10000);
	CHECK(next_event(p.sch, 1000).event == -1, "server not established without the RTU", "it was");
	expect(p.sch, RDMA_CM_EVENT_ESTABLISHED, 0, "server established after the REP was sent again", 30000);
	uint64_t took = now_ms() - t0;
	printf("server established after %llu ms\n", (unsigned long long)took);
	/* The REP's timeout: 2 x 2^(18-8) ms + 2^(20-8) ms. */
	CHECK(took >= 6000 && took < 20000, "after one REP timeout", "took %llu ms", (unsigned long long)took);
}

static void removal(int port)
{
	struct pair p;
	memset(&p, 0, sizeof(p));
	listen_on(&p, port);
	connect_pair(&p);
	int seen_listen = 0, seen_server = 0, seen_client = 0, other = 0;
	for (int i = 0; i < 3; i++) {
		struct rdma_event_channel *ch = i < 2 ? p.sch : p.cch;
		struct got g = next_event(ch, 10000);
		if (g.event != RDMA_CM_EVENT_DEVICE_REMOVAL || g.status != 0)
			other++;
		else if (g.id == p.listen)
			seen_listen++;
		else if (g.id == p.server)
			seen_server++;
		else if (g.id == p.client)
			seen_client++;
	}
	CHECK(seen_listen == 1 && seen_server == 1 && seen_client == 1 && !other,
	      "device removal, status 0, for each ID", "listener %d server %d client %d other %d", seen_listen,
	      seen_server, seen_client, other);
	CHECK(qp_state(p.client->qp) == IBV_QPS_ERR, "client QP in ERR", "state %d", qp_state(p.client->qp));
}

/* With CM_FAULTS_STAT=<urxe binary>: `urxe stat` of this process, its output after the checks'
 * (tests/faults_cm.rs reads the CM fault counters, faults_cm_*, from it). */
static void print_stat(void)
{
	const char *urxe = getenv("CM_FAULTS_STAT");
	if (!urxe)
		return;
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "'%s' stat %d", urxe, (int)getpid());
	fflush(stdout);
	CHECK(system(cmd) == 0, "urxe stat of this process", "%s failed", cmd);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3)
		DIE("usage: cm_faults MODE ADDR [PORT|STATUS] [REASON]");
	const char *mode = argv[1];
	parse_addr(argv[2], NULL);
	int arg = argc > 3 ? atoi(argv[3]) : 0;
	if (!strcmp(mode, "addr") || !strcmp(mode, "route"))
		resolve_fails(!strcmp(mode, "route"), arg);
	else if (!strcmp(mode, "cmid"))
		cm_id_scope(arg, argc > 4 ? atoi(argv[4]) : -113);
	else if (!strcmp(mode, "reject"))
		reject(arg, argc > 4 ? atoi(argv[4]) : 28);
	else if (!strcmp(mode, "unreachable"))
		unreachable(arg);
	else if (!strcmp(mode, "disconnect"))
		disconnect(arg);
	else if (!strcmp(mode, "lostrtu"))
		lost_rtu(arg);
	else if (!strcmp(mode, "removal"))
		removal(arg);
	else
		DIE("unknown mode %s", mode);
	print_stat();
	return check_summary();
}
