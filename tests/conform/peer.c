/*
 * conform-peer: the remote end of `urxe conform`.
 *
 * Runs on the device under test (kernel rxe in a VM, a RoCE NIC, or urxe in another process)
 * over plain libibverbs. It owns the verbs objects the scenarios need and obeys one-line text
 * commands from `urxe conform` over TCP; every command gets exactly one reply line, "OK ...",
 * "ERR ..." or a typed answer. The crafted RoCEv2 traffic itself never passes through here:
 * it goes between `urxe conform`'s UDP socket and this device.
 *
 *   conform-peer DEVICE GID_INDEX TCP_PORT
 *
 * On connect it says
 *   HELLO gid=<32 hex> rkey=<hex> addr=<hex> len=<n> ro_rkey=<hex> ro_addr=<hex> ro_len=<n>
 * Commands (numbers decimal unless written 0x...):
 *   QP rqpn rpsn sq_psn rgid min_rnr rnr_retry retry_cnt timeout access
 *        new RC QP (the previous one is destroyed) in RTS towards rqpn/rgid, path MTU 1024,
 *        max_rd_atomic 4; access bits 1 local write, 2 remote write, 4 remote read, 8 atomic
 *        -> "QP qpn"
 *   UD qkey            new UD QP in RTS with 8 receives posted -> "UD qpn"
 *   RECV n len         post n receives of len bytes on the RC QP -> "OK"
 *   SEND off len       post a signaled SEND_ONLY of len bytes from the RW MR at off -> "OK"
 *   FILL off len seed  byte i of the RW MR region = (seed + i) & 0xff -> "OK"
 *   DUMP off len       -> "DATA <hex>" (len <= 8192)
 *   STATE              -> "STATE <ibv_qp_state of the RC QP>"
 *   POLL               drains the CQ -> "WC n status:opcode:byte_len:qp_num ..."
 *   QUIT               -> "OK", exit 0
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RW_LEN (64 * 1024)
#define RECV_BASE (32 * 1024)
#define RO_LEN 4096
#define CQ_DEPTH 256
#define MAX_LINE 512

struct peer {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr, *ro_mr;
    uint8_t *buf, *ro_buf;
    struct ibv_qp *qp, *ud;
    uint8_t port;
    int gid_index;
    union ibv_gid gid;
    unsigned recv_next;
    FILE *out;
};

static void reply(struct peer *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(p->out, fmt, ap);
    va_end(ap);
    fputc('\n', p->out);
    fflush(p->out);
}

static int parse_gid(const char *hex, union ibv_gid *gid)
{
    if (strlen(hex) != 32)
        return -1;
    for (int i = 0; i < 16; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1)
            return -1;
        gid->raw[i] = (uint8_t)v;
    }
    return 0;
}

static int access_flags(unsigned bits)
{
    int a = 0;
    if (bits & 1)
        a |= IBV_ACCESS_LOCAL_WRITE;
    if (bits & 2)
        a |= IBV_ACCESS_REMOTE_WRITE;
    if (bits & 4)
        a |= IBV_ACCESS_REMOTE_READ;
    if (bits & 8)
        a |= IBV_ACCESS_REMOTE_ATOMIC;
    return a;
}

static void drop_qp(struct ibv_qp **qp)
{
    if (*qp) {
        ibv_destroy_qp(*qp);
        *qp = NULL;
    }
}

static struct ibv_qp *make_qp(struct peer *p, enum ibv_qp_type type)
{
    struct ibv_qp_init_attr ia = {
        .send_cq = p->cq,
        .recv_cq = p->cq,
        .cap = { .max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1, .max_recv_sge = 1 },
        .qp_type = type,
    };
    return ibv_create_qp(p->pd, &ia);
}

static int cmd_qp(struct peer *p, const char *args)
{
    unsigned rqpn, rpsn, sq_psn, min_rnr, rnr_retry, retry_cnt, timeout, access;
    char gidhex[64];
    union ibv_gid rgid;
    if (sscanf(args, "%u %u %u %63s %u %u %u %u %u", &rqpn, &rpsn, &sq_psn, gidhex, &min_rnr, &rnr_retry,
               &retry_cnt, &timeout, &access) != 9 ||
        parse_gid(gidhex, &rgid)) {
        reply(p, "ERR usage: QP rqpn rpsn sq_psn rgid min_rnr rnr_retry retry_cnt timeout access");
        return 0;
    }
    drop_qp(&p->qp);
    p->recv_next = 0;
    p->qp = make_qp(p, IBV_QPT_RC);
    if (!p->qp) {
        reply(p, "ERR create_qp: %s", strerror(errno));
        return 0;
    }
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT,
        .port_num = p->port,
        .pkey_index = 0,
        .qp_access_flags = access_flags(access),
    };
    if (ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        reply(p, "ERR INIT: %s", strerror(errno));
        return 0;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = rqpn;
    a.rq_psn = rpsn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = (uint8_t)min_rnr;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = rgid;
    a.ah_attr.grh.sgid_index = (uint8_t)p->gid_index;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = p->port;
    if (ibv_modify_qp(p->qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        reply(p, "ERR RTR: %s", strerror(errno));
        return 0;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = sq_psn;
    a.timeout = (uint8_t)timeout;
    a.retry_cnt = (uint8_t)retry_cnt;
    a.rnr_retry = (uint8_t)rnr_retry;
    a.max_rd_atomic = 4;
    if (ibv_modify_qp(p->qp, &a,
                      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC)) {
        reply(p, "ERR RTS: %s", strerror(errno));
        return 0;
    }
    reply(p, "QP %u", p->qp->qp_num);
    return 0;
}

static int post_recv(struct peer *p, struct ibv_qp *qp, unsigned off, unsigned len)
{
    struct ibv_sge sge = { .addr = (uintptr_t)(p->buf + off), .length = len, .lkey = p->mr->lkey };
    struct ibv_recv_wr wr = { .wr_id = off, .sg_list = &sge, .num_sge = 1 }, *bad;
    return ibv_post_recv(qp, &wr, &bad);
}

static int cmd_ud(struct peer *p, const char *args)
{
    unsigned qkey;
    if (sscanf(args, "%u", &qkey) != 1) {
        reply(p, "ERR usage: UD qkey");
        return 0;
    }
    drop_qp(&p->ud);
    p->ud = make_qp(p, IBV_QPT_UD);
    if (!p->ud) {
        reply(p, "ERR create_qp: %s", strerror(errno));
        return 0;
    }
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = p->port, .qkey = qkey };
    if (ibv_modify_qp(p->ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) {
        reply(p, "ERR INIT: %s", strerror(errno));
        return 0;
    }
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(p->ud, &a, IBV_QP_STATE)) {
        reply(p, "ERR RTR: %s", strerror(errno));
        return 0;
    }
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    if (ibv_modify_qp(p->ud, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) {
        reply(p, "ERR RTS: %s", strerror(errno));
        return 0;
    }
    /* UD receives carry the 40-byte GRH in front of the payload. */
    for (unsigned i = 0; i < 8; i++) {
        if (post_recv(p, p->ud, RECV_BASE + 16 * 1024 + i * 1024, 1024)) {
            reply(p, "ERR post_recv: %s", strerror(errno));
            return 0;
        }
    }
    reply(p, "UD %u", p->ud->qp_num);
    return 0;
}

static int cmd_recv(struct peer *p, const char *args)
{
    unsigned n, len;
    if (sscanf(args, "%u %u", &n, &len) != 2 || len == 0 || len > 1024 || !p->qp) {
        reply(p, "ERR usage: RECV n len (len <= 1024, after QP)");
        return 0;
    }
    for (unsigned i = 0; i < n; i++) {
        unsigned off = RECV_BASE + (p->recv_next++ % 16) * 1024;
        if (post_recv(p, p->qp, off, len)) {
            reply(p, "ERR post_recv: %s", strerror(errno));
            return 0;
        }
    }
    reply(p, "OK");
    return 0;
}

static int cmd_send(struct peer *p, const char *args)
{
    unsigned off, len;
    if (sscanf(args, "%u %u", &off, &len) != 2 || off > RW_LEN || len > RW_LEN - off || !p->qp) {
        reply(p, "ERR usage: SEND off len (inside the MR, after QP)");
        return 0;
    }
    struct ibv_sge sge = { .addr = (uintptr_t)(p->buf + off), .length = len, .lkey = p->mr->lkey };
    struct ibv_send_wr wr = {
        .wr_id = 0x5e,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
    },
                       *bad;
    if (ibv_post_send(p->qp, &wr, &bad)) {
        reply(p, "ERR post_send: %s", strerror(errno));
        return 0;
    }
    reply(p, "OK");
    return 0;
}

static int cmd_fill(struct peer *p, const char *args)
{
    unsigned off, len, seed;
    if (sscanf(args, "%u %u %u", &off, &len, &seed) != 3 || off > RW_LEN || len > RW_LEN - off) {
        reply(p, "ERR usage: FILL off len seed (inside the MR)");
        return 0;
    }
    for (unsigned i = 0; i < len; i++)
        p->buf[off + i] = (uint8_t)(seed + i);
    reply(p, "OK");
    return 0;
}

static int cmd_dump(struct peer *p, const char *args)
{
    unsigned off, len;
    if (sscanf(args, "%u %u", &off, &len) != 2 || off > RW_LEN || len > RW_LEN - off || len > 8192) {
        reply(p, "ERR usage: DUMP off len (inside the MR, len <= 8192)");
        return 0;
    }
    fputs("DATA ", p->out);
    for (unsigned i = 0; i < len; i++)
        fprintf(p->out, "%02x", p->buf[off + i]);
    reply(p, "");
    return 0;
}

static int cmd_state(struct peer *p)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    if (!p->qp) {
        reply(p, "ERR no QP");
        return 0;
    }
    if (ibv_query_qp(p->qp, &a, IBV_QP_STATE, &ia)) {
        reply(p, "ERR query_qp: %s", strerror(errno));
        return 0;
    }
    reply(p, "STATE %d", (int)a.qp_state);
    return 0;
}

static int cmd_poll(struct peer *p)
{
    struct ibv_wc wc[CQ_DEPTH];
    int n = ibv_poll_cq(p->cq, CQ_DEPTH, wc);
    if (n < 0) {
        reply(p, "ERR poll_cq");
        return 0;
    }
    fprintf(p->out, "WC %d", n);
    for (int i = 0; i < n; i++)
        fprintf(p->out, " %d:%d:%u:%u", (int)wc[i].status, (int)wc[i].opcode, wc[i].byte_len, wc[i].qp_num);
    reply(p, "");
    return 0;
}

static void hex16(const uint8_t *raw, char *out)
{
    for (int i = 0; i < 16; i++)
        sprintf(out + 2 * i, "%02x", raw[i]);
}

static int serve(struct peer *p, int fd)
{
    FILE *in = fdopen(fd, "r");
    p->out = fdopen(dup(fd), "w");
    if (!in || !p->out)
        return 1;
    char gid[33];
    hex16(p->gid.raw, gid);
    reply(p, "HELLO gid=%s rkey=0x%x addr=0x%llx len=%u ro_rkey=0x%x ro_addr=0x%llx ro_len=%u", gid, p->mr->rkey,
          (unsigned long long)(uintptr_t)p->buf, RW_LEN, p->ro_mr->rkey, (unsigned long long)(uintptr_t)p->ro_buf,
          RO_LEN);
    char line[MAX_LINE];
    while (fgets(line, sizeof(line), in)) {
        line[strcspn(line, "\r\n")] = 0;
        char *args = strchr(line, ' ');
        args = args ? args + 1 : line + strlen(line);
        if (!strncmp(line, "QP ", 3))
            cmd_qp(p, args);
        else if (!strncmp(line, "UD ", 3))
            cmd_ud(p, args);
        else if (!strncmp(line, "RECV ", 5))
            cmd_recv(p, args);
        else if (!strncmp(line, "SEND ", 5))
            cmd_send(p, args);
        else if (!strncmp(line, "FILL ", 5))
            cmd_fill(p, args);
        else if (!strncmp(line, "DUMP ", 5))
            cmd_dump(p, args);
        else if (!strcmp(line, "STATE"))
            cmd_state(p);
        else if (!strcmp(line, "POLL"))
            cmd_poll(p);
        else if (!strcmp(line, "QUIT")) {
            reply(p, "OK");
            return 0;
        } else
            reply(p, "ERR unknown command");
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s DEVICE GID_INDEX TCP_PORT\n", argv[0]);
        return 2;
    }
    struct peer p = { .port = 1, .gid_index = atoi(argv[2]) };
    int num;
    struct ibv_device **list = ibv_get_device_list(&num);
    struct ibv_device *dev = NULL;
    for (int i = 0; list && i < num; i++)
        if (!strcmp(ibv_get_device_name(list[i]), argv[1]))
            dev = list[i];
    if (!dev) {
        fprintf(stderr, "conform-peer: no device %s\n", argv[1]);
        return 1;
    }
    p.ctx = ibv_open_device(dev);
    if (!p.ctx || ibv_query_gid(p.ctx, p.port, p.gid_index, &p.gid)) {
        fprintf(stderr, "conform-peer: open/query_gid failed: %s\n", strerror(errno));
        return 1;
    }
    p.pd = ibv_alloc_pd(p.ctx);
    p.cq = p.pd ? ibv_create_cq(p.ctx, CQ_DEPTH, NULL, NULL, 0) : NULL;
    if (!p.cq || posix_memalign((void **)&p.buf, 4096, RW_LEN) || posix_memalign((void **)&p.ro_buf, 4096, RO_LEN)) {
        fprintf(stderr, "conform-peer: pd/cq/memory failed\n");
        return 1;
    }
    memset(p.buf, 0, RW_LEN);
    memset(p.ro_buf, 0x5a, RO_LEN);
    p.mr = ibv_reg_mr(p.pd, p.buf, RW_LEN,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                          IBV_ACCESS_REMOTE_ATOMIC);
    p.ro_mr = ibv_reg_mr(p.pd, p.ro_buf, RO_LEN, IBV_ACCESS_REMOTE_READ);
    if (!p.mr || !p.ro_mr) {
        fprintf(stderr, "conform-peer: reg_mr failed: %s\n", strerror(errno));
        return 1;
    }
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3])) };
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 1)) {
        fprintf(stderr, "conform-peer: listen: %s\n", strerror(errno));
        return 1;
    }
    printf("conform-peer: %s gid index %d, listening on TCP %s\n", argv[1], p.gid_index, argv[3]);
    fflush(stdout);
    int fd = accept(ls, NULL, NULL);
    if (fd < 0) {
        fprintf(stderr, "conform-peer: accept: %s\n", strerror(errno));
        return 1;
    }
    int rc = serve(&p, fd);
    drop_qp(&p.qp);
    drop_qp(&p.ud);
    ibv_dereg_mr(p.mr);
    ibv_dereg_mr(p.ro_mr);
    ibv_destroy_cq(p.cq);
    ibv_dealloc_pd(p.pd);
    ibv_close_device(p.ctx);
    return rc;
}
