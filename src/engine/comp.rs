//! Completer (rxe_comp.c): ACK / NAK / RNR NAK / READ response / atomic ACK handling, the
//! local ACK timer with retry_cnt, the RNR timer with rnr_retry, go-back-N, completions
//! strictly in WR order, and the error/flush path shared by the whole QP.

use super::dma::scatter;
use super::qp::{Qp, WqeState};
use super::shared::EngineShared;
use super::timer::{ack_timeout_nanos, rnr_nanos};
use super::types::*;
use super::window::{Expiry, Resume};
use super::Counters;
use crate::wire::aeth::{NakCode, Syndrome};
use crate::wire::opcode::{OpKind, Position};
use crate::wire::{Parsed, Psn};

fn wc_opcode(k: &WrKind) -> WcOpcode {
    match k {
        WrKind::Send | WrKind::SendWithImm { .. } | WrKind::SendWithInv { .. } => WcOpcode::Send,
        WrKind::RdmaWrite { .. } | WrKind::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
        WrKind::RdmaRead { .. } => WcOpcode::RdmaRead,
        WrKind::AtomicCmpSwp { .. } => WcOpcode::CompSwap,
        WrKind::AtomicFetchAdd { .. } => WcOpcode::FetchAdd,
        WrKind::LocalInv { .. } => WcOpcode::LocalInv,
        WrKind::BindMw(_) => WcOpcode::BindMw,
        WrKind::AtomicWrite { .. } => WcOpcode::AtomicWrite,
        WrKind::Flush { .. } => WcOpcode::Flush,
    }
}

/// Pops finished WQEs off the head of the send queue, in order, reporting signaled ones and
/// every error. An error moves the QP to ERR (which flushes the rest).
pub(crate) fn complete_ready<M>(q: &mut Qp, sh: &mut EngineShared<M>) {
    // The fields a completion needs are read in place (a send WQE is over 100 bytes; copying
    // each out cost more than the rest of the step).
    while let Some(w) = q.sq.wqes.front() {
        if w.state != WqeState::Done {
            break;
        }
        let mut status = w.status;
        if status == WcStatus::Success {
            if let Some(f) = sh.faults.as_deref_mut() {
                if let Some(st) = f.completion_fault(sh.clock, q.qpn, &mut sh.counters) {
                    status = st;
                }
            }
        }
        let (wr_id, opcode, byte_len, signaled, slot) = (w.wr_id, wc_opcode(&w.kind), w.len, w.signaled, w.slot);
        q.sq.wqes.pop_front();
        q.sq.release_slot(slot);
        q.req.next = q.req.next.saturating_sub(1);
        if signaled || status != WcStatus::Success {
            let wc = WorkCompletion { wr_id, status, opcode, byte_len, qp_num: q.qpn, ..WorkCompletion::default() };
            sh.push_wc(q.send_cq, wc, false);
        }
        if status != WcStatus::Success && status != WcStatus::WrFlushErr {
            enter_error(q, sh);
            return;
        }
    }
    // Drained: nothing started is still outstanding (IBTA 11.2.5.2, SQD).
    if q.state == QpState::Sqd && q.req.sqd_notify && q.sq.wqes.iter().all(|w| w.npkts == 0 && !w.is_local()) {
        q.req.sqd_notify = false;
        sh.async_event(AsyncEventType::SqDrained, AsyncElement::Qp(q.qpn));
    }
}

/// Moves the QP to ERR: every outstanding send and receive WR completes with
/// IBV_WC_WR_FLUSH_ERR, timers stop; an SRQ-attached QP reports LAST_WQE_REACHED.
pub(crate) fn enter_error<M>(q: &mut Qp, sh: &mut EngineShared<M>) {
    if q.state == QpState::Err {
        return;
    }
    q.state = QpState::Err;
    q.req.retx_at = None;
    q.req.rnr_until = None;
    q.req.rd_atomic_out = 0;
    flush_send_queue(q, sh);
    flush_recv(q, sh);
    if q.srq.is_some() && !q.last_wqe_reached {
        q.last_wqe_reached = true;
        sh.async_event(AsyncEventType::QpLastWqeReached, AsyncElement::Qp(q.qpn));
    }
}

pub(crate) fn flush_send_queue<M>(q: &mut Qp, sh: &mut EngineShared<M>) {
    // Everything not yet reported is flushed (as rxe does), keeping a WQE's own error.
    for w in q.sq.wqes.iter_mut() {
        w.state = WqeState::Done;
        if w.status == WcStatus::Success {
            w.status = WcStatus::WrFlushErr;
        }
    }
    while let Some(w) = q.sq.wqes.pop_front() {
        q.sq.release_slot(w.slot);
        let wc = WorkCompletion {
            wr_id: w.wr_id,
            status: w.status,
            opcode: wc_opcode(&w.kind),
            qp_num: q.qpn,
            ..WorkCompletion::default()
        };
        sh.push_wc(q.send_cq, wc, false);
    }
    q.req.next = 0;
}

pub(crate) fn flush_recv<M>(q: &mut Qp, sh: &mut EngineShared<M>) {
    let flush = |wr_id| WorkCompletion {
        wr_id,
        status: WcStatus::WrFlushErr,
        opcode: WcOpcode::Recv,
        qp_num: q.qpn,
        ..WorkCompletion::default()
    };
    if q.resp.have_wqe {
        q.resp.have_wqe = false;
        sh.push_wc(q.recv_cq, flush(q.resp.wqe.wr_id), false);
    }
    if let Some(rq) = q.rq.as_mut() {
        let cq = q.recv_cq;
        rq.drain(|id| {
            sh.push_wc(cq, flush(id), false);
        });
    }
}

/// Positions the requester to (re)send from `psn`: the WQE holding it, at the packet it
/// names (go-back-N).
pub(crate) fn position_at(q: &mut Qp, psn: Psn) {
    q.req.psn = psn;
    q.req.noack_pkts = 0;
    for (i, w) in q.sq.wqes.iter_mut().enumerate() {
        if w.state == WqeState::Done {
            continue;
        }
        if w.npkts == 0 {
            q.req.next = i;
            return;
        }
        let d = psn.distance(w.first_psn);
        if d >= 0 && (d as u32) < w.npkts {
            q.req.next = i;
            w.state = WqeState::Posted;
            return;
        }
    }
    q.req.next = q.sq.wqes.len();
}

/// Go-back-N from `psn`, at most once per loss however many NAKs report it (false: already
/// done, nothing changed). A loss also shrinks the send window, once per episode.
fn rewind(q: &mut Qp, c: &mut Counters, psn: Psn) -> bool {
    if q.req.rewound_at == Some(psn) {
        return false;
    }
    q.req.rewound_at = Some(psn);
    q.req.win.on_loss(psn, q.req.high_psn, c);
    position_at(q, psn);
    true
}

/// Applies an acknowledgement of every PSN up to and including `p`. Returns false (after
/// starting a retry) if a READ/atomic before `p` is still missing its response: the
/// responder went past it, so the response was lost (implicit NAK).
fn ack_through(q: &mut Qp, counters: &mut Counters, p: Psn, except: Option<usize>) -> bool {
    let before = q.req.unacked;
    let mut ok = true;
    for (i, w) in q.sq.wqes.iter_mut().enumerate() {
        if Some(i) == except {
            break;
        }
        if w.state == WqeState::Done {
            continue;
        }
        if w.npkts == 0 || w.first_psn.after(p) {
            break;
        }
        if w.is_rd_atomic() {
            ok = false;
            break;
        }
        if !w.last_psn().after(p) {
            w.state = WqeState::Done;
            q.req.unacked = w.last_psn().next();
        } else {
            q.req.unacked = p.next();
            break;
        }
    }
    if q.req.unacked != before {
        progress(q);
    }
    if !ok {
        let u = q.req.unacked;
        rewind(q, counters, u);
    }
    // If a retry had gone back before what is now acknowledged, skip ahead.
    if q.req.psn.before(q.req.unacked) {
        let u = q.req.unacked;
        position_at(q, u);
    }
    ok
}

fn progress(q: &mut Qp) {
    q.req.retry_left = q.attr.retry_cnt;
    q.req.rnr_left = q.attr.rnr_retry;
    q.req.rewound_at = None;
}

/// Index of the first WQE not yet done (the one an error applies to).
fn first_pending(q: &Qp) -> Option<usize> {
    q.sq.wqes.iter().position(|w| w.state != WqeState::Done)
}

/// One response packet (ACK, atomic ACK, READ response) for this RC QP.
pub(crate) fn handle_response<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, now: Nanos, p: &Parsed<'_>) {
    if !q.ty.is_reliable() || !matches!(q.state, QpState::Rts | QpState::Sqd) {
        sh.counters.bad_state_drops += 1;
        return;
    }
    let psn = p.headers.bth.psn;
    // Only PSNs that are outstanding: [unacked, high_psn).
    if psn.before(q.req.unacked) || !psn.before(q.req.high_psn) {
        // A NAK or ACK for the PSN just before `unacked` is a harmless duplicate.
        sh.counters.unexpected_responses += 1;
        return;
    }
    match p.info.kind {
        OpKind::Ack => {
            let Some(aeth) = p.headers.aeth else { return };
            match aeth.syndrome {
                Syndrome::Ack { .. } => {
                    if sh.short_paths_on() && ack_short(q, sh, now, psn) {
                        sh.short_path_taken();
                        return;
                    }
                    ack_through(q, &mut sh.counters, psn, None);
                }
                Syndrome::RnrNak { timer } => {
                    sh.counters.rnr_naks_rcvd += 1;
                    if !ack_through(q, &mut sh.counters, psn.sub(1), None) {
                        return;
                    }
                    if q.attr.rnr_retry != 7 {
                        if q.req.rnr_left == 0 {
                            sh.counters.rnr_retry_exceeded += 1;
                            if let Some(i) = first_pending(q) {
                                fail_wqe(q, sh, i, WcStatus::RnrRetryExcErr);
                            }
                            return;
                        }
                        q.req.rnr_left -= 1;
                    }
                    q.req.rnr_until = Some(now + rnr_nanos(timer.code()));
                    q.req.retx_at = None;
                    q.req.win.on_loss(psn, q.req.high_psn, &mut sh.counters);
                    q.req.rewound_at = None;
                    position_at(q, psn);
                }
                Syndrome::Nak(NakCode::PsnSequenceError) => {
                    sh.counters.seq_naks_rcvd += 1;
                    if ack_through(q, &mut sh.counters, psn.sub(1), None) && !rewind(q, &mut sh.counters, psn) {
                        sh.counters.dup_naks_ignored += 1;
                    }
                }
                Syndrome::Nak(code) => {
                    ack_through(q, &mut sh.counters, psn.sub(1), None);
                    let status = match code {
                        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                        NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                        NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                        NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                        _ => WcStatus::BadRespErr,
                    };
                    if let Some(i) = first_pending(q) {
                        fail_wqe(q, sh, i, status);
                    }
                    return;
                }
                Syndrome::Reserved(_) => {
                    sh.counters.unexpected_responses += 1;
                    return;
                }
            }
        }
        OpKind::AtomicAck | OpKind::ReadResponse => read_or_atomic_response(q, sh, p),
        _ => return,
    }
    after_progress(q, sh, now);
}

/// The short path of a plain positive ACK (or the coalesced ACK of a burst) for RC SEND /
/// WRITE WQEs in flight, in order: one pass over the head of the send queue marks the WQEs
/// the ACK covers done, pops them and stores their completions, then the window and the
/// timer are updated as `after_progress` does. It is taken only where it does exactly what
/// `ack_through` + `after_progress` would (same completions, counters, window and timer
/// state); anything else (a READ/atomic before the PSN, a WQE already done, an error
/// status, SQD, an RNR wait, a pending undo of an early expiry, faults, a CQ that would
/// overflow or an ACK that covers nothing new) returns false with nothing changed.
#[inline]
fn ack_short<M>(q: &mut Qp, sh: &mut EngineShared<M>, now: Nanos, psn: Psn) -> bool {
    if q.state != QpState::Rts || sh.faults.is_some() || q.req.rnr_until.is_some() || q.req.win.undo_pending() {
        return false;
    }
    // Scan (nothing changed yet): `n` WQEs fully acknowledged, `partial` if the next one is
    // acknowledged in part, `signaled` completions to store.
    let (mut n, mut signaled, mut partial) = (0usize, 0usize, false);
    for w in q.sq.wqes.iter() {
        if w.state == WqeState::Done || w.status != WcStatus::Success {
            return false;
        }
        if w.npkts == 0 || w.first_psn.after(psn) {
            break;
        }
        if w.is_rd_atomic() {
            return false;
        }
        if w.last_psn().after(psn) {
            partial = true;
            break;
        }
        n += 1;
        signaled += w.signaled as usize;
    }
    if n == 0 && !partial {
        return false;
    }
    // What `complete_ready` would pop next must not be a WQE already done.
    if q.sq.wqes.get(n).is_some_and(|w| w.state == WqeState::Done) {
        return false;
    }
    let Some(cq) = sh.cqs.get_mut(q.send_cq) else { return false };
    if signaled > 0 && (cq.overflowed || cq.len() + signaled > cq.cap) {
        return false;
    }
    // Apply: pop and complete the `n` WQEs.
    let wc0 = WorkCompletion { qp_num: q.qpn, timestamp: sh.clock, ..WorkCompletion::default() };
    let mut notify = false;
    // Read in place and dropped in one go (moving each WQE out cost more than the rest).
    let mut unacked = q.req.unacked;
    for w in q.sq.wqes.range(..n) {
        if w.signaled {
            let wc = WorkCompletion { wr_id: w.wr_id, opcode: wc_opcode(&w.kind), byte_len: w.len, ..wc0 };
            notify |= cq.push_room(wc);
        }
        unacked = w.last_psn().next();
    }
    for i in 0..n {
        let slot = q.sq.wqes[i].slot;
        q.sq.release_slot(slot);
    }
    q.sq.wqes.drain(..n);
    q.req.next = q.req.next.saturating_sub(n);
    sh.completions_made += signaled as u64;
    if notify {
        sh.events.push_back(Event::Completion(q.send_cq));
    }
    let before = q.req.unacked;
    q.req.unacked = if partial { psn.next() } else { unacked };
    if q.req.unacked != before {
        progress(q);
    }
    if q.req.psn.before(q.req.unacked) {
        let u = q.req.unacked;
        position_at(q, u);
    }
    // No undo was pending: the window's answer is always go-back-N's "nothing to resume".
    q.req.win.on_response(now, q.req.unacked, &mut sh.counters);
    q.req.retx_at = if q.req.unacked.before(q.req.high_psn) {
        q.req.win.arm(now, ack_timeout_nanos(q.attr.timeout))
    } else {
        q.req.win.disarm();
        None
    };
    true
}

fn after_progress<M>(q: &mut Qp, sh: &mut EngineShared<M>, now: Nanos) {
    complete_ready(q, sh);
    if q.state == QpState::Err {
        return;
    }
    match q.req.win.on_response(now, q.req.unacked, &mut sh.counters) {
        // The expiry was premature (the originals got through, their ACKs lagged), or that is
        // not known yet: go on from where the requester was before it, not resend the rest of
        // the window (the timer restarts go-back-N if it was a loss after all).
        Resume::Premature | Resume::Hold => {
            let h = q.req.high_psn;
            if q.req.psn.before(h) {
                position_at(q, h);
            }
        }
        Resume::GoBackN => {}
    }
    q.req.retx_at = if q.req.unacked.before(q.req.high_psn) && q.req.rnr_until.is_none() {
        q.req.win.arm(now, ack_timeout_nanos(q.attr.timeout))
    } else {
        q.req.win.disarm();
        None
    };
}

fn read_or_atomic_response<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) {
    let psn = p.headers.bth.psn;
    // The WQE this response belongs to.
    let Some(j) = q.sq.wqes.iter().position(|w| {
        w.state != WqeState::Done && w.npkts != 0 && {
            let d = psn.distance(w.first_psn);
            d >= 0 && (d as u32) < w.npkts
        }
    }) else {
        sh.counters.unexpected_responses += 1;
        return;
    };
    let w = q.sq.wqes[j];
    let is_read = matches!(w.kind, WrKind::RdmaRead { .. });
    // ATOMIC WRITE and FLUSH are answered by an RDMA READ RESPONSE ONLY without payload.
    let empty_read = matches!(w.kind, WrKind::AtomicWrite { .. } | WrKind::Flush { .. });
    if (is_read || empty_read) != (p.info.kind == OpKind::ReadResponse) {
        sh.counters.unexpected_responses += 1;
        return;
    }
    // Responses arrive in order: everything before this WQE is acknowledged by it.
    if !ack_through(q, &mut sh.counters, w.first_psn.sub(1), Some(j)) {
        return;
    }
    if psn != q.req.unacked {
        // A response went missing (or this one is early): retry from the first gap.
        let u = q.req.unacked;
        rewind(q, &mut sh.counters, u);
        return;
    }
    let i = psn.distance(w.first_psn) as u32;
    let sges_base = w.slot as usize * q.sq.max_sge as usize;
    let sges = &q.sq.sges[sges_base..sges_base + w.num_sge as usize];
    let done = if is_read {
        // The PSN says where the data goes; a re-issued READ restarts at FIRST, so only
        // "ends the message" is checked against the position.
        let ends = matches!(p.info.position, Some(Position::Last | Position::Only));
        let off = i * q.mtu;
        let expect_len = (w.len - off.min(w.len)).min(q.mtu);
        if ends != (i + 1 == w.npkts) || p.payload.len() as u32 != expect_len {
            sh.counters.unexpected_responses += 1;
            return;
        }
        if !p.payload.is_empty() && !scatter(sh, q.pd, sges, off as u64, p.payload) {
            fail_wqe(q, sh, j, WcStatus::LocProtErr);
            return;
        }
        ends
    } else if empty_read {
        if p.info.position != Some(Position::Only) || !p.payload.is_empty() {
            sh.counters.unexpected_responses += 1;
            return;
        }
        true
    } else {
        let Some(ack) = p.headers.atomic_ack_eth else { return };
        if !scatter(sh, q.pd, sges, 0, &ack.orig.to_ne_bytes()) {
            fail_wqe(q, sh, j, WcStatus::LocProtErr);
            return;
        }
        true
    };
    q.req.unacked = psn.next();
    progress(q);
    if done {
        let wm = &mut q.sq.wqes[j];
        wm.state = WqeState::Done;
        if wm.rd_counted {
            wm.rd_counted = false;
            q.req.rd_atomic_out = q.req.rd_atomic_out.saturating_sub(1);
        }
    }
    if q.req.psn.before(q.req.unacked) {
        let u = q.req.unacked;
        position_at(q, u);
    }
}

/// The QP's timer fired (or may have: deadlines are checked here).
pub(crate) fn on_timeout<M>(q: &mut Qp, sh: &mut EngineShared<M>, now: Nanos) {
    if let Some(t) = q.req.rnr_until {
        if t <= now {
            q.req.rnr_until = None;
        }
    }
    let Some(t) = q.req.retx_at else { return };
    if t > now {
        return;
    }
    q.req.retx_at = None;
    if !matches!(q.state, QpState::Rts | QpState::Sqd) || !q.req.unacked.before(q.req.high_psn) {
        return;
    }
    // Only an expiry of the configured timeout is a local ACK timeout (it counts against
    // retry_cnt); an earlier one from the measured round trip just resends a probe.
    let kind = q.req.win.on_timeout(now, q.req.high_psn, &mut sh.counters);
    if kind == Expiry::AckTimeout {
        sh.counters.ack_timeouts += 1;
        if q.req.retry_left == 0 {
            sh.counters.retry_exceeded += 1;
            if let Some(i) = first_pending(q) {
                fail_wqe(q, sh, i, WcStatus::RetryExcErr);
            }
            return;
        }
        q.req.retry_left -= 1;
    }
    q.req.rewound_at = None;
    let u = q.req.unacked;
    position_at(q, u);
    // READ/atomic WQEs being re-requested stay counted in rd_atomic_out.
    q.req.retx_at = q.req.win.rearm(now, ack_timeout_nanos(q.attr.timeout), kind);
}

/// Marks a WQE failed (it completes in order with `status`, then the QP goes to ERR).
pub(crate) fn fail_wqe<M>(q: &mut Qp, sh: &mut EngineShared<M>, idx: usize, status: WcStatus) {
    if let Some(w) = q.sq.wqes.get_mut(idx) {
        w.state = WqeState::Done;
        w.status = status;
    }
    // Everything before it that was sent is still waiting for its ACK; an error completes
    // once it reaches the head. Local errors are immediate (IBTA 10.8.3.1): flush now.
    for w in q.sq.wqes.iter_mut().take(idx) {
        if w.state != WqeState::Done {
            w.state = WqeState::Done;
            w.status = WcStatus::WrFlushErr;
        }
    }
    complete_ready(q, sh);
}
