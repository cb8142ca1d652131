/*
 * xrc.c - XRC through the public API of the installed <infiniband/verbs.h>, as an unmodified
 * application uses it. One process, one context: an XRC initiator QP connected to an XRC
 * target QP over the device's own GID.
 *
 *   - IBV_DEVICE_XRC is advertised;
 *   - ibv_open_xrcd: fd -1 makes a domain of its own; a file's domain is created by O_CREAT
 *     (EAGAIN without), shared by a later open of the same file (EINVAL with O_EXCL); FD and
 *     OFLAGS are required in the mask (EINVAL); close of a busy domain is EBUSY;
 *   - XRC SRQs (ibv_create_srq_ex: PD, XRCD and CQ required), ibv_get_srq_num (EINVAL on a
 *     basic SRQ);
 *   - XRC_RECV QPs created on a domain, XRC_SEND QPs with no receive side, ibv_open_qp
 *     through a shared domain (and EINVAL through another);
 *   - traffic: SEND with the legacy wr.qp_type.xrc.remote_srqn and with ibv_wr_set_xrc_srqn,
 *     each landing in the SRQ it names and completing on that SRQ's CQ; RDMA WRITE and READ
 *     checked against the SRQ's PD; a send naming another domain's SRQ fails with
 *     IBV_WC_REM_INV_REQ_ERR.
 *
 * Exit 0 and "all checks passed" only if every check passed. Built by tests/abi_xrc.rs with
 * -Wall -Wextra -Werror -fsanitize=address,undefined.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "rc_self.h"

#define GID_INDEX 1
#define POLL_MS 5000
#define LEN 3000

static struct ibv_context *ctx;

static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	uint64_t end = now_ms() + POLL_MS;
	while (now_ms() < end) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			return 0;
		if (n == 1)
			return 1;
	}
	return 0;
}

static struct ibv_xrcd *open_xrcd(int fd, int oflags)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = fd,
		.oflags = oflags,
	};
	return ibv_open_xrcd(ctx, &a);
}

/* RESET -> INIT -> RTR -> RTS towards `remote` on our own GID, with the masks the kernel's
 * table gives each XRC half. */
static void connect_qp(struct ibv_qp *qp, uint32_t remote, int target)
{
	union ibv_gid gid;
	REQUIRE(ibv_query_gid(ctx, 1, GID_INDEX, &gid) == 0);
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
		.qp_access_flags = target ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ : 0,
	};
	REQUIRE(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				      IBV_QP_ACCESS_FLAGS) == 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = remote;
	a.rq_psn = 0x123;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.sgid_index = GID_INDEX;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	int m = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (target)
		m |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	REQUIRE(ibv_modify_qp(qp, &a, m) == 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0x123;
	a.max_rd_atomic = 4;
	m = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
	if (!target)
		m |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	REQUIRE(ibv_modify_qp(qp, &a, m) == 0);
}

static struct ibv_srq *xrc_srq(struct ibv_pd *pd, struct ibv_xrcd *xrcd, struct ibv_cq *cq)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = { .max_wr = 8, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ,
		.srq_type = IBV_SRQT_XRC,
		.pd = pd,
		.xrcd = xrcd,
		.cq = cq,
	};
	return ibv_create_srq_ex(ctx, &a);
}

static int post_recv(struct ibv_srq *srq, void *buf, uint32_t lkey, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = LEN, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	return ibv_post_srq_recv(srq, &wr, &bad);
}

/* The legacy path: wr.qp_type.xrc.remote_srqn. */
static int post_legacy(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t srqn, void *buf, uint32_t len,
		       uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = 9, .sg_list = &sge, .num_sge = 1, .opcode = op, .send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	wr.qp_type.xrc.remote_srqn = srqn;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

int main(void)
{
	ctx = open_the_device();

	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0);
	CHECK(dx.orig_attr.device_cap_flags & IBV_DEVICE_XRC);

	/* Domains: fd -1, a file's domain, sharing and the errno of each refusal. */
	struct ibv_xrcd *lone = open_xrcd(-1, 0);
	CHECK(lone != NULL);
	if (lone)
		CHECK(ibv_close_xrcd(lone) == 0);
	struct ibv_xrcd_init_attr no_fd = { .comp_mask = IBV_XRCD_INIT_ATTR_OFLAGS, .oflags = O_CREAT };
	errno = 0;
	CHECK(ibv_open_xrcd(ctx, &no_fd) == NULL && errno == EINVAL);
	struct ibv_xrcd *other = open_xrcd(-1, O_CREAT);
	CHECK(other != NULL);
	char path[] = "/tmp/urxe-xrc-XXXXXX";
	int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	unlink(path);
	errno = 0;
	CHECK(open_xrcd(fd, 0) == NULL && errno == EAGAIN);
	struct ibv_xrcd *xa = open_xrcd(fd, O_CREAT);
	REQUIRE(xa);
	struct ibv_xrcd *xb = open_xrcd(fd, O_CREAT);
	REQUIRE(xb);
	CHECK(xa != xb);
	errno = 0;
	CHECK(open_xrcd(fd, O_CREAT | O_EXCL) == NULL && errno == EINVAL);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	REQUIRE(pd);
	struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq1 = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *rcq2 = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	REQUIRE(scq && rcq1 && rcq2);

	/* SRQs: two in the shared domain (created through either open), one in another. */
	struct ibv_srq *s1 = xrc_srq(pd, xa, rcq1);
	struct ibv_srq *s2 = xrc_srq(pd, xb, rcq2);
	struct ibv_srq *sx = xrc_srq(pd, other, rcq2);
	REQUIRE(s1 && s2 && sx);
	uint32_t n1 = 0, n2 = 0, nx = 0;
	CHECK(ibv_get_srq_num(s1, &n1) == 0 && ibv_get_srq_num(s2, &n2) == 0 &&
	      ibv_get_srq_num(sx, &nx) == 0);
	CHECK(n1 != n2 && n1 != nx && n2 != nx && n1 <= 0xffffff);
	struct ibv_srq_init_attr bi = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *basic = ibv_create_srq(pd, &bi);
	REQUIRE(basic);
	uint32_t bn;
	CHECK(ibv_get_srq_num(basic, &bn) == EINVAL);
	CHECK(ibv_destroy_srq(basic) == 0);
	struct ibv_srq_init_attr_ex no_cq = {
		.attr = { .max_wr = 4, .max_sge = 1 },
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD,
		.srq_type = IBV_SRQT_XRC, .pd = pd, .xrcd = xa,
	};
	errno = 0;
	CHECK(ibv_create_srq_ex(ctx, &no_cq) == NULL && errno == EINVAL);

	/* QPs: a target on the domain, an initiator with no receive side. */
	struct ibv_qp_init_attr_ex tia = {
		.qp_type = IBV_QPT_XRC_RECV, .comp_mask = IBV_QP_INIT_ATTR_XRCD, .xrcd = xa,
	};
	struct ibv_qp *tgt = ibv_create_qp_ex(ctx, &tia);
	REQUIRE(tgt);
	struct ibv_qp_init_attr_ex iia = {
		.qp_type = IBV_QPT_XRC_SEND, .send_cq = scq,
		.cap = { .max_send_wr = 16, .max_send_sge = 1 },
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM,
	};
	struct ibv_qp *ini = ibv_create_qp_ex(ctx, &iia);
	REQUIRE(ini);
	CHECK(iia.cap.max_recv_wr == 0);
	connect_qp(tgt, ini->qp_num, 1);
	connect_qp(ini, tgt->qp_num, 0);

	/* ibv_open_qp: through the shared domain, not through another. */
	struct ibv_qp_open_attr oa = {
		.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
		.qp_num = tgt->qp_num, .xrcd = xb, .qp_type = IBV_QPT_XRC_RECV,
	};
	struct ibv_qp *opened = ibv_open_qp(ctx, &oa);
	CHECK(opened != NULL);
	oa.xrcd = other;
	errno = 0;
	CHECK(ibv_open_qp(ctx, &oa) == NULL && errno == EINVAL);

	char *src = calloc(1, LEN), *r1 = calloc(1, LEN), *r2 = calloc(1, LEN), *rx = calloc(1, LEN);
	REQUIRE(src && r1 && r2 && rx);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *msrc = ibv_reg_mr(pd, src, LEN, acc);
	struct ibv_mr *m1 = ibv_reg_mr(pd, r1, LEN, acc);
	struct ibv_mr *m2 = ibv_reg_mr(pd, r2, LEN, acc);
	struct ibv_mr *mx = ibv_reg_mr(pd, rx, LEN, acc);
	REQUIRE(msrc && m1 && m2 && mx);
	CHECK(post_recv(s1, r1, m1->lkey, 1) == 0);
	CHECK(post_recv(s2, r2, m2->lkey, 2) == 0);
	CHECK(post_recv(sx, rx, mx->lkey, 3) == 0);

	/* Legacy SEND to s2: lands in r2, completes on rcq2. */
	struct ibv_wc wc;
	for (int i = 0; i < LEN; i++)
		src[i] = (char)(i * 7 + 1);
	CHECK(post_legacy(ini, IBV_WR_SEND, n2, src, LEN, msrc->lkey, 0, 0) == 0);
	CHECK(poll_one(scq, &wc) && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND);
	CHECK(poll_one(rcq2, &wc) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 2 &&
	      wc.byte_len == LEN && wc.qp_num == tgt->qp_num);
	CHECK(memcmp(src, r2, LEN) == 0);
	CHECK(ibv_poll_cq(rcq1, 1, &wc) == 0);

	/* ibv_wr_set_xrc_srqn: SEND with immediate to s1. */
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(ini);
	REQUIRE(qx);
	for (int i = 0; i < LEN; i++)
		src[i] = (char)(i * 3 + 5);
	ibv_wr_start(qx);
	qx->wr_id = 11;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(qx, htobe32(0xabcd));
	ibv_wr_set_xrc_srqn(qx, n1);
	ibv_wr_set_sge(qx, msrc->lkey, (uintptr_t)src, LEN);
	CHECK(ibv_wr_complete(qx) == 0);
	CHECK(poll_one(scq, &wc) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 11);
	CHECK(poll_one(rcq1, &wc) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 &&
	      (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htobe32(0xabcd));
	CHECK(memcmp(src, r1, LEN) == 0);

	/* A WR of an initiator without its SRQ number is refused at post time. */
	ibv_wr_start(qx);
	ibv_wr_send(qx);
	ibv_wr_set_sge(qx, msrc->lkey, (uintptr_t)src, 8);
	CHECK(ibv_wr_complete(qx) == EINVAL);

	/* RDMA WRITE and READ through the target, checked against the PD of the SRQ named. */
	memset(r1, 0x5a, LEN);
	CHECK(post_legacy(ini, IBV_WR_RDMA_WRITE, n1, src, LEN, msrc->lkey, (uintptr_t)r1, m1->rkey) == 0);
	CHECK(poll_one(scq, &wc) && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE);
	CHECK(memcmp(src, r1, LEN) == 0);
	memset(src, 0, LEN);
	CHECK(post_legacy(ini, IBV_WR_RDMA_READ, n2, src, LEN, msrc->lkey, (uintptr_t)r2, m2->rkey) == 0);
	CHECK(poll_one(scq, &wc) && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ);
	CHECK(memcmp(src, r2, LEN) == 0);

	/* Busy objects: a domain with SRQs and QPs, a CQ an SRQ completes on. */
	CHECK(ibv_close_xrcd(other) == EBUSY);
	CHECK(ibv_destroy_cq(rcq1) == EBUSY);

	/* An XRCETH naming another domain's SRQ: NAK, the WR fails, the receive stays posted. */
	CHECK(post_legacy(ini, IBV_WR_SEND, nx, src, 64, msrc->lkey, 0, 0) == 0);
	CHECK(poll_one(scq, &wc) && wc.status == IBV_WC_REM_INV_REQ_ERR);
	CHECK(ibv_poll_cq(rcq2, 1, &wc) == 0);

	/* Teardown: the target goes with its last handle; the shared domain with its last open. */
	CHECK(ibv_destroy_qp(opened) == 0);
	CHECK(ibv_destroy_qp(ini) == 0);
	CHECK(ibv_destroy_qp(tgt) == 0);
	CHECK(ibv_destroy_srq(s1) == 0);
	CHECK(ibv_destroy_srq(s2) == 0);
	CHECK(ibv_destroy_srq(sx) == 0);
	CHECK(ibv_close_xrcd(xb) == 0);
	CHECK(ibv_close_xrcd(xa) == 0);
	CHECK(ibv_close_xrcd(other) == 0);
	struct ibv_xrcd *again = open_xrcd(fd, O_CREAT | O_EXCL);
	CHECK(again != NULL);
	if (again)
		CHECK(ibv_close_xrcd(again) == 0);
	close(fd);
	CHECK(ibv_dereg_mr(msrc) == 0 && ibv_dereg_mr(m1) == 0 && ibv_dereg_mr(m2) == 0 &&
	      ibv_dereg_mr(mx) == 0);
	free(src);
	free(r1);
	free(r2);
	free(rx);
	CHECK(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq1) == 0 && ibv_destroy_cq(rcq2) == 0);
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
