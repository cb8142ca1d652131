/*
 * event_path.c - the completion-channel wait as programs use it, through urxe's event path
 * (a thread asleep in ibv_get_cq_event receives the packets itself; see
 * src/runtime/owner.rs). One process, two RC QPs of one device connected to each other:
 * every packet of an exchange (the SEND, its ACK) goes through the socket the waiting thread
 * sleeps on, so a wait that did not receive for itself, or slept past an arrival, hangs.
 *
 *   race       300 rounds, one thread: arm cq_a (the send CQ), post a SEND, wait in
 *              ibv_get_cq_event for its completion (the ACK must arrive and be received by
 *              the waiter itself); the SEND leaves 0, a few, or 200 µs before the wait, so its
 *              ACK lands before the wait, while the thread goes to sleep, and after it
 *   two        200 rounds: two threads asleep in ibv_get_cq_event on one channel with two CQs
 *              (the send CQ and the receive CQ); one exchange completes both: each thread
 *              gets one event, the two events name both CQs, and the acks let destroy finish
 *   nonblock   O_NONBLOCK channel: ibv_get_cq_event says EAGAIN at once when nothing fired;
 *              the program's own poll() on the channel fd wakes when the completion comes
 *              (100 rounds), and the event is read without blocking
 *   cancelled  a thread asleep in ibv_get_cq_event (the socket's owner) is cancelled; the
 *              next waits, blocking and by poll() on a non-blocking channel, work on
 *   acks       50 events read and not acked; ibv_destroy_cq of that CQ (in a thread) stays
 *              blocked until ibv_ack_cq_events acks all 50 (one call, nevents 50), and
 *              comp_events_completed counts them; a new CQ on the channel then destroys at once
 *   idle       a thread asleep in ibv_get_cq_event (owning the socket) for 300 ms with nothing
 *              to do: the process uses under 60 ms of CPU meanwhile (nobody spins: not the
 *              waiter, not the progress thread); then one exchange wakes it (no lost wake-up)
 *
 * Every wait is bounded (alarm(60) for the whole program, 2 s per poll()). Exit 0 and "all
 * checks passed" only if every check passed. Built by tests/abi_event.rs with -Wall -Wextra
 * -Werror -fsanitize=address,undefined.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "cancel_util.h"
#include "check.h"
#include "rc_self.h"

#define POLL_MS 5000

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_comp_channel *channel;
static struct ibv_cq *cq_a, *cq_b;
static struct ibv_qp *qp_a, *qp_b;
static struct ibv_mr *mr;
static char buf[2][64];

static void setup(void)
{
	ctx = open_the_device();
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd);
	channel = ibv_create_comp_channel(ctx);
	REQUIRE(channel);
	cq_a = ibv_create_cq(ctx, 64, (void *)0xa, channel, 0);
	cq_b = ibv_create_cq(ctx, 64, (void *)0xb, channel, 0);
	REQUIRE(cq_a && cq_b);
	mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq_a, .recv_cq = cq_b, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	qp_a = ibv_create_qp(pd, &ia);
	qp_b = ibv_create_qp(pd, &ia);
	REQUIRE(qp_a && qp_b);
	rc_connect_self(ctx, qp_a, qp_b->qp_num, 0);
	rc_connect_self(ctx, qp_b, qp_a->qp_num, 0);
}

static void teardown(void)
{
	CHECK(!qp_a || ibv_destroy_qp(qp_a) == 0);
	CHECK(!qp_b || ibv_destroy_qp(qp_b) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	/* Waits until every event handed out on the CQ was acked. */
	CHECK(ibv_destroy_cq(cq_a) == 0);
	CHECK(ibv_destroy_cq(cq_b) == 0);
	CHECK(ibv_destroy_comp_channel(channel) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
}

/* qp_b's receive and qp_a's SEND to it (signaled: its completion needs the ACK). */
static int post_exchange(uint64_t id)
{
	struct ibv_sge r = { .addr = (uintptr_t)buf[1], .length = sizeof(buf[1]), .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = id, .sg_list = &r, .num_sge = 1 }, *rbad;
	if (ibv_post_recv(qp_b, &rwr, &rbad))
		return -1;
	struct ibv_sge s = { .addr = (uintptr_t)buf[0], .length = 16, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	return ibv_post_send(qp_a, &wr, &bad);
}

/* Polls `cq` until it gives one successful completion with `id` (bounded). */
static int reap(struct ibv_cq *cq, uint64_t id)
{
	uint64_t end = now_ms() + POLL_MS;
	struct ibv_wc wc;
	while (now_ms() < end) {
		int n = ibv_poll_cq(cq, 1, &wc);
		if (n < 0)
			return 0;
		if (n == 1)
			return wc.status == IBV_WC_SUCCESS && wc.wr_id == id;
	}
	return 0;
}

static void race(void)
{
	int rounds = 300, ok = 0;
	for (int i = 0; i < rounds && !failures; i++) {
		REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
		CHECK(post_exchange(i) == 0);
		switch (i % 3) {
		case 1:
			usleep(3); /* the ACK lands about as the thread goes to sleep */
			break;
		case 2:
			usleep(200); /* the ACK (likely) arrived before the wait */
			break;
		}
		struct ibv_cq *cq = NULL;
		void *c = NULL;
		CHECK(ibv_get_cq_event(channel, &cq, &c) == 0);
		CHECK(cq == cq_a && c == (void *)0xa);
		ibv_ack_cq_events(cq_a, 1);
		CHECK(reap(cq_a, i));
		CHECK(reap(cq_b, i));
		ok += !failures;
	}
	printf("race: %d rounds\n", ok);
}

static struct ibv_cq *two_cq[2];
static int two_ret[2];

static void *two_waiter(void *arg)
{
	int k = (int)(intptr_t)arg;
	void *c = NULL;
	two_ret[k] = ibv_get_cq_event(channel, &two_cq[k], &c);
	return NULL;
}

static void two(void)
{
	int rounds = 200;
	for (int i = 0; i < rounds && !failures; i++) {
		REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
		REQUIRE(ibv_req_notify_cq(cq_b, 0) == 0);
		pthread_t t[2];
		for (int k = 0; k < 2; k++) {
			two_cq[k] = NULL;
			two_ret[k] = -1;
			REQUIRE(pthread_create(&t[k], NULL, two_waiter, (void *)(intptr_t)k) == 0);
		}
		if (i % 2)
			usleep(500); /* both asleep before the exchange; else racing with it */
		CHECK(post_exchange(i) == 0);
		for (int k = 0; k < 2; k++)
			CHECK(pthread_join(t[k], NULL) == 0);
		CHECK(two_ret[0] == 0 && two_ret[1] == 0);
		CHECK((two_cq[0] == cq_a && two_cq[1] == cq_b) || (two_cq[0] == cq_b && two_cq[1] == cq_a));
		ibv_ack_cq_events(cq_a, 1);
		ibv_ack_cq_events(cq_b, 1);
		CHECK(reap(cq_a, i));
		CHECK(reap(cq_b, i));
	}
	printf("two: %d rounds\n", rounds);
}

static int fd_readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1;
}

static void set_nonblock(int on)
{
	int fl = fcntl(channel->fd, F_GETFL);
	REQUIRE(fl >= 0);
	REQUIRE(fcntl(channel->fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) == 0);
}

/* One round on a non-blocking channel: EAGAIN while nothing fired, poll() wakes for the
 * completion, the event reads at once. */
static int nonblock_round(uint64_t id)
{
	struct ibv_cq *cq = NULL;
	void *c = NULL;
	int ok = 1;
	REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
	uint64_t t0 = now_ms();
	errno = 0;
	ok &= ibv_get_cq_event(channel, &cq, &c) == -1 && errno == EAGAIN;
	ok &= now_ms() - t0 < 100;
	ok &= post_exchange(id) == 0;
	ok &= fd_readable(channel->fd, 2000);
	ok &= ibv_get_cq_event(channel, &cq, &c) == 0 && cq == cq_a;
	if (cq == cq_a)
		ibv_ack_cq_events(cq_a, 1);
	ok &= reap(cq_a, id) && reap(cq_b, id);
	return ok;
}

static void nonblock(void)
{
	set_nonblock(1);
	int rounds = 100;
	for (int i = 0; i < rounds && !failures; i++)
		CHECK(nonblock_round(i));
	set_nonblock(0);
	printf("nonblock: %d rounds\n", rounds);
}

static struct ibv_cq *waiter_cq; /* static: see tests/c/cancel.c */
static void *waiter_ctx;
static volatile int waiter_returned;

static void *event_waiter(void *arg)
{
	(void)arg;
	ibv_get_cq_event(channel, &waiter_cq, &waiter_ctx);
	waiter_returned = 1; /* nothing was sent: no event should have come */
	return NULL;
}

static volatile int destroy_done;
static int destroy_ret;

static void *destroyer(void *arg)
{
	destroy_ret = ibv_destroy_cq(arg);
	destroy_done = 1;
	return NULL;
}

static void cancelled(void)
{
	REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
	cancel_blocked(event_waiter, 20000);
	CHECK(!waiter_returned);
	/* A blocking wait takes over the socket the cancelled thread held. */
	CHECK(post_exchange(1) == 0);
	struct ibv_cq *cq = NULL;
	void *c = NULL;
	CHECK(ibv_get_cq_event(channel, &cq, &c) == 0 && cq == cq_a);
	ibv_ack_cq_events(cq_a, 1);
	CHECK(reap(cq_a, 1) && reap(cq_b, 1));
	/* And with the claim cancelled again, a program that poll()s its channel is served. */
	REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
	waiter_returned = 0;
	cancel_blocked(event_waiter, 20000);
	CHECK(!waiter_returned);
	set_nonblock(1);
	/* This round's own arm consumes nothing: cq_a is still armed from above. */
	struct ibv_cq *c2 = NULL;
	errno = 0;
	CHECK(ibv_get_cq_event(channel, &c2, &c) == -1 && errno == EAGAIN);
	CHECK(post_exchange(2) == 0);
	CHECK(fd_readable(channel->fd, 2000));
	CHECK(ibv_get_cq_event(channel, &c2, &c) == 0 && c2 == cq_a);
	if (c2 == cq_a)
		ibv_ack_cq_events(cq_a, 1);
	CHECK(reap(cq_a, 2) && reap(cq_b, 2));
	set_nonblock(0);
	printf("cancelled: ok\n");
}

static void acks(void)
{
	int n = 50;
	for (int i = 0; i < n && !failures; i++) {
		REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
		CHECK(post_exchange(1000 + i) == 0);
		struct ibv_cq *cq = NULL;
		void *c = NULL;
		CHECK(ibv_get_cq_event(channel, &cq, &c) == 0 && cq == cq_a);
		CHECK(reap(cq_a, 1000 + i) && reap(cq_b, 1000 + i));
	}
	CHECK(cq_a->comp_events_completed == 0);
	/* cq_a is both QPs' send CQ: they go first, then cq_a in a thread. */
	REQUIRE(ibv_destroy_qp(qp_a) == 0 && ibv_destroy_qp(qp_b) == 0);
	qp_a = qp_b = NULL;
	pthread_t t;
	destroy_ret = -1;
	destroy_done = 0;
	REQUIRE(pthread_create(&t, NULL, destroyer, cq_a) == 0);
	usleep(100000);
	CHECK(!destroy_done); /* 50 events unacked */
	ibv_ack_cq_events(cq_a, n - 1);
	usleep(50000);
	CHECK(!destroy_done); /* one still unacked */
	ibv_ack_cq_events(cq_a, 1);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(destroy_done && destroy_ret == 0);
	cq_a = ibv_create_cq(ctx, 16, (void *)0xa, channel, 0);
	REQUIRE(cq_a);
	printf("acks: %d events\n", n);
}

static double cpu_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void idle(void)
{
	REQUIRE(ibv_req_notify_cq(cq_a, 0) == 0);
	waiter_returned = 0;
	waiter_cq = NULL;
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, event_waiter, NULL) == 0);
	usleep(20000); /* asleep by now (if not, it sleeps within the window below) */
	double c0 = cpu_ms();
	usleep(300000);
	double used = cpu_ms() - c0;
	printf("idle: %.1f ms of CPU over 300 ms asleep\n", used);
	CHECK(used < 60);
	CHECK(!waiter_returned);
	CHECK(post_exchange(7) == 0);
	CHECK(pthread_join(t, NULL) == 0);
	CHECK(waiter_returned && waiter_cq == cq_a);
	if (waiter_cq == cq_a)
		ibv_ack_cq_events(cq_a, 1);
	CHECK(reap(cq_a, 7) && reap(cq_b, 7));
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: event_path race|two|nonblock|cancelled|acks|idle\n");
		return 2;
	}
	alarm(60); /* a lost wake-up ends the process (SIGALRM) instead of the test run */
	setup();
	if (!strcmp(argv[1], "race"))
		race();
	else if (!strcmp(argv[1], "two"))
		two();
	else if (!strcmp(argv[1], "nonblock"))
		nonblock();
	else if (!strcmp(argv[1], "cancelled"))
		cancelled();
	else if (!strcmp(argv[1], "acks"))
		acks();
	else if (!strcmp(argv[1], "idle"))
		idle();
	else
		REQUIRE(0 && "unknown section");
	teardown();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
