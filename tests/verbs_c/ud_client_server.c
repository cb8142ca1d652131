/* UD client/server: Q_Keys and QPNs exchanged over TCP, an AH built from the peer's GID, several
 * SEND/RECV messages up to the port MTU checked byte for byte, with the 40-byte GRH area at the
 * start of each receive buffer (IPv4: bytes 20..40 hold the IPv4 header, whose source address
 * must be the sender's IPv4 from its GID), IBV_WC_GRH and src_qp. A message sent with a wrong
 * Q_Key must be dropped. The server answers each message through an AH made with
 * ibv_create_ah_from_wc, and the client checks the answers the same way.
 *
 *   ud_client_server server [-p port] [-g gid_index] [-d dev]
 *   ud_client_server client 127.0.0.1 [-p port] [-g gid_index] [-d dev]
 */
#include "common.h"

#define GRH_LEN 40u
#define SLOT 8192u
#define NSLOTS 16u
#define SERVER_QKEY 0x11223344u
#define CLIENT_QKEY 0x55667788u
#define N_MSG 5

struct ctx {
	struct dev d;
	struct ibv_pd *pd;
	struct ibv_cq *scq; /* send completions */
	struct ibv_cq *rcq; /* receive completions */
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	struct ibv_ah *ah;
	uint8_t *mem;
	uint32_t mtu_bytes;
	struct peer_info me, peer;
};

static uint32_t mtu_to_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0;
}

static void setup(struct ctx *c, const char *devname, int gidx, uint32_t qkey)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;

	open_dev(&c->d, devname, gidx);
	c->mtu_bytes = mtu_to_bytes(c->d.port.active_mtu);
	check(c->mtu_bytes >= 1024, "port_active_mtu", "active_mtu enum %d", c->d.port.active_mtu);
	if (c->mtu_bytes == 0)
		c->mtu_bytes = 256;
	c->pd = ibv_alloc_pd(c->d.ctx);
	c->scq = ibv_create_cq(c->d.ctx, 64, NULL, NULL, 0);
	c->rcq = ibv_create_cq(c->d.ctx, 64, NULL, NULL, 0);
	if (!c->pd || !c->scq || !c->rcq)
		die("alloc_pd/create_cq");
	if (posix_memalign((void **)&c->mem, 4096, SLOT * NSLOTS * 2))
		die("posix_memalign");
	memset(c->mem, 0, SLOT * NSLOTS * 2);
	c->mr = ibv_reg_mr(c->pd, c->mem, SLOT * NSLOTS * 2, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr)
		die("ibv_reg_mr");

	memset(&ia, 0, sizeof(ia));
	ia.send_cq = c->scq;
	ia.recv_cq = c->rcq;
	ia.qp_type = IBV_QPT_UD;
	ia.cap.max_send_wr = 32;
	ia.cap.max_recv_wr = 32;
	ia.cap.max_send_sge = 2;
	ia.cap.max_recv_sge = 2;
	c->qp = ibv_create_qp(c->pd, &ia);
	if (!c->qp)
		die("ibv_create_qp(UD)");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qkey = qkey;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		die("modify UD QP to INIT");
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE))
		die("modify UD QP to RTR");
	srand48(getpid());
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = (uint32_t)lrand48() & 0xffffff;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("modify UD QP to RTS");

	c->me.qpn = c->qp->qp_num;
	c->me.psn = a.sq_psn;
	c->me.qkey = qkey;
	c->me.lid = c->d.port.lid;
	c->me.len = c->mtu_bytes;
	memcpy(c->me.gid, c->d.gid.raw, 16);
}

static void make_ah(struct ctx *c)
{
	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof(aa));
	aa.is_global = 1;
	memcpy(aa.grh.dgid.raw, c->peer.gid, 16);
	aa.grh.sgid_index = (uint8_t)c->d.gidx;
	aa.grh.hop_limit = 64;
	aa.dlid = c->peer.lid;
	aa.port_num = 1;
	c->ah = ibv_create_ah(c->pd, &aa);
	if (!c->ah)
		die("ibv_create_ah from the peer GID");
}

static void post_recv(struct ctx *c, unsigned slot)
{
	struct ibv_sge sge = { (uint64_t)(uintptr_t)(c->mem + slot * SLOT), SLOT, c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge, .num_sge = 1 }, *bad;
	memset(c->mem + slot * SLOT, 0, SLOT);
	if (ibv_post_recv(c->qp, &wr, &bad))
		die("ibv_post_recv");
}

static void send_msg(struct ctx *c, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey, uint32_t len, unsigned seed,
		     uint64_t wr_id)
{
	uint8_t *p = c->mem + NSLOTS * SLOT; /* send area: second half */
	struct ibv_sge sge = { (uint64_t)(uintptr_t)p, len, c->mr->lkey };
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	char name[64];
	int r;

	fill(p, len, seed, 0);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = qkey;
	r = ibv_post_send(c->qp, &wr, &bad);
	if (r) {
		errno = r;
		die("ibv_post_send(UD, %u bytes)", len);
	}
	snprintf(name, sizeof(name), "ud_send_%u_completion", len);
	if (expect_wc(c->scq, &wc, name, IBV_WC_SUCCESS, IBV_WC_SEND, wr_id))
		check(1, name, "-");
}

/* Waits for one receive and checks it fully; returns the completion for AH-from-WC use. */
static int check_ud_recv(struct ctx *c, const char *tag, uint32_t len, unsigned seed, struct ibv_wc *wc)
{
	char name[96];
	const uint8_t *buf, *ip;
	long bad;
	int r;

	snprintf(name, sizeof(name), "%s_%uB", tag, len);
	r = poll_one(c->rcq, wc, POLL_DEADLINE_MS);
	if (r <= 0) {
		check(0, name, "no receive completion within deadline");
		return 0;
	}
	if (wc->status != IBV_WC_SUCCESS || wc->opcode != IBV_WC_RECV) {
		check(0, name, "status %s opcode %d", ibv_wc_status_str(wc->status), wc->opcode);
		return 0;
	}
	buf = c->mem + wc->wr_id * SLOT;
	ip = buf + 20;
	check(wc->byte_len == len + GRH_LEN, name, "byte_len %u, expected %u (payload + 40-byte GRH)", wc->byte_len,
	      len + GRH_LEN);
	check(wc->wc_flags & IBV_WC_GRH, "wc_flag_grh", "wc_flags 0x%x lacks IBV_WC_GRH", wc->wc_flags);
	check(wc->src_qp == c->peer.qpn, "wc_src_qp", "src_qp 0x%x, expected 0x%x", wc->src_qp, c->peer.qpn);
	check(ip[0] == 0x45 && ip[9] == 17, "grh_ipv4_header", "IPv4 header bytes: ver/ihl 0x%02x proto %u", ip[0],
	      ip[9]);
	check(memcmp(ip + 12, c->peer.gid + 12, 4) == 0, "grh_ipv4_src_is_peer",
	      "IPv4 src %u.%u.%u.%u, peer GID's IPv4 %u.%u.%u.%u", ip[12], ip[13], ip[14], ip[15], c->peer.gid[12],
	      c->peer.gid[13], c->peer.gid[14], c->peer.gid[15]);
	check(memcmp(ip + 16, c->me.gid + 12, 4) == 0, "grh_ipv4_dst_is_us", "IPv4 dst %u.%u.%u.%u", ip[16], ip[17],
	      ip[18], ip[19]);
	bad = verify(buf + GRH_LEN, len, seed, 0);
	check(bad < 0, name, "payload differs at byte %ld", bad);
	return 1;
}

int main(int argc, char **argv)
{
	struct ctx c;
	int is_server = 0, port = 18515, gidx = 1, fd;
	const char *host = NULL, *devname = "urxe0";
	uint32_t sizes[N_MSG];
	struct ibv_wc wc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	parse_args(argc, argv, &is_server, &host, &port, &gidx, &devname);
	start_watchdog(WATCHDOG_S);
	memset(&c, 0, sizeof(c));
	setup(&c, devname, gidx, is_server ? SERVER_QKEY : CLIENT_QKEY);
	fd = is_server ? tcp_server(port) : tcp_client(host, port);
	exchange(fd, &c.me, &c.peer);
	check(c.peer.qkey == (is_server ? CLIENT_QKEY : SERVER_QKEY), "qkey_exchanged", "peer qkey 0x%x",
	      c.peer.qkey);
	make_ah(&c);

	/* Sizes up to the smaller MTU of the two sides. */
	{
		uint32_t mtu = c.mtu_bytes < c.peer.len ? c.mtu_bytes : (uint32_t)c.peer.len;
		uint32_t s[N_MSG] = { 1, 64, 512, 1000, mtu };
		memcpy(sizes, s, sizeof(s));
	}
	for (unsigned i = 0; i < NSLOTS; i++)
		post_recv(&c, i);
	sync_point(fd, 'R');

	if (!is_server) {
		/* Wrong Q_Key first: must be silently dropped, so the next receive is message 0. */
		send_msg(&c, c.ah, c.peer.qpn, c.peer.qkey ^ 0x1u, 77, 99, 999);
		for (unsigned i = 0; i < N_MSG; i++)
			send_msg(&c, c.ah, c.peer.qpn, c.peer.qkey, sizes[i], 20 + i, i);
		for (unsigned i = 0; i < N_MSG; i++)
			check_ud_recv(&c, "ud_reply", sizes[i], 40 + i, &wc);
	} else {
		for (unsigned i = 0; i < N_MSG; i++) {
			if (!check_ud_recv(&c, i == 0 ? "ud_recv_after_bad_qkey" : "ud_recv", sizes[i], 20 + i, &wc))
				continue;
			/* Answer through an AH built from the completion and the GRH. */
			{
				struct ibv_ah *ah = ibv_create_ah_from_wc(c.pd, &wc, (struct ibv_grh *)(c.mem + wc.wr_id * SLOT), 1);
				check(ah != NULL, "create_ah_from_wc", "errno %d", errno);
				if (ah) {
					send_msg(&c, ah, wc.src_qp, c.peer.qkey, sizes[i], 40 + i, 100 + i);
					check(ibv_destroy_ah(ah) == 0, "destroy_ah_from_wc", "failed");
				}
			}
		}
		/* Nothing else may have arrived (the bad-Q_Key message in particular). */
		{
			int r = poll_one(c.rcq, &wc, 300);
			check(r == 0, "ud_bad_qkey_dropped", "unexpected completion wr_id %" PRIu64 " byte_len %u",
			      r > 0 ? wc.wr_id : 0, r > 0 ? wc.byte_len : 0);
		}
	}
	sync_point(fd, 'Z');

	check(ibv_destroy_ah(c.ah) == 0, "destroy_ah", "failed");
	check(ibv_destroy_qp(c.qp) == 0, "destroy_qp", "failed");
	check(ibv_dereg_mr(c.mr) == 0, "dereg_mr", "failed");
	check(ibv_destroy_cq(c.scq) == 0 && ibv_destroy_cq(c.rcq) == 0, "destroy_cq", "failed");
	check(ibv_dealloc_pd(c.pd) == 0, "dealloc_pd", "failed");
	check(ibv_close_device(c.d.ctx) == 0, "close_device", "failed");
	free(c.mem);
	close(fd);
	return finish();
}
