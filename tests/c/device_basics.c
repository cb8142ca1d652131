/*
 * device_basics.c - checks urxe's libibverbs.so.1 through the public API and the inline
 * helpers of the installed <infiniband/verbs.h>, as an unmodified application would.
 *
 *   device_basics            full device / context / query / channel checks (exit 0 = pass)
 *   device_basics bad-env    expects ibv_get_device_list() == NULL with errno EINVAL
 *   device_basics port-busy  expects ibv_get_device_list() == NULL with errno EADDRINUSE
 *
 * Built by tests/abi_device.rs with -Wall -Wextra -Werror -fsanitize=address,undefined.
 */
#include <errno.h>
#include <endian.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

/* Exported by libibverbs (IBVERBS_1.0) but declared only in rdma-core's private headers;
 * librdmacm uses them with these prototypes. */
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

#include "check.h"

static int expect_list_error(int want)
{
	int n = -1;
	errno = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK(l == NULL);
	CHECK(errno == want);
	if (l)
		ibv_free_device_list(l);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "bad-env"))
		return expect_list_error(EINVAL);
	if (argc > 1 && !strcmp(argv[1], "port-busy"))
		return expect_list_error(EADDRINUSE);

	/* device list: one device, NULL-terminated, stable pointers, devices outlive lists */
	int n = -1;
	struct ibv_device **l1 = ibv_get_device_list(&n);
	CHECK(l1 != NULL);
	if (!l1)
		return 1;
	CHECK(n == 1);
	CHECK(l1[0] != NULL && l1[1] == NULL);
	struct ibv_device **l2 = ibv_get_device_list(NULL);
	CHECK(l2 && l2[0] == l1[0]);
	struct ibv_device *dev = l1[0];
	ibv_free_device_list(l1);
	ibv_free_device_list(l2);
	CHECK(!strcmp(ibv_get_device_name(dev), "urxe0"));
	CHECK(dev->node_type == IBV_NODE_CA);
	CHECK(dev->transport_type == IBV_TRANSPORT_IB);
	CHECK(ibv_get_device_index(dev) == 0);
	uint64_t guid = be64toh(ibv_get_device_guid(dev));
	CHECK((guid >> 32) == 0x02757278);

	/* contexts: verbs_context with sz, unique cmd_fd, async_fd, comp vectors */
	struct ibv_context *ctx = ibv_open_device(dev);
	struct ibv_context *ctx2 = ibv_open_device(dev);
	CHECK(ctx && ctx2);
	if (!ctx || !ctx2)
		return 1;
	CHECK(ctx->device == dev);
	struct verbs_context *vctx = verbs_get_ctx(ctx);
	CHECK(vctx != NULL);
	CHECK(vctx && vctx->sz == sizeof(struct verbs_context));
	CHECK(ctx->cmd_fd >= 0 && ctx2->cmd_fd >= 0 && ctx->cmd_fd != ctx2->cmd_fd);
	CHECK(ctx->async_fd >= 0 && (fcntl(ctx->async_fd, F_GETFD) & FD_CLOEXEC));
	CHECK(ctx->num_comp_vectors >= 1);
	CHECK(ctx->ops.poll_cq && ctx->ops.post_send && ctx->ops.post_recv && ctx->ops.req_notify_cq);

	/* device attributes */
	struct ibv_device_attr da;
	memset(&da, 0, sizeof(da));
	CHECK(ibv_query_device(ctx, &da) == 0);
	CHECK(da.vendor_id == 0xffffff && da.vendor_part_id == 0);
	CHECK(!strncmp(da.fw_ver, "urxe ", 5));
	CHECK(da.phys_port_cnt == 1 && da.atomic_cap == IBV_ATOMIC_HCA);
	CHECK(da.max_qp > 0 && da.max_cqe > 0 && da.max_sge > 0);
	CHECK(be64toh(da.node_guid) == guid);
	struct ibv_device_attr_ex dax;
	CHECK(ibv_query_device_ex(ctx, NULL, &dax) == 0);
	CHECK(dax.orig_attr.vendor_id == 0xffffff);
	CHECK(dax.completion_timestamp_mask != 0 && dax.phys_port_cnt_ex == 1);
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	CHECK(ibv_query_device_ex(ctx, &in, &dax) == EINVAL);

	/* port: the inline macro goes through verbs_context.query_port with len = 52 */
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0);
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET);
	CHECK(pa.max_mtu == IBV_MTU_4096 && pa.active_mtu == IBV_MTU_4096); /* loopback: 65536 */
	CHECK(pa.gid_tbl_len == 16 && pa.pkey_tbl_len == 1);
	CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL);
	/* the exported compat entry writes only the 48-byte old struct */
	unsigned char raw[64];
	memset(raw, 0xaa, sizeof(raw));
	CHECK((ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)raw) == 0);
	CHECK(raw[47] != 0xaa || raw[46] == IBV_LINK_LAYER_ETHERNET);
	CHECK(raw[48] == 0xaa && raw[51] == 0xaa);
	CHECK(((struct ibv_port_attr *)raw)->state == IBV_PORT_ACTIVE);

	/* GIDs: 4 identical RoCE v2 GIDs = ::ffff:<our IPv4>, then 12 empty slots */
	union ibv_gid g0, g;
	CHECK(ibv_query_gid(ctx, 1, 0, &g0) == 0);
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	CHECK(!memcmp(g0.raw, mapped, 12));
	for (int i = 1; i < 4; i++) {
		CHECK(ibv_query_gid(ctx, 1, i, &g) == 0);
		CHECK(!memcmp(g.raw, g0.raw, 16));
	}
	static const unsigned char zero[16];
	CHECK(ibv_query_gid(ctx, 1, 4, &g) == 0 && !memcmp(g.raw, zero, 16));
	CHECK(ibv_query_gid(ctx, 1, 15, &g) == 0 && !memcmp(g.raw, zero, 16));
	CHECK(ibv_query_gid(ctx, 1, 16, &g) == -1 && errno == EINVAL);
	struct ibv_gid_entry ge;
	CHECK(ibv_query_gid_ex(ctx, 1, 3, &ge, 0) == 0);
	CHECK(ge.gid_type == IBV_GID_TYPE_ROCE_V2 && ge.gid_index == 3 && ge.port_num == 1);
	CHECK(!memcmp(ge.gid.raw, g0.raw, 16));
	CHECK(ibv_query_gid_ex(ctx, 1, 4, &ge, 0) == ENODATA);
	CHECK(ibv_query_gid_ex(ctx, 1, 16, &ge, 0) == EINVAL);
	struct ibv_gid_entry tbl[8];
	CHECK(ibv_query_gid_table(ctx, tbl, 8, 0) == 4);
	CHECK(tbl[2].gid_index == 2 && tbl[2].gid_type == IBV_GID_TYPE_ROCE_V2);
	CHECK(ibv_query_gid_table(ctx, tbl, 2, 0) < 0);

	/* P_Keys */
	__be16 pkey = 0;
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && be16toh(pkey) == 0xffff);
	CHECK(ibv_query_pkey(ctx, 1, 1, &pkey) == -1);
	CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)) == 0);
	CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0x1234)) < 0);

	/* completion channel: a pollable fd; O_NONBLOCK -> EAGAIN when empty */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch != NULL);
	if (ch) {
		CHECK(ch->fd >= 0 && ch->context == ctx && ch->refcnt == 0);
		CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
		struct ibv_cq *cq = NULL;
		void *cqctx = NULL;
		errno = 0;
		CHECK(ibv_get_cq_event(ch, &cq, &cqctx) == -1 && errno == EAGAIN);
		CHECK(ibv_destroy_comp_channel(ch) == 0);
	}

	/* async events: O_NONBLOCK -> EAGAIN when empty */
	CHECK(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0);
	struct ibv_async_event ev;
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN);

	/* import a context from a dup of cmd_fd; a foreign fd is refused */
	struct ibv_context *imp = ibv_import_device(dup(ctx->cmd_fd));
	CHECK(imp != NULL);
	if (imp) {
		CHECK(imp->device == dev);
		CHECK(ibv_close_device(imp) == 0);
	}
	int other = dup(0);
	CHECK(ibv_import_device(other) == NULL);
	close(other);

	/* helpers */
	CHECK(!strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success"));
	CHECK(!strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active"));
	CHECK(ibv_rate_to_mbps(IBV_RATE_100_GBPS) == 103125);
	CHECK(ibv_rate_to_mult(IBV_RATE_10_GBPS) == 4 && mult_to_ibv_rate(4) == IBV_RATE_10_GBPS);
	CHECK(ibv_fork_init() == 0 && ibv_is_fork_initialized() == IBV_FORK_UNNEEDED);
	char buf[16];
	CHECK(ibv_read_sysfs_file(ibv_get_sysfs_path(), "class/misc/rdma_cm/abi_version", buf, sizeof(buf)) < 0);

	/* NULL arguments fail with the verb's convention instead of crashing */
	CHECK(ibv_dealloc_pd(NULL) == EINVAL);
	CHECK(ibv_destroy_cq(NULL) == EINVAL);
	CHECK(ibv_close_device(NULL) == -1 && errno == EINVAL);
	CHECK(ibv_alloc_pd(NULL) == NULL && errno == EINVAL);
	CHECK(ibv_create_comp_channel(NULL) == NULL);
	CHECK(ibv_query_gid(NULL, 1, 0, &g) == -1);

	CHECK(ibv_close_device(ctx2) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	else
		printf("device_basics: all checks passed\n");
	return failures ? 1 : 0;
}
