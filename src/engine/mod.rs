//! Engine layer (sans-IO): what rdma_rxe's req/resp/comp/qp/mr code does, as a state machine
//! with no sockets, no clock and no threads. See docs/DESIGN.md and [`Engine`].
//!
//! Module map (named after rxe; arrows point down only): `types` (the API values, by kind),
//! `counters`, `timer`; object state `mr` (MR + MW, keys), `cq`, `srq` (receive rings), `qp`
//! (state machine, transition table); `shared` (everything but the QPs); `dma` (gather and
//! scatter through checked lkeys); `comp` (completer, and completion delivery / flushing),
//! `req` (requester), `resp` (responder); `recv` (rxe_recv.c checks) and `xmit` (which of a
//! QP's packets goes next). Memory is reached only through [`HostMemory`], after the checks in
//! `mr`. The fuzz harness `fuzzing` is built only with the `fuzzing` feature.
#![forbid(unsafe_code)]

pub mod types;
pub use types::*;

pub mod cc;
mod comp;
mod congestion;
mod congestion_api;
pub mod counters;
mod cq;
mod dma;
mod fastrx;
pub mod faults;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod gsi;
pub mod mcast;
mod mr;
mod objects;
mod qp;
mod recv;
mod req;
mod resp;
mod shared;
mod srq;
mod timer;
mod window;
mod xmit;

pub use congestion::{DEFAULT_LINE_RATE_BPS, ECN_CE, ECN_ECT0};
pub use counters::Counters;
pub use mcast::MULTICAST_QPN;
pub use timer::{ack_timeout_nanos, rnr_nanos};

use std::collections::VecDeque;

use crate::wire;
use crate::wire::opcode::OpKind;
use cq::Cq;
use mr::{KeyTable, Mr};
use qp::Qp;
use shared::{Ah, EngineShared, Pd, Slab, Xrcd};
use srq::{RecvRing, Srq, XrcSrq};
use timer::TimerHeap;

/// Largest UDP payload the engine emits: BTH + the largest header set + 4096 + pad + ICRC.
/// A `poll_transmit` buffer at least this long always fits.
pub const MAX_PACKET: usize = 12 + 28 + 8 + 16 + 4 + 4 + 4096 + 4;

/// First QPN handed out (QP0/QP1 are the special QPs; rxe starts at 0x11).
pub const FIRST_QPN: Qpn = 0x11;

/// One RDMA device: PDs, MRs/MWs, CQs, SRQs, AHs and QPs, and the RC/UC/UD transport that
/// runs between its QPs and their peers.
///
/// Sans-IO: the driver (transport or simulator) owns the sockets and the clock and calls, in
/// a loop:
///
/// ```text
/// loop {
///     commands: create_*, modify_qp, post_send / post_recv / post_srq_recv, poll_cq, ...
///     for each received datagram:      engine.handle_datagram(now, &dgram)
///     if now >= engine.poll_timeout(): engine.handle_timeout(now)
///     while let Some(tx) = engine.poll_transmit(now, &mut buf) { send buf[..tx.len] }
///     while let Some(ev) = engine.poll_event() { deliver it }
/// }
/// ```
///
/// Every input is checked; nothing panics on any packet: protocol outcomes are NAKs,
/// completions, events and [`Counters`].
pub struct Engine<M: HostMemory> {
    sh: EngineShared<M>,
    /// QPs indexed by [`QpnSpace::idx`].
    qps: Vec<Option<Box<Qp>>>,
    qspace: QpnSpace,
    free_qpns: VecDeque<Qpn>,
    nqps: u32,
    txq: VecDeque<Qpn>,
    /// Packets the QP at the head of `txq` has sent in its current turn.
    burst: u32,
    timers: TimerHeap,
    /// QP1 (the connection manager's MADs).
    gsi: gsi::Gsi,
    /// Multicast groups and their attached UD QPs.
    mcast: mcast::McastTable,
    /// DCQCN (see `congestion`).
    cc: congestion::CcState,
}

/// Which QPNs this engine hands out. A process alone on its address uses the whole 24-bit
/// space; a member of a shared address (transport::group) owns `base | n` for one 16-bit
/// slot and starts `n` where the slot's previous owner stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct QpnSpace {
    base: u32,
    /// Bits of a QPN that count within the space.
    mask: u32,
    /// The first count handed out; `qps[0]` holds its QP, so a slot taken over at a high
    /// count does not hold an empty entry for every count below it.
    first: u32,
    last: u32,
}

impl QpnSpace {
    const WHOLE: QpnSpace = QpnSpace { base: 0, mask: 0xFF_FFFF, first: FIRST_QPN, last: 0xFF_FFFF };

    /// Index of `qpn` in `qps`; out of range (so never found) for another space's QPN.
    fn idx(self, qpn: Qpn) -> usize {
        match (qpn & self.mask).checked_sub(self.first) {
            Some(i) if qpn & !self.mask == self.base => i as usize,
            _ => usize::MAX,
        }
    }
}

/// Packets one QP sends in a row before the next QP's turn (a GSO train's worth).
pub const TX_BURST: u32 = 32;

impl<M: HostMemory> Engine<M> {
    pub fn new(cfg: EngineConfig, mem: M) -> Engine<M> {
        let max_mr = cfg.limits.max_mr.saturating_add(cfg.limits.max_mw);
        Engine {
            sh: EngineShared {
                keys: KeyTable::new(max_mr, cfg.seed),
                cfg,
                mem,
                pds: Slab::new(),
                cqs: Slab::new(),
                srqs: Slab::new(),
                xrcds: Slab::new(),
                ahs: Slab::new(),
                events: VecDeque::new(),
                counters: Counters::default(),
                clock: 0,
                completions_made: 0,
                icrc_tx: wire::icrc::IcrcFlows::default(),
                faults: None,
                #[cfg(feature = "fuzzing")]
                short: Default::default(),
            },
            qps: Vec::new(),
            qspace: QpnSpace::WHOLE,
            free_qpns: VecDeque::new(),
            nqps: 0,
            txq: VecDeque::new(),
            gsi: gsi::Gsi::default(),
            mcast: mcast::McastTable::default(),
            burst: 0,
            timers: TimerHeap::default(),
            cc: congestion::CcState::default(),
        }
    }

    // ---- getters ---------------------------------------------------------------------

    pub fn config(&self) -> &EngineConfig {
        &self.sh.cfg
    }
    pub fn counters(&self) -> &Counters {
        &self.sh.counters
    }
    /// How many completions the engine has stored in its CQs so far (a running count: a
    /// caller that remembers it learns whether new completions wait in *some* CQ, which a
    /// poll of one CQ cannot see).
    pub fn completions_made(&self) -> u64 {
        self.sh.completions_made
    }
    /// The host memory the engine reaches (tests inspect it).
    pub fn memory(&self) -> &M {
        &self.sh.mem
    }

    /// Restricts QPNs to `base | n` with `first <= n < 0xFFFF` (`base`'s low 16 bits zero):
    /// the slot of a shared address. Only before the first QP (EBUSY after).
    pub fn set_qpn_slot(&mut self, base: u32, first: u32) -> Result<(), Error> {
        if !self.qps.is_empty() {
            return Err(Error::Busy);
        }
        if base & 0xFFFF != 0 || base > 0xFF_0000 || !(FIRST_QPN..0xFFFF).contains(&first) {
            return Err(Error::Invalid);
        }
        self.qspace = QpnSpace { base, mask: 0xFFFF, first, last: 0xFFFE };
        Ok(())
    }

    /// The counter value (low bits of a QPN) the next new QPN will at least have: a new owner
    /// of a shared-address slot starts here.
    pub fn next_qpn_counter(&self) -> u32 {
        self.qps.len() as u32 + self.qspace.first
    }

    /// QPs that exist.
    pub fn qp_count(&self) -> u32 {
        self.nqps
    }

    fn qp(&self, qpn: Qpn) -> Result<&Qp, Error> {
        self.qps.get(self.qspace.idx(qpn)).and_then(|q| q.as_deref()).ok_or(Error::NotFound)
    }

    // ---- commands: QP ------------------------------------------------------------------

    /// Creates an RC, UC, UD or XRC initiator QP (an initiator has no receive side: its
    /// `recv_cq`, `srq` and receive caps are ignored). XRC targets: `create_xrc_recv_qp`.
    pub fn create_qp(&mut self, init: &QpInitAttr) -> Result<(Qpn, QpCap), Error> {
        let l = self.sh.cfg.limits;
        let xrc_send = init.qp_type == QpType::XrcSend;
        if init.qp_type == QpType::XrcRecv {
            return Err(Error::Invalid);
        }
        let init = &QpInitAttr {
            recv_cq: if xrc_send { 0 } else { init.recv_cq },
            srq: if xrc_send { None } else { init.srq },
            cap: QpCap {
                max_recv_wr: if xrc_send { 0 } else { init.cap.max_recv_wr },
                max_recv_sge: if xrc_send { 0 } else { init.cap.max_recv_sge },
                ..init.cap
            },
            ..*init
        };
        self.sh.pds.get(init.pd).ok_or(Error::NotFound)?;
        self.sh.cqs.get(init.send_cq).ok_or(Error::NotFound)?;
        if !xrc_send {
            self.sh.cqs.get(init.recv_cq).ok_or(Error::NotFound)?;
        }
        if let Some(s) = init.srq {
            self.sh.srqs.get(s).ok_or(Error::NotFound)?;
        }
        let c = init.cap;
        if c.max_send_wr > l.max_qp_wr
            || c.max_recv_wr > l.max_qp_wr
            || c.max_send_sge > l.max_sge
            || c.max_recv_sge > l.max_sge
            || c.max_inline_data > l.max_inline_data
        {
            return Err(Error::Invalid);
        }
        if self.nqps >= l.max_qp {
            return Err(Error::NoMemory);
        }
        let no_rq = init.srq.is_some() || xrc_send;
        let cap = QpCap {
            max_send_wr: c.max_send_wr.max(1),
            max_recv_wr: if no_rq { 0 } else { c.max_recv_wr.max(1) },
            max_send_sge: c.max_send_sge.max(1),
            max_recv_sge: if no_rq { 0 } else { c.max_recv_sge.max(1) },
            // As rxe: a send WQE holds either its SGEs (16 bytes each) or inline data, so
            // the inline room is at least the SGEs' (rdma_xclient sends 16 bytes inline on a
            // QP that asked for none).
            max_inline_data: c.max_inline_data.max(c.max_send_sge.max(1) * 16).min(l.max_inline_data),
        };
        let qpn = self.alloc_qpn()?;
        let max_sge = l.max_sge.max(l.max_srq_sge);
        self.qps[self.qspace.idx(qpn)] = Some(Box::new(Qp::new(qpn, init, cap, max_sge)));
        self.nqps += 1;
        self.pd_ref(init.pd, 1);
        for cq in [init.send_cq, init.recv_cq] {
            if let Some(c) = self.sh.cqs.get_mut(cq) {
                c.refs += 1;
            }
        }
        if let Some(s) = init.srq.and_then(|s| self.sh.srqs.get_mut(s)) {
            s.refs += 1;
        }
        Ok((qpn, cap))
    }

    /// A free QPN, with its slot in `qps` present (empty).
    fn alloc_qpn(&mut self) -> Result<Qpn, Error> {
        let qpn = match self.free_qpns.pop_front() {
            // Reuse a QPN only once many are free, so stray packets for a destroyed QP do not
            // reach its successor soon.
            Some(q) if self.free_qpns.len() > 256 => q,
            other => {
                if let Some(q) = other {
                    self.free_qpns.push_front(q);
                }
                let n = self.qps.len() as u32 + self.qspace.first;
                if n > self.qspace.last {
                    return Err(Error::NoMemory);
                }
                self.qspace.base | n
            }
        };
        let i = self.qspace.idx(qpn);
        if self.qps.len() <= i {
            self.qps.resize_with(i + 1, || None);
        }
        Ok(qpn)
    }

    /// EBUSY while the QP is attached to a multicast group (uverbs refuses it too).
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), Error> {
        if let Some(Some(q)) = self.qps.get_mut(self.qspace.idx(qpn)) {
            if q.xrc_opens > 0 {
                // Another handle of an XRC target QP is still open.
                q.xrc_opens -= 1;
                return Ok(());
            }
        }
        self.qp(qpn)?;
        if self.mcast.is_attached(qpn) {
            return Err(Error::Busy);
        }
        self.mcast.forget(qpn);
        let q = self.qps[self.qspace.idx(qpn)].take().ok_or(Error::NotFound)?;
        congestion::forget(&mut self.cc, &q);
        self.nqps -= 1;
        self.free_qpns.push_back(qpn);
        if let Some(x) = q.xrcd {
            // A target holds no PD, CQ or SRQ reference: it binds to SRQs per message.
            self.xrcd_ref(x, -1);
            return Ok(());
        }
        self.pd_ref(q.pd, -1);
        for cq in [q.send_cq, q.recv_cq] {
            if let Some(c) = self.sh.cqs.get_mut(cq) {
                c.refs = c.refs.saturating_sub(1);
            }
        }
        if let Some(s) = q.srq.and_then(|s| self.sh.srqs.get_mut(s)) {
            s.refs = s.refs.saturating_sub(1);
        }
        Ok(())
    }

    /// `ibv_modify_qp`: checked against the IBTA transition table (required and optional
    /// attributes per transition and QP type); anything else is EINVAL and changes nothing.
    pub fn modify_qp(&mut self, qpn: Qpn, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
        let limits = self.sh.cfg.limits;
        let max_mtu = self.sh.cfg.max_mtu;
        let q = self.qp(qpn)?;
        let to = qp::check_modify(q.state, q.ty, attr, mask, &limits, max_mtu)?;
        if mask.contains(QpAttrMask::AV) {
            let ip = qp::gid_to_ip(attr.ah_attr.grh.dgid);
            if self.sh.tx_ip(ip).is_none() {
                return Err(Error::Invalid);
            }
        }
        let mut q = self.qps[self.qspace.idx(qpn)].take().ok_or(Error::NotFound)?;
        let from = q.state;
        qp::apply_attrs(&mut q, attr, mask);
        if mask.contains(QpAttrMask::PATH_MIG_STATE) && attr.path_mig_state != MigState::Migrated {
            // Automatic path migration is not supported: report it rather than pretend.
            self.sh.async_event(AsyncEventType::PathMigErr, AsyncElement::Qp(qpn));
        }
        match to {
            QpState::Reset => {
                q.reset();
                q.state = QpState::Reset;
                // As mlx4/mlx5 clean their CQs on the move to RESET: completions of this QP
                // still queued (flushes of the error state it leaves) are dropped, so a QP
                // brought back up does not hand its old WRs' flushes to the application. SRQ
                // receives stay: their WRs are consumed.
                if let Some(c) = self.sh.cqs.get_mut(q.send_cq) {
                    c.purge_qp(qpn, false);
                }
                if q.srq.is_none() {
                    if let Some(c) = self.sh.cqs.get_mut(q.recv_cq) {
                        c.purge_qp(qpn, true);
                    }
                }
            }
            QpState::Err => comp::enter_error(&mut q, &mut self.sh),
            QpState::Rtr if from == QpState::Init => {
                q.size_responder();
                q.resp.epsn = wire::Psn::new(q.attr.rq_psn);
                q.mtu = match q.ty {
                    QpType::Ud => max_mtu.bytes() as u32,
                    _ => q.attr.path_mtu.unwrap_or(Mtu::Mtu256).min(max_mtu).bytes() as u32,
                };
                if q.ty == QpType::Ud {
                    q.sport = qp::ud_source_port(qpn);
                    q.flow_label = 0;
                } else {
                    q.dest = Some(qp::gid_to_ip(q.attr.ah_attr.grh.dgid));
                    q.flow_label = qp::rc_flow_label(q.attr.ah_attr.grh.flow_label, qpn, q.attr.dest_qp_num);
                    q.sport = qp::flow_label_source_port(q.flow_label);
                }
                q.state = QpState::Rtr;
            }
            QpState::Rts if from == QpState::Rtr => {
                let psn = wire::Psn::new(q.attr.sq_psn);
                q.req = qp::ReqState {
                    psn,
                    high_psn: psn,
                    unacked: psn,
                    retry_left: q.attr.retry_cnt,
                    rnr_left: q.attr.rnr_retry,
                    win: window::SendWindow::starting_at(psn),
                    ..qp::ReqState::default()
                };
                q.state = QpState::Rts;
            }
            QpState::Sqd => {
                q.req.sqd_notify = from == QpState::Rts && q.attr.en_sqd_async_notify;
                q.state = QpState::Sqd;
                // Already drained? Then the event is due now.
                comp::complete_ready(&mut q, &mut self.sh);
            }
            s => q.state = s,
        }
        if mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) && from == QpState::Sqd {
            q.size_responder();
        }
        self.qps[self.qspace.idx(qpn)] = Some(q);
        self.touch(qpn);
        Ok(())
    }

    /// `ibv_query_qp`: the attributes as set, the current state and the granted caps.
    pub fn query_qp(&self, qpn: Qpn) -> Result<(QpAttr, QpInitAttr), Error> {
        let q = self.qp(qpn)?;
        let mut a = q.attr;
        a.qp_state = q.state;
        a.cur_qp_state = q.state;
        a.cap = q.cap;
        // Draining = SQD with work started before the transition still outstanding.
        a.sq_draining = q.state == QpState::Sqd && q.sq.wqes.iter().any(|w| w.npkts != 0);
        let init = QpInitAttr {
            pd: q.pd,
            qp_type: q.ty,
            send_cq: q.send_cq,
            recv_cq: q.recv_cq,
            srq: q.srq,
            cap: q.cap,
            sq_sig_all: q.sq_sig_all,
        };
        Ok((a, init))
    }

    /// Posts one send WR. Checked now (opcode vs QP type, SGE count, inline size, UD
    /// length); lkeys are checked when the data is read. In ERR the WR completes at once with
    /// IBV_WC_WR_FLUSH_ERR.
    pub fn post_send(&mut self, now: Nanos, qpn: Qpn, wr: &SendWr<'_>) -> Result<(), Error> {
        self.post_send_to(now, qpn, None, wr)
    }

    /// `post_send` with the remote XRC SRQ number an XRC initiator's WR names
    /// (`wr.qp_type.xrc.remote_srqn`, `ibv_wr_set_xrc_srqn`); required on such a QP (EINVAL
    /// without one), refused on any other (EINVAL).
    pub fn post_send_to(
        &mut self,
        now: Nanos,
        qpn: Qpn,
        remote_srqn: Option<u32>,
        wr: &SendWr<'_>,
    ) -> Result<(), Error> {
        self.sh.tick(now);
        if self.sh.faults.is_some() {
            self.verb_fault(faults::Site::PostSend, Some(qpn))?;
        }
        let Some(Some(q)) = self.qps.get_mut(self.qspace.idx(qpn)) else { return Err(Error::NotFound) };
        req::post(q, &mut self.sh, wr, remote_srqn)?;
        // `touch` without a second lookup: a QP whose send queue just grew may send (ERR
        // flushed it instead); a post arms no timer the QP did not already have.
        if !q.in_txq && req::may_transmit(q) {
            q.in_txq = true;
            self.txq.push_back(qpn);
        }
        Ok(())
    }

    /// Posts a receive WR to QP `qpn`'s receive queue. A QP in the error state completes it at
    /// once (flushed), stamped with the engine clock; see [`Engine::post_recv_at`].
    pub fn post_recv(&mut self, qpn: Qpn, wr: &RecvWr<'_>) -> Result<(), Error> {
        let clock = self.sh.clock;
        self.post_recv_at(qpn, wr, || clock)
    }

    /// As [`Engine::post_recv`], with the time asked of `now` only when it is needed: the post
    /// completes at once (a QP in the error state flushes it) and that completion carries it.
    /// A driver whose clock read costs something (a busy poller reposts a receive per message)
    /// reads it only then.
    pub fn post_recv_at(&mut self, qpn: Qpn, wr: &RecvWr<'_>, now: impl FnOnce() -> Nanos) -> Result<(), Error> {
        if self.sh.faults.is_some() {
            self.verb_fault(faults::Site::PostRecv, Some(qpn))?;
        }
        let Some(Some(q)) = self.qps.get_mut(self.qspace.idx(qpn)) else { return Err(Error::NotFound) };
        if q.state == QpState::Reset {
            return Err(Error::BadState);
        }
        let Some(rq) = q.rq.as_mut() else { return Err(Error::Invalid) };
        if wr.sg_list.len() > rq.max_sge as usize {
            return Err(Error::Invalid);
        }
        if !rq.push(wr) {
            return Err(Error::NoMemory);
        }
        if q.state == QpState::Err {
            self.sh.tick(now());
            comp::flush_recv(q, &mut self.sh);
        }
        Ok(())
    }

    /// Tells the engine the time before a verb that takes none (`modify_qp`, `post_recv`,
    /// ...): completions it produces (flushes) carry it as their timestamp.
    pub fn advance_clock(&mut self, now: Nanos) {
        self.sh.tick(now);
    }

    /// The engine clock: the latest `now` any input carried (completion timestamps are
    /// this clock's readings).
    pub fn clock(&self) -> Nanos {
        self.sh.clock
    }

    // ---- commands: multicast ---------------------------------------------------------------

    /// `ibv_attach_mcast`: attaches UD QP `qpn` to the group `gid` names (an IP multicast
    /// address of the device's family: IPv4-mapped 224.0.0.0/4 or IPv6 ff00::/8). Returns the
    /// group's address if it is new to this device: the driver then joins the IP group (and
    /// calls [`Engine::detach_mcast`] if it cannot). EINVAL for another QP type or a GID that is
    /// not multicast, ENOMEM past the `max_*mcast*` limits; attaching twice is a no-op.
    pub fn attach_mcast(&mut self, qpn: Qpn, gid: [u8; 16]) -> Result<Option<std::net::IpAddr>, Error> {
        let group = self.mcast_group(qpn, gid)?;
        let limits = self.sh.cfg.limits;
        Ok(self.mcast.attach(group, qpn, &limits)?.then_some(group))
    }

    /// `ibv_detach_mcast`: the group's address if `qpn` was its last QP here (the driver leaves
    /// the IP group). EINVAL if the QP is not attached to it.
    pub fn detach_mcast(&mut self, qpn: Qpn, gid: [u8; 16]) -> Result<Option<std::net::IpAddr>, Error> {
        let group = self.mcast_group(qpn, gid)?;
        Ok(self.mcast.detach(group, qpn)?.then_some(group))
    }

    /// `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`: UD QP `qpn` does not receive the multicast it sends
    /// itself (other QPs of the device still do); EINVAL for another QP type.
    pub fn block_self_mcast_loopback(&mut self, qpn: Qpn) -> Result<(), Error> {
        if self.qp(qpn)?.ty != QpType::Ud {
            return Err(Error::Invalid);
        }
        self.mcast.block_self(qpn);
        Ok(())
    }

    /// The multicast groups that have attached QPs.
    pub fn mcast_groups(&self) -> Vec<std::net::IpAddr> {
        self.mcast.groups().collect()
    }

    fn mcast_group(&self, qpn: Qpn, gid: [u8; 16]) -> Result<std::net::IpAddr, Error> {
        if self.qp(qpn)?.ty != QpType::Ud {
            return Err(Error::Invalid);
        }
        let group = qp::gid_to_ip(gid);
        if !mcast::is_multicast(group) || self.sh.tx_ip(group).is_none() {
            return Err(Error::Invalid);
        }
        Ok(group)
    }

    // ---- inputs ------------------------------------------------------------------------

    /// One received UDP datagram. Checked as rxe_recv.c does (see `recv`) and dispatched to
    /// the responder (requests) or completer (responses) of its QP; dropped and counted
    /// otherwise.
    pub fn handle_datagram(&mut self, now: Nanos, d: &Datagram<'_>) {
        if self.sh.faults.is_some() {
            self.handle_datagram_faulted(now, d);
            return;
        }
        self.receive(now, d);
    }

    /// [`Engine::handle_datagram`] without the fault plan.
    #[inline(always)]
    fn receive(&mut self, now: Nanos, d: &Datagram<'_>) {
        self.sh.tick(now);
        if self.sh.short_paths_on() && !d.ce {
            if let Some(r) = wire::short::parse_rc_only(d.payload) {
                if self.receive_only(d, &r) {
                    return;
                }
            }
        }
        let c = &mut self.sh.counters;
        let Some(p) = recv::check_packet(c, d) else { return };
        let qpn = p.headers.bth.dest_qp;
        if qpn == MULTICAST_QPN || d.dst.is_multicast() {
            self.handle_multicast(d, &p);
            return;
        }
        if qpn == crate::wire::mad::GSI_QPN {
            if self.gsi.receive(d.src, &p) {
                self.sh.events.push_back(Event::Gsi);
            }
            return;
        }
        let Some(Some(q)) = self.qps.get_mut(self.qspace.idx(qpn)) else {
            c.unknown_qp += 1;
            return;
        };
        if p.info.kind == OpKind::Cnp {
            congestion::on_cnp(&mut self.cc, q, d, c, now);
            return;
        }
        if !recv::check_qp(c, q, d, &p) {
            return;
        }
        if d.ce {
            congestion::on_ce(&mut self.cc, q, d, &p, now);
        }
        match p.info.kind {
            OpKind::Ack | OpKind::AtomicAck | OpKind::ReadResponse => {
                comp::handle_response(q, &mut self.sh, now, &p);
            }
            _ if p.info.request => resp::handle_request(q, &mut self.sh, d, &p),
            _ => self.sh.counters.opcode_errors += 1,
        }
        self.touch(qpn);
    }

    /// The responder's short path (see `fastrx`): true if it took the packet; false, with
    /// nothing changed, for the general path to judge it.
    #[inline(always)]
    fn receive_only(&mut self, d: &Datagram<'_>, r: &wire::short::OnlyIn<'_>) -> bool {
        let qpn = r.dest_qp;
        if qpn == MULTICAST_QPN || qpn == crate::wire::mad::GSI_QPN || d.dst.is_multicast() {
            return false;
        }
        let Some(Some(q)) = self.qps.get_mut(self.qspace.idx(qpn)) else { return false };
        if !fastrx::qp_takes(q, d, r) || !fastrx::packet_ok(d, r) {
            return false;
        }
        self.sh.counters.rcvd_pkts += 1;
        fastrx::execute(q, &mut self.sh, r);
        self.touch(qpn);
        true
    }

    /// A datagram to a multicast group (rxe_rcv_mcast_pkt): destination QPN 0xFFFFFF and a
    /// multicast destination address, both or neither; each UD QP attached to the group takes
    /// it through the checks a unicast UD packet passes (QP type, state, Q_Key, receive WQE),
    /// independently of the others.
    fn handle_multicast(&mut self, d: &Datagram<'_>, p: &wire::Parsed<'_>) {
        if p.headers.bth.dest_qp != MULTICAST_QPN || !d.dst.is_multicast() || !self.mcast.has_group(d.dst) {
            self.sh.counters.mcast_drops += 1;
            return;
        }
        self.sh.counters.mcast_rcvd += 1;
        let mut i = 0;
        while let Some(qpn) = self.mcast.member(d.dst, i) {
            i += 1;
            let own = d.src == self.sh.cfg.local_addr && p.headers.deth.is_some_and(|h| h.src_qp == qpn);
            if own && self.mcast.blocks_self(qpn) {
                continue;
            }
            let Some(Some(q)) = self.qps.get_mut(self.qspace.idx(qpn)) else { continue };
            if !recv::check_qp(&mut self.sh.counters, q, d, p) || !p.info.request {
                continue;
            }
            resp::handle_request(q, &mut self.sh, d, p);
            self.touch(qpn);
        }
    }

    /// Runs every timer due at `now` (local ACK timeouts, RNR waits).
    pub fn handle_timeout(&mut self, now: Nanos) {
        if self.sh.faults.is_some() {
            self.release_held_rx(now);
            self.device_faults(now);
        }
        self.sh.tick(now);
        while let Some((at, qpn)) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(Some(q)) = self.qps.get_mut(self.qspace.idx(qpn)) else { continue };
            if q.heap_at != Some(at) {
                continue;
            }
            q.heap_at = None;
            if q.cc.pace_at.is_some_and(|t| t <= now) {
                q.cc.pace_at = None;
            }
            comp::on_timeout(q, &mut self.sh, now);
            self.touch(qpn);
        }
    }

    // ---- outputs -----------------------------------------------------------------------

    /// The next packet to send, written into `buf` (at least [`MAX_PACKET`] bytes). QPs take
    /// turns of up to [`TX_BURST`] packets, so a long message does not starve the others and
    /// a flow's packets come in trains; call until `None`.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        if self.sh.faults.is_some() {
            return self.poll_transmit_faulted(now, buf);
        }
        self.transmit(now, buf)
    }

    /// [`Engine::poll_transmit`] without the fault plan.
    #[inline(always)]
    fn transmit(&mut self, now: Nanos, buf: &mut [u8]) -> Option<Transmit> {
        self.sh.tick(now);
        if buf.len() < MAX_PACKET {
            return None;
        }
        if self.gsi.has_pending() {
            let sh = &self.sh;
            if let Some(t) = self.gsi.poll_transmit(buf, |dst| sh.tx_ip(dst)) {
                self.sh.counters.sent_pkts += 1;
                return Some(t);
            }
        }
        if self.cc.has_cnps() {
            if let Some(t) = self.cc.poll_cnp(&self.sh, buf) {
                self.sh.counters.sent_pkts += 1;
                return Some(t);
            }
        }
        // The QP being served stays at the front of the queue (nothing else changes the queue
        // meanwhile) and leaves it when its turn ends.
        while let Some(&qpn) = self.txq.front() {
            let Some(Some(q)) = self.qps.get_mut(self.qspace.idx(qpn)) else {
                self.txq.pop_front();
                continue;
            };
            if let Some(at) = congestion::gate(q, now) {
                // DCQCN's rate limit: the QP waits on its timer, not in the queue.
                self.txq.pop_front();
                q.cc.pace_at = Some(at);
                q.in_txq = false;
                self.burst = 0;
                arm(&mut self.timers, q);
                continue;
            }
            match xmit::poll_qp(q, &mut self.sh, now, buf) {
                Some(mut t) => {
                    t.tos = self.cc.tos(q);
                    congestion::sent(q, now, t.len);
                    self.sh.counters.sent_pkts += 1;
                    // Serve a QP for a burst before the next one's turn: consecutive packets
                    // of one flow are what the transport can hand to the kernel as one GSO
                    // train; QPs still take turns so none starves.
                    self.burst += 1;
                    if !req::may_transmit(q) {
                        // Nothing left to send (a post, an ACK or a timer queues it again): the
                        // caller's next poll finds the queue empty instead of asking this QP.
                        self.txq.pop_front();
                        q.in_txq = false;
                        self.burst = 0;
                    } else if self.burst >= TX_BURST {
                        self.txq.pop_front();
                        self.txq.push_back(qpn);
                        self.burst = 0;
                    }
                    arm(&mut self.timers, q);
                    return Some(t);
                }
                None => {
                    self.txq.pop_front();
                    q.in_txq = false;
                    self.burst = 0;
                    arm(&mut self.timers, q);
                }
            }
        }
        None
    }

    /// Whether any QP may have a packet to send (cheap; `poll_transmit` decides exactly).
    pub fn may_transmit(&self) -> bool {
        !self.txq.is_empty() || self.gsi.has_pending() || self.sh.faults.as_ref().is_some_and(|f| f.holds_tx())
    }

    /// Whether packets wait to be sent and all of them are plain positive ACKs. Such ACKs only
    /// complete the peer's sends; a transport may hold them for a moment so they leave in the
    /// same send call as the application's next request (see the transport's progress thread).
    pub fn only_acks_pending(&self) -> bool {
        !self.txq.is_empty()
            && self.sh.faults.as_ref().is_none_or(|f| !f.holds_tx())
            && self.txq.iter().all(|&qpn| match self.qps.get(self.qspace.idx(qpn)) {
                Some(Some(q)) => req::only_acks_pending(q),
                _ => true,
            })
    }

    /// The earliest deadline at which `handle_timeout` has work (maybe spuriously early).
    #[must_use]
    pub fn poll_timeout(&mut self) -> Option<Nanos> {
        let qp_timer = self.poll_qp_timeout();
        match &self.sh.faults {
            None => qp_timer,
            Some(f) => match (qp_timer, f.next_due()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }

    #[inline(always)]
    fn poll_qp_timeout(&mut self) -> Option<Nanos> {
        while let Some((at, qpn)) = self.timers.peek() {
            match self.qps.get(self.qspace.idx(qpn)).and_then(|q| q.as_deref()) {
                Some(q) if q.heap_at == Some(at) => return Some(at),
                _ => {
                    self.timers.pop();
                }
            }
        }
        None
    }

    #[must_use]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.sh.events.pop_front()
    }

    /// The next MAD received on QP1: (the IP source of its packet, the 256-byte MAD).
    /// [`Event::Gsi`] tells when the queue became non-empty.
    pub fn poll_gsi(&mut self) -> Option<(std::net::IpAddr, [u8; crate::wire::mad::MAD_LEN])> {
        self.gsi.poll_recv()
    }

    /// Queues a MAD for QP1 of `peer` (sent by `poll_transmit`); `Error::NoMemory` if the
    /// GSI send queue is full.
    pub fn send_gsi(&mut self, peer: std::net::IpAddr, mad: &[u8; crate::wire::mad::MAD_LEN]) -> Result<(), Error> {
        if self.gsi.send(peer, mad) {
            Ok(())
        } else {
            Err(Error::NoMemory)
        }
    }

    pub fn gsi_counters(&self) -> gsi::GsiCounters {
        self.gsi.counters
    }

    // ---- scheduling --------------------------------------------------------------------

    /// After anything happened to a QP: queue it for transmission and (re)arm its timer.
    fn touch(&mut self, qpn: Qpn) {
        let Some(Some(q)) = self.qps.get_mut(self.qspace.idx(qpn)) else { return };
        if !q.in_txq && req::may_transmit(q) {
            q.in_txq = true;
            self.txq.push_back(qpn);
        }
        arm(&mut self.timers, q);
    }
}

/// Puts the QP's earliest deadline in the heap if it is earlier than the one it has there.
#[inline]
fn arm(timers: &mut TimerHeap, q: &mut Qp) {
    if let Some(due) = q.timer_due() {
        if q.heap_at.is_none_or(|h| due < h) {
            q.heap_at = Some(due);
            timers.push(due, q.qpn);
        }
    }
}

#[cfg(feature = "fuzzing")]
impl<M: HostMemory> Engine<M> {
    /// Tests only (`fuzzing` feature): switches the short paths off (every packet then takes
    /// the general path) or back on, so the same traffic can be run both ways and compared.
    pub fn set_short_paths(&mut self, on: bool) {
        self.sh.short.off = !on;
    }

    /// Tests only (`fuzzing` feature): packets a short path has handled.
    pub fn short_path_packets(&self) -> u64 {
        self.sh.short.taken
    }
}
