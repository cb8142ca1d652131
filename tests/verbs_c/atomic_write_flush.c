/* ATOMIC WRITE and FLUSH (IBTA 1.5) through the real ABI, in both directions.
 *
 * Each side registers a buffer with IBV_ACCESS_FLUSH_GLOBAL and opens four RC QPs created with
 * ibv_create_qp_ex (send_ops_flags ATOMIC_WRITE | FLUSH | RDMA_WRITE). On QP 0 both sides, at
 * the same time:
 *  - ibv_wr_atomic_write of 8 bytes into the peer's buffer (IBV_WC_ATOMIC_WRITE),
 *  - an RDMA WRITE of 2 KiB, then ibv_wr_flush of that range (global visibility, range level)
 *    and of the whole region (region level): IBV_WC_FLUSH each, in order,
 * and each checks what the peer wrote. The client then sends hostile requests, one per QP
 * (each fails its QP): a misaligned ATOMIC WRITE (IBV_WC_REM_INV_REQ_ERR), an ATOMIC WRITE
 * past the end of the region and a FLUSH of a region registered without FLUSH_GLOBAL
 * (IBV_WC_REM_ACCESS_ERR); the server checks its guard bytes are untouched.
 * Also checked: device_cap_flags_ex advertises FLUSH_GLOBAL and ATOMIC_WRITE but not
 * FLUSH_PERSISTENT, and a region cannot be registered with IBV_ACCESS_FLUSH_PERSISTENT
 * (EOPNOTSUPP).
 *
 * rdma-core 44's <infiniband/verbs.h> has ATOMIC WRITE but not FLUSH (rdma-core 45): the FLUSH
 * values and the `wr_flush` entry that rdma-core 45 appends to struct ibv_qp_ex are named here.
 */
#include "common.h"

#include <stddef.h>

#define BUF 16384
#define WORD_OFF 64
#define SRC_OFF 1024 /* what this side RDMA WRITEs */
#define DATA_OFF 4096 /* where the peer's RDMA WRITE lands */
#define DATA_LEN 2048
#define GUARD_OFF 8192
#define NQP 4

#define X_QP_EX_WITH_FLUSH (1ULL << 13)
#define X_ACCESS_FLUSH_GLOBAL (1 << 8)
#define X_ACCESS_FLUSH_PERSISTENT (1 << 9)
#define X_WC_FLUSH 8
#define X_FLUSH_GLOBAL 1
#define X_FLUSH_RANGE 0
#define X_FLUSH_MR 1
#define X_DEVICE_FLUSH_GLOBAL (1ULL << 38)
#define X_DEVICE_FLUSH_PERSISTENT (1ULL << 39)
#define X_DEVICE_ATOMIC_WRITE (1ULL << 40)

typedef void (*wr_flush_fn)(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr, size_t len, uint8_t type,
			    uint8_t level);

/* rdma-core 45's ibv_wr_flush: the entry right after rdma-core 44's struct ibv_qp_ex. */
static void wr_flush(struct ibv_qp_ex *qx, uint32_t rkey, uint64_t addr, size_t len, uint8_t type, uint8_t level)
{
	wr_flush_fn f;
	memcpy(&f, (const char *)qx + sizeof(struct ibv_qp_ex), sizeof(f));
	if (!f)
		die("no wr_flush entry after struct ibv_qp_ex");
	f(qx, rkey, addr, len, type, level);
}

struct side {
	struct ibv_pd *pd;
	struct ibv_cq *cq[NQP];
	struct ibv_qp *qp[NQP];
	struct ibv_qp_ex *qx[NQP];
	struct ibv_mr *mr;    /* FLUSH_GLOBAL */
	struct ibv_mr *plain; /* the same buffer without FLUSH_GLOBAL */
	uint8_t *mem;
	struct peer_info me[NQP], peer[NQP];
	uint32_t plain_rkey_of_peer;
};

static struct ibv_qp *make_qp(struct dev *d, struct side *s, int q)
{
	struct ibv_qp_init_attr_ex ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = s->cq[q];
	ia.recv_cq = s->cq[q];
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.pd = s->pd;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE | X_QP_EX_WITH_FLUSH | IBV_QP_EX_WITH_RDMA_WRITE;
	struct ibv_qp *qp = ibv_create_qp_ex(d->ctx, &ia);
	if (!qp)
		die("ibv_create_qp_ex with ATOMIC_WRITE | FLUSH");
	s->qx[q] = ibv_qp_to_qp_ex(qp);
	if (!s->qx[q])
		die("ibv_qp_to_qp_ex");
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | X_ACCESS_FLUSH_GLOBAL;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT with FLUSH_GLOBAL access");
	return qp;
}

static void caps(struct dev *d, struct side *s)
{
	struct ibv_device_attr_ex ax;
	memset(&ax, 0, sizeof(ax));
	if (ibv_query_device_ex(d->ctx, NULL, &ax))
		die("ibv_query_device_ex");
	uint64_t f = ax.device_cap_flags_ex;
	check((f & X_DEVICE_FLUSH_GLOBAL) && (f & X_DEVICE_ATOMIC_WRITE) && !(f & X_DEVICE_FLUSH_PERSISTENT),
	      "device_caps_flush_global_atomic_write_not_persistent", "device_cap_flags_ex 0x%" PRIx64, f);
	errno = 0;
	struct ibv_mr *p = ibv_reg_mr(s->pd, s->mem, 64, IBV_ACCESS_LOCAL_WRITE | X_ACCESS_FLUSH_PERSISTENT);
	check(!p && errno == EOPNOTSUPP, "reg_mr_flush_persistent_eopnotsupp", "mr %p errno %d", (void *)p, errno);
	if (p)
		ibv_dereg_mr(p);
}

/* Opens a one-WR batch on QP `q` with `id`, signaled. */
static struct ibv_qp_ex *begin(struct side *s, int q, uint64_t id)
{
	struct ibv_qp_ex *qx = s->qx[q];
	ibv_wr_start(qx);
	qx->wr_id = id;
	qx->wr_flags = IBV_SEND_SIGNALED;
	return qx;
}

static void end(struct ibv_qp_ex *qx, const char *what)
{
	int r = ibv_wr_complete(qx);
	if (r)
		die("ibv_wr_complete (%s) returned %d", what, r);
}

static void atomic_write(struct side *s, int q, uint64_t id, uint64_t raddr, uint32_t rkey, const uint8_t v[8])
{
	struct ibv_qp_ex *qx = begin(s, q, id);
	ibv_wr_atomic_write(qx, rkey, raddr, v);
	end(qx, "atomic write");
}

static void flush(struct side *s, int q, uint64_t id, uint64_t raddr, uint32_t rkey, size_t len, uint8_t level)
{
	struct ibv_qp_ex *qx = begin(s, q, id);
	wr_flush(qx, rkey, raddr, len, X_FLUSH_GLOBAL, level);
	end(qx, "flush");
}

static void rdma_write(struct side *s, int q, uint64_t id, size_t off, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ibv_qp_ex *qx = begin(s, q, id);
	ibv_wr_rdma_write(qx, rkey, raddr);
	ibv_wr_set_sge(qx, s->mr->lkey, (uintptr_t)(s->mem + off), len);
	end(qx, "rdma write");
}

static void word_of(int is_server, uint8_t v[8])
{
	for (int i = 0; i < 8; i++)
		v[i] = (uint8_t)((is_server ? 0xA0 : 0x50) + i);
}

int main(int argc, char **argv)
{
	struct dev d;
	struct side s;
	struct ibv_wc wc;
	int is_server = 0, port = 18515, gidx = 1, fd;
	const char *host = NULL, *devname = "urxe0";

	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_args(argc, argv, &is_server, &host, &port, &gidx, &devname);
	start_watchdog(WATCHDOG_S);
	memset(&s, 0, sizeof(s));
	open_dev(&d, devname, gidx);
	s.pd = ibv_alloc_pd(d.ctx);
	if (!s.pd)
		die("ibv_alloc_pd");
	s.mem = aligned_alloc(4096, BUF);
	if (!s.mem)
		die("aligned_alloc");
	memset(s.mem, 0x5A, BUF);
	s.mr = ibv_reg_mr(s.pd, s.mem, GUARD_OFF,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
				  X_ACCESS_FLUSH_GLOBAL);
	if (!s.mr)
		die("ibv_reg_mr with IBV_ACCESS_FLUSH_GLOBAL");
	s.plain = ibv_reg_mr(s.pd, s.mem, BUF, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s.plain)
		die("ibv_reg_mr");
	caps(&d, &s);
	for (int q = 0; q < NQP; q++) {
		s.cq[q] = ibv_create_cq(d.ctx, 32, NULL, NULL, 0);
		if (!s.cq[q])
			die("ibv_create_cq");
		s.qp[q] = make_qp(&d, &s, q);
		s.me[q].qpn = s.qp[q]->qp_num;
		s.me[q].psn = 0x2000u * (unsigned)(q + 1) + (is_server ? 7u : 0u);
		s.me[q].rkey = s.mr->rkey;
		/* RC has no Q_Key: the field carries the rkey of the region without FLUSH access. */
		s.me[q].qkey = s.plain->rkey;
		s.me[q].addr = (uintptr_t)s.mem;
		s.me[q].len = GUARD_OFF;
		memcpy(s.me[q].gid, d.gid.raw, 16);
	}

	fd = is_server ? tcp_server(port) : tcp_client(host, port);
	for (int q = 0; q < NQP; q++) {
		exchange(fd, &s.me[q], &s.peer[q]);
		rc_qp_to_rts(s.qp[q], &s.me[q], &s.peer[q], gidx, 4);
	}
	s.plain_rkey_of_peer = s.peer[0].qkey;

	/* Both directions at once on QP 0. */
	uint8_t mine[8], theirs[8];
	word_of(is_server, mine);
	word_of(!is_server, theirs);
	fill(s.mem + SRC_OFF, DATA_LEN, is_server ? 3 : 4, 0);
	sync_point(fd, 'A');
	uint64_t pa = s.peer[0].addr;
	uint32_t pk = s.peer[0].rkey;
	atomic_write(&s, 0, 1, pa + WORD_OFF, pk, mine);
	rdma_write(&s, 0, 2, SRC_OFF, DATA_LEN, pa + DATA_OFF, pk);
	flush(&s, 0, 3, pa + DATA_OFF, pk, DATA_LEN, X_FLUSH_RANGE);
	flush(&s, 0, 4, pa, pk, 0, X_FLUSH_MR);
	if (expect_wc(s.cq[0], &wc, "atomic_write_completes", IBV_WC_SUCCESS, IBV_WC_ATOMIC_WRITE, 1))
		check(1, "atomic_write_completes", "ok");
	if (expect_wc(s.cq[0], &wc, "rdma_write_completes", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2))
		check(1, "rdma_write_completes", "ok");
	if (expect_wc(s.cq[0], &wc, "flush_range_completes", IBV_WC_SUCCESS, X_WC_FLUSH, 3))
		check(1, "flush_range_completes", "ok");
	if (expect_wc(s.cq[0], &wc, "flush_region_completes", IBV_WC_SUCCESS, X_WC_FLUSH, 4))
		check(1, "flush_region_completes", "ok");
	sync_point(fd, 'B');
	check(memcmp(s.mem + WORD_OFF, theirs, 8) == 0, "peer_atomic_write_landed", "word %02x%02x..%02x",
	      s.mem[WORD_OFF], s.mem[WORD_OFF + 1], s.mem[WORD_OFF + 7]);
	check(s.mem[WORD_OFF - 1] == 0x5A && s.mem[WORD_OFF + 8] == 0x5A, "atomic_write_neighbours_untouched",
	      "bytes %02x %02x", s.mem[WORD_OFF - 1], s.mem[WORD_OFF + 8]);
	long bad_at = verify(s.mem + DATA_OFF, DATA_LEN, is_server ? 4 : 3, 0);
	check(bad_at < 0, "peer_write_before_flush_landed", "mismatch at byte %ld", bad_at);

	/* Hostile requests from the client, one QP each; the server's guards stay. */
	if (!is_server) {
		uint8_t v[8];
		memset(v, 0xEE, 8);
		atomic_write(&s, 1, 10, s.peer[1].addr + WORD_OFF + 4, s.peer[1].rkey, v);
		if (expect_wc(s.cq[1], &wc, "misaligned_atomic_write_rem_inv_req_err", IBV_WC_REM_INV_REQ_ERR, -1, 10))
			check(1, "misaligned_atomic_write_rem_inv_req_err", "ok");
		atomic_write(&s, 2, 11, s.peer[2].addr + GUARD_OFF, s.peer[2].rkey, v);
		if (expect_wc(s.cq[2], &wc, "atomic_write_past_region_rem_access_err", IBV_WC_REM_ACCESS_ERR, -1, 11))
			check(1, "atomic_write_past_region_rem_access_err", "ok");
		flush(&s, 3, 12, s.peer[3].addr, s.plain_rkey_of_peer, 64, X_FLUSH_RANGE);
		if (expect_wc(s.cq[3], &wc, "flush_without_flush_access_rem_access_err", IBV_WC_REM_ACCESS_ERR, -1, 12))
			check(1, "flush_without_flush_access_rem_access_err", "ok");
	}
	sync_point(fd, 'C');
	if (is_server) {
		int ok = 1;
		for (size_t i = GUARD_OFF; i < BUF; i++)
			ok &= s.mem[i] == 0x5A;
		check(ok, "guard_after_region_untouched", "a byte past the region changed");
		check(memcmp(s.mem + WORD_OFF, theirs, 8) == 0, "word_untouched_by_misaligned_write",
		      "word changed");
		for (int q = 1; q < NQP; q++) {
			struct ibv_qp_attr qa;
			struct ibv_qp_init_attr qi;
			check(ibv_query_qp(s.qp[q], &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR,
			      "responder_qp_in_error_after_nak", "qp %d state %d", q, qa.qp_state);
		}
	}
	sync_point(fd, 'Z');

	for (int q = 0; q < NQP; q++) {
		check(ibv_destroy_qp(s.qp[q]) == 0, "destroy_qp", "failed");
		check(ibv_destroy_cq(s.cq[q]) == 0, "destroy_cq", "failed");
	}
	check(ibv_dereg_mr(s.plain) == 0, "dereg_plain_mr", "failed");
	check(ibv_dereg_mr(s.mr) == 0, "dereg_mr", "failed");
	check(ibv_dealloc_pd(s.pd) == 0, "dealloc_pd", "failed");
	check(ibv_close_device(d.ctx) == 0, "close_device", "failed");
	free(s.mem);
	close(fd);
	return finish();
}
