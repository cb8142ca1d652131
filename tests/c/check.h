/* check.h - the one-line checks of the tests/c programs: a failed CHECK prints the condition,
 * file, line and errno on stderr and counts a failure (the program exits 1 if any did); a
 * failed REQUIRE (setup the rest cannot do without) exits 2 at once. now_ms: CLOCK_MONOTONIC
 * in milliseconds, for bounded waits. */
#ifndef URXE_TESTS_C_CHECK_H
#define URXE_TESTS_C_CHECK_H
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int failures;
#define CHECK(cond)                                                                    \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "FAIL %s:%d: %s (errno %d)\n", __FILE__,      \
				__LINE__, #cond, errno);                               \
			failures++;                                                    \
		}                                                                      \
	} while (0)

#define REQUIRE(cond)                                                                  \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "FATAL %s:%d: %s (errno %d)\n", __FILE__,     \
				__LINE__, #cond, errno);                               \
			exit(2);                                                       \
		}                                                                      \
	} while (0)

static inline uint64_t now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

#endif
