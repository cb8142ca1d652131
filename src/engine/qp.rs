//! Queue pairs (rxe_qp.c): the per-QP state, the send queue, and the IBTA state machine with
//! the required/optional attribute masks of every legal transition (IBTA Vol 1 §11.2.5.2,
//! table 91 "QP State Transition Properties"; the same table as `ib_modify_qp_is_ok`).

use std::collections::VecDeque;
use std::net::IpAddr;

use super::srq::{RecvRing, TakenWqe};
use super::types::*;
use crate::wire::aeth::Syndrome;
use crate::wire::psn::{Msn, Psn};

/// Where a send WQE is in its life.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum WqeState {
    /// Not yet (fully) transmitted.
    Posted,
    /// Every packet sent; waiting for ACK / response (RC).
    Sent,
    /// Finished (successfully or with `status`); completes when it reaches the head.
    Done,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct SendWqe {
    pub wr_id: u64,
    pub kind: WrKind,
    pub flags: SendFlags,
    pub signaled: bool,
    pub ud: Option<UdDest>,
    /// Slot in the SGE / inline arrays.
    pub slot: u32,
    pub num_sge: u32,
    /// Payload lives in the inline array, copied at post time.
    pub inline: bool,
    /// Message length in bytes.
    pub len: u32,
    /// PSN of the first packet, assigned at first transmission.
    pub first_psn: Psn,
    /// PSNs the message occupies (READ: one per response packet).
    pub npkts: u32,
    pub state: WqeState,
    pub status: WcStatus,
    /// Counted in `rd_atomic_out` (READ / atomic in flight).
    pub rd_counted: bool,
    /// XRC initiator: the peer's XRC SRQ number its requests carry (XRCETH).
    pub xrc_srqn: u32,
}

impl SendWqe {
    pub fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts.saturating_sub(1))
    }
    pub fn is_rd_atomic(&self) -> bool {
        // ATOMIC WRITE and FLUSH take a responder resource and are answered by a READ
        // response, like READ and the atomics (IBTA 1.5 §9.4.6/§9.4.7; rxe does the same).
        matches!(
            self.kind,
            WrKind::RdmaRead { .. }
                | WrKind::AtomicCmpSwp { .. }
                | WrKind::AtomicFetchAdd { .. }
                | WrKind::AtomicWrite { .. }
                | WrKind::Flush { .. }
        )
    }
    pub fn is_local(&self) -> bool {
        matches!(self.kind, WrKind::LocalInv { .. } | WrKind::BindMw(_))
    }
}

pub(crate) struct SendQueue {
    pub max_sge: u32,
    pub max_inline: u32,
    pub wqes: VecDeque<SendWqe>,
    pub sges: Vec<Sge>,
    pub inline: Vec<u8>,
    free_slots: Vec<u32>,
}

impl SendQueue {
    pub fn new(cap: u32, max_sge: u32, max_inline: u32) -> SendQueue {
        SendQueue {
            max_sge,
            max_inline,
            wqes: VecDeque::with_capacity(cap as usize),
            sges: vec![Sge::default(); cap as usize * max_sge as usize],
            inline: vec![0; cap as usize * max_inline as usize],
            free_slots: (0..cap).rev().collect(),
        }
    }
    pub fn take_slot(&mut self) -> Option<u32> {
        self.free_slots.pop()
    }
    pub fn release_slot(&mut self, slot: u32) {
        self.free_slots.push(slot);
    }
    pub fn sges_of(&self, w: &SendWqe) -> &[Sge] {
        let base = w.slot as usize * self.max_sge as usize;
        &self.sges[base..base + w.num_sge as usize]
    }
    pub fn inline_of(&self, w: &SendWqe) -> &[u8] {
        let base = w.slot as usize * self.max_inline as usize;
        &self.inline[base..base + w.len as usize]
    }
}

/// Requester + completer state (rxe `qp->req` and `qp->comp`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReqState {
    /// Index in `sq.wqes` of the WQE being transmitted.
    pub next: usize,
    /// Next PSN to send.
    pub psn: Psn,
    /// One past the highest PSN ever sent (to count retransmissions).
    pub high_psn: Psn,
    /// Oldest PSN not yet acknowledged.
    pub unacked: Psn,
    /// READ/atomic WQEs in flight.
    pub rd_atomic_out: u32,
    pub retry_left: u8,
    pub rnr_left: u8,
    /// Paused by an RNR NAK until then.
    pub rnr_until: Option<Nanos>,
    /// Local ACK timer.
    pub retx_at: Option<Nanos>,
    /// Go-back-N already started from this PSN (one rewind per loss, however many NAKs or
    /// out-of-order responses report it).
    pub rewound_at: Option<Psn>,
    /// Packets since the last AckReq in the current message.
    pub noack_pkts: u32,
    /// SQD: async notification pending until drained.
    pub sqd_notify: bool,
    /// Send window and retransmission timer (see `window`).
    pub win: super::window::SendWindow,
}

/// A READ or atomic the responder remembers for duplicates (responder resources).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) enum RdRes {
    #[default]
    Empty,
    Read {
        first: Psn,
        last: Psn,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
    /// An ATOMIC WRITE or FLUSH already executed: a duplicate is answered again, never
    /// executed twice.
    Executed {
        psn: Psn,
    },
}

/// One thing the responder has to send, in PSN order.
#[derive(Clone, Copy, Debug)]
pub(crate) enum RespOut {
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: Msn,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
        msn: Msn,
    },
    Read(ReadJob),
    /// The RDMA READ RESPONSE ONLY without payload that acknowledges an ATOMIC WRITE or a
    /// FLUSH.
    EmptyRead {
        psn: Psn,
        msn: Msn,
    },
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadJob {
    /// PSN of the next response packet.
    pub psn: Psn,
    /// First PSN of the whole response (decides FIRST/ONLY).
    pub first_psn: Psn,
    pub va: u64,
    pub rkey: u32,
    /// Bytes still to send.
    pub left: u32,
    /// Length of the whole response.
    pub len: u32,
    pub msn: Msn,
}

impl ReadJob {
    /// The whole response to a READ request whose first response PSN is `psn`.
    pub fn new(psn: Psn, va: u64, rkey: u32, len: u32, msn: Msn) -> ReadJob {
        ReadJob { psn, first_psn: psn, va, rkey, left: len, len, msn }
    }
}

/// The message a responder is in the middle of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum InMsg {
    #[default]
    None,
    Send {
        received: u64,
    },
    Write {
        va: u64,
        rkey: u32,
        dma_len: u32,
        received: u32,
    },
}

pub(crate) struct RespState {
    /// Expected PSN.
    pub epsn: Psn,
    pub msn: Msn,
    /// A PSN-sequence NAK has been sent for the current gap.
    pub nak_sent_for_gap: bool,
    pub msg: InMsg,
    /// The receive WQE the current SEND (or WRITE with immediate) lands in.
    pub wqe: TakenWqe,
    pub have_wqe: bool,
    /// UC: a gap discarded the message in progress; drop until the next FIRST/ONLY.
    pub uc_discard: bool,
    pub res: Vec<RdRes>,
    pub res_next: usize,
    pub out: VecDeque<RespOut>,
    pub out_cap: usize,
    pub comm_est_sent: bool,
    /// A plain ACK let one ready request packet of this QP go first (see `xmit::poll_qp`).
    pub ack_yielded: bool,
}

pub(crate) struct Qp {
    pub qpn: Qpn,
    pub ty: QpType,
    pub pd: PdId,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    pub srq: Option<SrqId>,
    pub sq_sig_all: bool,
    pub cap: QpCap,
    pub state: QpState,
    /// Everything set through modify_qp, for query_qp.
    pub attr: QpAttr,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Peer address (RC/UC, from the AV at RTR).
    pub dest: Option<IpAddr>,
    /// UDP source port (flow entropy, as rxe computes it).
    pub sport: u16,
    /// IPv6 flow label of the QP's packets: the one `sport` is folded from (connected QPs), 0
    /// for UD.
    pub flow_label: u32,
    pub sq: SendQueue,
    pub rq: Option<RecvRing>,
    pub req: ReqState,
    pub resp: RespState,
    pub in_txq: bool,
    /// The deadline this QP has in the engine's timer heap, if any.
    pub heap_at: Option<Nanos>,
    pub last_wqe_reached: bool,
    /// XRC target: its domain, and how many `open_xrc_qp` handles besides the creator's are
    /// open (the QP is destroyed when the last one closes).
    pub xrcd: Option<XrcdId>,
    pub xrc_opens: u32,
    /// DCQCN: the QP's notification and reaction points and its pacing deadline.
    pub cc: super::cc::QpCc,
}

impl Qp {
    pub fn new(qpn: Qpn, init: &QpInitAttr, cap: QpCap, max_sge: u32) -> Qp {
        Qp {
            qpn,
            ty: init.qp_type,
            pd: init.pd,
            send_cq: init.send_cq,
            recv_cq: init.recv_cq,
            srq: init.srq,
            sq_sig_all: init.sq_sig_all,
            cap,
            state: QpState::Reset,
            attr: QpAttr::default(),
            mtu: 256,
            dest: None,
            sport: 0xC000,
            flow_label: 0,
            sq: SendQueue::new(cap.max_send_wr, cap.max_send_sge.max(1), cap.max_inline_data),
            rq: (init.srq.is_none() && !init.qp_type.is_xrc())
                .then(|| RecvRing::new(cap.max_recv_wr, cap.max_recv_sge.max(1))),
            req: ReqState::default(),
            resp: RespState {
                epsn: Psn::new(0),
                msn: Msn::new(0),
                nak_sent_for_gap: false,
                msg: InMsg::None,
                wqe: TakenWqe::with_capacity(max_sge as usize),
                have_wqe: false,
                uc_discard: false,
                res: Vec::new(),
                res_next: 0,
                out: VecDeque::new(),
                out_cap: 0,
                comm_est_sent: false,
                ack_yielded: false,
            },
            in_txq: false,
            heap_at: None,
            last_wqe_reached: false,
            xrcd: None,
            xrc_opens: 0,
            cc: Default::default(),
        }
    }

    /// The earliest deadline of this QP's timers.
    pub fn timer_due(&self) -> Option<Nanos> {
        let due = match (self.req.retx_at, self.req.rnr_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match (due, self.cc.pace_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Allocates responder resources (at RTR and when max_dest_rd_atomic changes).
    pub fn size_responder(&mut self) {
        let n = (self.attr.max_dest_rd_atomic as usize).max(1);
        self.resp.res = vec![RdRes::Empty; n];
        self.resp.res_next = 0;
        // Each resource may have one response queued, plus ACKs between them.
        self.resp.out_cap = 2 * n + 4;
        self.resp.out = VecDeque::with_capacity(self.resp.out_cap);
    }

    /// Clears transport state (modify to RESET).
    pub fn reset(&mut self) {
        self.req = ReqState::default();
        self.resp.epsn = Psn::new(0);
        self.resp.msn = Msn::new(0);
        self.resp.nak_sent_for_gap = false;
        self.resp.msg = InMsg::None;
        self.resp.have_wqe = false;
        self.resp.uc_discard = false;
        self.resp.out.clear();
        self.resp.res.iter_mut().for_each(|r| *r = RdRes::Empty);
        self.resp.comm_est_sent = false;
        self.resp.ack_yielded = false;
        self.last_wqe_reached = false;
        while let Some(w) = self.sq.wqes.pop_front() {
            self.sq.release_slot(w.slot);
        }
        if let Some(rq) = &mut self.rq {
            rq.drain(|_| {});
        }
    }
}

/// The top three opcode bits of a QP type's packets (IBTA Table 38): RC 000, UC 001, UD 011,
/// XRC 101.
pub(crate) fn opcode_base(ty: QpType) -> u8 {
    match ty {
        QpType::Rc => 0x00,
        QpType::Uc => 0x20,
        QpType::Ud => 0x60,
        QpType::XrcSend | QpType::XrcRecv => 0xA0,
    }
}

/// The flow label of a connected QP: its AV's if not 0, else one derived from both QPNs
/// (`rdma_calc_flow_label`), the same at both ends. As the kernel's `rdma_get_udp_sport`.
pub(crate) fn rc_flow_label(av_label: u32, lqpn: Qpn, rqpn: Qpn) -> u32 {
    if av_label & 0xF_FFFF != 0 {
        return av_label & 0xF_FFFF;
    }
    let mut v = lqpn as u64 * rqpn as u64;
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// UDP source port of a flow label, as rxe folds it: 14 bits in 0xC000.. .
pub(crate) fn flow_label_source_port(fl: u32) -> u16 {
    (((fl & 0x3FFF) ^ ((fl & 0xF_FFFF) >> 14)) | 0xC000) as u16
}

/// UDP source port rxe uses for an RC/UC flow whose AV has no flow label: a 14-bit fold of
/// `lqpn * rqpn` in 0xC000.. .
#[cfg(test)]
pub(crate) fn rc_source_port(lqpn: Qpn, rqpn: Qpn) -> u16 {
    flow_label_source_port(rc_flow_label(0, lqpn, rqpn))
}

/// UDP source port for a UD QP: `0xC000 + hash_32(qpn, 14)` (Linux `hash_32`).
pub(crate) fn ud_source_port(qpn: Qpn) -> u16 {
    0xC000 + (qpn.wrapping_mul(0x61C8_8647) >> (32 - 14)) as u16
}

/// Required and optional attribute masks (besides STATE) of the transition `from -> to` for a
/// QP of type `ty`; `None` if the transition is illegal.
pub(crate) fn transition_masks(from: QpState, to: QpState, ty: QpType) -> Option<(QpAttrMask, QpAttrMask)> {
    use QpAttrMask as A;
    use QpState::*;
    let none = A::EMPTY;
    let (ud, uc, rc) = (ty == QpType::Ud, ty == QpType::Uc, ty.is_reliable());
    let pick = |ud_m: QpAttrMask, uc_m: QpAttrMask, rc_m: QpAttrMask| {
        if ud {
            ud_m
        } else if uc {
            uc_m
        } else {
            rc_m
        }
    };
    let (req, opt) = match (from, to) {
        (_, Reset) | (_, Err) => (none, none),
        (Reset, Init) => (
            pick(
                A::PKEY_INDEX | A::PORT | A::QKEY,
                A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS,
                A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS,
            ),
            none,
        ),
        (Init, Init) => (
            none,
            pick(
                A::PKEY_INDEX | A::PORT | A::QKEY,
                A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS,
                A::PKEY_INDEX | A::PORT | A::ACCESS_FLAGS,
            ),
        ),
        (Init, Rtr) => (
            pick(
                none,
                A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN,
                A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN | A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER,
            ),
            pick(
                A::PKEY_INDEX | A::QKEY,
                A::ALT_PATH | A::ACCESS_FLAGS | A::PKEY_INDEX,
                A::ALT_PATH | A::ACCESS_FLAGS | A::PKEY_INDEX,
            ),
        ),
        (Rtr, Rts) => (
            pick(A::SQ_PSN, A::SQ_PSN, A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::SQ_PSN | A::MAX_QP_RD_ATOMIC),
            pick(
                A::CUR_STATE | A::QKEY,
                A::CUR_STATE | A::ALT_PATH | A::ACCESS_FLAGS | A::PATH_MIG_STATE,
                A::CUR_STATE | A::ALT_PATH | A::ACCESS_FLAGS | A::MIN_RNR_TIMER | A::PATH_MIG_STATE,
            ),
        ),
        (Rts, Rts) | (Sqd, Rts) => (
            none,
            pick(
                A::CUR_STATE | A::QKEY,
                A::CUR_STATE | A::ACCESS_FLAGS | A::ALT_PATH | A::PATH_MIG_STATE,
                A::CUR_STATE | A::ACCESS_FLAGS | A::ALT_PATH | A::PATH_MIG_STATE | A::MIN_RNR_TIMER,
            ),
        ),
        (Rts, Sqd) => (none, A::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            none,
            pick(
                A::PKEY_INDEX | A::QKEY,
                A::AV | A::ALT_PATH | A::ACCESS_FLAGS | A::PKEY_INDEX | A::PATH_MIG_STATE,
                A::PORT
                    | A::AV
                    | A::TIMEOUT
                    | A::RETRY_CNT
                    | A::RNR_RETRY
                    | A::MAX_QP_RD_ATOMIC
                    | A::MAX_DEST_RD_ATOMIC
                    | A::ALT_PATH
                    | A::ACCESS_FLAGS
                    | A::PKEY_INDEX
                    | A::MIN_RNR_TIMER
                    | A::PATH_MIG_STATE,
            ),
        ),
        (Sqe, Rts) if !rc => (none, pick(A::CUR_STATE | A::QKEY, A::CUR_STATE | A::ACCESS_FLAGS, none)),
        _ => return None,
    };
    // XRC halves use the RC rows without what their missing half needs (as the kernel's
    // table): an initiator has no responder (INIT->RTR needs no MAX_DEST_RD_ATOMIC /
    // MIN_RNR_TIMER), a target no requester (RTR->RTS needs no RETRY_CNT / RNR_RETRY /
    // MAX_QP_RD_ATOMIC). Those attributes stay allowed.
    let relaxed = match (ty, from, to) {
        (QpType::XrcSend, Init, Rtr) => A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER,
        (QpType::XrcRecv, Rtr, Rts) => A::RETRY_CNT | A::RNR_RETRY | A::MAX_QP_RD_ATOMIC,
        _ => none,
    };
    Some((QpAttrMask(req.bits() & !relaxed.bits()), opt | relaxed))
}

/// The checks `modify_qp` makes before changing anything: the transition exists, every
/// required attribute is present, nothing outside required ∪ optional is, and the values are
/// in range.
pub(crate) fn check_modify(
    cur: QpState,
    ty: QpType,
    attr: &QpAttr,
    mask: QpAttrMask,
    limits: &Limits,
    max_mtu: Mtu,
) -> Result<QpState, Error> {
    if mask.unknown_bits() != 0 {
        return Err(Error::Invalid);
    }
    if mask.contains(QpAttrMask::CUR_STATE) && attr.cur_qp_state != cur {
        return Err(Error::Invalid);
    }
    let to = if mask.contains(QpAttrMask::STATE) { attr.qp_state } else { cur };
    let (req, opt) = transition_masks(cur, to, ty).ok_or(Error::Invalid)?;
    let given = QpAttrMask(mask.bits() & !QpAttrMask::STATE.bits());
    if !given.contains(req) || given.bits() & !(req | opt).bits() != 0 {
        return Err(Error::Invalid);
    }
    let m = |f: QpAttrMask| mask.contains(f);
    if m(QpAttrMask::PATH_MTU) && attr.path_mtu.is_none_or(|p| p > max_mtu) {
        return Err(Error::Invalid);
    }
    if m(QpAttrMask::TIMEOUT) && attr.timeout > 31
        || m(QpAttrMask::RETRY_CNT) && attr.retry_cnt > 7
        || m(QpAttrMask::RNR_RETRY) && attr.rnr_retry > 7
        || m(QpAttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31
        || m(QpAttrMask::MAX_QP_RD_ATOMIC) && attr.max_rd_atomic as u32 > limits.max_qp_init_rd_atom
        || m(QpAttrMask::MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic as u32 > limits.max_qp_rd_atom
        || m(QpAttrMask::PORT) && attr.port_num != 1
        || m(QpAttrMask::PKEY_INDEX) && attr.pkey_index != 0
        || m(QpAttrMask::ACCESS_FLAGS) && attr.qp_access_flags.unknown_bits() != 0
        || m(QpAttrMask::DEST_QPN) && attr.dest_qp_num > 0xFF_FFFF
        || m(QpAttrMask::AV) && !attr.ah_attr.is_global
    {
        return Err(Error::Invalid);
    }
    Ok(to)
}

/// The IP address a GID names (IPv4-mapped GIDs are IPv4).
pub(crate) fn gid_to_ip(gid: [u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// Stores the attributes `mask` names (modify_qp, after its checks).
pub(crate) fn apply_attrs(q: &mut Qp, a: &QpAttr, mask: QpAttrMask) {
    use QpAttrMask as A;
    let t = &mut q.attr;
    let m = |f| mask.contains(f);
    if m(A::EN_SQD_ASYNC_NOTIFY) {
        t.en_sqd_async_notify = a.en_sqd_async_notify;
    }
    if m(A::ACCESS_FLAGS) {
        t.qp_access_flags = a.qp_access_flags;
    }
    if m(A::PKEY_INDEX) {
        t.pkey_index = a.pkey_index;
    }
    if m(A::PORT) {
        t.port_num = a.port_num;
    }
    if m(A::QKEY) {
        t.qkey = a.qkey;
    }
    if m(A::AV) {
        t.ah_attr = a.ah_attr;
    }
    if m(A::PATH_MTU) {
        t.path_mtu = a.path_mtu;
    }
    if m(A::TIMEOUT) {
        t.timeout = a.timeout;
    }
    if m(A::RETRY_CNT) {
        t.retry_cnt = a.retry_cnt;
        q.req.retry_left = a.retry_cnt;
    }
    if m(A::RNR_RETRY) {
        t.rnr_retry = a.rnr_retry;
        q.req.rnr_left = a.rnr_retry;
    }
    if m(A::RQ_PSN) {
        t.rq_psn = a.rq_psn & 0xFF_FFFF;
    }
    if m(A::MAX_QP_RD_ATOMIC) {
        t.max_rd_atomic = a.max_rd_atomic;
    }
    if m(A::ALT_PATH) {
        t.alt_ah_attr = a.alt_ah_attr;
        t.alt_pkey_index = a.alt_pkey_index;
        t.alt_port_num = a.alt_port_num;
        t.alt_timeout = a.alt_timeout;
    }
    if m(A::MIN_RNR_TIMER) {
        t.min_rnr_timer = a.min_rnr_timer;
    }
    if m(A::SQ_PSN) {
        t.sq_psn = a.sq_psn & 0xFF_FFFF;
    }
    if m(A::MAX_DEST_RD_ATOMIC) {
        t.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if m(A::PATH_MIG_STATE) {
        t.path_mig_state = a.path_mig_state;
    }
    if m(A::DEST_QPN) {
        t.dest_qp_num = a.dest_qp_num;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpState::*;

    const ALL_STATES: [QpState; 7] = [Reset, Init, Rtr, Rts, Sqd, Sqe, Err];

    #[test]
    fn source_ports_match_rxe() {
        // Worked example of the fold for QPs 0x11 <-> 0x12.
        let p = rc_source_port(0x11, 0x12);
        assert!(p >= 0xC000);
        assert_eq!(p, rc_source_port(0x12, 0x11));
        // fold14(0x11*0x12 = 0x132): fl = 0x132 -> 0x132 ^ 0 = 0x132.
        assert_eq!(p, 0xC132);
        assert_eq!(ud_source_port(0x11), 0xC000 + ((0x11u32.wrapping_mul(0x61C88647)) >> 18) as u16);
        // An AV's flow label wins over the QPNs' (rdma_cm sets one): label and port follow it.
        assert_eq!(rc_flow_label(0x1_2345, 0x11, 0x12), 0x1_2345);
        assert_eq!(rc_flow_label(0, 0x11, 0x12), 0x132);
        assert_eq!(rc_flow_label(0x10_0000, 0x11, 0x12), 0x132, "bits above 20 are not a label");
        // fold14(0x12345): 0x2345 ^ (0x12345 >> 14 = 4) = 0x2341.
        assert_eq!(flow_label_source_port(0x1_2345), 0xC000 | 0x2341);
    }

    #[test]
    fn legal_transitions_are_exactly_the_ibta_table() {
        let legal = [
            (Reset, Init),
            (Init, Init),
            (Init, Rtr),
            (Rtr, Rts),
            (Rts, Rts),
            (Rts, Sqd),
            (Sqd, Rts),
            (Sqd, Sqd),
            (Sqe, Rts),
        ];
        for ty in [QpType::Rc, QpType::Uc, QpType::Ud] {
            for from in ALL_STATES {
                for to in ALL_STATES {
                    let expect =
                        to == Reset || to == Err || (legal.contains(&(from, to)) && !(ty == QpType::Rc && from == Sqe));
                    assert_eq!(transition_masks(from, to, ty).is_some(), expect, "{ty:?} {from:?}->{to:?}");
                }
            }
        }
    }

    fn attr(to: QpState) -> QpAttr {
        QpAttr {
            qp_state: to,
            path_mtu: Some(Mtu::Mtu1024),
            port_num: 1,
            ah_attr: AhAttr { is_global: true, ..AhAttr::default() },
            ..QpAttr::default()
        }
    }

    #[test]
    fn missing_required_or_extra_attribute_is_einval() {
        use QpAttrMask as A;
        let l = Limits::default();
        let rtr = A::STATE | A::AV | A::PATH_MTU | A::DEST_QPN | A::RQ_PSN | A::MAX_DEST_RD_ATOMIC | A::MIN_RNR_TIMER;
        assert_eq!(check_modify(Init, QpType::Rc, &attr(Rtr), rtr, &l, Mtu::Mtu4096), Ok(Rtr));
        for bit in [A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN, A::MAX_DEST_RD_ATOMIC, A::MIN_RNR_TIMER] {
            let m = QpAttrMask(rtr.bits() & !bit.bits());
            assert_eq!(
                check_modify(Init, QpType::Rc, &attr(Rtr), m, &l, Mtu::Mtu4096),
                Result::Err(Error::Invalid),
                "{bit:?}"
            );
        }
        // UC does not take the RC-only attributes.
        assert_eq!(check_modify(Init, QpType::Uc, &attr(Rtr), rtr, &l, Mtu::Mtu4096), Result::Err(Error::Invalid));
        // SQ_PSN is not allowed on INIT->RTR.
        assert_eq!(
            check_modify(Init, QpType::Rc, &attr(Rtr), rtr | A::SQ_PSN, &l, Mtu::Mtu4096),
            Result::Err(Error::Invalid)
        );
        // Path MTU above the port's is EINVAL.
        assert_eq!(check_modify(Init, QpType::Rc, &attr(Rtr), rtr, &l, Mtu::Mtu512), Result::Err(Error::Invalid));
        // Without STATE the transition is cur->cur: legal in RTS, not in RTR.
        assert_eq!(check_modify(Rts, QpType::Rc, &attr(Rts), A::MIN_RNR_TIMER, &l, Mtu::Mtu4096), Ok(Rts));
        assert_eq!(
            check_modify(Rtr, QpType::Rc, &attr(Rtr), A::MIN_RNR_TIMER, &l, Mtu::Mtu4096),
            Result::Err(Error::Invalid)
        );
        // Anything -> ERR / RESET needs nothing and takes nothing.
        assert_eq!(check_modify(Rts, QpType::Ud, &attr(QpState::Err), A::STATE, &l, Mtu::Mtu4096), Ok(QpState::Err));
        assert_eq!(
            check_modify(Rts, QpType::Ud, &attr(QpState::Err), A::STATE | A::QKEY, &l, Mtu::Mtu4096),
            Result::Err(Error::Invalid)
        );
        // Out-of-range values.
        let mut a = attr(Rts);
        a.retry_cnt = 8;
        let rts = A::STATE | A::TIMEOUT | A::RETRY_CNT | A::RNR_RETRY | A::SQ_PSN | A::MAX_QP_RD_ATOMIC;
        assert_eq!(check_modify(Rtr, QpType::Rc, &a, rts, &l, Mtu::Mtu4096), Result::Err(Error::Invalid));
        a.retry_cnt = 7;
        assert_eq!(check_modify(Rtr, QpType::Rc, &a, rts, &l, Mtu::Mtu4096), Ok(Rts));
    }
}
