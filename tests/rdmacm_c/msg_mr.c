/* The rdma_cm program users learn first, over urxe's librdmacm.so.1 and libibverbs.so.1:
 *
 *   server: rdma_getaddrinfo(RAI_PASSIVE) -> rdma_create_ep -> rdma_listen -> rdma_get_request
 *           -> rdma_accept; receives MSG_MR (the client's buffer: address, rkey, length),
 *           RDMA WRITEs a pattern into the client's first half, RDMA READs the client's second
 *           half and checks it byte for byte, sends MSG_DONE, waits for the disconnect.
 *   client: rdma_getaddrinfo -> rdma_create_ep -> rdma_connect; sends MSG_MR, waits for
 *           MSG_DONE, checks the server's pattern in its first half byte for byte, disconnects.
 *
 * Only <rdma/rdma_cma.h> and the inline rdma_post_* / rdma_get_*_comp helpers of
 * <rdma/rdma_verbs.h> (which reach into struct rdma_cm_id: qp, pd, CQs and their channels).
 * Usage: msg_mr -s PORT | msg_mr -c HOST PORT.  Exit 0 only if every byte checked out. */
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HALF 65536
enum { MSG_MR = 1, MSG_DONE = 2 };

struct msg {
	uint32_t type;
	uint32_t rkey;
	uint64_t addr;
	uint64_t len;
};

static uint8_t pattern(size_t i, int which) { return (uint8_t)(i * 7 + which * 101 + (i >> 8)); }

#define CHECK(c, what)                                                   \
	do {                                                             \
		if (!(c)) {                                              \
			perror(what);                                    \
			exit(1);                                         \
		}                                                        \
	} while (0)

static void wait_comp(struct rdma_cm_id *id, int send, enum ibv_wc_opcode want)
{
	struct ibv_wc wc;
	int n = send ? rdma_get_send_comp(id, &wc) : rdma_get_recv_comp(id, &wc);
	CHECK(n == 1, send ? "rdma_get_send_comp" : "rdma_get_recv_comp");
	if (wc.status != IBV_WC_SUCCESS || wc.opcode != want) {
		fprintf(stderr, "completion: status %s opcode %d (want %d)\n", ibv_wc_status_str(wc.status),
			wc.opcode, want);
		exit(1);
	}
}

static struct rdma_cm_id *endpoint(const char *host, const char *port, int passive)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *id;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_flags = passive ? RAI_PASSIVE : 0;
	int rc = rdma_getaddrinfo(host, port, &hints, &res);
	if (rc) {
		fprintf(stderr, "rdma_getaddrinfo: %d\n", rc);
		exit(1);
	}
	memset(&attr, 0, sizeof attr);
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.sq_sig_all = 1;
	CHECK(rdma_create_ep(&id, res, NULL, passive ? &attr : &attr) == 0, "rdma_create_ep");
	rdma_freeaddrinfo(res);
	return id;
}

static int server(const char *port)
{
	struct rdma_cm_id *listen_id = endpoint(NULL, port, 1), *id;
	static struct msg in, out;
	static uint8_t wbuf[HALF], rbuf[HALF];
	CHECK(rdma_listen(listen_id, 1) == 0, "rdma_listen");
	CHECK(rdma_get_request(listen_id, &id) == 0, "rdma_get_request");
	CHECK(id->qp && id->pd && id->send_cq && id->recv_cq && id->send_cq_channel, "endpoint QP/CQs");
	struct ibv_mr *in_mr = rdma_reg_msgs(id, &in, sizeof in);
	struct ibv_mr *out_mr = rdma_reg_msgs(id, &out, sizeof out);
	struct ibv_mr *w_mr = rdma_reg_write(id, wbuf, sizeof wbuf);
	struct ibv_mr *r_mr = rdma_reg_read(id, rbuf, sizeof rbuf);
	CHECK(in_mr && out_mr && w_mr && r_mr, "rdma_reg_*");
	CHECK(rdma_post_recv(id, NULL, &in, sizeof in, in_mr) == 0, "rdma_post_recv");
	CHECK(rdma_accept(id, NULL) == 0, "rdma_accept");
	wait_comp(id, 0, IBV_WC_RECV);
	if (in.type != MSG_MR || in.len != 2 * HALF) {
		fprintf(stderr, "server: bad MSG_MR (type %u len %llu)\n", in.type, (unsigned long long)in.len);
		return 1;
	}
	for (size_t i = 0; i < HALF; i++)
		wbuf[i] = pattern(i, 0);
	CHECK(rdma_post_write(id, NULL, wbuf, HALF, w_mr, 0, in.addr, in.rkey) == 0, "rdma_post_write");
	wait_comp(id, 1, IBV_WC_RDMA_WRITE);
	CHECK(rdma_post_read(id, NULL, rbuf, HALF, r_mr, 0, in.addr + HALF, in.rkey) == 0, "rdma_post_read");
	wait_comp(id, 1, IBV_WC_RDMA_READ);
	for (size_t i = 0; i < HALF; i++)
		if (rbuf[i] != pattern(i, 1)) {
			fprintf(stderr, "server: READ byte %zu is %u, want %u\n", i, rbuf[i], pattern(i, 1));
			return 1;
		}
	out.type = MSG_DONE;
	CHECK(rdma_post_send(id, NULL, &out, sizeof out, out_mr, 0) == 0, "rdma_post_send");
	wait_comp(id, 1, IBV_WC_SEND);
	struct rdma_cm_event *ev;
	/* The client disconnects: the ID's own (private) channel reports it. */
	CHECK(rdma_get_cm_event(id->channel, &ev) == 0, "rdma_get_cm_event");
	if (ev->event != RDMA_CM_EVENT_DISCONNECTED) {
		fprintf(stderr, "server: %s instead of DISCONNECTED\n", rdma_event_str(ev->event));
		return 1;
	}
	rdma_ack_cm_event(ev);
	rdma_disconnect(id);
	rdma_dereg_mr(in_mr);
	rdma_dereg_mr(out_mr);
	rdma_dereg_mr(w_mr);
	rdma_dereg_mr(r_mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen_id);
	printf("server: READ of %d bytes verified, MSG_DONE sent\n", HALF);
	return 0;
}

static int client(const char *host, const char *port)
{
	struct rdma_cm_id *id = endpoint(host, port, 0);
	static struct msg in, out;
	static uint8_t buf[2 * HALF];
	for (size_t i = 0; i < HALF; i++)
		buf[HALF + i] = pattern(i, 1);
	struct ibv_mr *in_mr = rdma_reg_msgs(id, &in, sizeof in);
	struct ibv_mr *out_mr = rdma_reg_msgs(id, &out, sizeof out);
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(in_mr && out_mr && mr, "register");
	CHECK(rdma_post_recv(id, NULL, &in, sizeof in, in_mr) == 0, "rdma_post_recv");
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.responder_resources = 1;
	p.initiator_depth = 1;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	CHECK(rdma_connect(id, &p) == 0, "rdma_connect");
	out.type = MSG_MR;
	out.addr = (uintptr_t)buf;
	out.rkey = mr->rkey;
	out.len = sizeof buf;
	CHECK(rdma_post_send(id, NULL, &out, sizeof out, out_mr, 0) == 0, "rdma_post_send");
	wait_comp(id, 1, IBV_WC_SEND);
	wait_comp(id, 0, IBV_WC_RECV);
	if (in.type != MSG_DONE) {
		fprintf(stderr, "client: message %u instead of MSG_DONE\n", in.type);
		return 1;
	}
	for (size_t i = 0; i < HALF; i++)
		if (buf[i] != pattern(i, 0)) {
			fprintf(stderr, "client: WRITE byte %zu is %u, want %u\n", i, buf[i], pattern(i, 0));
			return 1;
		}
	CHECK(rdma_disconnect(id) == 0, "rdma_disconnect");
	rdma_dereg_mr(in_mr);
	rdma_dereg_mr(out_mr);
	ibv_dereg_mr(mr);
	rdma_destroy_ep(id);
	printf("client: WRITE of %d bytes verified, disconnected\n", HALF);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "-s"))
		return server(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "-c"))
		return client(argv[2], argv[3]);
	fprintf(stderr, "usage: %s -s PORT | -c HOST PORT\n", argv[0]);
	return 2;
}
