//! What two hosts meet that loopback never shows (issue 38 (a)(b)(c)), between two network
//! namespaces of the test's own joined by a veth pair (root):
//! - (a) the first burst toward an IPv6 peer whose neighbour entry was just flushed: no packet
//!   lost in the kernel's queue of unresolved packets, so no NAK and no packet sent twice;
//! - (b) rdma_cm between ends of different MTUs: the passive side takes the REQ's path MTU
//!   when its link carries it and refuses with REJ 26 (invalid path MTU) when it does not;
//! - (c) IPv6 packets of a QP carry its flow label (`rdma_calc_flow_label` of the two QPNs
//!   when the AV names none), read from a kernel capture of the wire.
//!
//! The out-of-band TCP exchange of the tools runs over IPv4, RoCEv2 over IPv6: the TCP
//! handshake does not resolve the IPv6 neighbour for us.

#[path = "apps/mod.rs"]
#[allow(dead_code)]
mod apps;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use apps::{assert_contains, ensure_rdmacm, lib_dir, run_bounded, tool, Output};

const TIMEOUT: Duration = Duration::from_secs(60);

fn sh(args: &[&str]) -> Output {
    run_bounded(Command::new(args[0]).args(&args[1..]), Duration::from_secs(20)).expect(args[0])
}

fn must(args: &[&str]) {
    let out = sh(args);
    assert!(out.success(), "{args:?}\n{out}");
}

/// Two namespaces `<tag>a` and `<tag>b`, a veth pair `hv0` (in a: 10.93.0.1, fd00:93::1) —
/// `hv1` (in b: 10.93.0.2, fd00:93::2), each end with its own MTU. Deleted on drop.
struct Pair {
    a: String,
    b: String,
    rt: PathBuf,
}

const A4: &str = "10.93.0.1";
const B4: &str = "10.93.0.2";
const A6: &str = "fd00:93::1";
const B6: &str = "fd00:93::2";

impl Pair {
    fn new(tag: &str, mtu_a: u32, mtu_b: u32) -> Pair {
        // Names of this process's own: another run of these tests at the same time (another
        // worktree, another helper) deletes and re-creates namespaces of the same name, and
        // both runs then fail (2 of 4 with two runs started together).
        static PAIRS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = PAIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("{tag}{}-{n}", std::process::id());
        let (a, b) = (format!("{tag}a"), format!("{tag}b"));
        let rt = std::env::temp_dir().join(format!("urxe-{tag}-rt"));
        for n in [&a, &b] {
            let _ = sh(&["ip", "netns", "del", n]);
            must(&["ip", "netns", "add", n]);
            must(&["ip", "-n", n, "link", "set", "lo", "up"]);
            let _ = std::fs::create_dir_all(rt.join(n));
        }
        must(&["ip", "-n", &a, "link", "add", "hv0", "type", "veth", "peer", "name", "hv1", "netns", &b]);
        for (n, dev, v4, v6, mtu) in [(&a, "hv0", A4, A6, mtu_a), (&b, "hv1", B4, B6, mtu_b)] {
            must(&["ip", "-n", n, "link", "set", dev, "mtu", &mtu.to_string()]);
            must(&["ip", "-n", n, "addr", "add", &format!("{v4}/24"), "dev", dev]);
            must(&["ip", "-n", n, "addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"]);
            must(&["ip", "-n", n, "link", "set", dev, "up"]);
        }
        Pair { a, b, rt }
    }

    /// `program args` in namespace `ns` with urxe's libraries and `URXE_ADDR=addr`.
    fn cmd(&self, ns: &str, addr: &str, program: &Path, args: &[&str]) -> Command {
        self.cmd_for(None, ns, addr, program, args)
    }

    /// As [`Pair::cmd`], stopped after `limit` seconds if given.
    fn cmd_for(&self, limit: Option<u32>, ns: &str, addr: &str, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(if limit.is_some() { "timeout" } else { "ip" });
        if let Some(l) = limit {
            c.args([l.to_string().as_str(), "ip"]);
        }
        let rt = self.rt.join(ns);
        ensure_rdmacm();
        c.args(["netns", "exec", ns, "env"])
            .arg(format!("LD_LIBRARY_PATH={}", lib_dir().display()))
            .arg(format!("URXE_RUNTIME_DIR={}", rt.display()))
            .arg(format!("XDG_RUNTIME_DIR={}", rt.display()))
            .arg(format!("URXE_ADDR={addr}"))
            // Every RoCE packet its own frame on the captures: a GSO train (IPv6 trains leave
            // whole, checksum on) crosses the veth as one super-frame, which `read_v6` would
            // count as one packet; the per-packet path is also the burst's worst case.
            .arg("URXE_GSO=0")
            .arg(program)
            .args(args);
        c
    }

    /// Starts a kernel capture of RoCEv2 on `ns`'s veth end; returns it and its file.
    fn capture(&self, ns: &str, dev: &str, name: &str) -> (Child, PathBuf) {
        let file = self.rt.join(format!("{name}.pcap"));
        let _ = std::fs::remove_file(&file);
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "tcpdump", "-i", dev, "-U", "-n", "-s", "256", "-w"])
            .arg(&file)
            .args(["udp", "port", "4791"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tcpdump");
        // tcpdump creates the file once it listens.
        let t0 = Instant::now();
        while !file.exists() && t0.elapsed() < Duration::from_secs(10) {
            thread::sleep(Duration::from_millis(20));
        }
        thread::sleep(Duration::from_millis(200));
        (child, file)
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for n in [&self.a, &self.b] {
            let _ = sh(&["ip", "netns", "del", n]);
        }
        let _ = std::fs::remove_dir_all(&self.rt);
    }
}

fn stop(mut c: Child) {
    thread::sleep(Duration::from_millis(300));
    // SIGINT so tcpdump flushes; our own child, by pid.
    let _ = Command::new("kill").args(["-INT", &c.id().to_string()]).status();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// One captured RoCEv2-over-IPv6 packet: (src, dst, flow label, BTH opcode, dest QP, PSN,
/// AETH syndrome of an ACK).
#[derive(Debug, Clone)]
struct Pkt {
    src: [u8; 16],
    dst: [u8; 16],
    label: u32,
    opcode: u8,
    dqpn: u32,
    psn: u32,
    syndrome: Option<u8>,
}

/// The IPv6 RoCEv2 packets of a classic pcap written by tcpdump on a veth (Ethernet frames).
fn read_v6(file: &Path) -> Vec<Pkt> {
    let d = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert!(d.len() >= 24 && d[..4] == [0xd4, 0xc3, 0xb2, 0xa1], "{} is not a little-endian pcap", file.display());
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= d.len() {
        let caplen = u32::from_le_bytes(d[at + 8..at + 12].try_into().unwrap()) as usize;
        let f = &d[at + 16..(at + 16 + caplen).min(d.len())];
        at += 16 + caplen;
        if f.len() < 14 + 40 + 8 + 12 || f[12..14] != [0x86, 0xdd] {
            continue;
        }
        let ip = &f[14..];
        let label = u32::from_be_bytes([0, ip[1] & 0x0f, ip[2], ip[3]]);
        let bth = &ip[48..];
        let opcode = bth[0];
        let aeth = (opcode == 0x11 && bth.len() >= 13).then(|| bth[12]);
        out.push(Pkt {
            src: ip[8..24].try_into().unwrap(),
            dst: ip[24..40].try_into().unwrap(),
            label,
            opcode,
            dqpn: u32::from_be_bytes([0, bth[5], bth[6], bth[7]]),
            psn: u32::from_be_bytes([0, bth[9], bth[10], bth[11]]),
            syndrome: aeth,
        });
    }
    out
}

fn v6(s: &str) -> [u8; 16] {
    s.parse::<std::net::Ipv6Addr>().unwrap().octets()
}

/// Runs `server` then `client` (0.5 s later), both bounded; returns (server, client).
fn pair_run(mut server: Command, mut client: Command) -> (Output, Output) {
    let srv = thread::spawn(move || run_bounded(&mut server, TIMEOUT).expect("server"));
    thread::sleep(Duration::from_millis(500));
    let c = run_bounded(&mut client, TIMEOUT).expect("client");
    (srv.join().expect("server thread"), c)
}

/// The flow label the kernel derives from two QPNs (`rdma_calc_flow_label`).
fn calc_flow_label(l: u32, r: u32) -> u32 {
    let mut v = l as u64 * r as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// `ibv_rc_pingpong -s 131072 -m 1024 -n ITERS` over IPv6 from a to b with a capture on b's
/// end; the out-of-band exchange over IPv4.
fn rc_burst(p: &Pair, name: &str, iters: &str, flush: bool) -> (Output, Output, Vec<Pkt>) {
    if flush {
        // Resolution that takes a while, as toward a host that answers late: b drops its first
        // neighbour advertisement and a solicits again after 100 ms. Meanwhile a burst sent
        // without waiting sits in the kernel's queue of unresolved packets, which holds 212992
        // bytes of socket buffers: fewer than 128 packets of 1 KiB.
        must(&["ip", "netns", "exec", &p.a, "sysctl", "-qw", "net.ipv6.neigh.hv0.retrans_time_ms=100"]);
        must(&[
            "ip",
            "netns",
            "exec",
            &p.b,
            "nft",
            "add table inet hostsnd; add chain inet hostsnd out { type filter hook output priority 0; }; \
             add rule inet hostsnd out icmpv6 type nd-neighbor-advert numgen inc mod 2 == 0 counter drop",
        ]);
        for n in [&p.a, &p.b] {
            must(&["ip", "-n", n, "-6", "neigh", "flush", "all"]);
        }
        let out = sh(&["ip", "-n", &p.a, "-6", "neigh", "show", B6]);
        assert!(!out.stdout.contains("lladdr"), "the flush left an entry for {B6}\n{out}");
    }
    let (cap, file) = p.capture(&p.b, "hv1", name);
    let rc = tool("ibv_rc_pingpong");
    let args = ["-d", "urxe0", "-g", "1", "-m", "1024", "-s", "131072", "-n", iters, "-p", "18938", "-c"];
    let server = p.cmd(&p.b, B6, &rc, &args);
    let mut cargs = args.to_vec();
    cargs.push(B4);
    let client = p.cmd(&p.a, A6, &rc, &cargs);
    let (s, c) = pair_run(server, client);
    stop(cap);
    (s, c, read_v6(&file))
}

#[test]
fn two_pairs_of_one_tag_get_namespaces_of_their_own() {
    // Two runs of these tests at once used to share `<tag>a`/`<tag>b`: the second deleted the
    // first's namespaces under its programs.
    let (p, q) = (Pair::new("hostsu", 1500, 1500), Pair::new("hostsu", 1500, 1500));
    assert!(p.a != q.a && p.b != q.b && p.rt != q.rt, "{} {} / {} {}", p.a, p.b, q.a, q.b);
    for ns in [&p.a, &p.b, &q.a, &q.b] {
        let out = sh(&["ip", "-n", ns, "addr", "show"]);
        assert!(out.success() && out.stdout.contains("10.93.0."), "{ns} lost its veth end\n{out}");
    }
}

#[test]
fn first_burst_toward_an_unresolved_ipv6_neighbour_loses_nothing() {
    let p = Pair::new("hostsn", 1500, 1500);
    let (s, c, pkts) = rc_burst(&p, "burst", "1", true);
    assert!(s.success() && c.success(), "both pingpongs must finish\n{s}\n{c}");
    assert_contains(&c, " iters in ");
    let (a, b) = (v6(A6), v6(B6));
    // The client's first message: 128 packets of 1 KiB (SEND first/middle/last).
    let data: Vec<&Pkt> = pkts.iter().filter(|k| k.src == a && k.dst == b && k.dqpn != 1 && k.opcode <= 0x05).collect();
    let mut seen = HashSet::new();
    let twice: Vec<u32> = data.iter().filter(|k| !seen.insert((k.dqpn, k.psn))).map(|k| k.psn).collect();
    let naks = pkts.iter().filter(|k| k.src == b && k.syndrome.is_some_and(|s| s >> 5 == 3)).count();
    eprintln!("a -> b: {} data packets, {} sent twice; b -> a: {naks} NAKs", data.len(), twice.len());
    assert!(data.len() >= 128, "the 128-packet burst must be on the wire ({} packets)", data.len());
    assert_eq!(naks, 0, "the receiver NAKed a gap: part of the first burst was lost");
    assert!(twice.is_empty(), "{} packets were resent (PSNs {twice:x?})", twice.len());
    let out = sh(&["ip", "-n", &p.a, "-6", "neigh", "show", B6]);
    assert!(out.stdout.contains("lladdr"), "the neighbour entry of {B6} must now be resolved\n{out}");
}

#[test]
fn ipv6_packets_carry_the_flow_label_of_their_qp_pair() {
    let p = Pair::new("hostsf", 1500, 1500);
    let (s, c, pkts) = rc_burst(&p, "flow", "4", false);
    assert!(s.success() && c.success(), "both pingpongs must finish\n{s}\n{c}");
    let (a, b) = (v6(A6), v6(B6));
    let qp_pkts: Vec<&Pkt> = pkts.iter().filter(|k| k.dqpn != 1).collect();
    // The QPNs of the pair: a's packets name b's QP and the other way round.
    let to_b: HashSet<u32> = qp_pkts.iter().filter(|k| k.dst == b).map(|k| k.dqpn).collect();
    let to_a: HashSet<u32> = qp_pkts.iter().filter(|k| k.dst == a).map(|k| k.dqpn).collect();
    assert!(to_b.len() == 1 && to_a.len() == 1, "one QP pair expected: to b {to_b:x?}, to a {to_a:x?}");
    let (qb, qa) = (*to_b.iter().next().unwrap(), *to_a.iter().next().unwrap());
    let want = calc_flow_label(qa, qb);
    let mut labels: HashMap<u32, usize> = HashMap::new();
    for k in &qp_pkts {
        *labels.entry(k.label).or_default() += 1;
    }
    eprintln!("QPs {qa:#x} <-> {qb:#x}: {} packets, labels {labels:x?}, rdma_calc_flow_label {want:#x}", qp_pkts.len());
    assert!(qp_pkts.len() >= 2 * 128, "the exchange must be on the wire ({} packets)", qp_pkts.len());
    assert_eq!(
        labels.keys().copied().collect::<Vec<_>>(),
        vec![want],
        "every packet of the pair, both ways, carries its label"
    );
}

/// rping between a (MTU `mtu_a`) as client and b (MTU `mtu_b`) as server, 16 KiB messages.
/// The server is stopped after `server_limit` seconds if given.
fn rping_across(tag: &str, mtu_a: u32, mtu_b: u32, server_limit: Option<u32>) -> (Output, Output) {
    let p = Pair::new(tag, mtu_a, mtu_b);
    let rping = tool("rping");
    let server = p.cmd_for(
        server_limit,
        &p.b,
        B4,
        &rping,
        &["-s", "-a", B4, "-p", "7938", "-S", "16384", "-C", "10", "-V", "-v"],
    );
    let mut client = p.cmd(&p.a, A4, &rping, &["-c", "-a", B4, "-p", "7938", "-S", "16384", "-C", "10", "-V", "-v"]);
    let srv = thread::spawn(move || run_bounded(&mut { server }, TIMEOUT).expect("server"));
    thread::sleep(Duration::from_millis(500));
    let t0 = Instant::now();
    let c = run_bounded(&mut client, TIMEOUT).expect("client");
    eprintln!("rping client at MTU {mtu_a} -> server at MTU {mtu_b}: {:?}", t0.elapsed());
    (srv.join().expect("server thread"), c)
}

#[test]
fn rdma_cm_server_refuses_a_path_mtu_its_link_does_not_carry() {
    // a at 9000 (path MTU 4096) asks b at 1500 (1024): REJ 26, the client told at once.
    let (_server, c) = rping_across("hostsm", 9000, 1500, Some(6));
    assert!(!c.success(), "the client must fail\n{c}");
    assert_contains(&c, "RDMA_CM_EVENT_REJECTED, error 26");
}

#[test]
fn rdma_cm_server_takes_a_smaller_path_mtu_from_the_req() {
    // a at 1500 (1024) asks b at 9000 (4096): b takes 1024 as the kernel does; 16 KiB pings
    // (full-size packets both ways) all arrive and check.
    let (s, c) = rping_across("hostsk", 1500, 9000, None);
    assert!(s.success() && c.success(), "both rpings must finish\n{s}\n{c}");
    assert_contains(&s, "rdma-ping-9: ");
}
