//! Scenario tests: two engines over the simulated network, written as traces.

mod sim;

use std::cell::RefCell;
use std::rc::Rc;

use sim::*;
use urxe::engine::*;
use urxe::wire::opcode::op;

const MS: u64 = 1_000_000;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

/// Counts packets with `opcode` from node `from`, and drops the `nth` (1-based) of them.
fn drop_nth(opcode: u8, from: usize, nth: usize) -> (Interceptor, Rc<RefCell<usize>>) {
    let seen = Rc::new(RefCell::new(0usize));
    let s = seen.clone();
    let f: Interceptor = Box::new(move |p: &mut Packet| {
        if p.from == from && p.opcode() == opcode {
            *s.borrow_mut() += 1;
            if *s.borrow() == nth {
                return Verdict::Drop;
            }
        }
        Verdict::Pass
    });
    (f, seen)
}

fn sent_with(net: &Net, opcode: u8) -> Vec<(u64, Packet)> {
    net.trace.as_ref().unwrap().iter().filter(|(_, p)| p.opcode() == opcode).cloned().collect()
}

#[test]
fn send_of_many_mtus_arrives_intact() {
    let mut net = Net::new(2, 1, LinkCfg::default());
    let o = QpOpts::default();
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 10_000);
    let (dst, dmr) = buffer(&mut net, b, 10_000);
    let data = pattern(10_000, 7);
    net.nodes[0].mem().set(src, &data);
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 9, sg_list: &[sge(dst, 10_000, dmr)] }).unwrap();
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, WrKind::Send, &[sge(src, 10_000, smr)])).unwrap();
    net.run_idle(10 * MS);
    let wa = net.poll_all(0, a.cq);
    let wb = net.poll_all(1, b.cq);
    assert_eq!(wa.len(), 1);
    assert_eq!(wa[0].status, WcStatus::Success);
    assert_eq!(wb.len(), 1);
    assert_eq!((wb[0].wr_id, wb[0].status, wb[0].byte_len), (9, WcStatus::Success, 10_000));
    assert_eq!(wb[0].src_qp, a.qpn);
    assert_eq!(net.nodes[1].mem().get(dst, 10_000), data);
}

#[test]
fn third_read_response_dropped_requester_times_out_and_rereads() {
    let mut net = Net::new(2, 2, LinkCfg::default());
    net.trace = Some(Vec::new());
    let o = QpOpts::default();
    let (a, b) = connect(&mut net, 0, 1, &o);
    let len = 3 * 1024;
    let (local, lmr) = buffer(&mut net, a, len as u64);
    let (remote, rmr) = buffer(&mut net, b, len as u64);
    let data = pattern(len, 3);
    net.nodes[1].mem().set(remote, &data);
    // Responses: FIRST, MIDDLE, LAST. Drop the LAST: nothing follows it, so only the local
    // ACK timer can notice.
    let (f, seen) = drop_nth(op::RC_RDMA_READ_RESPONSE_LAST, 1, 1);
    net.interceptor = Some(f);
    let kind = WrKind::RdmaRead { remote_addr: remote, rkey: rmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(5, kind, &[sge(local, len as u32, lmr)])).unwrap();
    net.run_idle(10 * MS);
    let wc = net.poll_all(0, a.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].opcode), (5, WcStatus::Success, WcOpcode::RdmaRead));
    assert_eq!(net.nodes[0].mem().get(local, len), data);
    // The retransmission timer noticed (here the configured local ACK timeout, which is
    // below the RTO floor; an earlier expiry from the measured round trip would count too).
    let c = net.nodes[0].eng.counters();
    assert_eq!(c.ack_timeouts + c.early_rtos, 1);
    assert_eq!(*seen.borrow(), 1);
    // The re-read is a new one-packet READ: its response is an ONLY.
    assert_eq!(sent_with(&net, op::RC_RDMA_READ_RESPONSE_ONLY).len(), 1);
    // The re-read asks only for what is missing: the third MTU, at the third PSN.
    let reqs = sent_with(&net, op::RC_RDMA_READ_REQUEST);
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].1.psn(), reqs[0].1.psn() + 2);
    let p = urxe::wire::parse(&reqs[1].1.data).unwrap();
    let reth = p.headers.reth.unwrap();
    assert_eq!((reth.va, reth.dma_len), (remote + 2048, 1024));
    // And it waited one local ACK timeout (4.096 µs << 4) before doing so.
    assert!(reqs[1].0 - reqs[0].0 >= ack_timeout_nanos(o.timeout).unwrap());
}

#[test]
fn missing_middle_read_response_rereads_without_waiting_for_the_timer() {
    let mut net = Net::new(2, 3, LinkCfg::default());
    let o = QpOpts::default();
    let (a, b) = connect(&mut net, 0, 1, &o);
    let len = 5 * 1024;
    let (local, lmr) = buffer(&mut net, a, len as u64);
    let (remote, rmr) = buffer(&mut net, b, len as u64);
    let data = pattern(len, 4);
    net.nodes[1].mem().set(remote, &data);
    let (f, _) = drop_nth(op::RC_RDMA_READ_RESPONSE_MIDDLE, 1, 2); // the 3rd response overall
    net.interceptor = Some(f);
    let kind = WrKind::RdmaRead { remote_addr: remote, rkey: rmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(5, kind, &[sge(local, len as u32, lmr)])).unwrap();
    net.run_idle(10 * MS);
    let wc = net.poll_all(0, a.cq);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(net.nodes[0].mem().get(local, len), data);
    assert_eq!(net.nodes[0].eng.counters().ack_timeouts, 0);
}

#[test]
fn rnr_nak_waits_encoded_timer_then_retries() {
    let mut net = Net::new(2, 4, LinkCfg::default());
    net.trace = Some(Vec::new());
    let o = QpOpts { min_rnr_timer: 14, ..QpOpts::default() }; // code 14 = 1.28 ms
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    net.nodes[0].mem().set(src, b"hello, rnr");
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, WrKind::Send, &[sge(src, 10, smr)])).unwrap();
    // No receive posted: run 3 ms, longer than one RNR wait.
    net.run_until(3 * MS, |_| false);
    assert!(net.nodes[1].eng.counters().rnr_naks_sent >= 2);
    assert!(net.poll_all(0, a.cq).is_empty(), "rnr_retry 7 retries forever");
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 2, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    net.run_idle(10 * MS);
    let wa = net.poll_all(0, a.cq);
    assert_eq!(wa.len(), 1);
    assert_eq!(wa[0].status, WcStatus::Success);
    assert_eq!(net.nodes[1].mem().get(dst, 10), b"hello, rnr");
    // Each retry came no earlier than the encoded 1.28 ms after the RNR NAK it answered.
    let tr = net.trace.as_ref().unwrap();
    let naks: Vec<u64> = tr
        .iter()
        .filter(|(_, p)| p.opcode() == op::RC_ACKNOWLEDGE && p.syndrome() == Some(0x20 | 14))
        .map(|x| x.0)
        .collect();
    let sends: Vec<u64> = tr.iter().filter(|(_, p)| p.opcode() == op::RC_SEND_ONLY).map(|x| x.0).collect();
    assert!(naks.len() >= 2);
    assert_eq!(sends.len(), naks.len() + 1);
    for (nak, retry) in naks.iter().zip(&sends[1..]) {
        let waited = retry - nak;
        assert!(waited >= rnr_nanos(14), "retried after {waited} ns");
        assert!(waited < rnr_nanos(14) + 100_000, "retried late: {waited} ns");
    }
}

#[test]
fn rnr_retry_exhausted_gives_rnr_retry_exc_err_then_flush() {
    let mut net = Net::new(2, 5, LinkCfg::default());
    let o = QpOpts { rnr_retry: 2, min_rnr_timer: 1, ..QpOpts::default() };
    let (a, _b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 64);
    for id in 1..=2 {
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(id, WrKind::Send, &[sge(src, 8, smr)])).unwrap();
    }
    net.run_idle(50 * MS);
    let wc = net.poll_all(0, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    // First try + rnr_retry retries = 3 RNR NAKs.
    assert_eq!(net.nodes[0].eng.counters().rnr_naks_rcvd, 3);
    assert_eq!(net.nodes[0].eng.counters().rnr_retry_exceeded, 1);
    assert_eq!(net.nodes[0].eng.query_qp(a.qpn).unwrap().0.qp_state, QpState::Err);
}

#[test]
fn psns_start_at_0xfffff0_and_wrap() {
    let mut net = Net::new(2, 6, LinkCfg { loss: 0.05, ..LinkCfg::default() });
    let o = QpOpts { a_psn: 0xFF_FFF0, b_psn: 0xFF_FFFA, mtu: Mtu::Mtu256, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let n = 8 * 1024;
    let (la, lamr) = buffer(&mut net, a, 3 * n as u64);
    let (rb, rbmr) = buffer(&mut net, b, 3 * n as u64);
    let d1 = pattern(n, 1);
    let d2 = pattern(n, 2);
    let d3 = pattern(n, 3);
    net.nodes[0].mem().set(la, &d1);
    net.nodes[0].mem().set(la + n as u64, &d2);
    net.nodes[1].mem().set(rb + 2 * n as u64, &d3);
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 100, sg_list: &[sge(rb, n as u32, rbmr)] }).unwrap();
    let e = &mut net.nodes[0].eng;
    // 32 packets each at MTU 256: the first message alone crosses 0xFFFFFF -> 0.
    e.post_send(net.now, a.qpn, &send_wr(1, WrKind::Send, &[sge(la, n as u32, lamr)])).unwrap();
    let w = WrKind::RdmaWrite { remote_addr: rb + n as u64, rkey: rbmr.rkey };
    e.post_send(net.now, a.qpn, &send_wr(2, w, &[sge(la + n as u64, n as u32, lamr)])).unwrap();
    let r = WrKind::RdmaRead { remote_addr: rb + 2 * n as u64, rkey: rbmr.rkey };
    e.post_send(net.now, a.qpn, &send_wr(3, r, &[sge(la + 2 * n as u64, n as u32, lamr)])).unwrap();
    net.run_idle(100 * MS);
    let wc = net.poll_all(0, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert_eq!(net.nodes[1].mem().get(rb, n), d1);
    assert_eq!(net.nodes[1].mem().get(rb + n as u64, n), d2);
    assert_eq!(net.nodes[0].mem().get(la + 2 * n as u64, n), d3);
    let (attr, _) = net.nodes[0].eng.query_qp(a.qpn).unwrap();
    assert_eq!(attr.sq_psn, 0xFF_FFF0, "query returns what was set");
}

fn atomic_setup(seed: u64) -> (Net, End, End, u64, MrHandle, u64, MrHandle) {
    let mut net = Net::new(2, seed, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (res, resmr) = buffer(&mut net, a, 64);
    let (ctr, ctrmr) = buffer(&mut net, b, 64);
    net.nodes[1].mem().set_u64(ctr, 1000);
    (net, a, b, res, resmr, ctr, ctrmr)
}

#[test]
fn duplicated_atomic_replays_original_value_and_adds_once() {
    let (mut net, a, _b, res, resmr, ctr, ctrmr) = atomic_setup(7);
    // Duplicate the FETCH_ADD request on the wire: the copy arrives 5 µs after the original.
    let dup: Rc<RefCell<Option<Packet>>> = Rc::new(RefCell::new(None));
    let d2 = dup.clone();
    net.interceptor = Some(Box::new(move |p: &mut Packet| {
        if p.opcode() == op::RC_FETCH_ADD && d2.borrow().is_none() {
            *d2.borrow_mut() = Some(p.clone());
        }
        Verdict::Pass
    }));
    let kind = WrKind::AtomicFetchAdd { remote_addr: ctr, rkey: ctrmr.rkey, add: 5 };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, kind, &[sge(res, 8, resmr)])).unwrap();
    net.pump_tx();
    let copy = dup.borrow_mut().take().expect("request seen");
    net.inject(copy, 5_000);
    net.run_idle(10 * MS);
    let wc = net.poll_all(0, a.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].status, wc[0].opcode), (WcStatus::Success, WcOpcode::FetchAdd));
    assert_eq!(net.nodes[0].mem().get_u64(res), 1000, "original value returned");
    assert_eq!(net.nodes[1].mem().get_u64(ctr), 1005, "added exactly once");
    assert_eq!(net.nodes[1].eng.counters().duplicate_requests, 1);
}

#[test]
fn lost_atomic_ack_replays_saved_result_without_executing_twice() {
    let (mut net, a, _b, res, resmr, ctr, ctrmr) = atomic_setup(8);
    net.trace = Some(Vec::new());
    let (f, seen) = drop_nth(op::RC_ATOMIC_ACKNOWLEDGE, 1, 1);
    net.interceptor = Some(f);
    let kind = WrKind::AtomicCmpSwp { remote_addr: ctr, rkey: ctrmr.rkey, compare: 1000, swap: 7 };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, kind, &[sge(res, 8, resmr)])).unwrap();
    net.run_idle(10 * MS);
    let wc = net.poll_all(0, a.cq);
    assert_eq!((wc[0].status, wc[0].opcode), (WcStatus::Success, WcOpcode::CompSwap));
    // Executed once: a second execution would have seen 7 != 1000 and returned 7.
    assert_eq!(net.nodes[0].mem().get_u64(res), 1000);
    assert_eq!(net.nodes[1].mem().get_u64(ctr), 7);
    assert_eq!(*seen.borrow(), 2);
    assert_eq!(sent_with(&net, op::RC_COMPARE_SWAP).len(), 2);
}

#[test]
fn bad_rkey_gives_rem_access_err_and_nothing_written() {
    let mut net = Net::new(2, 9, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 4096);
    let (dst, dmr) = buffer(&mut net, b, 4096);
    net.nodes[0].mem().set(src, &pattern(4096, 1));
    let bad = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey ^ 0x100 };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, bad, &[sge(src, 4096, smr)])).unwrap();
    let good = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(2, good, &[sge(src, 4096, smr)])).unwrap();
    net.run_idle(10 * MS);
    let wc = net.poll_all(0, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(net.nodes[1].mem().get(dst, 4096), vec![0u8; 4096]);
    assert_eq!(net.nodes[0].eng.query_qp(a.qpn).unwrap().0.qp_state, QpState::Err);
    assert_eq!(net.nodes[1].eng.query_qp(b.qpn).unwrap().0.qp_state, QpState::Err);
    assert_eq!(
        net.nodes[1].eng.poll_event(),
        Some(Event::Async(AsyncEvent { kind: AsyncEventType::QpAccessErr, element: AsyncElement::Qp(b.qpn) }))
    );
}

#[test]
fn out_of_bounds_and_wrong_access_are_remote_access_errors() {
    for (off, len, access_ok) in [(4000u64, 200u32, true), (0, 16, false)] {
        let mut net = Net::new(2, 10, LinkCfg::default());
        let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
        let (src, smr) = buffer(&mut net, a, 4096);
        let dst = net.nodes[1].mem().alloc(4096);
        let access =
            if access_ok { AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE } else { AccessFlags::REMOTE_READ };
        let dmr = net.nodes[1].eng.reg_mr(b.pd, dst, 4096, dst, access).unwrap();
        let w = WrKind::RdmaWrite { remote_addr: dst + off, rkey: dmr.rkey };
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, len, smr)])).unwrap();
        net.run_idle(10 * MS);
        let wc = net.poll_all(0, a.cq);
        assert_eq!(wc[0].status, WcStatus::RemAccessErr, "off {off} len {len}");
        assert_eq!(net.nodes[1].mem().get(dst, 4096), vec![0u8; 4096]);
    }
}

#[test]
fn vanished_peer_gives_retry_exc_err_after_retry_cnt_plus_one_timeouts_then_flush() {
    let mut net = Net::new(2, 11, LinkCfg::default());
    let o = QpOpts { retry_cnt: 3, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 50, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    net.nodes[1].vanished = true;
    let t0 = net.now;
    for id in 1..=3 {
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(id, WrKind::Send, &[sge(src, 8, smr)])).unwrap();
    }
    net.run_idle(100 * MS);
    let wc = net.poll_all(0, a.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr), (3, WcStatus::WrFlushErr)]
    );
    let c = net.nodes[0].eng.counters();
    assert_eq!(c.ack_timeouts, 4, "retry_cnt + 1 timeouts");
    assert_eq!(c.retry_exceeded, 1);
    assert!(net.now - t0 >= 4 * ack_timeout_nanos(o.timeout).unwrap());
    assert_eq!(net.nodes[0].eng.query_qp(a.qpn).unwrap().0.qp_state, QpState::Err);
    // Later WRs flush at once.
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(4, WrKind::Send, &[sge(src, 8, smr)])).unwrap();
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::WrFlushErr);
}

#[test]
fn psn_gap_gets_exactly_one_sequence_nak() {
    let mut net = Net::new(2, 12, LinkCfg::default());
    net.trace = Some(Vec::new());
    let o = QpOpts { mtu: Mtu::Mtu256, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let len = 20 * 256;
    let (src, smr) = buffer(&mut net, a, len as u64);
    let (dst, dmr) = buffer(&mut net, b, len as u64);
    let data = pattern(len, 12);
    net.nodes[0].mem().set(src, &data);
    let (f, _) = drop_nth(op::RC_RDMA_WRITE_MIDDLE, 0, 3);
    net.interceptor = Some(f);
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, len as u32, smr)])).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
    assert_eq!(net.nodes[1].mem().get(dst, len), data);
    let naks = sent_with(&net, op::RC_ACKNOWLEDGE).into_iter().filter(|(_, p)| p.syndrome() == Some(0x60)).count();
    assert_eq!(naks, 1);
    assert_eq!(net.nodes[0].eng.counters().ack_timeouts, 0, "the NAK, not the timer, recovered");
    assert!(net.nodes[1].eng.counters().psn_seq_errs >= 1);
}

#[test]
fn corrupted_packets_are_dropped_by_icrc_and_recovered() {
    let mut net = Net::new(2, 13, LinkCfg { bitflip: 0.2, ..LinkCfg::default() });
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let len = 64 * 1024;
    let (src, smr) = buffer(&mut net, a, len as u64);
    let (dst, dmr) = buffer(&mut net, b, len as u64);
    let data = pattern(len, 13);
    net.nodes[0].mem().set(src, &data);
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, len as u32, smr)])).unwrap();
    net.run_idle(100 * MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
    assert_eq!(net.nodes[1].mem().get(dst, len), data);
    assert!(net.stats.corrupted > 0);
    // A flip in the opcode can make the packet unparsable before its ICRC is checked.
    let dropped = net.nodes.iter().map(|n| n.eng.counters()).map(|c| c.icrc_errors + c.opcode_errors + c.length_errors);
    assert_eq!(dropped.sum::<u64>(), net.stats.corrupted, "every flipped bit is caught");
}

#[test]
fn immediate_data_and_invalidate_are_reported_in_the_completion() {
    let mut net = Net::new(2, 14, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 4096);
    for i in 0..3 {
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 10 + i, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    }
    // A type 2 window on the receiver, bound by its own QP, invalidated by the sender.
    let e = &mut net.nodes[1].eng;
    let wmr = e.reg_mr(b.pd, dst + 1024, 1024, dst + 1024, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND).unwrap();
    let (mw, k0) = e.alloc_mw(b.pd, MwType::Type2).unwrap();
    let k1 = (k0 & !0xFF) | ((k0 + 1) & 0xFF);
    let bind = MwBind { mw, rkey: k1, mr: wmr.id, addr: dst + 1024, length: 512, access: AccessFlags::REMOTE_WRITE };
    e.post_send(net.now, b.qpn, &send_wr(77, WrKind::BindMw(bind), &[])).unwrap();
    let imm = u32::from_ne_bytes([0xDE, 0xAD, 0xBE, 0xEF]);
    let e = &mut net.nodes[0].eng;
    e.post_send(net.now, a.qpn, &send_wr(1, WrKind::SendWithImm { imm_data: imm }, &[sge(src, 4, smr)])).unwrap();
    let wi = WrKind::RdmaWriteWithImm { remote_addr: dst + 2048, rkey: dmr.rkey, imm_data: imm };
    e.post_send(net.now, a.qpn, &send_wr(2, wi, &[sge(src, 16, smr)])).unwrap();
    net.run_idle(10 * MS);
    // Now write through the window, then invalidate it with SEND_WITH_INV.
    let e = &mut net.nodes[0].eng;
    let ww = WrKind::RdmaWrite { remote_addr: dst + 1024, rkey: k1 };
    e.post_send(net.now, a.qpn, &send_wr(3, ww, &[sge(src, 8, smr)])).unwrap();
    e.post_send(net.now, a.qpn, &send_wr(4, WrKind::SendWithInv { invalidate_rkey: k1 }, &[sge(src, 4, smr)])).unwrap();
    net.run_idle(10 * MS);
    let wb = net.poll_all(1, b.cq);
    let bind_wc = wb.iter().find(|w| w.wr_id == 77).unwrap();
    assert_eq!((bind_wc.status, bind_wc.opcode), (WcStatus::Success, WcOpcode::BindMw));
    let r: Vec<_> = wb.iter().filter(|w| w.wr_id != 77).collect();
    assert_eq!(r.len(), 3);
    assert_eq!((r[0].opcode, r[0].wc_flags, r[0].imm_data, r[0].byte_len), (WcOpcode::Recv, WcFlags::WITH_IMM, imm, 4));
    assert_eq!(
        (r[1].opcode, r[1].wc_flags, r[1].imm_data, r[1].byte_len),
        (WcOpcode::RecvRdmaWithImm, WcFlags::WITH_IMM, imm, 16)
    );
    assert_eq!((r[2].opcode, r[2].wc_flags, r[2].invalidated_rkey), (WcOpcode::Recv, WcFlags::WITH_INV, k1));
    // The wire carried the immediate in network order.
    assert_eq!(net.poll_all(0, a.cq).iter().filter(|w| w.status == WcStatus::Success).count(), 4);
    // The window is gone: a write through it is a remote access error.
    let e = &mut net.nodes[0].eng;
    let ww = WrKind::RdmaWrite { remote_addr: dst + 1024, rkey: k1 };
    e.post_send(net.now, a.qpn, &send_wr(5, ww, &[sge(src, 8, smr)])).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn unsignaled_wrs_complete_silently_and_in_order() {
    let mut net = Net::new(2, 15, LinkCfg::default());
    let o = QpOpts { sq_sig_all: false, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    for i in 0..6u64 {
        let w = WrKind::RdmaWrite { remote_addr: dst + i * 8, rkey: dmr.rkey };
        let flags = if i % 3 == 2 { SendFlags::SIGNALED } else { SendFlags::EMPTY };
        let sg = [sge(src, 8, smr)];
        net.nodes[0]
            .eng
            .post_send(net.now, a.qpn, &SendWr { wr_id: i, kind: w, flags, sg_list: &sg, ud: None })
            .unwrap();
    }
    net.run_idle(10 * MS);
    let ids: Vec<u64> = net.poll_all(0, a.cq).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, vec![2, 5]);
}

#[test]
fn inline_and_zero_length_messages() {
    let mut net = Net::new(2, 16, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 256);
    let (dst, dmr) = buffer(&mut net, b, 256);
    net.nodes[0].mem().set(src, b"inline!!");
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 1, sg_list: &[sge(dst, 256, dmr)] }).unwrap();
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 2, sg_list: &[] }).unwrap();
    let sg = [sge(src, 8, smr)];
    let wr =
        SendWr { wr_id: 1, kind: WrKind::Send, flags: SendFlags::SIGNALED | SendFlags::INLINE, sg_list: &sg, ud: None };
    net.nodes[0].eng.post_send(net.now, a.qpn, &wr).unwrap();
    // The inline bytes were taken at post time.
    net.nodes[0].mem().set(src, b"changed!");
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(2, WrKind::Send, &[])).unwrap();
    let w0 = WrKind::RdmaWrite { remote_addr: 0xdead_0000, rkey: 0 };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(3, w0, &[])).unwrap();
    net.run_idle(10 * MS);
    assert!(net.poll_all(0, a.cq).iter().all(|w| w.status == WcStatus::Success));
    let wb = net.poll_all(1, b.cq);
    assert_eq!(wb.iter().map(|w| (w.wr_id, w.byte_len)).collect::<Vec<_>>(), vec![(1, 8), (2, 0)]);
    assert_eq!(net.nodes[1].mem().get(dst, 8), b"inline!!");
}

#[test]
fn fence_waits_for_outstanding_reads() {
    let mut net = Net::new(2, 17, LinkCfg { delay: 20_000, ..LinkCfg::default() });
    net.trace = Some(Vec::new());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (loc, lmr) = buffer(&mut net, a, 8192);
    let (rem, rmr) = buffer(&mut net, b, 8192);
    net.nodes[1].mem().set(rem, &pattern(4096, 1));
    let r = WrKind::RdmaRead { remote_addr: rem, rkey: rmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, r, &[sge(loc, 4096, lmr)])).unwrap();
    // Write back what was read: only correct if the fence held the write until the read ended.
    let w = WrKind::RdmaWrite { remote_addr: rem + 4096, rkey: rmr.rkey };
    let sg = [sge(loc, 4096, lmr)];
    let wr = SendWr { wr_id: 2, kind: w, flags: SendFlags::SIGNALED | SendFlags::FENCE, sg_list: &sg, ud: None };
    net.nodes[0].eng.post_send(net.now, a.qpn, &wr).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq).len(), 2);
    assert_eq!(net.nodes[1].mem().get(rem + 4096, 4096), pattern(4096, 1));
}

#[test]
fn max_rd_atomic_bounds_reads_in_flight() {
    let mut net = Net::new(2, 18, LinkCfg { delay: 50_000, ..LinkCfg::default() });
    let o = QpOpts { max_rd_atomic: 2, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (loc, lmr) = buffer(&mut net, a, 8192);
    let (rem, rmr) = buffer(&mut net, b, 8192);
    for i in 0..4u64 {
        let r = WrKind::RdmaRead { remote_addr: rem + i * 64, rkey: rmr.rkey };
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(i, r, &[sge(loc + i * 64, 64, lmr)])).unwrap();
    }
    net.pump_tx();
    assert_eq!(net.stats.sent, 2, "only max_rd_atomic READs leave before a response");
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq).len(), 4);
}

#[test]
fn acks_are_coalesced_and_carry_the_msn() {
    // Infinite bandwidth: the ten packets arrive in the same instant.
    let mut net = Net::new(2, 19, LinkCfg { gbps: 0, ..LinkCfg::default() });
    net.trace = Some(Vec::new());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    for i in 0..10u64 {
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: i, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(i, WrKind::Send, &[sge(src, 8, smr)])).unwrap();
    }
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq).len(), 10);
    // All ten SEND_ONLYs arrive together: one ACK, for the last PSN, with MSN 10.
    let acks = sent_with(&net, op::RC_ACKNOWLEDGE);
    assert_eq!(acks.len(), 1);
    let p = urxe::wire::parse(&acks[0].1.data).unwrap();
    assert_eq!(acks[0].1.psn(), QpOpts::default().a_psn + 9);
    assert_eq!(p.headers.aeth.unwrap().msn.value(), 10);
}

#[test]
fn bad_receive_lkey_is_a_remote_operational_error_and_fatal_to_the_receiver() {
    let mut net = Net::new(2, 20, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    let bad = Sge { addr: dst, length: 64, lkey: dmr.lkey ^ 0x100 };
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 1, sg_list: &[bad] }).unwrap();
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, WrKind::Send, &[sge(src, 8, smr)])).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::RemOpErr);
    let wb = net.poll_all(1, b.cq);
    assert_eq!((wb[0].wr_id, wb[0].status), (1, WcStatus::LocProtErr));
    assert_eq!(
        net.nodes[1].eng.poll_event(),
        Some(Event::Async(AsyncEvent { kind: AsyncEventType::QpFatal, element: AsyncElement::Qp(b.qpn) }))
    );
}

#[test]
fn an_rkey_of_another_pd_is_a_remote_access_error() {
    let mut net = Net::new(2, 21, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    let e = &mut net.nodes[1].eng;
    let other_pd = e.alloc_pd().unwrap();
    let dst = e.memory().alloc(64);
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = e.reg_mr(other_pd, dst, 64, dst, all).unwrap();
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: mr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, 8, smr)])).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::RemAccessErr);
    let _ = b;
}

#[test]
fn automatic_path_migration_is_reported_unsupported() {
    let mut net = Net::new(2, 22, LinkCfg::default());
    let (a, _b) = connect(&mut net, 0, 1, &QpOpts::default());
    let e = &mut net.nodes[0].eng;
    let attr = QpAttr { path_mig_state: MigState::Rearm, ..QpAttr::default() };
    e.modify_qp(a.qpn, &attr, QpAttrMask::PATH_MIG_STATE).unwrap();
    assert_eq!(
        e.poll_event(),
        Some(Event::Async(AsyncEvent { kind: AsyncEventType::PathMigErr, element: AsyncElement::Qp(a.qpn) }))
    );
}

#[test]
fn rnr_timer_codes_are_honoured_for_several_values() {
    for code in [1u8, 5, 12, 18] {
        let mut net = Net::new(2, 23, LinkCfg::default());
        net.trace = Some(Vec::new());
        let o = QpOpts { min_rnr_timer: code, ..QpOpts::default() };
        let (a, b) = connect(&mut net, 0, 1, &o);
        let (src, smr) = buffer(&mut net, a, 64);
        let (dst, dmr) = buffer(&mut net, b, 64);
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, WrKind::Send, &[sge(src, 8, smr)])).unwrap();
        // Post the receive right after the first RNR NAK left.
        net.run_until(MS, |n| n.nodes[1].eng.counters().rnr_naks_sent == 1);
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 1, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
        net.run_idle(2_000 * MS);
        assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
        let sends = sent_with(&net, op::RC_SEND_ONLY);
        let naks = sent_with(&net, op::RC_ACKNOWLEDGE);
        assert_eq!(naks[0].1.syndrome(), Some(0x20 | code));
        let waited = sends[1].0 - naks[0].0;
        assert!(waited >= rnr_nanos(code) && waited < rnr_nanos(code) + 10_000, "code {code}: {waited} ns");
    }
}

#[test]
fn link_mtu_below_path_mtu_drops_big_packets_only() {
    // A 1500-byte link: path MTU 1024 fits, 4096 does not (the RoCE MTU rule in Mtu::for_netdev).
    for (mtu, ok) in [(Mtu::Mtu1024, true), (Mtu::Mtu4096, false)] {
        let mut net = Net::new(2, 24, LinkCfg { mtu: 1500, ..LinkCfg::default() });
        let o = QpOpts { mtu, retry_cnt: 1, ..QpOpts::default() };
        let (a, b) = connect(&mut net, 0, 1, &o);
        let (src, smr) = buffer(&mut net, a, 8192);
        let (dst, dmr) = buffer(&mut net, b, 8192);
        let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, 8192, smr)])).unwrap();
        net.run_idle(100 * MS);
        let want = if ok { WcStatus::Success } else { WcStatus::RetryExcErr };
        assert_eq!(net.poll_all(0, a.cq)[0].status, want, "{mtu:?}");
    }
}

#[test]
fn duplicate_read_requests_restart_the_queued_reply_instead_of_multiplying_it() {
    let mut net = Net::new(2, 25, LinkCfg { gbps: 0, ..LinkCfg::default() });
    net.trace = Some(Vec::new());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let len = 16 * 1024;
    let (loc, lmr) = buffer(&mut net, a, len as u64);
    let (rem, rmr) = buffer(&mut net, b, len as u64);
    let data = pattern(len, 25);
    net.nodes[1].mem().set(rem, &data);
    let copy: Rc<RefCell<Option<Packet>>> = Rc::new(RefCell::new(None));
    let c2 = copy.clone();
    net.interceptor = Some(Box::new(move |p: &mut Packet| {
        if p.opcode() == op::RC_RDMA_READ_REQUEST && c2.borrow().is_none() {
            *c2.borrow_mut() = Some(p.clone());
        }
        Verdict::Pass
    }));
    let r = WrKind::RdmaRead { remote_addr: rem, rkey: rmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, r, &[sge(loc, len as u32, lmr)])).unwrap();
    net.pump_tx();
    let req = copy.borrow_mut().take().unwrap();
    // Three copies land in the same instant as the original (link delay, no jitter).
    for _ in 0..3 {
        net.inject(req.clone(), LinkCfg::default().delay);
    }
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
    assert_eq!(net.nodes[0].mem().get(loc, len), data);
    assert_eq!(net.nodes[1].eng.counters().duplicate_requests, 3);
    let responses = net.trace.as_ref().unwrap().iter().filter(|(_, p)| (0x0d..=0x10).contains(&p.opcode())).count();
    assert_eq!(responses, 16, "one reply, not four");
}

#[test]
fn long_messages_ask_for_acks_periodically_and_at_the_end() {
    let mut net = Net::new(2, 26, LinkCfg::default());
    net.trace = Some(Vec::new());
    let o = QpOpts { mtu: Mtu::Mtu256, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let len = 100 * 256;
    let (src, smr) = buffer(&mut net, a, len as u64);
    let (dst, dmr) = buffer(&mut net, b, len as u64);
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, len as u32, smr)])).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
    let reqs: Vec<Packet> =
        net.trace.as_ref().unwrap().iter().filter(|(_, p)| p.from == 0).map(|x| x.1.clone()).collect();
    assert_eq!(reqs.len(), 100);
    let ackreq: Vec<usize> = reqs.iter().enumerate().filter(|(_, p)| p.data[8] & 0x80 != 0).map(|(i, _)| i).collect();
    assert_eq!(ackreq, vec![63, 99]);
}

#[test]
fn requester_keeps_at_most_512_psns_unacknowledged() {
    let mut net = Net::new(2, 27, LinkCfg::default());
    net.trace = Some(Vec::new());
    let o = QpOpts { mtu: Mtu::Mtu256, timeout: 10, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let len = 1000 * 256;
    let (src, smr) = buffer(&mut net, a, len as u64);
    let (dst, dmr) = buffer(&mut net, b, len as u64);
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    // A new QP starts at 128 PSNs (engine::window::INITIAL_WINDOW): to a vanished peer, 128 go.
    net.nodes[1].vanished = true;
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, len as u32, smr)])).unwrap();
    // Well before the first local ACK timeout (4.096 µs << 10 = 4.2 ms).
    net.run_until(MS, |_| false);
    assert_eq!(net.stats.sent, 128, "the initial window");
    // A second QP that first moves a loss-free transfer grows to the ceiling: 512 go.
    let (c, d) = connect(&mut net, 0, 1, &o);
    net.nodes[1].vanished = false;
    let (src, smr) = buffer(&mut net, c, len as u64);
    let (dst, dmr) = buffer(&mut net, d, len as u64);
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, c.qpn, &send_wr(2, w, &[sge(src, len as u32, smr)])).unwrap();
    let wc = net.first_completion(0, c.cq, 100 * MS);
    assert!(wc.is_some_and(|wc| wc.status == WcStatus::Success), "{wc:?}");
    // The first QP's WRITE completes too, now that its peer answers: nothing else is sent.
    let wa = net.first_completion(0, a.cq, 100 * MS);
    assert!(wa.is_some_and(|wc| wc.status == WcStatus::Success), "{wa:?}");
    net.run_idle(10 * MS);
    net.nodes[1].vanished = true;
    let before = net.stats.sent;
    net.nodes[0].eng.post_send(net.now, c.qpn, &send_wr(3, w, &[sge(src, len as u32, smr)])).unwrap();
    net.run_until(MS, |_| false);
    assert_eq!(net.stats.sent - before, 512, "the window's ceiling (engine::window::MAX_UNACKED_PSNS)");
    let _ = b;
}

#[test]
fn packets_of_another_partition_are_dropped() {
    let mut net = Net::new(2, 28, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    // Rewrite the P_Key of every request to 0x8001 and fix the ICRC: the responder must drop them.
    net.interceptor = Some(Box::new(|p: &mut Packet| {
        if p.from == 0 {
            p.data[2..4].copy_from_slice(&0x8001u16.to_be_bytes());
            let n = p.data.len();
            let ip = urxe::wire::icrc::IpFields::v4_df([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
            let c = urxe::wire::icrc::icrc(&ip, p.src_port, 4791, &p.data[..n - 4]);
            p.data[n - 4..].copy_from_slice(&c.to_le_bytes());
        }
        Verdict::Pass
    }));
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, 8, smr)])).unwrap();
    net.run_idle(100 * MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::RetryExcErr);
    let c = net.nodes[1].eng.counters();
    assert_eq!((c.pkey_violations, c.icrc_errors), (8, 0), "first try + 7 retries, all dropped");
}

#[test]
fn busy_qps_take_turns_in_trains_of_tx_burst_packets() {
    let mut net = Net::new(2, 29, LinkCfg::default());
    net.trace = Some(Vec::new());
    let o = QpOpts { mtu: Mtu::Mtu256, ..QpOpts::default() };
    let (a1, b1) = connect(&mut net, 0, 1, &o);
    let (a2, b2) = connect(&mut net, 0, 1, &o);
    let len = 100 * 256;
    for (a, b) in [(a1, b1), (a2, b2)] {
        let (src, smr) = buffer(&mut net, a, len as u64);
        let (dst, dmr) = buffer(&mut net, b, len as u64);
        let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, len as u32, smr)])).unwrap();
    }
    net.pump_tx();
    let qps: Vec<u32> = net.trace.as_ref().unwrap().iter().map(|(_, p)| p.dest_qp()).collect();
    // 100 packets each in runs of TX_BURST, alternating (then the two tails of 4).
    assert_eq!(qps.len(), 200);
    for (i, run) in qps[..192].chunks(TX_BURST as usize).enumerate() {
        assert!(run.iter().all(|&q| q == run[0]), "run {i} mixes QPs");
        assert_eq!(run[0], if i % 2 == 0 { b1.qpn } else { b2.qpn });
    }
}

#[test]
fn peers_sending_migreq_1_like_mlx5_are_accepted() {
    // mlx5 sends BTH MigReq=1 where rxe and urxe send 0: set it on every packet (both ways),
    // recompute the ICRC, and the traffic must still complete byte for byte.
    let mut net = Net::new(2, 1, LinkCfg::default());
    let addrs: Vec<std::net::IpAddr> = net.nodes.iter().map(|n| n.addr).collect();
    let seen = Rc::new(RefCell::new(0usize));
    let s2 = seen.clone();
    net.interceptor = Some(Box::new(move |p: &mut Packet| {
        let (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) = (addrs[p.from], addrs[p.to]) else {
            return Verdict::Pass;
        };
        p.data[1] |= 0x40;
        let n = p.data.len();
        let crc = urxe::wire::icrc::icrc(&urxe::wire::icrc::IpFields::v4_df(s, d), p.src_port, 4791, &p.data[..n - 4]);
        urxe::wire::icrc::store_icrc(&mut p.data, crc);
        *s2.borrow_mut() += 1;
        Verdict::Pass
    }));
    let o = QpOpts::default();
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 10_000);
    let (dst, dmr) = buffer(&mut net, b, 10_000);
    let data = pattern(10_000, 11);
    net.nodes[0].mem().set(src, &data);
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 9, sg_list: &[sge(dst, 10_000, dmr)] }).unwrap();
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, WrKind::Send, &[sge(src, 10_000, smr)])).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq).iter().map(|w| w.status).collect::<Vec<_>>(), vec![WcStatus::Success]);
    assert_eq!(net.poll_all(1, b.cq)[0].byte_len, 10_000);
    assert_eq!(net.nodes[1].mem().get(dst, 10_000), data);
    // And a READ back (responses from node 1 carry MigReq=1 too).
    let (back, bmr) = buffer(&mut net, a, 10_000);
    let kind = WrKind::RdmaRead { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(2, kind, &[sge(back, 10_000, bmr)])).unwrap();
    net.run_idle(10 * MS);
    assert_eq!(net.poll_all(0, a.cq).iter().map(|w| w.status).collect::<Vec<_>>(), vec![WcStatus::Success]);
    assert_eq!(net.nodes[0].mem().get(back, 10_000), data);
    assert!(*seen.borrow() > 20, "every packet was rewritten");
    assert_eq!(net.nodes[1].eng.counters().icrc_errors + net.nodes[0].eng.counters().icrc_errors, 0);
}

#[test]
fn completion_timestamps_are_the_engine_clock_when_each_completion_happened() {
    // 50 µs one way: the receive completes when the request arrives, the send when its ACK
    // arrives one more trip later; a flush completion carries the time of the verb that
    // flushed it.
    let mut net = Net::new(2, 1, LinkCfg { delay: 50_000, ..LinkCfg::default() });
    let o = QpOpts::default();
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    net.run_idle(MS);
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 9, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    let posted = net.now;
    net.nodes[0].eng.post_send(posted, a.qpn, &send_wr(1, WrKind::Send, &[sge(src, 64, smr)])).unwrap();
    net.run_idle(10 * MS);
    let wa = net.poll_all(0, a.cq);
    let wb = net.poll_all(1, b.cq);
    assert_eq!((wa.len(), wb.len()), (1, 1));
    let (ts_send, ts_recv) = (wa[0].timestamp, wb[0].timestamp);
    assert!(ts_recv >= posted + 50_000 && ts_recv < posted + 60_000, "recv at {ts_recv}, posted {posted}");
    assert!(ts_send >= ts_recv + 50_000 && ts_send < ts_recv + 60_000, "send at {ts_send}, recv at {ts_recv}");
    // A QP moved to ERR flushes a posted receive with the time the engine was last told.
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 10, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    let later = net.now + 3 * MS;
    net.nodes[1].eng.advance_clock(later);
    let attr = QpAttr { qp_state: QpState::Err, ..Default::default() };
    net.nodes[1].eng.modify_qp(b.qpn, &attr, QpAttrMask::STATE).unwrap();
    let flushed = net.poll_all(1, b.cq);
    assert_eq!(flushed.len(), 1);
    assert_eq!(flushed[0].status, WcStatus::WrFlushErr);
    assert_eq!(flushed[0].timestamp, later);
    assert_eq!(net.nodes[1].eng.clock(), later);
    // The clock never goes back.
    net.nodes[1].eng.advance_clock(1);
    assert_eq!(net.nodes[1].eng.clock(), later);
}

#[test]
fn moving_a_qp_to_reset_drops_its_queued_completions_only() {
    // QP b is errored with two receives posted, then reset: its flushes leave its CQ. QP a,
    // errored but not reset, keeps its flush for the application.
    let mut net = Net::new(2, 1, LinkCfg::default());
    let o = QpOpts::default();
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (dst, dmr) = buffer(&mut net, b, 64);
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 1, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 2, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    let err = QpAttr { qp_state: QpState::Err, ..Default::default() };
    net.nodes[1].eng.modify_qp(b.qpn, &err, QpAttrMask::STATE).unwrap();
    net.nodes[0].eng.modify_qp(a.qpn, &err, QpAttrMask::STATE).unwrap();
    let reset = QpAttr { qp_state: QpState::Reset, ..Default::default() };
    net.nodes[1].eng.modify_qp(b.qpn, &reset, QpAttrMask::STATE).unwrap();
    assert!(net.poll_all(1, b.cq).is_empty(), "flushes of a QP moved to RESET must be gone");
    // Without the reset, the flushes stay for the application.
    net.nodes[0].eng.post_recv(a.qpn, &RecvWr { wr_id: 3, sg_list: &[] }).unwrap();
    let wa = net.poll_all(0, a.cq);
    assert_eq!(wa.len(), 1);
    assert_eq!((wa[0].wr_id, wa[0].status), (3, WcStatus::WrFlushErr));
}
