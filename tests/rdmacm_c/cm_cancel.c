/*
 * cm_cancel.c - pthread_cancel and the rdma_cm calls, as an unmodified application meets them.
 *
 *   cm_cancel event ADDR     a thread blocked in rdma_get_cm_event is cancelled (librdmacm's
 *                            read of its fd is a cancellation point); the channel then delivers
 *                            the ADDR_RESOLVED event of rdma_resolve_addr(ADDR) to the main thread
 *   cm_cancel request ADDR   a thread blocked in rdma_get_request on a synchronous listening
 *                            endpoint (rdma_create_ep, rdma_listen) is cancelled; the endpoint
 *                            is then destroyed from the main thread
 *   cm_cancel control ADDR   a thread with a cancellation already pending creates an event
 *                            channel and an ID, resolves ADDR synchronously (an ID without a
 *                            channel) and destroys them (closing files: close(2) is a glibc
 *                            cancellation point); the calls complete, and the thread is
 *                            cancelled at its own next cancellation point
 *
 * ADDR is the address of urxe's device (URXE_ADDR). Exit 0 and "all checks passed" only if
 * every check passed. Built by tests/abi_cancel.rs with -Wall -Wextra -Werror
 * -fsanitize=address,undefined.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#include "../c/cancel_util.h"
#include "../c/check.h"

static struct rdma_event_channel *channel;
static struct sockaddr_in dst;
static volatile int waiter_returned;
/* Static, not on the cancelled thread's stack (see tests/c/cancel.c: ASan's redzones). */
static struct rdma_cm_event *waiter_event;

static void *event_waiter(void *arg)
{
	(void)arg;
	rdma_get_cm_event(channel, &waiter_event);
	waiter_returned = 1; /* nothing was asked for: no event should have come */
	return NULL;
}

static void event(void)
{
	channel = rdma_create_event_channel();
	CHECK(channel);
	if (!channel)
		return;
	cancel_blocked(event_waiter, 20000);
	CHECK(!waiter_returned);
	/* The channel works on. */
	struct rdma_cm_id *id = NULL;
	CHECK(rdma_create_id(channel, &id, NULL, RDMA_PS_TCP) == 0);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	struct rdma_cm_event *ev = NULL;
	CHECK(rdma_get_cm_event(channel, &ev) == 0);
	CHECK(ev && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == id);
	if (ev)
		CHECK(rdma_ack_cm_event(ev) == 0);
	CHECK(rdma_destroy_id(id) == 0);
	rdma_destroy_event_channel(channel);
}

static struct rdma_cm_id *listen_id;
static struct rdma_cm_id *request_id;

static void *request_waiter(void *arg)
{
	(void)arg;
	rdma_get_request(listen_id, &request_id);
	waiter_returned = 1; /* nobody connected: no request should have come */
	return NULL;
}

static void request(const char *addr)
{
	struct rdma_addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	CHECK(rdma_getaddrinfo(addr, "7472", &hints, &res) == 0);
	if (!res)
		return;
	CHECK(rdma_create_ep(&listen_id, res, NULL, NULL) == 0);
	rdma_freeaddrinfo(res);
	if (!listen_id)
		return;
	CHECK(rdma_listen(listen_id, 4) == 0);
	cancel_blocked(request_waiter, 20000);
	CHECK(!waiter_returned);
	rdma_destroy_ep(listen_id);
}

/* An event channel and IDs, one resolved synchronously; all destroyed. */
static int control_calls(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	int ok = ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 && rdma_destroy_id(id) == 0;
	id = NULL;
	ok = ok && rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0 &&
	     rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0 && rdma_destroy_id(id) == 0;
	if (ch)
		rdma_destroy_event_channel(ch);
	return ok;
}

static void control(void)
{
	CHECK(cancel_pending(control_calls));
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: cm_cancel event|request|control ADDR\n");
		return 2;
	}
	alarm(120); /* a hang ends the process (SIGALRM) instead of the test run */
	ipv4_arg(&dst, argv[2], 7471);
	if (!strcmp(argv[1], "event"))
		event();
	else if (!strcmp(argv[1], "control"))
		control();
	else if (!strcmp(argv[1], "request"))
		request(argv[2]);
	else
		return fprintf(stderr, "unknown section %s\n", argv[1]), 2;
	if (failures)
		return 1;
	printf("all checks passed\n");
	return 0;
}
