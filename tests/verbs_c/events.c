/* Completion channels over RC SEND/RECV: ibv_req_notify_cq, a blocking ibv_get_cq_event (bounded
 * by alarm()), ibv_ack_cq_events, poll(2) readiness of channel->fd, O_NONBLOCK giving EAGAIN
 * when no event is pending, and solicited-only notification.
 *
 *   events server [-p port] [-g gid_index] [-d dev]
 *   events client 127.0.0.1 [-p port] [-g gid_index] [-d dev]
 */
#include "common.h"

#define MSG 256u
#define MEM (64u << 10)

struct ctx {
	struct dev d;
	struct ibv_comp_channel *ch;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *mem;
	unsigned events; /* received and not yet acked */
	int cq_cookie;
	struct peer_info me, peer;
};

static void setup(struct ctx *c, const char *devname, int gidx)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;

	open_dev(&c->d, devname, gidx);
	c->ch = ibv_create_comp_channel(c->d.ctx);
	if (!c->ch)
		die("ibv_create_comp_channel");
	c->pd = ibv_alloc_pd(c->d.ctx);
	c->cq = ibv_create_cq(c->d.ctx, 64, &c->cq_cookie, c->ch, 0);
	if (!c->pd || !c->cq)
		die("alloc_pd/create_cq with channel");
	if (posix_memalign((void **)&c->mem, 4096, MEM))
		die("posix_memalign");
	memset(c->mem, 0, MEM);
	c->mr = ibv_reg_mr(c->pd, c->mem, MEM, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr)
		die("ibv_reg_mr");
	memset(&ia, 0, sizeof(ia));
	ia.send_cq = c->cq;
	ia.recv_cq = c->cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = 16;
	ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	c->qp = ibv_create_qp(c->pd, &ia);
	if (!c->qp)
		die("ibv_create_qp");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify QP to INIT");
	srand48(getpid());
	c->me.qpn = c->qp->qp_num;
	c->me.psn = (uint32_t)lrand48() & 0xffffff;
	c->me.lid = c->d.port.lid;
	memcpy(c->me.gid, c->d.gid.raw, 16);
}

static void connect_qp(struct ctx *c)
{
	rc_qp_to_rts(c->qp, &c->me, &c->peer, c->d.gidx, 1);
}

static void set_nonblock(struct ctx *c, int on)
{
	int fl = fcntl(c->ch->fd, F_GETFL);
	if (fl < 0 || fcntl(c->ch->fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) < 0)
		die("fcntl(channel fd)");
}

static void arm(struct ctx *c, int solicited_only, const char *name)
{
	int r = ibv_req_notify_cq(c->cq, solicited_only);
	check(r == 0, name, "ibv_req_notify_cq returned %d", r);
}

/* Expects no event pending: with O_NONBLOCK, ibv_get_cq_event fails with EAGAIN. */
static int expect_no_event(struct ctx *c, const char *name)
{
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	int r;
	set_nonblock(c, 1);
	errno = 0;
	r = ibv_get_cq_event(c->ch, &ev_cq, &ev_ctx);
	if (r == 0)
		c->events++;
	check(r != 0 && errno == EAGAIN, name, "ibv_get_cq_event returned %d errno %d (%s), expected EAGAIN", r, errno,
	      strerror(errno));
	set_nonblock(c, 0);
	return r == 0;
}

/* One event, taken with a blocking ibv_get_cq_event (alarm-bounded) or after poll(2). */
static int get_event(struct ctx *c, int use_poll, const char *name)
{
	struct ibv_cq *ev_cq = NULL;
	void *ev_ctx = NULL;
	int r;
	if (use_poll) {
		struct pollfd p = { .fd = c->ch->fd, .events = POLLIN };
		r = poll(&p, 1, POLL_DEADLINE_MS);
		if (r != 1 || !(p.revents & POLLIN)) {
			check(0, name, "channel fd not readable within %d ms (poll returned %d)", POLL_DEADLINE_MS, r);
			return 0;
		}
	} else {
		alarm(POLL_DEADLINE_MS / 1000 + 5); /* a hang here ends the process via the watchdog */
	}
	r = ibv_get_cq_event(c->ch, &ev_cq, &ev_ctx);
	alarm(WATCHDOG_S);
	if (r) {
		check(0, name, "ibv_get_cq_event failed, errno %d", errno);
		return 0;
	}
	c->events++;
	check(ev_cq == c->cq && ev_ctx == &c->cq_cookie, name, "event for cq %p ctx %p, expected %p %p", (void *)ev_cq,
	      ev_ctx, (void *)c->cq, (void *)&c->cq_cookie);
	return 1;
}

static void post_recv(struct ctx *c, uint64_t id)
{
	struct ibv_sge sge = { (uint64_t)(uintptr_t)(c->mem + id * 1024), 1024, c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(c->qp, &wr, &bad))
		die("ibv_post_recv");
}

static void post_send(struct ctx *c, uint64_t id, unsigned seed, int flags)
{
	uint8_t *p = c->mem + 32768 + id * 1024;
	struct ibv_sge sge = { (uint64_t)(uintptr_t)p, MSG, c->mr->lkey };
	struct ibv_send_wr wr, *bad;
	int r;
	fill(p, MSG, seed, 0);
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = (unsigned)flags;
	r = ibv_post_send(c->qp, &wr, &bad);
	if (r) {
		errno = r;
		die("ibv_post_send");
	}
}

static void expect_recv(struct ctx *c, const char *name, uint64_t id, unsigned seed)
{
	struct ibv_wc wc;
	long bad;
	/* The event said the completion is there: a single non-blocking poll must find it. */
	int r = poll_one(c->cq, &wc, 0);
	if (r != 1) {
		/* Tolerate a slightly late CQE only as a separate failure, so the cause is visible. */
		check(0, name, "event arrived but the CQ was empty");
		if (poll_one(c->cq, &wc, POLL_DEADLINE_MS) != 1)
			return;
	}
	if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.wr_id != id || wc.byte_len != MSG) {
		check(0, name, "status %s opcode %d wr_id %" PRIu64 " byte_len %u", ibv_wc_status_str(wc.status), wc.opcode,
		      wc.wr_id, wc.byte_len);
		return;
	}
	bad = verify(c->mem + id * 1024, MSG, seed, 0);
	check(bad < 0, name, "payload differs at byte %ld", bad);
}

static void expect_send_done(struct ctx *c, const char *name, uint64_t id)
{
	struct ibv_wc wc;
	if (expect_wc(c->cq, &wc, name, IBV_WC_SUCCESS, IBV_WC_SEND, id))
		check(1, name, "-");
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
	setup(&c, devname, gidx);
	fd = is_server ? tcp_server(port) : tcp_client(host, port);
	exchange(fd, &c.me, &c.peer);
	connect_qp(&c);

	expect_no_event(&c, "nonblocking_empty_channel_eagain");

	if (is_server) {
		for (uint64_t i = 0; i < 4; i++)
			post_recv(&c, i);

		/* Round 1: blocking ibv_get_cq_event. */
		arm(&c, 0, "req_notify_cq");
		sync_point(fd, '1');
		if (get_event(&c, 0, "blocking_get_cq_event"))
			expect_recv(&c, "recv_after_event", 0, 1);
		ibv_ack_cq_events(c.cq, c.events);
		c.events = 0;
		expect_no_event(&c, "no_second_event_without_rearm");

		/* Round 2: poll(2) on the channel fd, then the event. */
		arm(&c, 0, "req_notify_cq_rearm");
		sync_point(fd, '2');
		if (get_event(&c, 1, "poll_channel_fd_then_get_event"))
			expect_recv(&c, "recv_after_poll_event", 1, 2);
		ibv_ack_cq_events(c.cq, c.events);
		c.events = 0;

		/* Round 3: solicited-only. An unsolicited SEND must not wake us; the solicited one must. */
		arm(&c, 1, "req_notify_cq_solicited_only");
		sync_point(fd, '3');
		sync_point(fd, '4'); /* the unsolicited SEND has completed at the client */
		usleep(100 * 1000);
		if (expect_no_event(&c, "unsolicited_send_does_not_wake"))
			arm(&c, 1, "req_notify_cq_solicited_only_again"); /* keep the next step meaningful */
		sync_point(fd, '5');
		if (get_event(&c, 0, "solicited_event")) {
			expect_recv(&c, "recv_unsolicited", 2, 3);
			expect_recv(&c, "recv_solicited", 3, 4);
		}
		ibv_ack_cq_events(c.cq, c.events);
		c.events = 0;
		expect_no_event(&c, "no_extra_event_after_solicited");
	} else {
		sync_point(fd, '1');
		post_send(&c, 0, 1, IBV_SEND_SIGNALED);
		expect_send_done(&c, "send_1_completion", 0);
		sync_point(fd, '2');
		post_send(&c, 1, 2, IBV_SEND_SIGNALED);
		expect_send_done(&c, "send_2_completion", 1);
		sync_point(fd, '3');
		post_send(&c, 2, 3, IBV_SEND_SIGNALED);
		expect_send_done(&c, "send_unsolicited_completion", 2);
		sync_point(fd, '4');
		sync_point(fd, '5');
		post_send(&c, 3, 4, IBV_SEND_SIGNALED | IBV_SEND_SOLICITED);
		expect_send_done(&c, "send_solicited_completion", 3);
	}
	sync_point(fd, 'Z');

	check(ibv_destroy_qp(c.qp) == 0, "destroy_qp", "failed");
	check(ibv_destroy_cq(c.cq) == 0, "destroy_cq", "failed");
	check(ibv_destroy_comp_channel(c.ch) == 0, "destroy_comp_channel", "failed");
	check(ibv_dereg_mr(c.mr) == 0, "dereg_mr", "failed");
	check(ibv_dealloc_pd(c.pd) == 0, "dealloc_pd", "failed");
	check(ibv_close_device(c.d.ctx) == 0, "close_device", "failed");
	free(c.mem);
	close(fd);
	return finish();
}
