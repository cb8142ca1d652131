/* cancel_util.h - the two ways the pthread_cancel programs (tests/c/cancel.c,
 * tests/rdmacm_c/cm_cancel.c, tests/rdmacm_c/rs_cancel.c) cancel a thread. Each checks, with
 * check.h's CHECK, that the thread ended cancelled (pthread_join gives PTHREAD_CANCELED). */
#ifndef URXE_TESTS_C_CANCEL_UTIL_H
#define URXE_TESTS_C_CANCEL_UTIL_H
#include <pthread.h>
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

/* Runs worker in a thread cancelled before it does anything: the worker spins on *go (no
 * cancellation point there), so its calls run with the cancellation pending, and it ends at its
 * own pthread_testcancel. */
static inline void cancel_pending(void *(*worker)(void *), volatile int *go)
{
	pthread_t t;
	REQUIRE(pthread_create(&t, NULL, worker, NULL) == 0);
	CHECK(pthread_cancel(t) == 0);
	*go = 1;
	void *res = NULL;
	CHECK(pthread_join(t, &res) == 0);
	CHECK(res == PTHREAD_CANCELED);
}

#endif
