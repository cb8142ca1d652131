//! Requester (rxe_req.c): turns send WQEs into packets — segmentation at the path MTU,
//! PSN assignment, AckReq policy, the send window (unacknowledged PSNs, max_rd_atomic),
//! fence, local operations (LOCAL_INV, BIND_MW) — and writes each packet into the caller's
//! buffer with the payload copied once, from host memory straight into the buffer.

use std::net::IpAddr;

use super::comp::{self, fail_wqe};
use super::dma::gather;
use super::qp::{opcode_base, Qp, RespOut, SendWqe, WqeState};
use super::shared::EngineShared;
use super::types::*;
use crate::wire::atomic_eth::AtomicEthRepr;
use crate::wire::bth::BthRepr;
use crate::wire::deth::DethRepr;
use crate::wire::feth::FethRepr;
use crate::wire::icrc::ROCEV2_PORT;
use crate::wire::ieth::IethRepr;
use crate::wire::immdt::ImmDtRepr;
use crate::wire::opcode::{op, Position};
use crate::wire::packet::finish_flow;
use crate::wire::reth::RethRepr;
use crate::wire::short::{emit_rc_only, OnlyRequest};
use crate::wire::xrceth::XrcEthRepr;
use crate::wire::{Headers, Psn};

/// Immediate data as the verbs carry it (`__be32`, i.e. the wire bytes in memory order) to
/// the value the wire layer emits.
pub(crate) fn imm_to_wire(imm: u32) -> u32 {
    u32::from_be_bytes(imm.to_ne_bytes())
}

/// Accepts a send WR into the send queue.
pub(crate) fn post<M: HostMemory>(
    q: &mut Qp,
    sh: &mut EngineShared<M>,
    wr: &SendWr<'_>,
    remote_srqn: Option<u32>,
) -> Result<(), Error> {
    match q.state {
        QpState::Rts | QpState::Sqd | QpState::Err | QpState::Sqe => {}
        _ => return Err(Error::BadState),
    }
    // The common case first: an RC SEND or WRITE (every kind is allowed on RC, none names an
    // XRC SRQ) skips the kind and SRQ tables below.
    let rc_plain = q.ty == QpType::Rc && remote_srqn.is_none();
    let ok_kind = rc_plain
        || match (q.ty, &wr.kind) {
            (QpType::Ud, WrKind::Send | WrKind::SendWithImm { .. }) => wr.ud.is_some(),
            (QpType::Ud, _) => false,
            (QpType::Uc, WrKind::Send | WrKind::SendWithImm { .. })
            | (QpType::Uc, WrKind::RdmaWrite { .. } | WrKind::RdmaWriteWithImm { .. })
            | (QpType::Uc, WrKind::LocalInv { .. } | WrKind::BindMw(_)) => true,
            (QpType::Uc, _) => false,
            // FLUSH and ATOMIC WRITE are implemented on RC only (as rxe): an XRC initiator
            // refuses them here rather than send what its peer would not answer.
            (QpType::XrcSend, WrKind::Flush { .. } | WrKind::AtomicWrite { .. }) => false,
            (QpType::Rc | QpType::XrcSend, _) => true,
            // A target has no send queue.
            (QpType::XrcRecv, _) => false,
        };
    // An initiator's requests must name the peer's XRC SRQ (24 bits); no other QP's may. Local
    // operations (LOCAL_INV, BIND_MW) send nothing and need none.
    let srqn_ok = rc_plain
        || match (q.ty, remote_srqn) {
            (QpType::XrcSend, Some(n)) => n <= 0xFF_FFFF,
            (QpType::XrcSend, None) => matches!(wr.kind, WrKind::LocalInv { .. } | WrKind::BindMw(_)),
            (_, r) => r.is_none(),
        };
    if !ok_kind || !srqn_ok || wr.flags.unknown_bits() != 0 {
        return Err(Error::Invalid);
    }
    if wr.sg_list.len() > q.sq.max_sge as usize {
        return Err(Error::Invalid);
    }
    let len64: u64 = match wr.sg_list {
        [s] => s.length as u64,
        l => l.iter().map(|s| s.length as u64).sum(),
    };
    let inline = wr.flags.contains(SendFlags::INLINE)
        && matches!(
            wr.kind,
            WrKind::Send
                | WrKind::SendWithImm { .. }
                | WrKind::SendWithInv { .. }
                | WrKind::RdmaWrite { .. }
                | WrKind::RdmaWriteWithImm { .. }
        );
    if inline && len64 > q.sq.max_inline as u64 {
        return Err(Error::Invalid);
    }
    if len64 > sh.cfg.limits.max_msg_size as u64 {
        return Err(Error::Invalid);
    }
    let len = match wr.kind {
        WrKind::AtomicCmpSwp { remote_addr, .. } | WrKind::AtomicFetchAdd { remote_addr, .. } => {
            if remote_addr % 8 != 0 || len64 < 8 {
                return Err(Error::Invalid);
            }
            8
        }
        WrKind::LocalInv { .. } | WrKind::BindMw(_) => 0,
        // The value travels in the WR, not through SGEs; alignment is the responder's check
        // (a misaligned address is NAKed there, as rxe does).
        WrKind::AtomicWrite { .. } => 8,
        WrKind::Flush { placement, level, .. } => {
            if !(FethRepr { placement, level }).is_valid() {
                return Err(Error::Invalid);
            }
            0
        }
        _ => len64 as u32,
    };
    if q.ty == QpType::Ud {
        if len > q.mtu {
            return Err(Error::Invalid);
        }
        let ah = wr.ud.map(|u| u.ah).unwrap_or(0);
        if sh.ahs.get(ah).is_none() {
            return Err(Error::Invalid);
        }
    }
    let slot = q.sq.take_slot().ok_or(Error::NoMemory)?;
    let base = slot as usize * q.sq.max_sge as usize;
    q.sq.sges[base..base + wr.sg_list.len()].copy_from_slice(wr.sg_list);
    if inline {
        // Inline data is copied out of host memory now (the caller may reuse its buffer).
        let ib = slot as usize * q.sq.max_inline as usize;
        let mut at = ib;
        for s in wr.sg_list {
            let n = s.length as usize;
            if sh.mem.read(s.addr, &mut q.sq.inline[at..at + n]).is_err() {
                q.sq.release_slot(slot);
                return Err(Error::Invalid);
            }
            at += n;
        }
    }
    let signaled = q.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
    q.sq.wqes.push_back(SendWqe {
        wr_id: wr.wr_id,
        kind: wr.kind,
        flags: wr.flags,
        signaled,
        ud: wr.ud,
        slot,
        num_sge: wr.sg_list.len() as u32,
        inline,
        len,
        first_psn: Psn::new(0),
        npkts: 0,
        state: WqeState::Posted,
        status: WcStatus::Success,
        rd_counted: false,
        xrc_srqn: remote_srqn.unwrap_or(0),
    });
    if q.state == QpState::Err {
        comp::flush_send_queue(q, sh);
    }
    Ok(())
}

/// Whether the QP may have a packet to send (cheap; `poll_transmit` decides exactly).
pub(crate) fn may_transmit(q: &Qp) -> bool {
    !q.resp.out.is_empty() || requester_may_send(q)
}

/// Whether the requester may have a request packet to send (cheap and conservative).
fn requester_may_send(q: &Qp) -> bool {
    matches!(q.state, QpState::Rts | QpState::Sqd) && q.req.rnr_until.is_none() && q.req.next < q.sq.wqes.len()
}

/// Whether everything the responder has queued is plain positive ACKs (none: true).
pub(crate) fn only_plain_acks_queued(q: &Qp) -> bool {
    q.resp.out.iter().all(|o| matches!(o, RespOut::Ack { syndrome, .. } if syndrome.is_ack()))
}

/// Whether all this QP may send now is plain positive ACKs: no request packet, READ or atomic
/// response, or NAK waits (cheap and conservative, like [`may_transmit`]).
pub(crate) fn only_acks_pending(q: &Qp) -> bool {
    !requester_may_send(q) && only_plain_acks_queued(q)
}

/// The requester's next packet, if one may go now.
#[must_use]
pub(crate) fn poll_request<M: HostMemory>(
    q: &mut Qp,
    sh: &mut EngineShared<M>,
    now: Nanos,
    buf: &mut [u8],
) -> Option<Transmit> {
    if !matches!(q.state, QpState::Rts | QpState::Sqd) || q.req.rnr_until.is_some() {
        return None;
    }
    loop {
        let idx = q.req.next;
        let w = *q.sq.wqes.get(idx)?;
        if w.state == WqeState::Done {
            q.req.next += 1;
            continue;
        }
        let fresh = w.npkts == 0;
        if fresh {
            if q.state == QpState::Sqd {
                return None;
            }
            if w.flags.contains(SendFlags::FENCE) && q.req.rd_atomic_out > 0 {
                return None;
            }
            if w.is_local() {
                exec_local(q, sh, idx);
                q.req.next += 1;
                comp::complete_ready(q, sh);
                if q.state == QpState::Err {
                    return None;
                }
                continue;
            }
            if w.is_rd_atomic() && q.req.rd_atomic_out >= (q.attr.max_rd_atomic as u32).max(1) {
                return None;
            }
        }
        if q.ty.is_reliable() && q.req.psn.distance(q.req.unacked) >= q.req.win.limit() {
            return None;
        }
        if let Some(only) = short_request(q, sh, idx) {
            return emit_only(q, sh, now, idx, only, buf);
        }
        return emit_request(q, sh, now, idx, buf);
    }
}

/// LOCAL_INV and BIND_MW run when the requester reaches them, in send-queue order.
fn exec_local<M>(q: &mut Qp, sh: &mut EngineShared<M>, idx: usize) {
    let w = q.sq.wqes[idx];
    let status = match w.kind {
        WrKind::LocalInv { invalidate_rkey } => match sh.keys.invalidate(invalidate_rkey, q.pd, None) {
            Ok(()) => WcStatus::Success,
            Err(_) => WcStatus::LocProtErr,
        },
        WrKind::BindMw(b) => match sh.keys.bind_mw(&b, q.pd, q.qpn) {
            Ok(_) => WcStatus::Success,
            Err(_) => WcStatus::MwBindErr,
        },
        _ => WcStatus::LocQpOpErr,
    };
    let w = &mut q.sq.wqes[idx];
    w.state = WqeState::Done;
    w.status = status;
}

fn npkts_for(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

fn position(i: u32, n: u32) -> Position {
    match (i == 0, i + 1 == n) {
        (true, true) => Position::Only,
        (true, false) => Position::First,
        (false, true) => Position::Last,
        (false, false) => Position::Middle,
    }
}

/// Opcode for a SEND / WRITE packet (RC/UC/UD base in `t`).
fn data_opcode(t: u8, kind: &WrKind, pos: Position) -> u8 {
    use Position::*;
    let low = match (kind, pos) {
        (WrKind::RdmaWrite { .. } | WrKind::RdmaWriteWithImm { .. }, First) => op::RC_RDMA_WRITE_FIRST,
        (WrKind::RdmaWrite { .. } | WrKind::RdmaWriteWithImm { .. }, Middle) => op::RC_RDMA_WRITE_MIDDLE,
        (WrKind::RdmaWrite { .. }, Last) => op::RC_RDMA_WRITE_LAST,
        (WrKind::RdmaWriteWithImm { .. }, Last) => op::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        (WrKind::RdmaWrite { .. }, Only) => op::RC_RDMA_WRITE_ONLY,
        (WrKind::RdmaWriteWithImm { .. }, Only) => op::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        (_, First) => op::RC_SEND_FIRST,
        (_, Middle) => op::RC_SEND_MIDDLE,
        (WrKind::SendWithImm { .. }, Last) => op::RC_SEND_LAST_WITH_IMMEDIATE,
        (WrKind::SendWithInv { .. }, Last) => op::RC_SEND_LAST_WITH_INVALIDATE,
        (_, Last) => op::RC_SEND_LAST,
        (WrKind::SendWithImm { .. }, Only) => op::RC_SEND_ONLY_WITH_IMMEDIATE,
        (WrKind::SendWithInv { .. }, Only) => op::RC_SEND_ONLY_WITH_INVALIDATE,
        (_, Only) => op::RC_SEND_ONLY,
    };
    t | low
}

fn emit_request<M: HostMemory>(
    q: &mut Qp,
    sh: &mut EngineShared<M>,
    now: Nanos,
    idx: usize,
    buf: &mut [u8],
) -> Option<Transmit> {
    start_wqe(q, idx);
    let w = q.sq.wqes[idx];
    let i = q.req.psn.distance(w.first_psn);
    if i < 0 || i as u32 >= w.npkts {
        // Cannot happen if the completer positioned us right; fail the WR rather than panic.
        fail_wqe(q, sh, idx, WcStatus::LocQpOpErr);
        return None;
    }
    let i = i as u32;
    let (dst, dest_qp) = match destination(q, sh, &w) {
        Ok(d) => d,
        Err(Some(status)) => {
            fail_wqe(q, sh, idx, status);
            return None;
        }
        Err(None) => return None,
    };
    let pos = position(i, w.npkts);
    let offset = i * q.mtu;
    let (mut h, payload_len, consumes) = request_headers(q, &w, dest_qp, i, pos);
    set_ack_req(q, &w, &mut h, pos.ends());
    let Ok(hl) = h.emit(buf) else {
        sh.counters.tx_errors += 1;
        fail_wqe(q, sh, idx, WcStatus::LocQpOpErr);
        return None;
    };
    if payload_len > 0 && !copy_payload(q, sh, &w, offset, &mut buf[hl..hl + payload_len as usize]) {
        fail_wqe(q, sh, idx, WcStatus::LocProtErr);
        return None;
    }
    let len = seal(q, sh, idx, dst, buf, hl, payload_len as usize)?;
    advance(q, sh, now, idx, consumes, pos.ends());
    Some(Transmit { dst, src_port: q.sport, flow_label: q.flow_label, len, tos: 0 })
}

/// The short path's test: the WQE at `idx` is a one-packet RC SEND or RDMA WRITE (with or
/// without immediate) and the requester stands at its PSN — the common case, built by
/// [`emit_only`] in straight-line code. Anything else (multi-packet messages, READ, atomics,
/// UC, UD, XRC, a QP without a peer yet) takes [`emit_request`].
#[inline]
fn short_request<M>(q: &Qp, sh: &EngineShared<M>, idx: usize) -> Option<OnlyRequest> {
    let w = &q.sq.wqes[idx];
    if !sh.short_paths_on()
        || q.ty != QpType::Rc
        || w.len > q.mtu
        || q.dest.is_none()
        || (w.npkts != 0 && w.first_psn != q.req.psn)
    {
        return None;
    }
    match w.kind {
        WrKind::Send => Some(OnlyRequest::Send),
        WrKind::SendWithImm { imm_data } => Some(OnlyRequest::SendImm { imm: imm_to_wire(imm_data) }),
        WrKind::RdmaWrite { remote_addr, rkey } => Some(OnlyRequest::Write { va: remote_addr, rkey, len: w.len }),
        WrKind::RdmaWriteWithImm { remote_addr, rkey, imm_data } => {
            Some(OnlyRequest::WriteImm { va: remote_addr, rkey, len: w.len, imm: imm_to_wire(imm_data) })
        }
        _ => None,
    }
}

/// The short path (see [`short_request`]): the packet [`emit_request`] would build for this
/// WQE, byte for byte, with its headers written by [`emit_rc_only`], the payload read from the
/// inline copy or through a single SGE's one lkey check, and the same failures (a bad lkey
/// fails the WR with LOC_PROT_ERR, an unaddressable peer with LOC_QP_OP_ERR).
fn emit_only<M: HostMemory>(
    q: &mut Qp,
    sh: &mut EngineShared<M>,
    now: Nanos,
    idx: usize,
    only: OnlyRequest,
    buf: &mut [u8],
) -> Option<Transmit> {
    let psn = q.req.psn;
    // start_wqe and set_ack_req for a one-packet message: AckReq on, the count restarts.
    let w = &mut q.sq.wqes[idx];
    if w.npkts == 0 {
        w.first_psn = psn;
        w.npkts = 1;
    }
    q.req.noack_pkts = 0;
    let w = &q.sq.wqes[idx];
    let solicited = w.flags.contains(SendFlags::SOLICITED) && !matches!(only, OnlyRequest::Write { .. });
    let Some(hl) = emit_rc_only(buf, only, solicited, q.attr.dest_qp_num, psn) else {
        sh.counters.tx_errors += 1;
        fail_wqe(q, sh, idx, WcStatus::LocQpOpErr);
        return None;
    };
    let len = w.len as usize;
    if len > 0 {
        let out = &mut buf[hl..hl + len];
        let copied = if w.inline {
            out.copy_from_slice(q.sq.inline_of(w));
            true
        } else if let [s] = q.sq.sges_of(w) {
            // One SGE (the usual case) holds the whole payload: one lkey check, one read.
            s.length as usize >= len
                && match sh.keys.check_lkey(s.lkey, q.pd, s.addr, len as u64, AccessFlags::EMPTY) {
                    Ok(r) => sh.mem.read(r.host, out).is_ok(),
                    Err(_) => false,
                }
        } else {
            gather(sh, q.pd, q.sq.sges_of(w), 0, out)
        };
        if !copied {
            fail_wqe(q, sh, idx, WcStatus::LocProtErr);
            return None;
        }
    }
    let dst = q.dest?;
    let total = seal(q, sh, idx, dst, buf, hl, len)?;
    // `advance` for one RC packet that ends a SEND or WRITE: the WQE waits for its ACK.
    let resend = psn.before(q.req.high_psn);
    if resend {
        sh.counters.retransmitted_pkts += 1;
    }
    q.req.win.on_send(now, psn, 1, resend, &mut sh.counters);
    q.req.psn = psn.add(1);
    if q.req.psn.after(q.req.high_psn) {
        q.req.high_psn = q.req.psn;
    }
    q.req.next += 1;
    q.sq.wqes[idx].state = WqeState::Sent;
    if q.req.retx_at.is_none() {
        q.req.retx_at = q.req.win.arm(now, super::timer::ack_timeout_nanos(q.attr.timeout));
    }
    sh.short_path_taken();
    Some(Transmit { dst, src_port: q.sport, flow_label: q.flow_label, len: total, tos: 0 })
}

/// Completes a request packet whose headers (`hl` bytes) and payload are in `buf`: pad and
/// ICRC for the flow to `dst` from the QP's source port; its total length. A peer the device
/// cannot address fails the WR (LOC_QP_OP_ERR); either failure is counted in `tx_errors`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn seal<M>(
    q: &mut Qp,
    sh: &mut EngineShared<M>,
    idx: usize,
    dst: IpAddr,
    buf: &mut [u8],
    hl: usize,
    payload_len: usize,
) -> Option<usize> {
    let Some(ip) = sh.tx_ip(dst) else {
        sh.counters.tx_errors += 1;
        fail_wqe(q, sh, idx, WcStatus::LocQpOpErr);
        return None;
    };
    let flow = sh.icrc_tx.get(&ip, q.sport, ROCEV2_PORT);
    let Ok(len) = finish_flow(buf, hl, payload_len, &flow) else {
        sh.counters.tx_errors += 1;
        return None;
    };
    Some(len)
}

/// At a WQE's first packet: its first PSN and packet count.
#[inline]
fn start_wqe(q: &mut Qp, idx: usize) {
    let (mtu, ty, psn) = (q.mtu, q.ty, q.req.psn);
    let w = &mut q.sq.wqes[idx];
    if w.npkts == 0 {
        w.first_psn = psn;
        w.npkts = match w.kind {
            WrKind::AtomicCmpSwp { .. }
            | WrKind::AtomicFetchAdd { .. }
            | WrKind::AtomicWrite { .. }
            | WrKind::Flush { .. } => 1,
            _ if ty == QpType::Ud => 1,
            _ => npkts_for(w.len, mtu),
        };
        q.req.noack_pkts = 0;
    }
}

/// Where the WQE's packets go: the address handle's address and QPN (UD) or the connected
/// peer. `Err(Some(status))` fails the WR; `Err(None)` sends nothing yet.
#[inline]
fn destination<M>(q: &Qp, sh: &EngineShared<M>, w: &SendWqe) -> Result<(IpAddr, Qpn), Option<WcStatus>> {
    match (q.ty, w.ud) {
        (QpType::Ud, Some(u)) => match sh.ahs.get(u.ah) {
            Some(ah) => Ok((ah.dst, u.remote_qpn)),
            None => Err(Some(WcStatus::LocQpOpErr)),
        },
        _ => match q.dest {
            Some(d) => Ok((d, q.attr.dest_qp_num)),
            None => Err(None),
        },
    }
}

/// The headers of packet `i` (at position `pos`) of the WQE, its payload length and how many
/// PSNs it consumes (a READ request consumes one per response packet).
#[inline]
fn request_headers(q: &Qp, w: &SendWqe, dest_qp: Qpn, i: u32, pos: Position) -> (Headers, u32, u32) {
    let offset = i * q.mtu;
    let t = opcode_base(q.ty);
    let mut h = Headers { bth: BthRepr { dest_qp, psn: q.req.psn, ..BthRepr::default() }, ..Headers::default() };
    if q.ty == QpType::XrcSend {
        // Every XRC request names the target's SRQ (IBTA A14: XRCETH on all request packets).
        h.xrceth = Some(XrcEthRepr { srqn: w.xrc_srqn });
    }
    let mut payload_len = 0u32;
    let mut consumes = 1u32;
    let ends = pos.ends();
    match w.kind {
        WrKind::RdmaRead { remote_addr, rkey } => {
            h.bth.opcode = t | op::RC_RDMA_READ_REQUEST;
            h.reth = Some(RethRepr {
                va: remote_addr.wrapping_add(offset as u64),
                rkey,
                dma_len: w.len.saturating_sub(offset),
            });
            consumes = w.npkts - i;
        }
        WrKind::AtomicCmpSwp { remote_addr, rkey, compare, swap } => {
            h.bth.opcode = t | op::RC_COMPARE_SWAP;
            h.atomic_eth = Some(AtomicEthRepr { va: remote_addr, rkey, swap_add: swap, compare });
        }
        WrKind::AtomicFetchAdd { remote_addr, rkey, add } => {
            h.bth.opcode = t | op::RC_FETCH_ADD;
            h.atomic_eth = Some(AtomicEthRepr { va: remote_addr, rkey, swap_add: add, compare: 0 });
        }
        WrKind::AtomicWrite { remote_addr, rkey, .. } => {
            h.bth.opcode = op::RC_ATOMIC_WRITE;
            h.reth = Some(RethRepr { va: remote_addr, rkey, dma_len: 8 });
            payload_len = 8;
        }
        WrKind::Flush { remote_addr, rkey, len, placement, level } => {
            h.bth.opcode = op::RC_FLUSH;
            h.feth = Some(FethRepr { placement, level });
            h.reth = Some(RethRepr { va: remote_addr, rkey, dma_len: len });
        }
        ref k => {
            h.bth.opcode = data_opcode(t, k, pos);
            payload_len = (w.len - offset).min(q.mtu);
            if let (
                WrKind::RdmaWrite { remote_addr, rkey } | WrKind::RdmaWriteWithImm { remote_addr, rkey, .. },
                true,
            ) = (k, pos.starts())
            {
                h.reth = Some(RethRepr { va: *remote_addr, rkey: *rkey, dma_len: w.len });
            }
            match k {
                WrKind::SendWithImm { imm_data } | WrKind::RdmaWriteWithImm { imm_data, .. } if ends => {
                    h.immdt = Some(ImmDtRepr { value: imm_to_wire(*imm_data) });
                }
                WrKind::SendWithInv { invalidate_rkey } if ends => {
                    h.ieth = Some(IethRepr { rkey: *invalidate_rkey });
                }
                _ => {}
            }
            if let Some(u) = w.ud {
                // Q_Key rule: a WR Q_Key with the high bit set means "use the QP's own".
                let qkey = if u.remote_qkey & 0x8000_0000 != 0 { q.attr.qkey } else { u.remote_qkey };
                h.deth = Some(DethRepr { qkey, src_qp: q.qpn });
            }
            h.bth.solicited = ends && w.flags.contains(SendFlags::SOLICITED) && !matches!(k, WrKind::RdmaWrite { .. });
        }
    }
    (h, payload_len, consumes)
}

/// AckReq policy (RC): on a message's last packet, on READ/atomic requests and every
/// `SendWindow::ack_every()`th packet (half the window, at most 64).
#[inline]
fn set_ack_req(q: &mut Qp, w: &SendWqe, h: &mut Headers, ends: bool) {
    q.req.noack_pkts += 1;
    h.bth.ack_req = q.ty.is_reliable() && (ends || w.is_rd_atomic() || q.req.noack_pkts >= q.req.win.ack_every());
    if h.bth.ack_req {
        q.req.noack_pkts = 0;
    }
}

/// Copies the packet's payload (message offset `offset`) into `out`: from the inline copy, or
/// gathered from host memory through the WQE's SGEs. False on a bad lkey.
#[inline]
fn copy_payload<M: HostMemory>(q: &Qp, sh: &EngineShared<M>, w: &SendWqe, offset: u32, out: &mut [u8]) -> bool {
    if let WrKind::AtomicWrite { value, .. } = w.kind {
        out.copy_from_slice(&value[..out.len()]);
        true
    } else if w.inline {
        let src = q.sq.inline_of(w);
        out.copy_from_slice(&src[offset as usize..offset as usize + out.len()]);
        true
    } else {
        gather(sh, q.pd, q.sq.sges_of(w), offset as u64, out)
    }
}

/// After a packet went out: the next PSN, the retransmission count, the WQE's state when its
/// last packet left (RC: sent, waiting for its ACK; UC/UD: done) and the ACK timer.
#[inline]
fn advance<M>(q: &mut Qp, sh: &mut EngineShared<M>, now: Nanos, idx: usize, consumes: u32, ends: bool) {
    let resend = q.req.psn.before(q.req.high_psn);
    if resend {
        sh.counters.retransmitted_pkts += 1;
    }
    if q.ty.is_reliable() {
        q.req.win.on_send(now, q.req.psn, consumes, resend, &mut sh.counters);
    }
    q.req.psn = q.req.psn.add(consumes);
    if q.req.psn.after(q.req.high_psn) {
        q.req.high_psn = q.req.psn;
    }
    let finished = match q.sq.wqes[idx].kind {
        WrKind::RdmaRead { .. }
        | WrKind::AtomicCmpSwp { .. }
        | WrKind::AtomicFetchAdd { .. }
        | WrKind::AtomicWrite { .. }
        | WrKind::Flush { .. } => true,
        _ => ends,
    };
    if finished {
        q.req.next += 1;
        let wm = &mut q.sq.wqes[idx];
        if wm.is_rd_atomic() && !wm.rd_counted {
            wm.rd_counted = true;
            q.req.rd_atomic_out += 1;
        }
        if q.ty.is_reliable() {
            wm.state = WqeState::Sent;
        } else {
            // UC and UD complete once sent.
            wm.state = WqeState::Done;
            comp::complete_ready(q, sh);
        }
    }
    if q.ty.is_reliable() && q.req.retx_at.is_none() {
        q.req.retx_at = q.req.win.arm(now, super::timer::ack_timeout_nanos(q.attr.timeout));
    }
}
