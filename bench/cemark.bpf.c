// bench/cemark.bpf.c - the congested lab's ECN marker (bench/congestion.sh, issue #42): a tc
// egress (clsact) program that sets CE on ECT(0) RoCEv2 packets (IPv4, UDP port 4791) sent
// above RATE_BPS bytes per second, with a bucket of BURST bytes. It runs in front of the
// bottleneck qdisc (tbf), as a switch's rate-based marker would.
//
// Why not nftables' `limit rate over N bytes/second ... ip ecn set ce`: in bytes mode the
// kernel's nft_limit bucket holds one whole `unit` (a second) of tokens plus the burst, so
// it only starts to mark after the offered load has run a second's worth of bytes over the
// rate (at 0.94 Gbit/s offered against 0.9 Gbit/s: after about 20 s) and every period below the
// rate banks up to a second of credit again. This kernel has no RED, act_police or act_pedit.
//
// The meter is a virtual-scheduling token bucket (GCRA) under a spin lock: a packet of L IP
// bytes conforms when the bucket's debt plus L fits in BURST; a conforming packet adds L to the
// debt, which drains at RATE_BPS; a packet that does not conform is marked CE and adds nothing
// ("rate over": only the excess is marked). A GSO train counts the IP bytes of all its
// segments and is marked as a whole (the kernel copies the IP header into every segment).
//
// Build: clang -O2 -g -target bpf -DRATE_BPS=112500000 -DBURST=65536 -c cemark.bpf.c -o cemark.o
// Load:  tc qdisc add dev DEV clsact; tc filter add dev DEV egress bpf da obj cemark.o sec tc
#include <linux/bpf.h>
#include <linux/pkt_cls.h>

#ifndef RATE_BPS
#error "RATE_BPS (bytes per second) must be defined"
#endif
#ifndef BURST
#define BURST 65536
#endif

#define SEC(name) __attribute__((section(name), used))

static void *(*map_lookup)(void *map, const void *key) = (void *)BPF_FUNC_map_lookup_elem;
static __u64 (*ktime_ns)(void) = (void *)BPF_FUNC_ktime_get_ns;
static long (*load_bytes)(const void *skb, __u32 off, void *to, __u32 len) = (void *)BPF_FUNC_skb_load_bytes;
static long (*store_bytes)(void *skb, __u32 off, const void *from, __u32 len, __u64 flags) =
    (void *)BPF_FUNC_skb_store_bytes;
static long (*l3_csum_replace)(void *skb, __u32 off, __u64 from, __u64 to, __u64 size) =
    (void *)BPF_FUNC_l3_csum_replace;
static long (*spin_lock)(struct bpf_spin_lock *l) = (void *)BPF_FUNC_spin_lock;
static long (*spin_unlock)(struct bpf_spin_lock *l) = (void *)BPF_FUNC_spin_unlock;

struct meter {
    struct bpf_spin_lock lock;
    __u64 tat;    // when the bucket is empty again (ns, ktime)
};

struct {
    int (*type)[BPF_MAP_TYPE_ARRAY];
    int (*max_entries)[1];
    __u32 *key;
    struct meter *value;
} cemark_meter SEC(".maps");

#define ETH_HLEN 14
#define IP_UDP_HLEN 28
#define BURST_NS ((__u64)BURST * 1000000000ull / (__u64)(RATE_BPS))

SEC("tc")
int cemark(struct __sk_buff *skb)
{
    __u8 ip[24];
    __u32 key = 0;
    if (skb->protocol != 0x0008 /* ETH_P_IP in network byte order (little-endian host) */)
        return TC_ACT_OK;
    if (load_bytes(skb, ETH_HLEN, ip, sizeof(ip)) < 0)
        return TC_ACT_OK;
    if (ip[0] != 0x45 || ip[9] != 17 || (ip[1] & 3) != 2)  // IPv4 without options, UDP, ECT(0)
        return TC_ACT_OK;
    if (ip[22] != 0x12 || ip[23] != 0xB7)  // UDP destination port 4791
        return TC_ACT_OK;
    __u64 segs = skb->gso_segs ? skb->gso_segs : 1;
    __u64 len = skb->len - ETH_HLEN + (segs - 1) * IP_UDP_HLEN;
    __u64 cost = len * 1000000000ull / (__u64)(RATE_BPS);
    struct meter *m = map_lookup(&cemark_meter, &key);
    if (!m)
        return TC_ACT_OK;
    __u64 now = ktime_ns();
    int mark = 0;
    spin_lock(&m->lock);
    __u64 tat = m->tat > now ? m->tat : now;
    if (tat - now + cost > BURST_NS)
        mark = 1;
    else
        m->tat = tat + cost;
    spin_unlock(&m->lock);
    if (!mark)
        return TC_ACT_OK;
    __u16 old, new;
    __builtin_memcpy(&old, ip, 2);
    ip[1] |= 3;
    __builtin_memcpy(&new, ip, 2);
    l3_csum_replace(skb, ETH_HLEN + 10, old, new, 2);
    store_bytes(skb, ETH_HLEN + 1, &ip[1], 1, 0);
    return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
