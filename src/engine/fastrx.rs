//! The responder's short path: a one-packet RC SEND or RDMA WRITE (with or without immediate)
//! at the expected PSN of an RC QP in RTS, taken from the packet's fixed layout
//! ([`wire::short::parse_rc_only`]) to the receive completion and the ACK in straight-line
//! code. [`take`] decides first, without changing anything, whether the general path
//! (`recv::check_packet`, `resp::handle_request`) would reach the same execution with nothing
//! else to do on the way — an ICRC that verifies, the partition, the QP's type, state and peer,
//! no congestion mark, the opcode in sequence, the access the QP grants, a payload of at most
//! one MTU, a receive WQE on the QP's own queue when one is needed — and runs it only then;
//! otherwise the general path judges the packet from the start. From that point on it fails
//! as `resp::execute` does, through the same `resp::report`.

use super::qp::{InMsg, Qp};
use super::resp::{self, RespError, ACK_OK};
use super::shared::EngineShared;
use super::types::*;
use crate::wire;
use crate::wire::icrc::{IpFields, ROCEV2_PORT};
use crate::wire::short::{OnlyIn, OnlyRequest};

/// Whether the packet passes the general receive checks the short path relies on: ICRC (a
/// mismatch of any kind, even one `V4NoId` would accept and count, goes the general way) and
/// the partition.
#[inline]
pub(crate) fn packet_ok(d: &Datagram<'_>, r: &OnlyIn<'_>) -> bool {
    if r.pkey & 0x7FFF != 0x7FFF {
        return false;
    }
    let covered = &d.payload[..d.payload.len() - wire::icrc::ICRC_LEN];
    let icrc = match d.icrc {
        IcrcCheck::Full(ip) => wire::icrc::icrc(&ip, d.src_port, ROCEV2_PORT, covered),
        IcrcCheck::V4NoId { src, dst } => {
            wire::icrc::icrc(&IpFields::v4_df(src.into(), dst.into()), d.src_port, ROCEV2_PORT, covered)
        }
        IcrcCheck::Hashed { icrc, .. } => icrc,
    };
    icrc == r.icrc
}

/// Whether the QP takes the packet on the short path (nothing changed yet).
#[inline]
pub(crate) fn qp_takes(q: &Qp, d: &Datagram<'_>, r: &OnlyIn<'_>) -> bool {
    if q.ty != QpType::Rc
        || q.state != QpState::Rts
        || q.dest != Some(d.src)
        || r.psn != q.resp.epsn
        || q.resp.msg != InMsg::None
        || r.payload.len() > q.mtu as usize
    {
        return false;
    }
    let needs_wqe = match r.req {
        OnlyRequest::Send | OnlyRequest::SendImm { .. } => true,
        OnlyRequest::Write { .. } => false,
        OnlyRequest::WriteImm { .. } => true,
    };
    if !matches!(r.req, OnlyRequest::Send | OnlyRequest::SendImm { .. })
        && !q.attr.qp_access_flags.contains(AccessFlags::REMOTE_WRITE)
    {
        return false;
    }
    // A receive WQE from the QP's own queue (an SRQ's limit event and an RNR NAK go the
    // general way).
    !needs_wqe || (q.srq.is_none() && (q.resp.have_wqe || q.rq.as_ref().is_some_and(|rq| rq.len() > 0)))
}

/// Executes the packet [`qp_takes`] accepted: as `resp::rc_receive` and `resp::execute` do for
/// it, with the same outcome on failure.
#[inline(always)]
pub(crate) fn execute<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, r: &OnlyIn<'_>) {
    q.resp.nak_sent_for_gap = false;
    let outcome = match r.req {
        OnlyRequest::Send => send(q, sh, r, None),
        OnlyRequest::SendImm { imm } => send(q, sh, r, Some(imm)),
        OnlyRequest::Write { va, rkey, len } => write(q, sh, r, va, rkey, len, None),
        OnlyRequest::WriteImm { va, rkey, len, imm } => write(q, sh, r, va, rkey, len, Some(imm)),
    };
    if let Err(e) = outcome {
        resp::report(q, sh, e, r.psn);
        return;
    }
    q.resp.msn = q.resp.msn.next();
    q.resp.epsn = r.psn.next();
    if r.ack_req {
        resp::queue_ack(q, ACK_OK, r.psn);
    }
    sh.short_path_taken();
}

fn send<M: HostMemory>(
    q: &mut Qp,
    sh: &mut EngineShared<M>,
    r: &OnlyIn<'_>,
    imm: Option<u32>,
) -> Result<(), RespError> {
    // `qp_takes` saw a WQE on the QP's own queue.
    resp::take_wqe(q, sh);
    let n = r.payload.len();
    resp::check_wqe_room(&q.resp.wqe, 0, n)?;
    if n > 0 {
        let placed = match q.resp.wqe.sges.as_slice() {
            // One SGE (the usual receive) takes the payload with one lkey check.
            [s] => match sh.keys.check_lkey(s.lkey, q.pd, s.addr, n as u64, AccessFlags::LOCAL_WRITE) {
                Ok(h) => sh.mem.write(h.host, r.payload).is_ok(),
                Err(_) => false,
            },
            sges => super::dma::scatter(sh, q.pd, sges, 0, r.payload),
        };
        if !placed {
            return Err(RespError::RemoteOp);
        }
    }
    let mut wc = WorkCompletion { opcode: WcOpcode::Recv, byte_len: n as u32, ..Default::default() };
    if let Some(imm) = imm {
        wc.wc_flags = WcFlags::WITH_IMM;
        wc.imm_data = resp::wire_to_imm(imm);
    }
    resp::finish_recv(q, sh, wc, r.solicited);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn write<M: HostMemory>(
    q: &mut Qp,
    sh: &mut EngineShared<M>,
    r: &OnlyIn<'_>,
    va: u64,
    rkey: u32,
    dma_len: u32,
    imm: Option<u32>,
) -> Result<(), RespError> {
    // The RETH's range, checked once (a zero-length WRITE checks no key, IBTA 9.7.4.1.3); the
    // general path checks this packet's part of it again, which for an ONLY packet that
    // carries all of it is the same check.
    let host = resp::check_rkey(sh, q, rkey, va, dma_len as u64, AccessFlags::REMOTE_WRITE)?;
    let n = r.payload.len() as u32;
    if n != dma_len {
        sh.counters.length_errors += 1;
        return Err(RespError::InvalidRequest);
    }
    if imm.is_some() {
        // `qp_takes` saw a WQE on the QP's own queue.
        resp::take_wqe(q, sh);
    }
    if n > 0 {
        sh.mem.write(host, r.payload).map_err(|_| RespError::RemoteAccess)?;
    }
    if let Some(imm) = imm {
        let wc = WorkCompletion {
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: dma_len,
            imm_data: resp::wire_to_imm(imm),
            wc_flags: WcFlags::WITH_IMM,
            ..Default::default()
        };
        resp::finish_recv(q, sh, wc, r.solicited);
    }
    Ok(())
}
