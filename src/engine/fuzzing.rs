//! Fuzz body for the engine's receive path, shared so that `cargo test` runs exactly what
//! `fuzz/fuzz_targets/responder.rs` runs. Built only with the `fuzzing` feature, which the fuzz
//! crate and this package's tests (through a dev-dependency on itself) enable; the shipped
//! library does not contain it.
//!
//! [`responder`] feeds an arbitrary sequence of packets (raw bytes, or headers built from
//! fuzz bytes with a valid ICRC so they get past the checks) to RC, UC, UD and XRC target QPs
//! in RTS (XRC requests name the target's SRQ, another domain's, an ordinary SRQ or any number),
//! interleaved with timer expiries, receive posts and send posts. It asserts that nothing
//! panics and that the engine never touches host memory outside registered regions: the
//! [`FuzzHost`] panics on any such access.

use std::cell::RefCell;
use std::net::{IpAddr, Ipv4Addr};

use super::*;
use crate::wire::aeth::{AethRepr, Syndrome};
use crate::wire::atomic_ack_eth::AtomicAckEthRepr;
use crate::wire::atomic_eth::AtomicEthRepr;
use crate::wire::bth::BthRepr;
use crate::wire::deth::DethRepr;
use crate::wire::icrc::{IpFields, ICRC_LEN};
use crate::wire::ieth::IethRepr;
use crate::wire::immdt::ImmDtRepr;
use crate::wire::opcode::{op, HeaderSet, Opcode};
use crate::wire::packet::finish;
use crate::wire::reth::RethRepr;
use crate::wire::xrceth::XrcEthRepr;
use crate::wire::{Headers, Msn, Psn};

/// Host memory that only allows accesses inside registered regions, and panics otherwise.
pub struct FuzzHost {
    base: u64,
    mem: RefCell<Vec<u8>>,
    allowed: RefCell<Vec<(u64, u64)>>,
}

impl FuzzHost {
    pub fn new(base: u64, size: usize) -> FuzzHost {
        FuzzHost { base, mem: RefCell::new(vec![0; size]), allowed: RefCell::new(Vec::new()) }
    }
    /// Declares `[addr, addr+len)` registered.
    pub fn allow(&self, addr: u64, len: u64) {
        self.allowed.borrow_mut().push((addr, len));
    }
    fn check(&self, addr: u64, len: usize) -> std::ops::Range<usize> {
        let end = addr.checked_add(len as u64).expect("address overflow reached host memory");
        let ok = self.allowed.borrow().iter().any(|&(a, l)| addr >= a && end <= a + l);
        assert!(ok, "engine accessed {len} bytes at {addr:#x}, outside registered memory");
        (addr - self.base) as usize..(end - self.base) as usize
    }
}

impl HostMemory for FuzzHost {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let r = self.check(addr, buf.len());
        buf.copy_from_slice(&self.mem.borrow()[r]);
        Ok(())
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let r = self.check(addr, data.len());
        self.mem.borrow_mut()[r].copy_from_slice(data);
        Ok(())
    }
    fn atomic_cmp_swap(&self, addr: u64, compare: u64, swap: u64) -> Result<u64, MemError> {
        assert!(addr.is_multiple_of(8), "misaligned atomic at {addr:#x}");
        let r = self.check(addr, 8);
        let mut m = self.mem.borrow_mut();
        let old = u64::from_ne_bytes(m[r.clone()].try_into().unwrap_or([0; 8]));
        if old == compare {
            m[r].copy_from_slice(&swap.to_ne_bytes());
        }
        Ok(old)
    }
    fn atomic_fetch_add(&self, addr: u64, add: u64) -> Result<u64, MemError> {
        assert!(addr.is_multiple_of(8), "misaligned atomic at {addr:#x}");
        let r = self.check(addr, 8);
        let mut m = self.mem.borrow_mut();
        let old = u64::from_ne_bytes(m[r.clone()].try_into().unwrap_or([0; 8]));
        m[r].copy_from_slice(&old.wrapping_add(add).to_ne_bytes());
        Ok(old)
    }
}

const BASE: u64 = 0x7f00_0000_0000;
const PEER_QPN: Qpn = 0x99;
const RQ_PSN: u32 = 0xFF_FFF8;
const QKEY: u32 = 0x1234;

/// Valid request and response opcodes, for structured packets.
const OPS: [u8; 40] = [
    op::RC_SEND_FIRST,
    op::RC_SEND_MIDDLE,
    op::RC_SEND_LAST,
    op::RC_SEND_LAST_WITH_IMMEDIATE,
    op::RC_SEND_ONLY,
    op::RC_SEND_ONLY_WITH_IMMEDIATE,
    op::RC_RDMA_WRITE_FIRST,
    op::RC_RDMA_WRITE_MIDDLE,
    op::RC_RDMA_WRITE_LAST,
    op::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
    op::RC_RDMA_WRITE_ONLY,
    op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    op::RC_RDMA_READ_REQUEST,
    op::RC_RDMA_READ_RESPONSE_FIRST,
    op::RC_RDMA_READ_RESPONSE_MIDDLE,
    op::RC_RDMA_READ_RESPONSE_LAST,
    op::RC_RDMA_READ_RESPONSE_ONLY,
    op::RC_ACKNOWLEDGE,
    op::RC_ATOMIC_ACKNOWLEDGE,
    op::RC_COMPARE_SWAP,
    op::RC_FETCH_ADD,
    op::RC_SEND_LAST_WITH_INVALIDATE,
    op::RC_SEND_ONLY_WITH_INVALIDATE,
    op::UC_SEND_FIRST,
    op::UC_SEND_MIDDLE,
    op::UC_SEND_LAST,
    op::UC_SEND_ONLY,
    op::UC_SEND_ONLY_WITH_IMMEDIATE,
    op::UC_RDMA_WRITE_FIRST,
    op::UC_RDMA_WRITE_MIDDLE,
    op::UC_RDMA_WRITE_LAST,
    op::UC_RDMA_WRITE_ONLY,
    op::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    op::UD_SEND_ONLY,
    op::UD_SEND_ONLY_WITH_IMMEDIATE,
    op::RC_SEND_ONLY,
    op::RC_RDMA_WRITE_ONLY,
    op::RC_RDMA_READ_REQUEST,
    op::RC_ACKNOWLEDGE,
    op::RC_FETCH_ADD,
];

struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn u8(&mut self) -> u8 {
        let (b, rest) = self.0.split_first().map(|(b, r)| (*b, r)).unwrap_or((0, &[]));
        self.0 = rest;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        (self.u32() as u64) << 32 | self.u32() as u64
    }
    fn bytes(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

struct Rig {
    eng: Engine<FuzzHost>,
    qps: [Qpn; 4],
    /// An XRC target QP, and the SRQ numbers its requests may name: an XRC SRQ of its domain,
    /// one of another domain, an ordinary SRQ.
    xrc_tgt: Qpn,
    xrc_srqs: [u32; 3],
    keys: [u32; 4],
    regions: [(u64, u64); 3],
    peer: Ipv4Addr,
    local: Ipv4Addr,
    now: Nanos,
    psn: u32,
}

fn rig() -> Rig {
    let local = Ipv4Addr::new(10, 0, 0, 2);
    let peer = Ipv4Addr::new(10, 0, 0, 1);
    let cfg = EngineConfig { local_addr: local.into(), max_mtu: Mtu::Mtu4096, limits: Limits::default(), seed: 0 };
    let host = FuzzHost::new(BASE, 64 * 1024);
    let mut eng = Engine::new(cfg, host);
    let pd = eng.alloc_pd().expect("pd");
    let (cq, _) = eng.create_cq(64).expect("cq");
    let all = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
        | AccessFlags::MW_BIND;
    let regions = [(BASE, 8192), (BASE + 16384, 4096), (BASE + 32768, 8192)];
    let a = eng.reg_mr(pd, regions[0].0, regions[0].1, regions[0].0, all).expect("mr a");
    let b = eng
        .reg_mr(pd, regions[1].0, regions[1].1, 0, AccessFlags::REMOTE_READ | AccessFlags::ZERO_BASED)
        .expect("mr b");
    let c = eng.reg_mr(pd, regions[2].0, regions[2].1, regions[2].0, AccessFlags::LOCAL_WRITE).expect("mr c");
    for r in regions {
        eng.memory().allow(r.0, r.1);
    }
    let (srq, _) = eng.create_srq(pd, &SrqAttr { max_wr: 16, max_sge: 2, srq_limit: 2 }).expect("srq");
    let mut qps = [0; 4];
    let kinds = [(QpType::Rc, None), (QpType::Uc, None), (QpType::Ud, None), (QpType::Rc, Some(srq))];
    let dgid = peer.to_ipv6_mapped().octets();
    for (i, (ty, srq)) in kinds.into_iter().enumerate() {
        let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 64 };
        let init = QpInitAttr { pd, qp_type: ty, send_cq: cq, recv_cq: cq, srq, cap, sq_sig_all: i % 2 == 0 };
        let (qpn, _) = eng.create_qp(&init).expect("qp");
        qps[i] = qpn;
        use QpAttrMask as A;
        let mut at = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: QKEY,
            qp_access_flags: all,
            path_mtu: Some(Mtu::Mtu256),
            dest_qp_num: PEER_QPN,
            rq_psn: RQ_PSN,
            sq_psn: 0x10,
            max_dest_rd_atomic: 2,
            max_rd_atomic: 2,
            min_rnr_timer: 1,
            timeout: 1,
            retry_cnt: 2,
            rnr_retry: 1,
            ah_attr: AhAttr {
                is_global: true,
                grh: GlobalRoute { dgid, ..GlobalRoute::default() },
                port_num: 1,
                ..AhAttr::default()
            },
            ..QpAttr::default()
        };
        let (m_init, m_rtr, m_rts) = match ty {
            QpType::Ud => (A::PKEY_INDEX | A::PORT | A::QKEY, A::EMPTY, A::SQ_PSN),
            QpType::Uc => {
                (A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS, A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN, A::SQ_PSN)
            }
            QpType::Rc | QpType::XrcSend | QpType::XrcRecv => (
                A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS,
                A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN | A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER,
                A::SQ_PSN | A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::MAX_QP_RD_ATOMIC,
            ),
        };
        eng.modify_qp(qpn, &at, A::STATE | m_init).expect("init");
        at.qp_state = QpState::Rtr;
        eng.modify_qp(qpn, &at, A::STATE | m_rtr).expect("rtr");
        at.qp_state = QpState::Rts;
        eng.modify_qp(qpn, &at, A::STATE | m_rts).expect("rts");
    }
    let (xrc_tgt, xrc_srqs) = xrc_target(&mut eng, pd, cq, srq, regions[0], a.lkey);
    let (mw, k0) = eng.alloc_mw(pd, MwType::Type2).expect("mw");
    let k1 = (k0 & !0xFF) | (k0.wrapping_add(1) & 0xFF);
    let bind = MwBind { mw, rkey: k1, mr: a.id, addr: BASE + 1024, length: 512, access: AccessFlags::REMOTE_WRITE };
    let wr = SendWr { wr_id: 0, kind: WrKind::BindMw(bind), flags: SendFlags::EMPTY, sg_list: &[], ud: None };
    eng.post_send(0, qps[0], &wr).expect("bind");
    let keys = [a.rkey, b.rkey, c.rkey, k1];
    let mut r = Rig { eng, qps, xrc_tgt, xrc_srqs, keys, regions, peer, local, now: 1_000_000, psn: RQ_PSN };
    for i in 0..4 {
        r.post_recv(i as u8, 0);
    }
    r.drain();
    r
}

/// An XRC target QP in RTS towards the peer, an XRC SRQ of its domain with receives posted in
/// `region`, and an XRC SRQ of another domain; returns the QPN and the SRQ numbers (with the
/// ordinary SRQ `srq`'s handle third).
fn xrc_target(
    eng: &mut Engine<FuzzHost>,
    pd: PdId,
    cq: CqId,
    srq: SrqId,
    region: (u64, u64),
    lkey: u32,
) -> (Qpn, [u32; 3]) {
    let attr = SrqAttr { max_wr: 16, max_sge: 1, srq_limit: 0 };
    let mine = eng.alloc_xrcd().expect("xrcd");
    let other = eng.alloc_xrcd().expect("xrcd 2");
    let (s1, _) = eng.create_xrc_srq(pd, mine, cq, &attr).expect("xrc srq");
    let (s2, _) = eng.create_xrc_srq(pd, other, cq, &attr).expect("xrc srq 2");
    for i in 0..8u64 {
        let sg = [Sge { addr: region.0 + i * 512, length: 512, lkey }];
        eng.post_srq_recv(s1, &RecvWr { wr_id: 100 + i, sg_list: &sg }).expect("xrc recv");
    }
    let qpn = eng.create_xrc_recv_qp(mine).expect("xrc tgt");
    use QpAttrMask as A;
    let mut at = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC,
        path_mtu: Some(Mtu::Mtu256),
        dest_qp_num: PEER_QPN,
        rq_psn: RQ_PSN,
        sq_psn: 0x10,
        max_dest_rd_atomic: 2,
        min_rnr_timer: 1,
        timeout: 1,
        ah_attr: AhAttr {
            is_global: true,
            grh: GlobalRoute { dgid: Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped().octets(), ..GlobalRoute::default() },
            port_num: 1,
            ..AhAttr::default()
        },
        ..QpAttr::default()
    };
    eng.modify_qp(qpn, &at, A::STATE | A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS).expect("xrc init");
    at.qp_state = QpState::Rtr;
    let rtr = A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN | A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER;
    eng.modify_qp(qpn, &at, A::STATE | rtr).expect("xrc rtr");
    at.qp_state = QpState::Rts;
    eng.modify_qp(qpn, &at, A::STATE | A::SQ_PSN | A::TIMEOUT).expect("xrc rts");
    (qpn, [eng.srq_num(s1).expect("srqn"), eng.srq_num(s2).expect("srqn 2"), srq])
}

impl Rig {
    fn post_recv(&mut self, sel: u8, off: u16) {
        let qpn = self.qps[sel as usize % 4];
        let (addr, len) = self.regions[sel as usize % 3];
        let sg = [Sge { addr: addr + (off as u64 % len), length: 512, lkey: self.keys[sel as usize % 3] }];
        let wr = RecvWr { wr_id: sel as u64, sg_list: &sg };
        if sel as usize % 4 == 3 {
            let _ = self.eng.post_srq_recv(1, &wr);
        } else {
            let _ = self.eng.post_recv(qpn, &wr);
        }
    }

    fn post_send(&mut self, inp: &mut Input<'_>) {
        let sel = inp.u8();
        let qpn = self.qps[sel as usize % 4];
        let (addr, len) = self.regions[(sel >> 2) as usize % 3];
        let key = self.keys[(sel >> 4) as usize % 4];
        let va = addr.wrapping_add(inp.u16() as u64 % (len + 64));
        let sg = [Sge { addr: va, length: inp.u16() as u32 % 2048, lkey: key }];
        let kind = match inp.u8() % 7 {
            0 => WrKind::Send,
            1 => WrKind::RdmaWrite { remote_addr: inp.u64(), rkey: inp.u32() },
            2 => WrKind::RdmaRead { remote_addr: inp.u64(), rkey: inp.u32() },
            3 => WrKind::AtomicFetchAdd { remote_addr: inp.u64() & !7, rkey: inp.u32(), add: 1 },
            4 => WrKind::SendWithImm { imm_data: inp.u32() },
            5 => WrKind::LocalInv { invalidate_rkey: key },
            _ => WrKind::AtomicCmpSwp { remote_addr: inp.u64() & !7, rkey: inp.u32(), compare: 0, swap: 1 },
        };
        let ud = Some(UdDest { ah: 1, remote_qpn: PEER_QPN, remote_qkey: inp.u32() });
        // No INLINE: inline data is read from wherever the caller points, by design, which is
        // not registered memory.
        let flags = SendFlags(inp.u8() as u32 & 0x7);
        let wr = SendWr { wr_id: 7, kind, flags, sg_list: &sg, ud };
        let _ = self.eng.post_send(self.now, qpn, &wr);
    }

    fn deliver(&mut self, payload: &[u8], sport: u16) {
        let d = Datagram {
            src: IpAddr::V4(self.peer),
            src_port: sport,
            dst: IpAddr::V4(self.local),
            icrc: IcrcCheck::Full(IpFields::v4_df(self.peer, self.local)),
            payload,
            ce: false,
        };
        self.eng.handle_datagram(self.now, &d);
        self.drain();
    }

    fn drain(&mut self) {
        let mut buf = [0u8; MAX_PACKET];
        for _ in 0..10_000 {
            let Some(t) = self.eng.poll_transmit(self.now, &mut buf) else { break };
            assert!(t.len <= MAX_PACKET);
            assert!(crate::wire::parse(&buf[..t.len]).is_ok(), "the engine emits only valid packets");
        }
        let mut wc = [WorkCompletion::default(); 16];
        while self.eng.poll_cq(1, &mut wc).unwrap_or(0) > 0 {}
        while self.eng.poll_event().is_some() {}
    }

    /// Builds a packet from fuzz bytes: a valid opcode and headers whose fields are drawn from
    /// the input, aimed at our QPs, keys and regions often enough to get deep.
    fn structured(&mut self, inp: &mut Input<'_>, buf: &mut [u8]) -> usize {
        let opcode = OPS[inp.u8() as usize % OPS.len()];
        let info = Opcode(opcode).info();
        let qsel = inp.u8();
        let dest_qp = match opcode >> 5 {
            1 => self.qps[1],
            3 => self.qps[2],
            _ if qsel & 1 == 1 => self.qps[3],
            _ => self.qps[0],
        };
        let dpsn = inp.u8() as i8;
        let psn = Psn::new(self.psn.wrapping_add(dpsn as i32 as u32));
        let flags = inp.u8();
        // Flag 0x20 turns an RC request into its XRC twin, for the XRC target.
        let xrc = flags & 0x20 != 0 && opcode >> 5 == 0 && info.request;
        let (opcode, info, dest_qp) =
            if xrc { (opcode | 0xA0, Opcode(opcode | 0xA0).info(), self.xrc_tgt) } else { (opcode, info, dest_qp) };
        let mut h = Headers {
            bth: BthRepr {
                opcode,
                solicited: flags & 1 != 0,
                mig_req: flags & 2 != 0,
                dest_qp,
                ack_req: flags & 4 != 0,
                psn,
                ..BthRepr::default()
            },
            ..Headers::default()
        };
        let rsel = inp.u8();
        let (base, len) = self.regions[rsel as usize % 3];
        let key = if rsel & 0x80 != 0 { inp.u32() } else { self.keys[(rsel >> 2) as usize % 4] };
        let va =
            base.wrapping_add(inp.u16() as u64).wrapping_sub(256).wrapping_add(if rsel & 0x40 != 0 { len } else { 0 });
        let hs = info.headers;
        if hs.contains(HeaderSet::RETH) {
            h.reth = Some(RethRepr { va, rkey: key, dma_len: inp.u16() as u32 });
        }
        if hs.contains(HeaderSet::ATOMIC_ETH) {
            h.atomic_eth = Some(AtomicEthRepr {
                va: va & !(inp.u8() as u64 & 7 ^ 7),
                rkey: key,
                swap_add: inp.u64(),
                compare: inp.u64(),
            });
        }
        if hs.contains(HeaderSet::AETH) {
            h.aeth = Some(AethRepr { syndrome: Syndrome::decode(inp.u8()), msn: Msn::new(inp.u32()) });
        }
        if hs.contains(HeaderSet::ATOMIC_ACK_ETH) {
            h.atomic_ack_eth = Some(AtomicAckEthRepr { orig: inp.u64() });
        }
        if hs.contains(HeaderSet::DETH) {
            h.deth =
                Some(DethRepr { qkey: if flags & 8 != 0 { inp.u32() } else { QKEY }, src_qp: inp.u32() & 0xFF_FFFF });
        }
        if hs.contains(HeaderSet::IMMDT) {
            h.immdt = Some(ImmDtRepr { value: inp.u32() });
        }
        if hs.contains(HeaderSet::IETH) {
            h.ieth = Some(IethRepr { rkey: key });
        }
        if hs.contains(HeaderSet::XRCETH) {
            let srqn = match qsel >> 1 & 3 {
                0 | 1 => self.xrc_srqs[0],
                2 => self.xrc_srqs[(qsel >> 3) as usize % 3],
                _ => inp.u32() & 0xFF_FFFF,
            };
            h.xrceth = Some(XrcEthRepr { srqn });
        }
        if hs.contains(HeaderSet::FETH) {
            // Any placement type and level, defined or not (the responder must refuse the rest).
            let f = inp.u8();
            h.feth = Some(crate::wire::feth::FethRepr { placement: f & 0xF, level: (f >> 4) & 3 });
        }
        let Ok(hl) = h.emit(buf) else { return 0 };
        let plen = if info.payload {
            match inp.u8() % 4 {
                0 => 256,
                1 => 0,
                _ => inp.u16() as usize % 300,
            }
        } else {
            0
        };
        let plen = plen.min(buf.len() - hl - 8);
        let fill = inp.u8();
        buf[hl..hl + plen].fill(fill);
        if dpsn == 0 && flags & 0x10 == 0 {
            self.psn = self.psn.wrapping_add(1) & 0xFF_FFFF;
        }
        finish(buf, hl, plen, &IpFields::v4_df(self.peer, self.local), 0xC000, 4791).unwrap_or(0)
    }
}

/// The fuzz body: see the module docs. Panics only on a real bug.
pub fn responder(data: &[u8]) {
    let mut r = rig();
    let mut inp = Input(data);
    let mut buf = vec![0u8; MAX_PACKET + 64];
    let mut steps = 0;
    while !inp.is_empty() && steps < 512 {
        steps += 1;
        match inp.u8() % 10 {
            0..=4 => {
                let n = r.structured(&mut inp, &mut buf);
                if n > 0 {
                    let pkt = buf[..n].to_vec();
                    r.deliver(&pkt, 0xC000);
                }
            }
            5 => {
                // Raw bytes, with the ICRC fixed up half the time so they reach the QPs.
                let n = inp.u16() as usize % 600;
                let mut pkt = inp.bytes(n).to_vec();
                if inp.u8() & 1 == 1 && pkt.len() >= ICRC_LEN {
                    let body = pkt.len() - ICRC_LEN;
                    let c = crate::wire::icrc::icrc(&IpFields::v4_df(r.peer, r.local), 0xC001, 4791, &pkt[..body]);
                    crate::wire::icrc::store_icrc(&mut pkt, c);
                }
                r.deliver(&pkt, 0xC001);
            }
            6 => {
                r.now += 1 << (inp.u8() % 32);
                let now = r.now;
                if r.eng.poll_timeout().is_some_and(|t| t <= now) {
                    r.eng.handle_timeout(now);
                }
                r.drain();
            }
            7 => {
                let (s, o) = (inp.u8(), inp.u16());
                r.post_recv(s, o);
            }
            8 => {
                r.post_send(&mut inp);
                r.drain();
            }
            _ => {
                // Modify a QP to ERR or RESET and back up: the state machine under traffic.
                let q = r.qps[inp.u8() as usize % 4];
                let st = if inp.u8() & 1 == 0 { QpState::Err } else { QpState::Sqd };
                let _ = r.eng.modify_qp(q, &QpAttr { qp_state: st, ..QpAttr::default() }, QpAttrMask::STATE);
                r.drain();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stand-in for the fuzzer: many pseudo-random inputs, plus inputs made
    /// of the recorded rxe packets.
    #[test]
    fn responder_survives_pseudo_random_inputs() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for len in 0..400usize {
            let mut data = vec![0u8; len * 7 % 2000];
            for b in data.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            responder(&data);
        }
    }

    #[test]
    #[should_panic(expected = "outside registered memory")]
    fn fuzz_host_catches_accesses_outside_registered_memory() {
        let h = FuzzHost::new(BASE, 4096);
        h.allow(BASE, 64);
        let _ = h.write(BASE + 60, &[0; 8]);
    }

    #[test]
    fn structured_packets_reach_the_responder() {
        // Opcode RC SEND ONLY (index 4) at the expected PSN with a payload: a receive completes.
        let mut r = rig();
        let before = r.eng.counters().rcvd_pkts;
        let mut buf = vec![0u8; MAX_PACKET];
        let input = [4u8, 0, 0, 4, 0, 0, 0, 1, 5];
        let n = r.structured(&mut Input(&input), &mut buf);
        let pkt = buf[..n].to_vec();
        r.deliver(&pkt, 0xC000);
        let c = r.eng.counters();
        assert_eq!(c.rcvd_pkts, before + 1);
        assert_eq!((c.icrc_errors, c.opcode_errors, c.length_errors, c.psn_seq_errs), (0, 0, 0, 0));
    }

    #[test]
    fn structured_xrc_requests_reach_the_target_and_its_srq_checks() {
        // RC SEND ONLY turned XRC (flag 0x20) naming the target's own XRC SRQ: a receive of that
        // SRQ (wr_id 100) completes. Then one naming another domain's SRQ: NAKed and counted.
        let mut r = rig();
        let mut buf = vec![0u8; MAX_PACKET];
        let n = r.structured(&mut Input(&[4u8, 0, 0, 0x24, 0, 0, 0, 1, 5]), &mut buf);
        assert_eq!(buf[0], 0xA4);
        let d = Datagram {
            src: IpAddr::V4(r.peer),
            src_port: 0xC000,
            dst: IpAddr::V4(r.local),
            icrc: IcrcCheck::Full(IpFields::v4_df(r.peer, r.local)),
            payload: &buf[..n],
            ce: false,
        };
        // Not `deliver`: it drains the CQ this SRQ completes on.
        r.eng.handle_datagram(r.now, &d);
        let mut wc = [WorkCompletion::default(); 64];
        let got = r.eng.poll_cq(1, &mut wc).unwrap();
        assert!(wc[..got].iter().any(|w| w.wr_id == 100 && w.status == WcStatus::Success && w.qp_num == r.xrc_tgt));
        let (naks, errs) = (r.eng.counters().naks_sent, r.eng.counters().xrc_srq_errors);
        assert_eq!(errs, 0);
        let n = r.structured(&mut Input(&[4u8, 4 | 8, 0, 0x24, 0, 0, 0, 1, 5]), &mut buf);
        let pkt = buf[..n].to_vec();
        r.deliver(&pkt, 0xC000);
        let c = r.eng.counters();
        assert_eq!((c.xrc_srq_errors, c.naks_sent), (1, naks + 1));
    }
}
