/* UD multicast over urxe: ibv_attach_mcast / ibv_detach_mcast between two processes.
 *
 *   mcast GROUP      (an IPv4 multicast address, e.g. 239.44.0.1; run with URXE_ADDR set)
 *
 * The program forks before any verbs call; parent A and child B each open urxe0 on their own.
 * A attaches two UD QPs (a1, a2) to the group, B one (b1) and keeps a sender QP (bs) that is
 * not attached. Rounds, each of N messages of distinct content sent to the group (destination
 * QPN 0xFFFFFF):
 *   1. bs sends: a1, a2 (process A) and b1 (process B, the sender's own process) each get all N.
 *   2. A detaches a2; bs sends: a1 and b1 get all N, a2 gets nothing.
 *   3. a1 sends: a1 itself (own multicast loops back, as rxe) and b1 get all N.
 *   4. B detaches b1 (its last QP in the group: B leaves the IP group); a1 sends: a1 gets N,
 *      b1 nothing.
 *   5. a3, created with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, attaches and sends: a1 gets all N,
 *      a3 none of its own.
 * Every receive is checked: status, opcode, length, GRH flag and the IPv4 header in the GRH
 * area (destination = the group), source QPN, payload bytes. Error cases: a non-UD QP and a
 * unicast GID are EINVAL, detaching what is not attached is EINVAL, attaching twice is a
 * no-op, destroying an attached QP is EBUSY, BLOCK_SELF_MCAST_LB on an RC QP is EINVAL,
 * query_device reports multicast limits.
 * Processes talk over two pipes; every wait is bounded.
 */
#include "common.h"

#include <sys/wait.h>

#define N 16
#define MSG 200
#define SLOT (MSG + 40)
#define NSLOT (6 * N)
#define QKEY 0x11223344u
#define MCAST_QPN 0xffffffu
#define WAIT_MS 10000
#define QUIET_MS 600

struct ep {
	struct ibv_qp *qp;
	struct ibv_cq *scq, *rcq;
	uint8_t *mem;
	struct ibv_mr *mr;
};

static struct dev d;
static struct ibv_pd *pd;
static union ibv_gid mgid;
static struct in_addr group;
static int rfd, wfd;

static void tell(char c, uint32_t v)
{
	char b[5];
	b[0] = c;
	memcpy(b + 1, &v, 4);
	if (write(wfd, b, 5) != 5)
		die("pipe write");
}

static uint32_t await(char c)
{
	struct pollfd p = { .fd = rfd, .events = POLLIN };
	char b[5];
	uint32_t v;
	size_t got = 0;
	while (got < 5) {
		ssize_t r;
		if (poll(&p, 1, 30000) != 1)
			die("peer did not send '%c' within 30 s", c);
		r = read(rfd, b + got, 5 - got);
		if (r <= 0)
			die("peer gone while waiting for '%c'", c);
		got += (size_t)r;
	}
	if (b[0] != c)
		die("out of step: expected '%c', got '%c'", c, b[0]);
	memcpy(&v, b + 1, 4);
	return v;
}

/* A UD endpoint; `create_flags` != 0 creates its QP with ibv_create_qp_ex and those flags. */
static void make_ep_flags(struct ep *e, uint32_t create_flags)
{
	struct ibv_qp_init_attr_ex ia;
	struct ibv_qp_attr a;

	e->scq = ibv_create_cq(d.ctx, NSLOT, NULL, NULL, 0);
	e->rcq = ibv_create_cq(d.ctx, NSLOT, NULL, NULL, 0);
	e->mem = calloc(NSLOT, SLOT);
	if (!e->scq || !e->rcq || !e->mem)
		die("create_cq/calloc");
	e->mr = ibv_reg_mr(pd, e->mem, NSLOT * SLOT, IBV_ACCESS_LOCAL_WRITE);
	if (!e->mr)
		die("ibv_reg_mr");
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = e->scq;
	ia.recv_cq = e->rcq;
	ia.qp_type = IBV_QPT_UD;
	ia.cap.max_send_wr = NSLOT;
	ia.cap.max_recv_wr = NSLOT;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD;
	ia.pd = pd;
	if (create_flags) {
		ia.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
		ia.create_flags = create_flags;
	}
	e->qp = ibv_create_qp_ex(d.ctx, &ia);
	if (!e->qp)
		die("ibv_create_qp_ex(UD, create_flags 0x%x)", create_flags);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = QKEY;
	if (ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("UD QP to INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(e->qp, &a, IBV_QP_STATE))
		die("UD QP to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("UD QP to RTS");
	for (unsigned i = 0; i < NSLOT; i++) {
		struct ibv_sge sge = { (uint64_t)(uintptr_t)(e->mem + i * SLOT), SLOT, e->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(e->qp, &wr, &bad))
			die("ibv_post_recv");
	}
}

static void make_ep(struct ep *e)
{
	make_ep_flags(e, 0);
}

static void free_ep(struct ep *e)
{
	if (ibv_destroy_qp(e->qp) || ibv_dereg_mr(e->mr) || ibv_destroy_cq(e->scq) || ibv_destroy_cq(e->rcq))
		die("destroying an endpoint");
	free(e->mem);
}

/* Sends N messages of round `seed` from `e` to the group; waits for each send completion. */
static void send_round(struct ep *e, struct ibv_ah *ah, unsigned seed)
{
	static uint8_t buf[MSG];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, MSG, 0);
	struct ibv_wc wc;
	char name[64];
	int ok = 1;
	if (!mr)
		die("ibv_reg_mr(send buffer)");
	for (unsigned i = 0; i < N; i++) {
		struct ibv_sge sge = { (uint64_t)(uintptr_t)buf, MSG, mr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = MCAST_QPN;
		wr.wr.ud.remote_qkey = QKEY;
		fill(buf, MSG, seed, (size_t)i * MSG);
		if (ibv_post_send(e->qp, &wr, &bad))
			die("ibv_post_send to the group");
		snprintf(name, sizeof(name), "round%u_send%u", seed, i);
		if (!expect_wc(e->scq, &wc, name, IBV_WC_SUCCESS, IBV_WC_SEND, i))
			ok = 0;
	}
	check(ok, "send_round", "round %u: a send did not complete", seed);
	ibv_dereg_mr(mr);
}

/* Expects exactly N receives of round `seed` on `e` from QPN `src`, each checked. */
static void recv_round(struct ep *e, const char *who, unsigned seed, uint32_t src)
{
	unsigned got = 0, bad = 0;
	int seen[N] = { 0 };
	char why[160] = "";
	while (got < N) {
		struct ibv_wc wc;
		uint8_t *p;
		uint32_t idx = N;
		int r = poll_one(e->rcq, &wc, WAIT_MS);
		if (r <= 0)
			break;
		got++;
		p = e->mem + wc.wr_id * SLOT;
		if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.byte_len != SLOT ||
		    !(wc.wc_flags & IBV_WC_GRH) || wc.src_qp != src) {
			snprintf(why, sizeof(why), "status %d opcode %d len %u flags 0x%x src_qp 0x%x (want 0x%x)",
				 wc.status, wc.opcode, wc.byte_len, wc.wc_flags, wc.src_qp, src);
			bad++;
			continue;
		}
		if (memcmp(p + 36, &group, 4) != 0) {
			snprintf(why, sizeof(why), "GRH area: IPv4 destination is not the group");
			bad++;
			continue;
		}
		/* Which message: its first byte names it (the pattern differs per position). */
		for (uint32_t i = 0; i < N; i++)
			if (verify(p + 40, MSG, seed, (size_t)i * MSG) < 0)
				idx = i;
		if (idx == N || seen[idx]) {
			snprintf(why, sizeof(why), "payload is no message of round %u (or a duplicate)", seed);
			bad++;
			continue;
		}
		seen[idx] = 1;
	}
	check(got == N && bad == 0, "recv_round", "%s round %u: %u of %d received, %u bad: %s", who, seed, got, N, bad,
	      why);
	printf("%s round %u: %u messages received and verified\n", who, seed, got - bad);
}

/* Nothing may arrive on `e` for QUIET_MS (`what`: why, for the check's name and the output). */
static void recv_none(struct ep *e, const char *who, const char *what)
{
	struct ibv_wc wc;
	char name[64];
	int r = poll_one(e->rcq, &wc, QUIET_MS);
	snprintf(name, sizeof(name), "none_%s", what);
	check(r == 0, name, "%s got a completion (status %d)", who, r > 0 ? (int)wc.status : -1);
	printf("%s %s: %d messages\n", who, what, r > 0 ? 1 : 0);
}

static struct ibv_ah *group_ah(void)
{
	struct ibv_ah_attr aa;
	struct ibv_ah *ah;
	memset(&aa, 0, sizeof(aa));
	aa.is_global = 1;
	aa.grh.dgid = mgid;
	aa.grh.sgid_index = (uint8_t)d.gidx;
	aa.grh.hop_limit = 64;
	aa.port_num = 1;
	ah = ibv_create_ah(pd, &aa);
	if (!ah)
		die("ibv_create_ah to the group");
	return ah;
}

static void open_all(void)
{
	open_dev(&d, "urxe0", 1);
	pd = ibv_alloc_pd(d.ctx);
	if (!pd)
		die("ibv_alloc_pd");
}

static void close_all(void)
{
	if (ibv_dealloc_pd(pd) || ibv_close_device(d.ctx))
		die("dealloc_pd/close_device");
}

static void error_cases(struct ep *a1, struct ep *a2)
{
	struct ibv_device_attr da;
	struct ibv_qp_init_attr ia;
	struct ibv_qp *rc;
	union ibv_gid other = mgid;
	int r;

	if (ibv_query_device(d.ctx, &da))
		die("ibv_query_device");
	check(da.max_mcast_grp > 0 && da.max_mcast_qp_attach >= 2 && da.max_total_mcast_qp_attach >= da.max_mcast_qp_attach,
	      "device_mcast_limits", "max_mcast_grp %d max_mcast_qp_attach %d max_total_mcast_qp_attach %d",
	      da.max_mcast_grp, da.max_mcast_qp_attach, da.max_total_mcast_qp_attach);

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = a1->scq;
	ia.recv_cq = a1->rcq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	rc = ibv_create_qp(pd, &ia);
	if (!rc)
		die("ibv_create_qp(RC)");
	r = ibv_attach_mcast(rc, &mgid, 0);
	check(r == EINVAL, "attach_rc_qp_einval", "ibv_attach_mcast(RC QP) returned %d", r);
	ibv_destroy_qp(rc);
	{
		struct ibv_qp_init_attr_ex ix;
		memset(&ix, 0, sizeof(ix));
		ix.send_cq = a1->scq;
		ix.recv_cq = a1->rcq;
		ix.qp_type = IBV_QPT_RC;
		ix.cap = ia.cap;
		ix.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
		ix.pd = pd;
		ix.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
		rc = ibv_create_qp_ex(d.ctx, &ix);
		check(rc == NULL && errno == EINVAL, "block_self_lb_rc_einval", "RC QP with BLOCK_SELF_MCAST_LB: %p errno %d",
		      (void *)rc, errno);
		if (rc)
			ibv_destroy_qp(rc);
	}

	r = ibv_attach_mcast(a1->qp, &d.gid, 0);
	check(r == EINVAL, "attach_unicast_gid_einval", "ibv_attach_mcast(unicast GID) returned %d", r);
	r = ibv_attach_mcast(a1->qp, &mgid, 0);
	check(r == 0, "attach_twice_is_noop", "second ibv_attach_mcast returned %d", r);
	other.raw[15] ^= 0x5a;
	r = ibv_detach_mcast(a2->qp, &other, 0);
	check(r == EINVAL, "detach_unattached_einval", "ibv_detach_mcast(another group) returned %d", r);
	r = ibv_destroy_qp(a2->qp);
	check(r == EBUSY, "destroy_attached_ebusy", "ibv_destroy_qp(attached QP) returned %d", r);
}

static int run_a(void)
{
	struct ep a1, a2, a3;
	struct ibv_ah *ah;
	uint32_t bs, r;

	g_role = "A";
	open_all();
	make_ep(&a1);
	make_ep(&a2);
	make_ep_flags(&a3, IBV_QP_CREATE_BLOCK_SELF_MCAST_LB);
	r = (uint32_t)ibv_attach_mcast(a1.qp, &mgid, 0);
	check(r == 0, "attach_a1", "ibv_attach_mcast returned %u", r);
	r = (uint32_t)ibv_attach_mcast(a2.qp, &mgid, 0);
	check(r == 0, "attach_a2", "ibv_attach_mcast returned %u", r);
	error_cases(&a1, &a2);
	ah = group_ah();
	tell('r', 0);

	bs = await('1');
	recv_round(&a1, "A/a1", 1, bs);
	recv_round(&a2, "A/a2", 1, bs);
	r = (uint32_t)ibv_detach_mcast(a2.qp, &mgid, 0);
	check(r == 0, "detach_a2", "ibv_detach_mcast returned %u", r);
	r = (uint32_t)ibv_detach_mcast(a2.qp, &mgid, 0);
	check(r == EINVAL, "detach_twice_einval", "second ibv_detach_mcast returned %u", r);
	tell('2', 0);

	await('3');
	recv_round(&a1, "A/a1", 2, bs);
	recv_none(&a2, "A/a2", "after_detach");
	send_round(&a1, ah, 3);
	recv_round(&a1, "A/a1 (own)", 3, a1.qp->qp_num);
	tell('4', a1.qp->qp_num);

	await('5');
	send_round(&a1, ah, 4);
	recv_round(&a1, "A/a1 (own)", 4, a1.qp->qp_num);
	tell('6', 0);

	/* a3 blocks its own multicast loopback: a1 gets a3's messages, a3 none of them. */
	r = (uint32_t)ibv_attach_mcast(a3.qp, &mgid, 0);
	check(r == 0, "attach_a3", "ibv_attach_mcast returned %u", r);
	send_round(&a3, ah, 5);
	recv_round(&a1, "A/a1 (from a3)", 5, a3.qp->qp_num);
	recv_none(&a3, "A/a3", "own_blocked");
	r = (uint32_t)ibv_detach_mcast(a3.qp, &mgid, 0);
	check(r == 0, "detach_a3", "ibv_detach_mcast returned %u", r);

	await('7');
	r = (uint32_t)ibv_detach_mcast(a1.qp, &mgid, 0);
	check(r == 0, "detach_a1", "ibv_detach_mcast returned %u", r);
	ibv_destroy_ah(ah);
	free_ep(&a1);
	free_ep(&a2);
	free_ep(&a3);
	close_all();
	return finish();
}

static int run_b(void)
{
	struct ep b1, bs;
	struct ibv_ah *ah;
	uint32_t a1, r;

	g_role = "B";
	open_all();
	make_ep(&b1);
	make_ep(&bs);
	r = (uint32_t)ibv_attach_mcast(b1.qp, &mgid, 0);
	check(r == 0, "attach_b1", "ibv_attach_mcast returned %u", r);
	ah = group_ah();
	await('r');

	send_round(&bs, ah, 1);
	recv_round(&b1, "B/b1", 1, bs.qp->qp_num);
	tell('1', bs.qp->qp_num);

	await('2');
	send_round(&bs, ah, 2);
	recv_round(&b1, "B/b1", 2, bs.qp->qp_num);
	tell('3', 0);

	a1 = await('4');
	recv_round(&b1, "B/b1", 3, a1);
	r = (uint32_t)ibv_detach_mcast(b1.qp, &mgid, 0);
	check(r == 0, "detach_b1", "ibv_detach_mcast returned %u", r);
	tell('5', 0);

	await('6');
	recv_none(&b1, "B/b1", "after_detach");
	ibv_destroy_ah(ah);
	free_ep(&b1);
	free_ep(&bs);
	close_all();
	tell('7', 0);
	return finish();
}

int main(int argc, char **argv)
{
	int to_b[2], to_a[2], status = 0, rc;
	pid_t pid;

	if (argc != 2 || inet_pton(AF_INET, argv[1], &group) != 1 || (ntohl(group.s_addr) >> 28) != 0xe) {
		fprintf(stderr, "usage: %s IPV4_MULTICAST_GROUP\n", argv[0]);
		return 64;
	}
	memset(&mgid, 0, sizeof(mgid));
	mgid.raw[10] = mgid.raw[11] = 0xff;
	memcpy(&mgid.raw[12], &group, 4);
	start_watchdog(WATCHDOG_S);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (pipe(to_b) || pipe(to_a))
		die("pipe");
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		rfd = to_b[0];
		wfd = to_a[1];
		close(to_b[1]);
		close(to_a[0]);
		return run_b();
	}
	rfd = to_a[0];
	wfd = to_b[1];
	close(to_a[1]);
	close(to_b[0]);
	rc = run_a();
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		printf("FAIL B exited with status 0x%x\n", status);
		return 1;
	}
	printf("both processes passed\n");
	return rc;
}
