/* cancel_util.h - the two ways the pthread_cancel programs (tests/c/cancel.c,
 * tests/rdmacm_c/cm_cancel.c, tests/rdmacm_c/rs_cancel.c) cancel a thread. Each checks, with
 * check.h's CHECK, that the thread ended cancelled (pthread_join gives PTHREAD_CANCELED). */
#ifndef URXE_TESTS_C_CANCEL_UTIL_H
#define URXE_TESTS_C_CANCEL_UTIL_H
#include <arpa/inet.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

/* Runs fn in a thread and cancels it after settle_us, time for it to block in a call that
 * should be a cancellation point while it waits. */
static inline void cancel_blocked(void *(*fn)(void *), useconds_t settle_us)
{
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, fn, NULL) == 0);
	usleep(settle_us);
	CHECK(pthread_cancel(t) == 0);
	void *res = NULL;
	CHECK(pthread_join(t, &res) == 0);
	CHECK(res == PTHREAD_CANCELED);
}

static volatile int pending_go, pending_ok;
static int (*pending_calls)(void);

static void *pending_worker(void *arg)
{
	(void)arg;
	while (!pending_go) /* no cancellation point: the cancel is pending when the calls run */
		;
	pending_ok = pending_calls();
	pthread_testcancel();
	return NULL;
}

/* Runs calls() in a thread cancelled before it does anything: it spins (no cancellation
 * point) until the cancellation is pending, so calls() runs with it pending; the thread then
 * ends at its own pthread_testcancel. Returns what calls() returned (1: all succeeded). */
static inline int cancel_pending(int (*calls)(void))
{
	pthread_t t;
	pending_calls = calls;
	pending_go = pending_ok = 0;
	REQUIRE(pthread_create(&t, NULL, pending_worker, NULL) == 0);
	CHECK(pthread_cancel(t) == 0);
	pending_go = 1;
	void *res = NULL;
	CHECK(pthread_join(t, &res) == 0);
	CHECK(res == PTHREAD_CANCELED);
	return pending_ok;
}

/* The ADDR argument of the rdmacm programs as an IPv4 sockaddr with `port`; exits 2 if it is
 * not one. */
static inline void ipv4_arg(struct sockaddr_in *a, const char *ip, uint16_t port)
{
	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_port = htons(port);
	if (inet_pton(AF_INET, ip, &a->sin_addr) != 1) {
		fprintf(stderr, "bad address %s\n", ip);
		exit(2);
	}
}

#endif
