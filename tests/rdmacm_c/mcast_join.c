/* rdma_cm multicast in one process, over urxe's librdmacm.so.1 and libibverbs.so.1:
 *
 *   A: an ID on an event channel, UD QP, rdma_join_multicast (full member): the
 *      MULTICAST_JOIN event carries the context, QPN 0xFFFFFF, Q_Key 0x01234567 and an AH
 *      to ::ffff:GROUP; A's QP is attached when the event is taken.
 *   B: a synchronous ID (NULL channel), UD QP, rdma_join_multicast_ex as a send-only member:
 *      the call returns with the join event in id->event; B's QP is not attached.
 * Then: B sends to the group -> A receives it, B does not; A sends -> A receives its own
 * message (multicast loopback), B nothing; after rdma_leave_multicast(A) nothing reaches A.
 * Errors: join_ex without JOIN_FLAGS, with flags 2, with an unknown comp_mask bit; a unicast
 * address; a second join of one address; a leave of what was not joined; a join on a TCP
 * port-space (RC) ID.
 *
 *   mcast_join LOCAL_IPV4 GROUP_IPV4        (run with URXE_ADDR=LOCAL_IPV4)
 * Prints one line per check; exit 0 only if all passed. */
#include <arpa/inet.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MSG 64
#define SLOT (MSG + 40)
#define NRECV 8

static int failures, checks;

static void check(int ok, const char *name, const char *why)
{
	checks++;
	if (ok) {
		printf("PASS %s\n", name);
	} else {
		failures++;
		printf("FAIL %s: %s\n", name, why);
	}
	fflush(stdout);
}

#define DIE(what)                                                          \
	do {                                                               \
		printf("FAIL fatal: %s (errno %d: %s)\n", what, errno, strerror(errno)); \
		exit(2);                                                   \
	} while (0)

struct node {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *mem;
	struct ibv_ah *ah;
	uint32_t qpn, qkey;
};

static struct sockaddr_in sin_of(const char *ip)
{
	struct sockaddr_in a;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
		fprintf(stderr, "not an IPv4 address: %s\n", ip);
		exit(64);
	}
	return a;
}

static void setup(struct node *n, struct rdma_event_channel *ch, struct sockaddr_in *local, struct sockaddr_in *group)
{
	struct ibv_qp_init_attr qa;
	struct rdma_cm_event *ev;
	if (rdma_create_id(ch, &n->id, n, RDMA_PS_UDP))
		DIE("rdma_create_id");
	if (rdma_resolve_addr(n->id, (struct sockaddr *)local, (struct sockaddr *)group, 2000))
		DIE("rdma_resolve_addr");
	if (ch) {
		if (rdma_get_cm_event(ch, &ev) || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
			DIE("ADDR_RESOLVED");
		rdma_ack_cm_event(ev);
	}
	n->pd = ibv_alloc_pd(n->id->verbs);
	n->cq = ibv_create_cq(n->id->verbs, 2 * NRECV, NULL, NULL, 0);
	n->mem = calloc(NRECV + 1, SLOT);
	if (!n->pd || !n->cq || !n->mem)
		DIE("pd/cq/calloc");
	n->mr = ibv_reg_mr(n->pd, n->mem, (NRECV + 1) * SLOT, IBV_ACCESS_LOCAL_WRITE);
	if (!n->mr)
		DIE("ibv_reg_mr");
	memset(&qa, 0, sizeof qa);
	qa.send_cq = qa.recv_cq = n->cq;
	qa.qp_type = IBV_QPT_UD;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = NRECV;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(n->id, n->pd, &qa))
		DIE("rdma_create_qp");
	for (int i = 0; i < NRECV; i++) {
		struct ibv_sge sge = { (uintptr_t)(n->mem + (i + 1) * SLOT), SLOT, n->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i + 1, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(n->id->qp, &wr, &bad))
			DIE("ibv_post_recv");
	}
}

static void use_join(struct node *n, struct rdma_cm_event *ev, const char *who, const uint8_t *mgid)
{
	char why[200];
	struct rdma_ud_param *ud = &ev->param.ud;
	snprintf(why, sizeof why, "event %d status %d qp_num 0x%x qkey 0x%x private_data %p (want %p) is_global %d",
		 ev->event, ev->status, ud->qp_num, ud->qkey, ud->private_data, (void *)n,
		 ud->ah_attr.is_global);
	check(ev->event == RDMA_CM_EVENT_MULTICAST_JOIN && ev->status == 0 && ud->qp_num == 0xffffff &&
		      ud->qkey == RDMA_UDP_QKEY && ud->private_data == n && ud->ah_attr.is_global &&
		      memcmp(ud->ah_attr.grh.dgid.raw, mgid, 16) == 0,
	      who, why);
	n->ah = ibv_create_ah(n->pd, &ud->ah_attr);
	if (!n->ah)
		DIE("ibv_create_ah from the join event");
	n->qpn = ud->qp_num;
	n->qkey = ud->qkey;
}

static void send_one(struct node *n, uint8_t tag)
{
	struct ibv_wc wc;
	memset(n->mem, tag, MSG);
	struct ibv_sge sge = { (uintptr_t)n->mem, MSG, n->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 99, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	wr.wr.ud.ah = n->ah;
	wr.wr.ud.remote_qpn = n->qpn;
	wr.wr.ud.remote_qkey = n->qkey;
	if (ibv_post_send(n->id->qp, &wr, &bad))
		DIE("ibv_post_send to the group");
	for (int i = 0; i < 100000000; i++) {
		int r = ibv_poll_cq(n->cq, 1, &wc);
		if (r < 0)
			DIE("ibv_poll_cq");
		if (r == 1) {
			if (wc.wr_id != 99 || wc.status != IBV_WC_SUCCESS)
				DIE("send completion");
			return;
		}
	}
	DIE("no send completion");
}

/* The tag of the message that arrives on `n` within `ms`, or -1. */
static int recv_tag(struct node *n, unsigned ms)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int r = ibv_poll_cq(n->cq, 1, &wc);
		if (r < 0)
			DIE("ibv_poll_cq");
		if (r == 1) {
			uint8_t *p = n->mem + wc.wr_id * SLOT + 40;
			if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.byte_len != SLOT)
				return -2;
			for (int i = 1; i < MSG; i++)
				if (p[i] != p[0])
					return -3;
			return p[0];
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > (long)ms)
			return -1;
		usleep(100);
	}
}

static void expect(int got, int want, const char *name)
{
	char why[64];
	snprintf(why, sizeof why, "got %d, want %d", got, want);
	check(got == want, name, why);
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *rc_id;
	struct rdma_cm_join_mc_attr_ex jx;
	struct node a = { 0 }, b = { 0 };
	struct sockaddr_in local, group, unicast;
	uint8_t mgid[16] = { 0 };
	int r;

	if (argc != 3)
		return fprintf(stderr, "usage: %s LOCAL_IPV4 GROUP_IPV4\n", argv[0]), 64;
	alarm(60);
	local = sin_of(argv[1]);
	group = sin_of(argv[2]);
	unicast = local;
	mgid[10] = mgid[11] = 0xff;
	memcpy(mgid + 12, &group.sin_addr, 4);
	ch = rdma_create_event_channel();
	if (!ch)
		DIE("rdma_create_event_channel");

	setup(&a, ch, &local, &group);
	setup(&b, NULL, &local, &group);

	if (rdma_join_multicast(a.id, (struct sockaddr *)&group, &a))
		DIE("rdma_join_multicast(A)");
	if (rdma_get_cm_event(ch, &ev))
		DIE("rdma_get_cm_event");
	use_join(&a, ev, "A_join_event", mgid);
	rdma_ack_cm_event(ev);

	memset(&jx, 0, sizeof jx);
	jx.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	jx.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	jx.addr = (struct sockaddr *)&group;
	if (rdma_join_multicast_ex(b.id, &jx, &b))
		DIE("rdma_join_multicast_ex(B, send-only)");
	check(b.id->event != NULL, "B_sync_join_keeps_event", "id->event is NULL after a synchronous join");
	if (b.id->event)
		use_join(&b, b.id->event, "B_join_event", mgid);

	/* Errors. */
	jx.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS;
	r = rdma_join_multicast_ex(b.id, &jx, NULL);
	expect(r == -1 ? errno : 0, EINVAL, "join_ex_without_flags_einval");
	jx.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	jx.join_flags = 2;
	r = rdma_join_multicast_ex(b.id, &jx, NULL);
	expect(r == -1 ? errno : 0, EINVAL, "join_ex_bad_flags_einval");
	jx.comp_mask |= 1u << 7;
	jx.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
	r = rdma_join_multicast_ex(b.id, &jx, NULL);
	expect(r == -1 ? errno : 0, EOPNOTSUPP, "join_ex_unknown_mask_eopnotsupp");
	r = rdma_join_multicast(a.id, (struct sockaddr *)&unicast, NULL);
	expect(r == -1 ? errno : 0, EINVAL, "join_unicast_einval");
	r = rdma_join_multicast(a.id, (struct sockaddr *)&group, NULL);
	expect(r == -1 ? errno : 0, EADDRINUSE, "join_twice_eaddrinuse");
	r = rdma_leave_multicast(a.id, (struct sockaddr *)&unicast);
	expect(r == -1 ? errno : 0, EADDRNOTAVAIL, "leave_unjoined_eaddrnotavail");
	if (rdma_create_id(ch, &rc_id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id(TCP)");
	if (rdma_resolve_addr(rc_id, (struct sockaddr *)&local, (struct sockaddr *)&group, 2000) ||
	    rdma_get_cm_event(ch, &ev))
		DIE("resolve (TCP)");
	rdma_ack_cm_event(ev);
	r = rdma_join_multicast(rc_id, (struct sockaddr *)&group, NULL);
	expect(r == -1 ? errno : 0, EINVAL, "join_on_rc_id_einval");
	rdma_destroy_id(rc_id);

	/* Traffic. */
	send_one(&b, 0x41);
	expect(recv_tag(&a, 5000), 0x41, "A_gets_B_send_only_message");
	expect(recv_tag(&b, 300), -1, "B_send_only_gets_nothing");
	send_one(&a, 0x42);
	expect(recv_tag(&a, 5000), 0x42, "A_gets_its_own_message");
	expect(recv_tag(&b, 300), -1, "B_send_only_still_nothing");
	r = rdma_leave_multicast(a.id, (struct sockaddr *)&group);
	expect(r, 0, "A_leaves");
	send_one(&b, 0x43);
	expect(recv_tag(&a, 500), -1, "A_after_leave_gets_nothing");
	r = rdma_leave_multicast(b.id, (struct sockaddr *)&group);
	expect(r, 0, "B_leaves");

	ibv_destroy_ah(a.ah);
	ibv_destroy_ah(b.ah);
	for (struct node *n = &a; n; n = n == &a ? &b : NULL) {
		rdma_destroy_qp(n->id);
		ibv_dereg_mr(n->mr);
		ibv_destroy_cq(n->cq);
		ibv_dealloc_pd(n->pd);
		free(n->mem);
		rdma_destroy_id(n->id);
	}
	rdma_destroy_event_channel(ch);
	printf("%d checks, %d failed\n", checks, failures);
	return failures == 0 && checks > 0 ? 0 : 1;
}
