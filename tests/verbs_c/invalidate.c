/* Remote invalidation and index checks through the real ABI.
 *
 * Two RC connections between server (the target) and client (the peer):
 *  - QP 1: the client sends SEND_WITH_INVALIDATE naming the server's plain MR. An MR from
 *    ibv_reg_mr cannot be invalidated remotely (only type 2 memory windows and fast-register
 *    MRs can): the server's receive fails with IBV_WC_REM_INV_REQ_ERR, the client's send with
 *    IBV_WC_REM_INV_REQ_ERR, and the MR stays valid - the client then WRITEs and READs it
 *    through QP 2 and the server sees the bytes.
 *  - QP 2: the server binds a type 2 window over the MR; the client WRITEs through it, then
 *    invalidates it with SEND_WITH_INVALIDATE (the server's completion carries IBV_WC_WITH_INV
 *    and the window's rkey), and a WRITE through the window afterwards is refused with
 *    IBV_WC_REM_ACCESS_ERR.
 * The server also checks that every index a verb takes is range-checked with EINVAL:
 * GID index, port number, P_Key index, in query_gid/query_gid_ex/query_pkey, create_ah and
 * modify_qp.
 */
#include "common.h"

#define BUF 4096
#define WIN_OFF 1024
#define WIN_LEN 1024

struct side {
	struct ibv_pd *pd;
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	struct ibv_mr *mr;
	uint8_t *mem;
	struct peer_info me[2], peer[2];
};

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		die("ibv_create_qp");
	return qp;
}

static void to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");
}

static void post_recv(struct side *s, int q, uint64_t id, size_t off)
{
	struct ibv_sge sg = { .addr = (uintptr_t)(s->mem + off), .length = 64, .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sg, .num_sge = 1 }, *bad;
	if (ibv_post_recv(s->qp[q], &wr, &bad))
		die("ibv_post_recv");
}

static void post(struct side *s, int q, uint64_t id, enum ibv_wr_opcode op, size_t off, uint32_t len,
		 uint64_t raddr, uint32_t rkey, uint32_t inv)
{
	struct ibv_sge sg = { .addr = (uintptr_t)(s->mem + off), .length = len, .lkey = s->mr->lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &sg;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (op == IBV_WR_SEND_WITH_INV)
		wr.invalidate_rkey = inv;
	if (ibv_post_send(s->qp[q], &wr, &bad))
		die("ibv_post_send opcode %d", op);
}

/* Every index a verb takes is checked: only port 1, GID indices 0..gid_tbl_len-1 (of which the
 * first 4 are populated) and P_Key index 0 exist. */
static void index_checks(struct dev *d, struct side *s)
{
	union ibv_gid g;
	uint16_t pkey;
	struct ibv_gid_entry ge;
	struct ibv_device_attr da;
	int tbl = d->port.gid_tbl_len;
	int r;

	check(tbl == 16, "gid_table_has_16_slots", "gid_tbl_len %d", tbl);
	/* Slots 0..3 hold the device's GID; the rest are empty, as on kernel devices. */
	struct ibv_gid_entry table[16];
	ssize_t n = ibv_query_gid_table(d->ctx, table, 16, 0);
	check(n == 4, "gid_table_has_4_entries", "ibv_query_gid_table %zd", n);
	r = ibv_query_gid(d->ctx, 1, 4, &g);
	int zero = 1;
	for (int i = 0; i < 16; i++)
		zero &= g.raw[i] == 0;
	check(r == 0 && zero, "query_gid_empty_entry_zero_gid", "returned %d zero %d", r, zero);
	r = ibv_query_gid_ex(d->ctx, 1, 4, &ge, 0);
	check(r == ENODATA, "query_gid_ex_empty_entry_enodata", "returned %d", r);
	errno = 0;
	r = ibv_query_gid(d->ctx, 1, tbl, &g);
	check(r == -1 && errno == EINVAL, "query_gid_index_past_table_einval", "returned %d errno %d", r, errno);
	errno = 0;
	r = ibv_query_gid(d->ctx, 1, -1, &g);
	check(r == -1 && errno == EINVAL, "query_gid_negative_index_einval", "returned %d errno %d", r, errno);
	errno = 0;
	r = ibv_query_gid(d->ctx, 2, 0, &g);
	check(r == -1 && errno == EINVAL, "query_gid_port_2_einval", "returned %d errno %d", r, errno);
	r = ibv_query_gid_ex(d->ctx, 1, (uint32_t)tbl, &ge, 0);
	check(r == EINVAL, "query_gid_ex_index_past_table_einval", "returned %d", r);
	errno = 0;
	r = ibv_query_pkey(d->ctx, 1, 1, &pkey);
	check(r == -1 && errno == EINVAL, "query_pkey_index_1_einval", "returned %d errno %d", r, errno);
	errno = 0;
	r = ibv_query_pkey(d->ctx, 0, 0, &pkey);
	check(r == -1 && errno == EINVAL, "query_pkey_port_0_einval", "returned %d errno %d", r, errno);
	check(ibv_query_device(d->ctx, &da) == 0 && da.phys_port_cnt == 1, "one_port", "phys_port_cnt %d",
	      da.phys_port_cnt);

	/* Keys carry random bits: eight fresh MRs are not index << 8 with one shared low byte
	 * (all eight low bytes equal by chance: 255^-7). */
	struct ibv_mr *mrs[8];
	int same_low = 1, sequence = 1;
	for (int i = 0; i < 8; i++) {
		mrs[i] = ibv_reg_mr(s->pd, s->mem, 64, IBV_ACCESS_LOCAL_WRITE);
		if (!mrs[i])
			die("ibv_reg_mr %d", i);
		same_low &= (mrs[i]->lkey & 0xff) == (mrs[0]->lkey & 0xff);
		sequence &= i == 0 || mrs[i]->lkey - mrs[i - 1]->lkey == 0x100;
	}
	check(!same_low && !sequence, "mr_keys_carry_random_bits", "keys 0x%x 0x%x 0x%x ...", mrs[0]->lkey,
	      mrs[1]->lkey, mrs[2]->lkey);
	for (int i = 0; i < 8; i++)
		ibv_dereg_mr(mrs[i]);

	/* create_ah: sgid_index and port_num. */
	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof(aa));
	aa.is_global = 1;
	memcpy(aa.grh.dgid.raw, d->gid.raw, 16);
	aa.grh.hop_limit = 64;
	aa.port_num = 1;
	aa.grh.sgid_index = 200;
	errno = 0;
	struct ibv_ah *ah = ibv_create_ah(s->pd, &aa);
	check(!ah && errno == EINVAL, "create_ah_sgid_index_200_einval", "ah %p errno %d", (void *)ah, errno);
	aa.grh.sgid_index = (uint8_t)tbl;
	errno = 0;
	ah = ibv_create_ah(s->pd, &aa);
	check(!ah && errno == EINVAL, "create_ah_sgid_index_past_table_einval", "ah %p errno %d", (void *)ah, errno);
	aa.grh.sgid_index = (uint8_t)n;
	errno = 0;
	ah = ibv_create_ah(s->pd, &aa);
	check(!ah && errno == EINVAL, "create_ah_empty_gid_entry_einval", "ah %p errno %d", (void *)ah, errno);
	aa.grh.sgid_index = 1;
	aa.port_num = 2;
	errno = 0;
	ah = ibv_create_ah(s->pd, &aa);
	check(!ah && errno == EINVAL, "create_ah_port_2_einval", "ah %p errno %d", (void *)ah, errno);
	aa.port_num = 1;
	aa.grh.sgid_index = (uint8_t)(n - 1);
	ah = ibv_create_ah(s->pd, &aa);
	check(ah != NULL, "create_ah_last_gid_index_ok", "errno %d", errno);
	if (ah)
		check(ibv_destroy_ah(ah) == 0, "destroy_ah", "failed");

	/* modify_qp: port_num, pkey_index, then sgid_index of the AV. */
	struct ibv_cq *cq = ibv_create_cq(d->ctx, 4, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq");
	struct ibv_qp *qp = make_qp(s->pd, cq);
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 2;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	check(r == EINVAL, "modify_qp_port_2_einval", "returned %d", r);
	a.port_num = 0;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	check(r == EINVAL, "modify_qp_port_0_einval", "returned %d", r);
	a.port_num = 1;
	a.pkey_index = 1;
	r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	check(r == EINVAL, "modify_qp_pkey_index_1_einval", "returned %d", r);
	to_init(qp);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = qp->qp_num;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, d->gid.raw, 16);
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	a.ah_attr.grh.sgid_index = 100;
	r = ibv_modify_qp(qp, &a, rtr);
	check(r == EINVAL, "modify_qp_sgid_index_100_einval", "returned %d", r);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	check(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_INIT,
	      "qp_still_init_after_bad_sgid_index", "state %d", qa.qp_state);
	a.ah_attr.grh.sgid_index = 1;
	r = ibv_modify_qp(qp, &a, rtr);
	check(r == 0, "modify_qp_sgid_index_1_ok", "returned %d", r);
	check(ibv_destroy_qp(qp) == 0, "destroy_index_qp", "failed");
	check(ibv_destroy_cq(cq) == 0, "destroy_index_cq", "failed");
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
	memset(s.mem, 0, BUF);
	s.mr = ibv_reg_mr(s.pd, s.mem, BUF,
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
	if (!s.mr)
		die("ibv_reg_mr");
	for (int q = 0; q < 2; q++) {
		s.cq[q] = ibv_create_cq(d.ctx, 32, NULL, NULL, 0);
		if (!s.cq[q])
			die("ibv_create_cq");
		s.qp[q] = make_qp(s.pd, s.cq[q]);
		to_init(s.qp[q]);
		s.me[q].qpn = s.qp[q]->qp_num;
		s.me[q].psn = 0x1000u * (unsigned)(q + 1);
		s.me[q].rkey = s.mr->rkey;
		s.me[q].addr = (uintptr_t)s.mem;
		s.me[q].len = BUF;
		memcpy(s.me[q].gid, d.gid.raw, 16);
	}
	if (is_server)
		index_checks(&d, &s);

	fd = is_server ? tcp_server(port) : tcp_client(host, port);
	for (int q = 0; q < 2; q++) {
		exchange(fd, &s.me[q], &s.peer[q]);
		rc_qp_to_rts(s.qp[q], &s.me[q], &s.peer[q], gidx, 1);
	}

	if (is_server) {
		post_recv(&s, 0, 10, 0);
		post_recv(&s, 1, 20, 64);
		post_recv(&s, 1, 21, 128);

		/* A type 2 window over [WIN_OFF, WIN_OFF + WIN_LEN) of the MR, bound on QP 2. */
		struct ibv_mw *mw = ibv_alloc_mw(s.pd, IBV_MW_TYPE_2);
		if (!mw)
			die("ibv_alloc_mw type 2");
		uint32_t wkey = ibv_inc_rkey(mw->rkey);
		struct ibv_send_wr wr, *bad;
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 30;
		wr.opcode = IBV_WR_BIND_MW;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.bind_mw.mw = mw;
		wr.bind_mw.rkey = wkey;
		wr.bind_mw.bind_info.mr = s.mr;
		wr.bind_mw.bind_info.addr = (uintptr_t)(s.mem + WIN_OFF);
		wr.bind_mw.bind_info.length = WIN_LEN;
		wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
		if (ibv_post_send(s.qp[1], &wr, &bad))
			die("ibv_post_send BIND_MW");
		if (expect_wc(s.cq[1], &wc, "type2_bind_completes", IBV_WC_SUCCESS, IBV_WC_BIND_MW, 30))
			check(1, "type2_bind_completes", "ok");
		xfer(fd, &wkey, sizeof(wkey), 1);

		/* Step 1: SEND_WITH_INV naming the plain MR. */
		sync_point(fd, '1');
		if (expect_wc(s.cq[0], &wc, "send_inv_of_mr_recv_rem_inv_req_err", IBV_WC_REM_INV_REQ_ERR, -1, 10))
			check(1, "send_inv_of_mr_recv_rem_inv_req_err", "ok");
		/* Step 2: the MR still works, remotely (the client WRITEs then READs through QP 2). */
		sync_point(fd, '2');
		long bad_at = verify(s.mem + 2048, 512, 7, 0);
		check(bad_at < 0, "mr_still_valid_remote_write_landed", "mismatch at byte %ld", bad_at);
		/* Step 3: a WRITE through the window, then SEND_WITH_INV naming the window. */
		sync_point(fd, '3');
		bad_at = verify(s.mem + WIN_OFF, 256, 9, 0);
		check(bad_at < 0, "write_through_window_landed", "mismatch at byte %ld", bad_at);
		if (expect_wc(s.cq[1], &wc, "send_inv_of_type2_mw_recv", IBV_WC_SUCCESS, IBV_WC_RECV, 20)) {
			check(wc.wc_flags & IBV_WC_WITH_INV, "send_inv_of_type2_mw_with_inv_flag", "wc_flags 0x%x",
			      wc.wc_flags);
			check(wc.invalidated_rkey == wkey, "send_inv_of_type2_mw_invalidated_rkey",
			      "invalidated_rkey 0x%x, window 0x%x", wc.invalidated_rkey, wkey);
		}
		/* Step 4: the window is invalid now: the client's WRITE through it fails. */
		sync_point(fd, '4');
		check(verify(s.mem + WIN_OFF, 256, 9, 0) < 0, "window_write_after_invalidate_wrote_nothing",
		      "window bytes changed");
		/* The window is unbound: it deallocates, and the MR deregisters at the end. */
		check(ibv_dealloc_mw(mw) == 0, "dealloc_mw", "failed");
	} else {
		uint32_t wkey = 0;
		xfer(fd, &wkey, sizeof(wkey), 0);
		check(wkey != s.peer[1].rkey, "window_key_differs_from_mr_key", "both 0x%x", wkey);

		/* Step 1: SEND_WITH_INV naming the server's MR: refused. */
		fill(s.mem, 32, 1, 0);
		post(&s, 0, 1, IBV_WR_SEND_WITH_INV, 0, 32, 0, 0, s.peer[0].rkey);
		if (expect_wc(s.cq[0], &wc, "send_inv_of_mr_refused_rem_inv_req_err", IBV_WC_REM_INV_REQ_ERR, -1, 1))
			check(1, "send_inv_of_mr_refused_rem_inv_req_err", "ok");
		sync_point(fd, '1');

		/* Step 2: the MR's rkey still works for WRITE and READ through the other QP. */
		fill(s.mem + 512, 512, 7, 0);
		post(&s, 1, 2, IBV_WR_RDMA_WRITE, 512, 512, s.peer[1].addr + 2048, s.peer[1].rkey, 0);
		if (expect_wc(s.cq[1], &wc, "mr_still_valid_write", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 2))
			check(1, "mr_still_valid_write", "ok");
		memset(s.mem + 1024, 0, 512);
		post(&s, 1, 3, IBV_WR_RDMA_READ, 1024, 512, s.peer[1].addr + 2048, s.peer[1].rkey, 0);
		if (expect_wc(s.cq[1], &wc, "mr_still_valid_read", IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 3)) {
			long bad_at = verify(s.mem + 1024, 512, 7, 0);
			check(bad_at < 0, "mr_still_valid_read_data", "mismatch at byte %ld", bad_at);
		}
		sync_point(fd, '2');

		/* Step 3: WRITE through the window, then invalidate it remotely. */
		fill(s.mem + 2048, 256, 9, 0);
		post(&s, 1, 4, IBV_WR_RDMA_WRITE, 2048, 256, s.peer[1].addr + WIN_OFF, wkey, 0);
		if (expect_wc(s.cq[1], &wc, "write_through_window", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 4))
			check(1, "write_through_window", "ok");
		post(&s, 1, 5, IBV_WR_SEND_WITH_INV, 0, 16, 0, 0, wkey);
		if (expect_wc(s.cq[1], &wc, "send_inv_of_type2_mw", IBV_WC_SUCCESS, IBV_WC_SEND, 5))
			check(1, "send_inv_of_type2_mw", "ok");
		sync_point(fd, '3');

		/* Step 4: the window no longer grants access. */
		fill(s.mem + 2048, 256, 11, 0);
		post(&s, 1, 6, IBV_WR_RDMA_WRITE, 2048, 256, s.peer[1].addr + WIN_OFF, wkey, 0);
		if (expect_wc(s.cq[1], &wc, "write_through_invalidated_window_rem_access_err", IBV_WC_REM_ACCESS_ERR,
			      -1, 6))
			check(1, "write_through_invalidated_window_rem_access_err", "ok");
		sync_point(fd, '4');
	}
	sync_point(fd, 'Z');

	for (int q = 0; q < 2; q++) {
		check(ibv_destroy_qp(s.qp[q]) == 0, "destroy_qp", "failed");
		check(ibv_destroy_cq(s.cq[q]) == 0, "destroy_cq", "failed");
	}
	check(ibv_dereg_mr(s.mr) == 0, "dereg_mr", "failed");
	check(ibv_dealloc_pd(s.pd) == 0, "dealloc_pd", "failed");
	check(ibv_close_device(d.ctx) == 0, "close_device", "failed");
	free(s.mem);
	close(fd);
	return finish();
}
