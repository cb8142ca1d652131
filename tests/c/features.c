/*
 * features.c - urxe's verbs beyond rxe, through the public API and the inline helpers of the
 * installed <infiniband/verbs.h>, as an unmodified application uses them. One process, one
 * context, an RC QP pair connected to itself over the device's own GID.
 *
 *   features timestamps   ibv_query_rt_values_ex, hca_core_clock, completion timestamps
 *   features rereg        ibv_rereg_mr: translation, PD, access, IBV_REREG_MR_ERR_* codes
 *   features dm           device memory: alloc/free, copies, zero-based MRs, remote access, import
 *   features pd           thread domains, parent domains (allocators), QP/CQ/SRQ on them
 *
 * Exit 0 and "all checks passed" only if every check passed. Built by tests/abi_features.rs
 * with -Wall -Wextra -Werror -fsanitize=address,undefined.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#include "check.h"
#include "rc_self.h"

#define POLL_MS 5000

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static void open_dev(void)
{
	ctx = open_the_device();
	pd = ibv_alloc_pd(ctx);
	REQUIRE(pd);
}

static void close_dev(void)
{
	CHECK(ibv_dealloc_pd(pd) == 0);
	CHECK(ibv_close_device(ctx) == 0);
}

/* An RC QP pair a <-> b on `pd_` with CQs `scq`/`rcq` (a's) and `cq_b` (b's, both queues). */
struct pair {
	struct ibv_qp *a, *b;
};

static struct pair make_pair(struct ibv_pd *pd_, struct ibv_cq *cq_a, struct ibv_cq *cq_b, int access)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq_a, .recv_cq = cq_a, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2 },
	};
	struct pair p;
	p.a = ibv_create_qp(pd_, &ia);
	REQUIRE(p.a);
	ia.send_cq = cq_b;
	ia.recv_cq = cq_b;
	p.b = ibv_create_qp(pd_, &ia);
	REQUIRE(p.b);
	rc_connect_self(ctx, p.a, p.b->qp_num, access);
	rc_connect_self(ctx, p.b, p.a->qp_num, access);
	return p;
}

static void free_pair(struct pair *p)
{
	CHECK(ibv_destroy_qp(p->a) == 0);
	CHECK(ibv_destroy_qp(p->b) == 0);
}

/* One completion from `cq` within POLL_MS (status in *wc); 0 if none came. */
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

static int post_one(struct ibv_qp *qp, enum ibv_wr_opcode op, void *buf, uint32_t len, uint32_t lkey,
		    uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = 7, .sg_list = &sge, .num_sge = len ? 1 : 0, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
	}, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return ibv_post_send(qp, &wr, &bad);
}

/* ------------------------------------------------------------------------ timestamps */

/* Poll one completion of an extended CQ; returns its status (-1 if none came). */
static int poll_ex(struct ibv_cq_ex *cq, uint64_t *ts, uint64_t *wall)
{
	struct ibv_poll_cq_attr pa = { .comp_mask = 0 };
	uint64_t end = now_ms() + POLL_MS;
	int rc;
	while ((rc = ibv_start_poll(cq, &pa)) == ENOENT && now_ms() < end)
		;
	if (rc)
		return -1;
	int st = cq->status;
	*ts = ibv_wc_read_completion_ts(cq);
	*wall = ibv_wc_read_completion_wallclock_ns(cq);
	ibv_end_poll(cq);
	return st;
}

static void timestamps(void)
{
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0);
	CHECK(ax.completion_timestamp_mask != 0);
	CHECK(ax.hca_core_clock == 1000000); /* kHz: one tick per ns */

	/* ibv_query_rt_values_ex: the raw clock moves forward at 1 GHz; unknown mask bits */
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	CHECK(ibv_query_rt_values_ex(ctx, &v) == 0);
	CHECK(v.comp_mask == IBV_VALUES_MASK_RAW_CLOCK);
	CHECK(v.raw_clock.tv_sec == 0);
	uint64_t t0 = (uint64_t)v.raw_clock.tv_nsec;
	usleep(20000);
	CHECK(ibv_query_rt_values_ex(ctx, &v) == 0);
	uint64_t t1 = (uint64_t)v.raw_clock.tv_nsec;
	CHECK(t1 >= t0 + 20000000ULL && t1 < t0 + 5000000000ULL);
	v.comp_mask = 0;
	CHECK(ibv_query_rt_values_ex(ctx, &v) == 0);
	CHECK(v.comp_mask == 0);
	v.comp_mask = 1u << 5;
	CHECK(ibv_query_rt_values_ex(ctx, &v) == EINVAL);

	/* completion timestamps on both sides of a SEND, in order, on the same clock */
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 16, .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
					   IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
	};
	struct ibv_cq_ex *ca_ = ibv_create_cq_ex(ctx, &ca);
	struct ibv_cq_ex *cb_ = ibv_create_cq_ex(ctx, &ca);
	REQUIRE(ca_ && cb_);
	struct pair p = make_pair(pd, ibv_cq_ex_to_cq(ca_), ibv_cq_ex_to_cq(cb_), 0);
	char *buf = calloc(1, 4096);
	REQUIRE(buf);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr);
	struct ibv_sge rs = { .addr = (uintptr_t)(buf + 2048), .length = 2048, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 9, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(p.b, &rwr, &rbad) == 0);

	struct timespec w0;
	clock_gettime(CLOCK_REALTIME, &w0);
	CHECK(ibv_query_rt_values_ex(ctx, &(struct ibv_values_ex){ .comp_mask = 1 }) == 0);
	v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
	CHECK(ibv_query_rt_values_ex(ctx, &v) == 0);
	uint64_t before = (uint64_t)v.raw_clock.tv_nsec;
	strcpy(buf, "stamped");
	CHECK(post_one(p.a, IBV_WR_SEND, buf, 8, mr->lkey, 0, 0) == 0);
	uint64_t ts_recv = 0, wall_recv = 0, ts_send = 0, wall_send = 0;
	CHECK(poll_ex(cb_, &ts_recv, &wall_recv) == IBV_WC_SUCCESS);
	CHECK(poll_ex(ca_, &ts_send, &wall_send) == IBV_WC_SUCCESS);
	CHECK(ibv_query_rt_values_ex(ctx, &v) == 0);
	uint64_t after = (uint64_t)v.raw_clock.tv_nsec;
	struct timespec w1;
	clock_gettime(CLOCK_REALTIME, &w1);
	uint64_t w0ns = (uint64_t)w0.tv_sec * 1000000000ULL + (uint64_t)w0.tv_nsec;
	uint64_t w1ns = (uint64_t)w1.tv_sec * 1000000000ULL + (uint64_t)w1.tv_nsec;
	CHECK(!strcmp(buf + 2048, "stamped"));
	/* the receive completes before the ACK completes the send, both within the window */
	CHECK(before <= ts_recv && ts_recv <= ts_send && ts_send <= after);
	/* wall clock: the same instant, in CLOCK_REALTIME ns (1 ms slack for the offset taken
	 * at device start) */
	CHECK(wall_recv + 1000000 >= w0ns && wall_recv <= w1ns + 1000000);
	CHECK(wall_send - wall_recv == ts_send - ts_recv);

	CHECK(ibv_dereg_mr(mr) == 0);
	free(buf);
	free_pair(&p);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(ca_)) == 0);
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cb_)) == 0);
}

/* ------------------------------------------------------------------------ rereg */

/* An RDMA WRITE of 8 bytes from a's `src` to b's (raddr, rkey); the requester's status. */
static int write8(struct pair *p, struct ibv_cq *cq_a, void *src, uint32_t lkey, uint64_t raddr, uint32_t rkey)
{
	struct ibv_wc wc;
	if (post_one(p->a, IBV_WR_RDMA_WRITE, src, 8, lkey, raddr, rkey))
		return -1;
	if (!poll_one(cq_a, &wc))
		return -1;
	return wc.status;
}

static void rereg(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t len = 2 * (size_t)pg;
	char *a = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *b = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *ro = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	/* inaccessible pages (kept mapped so no later allocation can land there) */
	char *gone = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	REQUIRE(a != MAP_FAILED && b != MAP_FAILED && ro != MAP_FAILED && gone != MAP_FAILED);
	char *src = calloc(1, 64);
	REQUIRE(src);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, 64, IBV_ACCESS_LOCAL_WRITE);
	int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *mr = ibv_reg_mr(pd, a, len, rw);
	REQUIRE(smr && mr);
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	struct ibv_cq *cq_a = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *cq_b = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	REQUIRE(cq_a && cq_b);
	struct pair p = make_pair(pd, cq_a, cq_b, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	memcpy(src, "first-w", 8);
	CHECK(write8(&p, cq_a, src, smr->lkey, (uintptr_t)a, rkey) == IBV_WC_SUCCESS);
	CHECK(!memcmp(a, "first-w", 8));

	/* IBV_REREG_MR_ERR_INPUT: unknown flags, translation without address or length,
	 * access flags without IBV_REREG_MR_CHANGE_ACCESS */
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 1 << 4, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, len, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b, 0, 0) == IBV_REREG_MR_ERR_INPUT &&
	      errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE) ==
		      IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
	/* IBV_REREG_MR_ERR_CMD: no change asked, no PD, access breaking the IBA rule, a range
	 * that cannot be accessed, writable access over read-only pages */
	errno = 0;
	CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_REMOTE_WRITE) ==
		      IBV_REREG_MR_ERR_CMD && errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 1 << 28) == IBV_REREG_MR_ERR_CMD &&
	      errno == EINVAL);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, gone, len, 0) == IBV_REREG_MR_ERR_CMD &&
	      errno == EFAULT);
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, ro, len, 0) == IBV_REREG_MR_ERR_CMD &&
	      errno == EFAULT);
	/* a refused call leaves the MR as it was */
	CHECK(mr->addr == a && mr->length == len && mr->lkey == lkey && mr->rkey == rkey && mr->pd == pd);
	memcpy(src, "still-a", 8);
	CHECK(write8(&p, cq_a, src, smr->lkey, (uintptr_t)a + 8, rkey) == IBV_WC_SUCCESS);
	CHECK(!memcmp(a + 8, "still-a", 8));

	/* read-only pages are fine for a read-only MR: translation + access in one call */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, NULL, ro, len,
			   IBV_ACCESS_REMOTE_READ) == 0);
	CHECK(mr->addr == ro && mr->lkey == lkey && mr->rkey == rkey);
	/* ... and a writable access over them is refused again */
	errno = 0;
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, rw) == IBV_REREG_MR_ERR_CMD &&
	      errno == EFAULT);

	/* translation to b: same keys, the new range takes the write */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, NULL, b, len, rw) == 0);
	CHECK(mr->addr == b && mr->length == len && mr->lkey == lkey && mr->rkey == rkey);
	memcpy(src, "moved-b", 8);
	CHECK(write8(&p, cq_a, src, smr->lkey, (uintptr_t)b + 16, rkey) == IBV_WC_SUCCESS);
	CHECK(!memcmp(b + 16, "moved-b", 8));

	/* PD change: the new PD is held by the MR, the old one is free again */
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	REQUIRE(pd2);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0);
	CHECK(mr->pd == pd2);
	CHECK(ibv_dealloc_pd(pd2) == EBUSY);
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0) == 0);
	CHECK(mr->pd == pd);
	CHECK(ibv_dealloc_pd(pd2) == 0);

	/* access change: without remote write, a WRITE to it is a remote access error */
	CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE) == 0);
	CHECK(write8(&p, cq_a, src, smr->lkey, (uintptr_t)b, rkey) == IBV_WC_REM_ACCESS_ERR);
	CHECK(memcmp(b, "moved-b", 8) != 0);

	free_pair(&p);
	CHECK(ibv_destroy_cq(cq_a) == 0);
	CHECK(ibv_destroy_cq(cq_b) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dereg_mr(smr) == 0);
	free(src);
	munmap(a, len);
	munmap(b, len);
	munmap(ro, len);
	munmap(gone, len);
}

/* ------------------------------------------------------------------------ dm */

static struct ibv_dm *alloc_dm(size_t len, uint32_t log_align, uint32_t comp_mask)
{
	struct ibv_alloc_dm_attr a = { .length = len, .log_align_req = log_align, .comp_mask = comp_mask };
	return ibv_alloc_dm(ctx, &a);
}

static void dm(void)
{
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0);
	uint64_t max = ax.max_dm_size;
	CHECK(max >= 4096);

	/* allocation errors: too big, nothing, unknown comp_mask, alignment above a page */
	errno = 0;
	CHECK(alloc_dm(max + 4, 0, 0) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(alloc_dm(0, 0, 0) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(alloc_dm(64, 0, 1) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(alloc_dm(64, 13, 0) == NULL && errno == EINVAL);
	/* the budget is per process: two halves fit, a third allocation does not */
	struct ibv_dm *h1 = alloc_dm(max / 2, 6, 0), *h2 = alloc_dm(max / 2, 0, 0);
	CHECK(h1 && h2);
	errno = 0;
	CHECK(alloc_dm(4, 0, 0) == NULL && errno == ENOMEM);
	if (h1)
		CHECK(ibv_free_dm(h1) == 0);
	if (h2)
		CHECK(ibv_free_dm(h2) == 0);

	const size_t len = 256;
	struct ibv_dm *d = alloc_dm(len, 3, 0);
	REQUIRE(d);
	/* fresh device memory reads as zeros */
	uint8_t host[512];
	memset(host, 0xee, sizeof(host));
	CHECK(ibv_memcpy_from_dm(host, d, 0, len) == 0);
	int zero = 1;
	for (size_t i = 0; i < len; i++)
		zero &= host[i] == 0;
	CHECK(zero);
	/* copies: 4-byte granular (EINVAL), inside the DM (EFAULT) */
	for (size_t i = 0; i < len; i++)
		host[i] = (uint8_t)i;
	CHECK(ibv_memcpy_to_dm(d, 0, host, len) == 0);
	CHECK(ibv_memcpy_to_dm(d, 2, host, 4) == EINVAL);
	CHECK(ibv_memcpy_to_dm(d, 4, host, 6) == EINVAL);
	CHECK(ibv_memcpy_to_dm(d, len, host, 4) == EFAULT);
	CHECK(ibv_memcpy_to_dm(d, 0, host, len + 4) == EFAULT);
	CHECK(ibv_memcpy_to_dm(d, UINT64_MAX - 3, host, 8) == EFAULT);
	CHECK(ibv_memcpy_from_dm(host + 256, d, 2, 4) == EINVAL);
	CHECK(ibv_memcpy_from_dm(host + 256, d, len - 4, 8) == EFAULT);
	CHECK(ibv_memcpy_to_dm(d, 0, host, 0) == 0);
	memset(host + 256, 0, 256);
	CHECK(ibv_memcpy_from_dm(host + 256, d, 16, 32) == 0);
	CHECK(!memcmp(host + 256, host + 16, 32));

	/* MRs over it: zero-based only, rights DM can grant, inside the DM */
	int rw = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, d, 0, len, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, d, 0, len, rw | IBV_ACCESS_MW_BIND) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, d, 0, len + 4, rw) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, d, 128, 132, rw) == NULL && errno == EINVAL);
	errno = 0;
	CHECK(ibv_reg_dm_mr(pd, d, len + 4, 0, rw) == NULL && errno == EINVAL);
	struct ibv_mr *zero_len = ibv_reg_dm_mr(pd, d, 0, 0, rw);
	CHECK(zero_len != NULL);
	if (zero_len)
		CHECK(ibv_dereg_mr(zero_len) == 0);
	/* the MR covers DM bytes [64, 128): addressed 0..63 */
	struct ibv_mr *dmr = ibv_reg_dm_mr(pd, d, 64, 64, rw);
	REQUIRE(dmr);
	CHECK(dmr->addr == NULL && dmr->length == 64);
	CHECK(ibv_free_dm(d) == EBUSY);
	errno = 0;
	CHECK(ibv_rereg_mr(dmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, rw) == IBV_REREG_MR_ERR_CMD &&
	      errno == EINVAL);

	struct ibv_cq *cq_a = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_cq *cq_b = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	REQUIRE(cq_a && cq_b);
	struct pair p = make_pair(pd, cq_a, cq_b, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	char *src = calloc(1, 64);
	REQUIRE(src);
	struct ibv_mr *smr = ibv_reg_mr(pd, src, 64, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(smr);

	/* remote WRITE into the DM MR (zero-based address 8) lands at DM offset 72 */
	memcpy(src, "dm-write", 8);
	CHECK(write8(&p, cq_a, src, smr->lkey, 8, dmr->rkey) == IBV_WC_SUCCESS);
	uint8_t got[8];
	CHECK(ibv_memcpy_from_dm(got, d, 72, 8) == 0);
	CHECK(!memcmp(got, "dm-write", 8));
	/* remote READ from it */
	struct ibv_wc wc;
	memset(src, 0, 64);
	CHECK(post_one(p.a, IBV_WR_RDMA_READ, src, 16, smr->lkey, 0, dmr->rkey) == 0);
	CHECK(poll_one(cq_a, &wc) && wc.status == IBV_WC_SUCCESS);
	CHECK(!memcmp(src, host + 64, 8) && !memcmp(src + 8, "dm-write", 8));
	/* a local SGE from the DM MR: a SEND whose payload is DM bytes [64, 80) */
	struct ibv_sge rs = { .addr = (uintptr_t)(src + 32), .length = 32, .lkey = smr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 5, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(p.b, &rwr, &rbad) == 0);
	struct ibv_sge ss = { .addr = 0, .length = 16, .lkey = dmr->lkey };
	struct ibv_send_wr swr = { .wr_id = 6, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				   .send_flags = IBV_SEND_SIGNALED }, *sbad;
	CHECK(ibv_post_send(p.a, &swr, &sbad) == 0);
	CHECK(poll_one(cq_b, &wc) && wc.status == IBV_WC_SUCCESS && wc.byte_len == 16);
	CHECK(poll_one(cq_a, &wc) && wc.status == IBV_WC_SUCCESS);
	CHECK(!memcmp(src + 32, src, 16));
	/* hostile: a WRITE past the MR's 64 bytes is refused and the DM beyond is untouched */
	uint8_t before[256], after[256];
	CHECK(ibv_memcpy_from_dm(before, d, 0, len) == 0);
	memcpy(src, "outside!", 8);
	CHECK(write8(&p, cq_a, src, smr->lkey, 60, dmr->rkey) == IBV_WC_REM_ACCESS_ERR);
	CHECK(ibv_memcpy_from_dm(after, d, 0, len) == 0);
	CHECK(!memcmp(before, after, len));

	/* import through a second context of this process: the same bytes */
	struct ibv_context *ctx2 = ibv_import_device(dup(ctx->cmd_fd));
	REQUIRE(ctx2);
	errno = 0;
	CHECK(ibv_import_dm(ctx2, d->handle + 1000) == NULL && errno == EINVAL);
	struct ibv_dm *d2 = ibv_import_dm(ctx2, d->handle);
	REQUIRE(d2);
	CHECK(d2->handle == d->handle && d2->context == ctx2);
	CHECK(ibv_memcpy_from_dm(got, d2, 72, 8) == 0);
	CHECK(!memcmp(got, "dm-write", 8));
	CHECK(ibv_memcpy_to_dm(d2, 200, "via-ctx2", 8) == 0);
	CHECK(ibv_memcpy_from_dm(got, d, 200, 8) == 0);
	CHECK(!memcmp(got, "via-ctx2", 8));
	ibv_unimport_dm(d2);
	CHECK(ibv_close_device(ctx2) == 0);

	free_pair(&p);
	CHECK(ibv_destroy_cq(cq_a) == 0);
	CHECK(ibv_destroy_cq(cq_b) == 0);
	CHECK(ibv_dereg_mr(smr) == 0);
	free(src);
	CHECK(ibv_dereg_mr(dmr) == 0);
	CHECK(ibv_free_dm(d) == 0);
}

/* ------------------------------------------------------------------------ pd */

static int allocs;
static void *my_alloc(struct ibv_pd *p, void *c, size_t size, size_t align, uint64_t type)
{
	(void)p; (void)c; (void)size; (void)align; (void)type;
	allocs++;
	return IBV_ALLOCATOR_USE_DEFAULT;
}
static void my_free(struct ibv_pd *p, void *c, void *ptr, uint64_t type)
{
	(void)p; (void)c; (void)ptr; (void)type;
}

static void pd_domains(void)
{
	/* thread domains */
	errno = 0;
	CHECK(ibv_alloc_td(ctx, &(struct ibv_td_init_attr){ .comp_mask = 1 }) == NULL && errno == EINVAL);
	struct ibv_td *td = ibv_alloc_td(ctx, &(struct ibv_td_init_attr){ .comp_mask = 0 });
	REQUIRE(td);
	CHECK(td->context == ctx);

	/* parent domain errors */
	int cookie = 0;
	struct ibv_parent_domain_init_attr pa = {
		.pd = pd, .td = td,
		.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT,
		.alloc = my_alloc, .free = my_free, .pd_context = &cookie,
	};
	struct ibv_parent_domain_init_attr bad = pa;
	bad.comp_mask |= 1 << 5;
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &bad) == NULL && errno == EINVAL);
	bad = pa;
	bad.pd = NULL;
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &bad) == NULL && errno == EINVAL);
	bad = pa;
	bad.free = NULL;
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &bad) == NULL && errno == EINVAL);

	struct ibv_pd *pdom = ibv_alloc_parent_domain(ctx, &pa);
	REQUIRE(pdom);
	CHECK(pdom->context == ctx);
	/* no parent domain over a parent domain; the PD and TD under it are held */
	bad = pa;
	bad.pd = pdom;
	errno = 0;
	CHECK(ibv_alloc_parent_domain(ctx, &bad) == NULL && errno == EINVAL);
	CHECK(ibv_dealloc_pd(pd) == EBUSY);
	CHECK(ibv_dealloc_td(td) == EBUSY);

	/* an extended CQ on it (a plain PD is refused), an SRQ, QPs and traffic */
	struct ibv_cq_init_attr_ex ca = {
		.cqe = 32, .wc_flags = IBV_WC_STANDARD_FLAGS,
		.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD, .parent_domain = pd,
	};
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &ca) == NULL && errno == EINVAL);
	ca.parent_domain = pdom;
	struct ibv_cq_ex *cqx = ibv_create_cq_ex(ctx, &ca);
	REQUIRE(cqx);
	struct ibv_cq *cq = ibv_cq_ex_to_cq(cqx);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pdom, &sa);
	REQUIRE(srq);
	CHECK(srq->pd == pdom);
	struct ibv_cq *cq_a = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	REQUIRE(cq_a);
	struct ibv_qp_init_attr ia = {
		.send_cq = cq_a, .recv_cq = cq_a, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qa = ibv_create_qp(pd, &ia);
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.srq = srq;
	struct ibv_qp *qb = ibv_create_qp(pdom, &ia);
	REQUIRE(qa && qb);
	CHECK(qb->pd == pdom);
	rc_connect_self(ctx, qa, qb->qp_num, 0);
	rc_connect_self(ctx, qb, qa->qp_num, 0);
	char *buf = calloc(1, 128);
	REQUIRE(buf);
	/* an MR on the parent domain serves QPs of its protection domain too */
	struct ibv_mr *mr = ibv_reg_mr(pdom, buf, 128, IBV_ACCESS_LOCAL_WRITE);
	REQUIRE(mr);
	CHECK(mr->pd == pdom);
	struct ibv_sge rs = { .addr = (uintptr_t)(buf + 64), .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 3, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_srq_recv(srq, &rwr, &rbad) == 0);
	memcpy(buf, "parent-domain", 14);
	CHECK(post_one(qa, IBV_WR_SEND, buf, 14, mr->lkey, 0, 0) == 0);
	struct ibv_wc wc;
	CHECK(poll_one(cq_a, &wc) && wc.status == IBV_WC_SUCCESS);
	CHECK(poll_one(cq, &wc) && wc.status == IBV_WC_SUCCESS && wc.wr_id == 3 && wc.byte_len == 14);
	CHECK(!strcmp(buf + 64, "parent-domain"));

	/* the parent domain is busy while its QP, CQ and SRQ live */
	CHECK(ibv_dealloc_pd(pdom) == EBUSY);
	CHECK(ibv_destroy_qp(qb) == 0);
	CHECK(ibv_dealloc_pd(pdom) == EBUSY);
	CHECK(ibv_destroy_srq(srq) == 0);
	CHECK(ibv_dealloc_pd(pdom) == EBUSY);
	CHECK(ibv_destroy_cq(cq) == 0);
	CHECK(ibv_dereg_mr(mr) == 0);
	CHECK(ibv_dealloc_pd(pdom) == 0);
	CHECK(ibv_dealloc_td(td) == 0);
	CHECK(ibv_destroy_qp(qa) == 0);
	CHECK(ibv_destroy_cq(cq_a) == 0);
	free(buf);
	/* the allocators are kept, not needed: urxe's queues live in the engine */
	CHECK(allocs == 0);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: features timestamps|rereg|dm|pd\n");
		return 2;
	}
	open_dev();
	if (!strcmp(argv[1], "timestamps"))
		timestamps();
	else if (!strcmp(argv[1], "rereg"))
		rereg();
	else if (!strcmp(argv[1], "dm"))
		dm();
	else if (!strcmp(argv[1], "pd"))
		pd_domains();
	else {
		fprintf(stderr, "unknown section %s\n", argv[1]);
		return 2;
	}
	close_dev();
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("all checks passed\n");
	return 0;
}
