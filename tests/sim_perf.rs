//! Engine-only throughput (no simulator overhead): two engines hand packets to each other
//! through one reused buffer. Not a pass/fail test; prints packets/s and bytes/s.
//! `cargo test --release --test sim_perf -- --ignored --nocapture`

mod sim;

use std::time::Instant;

use sim::*;
use urxe::engine::*;
use urxe::wire::icrc::IpFields;

fn pump(net: &mut Net, buf: &mut [u8]) -> usize {
    let mut n = 0;
    for from in 0..2 {
        let to = 1 - from;
        let (src, dst) = (net.nodes[from].addr, net.nodes[to].addr);
        let ip = match (src, dst) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => IpFields::v4_df(s, d),
            _ => unreachable!(),
        };
        while let Some(t) = net.nodes[from].eng.poll_transmit(net.now, buf) {
            let d = Datagram {
                src,
                src_port: t.src_port,
                dst,
                icrc: IcrcCheck::Full(ip),
                payload: &buf[..t.len],
                ce: false,
            };
            net.nodes[to].eng.handle_datagram(net.now, &d);
            n += 1;
        }
    }
    n
}

#[test]
#[ignore = "measurement: cargo test --release --test sim_perf -- --ignored --nocapture"]
fn engine_throughput() {
    let only_small = std::env::var_os("URXE_PERF_SMALL_ONLY").is_some();
    for (mtu, size) in [(Mtu::Mtu4096, 1u32 << 20), (Mtu::Mtu1024, 1 << 20), (Mtu::Mtu4096, 64)] {
        if only_small && size != 64 {
            continue;
        }
        let mut net = Net::with_memory(2, 1, LinkCfg::default(), 4 << 20);
        let o = QpOpts { mtu, max_send_wr: 1024, ..QpOpts::default() };
        let (a, b) = connect(&mut net, 0, 1, &o);
        let (src, smr) = buffer(&mut net, a, size as u64);
        let (dst, dmr) = buffer(&mut net, b, size as u64);
        let mut buf = vec![0u8; MAX_PACKET];
        // URXE_PERF_MIB scales the run (e.g. small under valgrind --tool=callgrind).
        let mib: u64 = std::env::var("URXE_PERF_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(512);
        let total: u64 = mib << 20;
        let wrs = total / size as u64;
        let t0 = Instant::now();
        let (mut posted, mut done, mut pkts) = (0u64, 0u64, 0usize);
        let mut wc = [WorkCompletion::default(); 64];
        while done < wrs {
            while posted < wrs && posted - done < 512 {
                let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
                net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(posted, w, &[sge(src, size, smr)])).unwrap();
                posted += 1;
            }
            pkts += pump(&mut net, &mut buf);
            done += net.nodes[0].eng.poll_cq(a.cq, &mut wc).unwrap() as u64;
        }
        let s = t0.elapsed().as_secs_f64();
        println!(
            "{mtu:?} {size} B WRITEs: {:.2} Mpkt/s, {:.2} GB/s of payload (both engines on one core, ICRC included)",
            pkts as f64 / s / 1e6,
            total as f64 / s / 1e9
        );
    }
}

// ---- instructions per message (bench/instructions.sh runs this under callgrind) -------------

/// Packets in flight between the two sides, in buffers allocated once.
struct Wire {
    bufs: Vec<Vec<u8>>,
    lens: Vec<usize>,
    ports: Vec<u16>,
    n: usize,
}

impl Wire {
    fn new() -> Wire {
        Wire { bufs: (0..256).map(|_| vec![0u8; MAX_PACKET]).collect(), lens: vec![0; 256], ports: vec![0; 256], n: 0 }
    }
}

fn dgram<'a>(net: &Net, from: usize, to: usize, port: u16, payload: &'a [u8]) -> Datagram<'a> {
    let (src, dst) = (net.nodes[from].addr, net.nodes[to].addr);
    let ip = match (src, dst) {
        (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => IpFields::v4_df(s, d),
        _ => unreachable!(),
    };
    Datagram { src, src_port: port, dst, icrc: IcrcCheck::Full(ip), payload, ce: false }
}

/// Drains `node`'s transmit queue onto `w`.
fn drain(net: &mut Net, node: usize, w: &mut Wire) {
    w.n = 0;
    while w.n < w.bufs.len() {
        let Some(t) = net.nodes[node].eng.poll_transmit(net.now, &mut w.bufs[w.n]) else { break };
        w.lens[w.n] = t.len;
        w.ports[w.n] = t.src_port;
        w.n += 1;
    }
}

/// Requester, first half: post a burst of `burst` WRs and transmit their packets.
#[inline(never)]
fn requester_post(net: &mut Net, qpn: Qpn, wrs: &[SendWr<'_>], w: &mut Wire) {
    for wr in wrs {
        if let Err(e) = net.nodes[0].eng.post_send(net.now, qpn, wr) {
            panic!("post_send: {e:?}; counters {:?}", net.nodes[0].eng.counters());
        }
    }
    drain(net, 0, w);
}

/// Requester, second half: take the ACKs, reap the send completions.
#[inline(never)]
fn requester_complete(net: &mut Net, cq: CqId, w: &Wire, wc: &mut [WorkCompletion]) -> usize {
    for i in 0..w.n {
        let d = dgram(net, 1, 0, w.ports[i], &w.bufs[i][..w.lens[i]]);
        net.nodes[0].eng.handle_datagram(net.now, &d);
    }
    net.nodes[0].eng.poll_cq(cq, wc).unwrap()
}

/// Responder: place the requests, reap receive completions and repost receives, send the ACKs.
#[inline(never)]
fn responder_side(net: &mut Net, b: End, recv: Option<&RecvWr<'_>>, w: &mut Wire, wc: &mut [WorkCompletion]) {
    for i in 0..w.n {
        let d = dgram(net, 0, 1, w.ports[i], &w.bufs[i][..w.lens[i]]);
        net.nodes[1].eng.handle_datagram(net.now, &d);
    }
    let got = net.nodes[1].eng.poll_cq(b.cq, wc).unwrap();
    if let Some(r) = recv {
        for _ in 0..got {
            net.nodes[1].eng.post_recv(b.qpn, r).unwrap();
        }
    }
    drain(net, 1, w);
}

#[test]
#[ignore = "measurement: bench/instructions.sh runs it under callgrind"]
fn engine_instructions_per_message() {
    // URXE_INSN_KIND=send64 | write4k | read16k; URXE_INSN_MSGS messages in bursts of 16.
    // read16k: 16 KiB RDMA READs at MTU 1024 (a path over 1500-byte Ethernet), 16 response
    // packets each.
    let kind = std::env::var("URXE_INSN_KIND").unwrap_or_else(|_| "send64".into());
    let msgs: u64 = std::env::var("URXE_INSN_MSGS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let size: u32 = match kind.as_str() {
        "write4k" => 4096,
        "read16k" => 16384,
        _ => 64,
    };
    let mut net = Net::with_memory(2, 1, LinkCfg::default(), 4 << 20);
    // URXE_DCQCN / URXE_DCQCN_<NAME> as the library reads them (bench/instructions.sh compares
    // DCQCN on, the default, with URXE_DCQCN=0).
    let cc = urxe::engine::cc::DcqcnParams::from_env(std::env::vars()).expect("URXE_DCQCN* settings");
    for n in &mut net.nodes {
        n.eng.set_dcqcn(cc);
    }
    let mtu = if kind == "read16k" { Mtu::Mtu1024 } else { Mtu::Mtu4096 };
    let o = QpOpts { mtu, max_send_wr: 1024, max_recv_wr: 1024, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 1 << 16);
    let (dst, dmr) = buffer(&mut net, b, 1 << 16);
    let ssg = [sge(src, size, smr)];
    let rsg = [sge(dst, size, dmr)];
    let recv = RecvWr { wr_id: 7, sg_list: &rsg };
    let is_send = kind == "send64";
    if is_send {
        for _ in 0..512 {
            net.nodes[1].eng.post_recv(b.qpn, &recv).unwrap();
        }
    }
    const BURST: usize = 16;
    let w = match kind.as_str() {
        "write4k" => WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey },
        "read16k" => WrKind::RdmaRead { remote_addr: dst, rkey: dmr.rkey },
        _ => WrKind::Send,
    };
    let wrs: Vec<SendWr<'_>> = (0..BURST as u64).map(|i| send_wr(i, w, &ssg)).collect();
    let (mut wire, mut wc) = (Wire::new(), [WorkCompletion::default(); 64]);
    let (mut done, mut rounds) = (0u64, 0u64);
    while done < msgs && rounds < msgs {
        rounds += 1;
        requester_post(&mut net, a.qpn, &wrs, &mut wire);
        responder_side(&mut net, b, is_send.then_some(&recv), &mut wire, &mut wc);
        let got = requester_complete(&mut net, a.cq, &wire, &mut wc);
        for c in &wc[..got] {
            assert!(c.status == WcStatus::Success, "{c:?}");
        }
        done += got as u64;
    }
    assert!(done >= msgs, "{done} of {msgs} completed");
    println!("kind={kind} msgs={done} size={size}");
}
