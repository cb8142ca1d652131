/* What the rdma_cm C test programs share (cm_bugs.c, cm_faults.c; each defines PROG, its name,
 * first): named checks, "ok NAME" or "FAIL NAME: details" on stdout, and a summary whose exit
 * status the Rust test reads; DIE for a setup step that cannot go on; the server address from
 * the command line; a QP's state. */
#ifndef URXE_RDMACM_C_CHECK_H
#define URXE_RDMACM_C_CHECK_H
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

#define DIE(...)                                                                                                       \
	do {                                                                                                           \
		fprintf(stderr, PROG ": " __VA_ARGS__);                                                                \
		fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno));                                         \
		exit(2);                                                                                               \
	} while (0)

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
static struct sockaddr_storage server_addr;

static void parse_addr(const char *host, const char *port)
{
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = AI_NUMERICHOST;
	if (getaddrinfo(host, port ? port : "0", &hints, &res) || !res)
		DIE("bad address %s", host);
	memcpy(&server_addr, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		DIE("ibv_query_qp");
	return a.qp_state;
}
#endif
