//! DCQCN wired into the engine (issue #42): CE-marked datagrams make CNPs at the NP, CNPs cut
//! the RP's rate and the engine paces the QP; `URXE_DCQCN=0` (params `enabled: false`) keeps
//! the packets and their timing exactly as without DCQCN. In the simulator (virtual time).

mod sim;

use sim::*;
use urxe::engine::cc::DcqcnParams;
use urxe::engine::*;
use urxe::wire::opcode::op;

const MS: u64 = 1_000_000;
const LEN: usize = 2 << 20;

fn off() -> DcqcnParams {
    DcqcnParams { enabled: false, ..DcqcnParams::default() }
}

struct Run {
    net: Net,
    a: End,
    elapsed: u64,
}

/// Node 0 writes LEN bytes to node 1 as 16 WRITEs of 128 KiB over a 10 Gbit/s link; with
/// `ce`, a tenth of the packets from node 0 arrive CE-marked (every one would drive the rate to
/// `rpg_min_rate`, 1 Mb/s, where 2 MiB outlast the retry count).
fn write_run(ce: bool, params: Option<DcqcnParams>) -> Run {
    let link = LinkCfg { gbps: 10, queue_ns: 10 * MS, ..LinkCfg::default() };
    let mut net = Net::new(2, 42, link);
    if let Some(p) = params {
        for n in &mut net.nodes {
            n.eng.set_dcqcn(p);
        }
    }
    net.trace = Some(Vec::new());
    net.ce_from = ce.then_some((0, 0.1));
    // Local ACK timeout 67 ms (14, what perftest uses): a paced QP's packets wait their turn.
    let o = QpOpts { mtu: Mtu::Mtu4096, max_send_wr: 64, timeout: 14, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, LEN as u64);
    let (dst, dmr) = buffer(&mut net, b, LEN as u64);
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 + 3) as u8).collect();
    net.nodes[0].mem().set(src, &data);
    let start = net.now;
    let chunk = LEN / 16;
    for i in 0..16 {
        let kind = WrKind::RdmaWrite { remote_addr: dst + (i * chunk) as u64, rkey: dmr.rkey };
        let sg = [sge(src + (i * chunk) as u64, chunk as u32, smr)];
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(i as u64, kind, &sg)).unwrap();
    }
    let mut wcs = Vec::new();
    let done = net.run_until(2000 * MS, |n| {
        wcs.extend(n.poll_all(0, a.cq));
        wcs.len() == 16
    });
    assert!(done, "16 WRITEs complete within 2 s of virtual time ({} did)", wcs.len());
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(net.nodes[1].mem().get(dst, LEN), data, "the data arrived intact");
    let elapsed = net.now - start;
    Run { net, a, elapsed }
}

fn cnps(net: &Net) -> Vec<(u64, Packet)> {
    net.trace.as_ref().unwrap().iter().filter(|(_, p)| p.opcode() == op::CNP).cloned().collect()
}

#[test]
fn ce_marked_writes_make_cnps_and_the_sender_slows_down() {
    let plain = write_run(false, None);
    let marked = write_run(true, None);
    let np = marked.net.nodes[1].eng.cc_counters();
    let rp = marked.net.nodes[0].eng.cc_counters();
    let sent = cnps(&marked.net);
    println!(
        "unmarked {} µs, CE-marked {} µs; NP {np:?}; RP {rp:?}; rate now {:?}",
        plain.elapsed / 1000,
        marked.elapsed / 1000,
        marked.net.nodes[0].eng.qp_rate_bps(marked.a.qpn)
    );
    assert!(cnps(&plain.net).is_empty(), "no CE, no CNP");
    assert!(np.np_ecn_marked_roce_packets >= 20, "{np:?}");
    assert!(np.np_cnp_sent > 0 && np.np_cnp_sent as usize == sent.len(), "{np:?} vs {} on the wire", sent.len());
    // Every CNP goes from node 1 to the sending QP, at most one per min_time_between_cnps.
    assert!(sent.iter().all(|(_, p)| p.from == 1 && p.dest_qp() == marked.a.qpn));
    let gap = DcqcnParams::default().min_time_between_cnps as u64 * 1000;
    assert!(sent.windows(2).all(|w| w[1].0 - w[0].0 >= gap), "CNPs closer than {gap} ns");
    // Each CNP reached the RP (nothing was lost on this link) and was handled.
    assert_eq!(rp.rp_cnp_handled, sent.len() as u64);
    assert_eq!(rp.rp_cnp_ignored, 0);
    // The sender is paced: its rate was cut below the 10 Gbit/s line rate and the transfer
    // took longer than without marks.
    let rate = marked.net.nodes[0].eng.qp_rate_bps(marked.a.qpn);
    assert!(rate.is_some_and(|r| r < 5_000_000_000), "rate {rate:?}");
    assert!(marked.elapsed > 2 * plain.elapsed, "{} vs {} ns", marked.elapsed, plain.elapsed);
    assert!(marked.net.nodes[0].eng.pacing_active());
}

#[test]
fn with_dcqcn_off_ce_marks_are_counted_and_nothing_else_changes() {
    let plain = write_run(false, Some(off()));
    let marked = write_run(true, Some(off()));
    let np = marked.net.nodes[1].eng.cc_counters();
    assert!(np.np_ecn_marked_roce_packets >= 20, "{np:?}");
    assert_eq!(np.np_cnp_sent, 0);
    assert!(cnps(&marked.net).is_empty());
    assert_eq!(marked.net.nodes[0].eng.cc_counters().rp_cnp_handled, 0);
    assert!(!marked.net.nodes[0].eng.pacing_active());
    // Same packets at the same instants as an unmarked run: today's behaviour.
    let t = |r: &Run| -> Vec<(u64, Vec<u8>)> {
        r.net.trace.as_ref().unwrap().iter().map(|(at, p)| (*at, p.data.clone())).collect()
    };
    assert_eq!(t(&marked), t(&plain));
    assert_eq!(marked.elapsed, plain.elapsed);
}

/// One packet by hand: the data packet's traffic class, the CNP's layout and traffic class,
/// and a CNP to a sender with DCQCN off.
#[test]
fn data_leaves_ect0_and_a_cnp_leaves_as_mlx5_sends_it() {
    for enabled in [true, false] {
        let mut net = Net::new(2, 7, LinkCfg::default());
        let p = DcqcnParams { enabled, ..DcqcnParams::default() };
        for n in &mut net.nodes {
            n.eng.set_dcqcn(p);
        }
        let o = QpOpts::default();
        let (a, b) = connect(&mut net, 0, 1, &o);
        let (src, smr) = buffer(&mut net, a, 64);
        let (dst, dmr) = buffer(&mut net, b, 64);
        let kind = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, kind, &[sge(src, 64, smr)])).unwrap();
        let mut buf = vec![0u8; MAX_PACKET];
        let t = net.nodes[0].eng.poll_transmit(net.now, &mut buf).unwrap();
        assert_eq!(t.tos, if enabled { ECN_ECT0 } else { 0 }, "data traffic class");
        let ip = urxe::wire::icrc::IpFields::v4_df([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
        let (from, to) = (net.nodes[0].addr, net.nodes[1].addr);
        let d = Datagram {
            src: from,
            src_port: t.src_port,
            dst: to,
            icrc: IcrcCheck::Full(ip),
            payload: &buf[..t.len],
            ce: true,
        };
        net.nodes[1].eng.handle_datagram(net.now, &d);
        assert_eq!(net.nodes[1].eng.cc_counters().np_ecn_marked_roce_packets, 1);
        let mut out = vec![0u8; MAX_PACKET];
        let first = net.nodes[1].eng.poll_transmit(net.now, &mut out).unwrap();
        let parsed = urxe::wire::parse(&out[..first.len]).unwrap();
        if !enabled {
            assert_ne!(parsed.headers.bth.opcode, op::CNP, "no CNP with DCQCN off");
            assert_eq!(net.nodes[1].eng.cc_counters().np_cnp_sent, 0);
        } else {
            // The CNP comes first: BTH 0x81 with BECN, to the sender's QP, 16 reserved bytes
            // and the ICRC (12 + 16 + 4 bytes), DSCP 48 and Not-ECT.
            assert_eq!(parsed.headers.bth.opcode, op::CNP);
            assert!(parsed.headers.bth.becn);
            assert_eq!(parsed.headers.bth.dest_qp, a.qpn);
            assert_eq!(first.len, 32);
            assert_eq!((first.tos, first.dst), (48 << 2, from));
        }
        // A CNP reaches node 0 (built by hand for the disabled case).
        let cnp_bth = urxe::wire::cnp::cnp_bth(a.qpn, 0xFFFF);
        let h = urxe::wire::Headers { bth: cnp_bth, ..Default::default() };
        let mut c = vec![0u8; 64];
        let hl = h.emit(&mut c).unwrap();
        let ip_back = urxe::wire::icrc::IpFields::v4_df([10, 0, 0, 2].into(), [10, 0, 0, 1].into());
        let len = urxe::wire::packet::finish(&mut c, hl, 0, &ip_back, 0xC000, 4791).unwrap();
        let d = Datagram {
            src: to,
            src_port: 0xC000,
            dst: from,
            icrc: IcrcCheck::Full(ip_back),
            payload: &c[..len],
            ce: false,
        };
        net.nodes[0].eng.handle_datagram(net.now, &d);
        let rp = net.nodes[0].eng.cc_counters();
        assert_eq!((rp.rp_cnp_handled, rp.rp_cnp_ignored), if enabled { (1, 0) } else { (0, 1) });
        assert_eq!(net.nodes[0].eng.qp_rate_bps(a.qpn).is_some(), enabled);
        assert_eq!(net.nodes[0].eng.counters().opcode_errors, 0, "a CNP is not an opcode error");
    }
}
