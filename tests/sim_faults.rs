//! Fault plans carried out by the engine (src/engine/faults): each packet fault gives what a
//! real lossy, refusing or silent peer gives — the same completion statuses, the same
//! retransmissions, data intact where the transport recovers — and a seed replays the same
//! packet trace.

mod sim;

use sim::*;
use urxe::engine::faults::{parse, Action, Site};
use urxe::engine::*;

const MS: u64 = 1_000_000;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v);
    v
}

/// Node 0 SENDs `len` bytes to node 1 (receive posted) with `plan` set on `node`; returns
/// the sender's completion, the receiver's, and whether the bytes arrived intact.
fn send_with(
    plan: &str,
    node: usize,
    o: &QpOpts,
    len: usize,
    post_recv: bool,
) -> (Net, WcStatus, Option<WcStatus>, bool) {
    let mut net = Net::new(2, 7, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, o);
    let (src, smr) = buffer(&mut net, a, len as u64);
    let (dst, dmr) = buffer(&mut net, b, len as u64);
    let data = pattern(len, 3);
    net.nodes[0].mem().set(src, &data);
    net.nodes[node].eng.set_fault_plan(Some(parse(plan).unwrap()));
    if post_recv {
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 2, sg_list: &[sge(dst, len as u32, dmr)] }).unwrap();
    }
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, WrKind::Send, &[sge(src, len as u32, smr)])).unwrap();
    let wc = net.first_completion(0, a.cq, 20_000 * MS).expect("the sender completes");
    let rwc = net.poll_all(1, b.cq).first().map(|w| w.status);
    let intact = net.nodes[1].mem().get(dst, len) == data;
    (net, wc.status, rwc, intact)
}

#[test]
fn a_silent_peer_ends_in_retry_exceeded_after_retry_cnt_timeouts() {
    let o = QpOpts { timeout: 10, retry_cnt: 3, ..QpOpts::default() };
    // Node 1 hears nothing from node 0.
    let (net, st, rst, _) = send_with("silent", 1, &o, 1000, true);
    assert_eq!(st, WcStatus::RetryExcErr);
    assert_eq!(rst, None);
    let c = net.nodes[1].eng.counters();
    assert!(c.faults_injected >= 4, "first send and 3 retries dropped: {}", c.faults_injected);
    assert_eq!(net.nodes[0].eng.counters().retry_exceeded, 1);
    assert_eq!(net.nodes[0].eng.counters().ack_timeouts, 4, "the first try and retry_cnt 3 retries timed out");
}

#[test]
fn rnr_naks_are_retried_then_exceed_rnr_retry() {
    // Three RNR NAKs against rnr_retry 7: the SEND still lands.
    let o = QpOpts { rnr_retry: 7, min_rnr_timer: 1, ..QpOpts::default() };
    let (net, st, rst, intact) = send_with("rnr-nak:count=3", 1, &o, 4000, true);
    assert_eq!((st, rst, intact), (WcStatus::Success, Some(WcStatus::Success), true));
    assert_eq!(net.nodes[1].eng.counters().rnr_naks_sent, 3);
    // Ten against rnr_retry 2: the sender gives up with RNR_RETRY_EXC_ERR.
    let o = QpOpts { rnr_retry: 2, min_rnr_timer: 1, ..QpOpts::default() };
    let (net, st, _, _) = send_with("rnr-nak:count=10", 1, &o, 4000, true);
    assert_eq!(st, WcStatus::RnrRetryExcErr);
    assert_eq!(net.nodes[1].eng.counters().rnr_naks_sent, 3, "first try and two retries");
}

#[test]
fn fatal_naks_complete_with_the_status_a_real_responder_causes() {
    let o = QpOpts::default();
    for (nak, want) in
        [("access", WcStatus::RemAccessErr), ("invalid", WcStatus::RemInvReqErr), ("operational", WcStatus::RemOpErr)]
    {
        let (net, st, rst, _) = send_with(&format!("nak={nak}:count=1"), 1, &o, 100, true);
        assert_eq!(st, want, "nak={nak}");
        // The responder's QP went to ERROR as after a real violation: its receive WQE
        // completed in error (the WQE was not taken yet for a SEND refused at its first
        // packet, so it is flushed).
        assert!(rst.is_some_and(|s| s != WcStatus::Success), "nak={nak}: {rst:?}");
        assert_eq!(net.nodes[1].eng.counters().naks_sent, 1, "nak={nak}");
    }
}

#[test]
fn a_sequence_nak_makes_the_requester_go_back_and_the_data_arrives() {
    let o = QpOpts { mtu: Mtu::Mtu1024, ..QpOpts::default() };
    let (net, st, rst, intact) = send_with("nak=seq:count=2", 1, &o, 16 * 1024, true);
    assert_eq!((st, rst, intact), (WcStatus::Success, Some(WcStatus::Success), true));
    assert!(net.nodes[0].eng.counters().retransmitted_pkts > 0);
    // The two injected, and the real ones the packets after each skipped PSN then cause.
    assert!(net.nodes[0].eng.counters().seq_naks_rcvd >= 2);
}

#[test]
fn drops_delays_duplicates_reorders_and_corruption_on_either_side_leave_the_data_intact() {
    let o = QpOpts { mtu: Mtu::Mtu1024, timeout: 8, retry_cnt: 7, ..QpOpts::default() };
    for (plan, node) in [
        ("drop:every=5", 0),
        ("drop:site=rx,every=7", 1),
        ("delay=2ms:every=3", 0),
        ("dup:every=4", 0),
        ("dup:site=rx,every=3", 1),
        ("reorder:every=6", 0),
        ("reorder:site=rx,every=5", 1),
        ("corrupt-icrc:every=9", 0),
        ("corrupt-psn=5:every=11", 0),
        ("drop:class=resp,site=rx,every=2", 0),
    ] {
        let (net, st, rst, intact) = send_with(plan, node, &o, 64 * 1024, true);
        assert_eq!((st, rst, intact), (WcStatus::Success, Some(WcStatus::Success), true), "{plan}");
        let c = net.nodes[node].eng.counters();
        let injected = c.faults_injected;
        assert!(injected > 0, "{plan}: nothing injected");
        assert_eq!(
            net.nodes[node].eng.fault_plan().unwrap().faults[0].fired(),
            injected,
            "{plan}: the plan's count and the engine's agree"
        );
        // `urxe stat` shows it under its kind, and under no other.
        let kinds = [
            ("drop", c.faults_drop),
            ("delay", c.faults_delay),
            ("dup", c.faults_dup),
            ("reorder", c.faults_reorder),
            ("corrupt", c.faults_corrupt),
        ];
        for (k, n) in kinds {
            let want = if plan.starts_with(k) { injected } else { 0 };
            assert_eq!(n, want, "{plan}: faults_{k}");
        }
    }
}

#[test]
fn the_injected_log_names_each_fault_with_its_qp_and_psn() {
    let o = QpOpts { mtu: Mtu::Mtu1024, ..QpOpts::default() };
    let (mut net, st, _, _) = send_with("drop:count=2", 0, &o, 4096, true);
    assert_eq!(st, WcStatus::Success);
    let mut log = Vec::new();
    while let Some(i) = net.nodes[0].eng.poll_injected() {
        log.push(i);
    }
    assert_eq!(log.len(), 2);
    assert!(log.iter().all(|i| i.action == Action::Drop && i.site == Site::Tx && i.qpn.is_some()));
    assert_eq!(log[1].psn.unwrap(), (log[0].psn.unwrap() + 1) & 0xFF_FFFF);
}

#[test]
fn one_seed_replays_the_same_packet_trace_and_another_does_not() {
    let trace = |seed: u64| {
        let o = QpOpts { mtu: Mtu::Mtu1024, timeout: 8, retry_cnt: 7, ..QpOpts::default() };
        let mut net = Net::new(2, 7, LinkCfg::default());
        net.trace = Some(Vec::new());
        let (a, b) = connect(&mut net, 0, 1, &o);
        let (src, smr) = buffer(&mut net, a, 32 * 1024);
        let (dst, dmr) = buffer(&mut net, b, 32 * 1024);
        net.nodes[0].mem().set(src, &pattern(32 * 1024, 5));
        net.nodes[0].eng.set_fault_plan(Some(parse(&format!("seed={seed}; drop:prob=0.1; dup:prob=0.05")).unwrap()));
        let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, 32 * 1024, smr)])).unwrap();
        assert_eq!(net.first_completion(0, a.cq, 10_000 * MS).unwrap().status, WcStatus::Success);
        assert_eq!(net.nodes[1].mem().get(dst, 32 * 1024), pattern(32 * 1024, 5));
        net.trace.take().unwrap().into_iter().map(|(t, p)| (t, p.from, p.psn(), p.opcode())).collect::<Vec<_>>()
    };
    let first = trace(11);
    assert_eq!(first, trace(11));
    assert_ne!(first, trace(12));
}

#[test]
fn no_plan_and_an_empty_plan_change_nothing() {
    let o = QpOpts::default();
    let (net, st, rst, intact) = send_with("", 0, &o, 10_000, true);
    assert_eq!((st, rst, intact), (WcStatus::Success, Some(WcStatus::Success), true));
    assert_eq!(net.nodes[0].eng.counters().faults_injected, 0);
}

fn events(net: &mut Net, node: usize) -> Vec<AsyncEvent> {
    let mut out = Vec::new();
    while let Some(e) = net.nodes[node].eng.poll_event() {
        if let Event::Async(a) = e {
            out.push(a);
        }
    }
    out
}

#[test]
fn qp_fatal_raises_the_event_moves_the_qp_to_error_and_flushes_its_wrs() {
    let o = QpOpts::default();
    let mut net = Net::new(2, 9, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (dst, dmr) = buffer(&mut net, b, 64);
    for i in 0..3 {
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: i, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    }
    net.nodes[1].eng.set_fault_plan(Some(parse(&format!("qp-fatal:qpn={},at=1ms", b.qpn)).unwrap()));
    net.run_idle(5 * MS);
    let ev = events(&mut net, 1);
    assert!(ev.contains(&AsyncEvent { kind: AsyncEventType::QpFatal, element: AsyncElement::Qp(b.qpn) }), "{ev:?}");
    assert_eq!(net.nodes[1].eng.query_qp(b.qpn).unwrap().0.qp_state, QpState::Err);
    let wcs = net.poll_all(1, b.cq);
    assert_eq!(wcs.len(), 3);
    assert!(wcs.iter().all(|w| w.status == WcStatus::WrFlushErr));
    // The other side's QP is untouched.
    assert_eq!(net.nodes[0].eng.query_qp(a.qpn).unwrap().0.qp_state, QpState::Rts);
    assert!(events(&mut net, 0).is_empty());
}

#[test]
fn cq_overrun_srq_limit_and_device_fatal_raise_their_events() {
    let o = QpOpts::default();
    let mut net = Net::new(2, 9, LinkCfg::default());
    let (_a, b) = connect(&mut net, 0, 1, &o);
    let e = &mut net.nodes[1].eng;
    let (srq, _) = e.create_srq(b.pd, &SrqAttr { max_wr: 8, max_sge: 1, srq_limit: 0 }).unwrap();
    let (unarmed, _) = e.create_srq(b.pd, &SrqAttr { max_wr: 8, max_sge: 1, srq_limit: 0 }).unwrap();
    e.modify_srq(srq, &SrqAttr { srq_limit: 2, ..Default::default() }, SrqAttrMask::LIMIT).unwrap();
    e.set_fault_plan(Some(parse("cq-overrun:at=1ms; srq-limit:at=2ms; device-fatal:at=3ms").unwrap()));
    net.run_idle(10 * MS);
    let ev = events(&mut net, 1);
    let kinds: Vec<_> = ev.iter().map(|e| (e.kind, e.element)).collect();
    assert!(kinds.contains(&(AsyncEventType::CqErr, AsyncElement::Cq(b.cq))), "{kinds:?}");
    assert!(kinds.contains(&(AsyncEventType::SrqLimitReached, AsyncElement::Srq(srq))), "{kinds:?}");
    assert!(!kinds.contains(&(AsyncEventType::SrqLimitReached, AsyncElement::Srq(unarmed))), "only an armed SRQ");
    assert_eq!(net.nodes[1].eng.query_srq(srq).unwrap().srq_limit, 0, "the limit disarms");
    assert!(kinds.contains(&(AsyncEventType::DeviceFatal, AsyncElement::Device)), "{kinds:?}");
    assert_eq!(net.nodes[1].eng.query_qp(b.qpn).unwrap().0.qp_state, QpState::Err, "a fatal device takes its QPs down");
    // Events in the order of their times.
    let order: Vec<_> = ev.iter().map(|e| e.kind).filter(|k| *k != AsyncEventType::QpLastWqeReached).collect();
    assert_eq!(order, vec![AsyncEventType::CqErr, AsyncEventType::SrqLimitReached, AsyncEventType::DeviceFatal]);
}

#[test]
fn a_port_down_loses_packets_until_it_comes_back_and_rc_recovers() {
    let o = QpOpts { mtu: Mtu::Mtu1024, timeout: 10, retry_cnt: 7, ..QpOpts::default() };
    let mut net = Net::new(2, 9, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &o);
    let len = 256 * 1024;
    let (src, smr) = buffer(&mut net, a, len as u64);
    let (dst, dmr) = buffer(&mut net, b, len as u64);
    net.nodes[0].mem().set(src, &pattern(len, 8));
    net.nodes[0].eng.set_fault_plan(Some(parse("port-down=20ms:at=0ms").unwrap()));
    net.step();
    assert!(!net.nodes[0].eng.port_active(net.now));
    let ev = events(&mut net, 0);
    assert_eq!(ev, vec![AsyncEvent { kind: AsyncEventType::PortErr, element: AsyncElement::Port(1) }]);
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, len as u32, smr)])).unwrap();
    let wc = net.first_completion(0, a.cq, 5_000 * MS).expect("completes");
    assert_eq!(wc.status, WcStatus::Success);
    assert!(net.now >= 20 * MS, "nothing got through while the port was down");
    assert!(net.nodes[0].eng.port_active(net.now));
    assert!(
        events(&mut net, 0).contains(&AsyncEvent { kind: AsyncEventType::PortActive, element: AsyncElement::Port(1) })
    );
    assert_eq!(net.nodes[1].mem().get(dst, len), pattern(len, 8));
}

#[test]
fn verb_faults_return_the_planned_errno_for_the_chosen_calls_only() {
    let o = QpOpts::default();
    let mut net = Net::new(2, 9, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    net.nodes[0].eng.set_fault_plan(Some(
        parse(&format!("errno=ENOMEM:site=post-send,qpn={},after=2,count=1; errno=EFAULT:site=reg-mr", a.qpn)).unwrap(),
    ));
    net.nodes[1].eng.set_fault_plan(Some(parse("errno=EAGAIN:site=post-recv,count=1").unwrap()));
    let post =
        |net: &mut Net, id| net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(id, WrKind::Send, &[sge(src, 8, smr)]));
    let recv =
        |net: &mut Net, id| net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: id, sg_list: &[sge(dst, 64, dmr)] });
    assert_eq!(recv(&mut net, 1), Err(Error::Injected(libc::EAGAIN)));
    assert_eq!(Error::Injected(libc::EAGAIN).errno(), libc::EAGAIN);
    for i in 2..6 {
        recv(&mut net, i).unwrap();
    }
    assert_eq!(post(&mut net, 1), Ok(()));
    assert_eq!(post(&mut net, 2), Ok(()));
    assert_eq!(post(&mut net, 3), Err(Error::Injected(libc::ENOMEM)));
    assert_eq!(post(&mut net, 4), Ok(()), "count=1: only the third post fails");
    net.run_idle(10 * MS);
    let done: Vec<u64> = net.poll_all(0, a.cq).iter().map(|w| w.wr_id).collect();
    assert_eq!(done, vec![1, 2, 4], "the refused WR was never posted");
    let e = &mut net.nodes[0].eng;
    assert_eq!(e.reg_mr(a.pd, 0x1000, 64, 0x1000, AccessFlags::LOCAL_WRITE).err(), Some(Error::Injected(libc::EFAULT)));
}

#[test]
fn a_completion_fault_takes_the_error_path_of_a_real_error_completion() {
    let o = QpOpts::default();
    let mut net = Net::new(2, 9, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 256);
    for i in 0..4 {
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: i, sg_list: &[sge(dst + 64 * i, 64, dmr)] }).unwrap();
    }
    net.nodes[0].eng.set_fault_plan(Some(parse("wc=REM_ACCESS_ERR:after=1,count=1").unwrap()));
    for id in 1..=3 {
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(id, WrKind::Send, &[sge(src, 8, smr)])).unwrap();
        net.run_idle(MS);
    }
    let wcs: Vec<(u64, WcStatus)> = net.poll_all(0, a.cq).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wcs, vec![(1, WcStatus::Success), (2, WcStatus::RemAccessErr), (3, WcStatus::WrFlushErr)]);
    assert_eq!(net.nodes[0].eng.query_qp(a.qpn).unwrap().0.qp_state, QpState::Err);
}
