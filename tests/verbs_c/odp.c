/* On-demand paging through the real ABI, in one process: an RC QP pair connected to itself.
 *
 * - ibv_query_device_ex reports ODP (and implicit ODP) with the per-transport caps.
 * - Registration: an ODP MR over a hole, or at NULL, is accepted (its pages are checked when
 *   they are used); the implicit MR (NULL, SIZE_MAX) is accepted, at iova 0 only; a wrapping
 *   range is still EINVAL; an ordinary MR over a hole is still EFAULT.
 * - The implicit MR, registered before the memory exists: pages mmap'ed afterwards take a
 *   peer's RDMA WRITE, READ and FETCH_ADD and a SEND into a receive posted through the
 *   implicit lkey, all with exact data. A page munmap'ed afterwards: the peer's WRITE ends in
 *   IBV_WC_REM_ACCESS_ERR, a local gather from it in IBV_WC_LOC_PROT_ERR, and this process
 *   carries on. An explicit ODP MR over a hole takes a WRITE once the hole is mapped.
 * - ibv_advise_mr: a synchronous prefetch really faults an untouched page in (mincore), and
 *   PREFETCH_NO_FAULT does not; each error code of ibv_advise_mr(3) for its cause.
 *
 *   odp [-g gid_index] [-d dev]
 */
#include "common.h"

#include <sys/mman.h>

#define MSG 4096u
#define SEED_WRITE 41
#define SEED_SEND 42
#define SEED_HOLE 43

static const int remote_all = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
static const int odp_all = IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

struct pair {
	struct ibv_cq *cq_a, *cq_b;
	struct ibv_qp *a, *b;
};

struct ctx {
	struct dev d;
	struct ibv_pd *pd;
	size_t page;
};

static struct ibv_qp *make_qp(struct ctx *c, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;
	struct ibv_qp *qp;

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 8;
	ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	qp = ibv_create_qp(c->pd, &ia);
	if (!qp)
		die("ibv_create_qp");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = remote_all;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");
	return qp;
}

static void peer_of(struct ctx *c, struct ibv_qp *qp, uint32_t psn, struct peer_info *p)
{
	memset(p, 0, sizeof(*p));
	p->qpn = qp->qp_num;
	p->psn = psn;
	p->lid = c->d.port.lid;
	memcpy(p->gid, c->d.gid.raw, 16);
}

/* A fresh QP pair A <-> B (a QP that NAKed or saw an error is in ERR and not reused). */
static void new_pair(struct ctx *c, struct pair *p)
{
	struct peer_info ia, ib;

	p->cq_a = ibv_create_cq(c->d.ctx, 16, NULL, NULL, 0);
	p->cq_b = ibv_create_cq(c->d.ctx, 16, NULL, NULL, 0);
	if (!p->cq_a || !p->cq_b)
		die("ibv_create_cq");
	p->a = make_qp(c, p->cq_a);
	p->b = make_qp(c, p->cq_b);
	peer_of(c, p->a, 0x1000, &ia);
	peer_of(c, p->b, 0x2000, &ib);
	rc_qp_to_rts(p->a, &ia, &ib, c->d.gidx, 4);
	rc_qp_to_rts(p->b, &ib, &ia, c->d.gidx, 4);
}

static void free_pair(struct pair *p)
{
	ibv_destroy_qp(p->a);
	ibv_destroy_qp(p->b);
	ibv_destroy_cq(p->cq_a);
	ibv_destroy_cq(p->cq_b);
}

/* Posts one WR on `qp` and expects its completion on `cq` with `status`; returns 1 if so. */
static int run(struct ibv_qp *qp, struct ibv_cq *cq, const char *name, enum ibv_wr_opcode op, void *addr, uint32_t len,
	       uint32_t lkey, uint64_t raddr, uint32_t rkey, enum ibv_wc_status status, uint64_t wr_id)
{
	struct ibv_wc wc;
	int r = post_one(qp, op, addr, len, lkey, raddr, rkey, 0, wr_id);
	if (r) {
		check(0, name, "ibv_post_send returned %d", r);
		return 0;
	}
	return expect_wc(cq, &wc, name, status, -1, wr_id);
}

/* `run` for a step whose only check is its completion status: reports the PASS too. */
static void step(struct ibv_qp *qp, struct ibv_cq *cq, const char *name, enum ibv_wr_opcode op, void *addr,
		 uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey, enum ibv_wc_status status, uint64_t wr_id)
{
	if (run(qp, cq, name, op, addr, len, lkey, raddr, rkey, status, wr_id))
		check(1, name, "-");
}

/* Fresh pages far below where the kernel places new mappings (it searches top-down from the
 * mmap base), so a page this program unmaps stays a hole: an allocation of ASan or of the
 * library cannot land in it before the check that expects it empty. */
static void *map(struct ctx *c, size_t pages)
{
	static uintptr_t next = (uintptr_t)0x300000000000ull;
	void *p = mmap((void *)next, pages * c->page, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == MAP_FAILED)
		p = mmap(NULL, pages * c->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap");
	next += (uintptr_t)16 << 20;
	return p;
}

static int resident(struct ctx *c, void *page)
{
	unsigned char v = 0;
	if (mincore(page, c->page, &v))
		die("mincore");
	return v & 1;
}

static void caps(struct ctx *c)
{
	struct ibv_device_attr_ex a;
	const uint32_t rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
			    IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
	const uint32_t ud = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;
	int r;

	memset(&a, 0, sizeof(a));
	r = ibv_query_device_ex(c->d.ctx, NULL, &a);
	check(r == 0 && (a.odp_caps.general_caps & IBV_ODP_SUPPORT) && (a.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT),
	      "odp_caps_general", "ibv_query_device_ex %d, general_caps 0x%" PRIx64, r, a.odp_caps.general_caps);
	check((a.odp_caps.per_transport_caps.rc_odp_caps & rc) == rc &&
		      (a.odp_caps.per_transport_caps.ud_odp_caps & ud) == ud &&
		      (a.odp_caps.per_transport_caps.uc_odp_caps & IBV_ODP_SUPPORT_WRITE) &&
		      !(a.odp_caps.per_transport_caps.uc_odp_caps & IBV_ODP_SUPPORT_READ),
	      "odp_caps_per_transport", "rc 0x%x uc 0x%x ud 0x%x", a.odp_caps.per_transport_caps.rc_odp_caps,
	      a.odp_caps.per_transport_caps.uc_odp_caps, a.odp_caps.per_transport_caps.ud_odp_caps);
}

static void expect_reg(struct ctx *c, const char *name, void *addr, size_t len, uint64_t iova, int access, int want)
{
	struct ibv_mr *mr;
	errno = 0;
	mr = ibv_reg_mr_iova(c->pd, addr, len, iova, access);
	if (want == 0)
		check(mr != NULL, name, "ibv_reg_mr_iova: errno %d (%s)", errno, strerror(errno));
	else
		check(!mr && errno == want, name, "ibv_reg_mr_iova returned %p errno %d, expected errno %d", (void *)mr,
		      errno, want);
	if (mr)
		ibv_dereg_mr(mr);
}

static void registrations(struct ctx *c)
{
	uint8_t *three = map(c, 3);

	if (munmap(three + c->page, c->page))
		die("munmap");
	expect_reg(c, "odp_reg_over_hole_ok", three, 3 * c->page, (uintptr_t)three, odp_all, 0);
	expect_reg(c, "plain_reg_over_hole_efault", three, 3 * c->page, (uintptr_t)three,
		   odp_all & ~IBV_ACCESS_ON_DEMAND, EFAULT);
	expect_reg(c, "odp_reg_at_null_ok", NULL, 1u << 20, 0, odp_all, 0);
	expect_reg(c, "implicit_reg_ok", NULL, SIZE_MAX, 0, odp_all, 0);
	expect_reg(c, "implicit_reg_iova_4096_einval", NULL, SIZE_MAX, 4096, odp_all, EINVAL);
	expect_reg(c, "plain_reg_null_size_max_einval", NULL, SIZE_MAX, 0, odp_all & ~IBV_ACCESS_ON_DEMAND, EINVAL);
	expect_reg(c, "odp_reg_wrapping_einval", (void *)(UINTPTR_MAX - 100), c->page, UINTPTR_MAX - 100, odp_all,
		   EINVAL);
	munmap(three, c->page);
	munmap(three + 2 * c->page, c->page);
}

/* The implicit MR: memory mapped after it was registered, then memory unmapped. */
static void implicit(struct ctx *c)
{
	struct ibv_mr *imr = ibv_reg_mr(c->pd, NULL, SIZE_MAX, odp_all);
	struct pair p;
	struct ibv_wc wc;
	uint8_t *src, *dst;
	uint64_t v;
	long bad;

	if (!imr)
		die("implicit ibv_reg_mr");
	check(imr->addr == NULL && imr->length == SIZE_MAX && imr->lkey == imr->rkey, "implicit_mr_fields",
	      "addr %p length %zu lkey 0x%x rkey 0x%x", imr->addr, imr->length, imr->lkey, imr->rkey);
	/* Both buffers exist only after the registration. */
	src = map(c, 2);
	dst = map(c, 3);
	new_pair(c, &p);

	fill(src, MSG, SEED_WRITE, 0);
	if (run(p.a, p.cq_a, "implicit_write_into_later_mmap", IBV_WR_RDMA_WRITE, src, MSG, imr->lkey,
		(uintptr_t)dst, imr->rkey, IBV_WC_SUCCESS, 1)) {
		bad = verify(dst, MSG, SEED_WRITE, 0);
		check(bad < 0, "implicit_write_into_later_mmap", "data differs at %ld", bad);
	}
	memset(src + MSG, 0, MSG);
	if (run(p.a, p.cq_a, "implicit_read_from_later_mmap", IBV_WR_RDMA_READ, src + MSG, MSG, imr->lkey,
		(uintptr_t)dst, imr->rkey, IBV_WC_SUCCESS, 2)) {
		bad = verify(src + MSG, MSG, SEED_WRITE, 0);
		check(bad < 0, "implicit_read_from_later_mmap", "data differs at %ld", bad);
	}
	memcpy(dst + 2 * MSG, &(uint64_t){ 100 }, 8);
	if (run(p.a, p.cq_a, "implicit_fetch_add_on_later_mmap", IBV_WR_ATOMIC_FETCH_AND_ADD, src, 8, imr->lkey,
		(uintptr_t)(dst + 2 * MSG), imr->rkey, IBV_WC_SUCCESS, 3)) {
		memcpy(&v, dst + 2 * MSG, 8);
		check(v == 105 && memcmp(src, &(uint64_t){ 100 }, 8) == 0, "implicit_fetch_add_on_later_mmap",
		      "target %" PRIu64 " (want 105)", v);
	}
	post_recv_one(p.b, dst + MSG, MSG, imr->lkey, 10);
	fill(src, MSG, SEED_SEND, 0);
	if (run(p.a, p.cq_a, "implicit_send_posted", IBV_WR_SEND, src, MSG, imr->lkey, 0, 0, IBV_WC_SUCCESS, 4) &&
	    expect_wc(p.cq_b, &wc, "implicit_recv_into_later_mmap", IBV_WC_SUCCESS, IBV_WC_RECV, 10)) {
		bad = verify(dst + MSG, MSG, SEED_SEND, 0);
		check(bad < 0 && wc.byte_len == MSG, "implicit_recv_into_later_mmap", "byte_len %u, differs at %ld",
		      wc.byte_len, bad);
	}

	/* dst's middle page goes away: the peer's WRITE there fails, this process lives on. */
	if (munmap(dst + c->page, c->page))
		die("munmap");
	step(p.a, p.cq_a, "implicit_write_into_munmapped_rem_access_err", IBV_WR_RDMA_WRITE, src, 64, imr->lkey,
	    (uintptr_t)(dst + c->page + 64), imr->rkey, IBV_WC_REM_ACCESS_ERR, 5);
	check(1, "process_alive_after_remote_fault", "-");
	free_pair(&p);
	new_pair(c, &p);
	step(p.a, p.cq_a, "implicit_gather_from_munmapped_loc_prot_err", IBV_WR_SEND, dst + c->page, 64, imr->lkey, 0,
	    0, IBV_WC_LOC_PROT_ERR, 6);
	free_pair(&p);
	new_pair(c, &p);
	step(p.a, p.cq_a, "implicit_write_at_null_page_rem_access_err", IBV_WR_RDMA_WRITE, src, 64, imr->lkey, 64,
	    imr->rkey, IBV_WC_REM_ACCESS_ERR, 7);
	free_pair(&p);

	/* The untouched pages around the hole still work on a fresh pair. */
	new_pair(c, &p);
	fill(src, 64, SEED_HOLE, 0);
	if (run(p.a, p.cq_a, "implicit_write_next_to_hole", IBV_WR_RDMA_WRITE, src, 64, imr->lkey,
		(uintptr_t)(dst + 2 * c->page + 64), imr->rkey, IBV_WC_SUCCESS, 8))
		check(verify(dst + 2 * c->page + 64, 64, SEED_HOLE, 0) < 0, "implicit_write_next_to_hole", "data differs");
	free_pair(&p);

	munmap(dst, c->page);
	munmap(dst + 2 * c->page, c->page);
	munmap(src, 2 * c->page);
	check(ibv_dereg_mr(imr) == 0, "implicit_dereg", "-");
}

/* An explicit ODP MR over a hole: a WRITE into the hole fails, then succeeds once it is mapped. */
static void explicit_hole_mapped_later(struct ctx *c)
{
	uint8_t *three = map(c, 3), *src = map(c, 1);
	struct ibv_mr *mr, *smr;
	struct pair p;
	void *again;

	if (munmap(three + c->page, c->page))
		die("munmap");
	mr = ibv_reg_mr(c->pd, three, 3 * c->page, odp_all);
	smr = ibv_reg_mr(c->pd, src, c->page, IBV_ACCESS_LOCAL_WRITE);
	if (!mr || !smr)
		die("ibv_reg_mr (ODP over a hole / source)");
	fill(src, 256, SEED_HOLE, 0);
	new_pair(c, &p);
	step(p.a, p.cq_a, "odp_write_into_hole_rem_access_err", IBV_WR_RDMA_WRITE, src, 256, smr->lkey,
	    (uintptr_t)(three + c->page), mr->rkey, IBV_WC_REM_ACCESS_ERR, 20);
	free_pair(&p);
	again = mmap(three + c->page, c->page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	if (again != three + c->page)
		die("mmap MAP_FIXED over the hole");
	new_pair(c, &p);
	if (run(p.a, p.cq_a, "odp_write_into_hole_mapped_later", IBV_WR_RDMA_WRITE, src, 256, smr->lkey,
		(uintptr_t)(three + c->page), mr->rkey, IBV_WC_SUCCESS, 21))
		check(verify(three + c->page, 256, SEED_HOLE, 0) < 0, "odp_write_into_hole_mapped_later",
		      "data differs");
	free_pair(&p);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(mr);
	munmap(three, 3 * c->page);
	munmap(src, c->page);
}

static void expect_advise(struct ctx *c, struct ibv_pd *pd, const char *name, int advice, uint32_t flags,
			  struct ibv_sge *sg, uint32_t n, int want)
{
	int r = ibv_advise_mr(pd, (enum ibv_advise_mr_advice)advice, flags, sg, n);
	(void)c;
	check(r == want, name, "ibv_advise_mr returned %d (%s), expected %d (%s)", r, strerror(r), want,
	      strerror(want));
}

static void advise(struct ctx *c)
{
	uint8_t *four = map(c, 4);
	struct ibv_mr *imr = ibv_reg_mr(c->pd, NULL, SIZE_MAX, odp_all);
	struct ibv_mr *emr = ibv_reg_mr(c->pd, four, 2 * c->page, odp_all);
	struct ibv_mr *ro = ibv_reg_mr(c->pd, four, c->page, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_READ);
	struct ibv_mr *plain = ibv_reg_mr(c->pd, four, c->page, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_pd *other = ibv_alloc_pd(c->d.ctx);
	struct ibv_mr *stale = ibv_reg_mr(c->pd, four, c->page, odp_all);
	struct ibv_mw *mw = ibv_alloc_mw(c->pd, IBV_MW_TYPE_1);
	uint32_t stale_key;
	struct ibv_sge sg;

	if (!imr || !emr || !ro || !plain || !other || !stale || !mw)
		die("advise setup");
	stale_key = stale->lkey;
	ibv_dereg_mr(stale);

	/* Page 0 untouched: a synchronous PREFETCH_WRITE through the implicit MR faults it in. */
	check(!resident(c, four), "fresh_page_not_resident", "-");
	sg = (struct ibv_sge){ .addr = (uintptr_t)four, .length = (uint32_t)c->page, .lkey = imr->lkey };
	expect_advise(c, c->pd, "advise_sync_prefetch_write_implicit", IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
		      IBV_ADVISE_MR_FLAG_FLUSH, &sg, 1, 0);
	check(resident(c, four), "sync_prefetch_made_page_resident", "-");
	/* Page 1 untouched: PREFETCH_NO_FAULT faults nothing in; PREFETCH (read) does. */
	sg = (struct ibv_sge){ .addr = (uintptr_t)(four + c->page), .length = 16, .lkey = emr->lkey };
	expect_advise(c, c->pd, "advise_no_fault", IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, IBV_ADVISE_MR_FLAG_FLUSH,
		      &sg, 1, 0);
	check(!resident(c, four + c->page), "no_fault_left_page_alone", "-");
	expect_advise(c, c->pd, "advise_sync_prefetch_read", IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH,
		      &sg, 1, 0);
	check(resident(c, four + c->page), "read_prefetch_made_page_resident", "-");
	expect_advise(c, c->pd, "advise_async_prefetch", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 1, 0);

	/* Errors, each for its cause. */
	if (munmap(four + 3 * c->page, c->page))
		die("munmap");
	sg = (struct ibv_sge){ .addr = (uintptr_t)(four + 3 * c->page), .length = 64, .lkey = imr->lkey };
	expect_advise(c, c->pd, "advise_sync_unmapped_efault", IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH,
		      &sg, 1, EFAULT);
	expect_advise(c, c->pd, "advise_async_unmapped_best_effort", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 1, 0);
	sg = (struct ibv_sge){ .addr = (uintptr_t)four + c->page, .length = (uint32_t)c->page + 1, .lkey = emr->lkey };
	expect_advise(c, c->pd, "advise_past_mr_end_efault", IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH,
		      &sg, 1, EFAULT);
	sg = (struct ibv_sge){ .addr = (uintptr_t)four, .length = 64, .lkey = emr->lkey };
	expect_advise(c, c->pd, "advise_bad_flags_einval", IBV_ADVISE_MR_ADVICE_PREFETCH, 2, &sg, 1, EINVAL);
	expect_advise(c, c->pd, "advise_unknown_advice_eopnotsupp", 7, 0, &sg, 1, EOPNOTSUPP);
	expect_advise(c, c->pd, "advise_no_sge_einval", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 0, EINVAL);
	expect_advise(c, other, "advise_other_pd_eperm", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 1, EPERM);
	sg.lkey = ro->lkey;
	expect_advise(c, c->pd, "advise_read_only_prefetch_ok", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 1, 0);
	expect_advise(c, c->pd, "advise_read_only_prefetch_write_eperm", IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sg, 1,
		      EPERM);
	sg.lkey = plain->lkey;
	expect_advise(c, c->pd, "advise_non_odp_mr_enoent", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 1, ENOENT);
	sg.lkey = stale_key;
	expect_advise(c, c->pd, "advise_stale_key_enoent", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 1, ENOENT);
	sg.lkey = mw->rkey;
	expect_advise(c, c->pd, "advise_window_key_einval", IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sg, 1, EINVAL);

	ibv_dealloc_mw(mw);
	ibv_dereg_mr(plain);
	ibv_dereg_mr(ro);
	ibv_dereg_mr(emr);
	ibv_dereg_mr(imr);
	ibv_dealloc_pd(other);
	munmap(four, 3 * c->page);
}

int main(int argc, char **argv)
{
	struct ctx c;
	int gidx = 1;
	const char *devname = "urxe0";

	setvbuf(stdout, NULL, _IOLBF, 0);
	g_role = "odp";
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-g") == 0 && i + 1 < argc)
			gidx = atoi(argv[++i]);
		else if (strcmp(argv[i], "-d") == 0 && i + 1 < argc)
			devname = argv[++i];
		else {
			fprintf(stderr, "usage: %s [-g gid_index] [-d dev]\n", argv[0]);
			return 64;
		}
	}
	start_watchdog(WATCHDOG_S);
	memset(&c, 0, sizeof(c));
	open_dev(&c.d, devname, gidx);
	c.page = (size_t)sysconf(_SC_PAGESIZE);
	c.pd = ibv_alloc_pd(c.d.ctx);
	if (!c.pd)
		die("ibv_alloc_pd");
	caps(&c);
	registrations(&c);
	implicit(&c);
	explicit_hole_mapped_later(&c);
	advise(&c);
	ibv_dealloc_pd(c.pd);
	ibv_close_device(c.d.ctx);
	return finish();
}
