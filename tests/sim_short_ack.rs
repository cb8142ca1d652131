//! The requester's ACK short path (issue #40) decides exactly as the general path does. The
//! responder's own ACKs are dropped; a script of hand-made responses is injected instead —
//! coalesced ACKs, a duplicate, a stale and a too-new one, an ACK in the middle of a
//! multi-packet message, a NAK-sequence-error and an RNR NAK — with the short paths on, then
//! off. After every step the requester's completions, counters and next timer deadline, and
//! every packet on the wire, must be the same both ways; the run with them on must have taken
//! the short path.

mod sim;

use sim::*;
use urxe::engine::*;
use urxe::wire::aeth::{AethRepr, CreditCode, NakCode, RnrTimer, Syndrome};
use urxe::wire::bth::BthRepr;
use urxe::wire::opcode::op;
use urxe::wire::psn::Msn;
use urxe::wire::Psn;

const US: u64 = 1_000;
const A_PSN: u32 = 0xFF_FFF8; // wraps during the run

/// A response to the requester (node 0) at PSN offset `off` from its first PSN.
fn response(net: &Net, qpn: u32, off: u32, syndrome: Syndrome) -> Packet {
    let mut buf = vec![0u8; 64];
    let bth = BthRepr {
        opcode: op::RC_ACKNOWLEDGE,
        dest_qp: qpn,
        psn: Psn::new(A_PSN.wrapping_add(off) & 0xFF_FFFF),
        ..BthRepr::default()
    };
    let aeth = AethRepr { syndrome, msn: Msn::new(off) };
    let hl = urxe::wire::packet::emit_ack(&bth, &aeth, &mut buf).unwrap();
    let (s, d) = match (net.nodes[1].addr, net.nodes[0].addr) {
        (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => (s, d),
        _ => unreachable!(),
    };
    let ip = urxe::wire::icrc::IpFields::v4_df(s, d);
    let n = urxe::wire::packet::finish(&mut buf, hl, 0, &ip, 0xC321, 4791).unwrap();
    buf.truncate(n);
    Packet { from: 1, to: 0, src_port: 0xC321, data: buf }
}

/// Runs the network `us` microseconds on, and no further: a junk datagram to the responder
/// each microsecond (it drops it) keeps the clock from jumping to the next timer.
fn advance(net: &mut Net, us: u64) {
    for k in 1..=us {
        net.inject(Packet { from: 0, to: 1, src_port: 0xC000, data: vec![0; 4] }, k * US);
    }
    let end = net.now + us * US;
    net.run_until(us * US + US, |n| n.now >= end);
}

type Step = (Vec<WorkCompletion>, Counters, Option<u64>);

/// Every packet on the wire: (time, from, to, bytes).
type Trace = Vec<(u64, usize, usize, Vec<u8>)>;

fn run(short: bool) -> (Vec<Step>, Trace, u64) {
    let mut net = Net::new(2, 11, LinkCfg::default());
    for n in &mut net.nodes {
        n.eng.set_short_paths(short);
    }
    net.trace = Some(Vec::new());
    // The responder's ACKs never arrive: the script below stands in for them.
    net.interceptor =
        Some(Box::new(
            |p: &mut Packet| {
                if p.from == 1 && p.opcode() == op::RC_ACKNOWLEDGE {
                    Verdict::Drop
                } else {
                    Verdict::Pass
                }
            },
        ));
    let o = QpOpts {
        mtu: Mtu::Mtu1024,
        a_psn: A_PSN,
        timeout: 14,
        retry_cnt: 1,
        rnr_retry: 7,
        sq_sig_all: false,
        ..QpOpts::default()
    };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 1 << 14);
    let (dst, dmr) = buffer(&mut net, b, 1 << 14);
    let rsg = [sge(dst, 4096, dmr)];
    for i in 0..32 {
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 100 + i, sg_list: &rsg }).unwrap();
    }
    // PSN offsets: 0..=3 one-packet SENDs (1 unsignaled), 4..=6 a 3000-byte SEND, 7 a WRITE,
    // 8..=9 two more SENDs.
    let lens = [64u32, 64, 64, 64, 3000, 64, 64, 64];
    for (i, len) in lens.iter().enumerate() {
        let sg = [sge(src, *len, smr)];
        let kind = if i == 5 { WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey } } else { WrKind::Send };
        let flags = if i == 1 { SendFlags::EMPTY } else { SendFlags::SIGNALED };
        let wr = SendWr { wr_id: i as u64, kind, flags, sg_list: &sg, ud: None };
        net.nodes[0].eng.post_send(net.now, a.qpn, &wr).unwrap();
    }
    advance(&mut net, 50);
    let ack = Syndrome::Ack { credits: CreditCode::UNLIMITED };
    let script: Vec<(u32, Syndrome)> = vec![
        (1, ack),                                          // coalesced: WQEs 0 and 1
        (1, ack),                                          // duplicate
        (0xFF_FFF0, ack),                                  // stale (far before)
        (40, ack),                                         // too new
        (2, ack),                                          // one more
        (5, ack),                                          // WQE 3, and the middle of WQE 4
        (6, Syndrome::Nak(NakCode::PsnSequenceError)),     // a loss at the last packet of WQE 4
        (6, Syndrome::Nak(NakCode::PsnSequenceError)),     // reported twice
        (6, ack),                                          // the resend acknowledged
        (8, Syndrome::RnrNak { timer: RnrTimer::new(1) }), // WQE 6 not ready yet
        (9, ack),                                          // everything
        (9, ack),                                          // duplicate of the last
    ];
    let mut steps = Vec::new();
    for (off, syn) in script {
        let p = response(&net, a.qpn, off, syn);
        net.inject(p, 0);
        advance(&mut net, 20);
        let t = net.nodes[0].eng.poll_timeout();
        steps.push((net.poll_all(0, a.cq), *net.nodes[0].eng.counters(), t));
    }
    // Two more SENDs (offsets 10, 11); each ACK after a local ACK timeout must give the
    // retry count back (retry_cnt is 1), or the second timeout fails the WR.
    for i in 8..10u64 {
        let sg = [sge(src, 64, smr)];
        let wr = SendWr { wr_id: i, kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: &sg, ud: None };
        net.nodes[0].eng.post_send(net.now, a.qpn, &wr).unwrap();
    }
    for (n, off) in [(1u64, 10u32), (2, 11)] {
        net.run_until(1_000_000 * US, |net| net.nodes[0].eng.counters().ack_timeouts >= n);
        net.inject(response(&net, a.qpn, off, ack), 0);
        advance(&mut net, 20);
        let t = net.nodes[0].eng.poll_timeout();
        steps.push((net.poll_all(0, a.cq), *net.nodes[0].eng.counters(), t));
    }
    net.run_idle(20_000 * US);
    steps.push((net.poll_all(0, a.cq), *net.nodes[0].eng.counters(), net.nodes[0].eng.poll_timeout()));
    let trace = net.trace.take().unwrap().into_iter().map(|(t, p)| (t, p.from, p.to, p.data)).collect();
    (steps, trace, net.nodes[0].eng.short_path_packets() * 1_000_000 + net.nodes[0].eng.completions_made())
}

#[test]
fn ack_short_path_and_general_path_agree() {
    let (on, on_trace, taken) = run(true);
    let (off, off_trace, taken_off) = run(false);
    // (packets the short path took, completions made)
    let (made_on, made_off) = (taken % 1_000_000, taken_off % 1_000_000);
    let (taken, taken_off) = (taken / 1_000_000, taken_off / 1_000_000);
    assert_eq!(taken_off, 0);
    assert!(taken >= 5, "the ACK short path took {taken} packets");
    assert_eq!(made_on, made_off, "completions made");
    // The script did what it says: every signaled WR completed, in order, successfully.
    let ids: Vec<u64> = on.iter().flat_map(|s| s.0.iter()).map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![0, 2, 3, 4, 5, 6, 7, 8, 9], "{:?}", on.iter().map(|s| &s.0).collect::<Vec<_>>());
    assert!(on.iter().flat_map(|s| s.0.iter()).all(|w| w.status == WcStatus::Success));
    let last = &on.last().unwrap().1;
    assert!(last.ack_timeouts == 2 && last.retry_exceeded == 0, "{last:?}");
    assert!(last.unexpected_responses >= 2 && last.seq_naks_rcvd == 2 && last.rnr_naks_rcvd == 1, "{last:?}");
    for (i, (x, y)) in on.iter().zip(&off).enumerate() {
        assert_eq!(x.0, y.0, "step {i}: completions");
        assert_eq!(x.1, y.1, "step {i}: counters");
        assert_eq!(x.2, y.2, "step {i}: timer");
    }
    assert_eq!(on_trace.len(), off_trace.len(), "packets on the wire");
    for (i, (x, y)) in on_trace.iter().zip(&off_trace).enumerate() {
        assert_eq!(x, y, "packet {i} differs");
    }
}
