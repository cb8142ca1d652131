//! XRC end to end in the simulator: an initiator QP on node 0, a target QP in an XRC domain on
//! node 1, XRC SRQs (each with its own CQ) that the requests' XRCETH names; SEND, RDMA WRITE,
//! READ and atomics under loss, duplication and reordering; hostile XRCETHs (another domain's
//! SRQ, an ordinary SRQ, no SRQ, a number out of range) NAKed and counted; the object rules
//! (domain and SRQ references, `open_xrc_qp`, posting rules).

mod sim;

use sim::*;
use urxe::engine::*;
use urxe::wire::opcode::Transport;

const MS: u64 = 1_000_000;

/// Node 1's side: a domain, a PD, and a target QP in the domain.
struct Target {
    xrcd: XrcdId,
    pd: PdId,
    qpn: Qpn,
}

/// An XRC SRQ on node 1 with its own CQ and posted receives of `len` bytes each.
struct XSrq {
    srq: SrqId,
    num: u32,
    cq: CqId,
    bufs: Vec<u64>,
}

fn connected(net: &mut Net) -> (End, Target) {
    // Masks as for RC (the XRC rows accept the RC attributes).
    let o = QpOpts::default();
    let e = &mut net.nodes[0].eng;
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(4096).unwrap();
    let cap = QpCap { max_send_wr: 256, max_recv_wr: 9, max_send_sge: 4, max_recv_sge: 9, max_inline_data: 64 };
    let init = QpInitAttr { pd, qp_type: QpType::XrcSend, send_cq: cq, recv_cq: 0, srq: None, cap, sq_sig_all: true };
    let (qpn, got) = e.create_qp(&init).unwrap();
    assert_eq!((got.max_recv_wr, got.max_recv_sge), (0, 0), "an initiator has no receive queue");
    let ini = End { node: 0, pd, cq, qpn };
    let e = &mut net.nodes[1].eng;
    let xrcd = e.alloc_xrcd().unwrap();
    let tpd = e.alloc_pd().unwrap();
    let tqpn = e.create_xrc_recv_qp(xrcd).unwrap();
    let tgt = End { node: 1, pd: tpd, cq: 0, qpn: tqpn };
    bring_up(net, ini, 1, tqpn, o.a_psn, o.b_psn, &o);
    bring_up(net, tgt, 0, qpn, o.b_psn, o.a_psn, &o);
    (ini, Target { xrcd, pd: tpd, qpn: tqpn })
}

fn xrc_srq(net: &mut Net, xrcd: XrcdId, pd: PdId, n: u32, len: u64) -> XSrq {
    let e = &mut net.nodes[1].eng;
    let (cq, _) = e.create_cq(1024).unwrap();
    let (srq, _) = e.create_xrc_srq(pd, xrcd, cq, &SrqAttr { max_wr: 512, max_sge: 2, srq_limit: 0 }).unwrap();
    let num = e.srq_num(srq).unwrap();
    let mut bufs = Vec::new();
    for i in 0..n {
        let addr = e.memory().alloc(len);
        let mr = e.reg_mr(pd, addr, len, addr, AccessFlags::LOCAL_WRITE).unwrap();
        e.post_srq_recv(srq, &RecvWr { wr_id: i as u64, sg_list: &[sge(addr, len as u32, mr)] }).unwrap();
        bufs.push(addr);
    }
    XSrq { srq, num, cq, bufs }
}

fn post(net: &mut Net, ini: End, srqn: u32, wr: &SendWr<'_>) -> Result<(), Error> {
    let now = net.now;
    net.nodes[0].eng.post_send_to(now, ini.qpn, Some(srqn), wr)
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

/// SENDs alternate between two SRQs of the domain; each lands in its own SRQ, in order, and
/// completes on that SRQ's CQ; WRITE, READ and FETCH_ADD go through the target as well.
fn traffic(seed: u64, link: LinkCfg) {
    let mut net = Net::new(2, seed, link);
    let (ini, t) = connected(&mut net);
    let len = 3000u64; // three packets at MTU 1024
    let msgs = 12usize;
    let s1 = xrc_srq(&mut net, t.xrcd, t.pd, msgs as u32, len);
    let s2 = xrc_srq(&mut net, t.xrcd, t.pd, msgs as u32, len);
    let (src, smr) = buffer(&mut net, ini, len * msgs as u64 * 2);
    let mut want = Vec::new();
    for i in 0..2 * msgs {
        let data = pattern(len as usize, seed * 100 + i as u64);
        let at = src + i as u64 * len;
        net.nodes[0].mem().set(at, &data);
        let srqn = if i % 2 == 0 { s1.num } else { s2.num };
        post(&mut net, ini, srqn, &send_wr(i as u64, WrKind::Send, &[sge(at, len as u32, smr)])).unwrap();
        want.push(data);
    }
    // A WRITE, a READ and an atomic, checked against the PD of the SRQ they name.
    let e = &mut net.nodes[1].eng;
    let region = e.memory().alloc(4096);
    let access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let rmr = e.reg_mr(t.pd, region, 4096, region, access).unwrap();
    let wdata = pattern(2048, seed ^ 0x77);
    let (wsrc, wmr) = buffer(&mut net, ini, 8192);
    net.nodes[0].mem().set(wsrc, &wdata);
    net.nodes[1].mem().set_u64(region + 3000, 40);
    let w = WrKind::RdmaWrite { remote_addr: region, rkey: rmr.rkey };
    post(&mut net, ini, s1.num, &send_wr(100, w, &[sge(wsrc, 2048, wmr)])).unwrap();
    let r = WrKind::RdmaRead { remote_addr: region, rkey: rmr.rkey };
    post(&mut net, ini, s2.num, &send_wr(101, r, &[sge(wsrc + 2048, 2048, wmr)])).unwrap();
    let f = WrKind::AtomicFetchAdd { remote_addr: region + 3000, rkey: rmr.rkey, add: 2 };
    post(&mut net, ini, s1.num, &send_wr(102, f, &[sge(wsrc + 4096, 8, wmr)])).unwrap();
    net.run_idle(2000 * MS);
    let wc = net.poll_all(0, ini.cq);
    assert_eq!(wc.len(), 2 * msgs + 3, "seed {seed}: initiator completions");
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "seed {seed}: {wc:?}");
    for (s, parity) in [(&s1, 0), (&s2, 1)] {
        let rc = net.poll_all(1, s.cq);
        assert_eq!(rc.len(), msgs, "seed {seed}: SRQ {} completions", s.num);
        for (k, w) in rc.iter().enumerate() {
            assert_eq!(
                (w.status, w.wr_id, w.byte_len, w.opcode),
                (WcStatus::Success, k as u64, len as u32, WcOpcode::Recv)
            );
            assert_eq!(w.qp_num, t.qpn);
            assert!(
                net.nodes[1].mem().get(s.bufs[k], len as usize) == want[2 * k + parity],
                "seed {seed}: message {k}"
            );
        }
    }
    assert!(net.nodes[1].mem().get(region, 2048) == wdata, "seed {seed}: WRITE");
    assert!(net.nodes[0].mem().get(wsrc + 2048, 2048) == wdata, "seed {seed}: READ");
    assert_eq!(net.nodes[0].mem().get_u64(wsrc + 4096), 40, "seed {seed}: FETCH_ADD original");
    assert_eq!(net.nodes[1].mem().get_u64(region + 3000), 42, "seed {seed}: FETCH_ADD result");
    assert_eq!(net.nodes[1].eng.counters().xrc_srq_errors, 0);
    if link.loss > 0.0 {
        assert!(net.stats.lost > 0 && net.stats.duplicated > 0, "seed {seed}: {:?}", net.stats);
    }
}

#[test]
fn xrc_messages_land_in_the_srq_their_xrceth_names() {
    traffic(1, LinkCfg::default());
}

#[test]
fn xrc_survives_loss_duplication_and_reordering() {
    let link = LinkCfg { loss: 0.05, dup: 0.05, reorder: 0.1, reorder_window: 20_000, ..LinkCfg::default() };
    for seed in 2..10 {
        traffic(seed, link);
    }
}

#[test]
fn xrc_packets_use_the_xrc_opcodes_and_carry_xrceth_on_requests_only() {
    let mut net = Net::new(2, 5, LinkCfg::default());
    net.trace = Some(Vec::new());
    let (ini, t) = connected(&mut net);
    let s = xrc_srq(&mut net, t.xrcd, t.pd, 1, 64);
    let (src, smr) = buffer(&mut net, ini, 64);
    post(&mut net, ini, s.num, &send_wr(1, WrKind::Send, &[sge(src, 64, smr)])).unwrap();
    net.run_idle(10 * MS);
    let trace = net.trace.take().unwrap();
    assert!(trace.len() >= 2);
    for (_, p) in &trace {
        let parsed = urxe::wire::parse(&p.data).unwrap();
        assert_eq!(parsed.info.transport, Transport::Xrc, "{:#x}", p.opcode());
        assert_eq!(parsed.headers.xrceth.is_some(), parsed.info.request);
        if parsed.info.request {
            assert_eq!(parsed.headers.xrceth.unwrap().srqn, s.num);
            assert_eq!(p.dest_qp(), t.qpn);
        }
    }
    assert_eq!(net.poll_all(1, s.cq).len(), 1);
}

/// ATOMIC WRITE and FLUSH are implemented on RC only (as in rxe): an XRC initiator refuses
/// them at post time with EINVAL (`Error::Invalid`) and sends nothing, rather than send
/// requests its peer would not answer and fail the WR with RETRY_EXC_ERR much later. The
/// other operations still post on the same QP.
#[test]
fn xrc_initiator_refuses_atomic_write_and_flush_at_post() {
    let mut net = Net::new(2, 17, LinkCfg::default());
    net.trace = Some(Vec::new());
    let (ini, t) = connected(&mut net);
    let s = xrc_srq(&mut net, t.xrcd, t.pd, 1, 64);
    let e = &mut net.nodes[1].eng;
    let region = e.memory().alloc(64);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::FLUSH_GLOBAL;
    let rmr = e.reg_mr(t.pd, region, 64, region, access).unwrap();
    let aw = WrKind::AtomicWrite { remote_addr: region + 8, rkey: rmr.rkey, value: 7u64.to_ne_bytes() };
    assert_eq!(post(&mut net, ini, s.num, &send_wr(1, aw, &[])), Err(Error::Invalid));
    let fl = WrKind::Flush { remote_addr: region, rkey: rmr.rkey, len: 64, placement: 1, level: 0 };
    assert_eq!(post(&mut net, ini, s.num, &send_wr(2, fl, &[])), Err(Error::Invalid));
    let (src, smr) = buffer(&mut net, ini, 64);
    post(&mut net, ini, s.num, &send_wr(3, WrKind::Send, &[sge(src, 64, smr)])).unwrap();
    net.run_idle(10 * MS);
    let wc: Vec<_> = net.poll_all(0, ini.cq).iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(wc, vec![(3, WcStatus::Success)]);
    let trace = net.trace.take().unwrap();
    assert!(trace.iter().all(|(_, p)| urxe::wire::parse(&p.data).unwrap().info.transport == Transport::Xrc));
    assert_eq!(net.nodes[1].mem().get_u64(region + 8), 0);
    assert_eq!(net.poll_all(1, s.cq).len(), 1);
}

/// A hostile or mistaken XRCETH: the target NAKs Invalid Request, counts it, touches no
/// receive buffer and moves to ERR; the initiator's WR fails with REM_INV_REQ_ERR.
fn refused(name: &str, srqn: impl FnOnce(&mut Net, &Target) -> u32) {
    let mut net = Net::new(2, 9, LinkCfg::default());
    let (ini, t) = connected(&mut net);
    let victim = xrc_srq(&mut net, t.xrcd, t.pd, 1, 64);
    net.nodes[1].mem().set(victim.bufs[0], &[0xEE; 64]);
    let n = srqn(&mut net, &t);
    let (src, smr) = buffer(&mut net, ini, 64);
    post(&mut net, ini, n, &send_wr(1, WrKind::Send, &[sge(src, 64, smr)])).unwrap();
    net.run_idle(50 * MS);
    let wc = net.poll_all(0, ini.cq);
    assert_eq!(wc.len(), 1, "{name}");
    assert_eq!(wc[0].status, WcStatus::RemInvReqErr, "{name}");
    let c = net.nodes[1].eng.counters();
    assert_eq!((c.xrc_srq_errors, c.naks_sent), (1, 1), "{name}");
    assert_eq!(net.nodes[1].mem().get(victim.bufs[0], 64), vec![0xEE; 64], "{name}");
    assert!(net.poll_all(1, victim.cq).is_empty(), "{name}");
    assert_eq!(net.nodes[1].eng.query_qp(t.qpn).unwrap().0.qp_state, QpState::Err, "{name}");
}

#[test]
fn xrceth_naming_another_domains_srq_is_naked() {
    refused("foreign domain", |net, t| {
        let other = net.nodes[1].eng.alloc_xrcd().unwrap();
        xrc_srq(net, other, t.pd, 1, 64).num
    });
}

#[test]
fn xrceth_naming_an_ordinary_srq_is_naked() {
    refused("ordinary SRQ", |net, t| {
        let (srq, _) = net.nodes[1].eng.create_srq(t.pd, &SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }).unwrap();
        assert_eq!(net.nodes[1].eng.srq_num(srq), Err(Error::Invalid));
        srq
    });
}

#[test]
fn xrceth_naming_no_srq_or_out_of_range_is_naked() {
    refused("nonexistent SRQ", |_, _| 4000);
    refused("number 0", |_, _| 0);
    refused("largest number", |_, _| 0xFF_FFFF);
}

#[test]
fn xrc_object_rules() {
    let mut net = Net::new(2, 11, LinkCfg::default());
    let (ini, t) = connected(&mut net);
    let s = xrc_srq(&mut net, t.xrcd, t.pd, 1, 64);
    let (src, smr) = buffer(&mut net, ini, 64);
    let sg = [sge(src, 64, smr)];
    let wr = send_wr(1, WrKind::Send, &sg);
    let now = net.now;
    // An initiator's WR must name an SRQ of 24 bits; nobody else's may; a target has no SQ.
    assert_eq!(net.nodes[0].eng.post_send(now, ini.qpn, &wr), Err(Error::Invalid));
    assert_eq!(net.nodes[0].eng.post_send_to(now, ini.qpn, Some(1 << 24), &wr), Err(Error::Invalid));
    assert_eq!(net.nodes[1].eng.post_send_to(now, t.qpn, Some(s.num), &wr), Err(Error::Invalid));
    assert_eq!(net.nodes[0].eng.post_recv(ini.qpn, &RecvWr { wr_id: 1, sg_list: &[] }), Err(Error::Invalid));
    // A local operation names no SRQ: LOCAL_INV of a key that is not a window fails locally.
    let inv = send_wr(5, WrKind::LocalInv { invalidate_rkey: smr.rkey }, &[]);
    net.nodes[0].eng.post_send(now, ini.qpn, &inv).unwrap();
    net.run_idle(MS);
    let wc = net.poll_all(0, ini.cq);
    assert_eq!((wc.len(), wc[0].wr_id, wc[0].status), (1, 5, WcStatus::LocProtErr));
    let e = &mut net.nodes[1].eng;
    assert_eq!(e.post_recv(t.qpn, &RecvWr { wr_id: 1, sg_list: &[] }), Err(Error::Invalid));
    // The domain is busy while its SRQ and target QP exist; the SRQ's CQ while the SRQ does.
    assert_eq!(e.dealloc_xrcd(t.xrcd), Err(Error::Busy));
    assert_eq!(e.destroy_cq(s.cq), Err(Error::Busy));
    // open_xrc_qp: only a target of the same domain; each handle closes once.
    let other = e.alloc_xrcd().unwrap();
    assert_eq!(e.open_xrc_qp(other, t.qpn), Err(Error::Invalid));
    assert_eq!(e.open_xrc_qp(t.xrcd, 0x7777), Err(Error::NotFound));
    e.open_xrc_qp(t.xrcd, t.qpn).unwrap();
    assert_eq!(e.qp_xrcd(t.qpn), Ok(Some(t.xrcd)));
    e.destroy_qp(t.qpn).unwrap();
    assert!(e.query_qp(t.qpn).is_ok(), "the creator's handle still holds the QP");
    e.destroy_qp(t.qpn).unwrap();
    assert_eq!(e.query_qp(t.qpn).map(|_| ()), Err(Error::NotFound));
    e.destroy_srq(s.srq).unwrap();
    e.destroy_cq(s.cq).unwrap();
    e.dealloc_xrcd(t.xrcd).unwrap();
    e.dealloc_xrcd(other).unwrap();
    assert_eq!(e.dealloc_xrcd(other), Err(Error::NotFound));
    assert_eq!(e.create_xrc_recv_qp(other), Err(Error::NotFound));
}

/// A request packet from node 0 to `dest_qp` on node 1, ICRC right.
fn crafted(net: &Net, opcode: u8, dest_qp: Qpn, psn: u32, xrc_srqn: Option<u32>) -> Packet {
    use urxe::wire::bth::BthRepr;
    use urxe::wire::icrc::{IpFields, ROCEV2_PORT};
    use urxe::wire::xrceth::XrcEthRepr;
    let bth =
        BthRepr { opcode, pkey: 0xFFFF, dest_qp, ack_req: true, psn: urxe::wire::Psn::new(psn), ..Default::default() };
    let h = urxe::wire::Headers { bth, xrceth: xrc_srqn.map(|srqn| XrcEthRepr { srqn }), ..Default::default() };
    let mut buf = vec![0u8; 128];
    let hl = h.emit(&mut buf).unwrap();
    buf[hl..hl + 8].copy_from_slice(b"intruder");
    let (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) = (net.nodes[0].addr, net.nodes[1].addr) else {
        unreachable!("IPv4 simulator")
    };
    let n = urxe::wire::packet::finish(&mut buf, hl, 8, &IpFields::v4_df(s, d), 0xC001, ROCEV2_PORT).unwrap();
    buf.truncate(n);
    Packet { from: 0, to: 1, src_port: 0xC001, data: buf }
}

#[test]
fn transports_do_not_mix_rc_to_a_target_xrc_to_an_rc_qp_or_an_initiator() {
    use urxe::wire::opcode::op;
    let mut net = Net::new(2, 13, LinkCfg::default());
    let (_, t) = connected(&mut net);
    let s = xrc_srq(&mut net, t.xrcd, t.pd, 1, 64);
    // An RC QP and an XRC initiator on node 1 as well.
    let rc = make_qp(&mut net, 1, &QpOpts::default());
    bring_up(&mut net, rc, 0, 0x77, 0, 0, &QpOpts::default());
    let e = &mut net.nodes[1].eng;
    let (icq, _) = e.create_cq(16).unwrap();
    let cap = QpCap { max_send_wr: 4, max_send_sge: 1, ..QpCap::default() };
    let init =
        QpInitAttr { pd: t.pd, qp_type: QpType::XrcSend, send_cq: icq, recv_cq: 0, srq: None, cap, sq_sig_all: true };
    let (ini1, _) = e.create_qp(&init).unwrap();
    let ini1 = End { node: 1, pd: t.pd, cq: icq, qpn: ini1 };
    bring_up(&mut net, ini1, 0, 0x78, 0, 0, &QpOpts::default());
    let before = *net.nodes[1].eng.counters();
    let expected = QpOpts::default().b_psn;
    for p in [
        crafted(&net, op::RC_SEND_ONLY, t.qpn, expected, None),
        crafted(&net, 0xA4, rc.qpn, 0, Some(s.num)),
        crafted(&net, 0xA4, ini1.qpn, 0, Some(s.num)),
    ] {
        net.inject(p, 0);
    }
    net.run_idle(10 * MS);
    let c = net.nodes[1].eng.counters();
    assert_eq!(c.opcode_errors - before.opcode_errors, 3, "each packet dropped for its transport");
    assert_eq!((c.naks_sent, c.xrc_srq_errors), (before.naks_sent, 0));
    assert!(net.poll_all(1, s.cq).is_empty());
    assert_eq!(net.nodes[1].eng.query_qp(t.qpn).unwrap().0.qp_state, QpState::Rts);
}
