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
            let d = Datagram { src, src_port: t.src_port, dst, icrc: IcrcCheck::Full(ip), payload: &buf[..t.len] };
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
