/* qp_rss: how much resident memory N RC QPs cost in one process (bench/run.sh's scale figure).
 * Opens the first device, creates one PD and one CQ, then N RC QPs (send/recv depth 128/512,
 * 1 SGE, perftest's defaults) moved to INIT, and prints VmRSS before and after as key=value.
 *   gcc -O2 -o qp_rss qp_rss.c -libverbs && ./qp_rss 1000
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000, i, num;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1) {
		printf("error=no_device\n");
		return 1;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 4096, NULL, NULL, 0) : NULL;
	if (!cq) {
		printf("error=setup_failed\n");
		return 1;
	}
	long before = rss_kib();
	struct ibv_qp **qps = calloc(n, sizeof *qps);
	for (i = 0; i < n; i++) {
		struct ibv_qp_init_attr a = {
			.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
			.cap = { .max_send_wr = 128, .max_recv_wr = 512, .max_send_sge = 1, .max_recv_sge = 1 },
		};
		qps[i] = ibv_create_qp(pd, &a);
		if (!qps[i]) {
			printf("error=create_qp_failed_at_%d\n", i);
			return 1;
		}
		struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1,
					 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
		if (ibv_modify_qp(qps[i], &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
			printf("error=modify_qp_failed_at_%d\n", i);
			return 1;
		}
	}
	long after = rss_kib();
	printf("qps=%d rss_before_kib=%ld rss_after_kib=%ld rss_mib=%.1f per_qp_kib=%.1f\n", n, before, after,
	       after / 1024.0, (after - before) / (double)n);
	for (i = 0; i < n; i++)
		ibv_destroy_qp(qps[i]);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
