/* A listener that does not answer, then does: for tests/cm_flood.rs.
 *
 *   idle_listener -s ADDR PORT BACKLOG   listen (RDMA_PS_TCP, RC) with BACKLOG and print
 *       "listening"; poll nothing until a line "go" arrives on stdin; then take every
 *       CONNECT_REQUEST for up to 20 s: reject (and destroy) those without the private data
 *       "legit", accept the first one with it and print "established" once it is up; print
 *       "requests N" (how many CONNECT_REQUESTs were queued for it) and exit 0.
 *   idle_listener -c ADDR PORT           connect with the private data "legit" (sync calls,
 *       rdma_create_ep); print "connected" and exit 0, or exit 1.
 *
 * The process ends itself after 120 s (alarm) whatever happens. */
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c, what)                                                   \
	do {                                                             \
		if (!(c)) {                                              \
			perror(what);                                    \
			exit(1);                                         \
		}                                                        \
	} while (0)

static const char LEGIT[] = "legit";

static int client(const char *addr, const char *port)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	struct ibv_qp_init_attr attr = { .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
						  .max_recv_sge = 1 },
					 .qp_type = IBV_QPT_RC };
	struct rdma_conn_param p = { .private_data = LEGIT, .private_data_len = sizeof(LEGIT),
				     .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_id *id;

	CHECK(rdma_getaddrinfo(addr, port, &hints, &res) == 0, "rdma_getaddrinfo");
	CHECK(rdma_create_ep(&id, res, NULL, &attr) == 0, "rdma_create_ep");
	CHECK(rdma_connect(id, &p) == 0, "rdma_connect");
	printf("connected\n");
	fflush(stdout);
	rdma_disconnect(id);
	rdma_destroy_ep(id);
	rdma_freeaddrinfo(res);
	return 0;
}

static int server(const char *addr, const char *port, int backlog)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *res;
	struct rdma_cm_id *listen, *conn = NULL;
	char line[16] = "";
	int requests = 0, up = 0;
	time_t end;

	CHECK(ch != NULL, "rdma_create_event_channel");
	CHECK(rdma_getaddrinfo(addr, port, &hints, &res) == 0, "rdma_getaddrinfo");
	CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
	CHECK(rdma_bind_addr(listen, res->ai_src_addr) == 0, "rdma_bind_addr");
	CHECK(rdma_listen(listen, backlog) == 0, "rdma_listen");
	printf("listening\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin) || strncmp(line, "go", 2) != 0)
		return 2;
	end = time(NULL) + 20;
	while (time(NULL) < end && !up) {
		struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
		struct rdma_cm_event *ev;

		if (poll(&pfd, 1, 200) != 1)
			continue;
		CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct rdma_cm_id *id = ev->id;
			int legit = ev->param.conn.private_data_len >= sizeof(LEGIT) &&
				    memcmp(ev->param.conn.private_data, LEGIT, sizeof(LEGIT)) == 0;

			requests++;
			rdma_ack_cm_event(ev);
			if (legit && !conn) {
				struct ibv_qp_init_attr attr = {
					.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
						 .max_recv_sge = 1 },
					.qp_type = IBV_QPT_RC
				};
				struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1,
							     .rnr_retry_count = 7 };

				CHECK(rdma_create_qp(id, NULL, &attr) == 0, "rdma_create_qp");
				CHECK(rdma_accept(id, &p) == 0, "rdma_accept");
				conn = id;
			} else {
				rdma_reject(id, NULL, 0);
				rdma_destroy_id(id);
			}
		} else {
			if (ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->id == conn)
				up = 1;
			rdma_ack_cm_event(ev);
		}
	}
	printf("requests %d\n", requests);
	if (up)
		printf("established\n");
	fflush(stdout);
	return up ? 0 : 1;
}

int main(int argc, char **argv)
{
	alarm(120);
	if (argc == 5 && strcmp(argv[1], "-s") == 0)
		return server(argv[2], argv[3], atoi(argv[4]));
	if (argc == 4 && strcmp(argv[1], "-c") == 0)
		return client(argv[2], argv[3]);
	fprintf(stderr, "usage: idle_listener -s ADDR PORT BACKLOG | idle_listener -c ADDR PORT\n");
	return 2;
}
