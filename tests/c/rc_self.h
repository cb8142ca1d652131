/* rc_self.h - for the tests/c programs: their one device, opened; an RC QP taken RESET -> INIT
 * -> RTR -> RTS, connected to QP `remote` of the same device over the device's own GID (index
 * RC_SELF_GID_INDEX, port 1), MTU 1024, PSNs 0, retries 7. Needs check.h (REQUIRE) first. */
#ifndef URXE_TESTS_C_RC_SELF_H
#define URXE_TESTS_C_RC_SELF_H
#include <string.h>
#include <infiniband/verbs.h>

#define RC_SELF_GID_INDEX 1

/* The one device the tests see (urxe0), opened. */
static inline struct ibv_context *open_the_device(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	REQUIRE(l && n == 1);
	struct ibv_context *ctx = ibv_open_device(l[0]);
	REQUIRE(ctx);
	ibv_free_device_list(l);
	return ctx;
}

static inline void rc_connect_self(struct ibv_context *ctx, struct ibv_qp *qp, uint32_t remote, int access)
{
	union ibv_gid gid;
	REQUIRE(ibv_query_gid(ctx, 1, RC_SELF_GID_INDEX, &gid) == 0);
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = access,
	};
	REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS) == 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = remote;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = RC_SELF_GID_INDEX;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				      IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 4;
	REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				      IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

#endif
