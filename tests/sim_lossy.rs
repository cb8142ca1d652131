//! The requester's adaptation (src/engine/window.rs) seen from outside: a stalled peer gets
//! backed-off probes, not whole windows; retry_cnt still counts configured local ACK timeouts
//! only; a duplicate NAK does not restart go-back-N twice; ACKs that lag past the timer cost one
//! premature expiry (a probe, not the window), after which the QP's floor covers that lag; and the
//! responder's ACK of a duplicate SEND never covers a later READ whose response may be lost.

mod sim;

use std::cell::Cell;
use std::rc::Rc;

use sim::*;
use urxe::engine::*;
use urxe::wire::opcode::op;

const MS: u64 = 1_000_000;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

/// Drops every packet from node 1 while `stall` is set.
fn stall_responses(net: &mut Net) -> Rc<Cell<bool>> {
    let stall = Rc::new(Cell::new(false));
    let s = stall.clone();
    net.interceptor =
        Some(Box::new(move |p: &mut Packet| if s.get() && p.from == 1 { Verdict::Drop } else { Verdict::Pass }));
    stall
}

#[test]
fn stalled_peer_gets_backed_off_probes_and_retry_cnt_counts_only_configured_timeouts() {
    let mut net = Net::new(2, 21, LinkCfg::default());
    // 16.8 ms local ACK timeout and no retry at all: the first configured timeout without
    // progress fails the WR, so only early probes can save it.
    let o = QpOpts { timeout: 12, retry_cnt: 0, mtu: Mtu::Mtu1024, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let len = 64 * 1024;
    let (src, smr) = buffer(&mut net, a, len as u64);
    let (dst, dmr) = buffer(&mut net, b, len as u64);
    let data = pattern(len, 21);
    net.nodes[0].mem().set(src, &data);
    let stall = stall_responses(&mut net);
    // Warm up: round-trip samples from a clean transfer.
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, len as u32, smr)])).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
    let before = *net.nodes[0].eng.counters();
    assert!(before.rtt_samples > 0);
    // The peer stops answering for 8 ms (half the configured timeout), then recovers. The
    // timer (2 ms floor) fires at 2, 6 and 14 ms.
    stall.set(true);
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(2, w, &[sge(src, len as u32, smr)])).unwrap();
    net.run_until(8 * MS, |_| false);
    stall.set(false);
    net.run_idle(30 * MS);
    let wc = net.poll_all(0, a.cq);
    assert_eq!((wc.len(), wc[0].wr_id, wc[0].status), (1, 2, WcStatus::Success));
    assert_eq!(net.nodes[1].mem().get(dst, len), data);
    let c = *net.nodes[0].eng.counters();
    let early = c.early_rtos - before.early_rtos;
    let timeouts = c.ack_timeouts - before.ack_timeouts;
    // Early expiries from the measured round trip, doubling each time; none of them is a
    // local ACK timeout, so retry_cnt 0 was never exhausted.
    assert_eq!(early, 3, "early expiries");
    assert_eq!(timeouts, 0);
    assert_eq!(c.retry_exceeded, 0);
    assert!(c.rto_backoffs - before.rto_backoffs >= early);
    // Each expiry resent a two-packet probe, not the 64-packet message.
    let resent = c.retransmitted_pkts - before.retransmitted_pkts;
    let probes = c.probe_resends - before.probe_resends;
    assert!(probes >= early && probes <= 2 * (early + timeouts), "{probes} probe packets");
    assert!(resent < 64 + 2 * (early + timeouts), "{resent} packets resent");
    assert!(c.send_window_min <= 2);
}

#[test]
fn stalled_peer_still_fails_after_retry_cnt_plus_one_configured_timeouts() {
    let mut net = Net::new(2, 22, LinkCfg::default());
    let o = QpOpts { timeout: 10, retry_cnt: 2, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 4096);
    let (dst, dmr) = buffer(&mut net, b, 4096);
    let stall = stall_responses(&mut net);
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, 4096, smr)])).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
    stall.set(true);
    let t0 = net.now;
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(2, w, &[sge(src, 4096, smr)])).unwrap();
    let period = ack_timeout_nanos(o.timeout).unwrap();
    let failed = net.run_until(10 * period, |net| !net.poll_all(0, a.cq).is_empty());
    assert!(failed);
    let c = net.nodes[0].eng.counters();
    assert_eq!((c.ack_timeouts, c.retry_exceeded), (3, 1), "retry_cnt + 1 configured timeouts");
    assert!(c.early_rtos > 0);
    // Not sooner than the application asked: three full periods.
    assert!(net.now - t0 >= 3 * period && net.now - t0 < 4 * period, "{} ns", net.now - t0);
}

#[test]
fn duplicate_nak_for_the_same_psn_restarts_go_back_n_once() {
    let mut net = Net::new(2, 23, LinkCfg::default());
    net.trace = Some(Vec::new());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts { mtu: Mtu::Mtu1024, ..QpOpts::default() });
    let len = 16 * 1024;
    let (src, smr) = buffer(&mut net, a, len as u64);
    let (dst, dmr) = buffer(&mut net, b, len as u64);
    let data = pattern(len, 23);
    net.nodes[0].mem().set(src, &data);
    // Drop the 3rd WRITE packet once; duplicate every NAK the responder sends.
    let dropped = Rc::new(Cell::new(false));
    let d = dropped.clone();
    let naks = Rc::new(std::cell::RefCell::new(Vec::new()));
    let n = naks.clone();
    net.interceptor = Some(Box::new(move |p: &mut Packet| {
        if p.from == 0 && p.opcode() == op::RC_RDMA_WRITE_MIDDLE && !d.get() {
            d.set(true);
            return Verdict::Drop;
        }
        if p.from == 1 && p.syndrome().is_some_and(|s| s >> 5 == 3) {
            n.borrow_mut().push(p.clone());
        }
        Verdict::Pass
    }));
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, len as u32, smr)])).unwrap();
    // Deliver each NAK a second time a little later.
    let mut replayed = 0;
    net.run_until(10 * MS, |net| {
        let pending: Vec<Packet> = naks.borrow_mut().drain(..).collect();
        for p in pending {
            net.inject(p, 500);
            replayed += 1;
        }
        !net.poll_all(0, a.cq).is_empty()
    });
    net.run_idle(MS);
    assert!(dropped.get());
    assert!(replayed >= 1);
    assert_eq!(net.nodes[1].mem().get(dst, len), data);
    let c = net.nodes[0].eng.counters();
    assert!(c.seq_naks_rcvd >= 2);
    // The copy was either ignored as a duplicate NAK or came after progress; never a second
    // rewind for the same loss: the lost packet went out again exactly once.
    let resends_of_lost = net
        .trace
        .as_ref()
        .unwrap()
        .iter()
        .filter(|(_, p)| p.from == 0 && p.opcode() == op::RC_RDMA_WRITE_MIDDLE)
        .count();
    assert!(c.dup_naks_ignored + c.unexpected_responses >= replayed as u64 - 1);
    // 14 MIDDLE packets, one dropped: 13 went through, then one go-back-N resent all 14.
    assert_eq!(resends_of_lost, 13 + 14);
    assert_eq!(c.window_reductions, 1);
}

/// Holds every packet from node 1 while `hold` is set, for the test to deliver later: a peer
/// whose ACKs lag (a slow or descheduled host) rather than a lossy one.
fn hold_responses(net: &mut Net) -> (Rc<Cell<bool>>, Rc<std::cell::RefCell<Vec<Packet>>>) {
    let hold = Rc::new(Cell::new(false));
    let held = Rc::new(std::cell::RefCell::new(Vec::new()));
    let (h, k) = (hold.clone(), held.clone());
    net.interceptor = Some(Box::new(move |p: &mut Packet| {
        if h.get() && p.from == 1 {
            k.borrow_mut().push(p.clone());
            Verdict::Drop
        } else {
            Verdict::Pass
        }
    }));
    (hold, held)
}

#[test]
fn lagging_acks_raise_the_timer_floor_after_one_premature_expiry() {
    let mut net = Net::new(2, 23, LinkCfg::default());
    let o = QpOpts { timeout: 14, mtu: Mtu::Mtu1024, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let len = 256 * 1024; // 256 packets: twice the window
    let (src, smr) = buffer(&mut net, a, len as u64);
    let (dst, dmr) = buffer(&mut net, b, len as u64);
    let data = pattern(len, 23);
    net.nodes[0].mem().set(src, &data);
    let (hold, held) = hold_responses(&mut net);
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    // Warm up: the measured round trip is microseconds, so the timer sits at its 2 ms floor.
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, len as u32, smr)])).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
    // Each round: every ACK of a 256-packet WRITE is held for `lag`, then delivered in order.
    let round = |net: &mut Net, id: u64, lag: u64| {
        let before = *net.nodes[0].eng.counters();
        hold.set(true);
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(id, w, &[sge(src, len as u32, smr)])).unwrap();
        net.run_until(lag, |_| false);
        hold.set(false);
        // The first ACK now, the others 500 µs later (as a slow peer's trickle in).
        for (i, p) in held.borrow_mut().drain(..).enumerate() {
            net.inject(p, if i == 0 { 0 } else { 500_000 });
        }
        net.run_idle(300 * MS);
        let wc = net.poll_all(0, a.cq);
        assert_eq!((wc.len(), wc[0].wr_id, wc[0].status), (1, id, WcStatus::Success));
        assert_eq!(net.nodes[1].mem().get(dst, len), data);
        let c = *net.nodes[0].eng.counters();
        let resent = c.retransmitted_pkts - before.retransmitted_pkts;
        // A premature expiry costs its probe, not the window in flight.
        assert!(resent <= 2 * (c.early_rtos - before.early_rtos), "{resent} packets resent");
        (c.early_rtos - before.early_rtos, c.spurious_rtos - before.spurious_rtos)
    };
    // ACKs 3 ms late: the timer fires at 2 ms, resends a probe; the first ACK to arrive
    // acknowledges PSNs that were never resent, so the expiry was premature.
    let (early, spurious) = round(&mut net, 2, 3 * MS);
    assert_eq!((early, spurious), (1, 1));
    // The same lag again: the floor is now 4 ms and the timer no longer fires.
    let (early, spurious) = round(&mut net, 3, 3 * MS);
    assert_eq!((early, spurious), (0, 0));
    // A lag of 20 ms, far above the measured round trip and its variation: the timer fires
    // once more, is found premature, and the floor jumps past that lag (not just doubles), so
    // the same lag again fires nothing.
    let (early, spurious) = round(&mut net, 4, 20 * MS);
    assert_eq!((early, spurious), (1, 1));
    let (early, _) = round(&mut net, 5, 20 * MS);
    assert_eq!(early, 0);
    let c = *net.nodes[0].eng.counters();
    assert_eq!((c.ack_timeouts, c.retry_exceeded), (0, 0));
}

/// A SEND and an RDMA READ behind it: the SEND's ACK and the READ's response are both lost, so
/// the requester resends both. The responder's ACK of the duplicate SEND must stop below the
/// READ (an ACK covering it tells a requester such as kernel rxe's that the READ's data came:
/// rping over a lossy link to rxe echoed a stale buffer that way); the READ is answered again
/// and completes with its data.
#[test]
fn ack_of_a_duplicate_send_stops_below_a_read_whose_response_was_lost() {
    let mut net = Net::new(2, 29, LinkCfg::default());
    net.trace = Some(Vec::new());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    let (local, lmr) = buffer(&mut net, a, 256);
    let (remote, rmr) = buffer(&mut net, b, 256);
    let data = pattern(256, 29);
    net.nodes[1].mem().set(remote, &data);
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 7, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    // The first ACK and the first READ response from node 1 are lost.
    let lost = Rc::new(Cell::new((false, false)));
    let l = lost.clone();
    net.interceptor = Some(Box::new(move |p: &mut Packet| {
        let (ack, resp) = l.get();
        if p.from == 1 && p.opcode() == op::RC_ACKNOWLEDGE && !ack {
            l.set((true, resp));
            return Verdict::Drop;
        }
        if p.from == 1 && p.opcode() == op::RC_RDMA_READ_RESPONSE_ONLY && !resp {
            l.set((ack, true));
            return Verdict::Drop;
        }
        Verdict::Pass
    }));
    let e = &mut net.nodes[0].eng;
    e.post_send(net.now, a.qpn, &send_wr(1, WrKind::Send, &[sge(src, 64, smr)])).unwrap();
    let r = WrKind::RdmaRead { remote_addr: remote, rkey: rmr.rkey };
    e.post_send(net.now, a.qpn, &send_wr(2, r, &[sge(local, 256, lmr)])).unwrap();
    let mut wcs = Vec::new();
    net.run_until(100 * MS, |net| {
        wcs.extend(net.poll_all(0, a.cq));
        wcs.len() == 2
    });
    assert_eq!(lost.get(), (true, true), "both losses happened");
    let trace = net.trace.as_ref().unwrap();
    let send_psn = trace.iter().find(|(_, p)| p.from == 0 && p.opcode() == op::RC_SEND_ONLY).unwrap().1.psn();
    let read_psn = trace.iter().find(|(_, p)| p.from == 0 && p.opcode() == op::RC_RDMA_READ_REQUEST).unwrap().1.psn();
    assert_eq!(read_psn, (send_psn + 1) & 0xff_ffff);
    let sends = trace.iter().filter(|(_, p)| p.from == 0 && p.opcode() == op::RC_SEND_ONLY).count();
    assert_eq!(sends, 2, "the SEND went out again");
    // Every plain ACK node 1 sent after the resend: none covers the READ.
    let acks: Vec<u32> =
        trace.iter().filter(|(_, p)| p.from == 1 && p.opcode() == op::RC_ACKNOWLEDGE).map(|(_, p)| p.psn()).collect();
    assert!(!acks.is_empty(), "the duplicate SEND was acknowledged");
    assert!(acks.iter().all(|&p| p == send_psn), "ACK PSNs {acks:x?}: SEND {send_psn:x}, READ {read_psn:x}");
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(net.nodes[0].mem().get(local, 256), data);
    assert_eq!(net.poll_all(1, b.cq).len(), 1, "the SEND was delivered once");
}

/// A new QP's window starts at 128 PSNs and slow-starts to 512: on a lossy link the first
/// losses of a transfer cost what is in flight, so starting at the ceiling resent more. 4 MiB
/// of WRITEs at MTU 4096 over a link losing 5 %, 8 seeds: 13.5 resends per lost packet on
/// average (10.7-15.9) when the window started at 512, 10.3 (9.3-12.3) from 128.
#[test]
fn a_new_qp_on_a_lossy_link_resends_about_ten_packets_per_loss() {
    let (mut lost, mut resent) = (0, 0);
    for seed in 0..8u64 {
        let mut net = Net::new(2, 100 + seed, LinkCfg { loss: 0.05, ..LinkCfg::default() });
        let (a, b) = connect(&mut net, 0, 1, &QpOpts { mtu: Mtu::Mtu4096, ..QpOpts::default() });
        let len = 1 << 20;
        let (src, smr) = buffer(&mut net, a, len as u64);
        let (dst, dmr) = buffer(&mut net, b, len as u64);
        let data = pattern(len, seed);
        net.nodes[0].mem().set(src, &data);
        let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
        for i in 0..4 {
            net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(i, w, &[sge(src, len as u32, smr)])).unwrap();
        }
        let mut wcs = Vec::new();
        net.run_until(20_000 * MS, |net| {
            wcs.extend(net.poll_all(0, a.cq));
            wcs.len() == 4
        });
        assert!(wcs.len() == 4 && wcs.iter().all(|w| w.status == WcStatus::Success), "seed {seed}: {wcs:?}");
        assert_eq!(net.nodes[1].mem().get(dst, len), data);
        lost += net.stats.lost;
        resent += net.nodes[0].eng.counters().retransmitted_pkts;
    }
    let per_loss = resent as f64 / lost as f64;
    assert!(per_loss < 12.0, "{resent} packets resent for {lost} lost: {per_loss:.1} each");
}
