//! UD, UC, SRQ, CQ, MW and QP-object behaviour over the simulator.

mod sim;

use std::cell::RefCell;
use std::rc::Rc;

use sim::*;
use urxe::engine::*;
use urxe::wire::opcode::op;

const MS: u64 = 1_000_000;
const QKEY: u32 = 0x1111_1111;

/// A UD QP in RTS on `node`.
fn ud_qp(net: &mut Net, node: usize) -> End {
    use QpAttrMask as A;
    let o = QpOpts { ty: QpType::Ud, ..QpOpts::default() };
    let end = make_qp(net, node, &o);
    let e = &mut net.nodes[node].eng;
    let a = QpAttr { qp_state: QpState::Init, port_num: 1, qkey: QKEY, ..QpAttr::default() };
    e.modify_qp(end.qpn, &a, A::STATE | A::PKEY_INDEX | A::PORT | A::QKEY).unwrap();
    e.modify_qp(end.qpn, &QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, A::STATE).unwrap();
    e.modify_qp(end.qpn, &QpAttr { qp_state: QpState::Rts, sq_psn: 7, ..QpAttr::default() }, A::STATE | A::SQ_PSN)
        .unwrap();
    end
}

fn ud_send(net: &mut Net, from: End, to: End, ah: AhId, qkey: u32, sg: &[Sge]) -> Result<(), Error> {
    let ud = UdDest { ah, remote_qpn: to.qpn, remote_qkey: qkey };
    let wr = SendWr { wr_id: 1, kind: WrKind::Send, flags: SendFlags::SIGNALED, sg_list: sg, ud: Some(ud) };
    let now = net.now;
    net.nodes[from.node].eng.post_send(now, from.qpn, &wr)
}

fn ud_pair(net: &mut Net) -> (End, End, AhId) {
    let a = ud_qp(net, 0);
    let b = ud_qp(net, 1);
    let dgid = gid_of(net.nodes[1].addr);
    let ah = net.nodes[0]
        .eng
        .create_ah(
            a.pd,
            &AhAttr {
                is_global: true,
                grh: GlobalRoute { dgid, ..Default::default() },
                port_num: 1,
                ..Default::default()
            },
        )
        .unwrap();
    (a, b, ah)
}

#[test]
fn ud_receive_fills_ipv4_grh_area_and_reports_source_qp() {
    let mut net = Net::new(2, 1, LinkCfg::default());
    let (a, b, ah) = ud_pair(&mut net);
    let (src, smr) = buffer(&mut net, a, 100);
    let (dst, dmr) = buffer(&mut net, b, 200);
    net.nodes[0].mem().set(src, b"datagram payload");
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 5, sg_list: &[sge(dst, 200, dmr)] }).unwrap();
    ud_send(&mut net, a, b, ah, QKEY, &[sge(src, 16, smr)]).unwrap();
    net.run_idle(MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
    let wc = net.poll_all(1, b.cq);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].status, wc[0].byte_len, wc[0].src_qp), (WcStatus::Success, 56, a.qpn));
    assert!(wc[0].wc_flags.contains(WcFlags::GRH));
    assert_eq!(wc[0].sl, 2, "wc.sl carries the L3 type as mlx5 reports it: 2 = IPv4");
    let g = net.nodes[1].mem().get(dst, 56);
    assert_eq!(&g[..20], &[0u8; 20]);
    assert_eq!(g[20], 0x45);
    assert_eq!(u16::from_be_bytes([g[22], g[23]]), 20 + 8 + 12 + 8 + 16 + 4, "IPv4 total length");
    assert_eq!(g[29], 17, "UDP");
    assert_eq!(&g[32..36], &[10, 0, 0, 1]);
    assert_eq!(&g[36..40], &[10, 0, 0, 2]);
    // Header checksum verifies.
    let sum: u32 = g[20..40].chunks(2).map(|c| u16::from_be_bytes([c[0], c[1]]) as u32).sum();
    assert_eq!((sum & 0xFFFF) + (sum >> 16), 0xFFFF);
    assert_eq!(&g[40..56], b"datagram payload");
}

#[test]
fn ud_over_ipv6_puts_the_ipv6_header_in_the_grh_area() {
    let mut net = Net::new_v6(2, 2, LinkCfg::default());
    let (a, b, ah) = ud_pair(&mut net);
    let (src, smr) = buffer(&mut net, a, 100);
    let (dst, dmr) = buffer(&mut net, b, 200);
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 5, sg_list: &[sge(dst, 200, dmr)] }).unwrap();
    ud_send(&mut net, a, b, ah, QKEY, &[sge(src, 10, smr)]).unwrap();
    net.run_idle(MS);
    let wc = net.poll_all(1, b.cq);
    assert_eq!((wc[0].status, wc[0].byte_len, wc[0].sl), (WcStatus::Success, 50, 1), "wc.sl 1 = IPv6");
    let g = net.nodes[1].mem().get(dst, 40);
    assert_eq!(g[0] >> 4, 6);
    assert_eq!(g[6], 17);
    assert_eq!(&g[8..24], &gid_of(net.nodes[0].addr));
    assert_eq!(&g[24..40], &gid_of(net.nodes[1].addr));
}

#[test]
fn ud_qkey_mismatch_is_dropped_and_high_bit_uses_the_qp_qkey() {
    let mut net = Net::new(2, 3, LinkCfg::default());
    let (a, b, ah) = ud_pair(&mut net);
    let (src, smr) = buffer(&mut net, a, 100);
    let (dst, dmr) = buffer(&mut net, b, 200);
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 5, sg_list: &[sge(dst, 200, dmr)] }).unwrap();
    ud_send(&mut net, a, b, ah, 0x2222, &[sge(src, 10, smr)]).unwrap();
    net.run_idle(MS);
    assert!(net.poll_all(1, b.cq).is_empty());
    assert_eq!(net.nodes[1].eng.counters().qkey_violations, 1);
    ud_send(&mut net, a, b, ah, 0x8000_0000, &[sge(src, 10, smr)]).unwrap();
    net.run_idle(MS);
    assert_eq!(net.poll_all(1, b.cq).len(), 1);
    // UD messages are at most one MTU.
    let big = buffer(&mut net, a, 8192);
    assert_eq!(ud_send(&mut net, a, b, ah, QKEY, &[sge(big.0, 4097, big.1)]), Err(Error::Invalid));
}

#[test]
fn uc_gap_discards_the_message_in_progress_until_next_first() {
    let mut net = Net::new(2, 4, LinkCfg::default());
    let o = QpOpts { ty: QpType::Uc, mtu: Mtu::Mtu256, ..QpOpts::default() };
    let (a, b) = connect(&mut net, 0, 1, &o);
    let (src, smr) = buffer(&mut net, a, 3 * 1024);
    let (dst, dmr) = buffer(&mut net, b, 3 * 1024);
    for i in 0..3u64 {
        net.nodes[0].mem().set(src + i * 1024, &[i as u8 + 1; 1024]);
        net.nodes[1]
            .eng
            .post_recv(b.qpn, &RecvWr { wr_id: 10 + i, sg_list: &[sge(dst + i * 1024, 1024, dmr)] })
            .unwrap();
    }
    // Message 2 is SEND FIRST, MIDDLE, MIDDLE, LAST: lose its first MIDDLE.
    let seen = Rc::new(RefCell::new(0));
    let s = seen.clone();
    net.interceptor = Some(Box::new(move |p: &mut Packet| {
        if p.opcode() == op::UC_SEND_MIDDLE {
            *s.borrow_mut() += 1;
            if *s.borrow() == 3 {
                return Verdict::Drop;
            }
        }
        Verdict::Pass
    }));
    for i in 0..3u64 {
        net.nodes[0]
            .eng
            .post_send(net.now, a.qpn, &send_wr(i, WrKind::Send, &[sge(src + i * 1024, 1024, smr)]))
            .unwrap();
    }
    net.run_idle(MS);
    // UC: the sender completes everything (no ACKs).
    assert_eq!(net.poll_all(0, a.cq).iter().filter(|w| w.status == WcStatus::Success).count(), 3);
    let wb = net.poll_all(1, b.cq);
    assert_eq!(
        wb.iter().map(|w| (w.wr_id, w.status, w.byte_len)).collect::<Vec<_>>(),
        vec![(10, WcStatus::Success, 1024), (11, WcStatus::Success, 1024)]
    );
    // Message 3 landed in the receive WQE message 2 would have used.
    assert_eq!(net.nodes[1].mem().get(dst + 1024, 1024), vec![3u8; 1024]);
}

fn srq_receiver(net: &mut Net, max_wr: u32) -> (End, End, SrqId) {
    let o = QpOpts::default();
    let a = make_qp(net, 0, &o);
    let e = &mut net.nodes[1].eng;
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(64).unwrap();
    let (srq, got) = e.create_srq(pd, &SrqAttr { max_wr, max_sge: 2, srq_limit: 0 }).unwrap();
    assert_eq!(got.max_wr, max_wr);
    let init = QpInitAttr {
        pd,
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: Some(srq),
        cap: QpCap { max_send_wr: 8, max_recv_wr: 0, max_send_sge: 1, max_recv_sge: 0, max_inline_data: 0 },
        sq_sig_all: true,
    };
    let (qpn, _) = e.create_qp(&init).unwrap();
    let b = End { node: 1, pd, cq, qpn };
    bring_up(net, a, 1, b.qpn, 1, 2, &o);
    bring_up(net, b, 0, a.qpn, 2, 1, &o);
    (a, b, srq)
}

#[test]
fn srq_feeds_receives_and_reports_limit_once_then_last_wqe_on_error() {
    let mut net = Net::new(2, 5, LinkCfg::default());
    let (a, b, srq) = srq_receiver(&mut net, 8);
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 4 * 64);
    for i in 0..4u64 {
        net.nodes[1].eng.post_srq_recv(srq, &RecvWr { wr_id: i, sg_list: &[sge(dst + i * 64, 64, dmr)] }).unwrap();
    }
    let e = &mut net.nodes[1].eng;
    assert_eq!(
        e.modify_srq(srq, &SrqAttr { srq_limit: 9, ..Default::default() }, SrqAttrMask::LIMIT),
        Err(Error::Invalid)
    );
    e.modify_srq(srq, &SrqAttr { srq_limit: 2, ..Default::default() }, SrqAttrMask::LIMIT).unwrap();
    for i in 0..3u64 {
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(i, WrKind::Send, &[sge(src, 8, smr)])).unwrap();
    }
    net.run_idle(MS);
    assert_eq!(net.poll_all(1, b.cq).iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0, 1, 2]);
    let limit = Event::Async(AsyncEvent { kind: AsyncEventType::SrqLimitReached, element: AsyncElement::Srq(srq) });
    let mut evs = Vec::new();
    while let Some(e) = net.nodes[1].eng.poll_event() {
        evs.push(e);
    }
    assert_eq!(evs.iter().filter(|e| **e == limit).count(), 1);
    assert_eq!(net.nodes[1].eng.query_srq(srq).unwrap().srq_limit, 0, "limit disarms");
    net.nodes[1]
        .eng
        .modify_qp(b.qpn, &QpAttr { qp_state: QpState::Err, ..Default::default() }, QpAttrMask::STATE)
        .unwrap();
    assert_eq!(
        net.nodes[1].eng.poll_event(),
        Some(Event::Async(AsyncEvent { kind: AsyncEventType::QpLastWqeReached, element: AsyncElement::Qp(b.qpn) }))
    );
    assert_eq!(net.nodes[1].eng.destroy_srq(srq), Err(Error::Busy));
}

#[test]
fn cq_overflow_raises_cq_error_event() {
    let mut net = Net::new(2, 6, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    // A second, tiny CQ for a new QP pair on node 0.
    let e = &mut net.nodes[0].eng;
    let (small, _) = e.create_cq(2).unwrap();
    let init = QpInitAttr {
        pd: a.pd,
        qp_type: QpType::Rc,
        send_cq: small,
        recv_cq: small,
        srq: None,
        cap: QpCap { max_send_wr: 8, max_recv_wr: 8, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 },
        sq_sig_all: true,
    };
    let (qpn, _) = e.create_qp(&init).unwrap();
    let a2 = End { node: 0, pd: a.pd, cq: small, qpn };
    let b2 = make_qp(&mut net, 1, &QpOpts::default());
    let o = QpOpts::default();
    bring_up(&mut net, a2, 1, b2.qpn, 5, 6, &o);
    bring_up(&mut net, b2, 0, a2.qpn, 6, 5, &o);
    let (src, smr) = buffer(&mut net, a2, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    let _ = b;
    let made = net.nodes[0].eng.completions_made();
    for i in 0..4u64 {
        let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
        let _ = dmr;
        net.nodes[0].eng.post_send(net.now, a2.qpn, &send_wr(i, w, &[sge(src, 8, smr)])).unwrap();
    }
    net.run_idle(MS);
    let ev = Event::Async(AsyncEvent { kind: AsyncEventType::CqErr, element: AsyncElement::Cq(small) });
    let mut evs = Vec::new();
    while let Some(e) = net.nodes[0].eng.poll_event() {
        evs.push(e);
    }
    assert_eq!(evs, vec![ev]);
    assert_eq!(net.poll_all(0, small).len(), 2);
    assert!(net.nodes[0].eng.counters().cq_overflows >= 2);
    // The running completion count counts what was stored, not what overflowed.
    assert_eq!(net.nodes[0].eng.completions_made() - made, 2);
    assert_eq!(net.nodes[0].eng.destroy_cq(small), Err(Error::Busy));
}

#[test]
fn error_state_flushes_receive_wrs() {
    let mut net = Net::new(2, 7, LinkCfg::default());
    let (_a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (dst, dmr) = buffer(&mut net, b, 64);
    for i in 0..3 {
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: i, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    }
    net.nodes[1]
        .eng
        .modify_qp(b.qpn, &QpAttr { qp_state: QpState::Err, ..Default::default() }, QpAttrMask::STATE)
        .unwrap();
    let wc = net.poll_all(1, b.cq);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect::<Vec<_>>(),
        vec![
            (0, WcStatus::WrFlushErr, WcOpcode::Recv),
            (1, WcStatus::WrFlushErr, WcOpcode::Recv),
            (2, WcStatus::WrFlushErr, WcOpcode::Recv)
        ]
    );
    // Posting in ERR flushes at once.
    net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 9, sg_list: &[] }).unwrap();
    assert_eq!(net.poll_all(1, b.cq)[0].wr_id, 9);
    // The time is asked for only then, and the flush completion carries it.
    let later = net.nodes[1].eng.clock() + 5_000_000;
    let asked = std::cell::Cell::new(0);
    let now = || {
        asked.set(asked.get() + 1);
        later
    };
    net.nodes[1].eng.post_recv_at(b.qpn, &RecvWr { wr_id: 10, sg_list: &[] }, now).unwrap();
    assert_eq!(asked.get(), 1);
    let wc = net.poll_all(1, b.cq);
    assert_eq!((wc[0].wr_id, wc[0].status, wc[0].timestamp), (10, WcStatus::WrFlushErr, later));
}

#[test]
fn a_receive_posted_to_a_working_qp_asks_no_time() {
    let mut net = Net::new(2, 7, LinkCfg::default());
    let (_a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (dst, dmr) = buffer(&mut net, b, 64);
    let before = net.nodes[1].eng.clock();
    let asked = std::cell::Cell::new(false);
    let now = || {
        asked.set(true);
        before + 1
    };
    net.nodes[1].eng.post_recv_at(b.qpn, &RecvWr { wr_id: 1, sg_list: &[sge(dst, 64, dmr)] }, now).unwrap();
    assert!(!asked.get(), "a receive that waits for a message needs no time");
    assert_eq!(net.nodes[1].eng.clock(), before);
    assert!(net.poll_all(1, b.cq).is_empty());
}

#[test]
fn first_packet_in_rtr_raises_comm_established() {
    let mut net = Net::new(2, 8, LinkCfg::default());
    let o = QpOpts::default();
    let a = make_qp(&mut net, 0, &o);
    let b = make_qp(&mut net, 1, &o);
    bring_up(&mut net, a, 1, b.qpn, 1, 2, &o);
    // b only to RTR.
    use QpAttrMask as A;
    let dgid = gid_of(net.nodes[0].addr);
    let e = &mut net.nodes[1].eng;
    e.modify_qp(
        b.qpn,
        &QpAttr { qp_state: QpState::Init, port_num: 1, qp_access_flags: o.access, ..Default::default() },
        A::STATE | A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS,
    )
    .unwrap();
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: a.qpn,
        rq_psn: 1,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 3,
        ah_attr: AhAttr {
            is_global: true,
            grh: GlobalRoute { dgid, ..Default::default() },
            port_num: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let m = A::STATE | A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN | A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER;
    e.modify_qp(b.qpn, &rtr, m).unwrap();
    // Query returns what was set.
    let (q, _) = e.query_qp(b.qpn).unwrap();
    assert_eq!(
        (q.qp_state, q.path_mtu, q.dest_qp_num, q.rq_psn, q.max_dest_rd_atomic, q.min_rnr_timer),
        (QpState::Rtr, Some(Mtu::Mtu1024), a.qpn, 1, 4, 3)
    );
    assert_eq!(q.ah_attr.grh.dgid, dgid);
    assert_eq!(q.qp_access_flags, o.access);
    // Illegal: RTR -> SQD; and nothing changes.
    assert_eq!(
        e.modify_qp(b.qpn, &QpAttr { qp_state: QpState::Sqd, ..Default::default() }, A::STATE),
        Err(Error::Invalid)
    );
    assert_eq!(e.query_qp(b.qpn).unwrap().0.qp_state, QpState::Rtr);
    let (dst, dmr) = buffer(&mut net, b, 64);
    let (src, smr) = buffer(&mut net, a, 64);
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, 8, smr)])).unwrap();
    net.run_idle(MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
    assert_eq!(
        net.nodes[1].eng.poll_event(),
        Some(Event::Async(AsyncEvent { kind: AsyncEventType::CommEst, element: AsyncElement::Qp(b.qpn) }))
    );
}

#[test]
fn type1_window_bound_by_verb_grants_remote_write_until_rebound() {
    let mut net = Net::new(2, 9, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    net.nodes[0].mem().set(src, b"windowed");
    let dst = net.nodes[1].mem().alloc(4096);
    let e = &mut net.nodes[1].eng;
    let mr = e.reg_mr(b.pd, dst, 4096, dst, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND).unwrap();
    let (mw, _) = e.alloc_mw(b.pd, MwType::Type1).unwrap();
    let bind = MwBind { mw, rkey: 0, mr: mr.id, addr: dst + 100, length: 8, access: AccessFlags::REMOTE_WRITE };
    let rkey = e.bind_mw(net.now, b.qpn, 55, SendFlags::SIGNALED, &bind).unwrap();
    net.run_idle(MS);
    assert_eq!(net.poll_all(1, b.cq)[0].opcode, WcOpcode::BindMw);
    assert_eq!(net.nodes[1].eng.dereg_mr(mr.id), Err(Error::Busy), "an MR with a bound window stays");
    let w = WrKind::RdmaWrite { remote_addr: dst + 100, rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, 8, smr)])).unwrap();
    net.run_idle(MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
    assert_eq!(net.nodes[1].mem().get(dst + 100, 8), b"windowed");
    // Outside the window (but inside the MR): remote access error.
    let w = WrKind::RdmaWrite { remote_addr: dst + 104, rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(2, w, &[sge(src, 8, smr)])).unwrap();
    net.run_idle(MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::RemAccessErr);
}

#[test]
fn local_invalidate_revokes_a_type2_window() {
    let mut net = Net::new(2, 10, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    let dst = net.nodes[1].mem().alloc(4096);
    let e = &mut net.nodes[1].eng;
    let mr = e.reg_mr(b.pd, dst, 4096, dst, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND).unwrap();
    let (mw, k0) = e.alloc_mw(b.pd, MwType::Type2).unwrap();
    let k1 = (k0 & !0xFF) | ((k0 + 1) & 0xFF);
    let bind = MwBind { mw, rkey: k1, mr: mr.id, addr: dst, length: 64, access: AccessFlags::REMOTE_WRITE };
    e.post_send(net.now, b.qpn, &send_wr(1, WrKind::BindMw(bind), &[])).unwrap();
    e.post_send(net.now, b.qpn, &send_wr(2, WrKind::LocalInv { invalidate_rkey: k1 }, &[])).unwrap();
    net.run_idle(MS);
    let wb = net.poll_all(1, b.cq);
    assert_eq!(
        wb.iter().map(|w| (w.opcode, w.status)).collect::<Vec<_>>(),
        vec![(WcOpcode::BindMw, WcStatus::Success), (WcOpcode::LocalInv, WcStatus::Success)]
    );
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: k1 };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(3, w, &[sge(src, 8, smr)])).unwrap();
    net.run_idle(MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::RemAccessErr);
    assert_eq!(net.nodes[1].mem().get(dst, 8), vec![0; 8]);
}

#[test]
fn object_lifetimes_are_checked() {
    let mut net = Net::new(1, 11, LinkCfg::default());
    let e = &mut net.nodes[0].eng;
    let pd = e.alloc_pd().unwrap();
    assert_eq!(e.reg_mr(pd, 0x1000_0000, 64, 0x1000_0000, AccessFlags::REMOTE_WRITE), Err(Error::Invalid));
    let mr = e.reg_mr(pd, 0x1000_0000, 64, 0x1000_0000, AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(e.dealloc_pd(pd), Err(Error::Busy));
    e.dereg_mr(mr.id).unwrap();
    assert_eq!(e.dereg_mr(mr.id), Err(Error::NotFound));
    e.dealloc_pd(pd).unwrap();
    assert_eq!(e.create_cq(0), Err(Error::Invalid));
}

#[test]
fn sqd_stops_new_work_and_rts_resumes_it() {
    let mut net = Net::new(2, 12, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    let e = &mut net.nodes[0].eng;
    let sqd = QpAttr { qp_state: QpState::Sqd, en_sqd_async_notify: true, ..Default::default() };
    e.modify_qp(a.qpn, &sqd, QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY).unwrap();
    let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
    e.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(src, 8, smr)])).unwrap();
    net.run_idle(MS);
    assert_eq!(net.stats.sent, 0);
    assert!(!net.nodes[0].eng.query_qp(a.qpn).unwrap().0.sq_draining, "nothing was in flight");
    let drained = Event::Async(AsyncEvent { kind: AsyncEventType::SqDrained, element: AsyncElement::Qp(a.qpn) });
    assert_eq!(net.nodes[0].eng.poll_event(), Some(drained));
    net.nodes[0]
        .eng
        .modify_qp(a.qpn, &QpAttr { qp_state: QpState::Rts, ..Default::default() }, QpAttrMask::STATE)
        .unwrap();
    net.run_idle(MS);
    assert_eq!(net.poll_all(0, a.cq)[0].status, WcStatus::Success);
}

#[test]
fn rc_over_ipv6_moves_data_both_ways() {
    let mut net = Net::new_v6(2, 13, LinkCfg { loss: 0.05, ..LinkCfg::default() });
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (loc, lmr) = buffer(&mut net, a, 20_000);
    let (rem, rmr) = buffer(&mut net, b, 20_000);
    net.nodes[0].mem().set(loc, &[7; 10_000]);
    net.nodes[1].mem().set(rem + 10_000, &[9; 10_000]);
    let w = WrKind::RdmaWrite { remote_addr: rem, rkey: rmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, w, &[sge(loc, 10_000, lmr)])).unwrap();
    let r = WrKind::RdmaRead { remote_addr: rem + 10_000, rkey: rmr.rkey };
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(2, r, &[sge(loc + 10_000, 10_000, lmr)])).unwrap();
    net.run_idle(100 * MS);
    assert!(net.poll_all(0, a.cq).iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(net.nodes[1].mem().get(rem, 10_000), vec![7; 10_000]);
    assert_eq!(net.nodes[0].mem().get(loc + 10_000, 10_000), vec![9; 10_000]);
}

#[test]
fn ipv4_without_the_ip_id_verifies_id_zero_and_counts_the_rest_unverified() {
    let mut net = Net::new(2, 14, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    for i in 0..2 {
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: i, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    }
    net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(1, WrKind::Send, &[sge(src, 8, smr)])).unwrap();
    let mut buf = vec![0u8; MAX_PACKET];
    let t = net.nodes[0].eng.poll_transmit(net.now, &mut buf).unwrap();
    let (s4, d4) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let d = Datagram {
        src: net.nodes[0].addr,
        src_port: t.src_port,
        dst: net.nodes[1].addr,
        icrc: IcrcCheck::V4NoId { src: s4, dst: d4 },
        payload: &buf[..t.len],
        ce: false,
    };
    net.nodes[1].eng.handle_datagram(net.now, &d);
    assert_eq!(net.nodes[1].eng.counters().icrc_unverified, 0, "urxe peers send ID 0: verified");
    // A packet whose ICRC was computed with another IP ID (as kernel rxe sends) is accepted
    // and counted: a UDP socket cannot see the ID.
    let mut other = buf[..t.len].to_vec();
    let ip = urxe::wire::icrc::IpFields::V4 { src: s4, dst: d4, id: 0x1234, flags_frag: 0x4000 };
    let n = other.len();
    let c = urxe::wire::icrc::icrc(&ip, t.src_port, 4791, &other[..n - 4]);
    other[n - 4..].copy_from_slice(&c.to_le_bytes());
    other[9..12].copy_from_slice(&(QpOpts::default().a_psn + 1).to_be_bytes()[1..]);
    let c = urxe::wire::icrc::icrc(&ip, t.src_port, 4791, &other[..n - 4]);
    other[n - 4..].copy_from_slice(&c.to_le_bytes());
    let d = Datagram { payload: &other, ..d };
    net.nodes[1].eng.handle_datagram(net.now, &d);
    let c = net.nodes[1].eng.counters();
    assert_eq!((c.icrc_unverified, c.icrc_errors), (1, 0));
    assert_eq!(net.poll_all(1, b.cq).len(), 2);
}

/// A driver that hashed the ICRC itself (`IcrcCheck::Hashed`): the right value is taken; a
/// wrong one is dropped and counted when the driver knew every covered field, and accepted and
/// counted unverified when it did not know the IPv4 ID.
#[test]
fn an_icrc_the_driver_hashed_is_compared_to_the_packets() {
    let mut net = Net::new(2, 14, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    for i in 0..3 {
        net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: i, sg_list: &[sge(dst, 64, dmr)] }).unwrap();
    }
    let mut packets = Vec::new();
    for i in 0..3 {
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(i, WrKind::Send, &[sge(src, 8, smr)])).unwrap();
        let mut buf = vec![0u8; MAX_PACKET];
        let t = net.nodes[0].eng.poll_transmit(net.now, &mut buf).unwrap();
        buf.truncate(t.len);
        packets.push((t.src_port, buf));
    }
    let ip = urxe::wire::icrc::IpFields::v4_df([10, 0, 0, 1].into(), [10, 0, 0, 2].into());
    let hashed = |port: u16, p: &[u8]| {
        let mut body = p[..p.len() - 4].to_vec();
        urxe::wire::icrc::IcrcFlow::new(&ip, port, 4791).icrc_in_place(&mut body)
    };
    let deliver = |net: &mut Net, p: &[u8], icrc: IcrcCheck| {
        let d = Datagram {
            src: net.nodes[0].addr,
            src_port: packets[0].0,
            dst: net.nodes[1].addr,
            icrc,
            payload: p,
            ce: false,
        };
        net.nodes[1].eng.handle_datagram(net.now, &d);
    };
    let (port, p) = &packets[0];
    deliver(&mut net, p, IcrcCheck::Hashed { icrc: hashed(*port, p), id_known: true });
    let c = net.nodes[1].eng.counters();
    assert_eq!((c.icrc_errors, c.icrc_unverified), (0, 0), "the right value is taken");
    assert_eq!(net.poll_all(1, b.cq).len(), 1);
    let (port, p) = &packets[1];
    deliver(&mut net, p, IcrcCheck::Hashed { icrc: hashed(*port, p) ^ 1, id_known: true });
    let c = net.nodes[1].eng.counters();
    assert_eq!((c.icrc_errors, c.icrc_unverified), (1, 0), "a wrong value with every field known is dropped");
    assert_eq!(net.poll_all(1, b.cq).len(), 0);
    deliver(&mut net, p, IcrcCheck::Hashed { icrc: hashed(*port, p) ^ 1, id_known: false });
    let c = net.nodes[1].eng.counters();
    assert_eq!((c.icrc_errors, c.icrc_unverified), (1, 1), "without the IPv4 ID it is accepted and counted");
    assert_eq!(net.poll_all(1, b.cq).len(), 1);
}

#[test]
fn armed_cq_raises_one_completion_event() {
    let mut net = Net::new(2, 15, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    let (dst, dmr) = buffer(&mut net, b, 64);
    net.nodes[0].eng.req_notify_cq(a.cq, false).unwrap();
    for i in 0..3u64 {
        let w = WrKind::RdmaWrite { remote_addr: dst, rkey: dmr.rkey };
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(i, w, &[sge(src, 8, smr)])).unwrap();
    }
    net.run_idle(MS);
    let mut evs = Vec::new();
    while let Some(e) = net.nodes[0].eng.poll_event() {
        evs.push(e);
    }
    assert_eq!(evs, vec![Event::Completion(a.cq)], "one-shot");
    assert_eq!(net.poll_all(0, a.cq).len(), 3);
}

#[test]
fn zero_based_region_is_addressed_from_zero() {
    let mut net = Net::new(2, 16, LinkCfg::default());
    let (a, b) = connect(&mut net, 0, 1, &QpOpts::default());
    let (src, smr) = buffer(&mut net, a, 64);
    net.nodes[0].mem().set(src, b"zerobase");
    let dst = net.nodes[1].mem().alloc(4096);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::ZERO_BASED;
    let mr = net.nodes[1].eng.reg_mr(b.pd, dst, 4096, dst, access).unwrap();
    for (id, va) in [(1u64, 0x100u64), (2, 4090)] {
        let w = WrKind::RdmaWrite { remote_addr: va, rkey: mr.rkey };
        net.nodes[0].eng.post_send(net.now, a.qpn, &send_wr(id, w, &[sge(src, 8, smr)])).unwrap();
        net.run_idle(MS);
    }
    let wc = net.poll_all(0, a.cq);
    assert_eq!(wc.iter().map(|w| w.status).collect::<Vec<_>>(), vec![WcStatus::Success, WcStatus::RemAccessErr]);
    assert_eq!(net.nodes[1].mem().get(dst + 0x100, 8), b"zerobase");
}
