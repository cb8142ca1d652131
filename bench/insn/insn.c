/* bench/insn/insn.c - a requester and a responder process over urxe's libibverbs.so.1, for
 * counting whole-process instructions per message with callgrind (bench/instructions.sh).
 *
 *   insn send64|write4k N
 *
 * Forks: the parent is the requester, the child the responder; they swap QPN and GID over
 * pipes and connect one RC QP each. The requester sends N messages (64-byte SENDs or 4 KiB
 * RDMA WRITEs) in bursts of 16, each burst's last WR signaled, and waits for that completion
 * on a completion channel (blocking, no busy poll: a spinning wait would count however long
 * the peer took). The responder keeps 64 receives posted (SENDs) and waits on its channel
 * too; for WRITEs it only waits for the requester's "done". Each prints its role and pid (so
 * callgrind's per-process totals can be told apart) and exits 0.
 * Whatever the counts include beyond the messages (start-up, connection) cancels out in
 * bench/instructions.sh's difference of two runs. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BURST 16
#define RECVS 64
#define GID_INDEX 1

struct info { uint32_t qpn; union ibv_gid gid; uint64_t addr; uint32_t rkey; };

static void die(const char *what) { fprintf(stderr, "insn: %s failed\n", what); exit(1); }

static void xfer(int fd, void *p, size_t n, int out) {
  char *c = p;
  while (n > 0) {
    ssize_t k = out ? write(fd, c, n) : read(fd, c, n);
    if (k <= 0) die(out ? "pipe write" : "pipe read");
    c += k; n -= (size_t)k;
  }
}

/* Returns 1..max completions of `cq` (all successful), blocking on `ch` while there are none:
 * poll; if empty, arm, poll again (a completion may have come before the arming), then wait. */
static int take(struct ibv_comp_channel *ch, struct ibv_cq *cq, struct ibv_wc *wc, int max) {
  for (int armed = 0;; armed = !armed) {
    int n = ibv_poll_cq(cq, max, wc);
    if (n < 0) die("ibv_poll_cq");
    for (int i = 0; i < n; i++)
      if (wc[i].status != IBV_WC_SUCCESS) { fprintf(stderr, "insn: wc status %d\n", wc[i].status); exit(1); }
    if (n > 0) return n;
    if (!armed) {
      if (ibv_req_notify_cq(cq, 0)) die("ibv_req_notify_cq");
    } else {
      struct ibv_cq *ev;
      void *c;
      if (ibv_get_cq_event(ch, &ev, &c)) die("ibv_get_cq_event");
      ibv_ack_cq_events(ev, 1);
    }
  }
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "send64") && strcmp(argv[1], "write4k"))) {
    fprintf(stderr, "usage: insn send64|write4k N\n");
    return 2;
  }
  int write = !strcmp(argv[1], "write4k");
  long n = atol(argv[2]);
  if (n <= 0 || n % BURST) { fprintf(stderr, "insn: N must be a positive multiple of %d\n", BURST); return 2; }
  size_t len = write ? 4096 : 64;
  int up[2], down[2];
  if (pipe(up) || pipe(down)) die("pipe");
  pid_t child = fork();
  if (child < 0) die("fork");
  int responder = child == 0;
  int rfd = responder ? down[0] : up[0], wfd = responder ? up[1] : down[1];

  int num;
  struct ibv_device **list = ibv_get_device_list(&num);
  if (!list || num < 1) die("ibv_get_device_list");
  struct ibv_context *ctx = ibv_open_device(list[0]);
  if (!ctx) die("ibv_open_device");
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
  struct ibv_cq *cq = pd && ch ? ibv_create_cq(ctx, 4 * RECVS, NULL, ch, 0) : NULL;
  if (!cq) die("pd/channel/cq");
  char *buf = aligned_alloc(4096, 4096 * BURST);
  memset(buf, responder ? 0 : 0x5a, 4096 * BURST);
  struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096 * BURST, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) die("ibv_reg_mr");
  struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
    .cap = { .max_send_wr = 4 * BURST, .max_recv_wr = RECVS, .max_send_sge = 1, .max_recv_sge = 1 } };
  struct ibv_qp *qp = ibv_create_qp(pd, &ia);
  if (!qp) die("ibv_create_qp");

  struct info me = { .qpn = qp->qp_num, .addr = (uintptr_t)buf, .rkey = mr->rkey }, peer;
  if (ibv_query_gid(ctx, 1, GID_INDEX, &me.gid)) die("ibv_query_gid");
  xfer(wfd, &me, sizeof me, 1);
  xfer(rfd, &peer, sizeof peer, 0);

  struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
    .qp_access_flags = IBV_ACCESS_REMOTE_WRITE };
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) die("INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_4096; a.dest_qp_num = peer.qpn; a.rq_psn = 0;
  a.max_dest_rd_atomic = 1; a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = peer.gid; a.ah_attr.grh.sgid_index = GID_INDEX;
  a.ah_attr.grh.hop_limit = 64; a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) die("RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS; a.sq_psn = 0; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                    IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)) die("RTS");

  struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = (uint32_t)len, .lkey = mr->lkey };
  char ready = 'r';
  struct ibv_wc wc[BURST];
  if (responder) {
    struct ibv_recv_wr rw = { .sg_list = &sge, .num_sge = 1 }, *bad;
    long posted = 0, done = 0;
    if (!write)
      for (; posted < RECVS && posted < n; posted++)
        if (ibv_post_recv(qp, &rw, &bad)) die("ibv_post_recv");
    xfer(wfd, &ready, 1, 1);
    while (!write && done < n) {
      int k = take(ch, cq, wc, BURST);
      done += k;
      for (int i = 0; i < k && posted < n; i++, posted++)
        if (ibv_post_recv(qp, &rw, &bad)) die("ibv_post_recv");
    }
    xfer(rfd, &ready, 1, 0); /* the requester's "done" */
  } else {
    xfer(rfd, &ready, 1, 0);
    struct ibv_send_wr sw = { .sg_list = &sge, .num_sge = 1, .opcode = write ? IBV_WR_RDMA_WRITE : IBV_WR_SEND };
    if (write) {
      sw.wr.rdma.remote_addr = peer.addr;
      sw.wr.rdma.rkey = peer.rkey;
    }
    struct ibv_send_wr *bad;
    for (long i = 0; i < n; i += BURST) {
      for (int j = 0; j < BURST; j++) {
        sw.send_flags = j == BURST - 1 ? IBV_SEND_SIGNALED : 0;
        if (ibv_post_send(qp, &sw, &bad)) die("ibv_post_send");
      }
      take(ch, cq, wc, BURST);
    }
    xfer(wfd, &ready, 1, 1);
  }
  ibv_destroy_qp(qp); ibv_dereg_mr(mr); ibv_destroy_cq(cq); ibv_destroy_comp_channel(ch);
  ibv_dealloc_pd(pd); ibv_close_device(ctx); ibv_free_device_list(list);
  if (responder) {
    printf("responder pid %d\n", (int)getpid());
    fflush(stdout);
  } else {
    int st;
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st)) die("responder");
    printf("requester pid %d: %s, %ld messages ok\n", (int)getpid(), argv[1], n);
  }
  return 0;
}
