/* RC client/server, the classic flow: exchange QPN/PSN/GID/rkey/address over TCP, connect an RC
 * QP, then check byte for byte: SEND/RECV (0 B, 1 B, 4 KiB, 1 MiB scattered over several SGEs on
 * both sides), RDMA WRITE, RDMA READ, RDMA WRITE WITH IMM, atomic FETCH_ADD and CMP_SWAP, an
 * inline SEND, an unsignaled-then-signaled sequence and, last, an RDMA WRITE with a wrong rkey
 * (IBV_WC_REM_ACCESS_ERR at the client, server memory untouched).
 *
 *   rc_client_server server [-p port] [-g gid_index] [-d dev]
 *   rc_client_server client 127.0.0.1 [-p port] [-g gid_index] [-d dev]
 */
#include "common.h"

#define MEM_SIZE (4u << 20)
/* Server memory layout (offsets into its registered region). */
#define SLOT_SIZE 8192u
#define OFF_RX_SMALL 0u /* 32 receive slots of 8 KiB */
#define OFF_RX_BIG (256u << 10) /* the 1 MiB receive, 3 SGEs with gaps */
#define OFF_WRITE (2u << 20) /* RDMA WRITE / READ target, 64 KiB */
#define WRITE_LEN (64u << 10)
#define OFF_IMM (OFF_WRITE + WRITE_LEN) /* WRITE WITH IMM target, 4 KiB */
#define IMM_LEN 4096u
#define OFF_ATOMIC (3u << 20) /* two u64 */
#define OFF_NEG (OFF_ATOMIC + 4096u) /* wrong-rkey target, 4 KiB, must stay untouched */
#define NEG_LEN 4096u

#define BIG_LEN (1u << 20)
static const uint32_t big_rx_off[3] = { 0, 400000, 900000 };
static const uint32_t big_rx_len[3] = { 300000, 400000, 348576 };

#define N_UNSIG 8
#define UNSIG_LEN 100u
#define IMM_VALUE 0x12345678u
#define FADD_INIT 1000u
#define CSWAP_INIT 0xdeadbeefcafef00dull
#define CSWAP_NEW 0x0123456789abcdefull

/* Receive order at the server (RC receives are consumed in order). */
enum { R_SEND0, R_SEND1, R_SEND4K, R_SEND1M, R_IMM, R_INLINE, R_UNSIG0, R_COUNT = R_UNSIG0 + N_UNSIG };
static const uint32_t send_sizes[4] = { 0, 1, 4096, BIG_LEN };
static const unsigned send_seeds[4] = { 1, 2, 3, 4 };
#define SEED_WRITE 5
#define SEED_IMM 6
#define SEED_INLINE 8
#define SEED_NEG 9
#define SEED_UNSIG 10

struct ctx {
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *mem;
	uint32_t max_inline;
	struct peer_info me, peer;
};

static void setup(struct ctx *c, const char *devname, int gidx, int remote_access)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;
	int access = IBV_ACCESS_LOCAL_WRITE;

	open_dev(&c->d, devname, gidx);
	c->pd = ibv_alloc_pd(c->d.ctx);
	if (!c->pd)
		die("ibv_alloc_pd");
	c->cq = ibv_create_cq(c->d.ctx, 256, NULL, NULL, 0);
	if (!c->cq)
		die("ibv_create_cq");
	if (posix_memalign((void **)&c->mem, 4096, MEM_SIZE))
		die("posix_memalign");
	memset(c->mem, 0, MEM_SIZE);
	if (remote_access)
		access |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	c->mr = ibv_reg_mr(c->pd, c->mem, MEM_SIZE, access);
	if (!c->mr)
		die("ibv_reg_mr");

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = c->cq;
	ia.recv_cq = c->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 0;
	ia.cap.max_send_wr = 64;
	ia.cap.max_recv_wr = 64;
	ia.cap.max_send_sge = 4;
	ia.cap.max_recv_sge = 4;
	ia.cap.max_inline_data = 64;
	c->qp = ibv_create_qp(c->pd, &ia);
	if (!c->qp)
		die("ibv_create_qp(RC)");
	c->max_inline = ia.cap.max_inline_data;
	check(c->max_inline >= 64, "create_qp_inline_cap", "max_inline_data %u < 64 requested", c->max_inline);

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = remote_access ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_ATOMIC :
					    0;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");

	srand48(getpid() * 7919L + (long)now_ms());
	c->me.qpn = c->qp->qp_num;
	c->me.psn = (uint32_t)lrand48() & 0xffffff;
	c->me.rkey = c->mr->rkey;
	c->me.addr = (uint64_t)(uintptr_t)c->mem;
	c->me.len = MEM_SIZE;
	c->me.lid = c->d.port.lid;
	memcpy(c->me.gid, c->d.gid.raw, 16);
}

static void connect_qp(struct ctx *c)
{
	union ibv_gid peer_gid;
	char s[64];

	memcpy(peer_gid.raw, c->peer.gid, 16);
	gid_str(&peer_gid, s, sizeof(s));
	printf("local qpn 0x%06x psn 0x%06x; remote qpn 0x%06x psn 0x%06x gid %s rkey 0x%x addr 0x%" PRIx64
	       " len %" PRIu64 "\n",
	       c->me.qpn, c->me.psn, c->peer.qpn, c->peer.psn, s, c->peer.rkey, c->peer.addr, c->peer.len);
	check(gid_is_v4_loopback(&peer_gid), "peer_gid_v4_mapped", "peer gid %s", s);
	/* One user's processes share their address and its GID, as on a NIC. */
	check(memcmp(c->peer.gid, c->me.gid, 16) == 0, "peer_gid_shared", "peer gid %s differs from ours", s);

	rc_qp_to_rts(c->qp, &c->me, &c->peer, c->d.gidx, 4);

	{
		struct ibv_qp_attr q;
		struct ibv_qp_init_attr qi;
		int ok;
		memset(&q, 0, sizeof(q));
		ok = ibv_query_qp(c->qp, &q, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi) == 0;
		check(ok && q.qp_state == IBV_QPS_RTS && q.dest_qp_num == c->peer.qpn, "query_qp_rts",
		      "query_qp ok=%d state %d dest_qpn 0x%x", ok, q.qp_state, q.dest_qp_num);
	}
}

static void post_recv_sges(struct ctx *c, uint64_t wr_id, struct ibv_sge *sge, int n)
{
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = sge, .num_sge = n }, *bad;
	if (ibv_post_recv(c->qp, &wr, &bad))
		die("ibv_post_recv wr_id %" PRIu64, wr_id);
}

static void post_recv_slot(struct ctx *c, uint64_t wr_id, unsigned slot)
{
	struct ibv_sge sge = { .addr = (uint64_t)(uintptr_t)(c->mem + OFF_RX_SMALL + slot * SLOT_SIZE),
			       .length = SLOT_SIZE,
			       .lkey = c->mr->lkey };
	post_recv_sges(c, wr_id, &sge, 1);
}

static void check_recv(struct ctx *c, const char *name, uint64_t wr_id, uint32_t len, unsigned seed,
		       const uint8_t *data)
{
	struct ibv_wc wc;
	long bad;
	if (!expect_wc(c->cq, &wc, name, IBV_WC_SUCCESS, IBV_WC_RECV, wr_id))
		return;
	if (wc.byte_len != len) {
		check(0, name, "byte_len %u, expected %u", wc.byte_len, len);
		return;
	}
	bad = data ? verify(data, len, seed, 0) : -1;
	check(bad < 0, name, "payload differs at byte %ld", bad);
}

/* ------------------------------------------------------------------ server */

static void server(struct ctx *c, int fd)
{
	struct ibv_wc wc;
	uint64_t *atom = (uint64_t *)(c->mem + OFF_ATOMIC);
	long bad;

	/* Receives in the order the client's messages arrive. */
	post_recv_slot(c, R_SEND0, 0);
	post_recv_slot(c, R_SEND1, 1);
	post_recv_slot(c, R_SEND4K, 2);
	{
		struct ibv_sge sge[3];
		for (int i = 0; i < 3; i++) {
			sge[i].addr = (uint64_t)(uintptr_t)(c->mem + OFF_RX_BIG + big_rx_off[i]);
			sge[i].length = big_rx_len[i];
			sge[i].lkey = c->mr->lkey;
		}
		post_recv_sges(c, R_SEND1M, sge, 3);
	}
	post_recv_slot(c, R_IMM, 4);
	post_recv_slot(c, R_INLINE, 5);
	for (unsigned i = 0; i < N_UNSIG; i++)
		post_recv_slot(c, R_UNSIG0 + i, 6 + i);

	atom[0] = FADD_INIT;
	atom[1] = CSWAP_INIT;
	fill(c->mem + OFF_NEG, NEG_LEN, SEED_NEG, 0);
	sync_point(fd, 'R');

	/* SEND/RECV of four sizes. */
	check_recv(c, "recv_0B", R_SEND0, 0, send_seeds[0], NULL);
	check_recv(c, "recv_1B", R_SEND1, 1, send_seeds[1], c->mem + OFF_RX_SMALL + 1 * SLOT_SIZE);
	check_recv(c, "recv_4KiB", R_SEND4K, 4096, send_seeds[2], c->mem + OFF_RX_SMALL + 2 * SLOT_SIZE);
	if (expect_wc(c->cq, &wc, "recv_1MiB_3sge", IBV_WC_SUCCESS, IBV_WC_RECV, R_SEND1M)) {
		size_t pos = 0;
		bad = -1;
		for (int i = 0; i < 3 && bad < 0; i++) {
			long b = verify(c->mem + OFF_RX_BIG + big_rx_off[i], big_rx_len[i], send_seeds[3], pos);
			if (b >= 0)
				bad = (long)pos + b;
			pos += big_rx_len[i];
		}
		check(wc.byte_len == BIG_LEN && bad < 0, "recv_1MiB_3sge", "byte_len %u, first bad byte %ld",
		      wc.byte_len, bad);
	}

	/* RDMA WRITE landed (client reads it back itself too). */
	sync_point(fd, 'W');
	bad = verify(c->mem + OFF_WRITE, WRITE_LEN, SEED_WRITE, 0);
	check(bad < 0, "rdma_write_landed", "server memory differs at byte %ld", bad);

	/* WRITE WITH IMM: consumes a receive, carries the immediate. */
	if (expect_wc(c->cq, &wc, "write_imm_completion", IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, R_IMM)) {
		check((wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == IMM_VALUE, "write_imm_imm_data",
		      "wc_flags 0x%x imm_data 0x%08x (host order), expected 0x%08x", wc.wc_flags, ntohl(wc.imm_data),
		      IMM_VALUE);
		check(wc.byte_len == IMM_LEN, "write_imm_byte_len", "byte_len %u, expected %u", wc.byte_len, IMM_LEN);
		bad = verify(c->mem + OFF_IMM, IMM_LEN, SEED_IMM, 0);
		check(bad < 0, "write_imm_landed", "server memory differs at byte %ld", bad);
		check(c->mem[OFF_RX_SMALL + 4 * SLOT_SIZE] == 0, "write_imm_recv_buffer_untouched",
		      "the receive buffer was written");
	}

	/* Atomics. */
	sync_point(fd, 'A');
	check(atom[0] == FADD_INIT + 5 + 7, "atomic_fetch_add_memory", "memory %" PRIu64 ", expected %u", atom[0],
	      FADD_INIT + 12);
	check(atom[1] == CSWAP_NEW, "atomic_cmp_swap_memory", "memory 0x%" PRIx64 ", expected 0x%llx", atom[1],
	      CSWAP_NEW);

	/* Inline SEND. */
	{
		uint32_t n = 0;
		xfer(fd, &n, sizeof(n), 0);
		check_recv(c, "recv_inline", R_INLINE, n, SEED_INLINE, c->mem + OFF_RX_SMALL + 5 * SLOT_SIZE);
	}

	/* Unsignaled-then-signaled: every message arrives. */
	for (unsigned i = 0; i < N_UNSIG; i++) {
		char name[64];
		snprintf(name, sizeof(name), "recv_unsignaled_seq_%u", i);
		check_recv(c, name, R_UNSIG0 + i, UNSIG_LEN, SEED_UNSIG + i,
			   c->mem + OFF_RX_SMALL + (6 + i) * SLOT_SIZE);
	}

	/* Wrong rkey: nothing may land. */
	sync_point(fd, 'N');
	bad = verify(c->mem + OFF_NEG, NEG_LEN, SEED_NEG, 0);
	check(bad < 0, "wrong_rkey_memory_untouched", "server memory changed at byte %ld", bad);
	sync_point(fd, 'Z');
}

/* ------------------------------------------------------------------ client */

static void post_send1(struct ctx *c, struct ibv_send_wr *wr, const char *what)
{
	struct ibv_send_wr *bad = NULL;
	int r = ibv_post_send(c->qp, wr, &bad);
	if (r) {
		errno = r;
		die("ibv_post_send (%s)", what);
	}
}

static void client(struct ctx *c, int fd)
{
	struct ibv_wc wc;
	struct ibv_send_wr wr;
	struct ibv_sge sge[4];
	uint64_t raddr = c->peer.addr;
	uint32_t rkey = c->peer.rkey;
	long bad;

	check(c->peer.len == MEM_SIZE, "peer_len", "peer region length %" PRIu64, c->peer.len);
	sync_point(fd, 'R');

	/* SEND 0 B, 1 B, 4 KiB from one SGE; 1 MiB from 4 SGEs spread over our region. */
	for (int k = 0; k < 4; k++) {
		uint32_t len = send_sizes[k];
		char name[64];
		int nsge = len == BIG_LEN ? 4 : (len ? 1 : 0);
		memset(&wr, 0, sizeof(wr));
		if (nsge == 4) {
			/* 4 pieces of 256 KiB at offsets 0, 512K, 1M+4K, 2M+8K (gaps between them). */
			static const uint32_t off[4] = { 0, 512u << 10, (1u << 20) + 4096, (2u << 20) + 8192 };
			for (int i = 0; i < 4; i++) {
				fill(c->mem + off[i], 256u << 10, send_seeds[k], (size_t)i * (256u << 10));
				sge[i].addr = (uint64_t)(uintptr_t)(c->mem + off[i]);
				sge[i].length = 256u << 10;
				sge[i].lkey = c->mr->lkey;
			}
		} else if (nsge == 1) {
			fill(c->mem, len, send_seeds[k], 0);
			sge[0].addr = (uint64_t)(uintptr_t)c->mem;
			sge[0].length = len;
			sge[0].lkey = c->mr->lkey;
		}
		wr.wr_id = 100 + (uint64_t)k;
		wr.sg_list = nsge ? sge : NULL;
		wr.num_sge = nsge;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		snprintf(name, sizeof(name), "send_%uB_completion", len);
		post_send1(c, &wr, name);
		if (expect_wc(c->cq, &wc, name, IBV_WC_SUCCESS, IBV_WC_SEND, 100 + (uint64_t)k))
			check(1, name, "-");
	}

	/* RDMA WRITE 64 KiB (2 SGEs) into the server, then READ it back into zeroed memory. */
	fill(c->mem, WRITE_LEN / 2, SEED_WRITE, 0);
	fill(c->mem + (1u << 20), WRITE_LEN / 2, SEED_WRITE, WRITE_LEN / 2);
	sge[0] = (struct ibv_sge){ (uint64_t)(uintptr_t)c->mem, WRITE_LEN / 2, c->mr->lkey };
	sge[1] = (struct ibv_sge){ (uint64_t)(uintptr_t)(c->mem + (1u << 20)), WRITE_LEN / 2, c->mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 200;
	wr.sg_list = sge;
	wr.num_sge = 2;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr + OFF_WRITE;
	wr.wr.rdma.rkey = rkey;
	post_send1(c, &wr, "rdma write");
	if (expect_wc(c->cq, &wc, "rdma_write_completion", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 200))
		check(1, "rdma_write_completion", "-");

	memset(c->mem + (2u << 20), 0, WRITE_LEN);
	sge[0] = (struct ibv_sge){ (uint64_t)(uintptr_t)(c->mem + (2u << 20)), WRITE_LEN, c->mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 201;
	wr.sg_list = sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr + OFF_WRITE;
	wr.wr.rdma.rkey = rkey;
	post_send1(c, &wr, "rdma read");
	if (expect_wc(c->cq, &wc, "rdma_read_completion", IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 201)) {
		bad = verify(c->mem + (2u << 20), WRITE_LEN, SEED_WRITE, 0);
		check(bad < 0, "rdma_read_back", "read data differs at byte %ld", bad);
	}
	sync_point(fd, 'W');

	/* RDMA WRITE WITH IMM. */
	fill(c->mem, IMM_LEN, SEED_IMM, 0);
	sge[0] = (struct ibv_sge){ (uint64_t)(uintptr_t)c->mem, IMM_LEN, c->mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 300;
	wr.sg_list = sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(IMM_VALUE);
	wr.wr.rdma.remote_addr = raddr + OFF_IMM;
	wr.wr.rdma.rkey = rkey;
	post_send1(c, &wr, "write with imm");
	if (expect_wc(c->cq, &wc, "write_imm_send_completion", IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 300))
		check(1, "write_imm_send_completion", "-");

	/* Atomics on the server's two u64 (8-byte aligned). Results land in host byte order. */
	{
		uint64_t *res = (uint64_t *)(c->mem + (3u << 20));
		struct {
			const char *name;
			enum ibv_wr_opcode op;
			uint64_t off, add_or_cmp, swap, expect_orig;
		} steps[] = {
			{ "atomic_fetch_add_5", IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 5, 0, FADD_INIT },
			{ "atomic_fetch_add_7", IBV_WR_ATOMIC_FETCH_AND_ADD, 0, 7, 0, FADD_INIT + 5 },
			{ "atomic_cmp_swap_match", IBV_WR_ATOMIC_CMP_AND_SWP, 8, CSWAP_INIT, CSWAP_NEW, CSWAP_INIT },
			{ "atomic_cmp_swap_mismatch", IBV_WR_ATOMIC_CMP_AND_SWP, 8, 0, 42, CSWAP_NEW },
		};
		for (unsigned i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
			res[i] = 0x5555555555555555ull;
			sge[0] = (struct ibv_sge){ (uint64_t)(uintptr_t)&res[i], 8, c->mr->lkey };
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = 400 + i;
			wr.sg_list = sge;
			wr.num_sge = 1;
			wr.opcode = steps[i].op;
			wr.send_flags = IBV_SEND_SIGNALED;
			wr.wr.atomic.remote_addr = raddr + OFF_ATOMIC + steps[i].off;
			wr.wr.atomic.rkey = rkey;
			wr.wr.atomic.compare_add = steps[i].add_or_cmp;
			wr.wr.atomic.swap = steps[i].swap;
			post_send1(c, &wr, steps[i].name);
			if (expect_wc(c->cq, &wc, steps[i].name, IBV_WC_SUCCESS,
				      steps[i].op == IBV_WR_ATOMIC_FETCH_AND_ADD ? IBV_WC_FETCH_ADD : IBV_WC_COMP_SWAP,
				      400 + i))
				check(res[i] == steps[i].expect_orig, steps[i].name,
				      "returned original 0x%" PRIx64 ", expected 0x%" PRIx64, res[i],
				      steps[i].expect_orig);
		}
		/* Read both words back over the wire too. */
		memset(&res[8], 0, 16);
		sge[0] = (struct ibv_sge){ (uint64_t)(uintptr_t)&res[8], 16, c->mr->lkey };
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 410;
		wr.sg_list = sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_RDMA_READ;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.rdma.remote_addr = raddr + OFF_ATOMIC;
		wr.wr.rdma.rkey = rkey;
		post_send1(c, &wr, "atomic read back");
		if (expect_wc(c->cq, &wc, "atomic_read_back", IBV_WC_SUCCESS, IBV_WC_RDMA_READ, 410))
			check(res[8] == FADD_INIT + 12 && res[9] == CSWAP_NEW, "atomic_read_back",
			      "read 0x%" PRIx64 " 0x%" PRIx64, res[8], res[9]);
	}
	sync_point(fd, 'A');

	/* Inline SEND from a stack buffer outside any MR, overwritten right after posting. */
	{
		uint8_t stackbuf[64];
		uint32_t n = c->max_inline < sizeof(stackbuf) ? c->max_inline : (uint32_t)sizeof(stackbuf);
		if (n == 0)
			n = 1; /* let the post fail visibly rather than skip */
		fill(stackbuf, n, SEED_INLINE, 0);
		sge[0] = (struct ibv_sge){ (uint64_t)(uintptr_t)stackbuf, n, 0 };
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 500;
		wr.sg_list = sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		xfer(fd, &n, sizeof(n), 1);
		post_send1(c, &wr, "inline send");
		memset(stackbuf, 0xee, sizeof(stackbuf));
		if (expect_wc(c->cq, &wc, "inline_send_completion", IBV_WC_SUCCESS, IBV_WC_SEND, 500))
			check(1, "inline_send_completion", "%u bytes", n);
	}

	/* Unsignaled sends, then one signaled: exactly one completion, for the last. */
	{
		struct ibv_wc extra;
		int r;
		for (unsigned i = 0; i < N_UNSIG; i++) {
			uint8_t *p = c->mem + (size_t)i * 4096;
			fill(p, UNSIG_LEN, SEED_UNSIG + i, 0);
			sge[0] = (struct ibv_sge){ (uint64_t)(uintptr_t)p, UNSIG_LEN, c->mr->lkey };
			memset(&wr, 0, sizeof(wr));
			wr.wr_id = 600 + i;
			wr.sg_list = sge;
			wr.num_sge = 1;
			wr.opcode = IBV_WR_SEND;
			wr.send_flags = i == N_UNSIG - 1 ? IBV_SEND_SIGNALED : 0;
			post_send1(c, &wr, "unsignaled send");
		}
		if (expect_wc(c->cq, &wc, "unsignaled_then_signaled", IBV_WC_SUCCESS, IBV_WC_SEND, 600 + N_UNSIG - 1))
			check(1, "unsignaled_then_signaled", "-");
		r = poll_one(c->cq, &extra, 200);
		check(r == 0, "unsignaled_no_extra_completion", "got a completion for wr_id 0x%" PRIx64,
		      r > 0 ? extra.wr_id : 0);
	}

	/* Last: RDMA WRITE with a wrong rkey -> remote access error; QP ends in ERR. */
	{
		uint32_t wrong = rkey ^ 0x00a5a500u;
		fill(c->mem, NEG_LEN, SEED_NEG + 50, 0);
		sge[0] = (struct ibv_sge){ (uint64_t)(uintptr_t)c->mem, NEG_LEN, c->mr->lkey };
		memset(&wr, 0, sizeof(wr));
		wr.wr_id = 700;
		wr.sg_list = sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.rdma.remote_addr = raddr + OFF_NEG;
		wr.wr.rdma.rkey = wrong;
		post_send1(c, &wr, "wrong-rkey write");
		if (expect_wc(c->cq, &wc, "wrong_rkey_rem_access_err", IBV_WC_REM_ACCESS_ERR, -1, 700))
			check(1, "wrong_rkey_rem_access_err", "-");
		{
			struct ibv_qp_attr q;
			struct ibv_qp_init_attr qi;
			int ok;
			memset(&q, 0, sizeof(q));
			ok = ibv_query_qp(c->qp, &q, IBV_QP_STATE, &qi) == 0;
			check(ok && q.qp_state == IBV_QPS_ERR, "qp_in_err_after_remote_error", "state %d", q.qp_state);
		}
	}
	sync_point(fd, 'N');
	sync_point(fd, 'Z');
}

int main(int argc, char **argv)
{
	struct ctx c;
	int is_server = 0, port = 18515, gidx = 1, fd;
	const char *host = NULL, *devname = "urxe0";

	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_args(argc, argv, &is_server, &host, &port, &gidx, &devname);
	start_watchdog(WATCHDOG_S);
	memset(&c, 0, sizeof(c));
	setup(&c, devname, gidx, is_server);
	fd = is_server ? tcp_server(port) : tcp_client(host, port);
	exchange(fd, &c.me, &c.peer);
	connect_qp(&c);
	if (is_server)
		server(&c, fd);
	else
		client(&c, fd);

	check(ibv_destroy_qp(c.qp) == 0, "destroy_qp", "failed");
	check(ibv_dereg_mr(c.mr) == 0, "dereg_mr", "failed");
	check(ibv_destroy_cq(c.cq) == 0, "destroy_cq", "failed");
	check(ibv_dealloc_pd(c.pd) == 0, "dealloc_pd", "failed");
	check(ibv_close_device(c.d.ctx) == 0, "close_device", "failed");
	free(c.mem);
	close(fd);
	return finish();
}
