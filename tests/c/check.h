/* check.h - the one-line check of the tests/c programs: a failed CHECK prints the condition,
 * file, line and errno on stderr and counts a failure; the program exits 1 if any did. */
#ifndef URXE_TESTS_C_CHECK_H
#define URXE_TESTS_C_CHECK_H
#include <errno.h>
#include <stdio.h>

static int failures;
#define CHECK(cond)                                                                    \
	do {                                                                           \
		if (!(cond)) {                                                         \
			fprintf(stderr, "FAIL %s:%d: %s (errno %d)\n", __FILE__,      \
				__LINE__, #cond, errno);                               \
			failures++;                                                    \
		}                                                                      \
	} while (0)

#endif
