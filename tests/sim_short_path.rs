//! The short paths (issue #40) decide exactly as the general path does. The same traffic runs
//! twice through the simulator — short paths on, then off (`Engine::set_short_paths`, a test
//! switch of the `fuzzing` feature) — over the same seeded lossy link: every packet on the wire
//! (byte for byte, in order, at the same time), every completion, every counter and the
//! memory the messages land in must be the same, and the run with short paths on must have
//! taken them. The traffic mixes what the short paths handle (one-packet RC SENDs and WRITEs,
//! with and without immediate, inline or through one to three SGEs, solicited or not, and
//! their retransmissions after loss) with what they leave to the general path (multi-packet
//! messages, READs, zero-length messages), and ends with a WR whose lkey is bad.

mod sim;

use sim::*;
use urxe::engine::*;

const MS: u64 = 1_000_000;
const MSGS: u64 = 240;
const RECV_LEN: u32 = 4096;

struct Outcome {
    trace: Vec<(u64, usize, usize, u16, Vec<u8>)>,
    wcs: [Vec<WorkCompletion>; 2],
    counters: [Counters; 2],
    dst: Vec<u8>,
    recv_area: Vec<u8>,
    short_taken: u64,
}

/// One WR of the mix: (kind, length, SGE count, flags) drawn from `rng`.
fn draw(rng: &mut Rng) -> (u8, u32, usize, SendFlags) {
    let kind = rng.below(10) as u8;
    let len = match rng.below(10) {
        0 => 0,
        1 => 1 + rng.below(3) as u32,
        2 | 3 => 64,
        4 => 1024,
        5 => 1025 + rng.below(2000) as u32,
        _ => rng.below(1024) as u32,
    };
    let sges = 1 + rng.below(3) as usize;
    let inline = len <= 256 && rng.chance(0.3);
    let mut flags = SendFlags::EMPTY;
    if rng.chance(0.7) {
        flags |= SendFlags::SIGNALED;
    }
    if rng.chance(0.2) {
        flags |= SendFlags::SOLICITED;
    }
    if inline {
        flags |= SendFlags::INLINE;
    }
    (kind, len, sges, flags)
}

fn run(seed: u64, link: LinkCfg, short: bool) -> Outcome {
    let mut net = Net::new(2, seed, link);
    for n in &mut net.nodes {
        n.eng.set_short_paths(short);
    }
    net.trace = Some(Vec::new());
    let o = QpOpts { mtu: Mtu::Mtu1024, max_send_wr: 512, max_recv_wr: 512, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 1 << 16);
    let (dst, dmr) = buffer(&mut net, b, 1 << 16);
    let (rbuf, rmr) = buffer(&mut net, b, MSGS * RECV_LEN as u64);
    let mut rng = Rng::new(seed ^ 0x5107);
    let mut data = vec![0u8; 1 << 16];
    rng.fill(&mut data);
    net.nodes[0].mem().set(src, &data);
    for i in 0..MSGS {
        // Two SGEs per receive: the second starts 100 bytes in.
        let at = rbuf + i * RECV_LEN as u64;
        let sg = [sge(at, 100, rmr), sge(at + 100, RECV_LEN - 100, rmr)];
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 1000 + i, sg_list: &sg }).unwrap();
    }
    let mut posted = 0u64;
    while posted < MSGS {
        for _ in 0..16 {
            let (kind, len, nsge, flags) = draw(&mut rng);
            let off = rng.below(1 << 14);
            let at = src + off;
            // Split `len` over `nsge` SGEs.
            let cut1 = len / 3;
            let cut2 = len - len / 4;
            let sg_all =
                [sge(at, cut1, smr), sge(at + cut1 as u64, cut2 - cut1, smr), sge(at + cut2 as u64, len - cut2, smr)];
            let sg: Vec<Sge> = match nsge {
                1 => vec![sge(at, len, smr)],
                2 => vec![sge(at, cut1, smr), sge(at + cut1 as u64, len - cut1, smr)],
                _ => sg_all.to_vec(),
            };
            let raddr = dst + rng.below(1 << 14);
            let imm = rng.next_u64() as u32;
            let wk = match kind {
                0..=3 => WrKind::Send,
                4 => WrKind::SendWithImm { imm_data: imm },
                5 | 6 => WrKind::RdmaWrite { remote_addr: raddr, rkey: dmr.rkey },
                7 => WrKind::RdmaWriteWithImm { remote_addr: raddr, rkey: dmr.rkey, imm_data: imm },
                _ => WrKind::RdmaRead { remote_addr: raddr, rkey: dmr.rkey },
            };
            let inline = flags.contains(SendFlags::INLINE) && !matches!(wk, WrKind::RdmaRead { .. });
            let flags = if inline { flags } else { SendFlags(flags.bits() & !SendFlags::INLINE.bits()) };
            let wr = SendWr { wr_id: posted, kind: wk, flags, sg_list: &sg, ud: None };
            net.nodes[0].eng.post_send(net.now, a.qpn, &wr).unwrap();
            posted += 1;
        }
        net.run_until(net.now + MS / 4, |_| false);
    }
    net.run_idle(200 * MS);
    // Last, a one-packet SEND whose lkey is bad: the WR fails with LOC_PROT_ERR, the QP errs.
    let bad = [Sge { addr: src, length: 64, lkey: smr.lkey ^ 0x100 }];
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(9999, WrKind::Send, &bad)).unwrap();
    net.run_idle(50 * MS);
    let recv_area = net.nodes[1].mem().get(rbuf, (MSGS * RECV_LEN as u64) as usize);
    let written = net.nodes[1].mem().get(dst, 1 << 16);
    outcome(&mut net, a, b, written, recv_area)
}

/// What a run left: the wire, both CQs drained, the counters, the memory `dst` and
/// `recv_area` hold (read by the caller) and how many packets the short paths took.
fn outcome(net: &mut Net, a: End, b: End, dst: Vec<u8>, recv_area: Vec<u8>) -> Outcome {
    let wcs = [net.poll_all(0, a.cq), net.poll_all(1, b.cq)];
    let trace =
        net.trace.take().unwrap().into_iter().map(|(t, p)| (t, p.from, p.to, p.src_port, p.data)).collect::<Vec<_>>();
    Outcome {
        trace,
        wcs,
        counters: [*net.nodes[0].eng.counters(), *net.nodes[1].eng.counters()],
        dst,
        recv_area,
        short_taken: net.nodes[0].eng.short_path_packets() + net.nodes[1].eng.short_path_packets(),
    }
}

fn same_both_ways(seed: u64, link: LinkCfg) {
    let on = run(seed, link, true);
    let off = run(seed, link, false);
    assert_eq!(off.short_taken, 0);
    assert!(on.short_taken > 100, "the short paths handled {} packets", on.short_taken);
    // The traffic did what it should: most WRs completed, the bad one failed.
    let sends = &on.wcs[0];
    assert!(sends.iter().filter(|w| w.status == WcStatus::Success).count() > 100);
    assert!(sends.iter().any(|w| w.wr_id == 9999 && w.status == WcStatus::LocProtErr), "{:?}", sends.last());
    assert_eq!(on.trace.len(), off.trace.len(), "packets on the wire");
    for (i, (x, y)) in on.trace.iter().zip(&off.trace).enumerate() {
        assert_eq!(x, y, "packet {i} differs");
    }
    assert_eq!(on.counters, off.counters);
    assert_eq!(on.wcs, off.wcs);
    assert!(on.dst == off.dst && on.recv_area == off.recv_area, "memory differs");
}

#[test]
fn short_and_general_paths_agree_on_a_clean_link() {
    same_both_ways(1, LinkCfg::default());
}

#[test]
fn short_and_general_paths_agree_under_loss_duplicates_and_reordering() {
    for seed in [2, 3, 4] {
        let link = LinkCfg { loss: 0.03, dup: 0.01, reorder: 0.02, reorder_window: 20_000, ..LinkCfg::default() };
        same_both_ways(seed, link);
    }
}

#[test]
fn short_and_general_paths_agree_on_a_corrupting_link() {
    // Flipped bits: the ICRC check drops them on either path, the same way.
    let link = LinkCfg { bitflip: 0.02, loss: 0.01, ..LinkCfg::default() };
    same_both_ways(5, link);
}

/// The responder's failures on the short path's packets, one QP pair each (a failure ends the
/// QP): what is on the wire, the completions and the counters, short paths on and off.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// A SEND longer than the receive WQE: LENGTH_ERR, NAK Invalid Request.
    ReceiveTooSmall,
    /// The receive WQE's lkey is bad: LOC_PROT_ERR on the receive, NAK Remote Operational.
    ReceiveBadLkey,
    /// A WRITE with a bad rkey: NAK Remote Access.
    WriteBadRkey,
    /// SENDs before any receive is posted: RNR NAKs, then the receive arrives.
    NoReceiveYet,
    /// A WRITE to a QP that grants no remote write (the general path's case).
    WriteNotGranted,
    /// A WRITE WITH IMMEDIATE whose RETH length is not what it carries.
    WriteLengthMismatch,
}

fn run_fault(f: Fault, short: bool) -> Outcome {
    let mut net = Net::new(2, 7, LinkCfg::default());
    for n in &mut net.nodes {
        n.eng.set_short_paths(short);
    }
    net.trace = Some(Vec::new());
    let mut o = QpOpts { mtu: Mtu::Mtu1024, min_rnr_timer: 1, ..QpOpts::default() };
    if let Fault::WriteNotGranted = f {
        o.access = AccessFlags::LOCAL_WRITE;
    }
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 1 << 12);
    let (dst, dmr) = buffer(&mut net, b, 1 << 12);
    net.nodes[0].mem().set(src, &[0x5A; 1 << 12]);
    let recv_len = if let Fault::ReceiveTooSmall = f { 16 } else { 2048 };
    let lkey = if let Fault::ReceiveBadLkey = f { dmr.lkey ^ 0x100 } else { dmr.lkey };
    let rsg = [Sge { addr: dst, length: recv_len, lkey }];
    if !matches!(f, Fault::NoReceiveYet) {
        for i in 0..4 {
            net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 100 + i, sg_list: &rsg }).unwrap();
        }
    }
    let sg = [sge(src, 64, smr)];
    let wr = |id, kind| SendWr { wr_id: id, kind, flags: SendFlags::SIGNALED, sg_list: &sg, ud: None };
    let kinds: Vec<WrKind> = match f {
        Fault::WriteBadRkey => vec![WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey ^ 0x100 }],
        Fault::WriteNotGranted => vec![WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey }],
        _ => vec![WrKind::Send, WrKind::SendWithImm { imm_data: 3 }],
    };
    for (i, k) in kinds.into_iter().enumerate() {
        net.nodes[0].eng.post_send(net.now, a.qpn, &wr(i as u64, k)).unwrap();
    }
    if let Fault::WriteLengthMismatch = f {
        // A hand-made WRITE ONLY WITH IMMEDIATE whose RETH says 65 bytes but carries 64: the
        // requester never sends one, so it is injected (with a valid ICRC) at the next PSN.
        net.run_idle(5 * MS);
        let mut buf = vec![0u8; 256];
        let w = urxe::wire::short::OnlyRequest::WriteImm { va: dst, rkey: dmr.rkey, len: 65, imm: 1 };
        let psn = urxe::wire::Psn::new((o.a_psn + 2) & 0xFF_FFFF);
        let hl = urxe::wire::short::emit_rc_only(&mut buf, w, false, b.qpn, psn).unwrap();
        let (s, d) = match (net.nodes[0].addr, net.nodes[1].addr) {
            (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => (s, d),
            _ => unreachable!(),
        };
        let ip = urxe::wire::icrc::IpFields::v4_df(s, d);
        let n = urxe::wire::packet::finish(&mut buf, hl, 64, &ip, 0xC123, 4791).unwrap();
        buf.truncate(n);
        net.inject(Packet { from: 0, to: 1, src_port: 0xC123, data: buf }, 0);
    }
    net.run_until(net.now + MS, |_| false);
    if let Fault::NoReceiveYet = f {
        for i in 0..4 {
            net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 100 + i, sg_list: &rsg }).unwrap();
        }
    }
    net.run_idle(100 * MS);
    let written = net.nodes[1].mem().get(dst, 1 << 12);
    outcome(&mut net, a, b, written, Vec::new())
}

#[test]
fn the_responders_failures_are_the_same_on_both_paths() {
    for f in [
        Fault::ReceiveTooSmall,
        Fault::ReceiveBadLkey,
        Fault::WriteBadRkey,
        Fault::NoReceiveYet,
        Fault::WriteNotGranted,
        Fault::WriteLengthMismatch,
    ] {
        let on = run_fault(f, true);
        let off = run_fault(f, false);
        assert_eq!(off.short_taken, 0);
        assert!(on.short_taken > 0, "{f:?}: no short path taken");
        assert_eq!(on.trace.len(), off.trace.len(), "{f:?}: packets on the wire");
        for (i, (x, y)) in on.trace.iter().zip(&off.trace).enumerate() {
            assert_eq!(x, y, "{f:?}: packet {i} differs");
        }
        assert_eq!(on.counters, off.counters, "{f:?}");
        assert_eq!(on.wcs, off.wcs, "{f:?}");
        assert!(on.dst == off.dst, "{f:?}: memory differs");
        // The failure happened (not a run where everything succeeded).
        let failed = on.wcs.iter().flatten().any(|w| w.status != WcStatus::Success) || on.counters[1].rnr_naks_sent > 0;
        assert!(failed, "{f:?}: {:?}", on.wcs);
    }
}
