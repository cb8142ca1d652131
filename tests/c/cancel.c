/*
 * cancel.c - pthread_cancel and the verbs, as an unmodified application meets them.
 *
 * A verb of a hardware provider (ibv_poll_cq, ibv_post_send, ibv_post_recv, ibv_req_notify_cq)
 * makes no system call, so it is never a cancellation point: a thread with deferred
 * cancellation is cancelled at its own cancellation points, between verbs, and the device
 * goes on working for the other threads. A blocking ibv_get_cq_event is one (rdma-core reads
 * the channel's fd): a thread waiting there can be cancelled.
 *
 *   cancel datapath   100 rounds: a thread runs SEND/RECV exchanges over an RC QP pair
 *                     (post, poll, re-arm), with pthread_testcancel between verbs; the main
 *                     thread cancels it at a random moment, checks it ended cancelled, and
 *                     runs an exchange of its own through the same QPs and CQs
 *   cancel event      a thread blocked in ibv_get_cq_event is cancelled; the channel then
 *                     delivers the next event to the main thread
 *   cancel control    a thread with a cancellation already pending creates and destroys a
 *                     completion channel and a CQ (the destroys close files: close(2) is a
 *                     cancellation point of glibc); the verbs complete, and the thread is
 *                     cancelled at its own next cancellation point
 *   cancel signal     a signal to a thread blocked in ibv_get_cq_event, as on rdma-core's
 *                     read(2) of the channel: with a handler installed without SA_RESTART
 *                     the verb fails with EINTR; with SA_RESTART it goes on waiting and
 *                     returns the next event
 *
 * Exit 0 and "all checks passed" only if every check passed. Built by tests/abi_cancel.rs with
 * -Wall -Wextra -Werror -fsanitize=address,undefined.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "cancel_util.h"
#include "check.h"
#include "rc_self.h"

#define POLL_MS 5000
#define ROUNDS 100
#define MAIN_WR_ID 0xC0FFEEu

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_comp_channel *channel;
static struct ibv_cq *cq_a, *cq_b;
static struct ibv_qp *qp_a, *qp_b;
static struct ibv_mr *mr;
static char buf[2][64];

/* Outstanding work, counted right after each verb returns: no cancellation point lies between
 * a verb and its count, so a cancelled thread leaves them exact. */
static volatile long sends_posted, sends_done, recvs_posted, recvs_done;
static volatile long exchanges;
static volatile int worker_failed;

static void setup(void)
{
	ctx = open_the_device();
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd);
	channel = ibv_create_comp_channel(ctx);
	REQUIRE(channel);
	cq_a = ibv_create_cq(ctx, 64, NULL, channel, 0);
	cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	REQUIRE(cq_a && cq_b);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq_a, .recv_cq = cq_a, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	qp_a = ibv_create_qp(pd, &ia);
	ia.send_cq = cq_b;
	ia.recv_cq = cq_b;
	qp_b = ibv_create_qp(pd, &ia);
	REQUIRE(qp_a && qp_b);
	rc_connect_self(ctx, qp_a, qp_b->qp_num, 0);
	rc_connect_self(ctx, qp_b, qp_a->qp_num, 0);
}

static void teardown(void)
{
	CHECK(ibv_destroy_qp(qp_a) == 0);
	CHECK(ibv_destroy_qp(qp_b) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_destroy_cq(cq_a) == 0);
	CHECK(ibv_destroy_cq(cq_b) == 0);
	CHECK(ibv_destroy_comp_channel(channel) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
}

static int post_recv_b(void)
{
	struct ibv_sge s = { .addr = (uintptr_t)buf[1], .length = sizeof(buf[1]), .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 2, .sg_list = &s, .num_sge = 1 }, *bad;
	return ibv_post_recv(qp_b, &wr, &bad);
}

static int post_send_a(uint64_t wr_id)
{
	struct ibv_sge s = { .addr = (uintptr_t)buf[0], .length = 16, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &s, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	return ibv_post_send(qp_a, &wr, &bad);
}

/* Polls both CQs once and counts what completed; -1 on an error completion or a failed poll.
 * Returns whether the completion `want` (a wr_id on cq_a) was among them. */
static int poll_both(uint64_t want)
{
	struct ibv_wc wc[4];
	int seen = 0;
	int n = ibv_poll_cq(cq_a, 4, wc);
	if (n < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			return -1;
		sends_done++;
		if (wc[i].wr_id == want)
			seen = 1;
	}
	n = ibv_poll_cq(cq_b, 4, wc);
	if (n < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		if (wc[i].status != IBV_WC_SUCCESS)
			return -1;
		recvs_done++;
	}
	return seen;
}

static void *worker(void *arg)
{
	(void)arg;
	for (uint64_t id = 1;; id++) {
		pthread_testcancel();
		if (recvs_posted == recvs_done) {
			if (post_recv_b())
				break;
			recvs_posted++;
		}
		pthread_testcancel();
		if (post_send_a(id))
			break;
		sends_posted++;
		uint64_t end = now_ms() + POLL_MS;
		int r = 0;
		while (r == 0 && now_ms() < end) {
			pthread_testcancel();
			r = poll_both(id);
		}
		if (r != 1)
			break;
		pthread_testcancel();
		if (ibv_req_notify_cq(cq_a, 0))
			break;
		exchanges++;
	}
	worker_failed = 1;
	return NULL;
}

/* One exchange from the calling thread, after the worker's leftovers are collected. */
static int main_exchange(void)
{
	uint64_t end = now_ms() + POLL_MS;
	while ((sends_done != sends_posted || recvs_done > recvs_posted) && now_ms() < end)
		if (poll_both(0) < 0)
			return 0;
	if (sends_done != sends_posted)
		return 0;
	if (recvs_posted == recvs_done) {
		if (post_recv_b())
			return 0;
		recvs_posted++;
	}
	if (post_send_a(MAIN_WR_ID))
		return 0;
	sends_posted++;
	int r = 0;
	while (r == 0 && now_ms() < end)
		r = poll_both(MAIN_WR_ID);
	while (recvs_done != recvs_posted && now_ms() < end)
		if (poll_both(0) < 0)
			return 0;
	return r == 1 && recvs_done == recvs_posted && sends_done == sends_posted;
}

static void datapath(void)
{
	srand(12345);
	for (int round = 0; round < ROUNDS; round++) {
		long start = exchanges;
		long wait = 1 + rand() % 8;
		pthread_t t;
		REQUIRE(pthread_create(&t, NULL, worker, NULL) == 0);
		uint64_t end = now_ms() + POLL_MS;
		while (exchanges - start < wait && !worker_failed && now_ms() < end)
			usleep(50);
		usleep(rand() % 200);
		CHECK(pthread_cancel(t) == 0);
		void *res = NULL;
		CHECK(pthread_join(t, &res) == 0);
		CHECK(res == PTHREAD_CANCELED);
		CHECK(!worker_failed);
		CHECK(exchanges - start >= wait);
		/* The device is whole: this thread's own exchange goes through. */
		CHECK(main_exchange());
		if (failures) {
			fprintf(stderr, "round %d: %ld exchanges\n", round, exchanges - start);
			return;
		}
	}
	printf("%d rounds, %ld exchanges\n", ROUNDS, exchanges);
}

/* Out-values of the waiter: static, not on its stack. ASan poisons the redzones around an
 * address-taken local and unpoisons them when the function returns; a thread unwound by its
 * cancellation never returns from this frame, and ASan's own cleanup at thread exit then
 * trips over the stale poison (a stack-buffer-underflow report in sigaltstack). */
static struct ibv_cq *waiter_cq;
static void *waiter_ctx;

static void *event_waiter(void *arg)
{
	(void)arg;
	ibv_get_cq_event(channel, &waiter_cq, &waiter_ctx);
	worker_failed = 1; /* returned: nothing was sent, so no event should have come */
	return NULL;
}

static void event(void)
{
	REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
	cancel_blocked(event_waiter, 20000);
	CHECK(!worker_failed);
	/* The channel works on: an exchange raises the armed CQ's event for this thread. */
	CHECK(main_exchange());
	struct ibv_cq *cq = NULL;
	void *c = NULL;
	CHECK(ibv_get_cq_event(channel, &cq, &c) == 0);
	CHECK(cq == cq_a);
	ibv_ack_cq_events(cq_a, 1);
}

/* Creates and destroys a completion channel and a CQ (the destroys close files). */
static int control_calls(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ch ? ibv_create_cq(ctx, 4, NULL, ch, 0) : NULL;
	return cq && ibv_destroy_cq(cq) == 0 && ibv_destroy_comp_channel(ch) == 0;
}

static void on_usr1(int sig)
{
	(void)sig;
}

static volatile int sig_ret, sig_errno, sig_returned;
static struct ibv_cq *sig_cq; /* static: see waiter_cq */
static void *sig_ctx;

static void *signal_waiter(void *arg)
{
	(void)arg;
	sig_ret = ibv_get_cq_event(channel, &sig_cq, &sig_ctx);
	sig_errno = errno;
	sig_returned = 1;
	return NULL;
}

static void handle_usr1(int flags)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0);
}

static void signal_section(void)
{
	REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
	pthread_t t;
	handle_usr1(0);
	sig_returned = 0;
	REQUIRE(pthread_create(&t, NULL, signal_waiter, NULL) == 0);
	/* On a loaded machine the thread may not be asleep yet when a signal comes (its handler
	 * then runs before the wait, which goes on): signal again until it returns, at most 5 s. */
	for (int i = 0; i < 250 && !sig_returned; i++) {
		usleep(20000);
		CHECK(pthread_kill(t, SIGUSR1) == 0);
	}
	CHECK(sig_returned);
	if (!sig_returned) {
		CHECK(main_exchange()); /* let the waiter end, so join returns */
	}
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(sig_returned && sig_ret == -1 && sig_errno == EINTR);

	handle_usr1(SA_RESTART);
	sig_returned = 0;
	REQUIRE(pthread_create(&t, NULL, signal_waiter, NULL) == 0);
	usleep(20000);
	CHECK(pthread_kill(t, SIGUSR1) == 0);
	usleep(50000);
	CHECK(!sig_returned); /* the read was restarted: still waiting */
	/* The CQ armed above raises its event at this exchange's completions. */
	CHECK(main_exchange());
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(sig_returned && sig_ret == 0 && sig_cq == cq_a);
	if (sig_returned && sig_ret == 0)
		ibv_ack_cq_events(cq_a, 1);
}

static void control(void)
{
	CHECK(cancel_pending(control_calls));
	CHECK(main_exchange());
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: cancel datapath|event|control|signal\n");
		return 2;
	}
	alarm(120); /* a hang ends the process (SIGALRM) instead of the test run */
	setup();
	if (!strcmp(argv[1], "datapath"))
		datapath();
	else if (!strcmp(argv[1], "event"))
		event();
	else if (!strcmp(argv[1], "control"))
		control();
	else if (!strcmp(argv[1], "signal"))
		signal_section();
	else
		REQUIRE(!"unknown section");
	teardown();
	if (failures)
		return 1;
	printf("all checks passed\n");
	return 0;
}
