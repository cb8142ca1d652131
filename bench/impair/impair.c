/* impair - loss, duplication and reordering of queued packets, for kernels without netem.
 *
 *   impair LOSS DUP REORDER DELAY_US [QUEUE]
 *
 * Reads packets from NFQUEUE QUEUE (default 0) and, with netem's meaning of the numbers
 * (percentages, independent per packet, no correlation):
 *   - drops a packet with probability LOSS;
 *   - else sends an extra copy at once with probability DUP (raw socket, firewall mark 0x77,
 *     so a rule matching "meta mark != 0x77" does not queue the copy again);
 *   - then lets the packet go at once with probability REORDER and holds every other one for
 *     DELAY_US microseconds, so the ones let go overtake the held ones (with REORDER 0 and a
 *     delay, this is a plain delay line and keeps the order).
 * Held packets are released in arrival order when due, timed with ppoll (nanosecond timeout).
 * At most HOLD_MAX are held; beyond that a packet goes at once. The kernel queue is fail-open
 * (a full queue accepts). Counts are printed on SIGTERM / SIGINT as one line:
 *   impair: seen=N lost=N duplicated=N held=N passed_at_once=N
 * Written for urxe's bench/lossy.sh; IPv4 only (RoCEv2 over IPv4). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HOLD_MAX 16384
#define COPY_MARK 0x77

struct held {
    uint32_t id;
    uint64_t due_ns;
};

static struct held ring[HOLD_MAX];
static size_t ring_head, ring_len;
static double p_loss, p_dup, p_reorder;
static uint64_t delay_ns;
static int raw_fd = -1;
static struct nfq_q_handle *qh;
static volatile sig_atomic_t stop;
static uint64_t n_seen, n_lost, n_dup, n_held, n_now, n_dup_err;
static uint64_t rng_state = 0x2545F4914F6CDD1DULL;

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* xorshift64*: uniform in [0, 1). */
static double uniform(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1DULL) >> 11) / 9007199254740992.0;
}

static int chance(double p) { return p > 0 && uniform() < p; }

static void verdict(uint32_t id, uint32_t v) {
    if (nfq_set_verdict(qh, id, v, 0, NULL) < 0)
        fprintf(stderr, "impair: verdict for packet %u failed: %s\n", id, strerror(errno));
}

static void send_copy(const unsigned char *pkt, int len) {
    if (len < (int)sizeof(struct iphdr))
        return;
    const struct iphdr *ip = (const struct iphdr *)pkt;
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_addr.s_addr = ip->daddr};
    if (sendto(raw_fd, pkt, (size_t)len, 0, (struct sockaddr *)&dst, sizeof dst) != len)
        n_dup_err++;
    else
        n_dup++;
}

static void release_due(uint64_t now) {
    while (ring_len > 0 && ring[ring_head].due_ns <= now) {
        verdict(ring[ring_head].id, NF_ACCEPT);
        ring_head = (ring_head + 1) % HOLD_MAX;
        ring_len--;
    }
}

static int on_packet(struct nfq_q_handle *q, struct nfgenmsg *msg, struct nfq_data *nfa, void *data) {
    (void)q;
    (void)msg;
    (void)data;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (!ph)
        return 0;
    uint32_t id = ntohl(ph->packet_id);
    unsigned char *pkt = NULL;
    int len = nfq_get_payload(nfa, &pkt);
    n_seen++;
    if (chance(p_loss)) {
        n_lost++;
        verdict(id, NF_DROP);
        return 0;
    }
    if (len > 0 && chance(p_dup))
        send_copy(pkt, len);
    if (delay_ns == 0 || chance(p_reorder) || ring_len == HOLD_MAX) {
        n_now++;
        verdict(id, NF_ACCEPT);
        return 0;
    }
    ring[(ring_head + ring_len) % HOLD_MAX] = (struct held){.id = id, .due_ns = now_ns() + delay_ns};
    ring_len++;
    n_held++;
    return 0;
}

static void on_signal(int sig) {
    (void)sig;
    stop = 1;
}

static double percent(const char *s, const char *what) {
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || v < 0 || v > 100) {
        fprintf(stderr, "impair: %s must be a percentage 0..100, got '%s'\n", what, s);
        exit(2);
    }
    return v / 100.0;
}

int main(int argc, char **argv) {
    if (argc < 5 || argc > 6) {
        fprintf(stderr, "usage: impair LOSS DUP REORDER DELAY_US [QUEUE]\n");
        return 2;
    }
    p_loss = percent(argv[1], "LOSS");
    p_dup = percent(argv[2], "DUP");
    p_reorder = percent(argv[3], "REORDER");
    char *end;
    unsigned long d = strtoul(argv[4], &end, 10);
    if (*argv[4] == '\0' || *end != '\0' || d > 10000000) {
        fprintf(stderr, "impair: DELAY_US must be 0..10000000, got '%s'\n", argv[4]);
        return 2;
    }
    delay_ns = (uint64_t)d * 1000;
    unsigned long qnum = argc == 6 ? strtoul(argv[5], NULL, 10) : 0;
    rng_state ^= (uint64_t)getpid() << 17 ^ now_ns();

    raw_fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
    int mark = COPY_MARK;
    if (raw_fd < 0 || setsockopt(raw_fd, SOL_SOCKET, SO_MARK, &mark, sizeof mark) < 0) {
        perror("impair: raw socket");
        return 1;
    }
    struct nfq_handle *h = nfq_open();
    if (!h) {
        perror("impair: nfq_open");
        return 1;
    }
    nfq_unbind_pf(h, AF_INET);
    if (nfq_bind_pf(h, AF_INET) < 0) {
        perror("impair: nfq_bind_pf");
        return 1;
    }
    qh = nfq_create_queue(h, (uint16_t)qnum, on_packet, NULL);
    if (!qh) {
        perror("impair: nfq_create_queue");
        return 1;
    }
    if (nfq_set_mode(qh, NFQNL_COPY_PACKET, 0xffff) < 0) {
        perror("impair: nfq_set_mode");
        return 1;
    }
    nfq_set_queue_maxlen(qh, HOLD_MAX + 4096);
    nfq_set_queue_flags(qh, NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_FAIL_OPEN);
    int fd = nfq_fd(h);
    int rcvbuf = 8 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);

    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    fprintf(stderr, "impair: queue %lu, loss %.1f%%, dup %.1f%%, reorder %.1f%%, delay %lu us\n", qnum,
            p_loss * 100, p_dup * 100, p_reorder * 100, d);

    static char buf[0x20000] __attribute__((aligned));
    while (!stop) {
        uint64_t now = now_ns();
        release_due(now);
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 100000000};
        if (ring_len > 0) {
            uint64_t wait = ring[ring_head].due_ns > now ? ring[ring_head].due_ns - now : 0;
            ts.tv_sec = (time_t)(wait / 1000000000ULL);
            ts.tv_nsec = (long)(wait % 1000000000ULL);
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = ppoll(&pfd, 1, &ts, NULL);
        if (r < 0 && errno != EINTR) {
            perror("impair: ppoll");
            break;
        }
        if (r > 0) {
            /* Drain what is queued without blocking. */
            for (;;) {
                ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
                if (n < 0) {
                    if (errno == ENOBUFS) {
                        fprintf(stderr, "impair: netlink buffer overrun (packets were accepted fail-open)\n");
                        continue;
                    }
                    break;
                }
                nfq_handle_packet(h, buf, (int)n);
            }
        }
    }
    release_due(UINT64_MAX);
    printf("impair: seen=%llu lost=%llu duplicated=%llu held=%llu passed_at_once=%llu dup_errors=%llu\n",
           (unsigned long long)n_seen, (unsigned long long)n_lost, (unsigned long long)n_dup,
           (unsigned long long)n_held, (unsigned long long)n_now, (unsigned long long)n_dup_err);
    fflush(stdout);
    nfq_destroy_queue(qh);
    nfq_close(h);
    return 0;
}
