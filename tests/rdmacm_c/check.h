/* Named checks for the rdma_cm C test programs: "ok NAME" or "FAIL NAME: details" on stdout,
 * and a summary whose exit status the Rust test reads. Included by cm_bugs.c and cm_faults.c. */
#ifndef URXE_RDMACM_C_CHECK_H
#define URXE_RDMACM_C_CHECK_H
#include <stdio.h>

static int failures;
#define CHECK(cond, name, ...)                                                                                         \
	do {                                                                                                           \
		if (cond) {                                                                                            \
			printf("ok %s\n", name);                                                                       \
		} else {                                                                                               \
			printf("FAIL %s: ", name);                                                                     \
			printf(__VA_ARGS__);                                                                           \
			printf("\n");                                                                                  \
			failures++;                                                                                    \
		}                                                                                                      \
	} while (0)

static int check_summary(void)
{
	if (failures) {
		printf("%d checks failed\n", failures);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
#endif
