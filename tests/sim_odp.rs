//! On-demand paging in the simulator: the implicit MR (address 0, length 2^64 - 1, as
//! `ibv_reg_mr(pd, NULL, SIZE_MAX, IBV_ACCESS_ON_DEMAND | ...)` registers it) over a host whose
//! memory has holes, some punched after registration (memory unmapped later), one mapped only
//! after registration (memory that did not exist yet), on a link that loses, duplicates and
//! reorders packets.
//!
//! The peer's RDMA WRITE, READ and atomics with the implicit rkey (or a corrupted one) go to
//! random addresses: in mapped memory, in and across holes, across the edges of host memory, and
//! anywhere in the 64-bit space. For every operation the outcome is exact: it succeeds iff the
//! key is the implicit one and every byte is mapped (atomics: 8 aligned bytes), else it ends in
//! IBV_WC_REM_ACCESS_ERR (or, when the link lost that NAK, IBV_WC_RETRY_EXC_ERR); and the target's memory is byte-for-byte what the successful
//! operations made it (a failed WRITE may have placed the packets before the fault, and only in
//! its own range). Nothing may panic.

mod sim;

use proptest::prelude::*;
use sim::*;
use urxe::engine::*;

const MEM: usize = 1 << 20;
const MS: u64 = 1_000_000;
/// Offsets (from the target's memory base) and lengths of the holes: unmapped after
/// registration, and mapped only after registration (halfway through the operations).
const GONE: (u64, u64) = (0x10000, 4096);
const LATER: (u64, u64) = (0x40000, 8192);

fn lossy() -> LinkCfg {
    LinkCfg { loss: 0.03, dup: 0.03, reorder: 0.05, reorder_window: 20_000, ..LinkCfg::default() }
}

const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::ON_DEMAND);

struct Setup {
    net: Net,
    peer_pd: PdId,
    target_pd: PdId,
    /// The implicit MRs of the peer (its local buffers) and of the target.
    peer_mr: MrHandle,
    target_mr: MrHandle,
    /// The peer's local buffer (source of WRITEs, sink of READs and atomics).
    local: u64,
    /// Holes of the target's memory now.
    holes: Vec<(u64, u64)>,
}

fn setup(seed: u64) -> Setup {
    let mut net = Net::with_memory(2, seed, lossy(), MEM);
    let base = net.nodes[1].mem().base;
    let later = (base + LATER.0, LATER.1);
    // The LATER pages do not exist when the MR is registered...
    net.nodes[1].mem().punch_hole(later.0, later.1);
    let target_pd = net.nodes[1].eng.alloc_pd().unwrap();
    let target_mr = net.nodes[1].eng.reg_mr(target_pd, 0, u64::MAX, 0, ALL).unwrap();
    // ... and the GONE pages are unmapped after it was.
    let gone = (base + GONE.0, GONE.1);
    net.nodes[1].mem().punch_hole(gone.0, gone.1);
    let peer_pd = net.nodes[0].eng.alloc_pd().unwrap();
    let peer_mr = net.nodes[0].eng.reg_mr(peer_pd, 0, u64::MAX, 0, ALL).unwrap();
    let local = net.nodes[0].mem().alloc(8192);
    Setup { net, peer_pd, target_pd, peer_mr, target_mr, local, holes: vec![gone, later] }
}

impl Setup {
    fn map_later(&mut self) {
        let later = (self.net.nodes[1].mem().base + LATER.0, LATER.1);
        self.net.nodes[1].mem().fill_hole(later.0, later.1);
        self.holes.retain(|&h| h != later);
    }

    /// Whether the target's `[addr, addr + len)` is host memory clear of every hole.
    fn mapped(&self, addr: u64, len: u64) -> bool {
        let base = self.net.nodes[1].mem().base;
        let Some(end) = addr.checked_add(len) else { return false };
        addr >= base && end <= base + MEM as u64 && self.holes.iter().all(|&(h, hl)| end <= h || h + hl <= addr)
    }

    /// Runs one work request on a fresh QP pair (a failed one leaves its QPs in error) and
    /// returns its completion status.
    fn run(&mut self, kind: WrKind, len: u32) -> WcStatus {
        let opts = QpOpts::default();
        let a = make_qp_in(&mut self.net, 0, self.peer_pd, &opts);
        let b = make_qp_in(&mut self.net, 1, self.target_pd, &opts);
        bring_up(&mut self.net, a, 1, b.qpn, opts.a_psn, opts.b_psn, &opts);
        bring_up(&mut self.net, b, 0, a.qpn, opts.b_psn, opts.a_psn, &opts);
        let sg = [sge(self.local, len, self.peer_mr)];
        self.net.nodes[0].eng.post_send(self.net.now, a.qpn, &send_wr(1, kind, &sg)).unwrap();
        let wc = self.net.first_completion(0, a.cq, 500 * MS);
        let wc = wc.unwrap_or_else(|| panic!("no completion for {kind:?} within 500 ms of virtual time"));
        self.net.run_idle(5 * MS);
        self.net.nodes[0].eng.destroy_qp(a.qpn).unwrap();
        self.net.nodes[1].eng.destroy_qp(b.qpn).unwrap();
        wc.status
    }

    fn target_bytes(&self) -> Vec<u8> {
        let m = self.net.nodes[1].mem();
        m.get(m.base, MEM)
    }
}

#[derive(Clone, Copy, Debug)]
enum Place {
    /// Offset from the target's memory base (may be past its end).
    Base(u64),
    /// Near a hole: (which, signed offset from its start).
    Hole(usize, i64),
    /// Anywhere.
    Far(u64),
}

#[derive(Clone, Copy, Debug)]
struct Op {
    verb: Verb,
    place: Place,
    len: u32,
    /// XOR applied to the rkey (0: the implicit rkey itself).
    key_flip: u32,
}

fn op() -> impl Strategy<Value = Op> {
    let verb = proptest::sample::select(Verb::ALL.to_vec());
    let place = prop_oneof![
        4 => (0u64..MEM as u64 + 4096).prop_map(Place::Base),
        4 => ((0usize..2), -5000i64..9000).prop_map(|(h, o)| Place::Hole(h, o)),
        1 => any::<u64>().prop_map(Place::Far),
        1 => prop_oneof![Just(0u64), Just(8), Just(u64::MAX - 7), Just(u64::MAX - 4095)].prop_map(Place::Far),
    ];
    let len = prop_oneof![2 => 1u32..256, 1 => 256u32..6000];
    let flip = prop_oneof![6 => Just(0u32), 1 => 1u32..=u32::MAX];
    (verb, place, len, flip).prop_map(|(verb, place, len, key_flip)| Op { verb, place, len, key_flip })
}

/// How a refused remote access ends at the requester: IBV_WC_REM_ACCESS_ERR from the NAK, or,
/// when the lossy link dropped that NAK, IBV_WC_RETRY_EXC_ERR — the responder QP went to the
/// error state with the NAK (IBTA class C) and answers no retransmission, as on any RoCE link.
fn nak_or_lost_nak(status: WcStatus) -> bool {
    matches!(status, WcStatus::RemAccessErr | WcStatus::RetryExcErr)
}

fn address(s: &Setup, p: Place) -> u64 {
    let base = s.net.nodes[1].mem().base;
    match p {
        Place::Base(off) => base + off,
        Place::Hole(h, off) => (base + [GONE.0, LATER.0][h]).wrapping_add_signed(off),
        Place::Far(a) => a,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn implicit_region_reaches_exactly_the_mapped_bytes_under_loss(
        seed in any::<u64>(),
        ops in proptest::collection::vec(op(), 2..12),
    ) {
        let mut s = setup(seed);
        let mut rng = sim::Rng::new(seed);
        let mut model = s.target_bytes();
        let base = s.net.nodes[1].mem().base;
        for (i, o) in ops.iter().enumerate() {
            if i == ops.len() / 2 {
                s.map_later();
            }
            let atomic = o.verb.is_atomic();
            let mut va = address(&s, o.place);
            if atomic {
                va &= !7;
            }
            let len = if atomic { 8 } else { o.len };
            let rkey = s.target_mr.rkey ^ o.key_flip;
            let mut src = vec![0u8; len as usize];
            rng.fill(&mut src);
            s.net.nodes[0].mem().set(s.local, &src);
            let kind = o.verb.wr(va, rkey);
            let expect_ok = o.key_flip == 0 && s.mapped(va, u64::from(len));
            let status = s.run(kind, len);
            prop_assert_eq!(status == WcStatus::Success, expect_ok,
                "{:?} at {:#x} len {} -> {:?} (holes {:x?})", o, va, len, status, s.holes);
            if !expect_ok {
                prop_assert!(nak_or_lost_nak(status), "{:?} at {:#x} -> {:?}", o, va, status);
            }
            let off = va.wrapping_sub(base) as usize;
            match (o.verb, expect_ok) {
                (Verb::Write, true) => model[off..off + len as usize].copy_from_slice(&src),
                (Verb::Write, false) if s.mapped(va, 1) || va.checked_sub(base).is_some_and(|o| o < MEM as u64) => {
                    // Packets before the fault may have landed, inside the WRITE's own range only.
                    let end = (off + len as usize).min(MEM);
                    let now = s.target_bytes();
                    model[off..end].copy_from_slice(&now[off..end]);
                }
                (Verb::Read, true) => {
                    prop_assert_eq!(&s.net.nodes[0].mem().get(s.local, len as usize), &model[off..off + len as usize]);
                }
                (Verb::CmpSwap | Verb::FetchAdd, true) => {
                    let old = u64::from_ne_bytes(model[off..off + 8].try_into().unwrap());
                    prop_assert_eq!(s.net.nodes[0].mem().get_u64(s.local), old, "atomic returns the old value");
                    let new = match o.verb {
                        Verb::CmpSwap if old == 0 => 0x5A5A,
                        Verb::FetchAdd => old.wrapping_add(3),
                        _ => old,
                    };
                    model[off..off + 8].copy_from_slice(&new.to_ne_bytes());
                }
                _ => {}
            }
            prop_assert!(s.target_bytes() == model, "target memory differs from the model after {:?} at {:#x}", o, va);
        }
    }
}

/// Pages that did not exist when the implicit MR was registered: a WRITE there fails, and once
/// they are mapped a multi-packet WRITE lands whole and reads back, under loss.
#[test]
fn pages_mapped_after_registration_take_writes_and_reads_under_loss() {
    let (mut lost, mut duplicated) = (0, 0);
    for seed in 0..12u64 {
        let mut s = setup(seed);
        let at = s.net.nodes[1].mem().base + LATER.0 + 100;
        let len = 6000u32;
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed as u8).collect();
        s.net.nodes[0].mem().set(s.local, &data);
        let rkey = s.target_mr.rkey;
        let refused = s.run(WrKind::RdmaWrite { remote_addr: at, rkey }, len);
        assert!(nak_or_lost_nak(refused), "seed {seed}: {refused:?}");
        s.map_later();
        assert_eq!(s.run(WrKind::RdmaWrite { remote_addr: at, rkey }, len), WcStatus::Success, "seed {seed}");
        assert_eq!(s.net.nodes[1].mem().get(at, len as usize), data, "seed {seed}: written bytes");
        s.net.nodes[0].mem().set(s.local, &vec![0; len as usize]);
        assert_eq!(s.run(WrKind::RdmaRead { remote_addr: at, rkey }, len), WcStatus::Success, "seed {seed}");
        assert_eq!(s.net.nodes[0].mem().get(s.local, len as usize), data, "seed {seed}: read back");
        lost += s.net.stats.lost;
        duplicated += s.net.stats.duplicated;
    }
    assert!(lost > 0 && duplicated > 0, "the link lost {lost} and duplicated {duplicated} packets: not exercised");
}

/// Receives posted through the implicit lkey: into mapped memory they complete with the data;
/// into a page unmapped after registration the receive ends in IBV_WC_LOC_PROT_ERR and the
/// sender sees IBV_WC_REM_OP_ERR (what mr_faults shows for an ordinary MR).
#[test]
fn receives_through_the_implicit_lkey_land_or_fail_cleanly() {
    for seed in 0..8u64 {
        let mut s = setup(seed);
        let base = s.net.nodes[1].mem().base;
        for (dst, ok) in [(base + 0x80000, true), (base + GONE.0 + 512, false)] {
            let opts = QpOpts::default();
            let a = make_qp_in(&mut s.net, 0, s.peer_pd, &opts);
            let b = make_qp_in(&mut s.net, 1, s.target_pd, &opts);
            bring_up(&mut s.net, a, 1, b.qpn, opts.a_psn, opts.b_psn, &opts);
            bring_up(&mut s.net, b, 0, a.qpn, opts.b_psn, opts.a_psn, &opts);
            let data: Vec<u8> = (0..3000u32).map(|i| (i * 13 + seed as u32) as u8).collect();
            s.net.nodes[0].mem().set(s.local, &data);
            let rsg = [sge(dst, 3000, s.target_mr)];
            s.net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 9, sg_list: &rsg }).unwrap();
            let sg = [sge(s.local, 3000, s.peer_mr)];
            s.net.nodes[0].eng.post_send(s.net.now, a.qpn, &send_wr(1, WrKind::Send, &sg)).unwrap();
            let (mut sent, mut recvd) = (Vec::new(), Vec::new());
            let done = s.net.run_until(500 * MS, |n| {
                sent.extend(n.poll_all(0, a.cq));
                recvd.extend(n.poll_all(1, b.cq));
                !sent.is_empty() && !recvd.is_empty()
            });
            assert!(done, "seed {seed}: completions missing: {sent:?} {recvd:?}");
            if ok {
                assert_eq!((sent[0].status, recvd[0].status), (WcStatus::Success, WcStatus::Success), "seed {seed}");
                assert_eq!(s.net.nodes[1].mem().get(dst, 3000), data, "seed {seed}");
            } else {
                // The NAK (remote operational error) may be lost like any packet.
                assert!(matches!(sent[0].status, WcStatus::RemOpErr | WcStatus::RetryExcErr), "seed {seed}: {sent:?}");
                assert_eq!(recvd[0].status, WcStatus::LocProtErr, "seed {seed}");
            }
            s.net.run_idle(5 * MS);
            s.net.nodes[0].eng.destroy_qp(a.qpn).unwrap();
            s.net.nodes[1].eng.destroy_qp(b.qpn).unwrap();
        }
    }
}

/// The other transports reach memory the same way: a UC WRITE through the implicit rkey lands
/// in mapped memory and, aimed at a hole, is dropped by the target without touching a byte (UC
/// has no NAK: the requester completes); an SRQ receive posted through the implicit lkey takes
/// an RC SEND; a UD datagram gathered and scattered through implicit keys arrives whole. On a
/// clean link: UC and UD do not recover lost packets.
#[test]
fn uc_srq_and_ud_reach_memory_through_the_implicit_keys() {
    use QpAttrMask as A;
    let mut s = setup(7);
    s.net.link = LinkCfg::default();
    let base = s.net.nodes[1].mem().base;
    let data: Vec<u8> = (0..2048u32).map(|i| (i * 29 + 3) as u8).collect();
    s.net.nodes[0].mem().set(s.local, &data);

    // UC: into mapped memory, then into the page unmapped after registration.
    let uc = QpOpts { ty: QpType::Uc, ..QpOpts::default() };
    let a = make_qp_in(&mut s.net, 0, s.peer_pd, &uc);
    let b = make_qp_in(&mut s.net, 1, s.target_pd, &uc);
    bring_up(&mut s.net, a, 1, b.qpn, uc.a_psn, uc.b_psn, &uc);
    bring_up(&mut s.net, b, 0, a.qpn, uc.b_psn, uc.a_psn, &uc);
    let sg = [sge(s.local, 2048, s.peer_mr)];
    let before = s.target_bytes();
    for (wr_id, at) in [(1u64, base + 0x90000), (2, base + GONE.0 + 1024)] {
        let kind = WrKind::RdmaWrite { remote_addr: at, rkey: s.target_mr.rkey };
        s.net.nodes[0].eng.post_send(s.net.now, a.qpn, &send_wr(wr_id, kind, &sg)).unwrap();
        let wc = s.net.first_completion(0, a.cq, 100 * MS).expect("UC WRITE completes");
        assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success));
        s.net.run_idle(5 * MS);
    }
    let mut want = before;
    want[0x90000..0x90000 + 2048].copy_from_slice(&data);
    assert!(s.target_bytes() == want, "UC: only the mapped WRITE changed the target's memory");

    // SRQ: an RC SEND into a receive posted on the SRQ through the implicit lkey.
    let e = &mut s.net.nodes[1].eng;
    let (cq, _) = e.create_cq(16).unwrap();
    let (srq, _) = e.create_srq(s.target_pd, &SrqAttr { max_wr: 4, max_sge: 1, srq_limit: 0 }).unwrap();
    let cap = QpCap { max_send_wr: 4, max_recv_wr: 0, max_send_sge: 1, max_recv_sge: 0, max_inline_data: 0 };
    let init = QpInitAttr {
        pd: s.target_pd,
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: Some(srq),
        cap,
        sq_sig_all: true,
    };
    let (qpn, _) = e.create_qp(&init).unwrap();
    let b = End { node: 1, pd: s.target_pd, cq, qpn };
    let rc = QpOpts::default();
    let a = make_qp_in(&mut s.net, 0, s.peer_pd, &rc);
    bring_up(&mut s.net, a, 1, b.qpn, rc.a_psn, rc.b_psn, &rc);
    bring_up(&mut s.net, b, 0, a.qpn, rc.b_psn, rc.a_psn, &rc);
    let dst = base + 0xA0000;
    s.net.nodes[1].eng.post_srq_recv(srq, &RecvWr { wr_id: 30, sg_list: &[sge(dst, 2048, s.target_mr)] }).unwrap();
    s.net.nodes[0].eng.post_send(s.net.now, a.qpn, &send_wr(3, WrKind::Send, &sg)).unwrap();
    let wc = s.net.first_completion(1, cq, 500 * MS).expect("SRQ receive completes");
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (30, WcStatus::Success, 2048));
    assert_eq!(s.net.nodes[1].mem().get(dst, 2048), data);

    // UD: gathered and scattered through the implicit keys (40 bytes of GRH area first).
    let qkey = 0x1111_1111;
    let ud = QpOpts { ty: QpType::Ud, ..QpOpts::default() };
    let mut ends = Vec::new();
    for (node, pd) in [(0, s.peer_pd), (1, s.target_pd)] {
        let end = make_qp_in(&mut s.net, node, pd, &ud);
        let e = &mut s.net.nodes[node].eng;
        let a = QpAttr { qp_state: QpState::Init, port_num: 1, qkey, ..QpAttr::default() };
        e.modify_qp(end.qpn, &a, A::STATE | A::PKEY_INDEX | A::PORT | A::QKEY).unwrap();
        e.modify_qp(end.qpn, &QpAttr { qp_state: QpState::Rtr, ..QpAttr::default() }, A::STATE).unwrap();
        let rts = QpAttr { qp_state: QpState::Rts, sq_psn: 7, ..QpAttr::default() };
        e.modify_qp(end.qpn, &rts, A::STATE | A::SQ_PSN).unwrap();
        ends.push(end);
    }
    let (a, b) = (ends[0], ends[1]);
    let dgid = gid_of(s.net.nodes[1].addr);
    let route =
        AhAttr { is_global: true, grh: GlobalRoute { dgid, ..Default::default() }, port_num: 1, ..Default::default() };
    let ah = s.net.nodes[0].eng.create_ah(a.pd, &route).unwrap();
    let dst = base + 0xB0000;
    s.net.nodes[1].eng.post_recv(b.qpn, &RecvWr { wr_id: 40, sg_list: &[sge(dst, 40 + 512, s.target_mr)] }).unwrap();
    let sg = [sge(s.local, 512, s.peer_mr)];
    let wr = SendWr {
        wr_id: 4,
        kind: WrKind::Send,
        flags: SendFlags::SIGNALED,
        sg_list: &sg,
        ud: Some(UdDest { ah, remote_qpn: b.qpn, remote_qkey: qkey }),
    };
    s.net.nodes[0].eng.post_send(s.net.now, a.qpn, &wr).unwrap();
    let got = s.net.first_completion(1, b.cq, 100 * MS);
    let wc = got.expect("the UD datagram arrives");
    assert_eq!((wc.wr_id, wc.status, wc.byte_len), (40, WcStatus::Success, 40 + 512));
    assert_eq!(s.net.nodes[1].mem().get(dst + 40, 512), data[..512]);
}
