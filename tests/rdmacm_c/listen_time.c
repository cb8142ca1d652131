/* What rdma_listen costs, beside what a peer's address and route resolution cost (#35: qperf
 * 0.4.11 sends its port before it calls rdma_listen, so a listen slower than the peer's
 * resolution makes a refusal likely).
 *
 *   listen_time ADDR N   N times: create an ID (RDMA_PS_TCP), bind it to ADDR port 0, listen,
 *       and (another ID) resolve the address and the route to it; destroy both. Prints
 *       "bind median A us max B us", "listen median C us max D us" and
 *       "resolve median E us max F us" (addr + route, event channel waits included).
 *
 * The process ends itself after 60 s (alarm). */
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c, what)                \
	do {                          \
		if (!(c)) {           \
			perror(what); \
			exit(1);      \
		}                     \
	} while (0)

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static void report(const char *what, double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp);
	printf("%s median %.0f us max %.0f us\n", what, v[n / 2], v[n - 1]);
}

static void wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event");
	if (ev->event != want) {
		fprintf(stderr, "event %s, wanted %s\n", rdma_event_str(ev->event), rdma_event_str(want));
		exit(1);
	}
	rdma_ack_cm_event(ev);
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct rdma_event_channel *ch;
	double *bind_us, *listen_us, *resolve_us;
	int n;

	if (argc != 3 || inet_pton(AF_INET, argv[1], &a.sin_addr) != 1 || (n = atoi(argv[2])) < 1) {
		fprintf(stderr, "usage: listen_time ADDR N\n");
		return 2;
	}
	alarm(60);
	bind_us = calloc(n, sizeof(double));
	listen_us = calloc(n, sizeof(double));
	resolve_us = calloc(n, sizeof(double));
	ch = rdma_create_event_channel();
	CHECK(ch && bind_us && listen_us && resolve_us, "setup");
	for (int i = 0; i < n; i++) {
		struct rdma_cm_id *l, *c;
		struct sockaddr_in bound;
		double t0, t1, t2, t3;

		CHECK(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
		a.sin_port = 0;
		t0 = now_us();
		CHECK(rdma_bind_addr(l, (struct sockaddr *)&a) == 0, "rdma_bind_addr");
		t1 = now_us();
		CHECK(rdma_listen(l, 8) == 0, "rdma_listen");
		t2 = now_us();
		memcpy(&bound, rdma_get_local_addr(l), sizeof(bound));
		CHECK(rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0, "rdma_create_id");
		t3 = now_us();
		CHECK(rdma_resolve_addr(c, NULL, (struct sockaddr *)&bound, 2000) == 0, "rdma_resolve_addr");
		wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
		CHECK(rdma_resolve_route(c, 2000) == 0, "rdma_resolve_route");
		wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
		resolve_us[i] = now_us() - t3;
		bind_us[i] = t1 - t0;
		listen_us[i] = t2 - t1;
		CHECK(rdma_destroy_id(c) == 0, "rdma_destroy_id");
		CHECK(rdma_destroy_id(l) == 0, "rdma_destroy_id");
	}
	report("bind", bind_us, n);
	report("listen", listen_us, n);
	report("resolve", resolve_us, n);
	rdma_destroy_event_channel(ch);
	return 0;
}
