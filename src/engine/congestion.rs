//! DCQCN wired into the engine (issue #42; the sans-IO NP and RP are in `cc`).
//!
//! - **Marking.** Every packet a QP sends carries an IP traffic class in [`Transmit::tos`]:
//!   the DSCP of the QP's address vector and ECN ECT(0) while DCQCN is on (`ect`). CNPs leave
//!   with DSCP `cnp_dscp` and Not-ECT.
//! - **NP.** A datagram the driver received with CE ([`Datagram::ce`]) that a QP accepts goes
//!   to that QP's [`Np`]; when a CNP is due, one is queued to the QP that sent it (the
//!   connected peer QP, or a UD packet's source QP) and leaves first at the next
//!   `poll_transmit`: BTH opcode 0x81 with BECN, 16 zero bytes and the ICRC.
//! - **RP.** A CNP to one of our QPs (from its connected peer) goes to the QP's [`Rp`], made at
//!   the first CNP. While the RP limits the QP, `poll_transmit` sends the QP's packets only
//!   when its token bucket allows ([`Rp::earliest_send`]); otherwise the QP leaves the send
//!   queue and its timer is armed at that instant (`QpCc::pace_at`, part of the QP's timer
//!   deadline), so the driver sleeps until then. The loss-based window still applies: a QP
//!   sends when both allow, so the lower of the two governs.
//!
//! With DCQCN off (`URXE_DCQCN=0`) no RP is ever made: received CNPs count `rp_cnp_ignored`,
//! CE marks count `np_ecn_marked_roce_packets` and make no CNP, packets leave Not-ECT.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::net::IpAddr;

use crate::wire::cnp::{cnp_bth, CNP_RESERVED_LEN};
use crate::wire::icrc::ROCEV2_PORT;
use crate::wire::packet::finish;
use crate::wire::{Headers, Parsed};

use super::cc::{CcCounters, DcqcnParams, Rp};
use super::qp::Qp;
use super::shared::EngineShared;
use super::types::*;

/// The IP ECN field's ECT(0) codepoint.
pub const ECN_ECT0: u8 = 0b10;
/// The IP ECN field's CE codepoint.
pub const ECN_CE: u8 = 0b11;
/// The highest rate of a QP's RP when `rpg_max_rate` is 0 (a software device has no line
/// rate of its own): 10 Gbit/s.
pub const DEFAULT_LINE_RATE_BPS: u64 = 10_000_000_000;
/// CNPs queued at most (one per QP per `min_time_between_cnps`; more are dropped and counted).
const MAX_QUEUED_CNPS: usize = 1024;

/// The device's congestion state: parameters, counters, and the CNPs waiting to go.
#[derive(Debug)]
pub(crate) struct CcState {
    pub params: DcqcnParams,
    pub counters: CcCounters,
    /// The ECN bits of data packets (ECT(0), or 0 with DCQCN or `ect` off).
    pub data_ecn: u8,
    /// QPs that have an RP (the driver then needs sub-millisecond timers).
    pub rps: u32,
    /// CNPs due: (peer address, peer QPN, UDP source port).
    cnps: VecDeque<(IpAddr, Qpn, u16)>,
    /// CNPs dropped because the queue was full.
    pub cnps_dropped: u64,
}

impl Default for CcState {
    fn default() -> Self {
        let mut s = CcState {
            params: DcqcnParams::default(),
            counters: CcCounters::default(),
            data_ecn: 0,
            rps: 0,
            cnps: VecDeque::new(),
            cnps_dropped: 0,
        };
        s.set_params(DcqcnParams::default());
        s
    }
}

impl CcState {
    pub fn set_params(&mut self, p: DcqcnParams) {
        self.params = p;
        self.data_ecn = if p.enabled && p.ect { ECN_ECT0 } else { 0 };
    }

    pub fn has_cnps(&self) -> bool {
        !self.cnps.is_empty()
    }

    /// The traffic class of a QP's packets: its AV's DSCP and the data ECN bits.
    #[inline(always)]
    pub fn tos(&self, q: &Qp) -> u8 {
        (q.attr.ah_attr.grh.traffic_class & !0b11) | self.data_ecn
    }

    /// The next queued CNP, written into `buf`.
    pub fn poll_cnp<M>(&mut self, sh: &EngineShared<M>, buf: &mut [u8]) -> Option<Transmit> {
        while let Some((dst, dest_qp, sport)) = self.cnps.pop_front() {
            let Some(ip) = sh.tx_ip(dst) else { continue };
            let h = Headers { bth: cnp_bth(dest_qp, 0xFFFF), ..Headers::default() };
            let Ok(hl) = h.emit(buf) else { continue };
            let Ok(len) = finish(buf, hl, 0, &ip, sport, ROCEV2_PORT) else { continue };
            debug_assert_eq!(hl, 12 + CNP_RESERVED_LEN);
            let tos = (self.params.cnp_dscp as u8) << 2;
            return Some(Transmit { dst, src_port: sport, flow_label: 0, len, tos });
        }
        None
    }
}

/// A CE-marked datagram `q` accepted: count it, and queue a CNP to its sender when one is due.
pub(crate) fn on_ce(cc: &mut CcState, q: &mut Qp, d: &Datagram<'_>, p: &Parsed<'_>, now: Nanos) {
    if !q.cc.np.on_ce(now, &cc.params, &mut cc.counters) {
        return;
    }
    let peer_qp = match (q.ty, p.headers.deth) {
        (QpType::Ud, Some(deth)) => deth.src_qp,
        _ => q.attr.dest_qp_num,
    };
    if cc.cnps.len() >= MAX_QUEUED_CNPS {
        cc.cnps_dropped += 1;
        return;
    }
    cc.cnps.push_back((d.src, peer_qp, q.sport));
}

/// A CNP arrived for `q` from `d.src`: handled if it comes from the QP's peer (or to a UD QP),
/// dropped and counted `unknown_qp` otherwise.
pub(crate) fn on_cnp(cc: &mut CcState, q: &mut Qp, d: &Datagram<'_>, c: &mut super::Counters, now: Nanos) {
    if q.ty != QpType::Ud && q.dest != Some(d.src) {
        c.unknown_qp += 1;
        return;
    }
    if !cc.params.enabled {
        cc.counters.rp_cnp_ignored += 1;
        return;
    }
    if q.cc.rp.is_none() {
        q.cc.rp = Some(Box::new(Rp::new(cc.params, DEFAULT_LINE_RATE_BPS)));
        cc.rps += 1;
    }
    if let Some(rp) = q.cc.rp.as_deref_mut() {
        rp.on_cnp(now, &mut cc.counters);
    }
}

/// Whether `q` may send a packet now; otherwise when it may (its rate limiter's bucket is
/// short). Runs the limiter's increase timer up to `now` first.
#[inline]
pub(crate) fn gate(q: &mut Qp, now: Nanos) -> Option<Nanos> {
    let rp = q.cc.rp.as_deref_mut()?;
    rp.handle_timeout(now);
    let at = rp.earliest_send(now, q.mtu);
    (at > now).then_some(at)
}

/// `q` sent `len` bytes at `now`.
#[inline]
pub(crate) fn sent(q: &mut Qp, now: Nanos, len: usize) {
    if let Some(rp) = q.cc.rp.as_deref_mut() {
        rp.on_sent(now, len as u32);
    }
}

/// A QP with an RP went away.
pub(crate) fn forget(cc: &mut CcState, q: &Qp) {
    if q.cc.rp.is_some() {
        cc.rps = cc.rps.saturating_sub(1);
    }
}
