//! Responder (rxe_resp.c): PSN check, opcode-sequence check, access checks, receive-WQE
//! consumption (RQ or SRQ) with RNR NAK, RDMA WRITE/READ, atomics with responder resources
//! for duplicates, ACK coalescing and MSN; UC and UD receive.
//!
//! Each check is a small function returning a typed [`RespError`]; [`report`] is the ONE
//! place that maps an error to its AETH NAK code, the receive completion status and the QP
//! consequence. Every check runs before any byte reaches host memory.

use std::net::IpAddr;

use super::comp::enter_error;
use super::dma::scatter;
use super::mr::KeyError;
use super::qp::{opcode_base, InMsg, Qp, RdRes, ReadJob, RespOut};
use super::shared::EngineShared;
use super::srq::TakenWqe;
use super::types::*;
use crate::wire::aeth::{AethRepr, CreditCode, NakCode, RnrTimer, Syndrome};
use crate::wire::atomic_ack_eth::AtomicAckEthRepr;
use crate::wire::bth::BthRepr;
use crate::wire::feth::{LEVEL_MR, PLACEMENT_GLOBAL, PLACEMENT_PERSISTENT};
use crate::wire::icrc::{IpFields, ROCEV2_PORT};
use crate::wire::opcode::{op, OpKind, Position};
use crate::wire::packet::{emit_ack, finish_flow};
use crate::wire::short::emit_read_response;
use crate::wire::{Headers, Parsed, Psn};

/// Why the responder refuses a request.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RespError {
    /// No receive WQE for a message that needs one.
    RnrNoWqe,
    /// Opcode out of sequence, not enabled on the QP, or a malformed length.
    InvalidRequest,
    /// The SEND does not fit the receive WQE.
    LengthError,
    /// R_Key, PD, bounds or access failure.
    RemoteAccess,
    /// A receive WQE whose SGEs cannot take the data (bad lkey), or an invalidation that
    /// failed.
    RemoteOp,
    /// Not executed and not answered (responder resources exhausted): the requester retries.
    Drop,
}

pub(crate) const ACK_OK: Syndrome = Syndrome::Ack { credits: CreditCode::UNLIMITED };

pub(crate) fn wire_to_imm(v: u32) -> u32 {
    u32::from_ne_bytes(v.to_be_bytes())
}

/// One request packet for this QP (all transports).
pub(crate) fn handle_request<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, d: &Datagram<'_>, p: &Parsed<'_>) {
    if !matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe) {
        sh.counters.bad_state_drops += 1;
        return;
    }
    if q.state == QpState::Rtr && !q.resp.comm_est_sent {
        q.resp.comm_est_sent = true;
        sh.async_event(AsyncEventType::CommEst, AsyncElement::Qp(q.qpn));
    }
    match q.ty {
        QpType::Ud => ud_receive(q, sh, d, p),
        QpType::Uc => uc_receive(q, sh, p),
        QpType::Rc | QpType::XrcRecv => rc_receive(q, sh, p),
        // An initiator has no responder (recv::check_qp keeps requests away from it).
        QpType::XrcSend => sh.counters.opcode_errors += 1,
    }
}

/// XRC target: binds the QP to the XRC SRQ the request's XRCETH names — that SRQ's receive
/// WQEs, its PD (for R_Key checks) and its CQ — after checking it is an XRC SRQ of the QP's
/// own domain (IBTA A14: an XRCETH naming anything else is an invalid request). A message
/// keeps the SRQ its first packet named.
fn bind_xrc_srq<M>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) -> Result<(), RespError> {
    let srqn = p.headers.xrceth.map_or(0, |x| x.srqn);
    let target = sh.srqs.get(srqn).and_then(|s| s.xrc.filter(|x| Some(x.xrcd) == q.xrcd).map(|x| (s.pd, x.cq)));
    let Some((pd, cq)) = target else {
        sh.counters.xrc_srq_errors += 1;
        return Err(RespError::InvalidRequest);
    };
    if q.resp.msg != InMsg::None && q.srq != Some(srqn) {
        sh.counters.xrc_srq_errors += 1;
        return Err(RespError::InvalidRequest);
    }
    q.srq = Some(srqn);
    q.pd = pd;
    q.recv_cq = cq;
    Ok(())
}

fn rc_receive<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) {
    let psn = p.headers.bth.psn;
    let d = psn.distance(q.resp.epsn);
    if d > 0 {
        sh.counters.psn_seq_errs += 1;
        if !q.resp.nak_sent_for_gap {
            q.resp.nak_sent_for_gap = true;
            let e = q.resp.epsn;
            queue_ack(q, Syndrome::Nak(NakCode::PsnSequenceError), e);
        }
        return;
    }
    if d < 0 {
        sh.counters.duplicate_requests += 1;
        // A duplicate is answered in the domain of the SRQ it names (READs are re-checked
        // against its PD); one naming no SRQ of ours is dropped (counted).
        if q.ty == QpType::XrcRecv && q.resp.msg == InMsg::None && bind_xrc_srq(q, sh, p).is_err() {
            return;
        }
        duplicate(q, sh, p);
        return;
    }
    q.resp.nak_sent_for_gap = false;
    if q.ty == QpType::XrcRecv {
        if let Err(e) = bind_xrc_srq(q, sh, p) {
            report(q, sh, e, psn);
            return;
        }
    }
    match execute(q, sh, p) {
        Ok(()) => {}
        Err(e) => report(q, sh, e, psn),
    }
}

/// The one place responder errors become wire NAKs, completion statuses and QP state.
pub(crate) fn report<M>(q: &mut Qp, sh: &mut EngineShared<M>, e: RespError, psn: Psn) {
    let (nak, wc_status, event) = match e {
        RespError::Drop => return,
        RespError::RnrNoWqe => {
            sh.counters.rnr_naks_sent += 1;
            let t = RnrTimer::new(q.attr.min_rnr_timer);
            queue_ack(q, Syndrome::RnrNak { timer: t }, psn);
            return;
        }
        RespError::InvalidRequest => (NakCode::InvalidRequest, WcStatus::RemInvReqErr, AsyncEventType::QpReqErr),
        RespError::LengthError => (NakCode::InvalidRequest, WcStatus::LocLenErr, AsyncEventType::QpReqErr),
        RespError::RemoteAccess => (NakCode::RemoteAccessError, WcStatus::RemAccessErr, AsyncEventType::QpAccessErr),
        RespError::RemoteOp => (NakCode::RemoteOperationalError, WcStatus::LocProtErr, AsyncEventType::QpFatal),
    };
    sh.counters.naks_sent += 1;
    queue_ack(q, Syndrome::Nak(nak), psn);
    // IBTA 9.9.3: these are fatal to the responder's QP: the receive WQE in use completes
    // with the error, the rest flush.
    if q.resp.have_wqe {
        q.resp.have_wqe = false;
        let wc = WorkCompletion {
            wr_id: q.resp.wqe.wr_id,
            status: wc_status,
            opcode: WcOpcode::Recv,
            qp_num: q.qpn,
            ..WorkCompletion::default()
        };
        sh.push_wc(q.recv_cq, wc, false);
    }
    q.resp.msg = InMsg::None;
    sh.async_event(event, AsyncElement::Qp(q.qpn));
    enter_error(q, sh);
}

/// Queues an ACK/NAK, coalescing with a plain ACK still waiting at the tail (a later ACK or
/// a NAK says everything it said).
pub(crate) fn queue_ack(q: &mut Qp, syndrome: Syndrome, psn: Psn) {
    let item = RespOut::Ack { psn, syndrome, msn: q.resp.msn };
    if let Some(RespOut::Ack { syndrome: s, .. }) = q.resp.out.back() {
        if s.is_ack() {
            if let Some(b) = q.resp.out.back_mut() {
                *b = item;
            }
            return;
        }
    }
    if q.resp.out.len() < q.resp.out_cap.max(1) {
        q.resp.out.push_back(item);
    }
}

/// Takes the next receive WQE (own RQ or SRQ) into `q.resp.wqe`.
pub(crate) fn take_wqe<M>(q: &mut Qp, sh: &mut EngineShared<M>) -> bool {
    if q.resp.have_wqe {
        return true;
    }
    let got = match q.srq {
        Some(id) => match sh.srqs.get_mut(id) {
            Some(s) => {
                let got = s.ring.pop_into(&mut q.resp.wqe);
                if got && s.limit != 0 && (s.ring.len() as u32) < s.limit {
                    s.limit = 0;
                    sh.events.push_back(Event::Async(AsyncEvent {
                        kind: AsyncEventType::SrqLimitReached,
                        element: AsyncElement::Srq(id),
                    }));
                }
                got
            }
            None => false,
        },
        None => q.rq.as_mut().is_some_and(|r| r.pop_into(&mut q.resp.wqe)),
    };
    q.resp.have_wqe = got;
    got
}

fn check_opcode_sequence(msg: InMsg, kind: OpKind, pos: Option<Position>) -> Result<(), RespError> {
    let starts = pos.is_some_and(|p| p.starts());
    let ok = match (msg, kind) {
        (InMsg::None, OpKind::Send | OpKind::Write) => starts,
        (InMsg::Send { .. }, OpKind::Send) | (InMsg::Write { .. }, OpKind::Write) => !starts,
        (
            InMsg::None,
            OpKind::ReadRequest | OpKind::CompareSwap | OpKind::FetchAdd | OpKind::AtomicWrite | OpKind::Flush,
        ) => true,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(RespError::InvalidRequest)
    }
}

fn check_qp_access(q: &Qp, kind: OpKind) -> Result<(), RespError> {
    let need = match kind {
        // ATOMIC WRITE needs remote write, as rxe (IBTA 1.5 leaves it to RDMA WRITE's rules);
        // FLUSH's rights depend on its FETH: `execute_flush` checks them.
        OpKind::Write | OpKind::AtomicWrite => AccessFlags::REMOTE_WRITE,
        OpKind::ReadRequest => AccessFlags::REMOTE_READ,
        OpKind::CompareSwap | OpKind::FetchAdd => AccessFlags::REMOTE_ATOMIC,
        _ => return Ok(()),
    };
    if q.ty == QpType::Uc && kind != OpKind::Write {
        return Err(RespError::InvalidRequest);
    }
    if q.attr.qp_access_flags.contains(need) {
        Ok(())
    } else {
        Err(RespError::InvalidRequest)
    }
}

/// FIRST/MIDDLE carry exactly one MTU, LAST/ONLY at most one.
fn check_payload_len(mtu: u32, pos: Option<Position>, len: usize) -> Result<(), RespError> {
    let ok = match pos {
        Some(Position::First | Position::Middle) => len as u32 == mtu,
        _ => len as u32 <= mtu,
    };
    if ok {
        Ok(())
    } else {
        Err(RespError::InvalidRequest)
    }
}

pub(crate) fn check_rkey<M>(
    sh: &EngineShared<M>,
    q: &Qp,
    rkey: u32,
    va: u64,
    len: u64,
    need: AccessFlags,
) -> Result<u64, RespError> {
    if len == 0 {
        // Zero-length transfers do not check the R_Key (IBTA 9.7.4.1.3).
        return Ok(0);
    }
    sh.keys.check_rkey(rkey, q.pd, q.qpn, va, len, need).map(|r| r.host).map_err(|_| RespError::RemoteAccess)
}

/// Checks that `len` bytes at message offset `off` fit the receive WQE.
pub(crate) fn check_wqe_room(wqe: &TakenWqe, off: u64, len: usize) -> Result<(), RespError> {
    if off + len as u64 > wqe.total_len() {
        Err(RespError::LengthError)
    } else {
        Ok(())
    }
}

/// Executes the expected-PSN request (RC and UC): the opcode-sequence and QP-access checks,
/// then the step of its kind. Updates ePSN/MSN and queues the response.
fn execute<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) -> Result<(), RespError> {
    let kind = p.info.kind;
    let psn = p.headers.bth.psn;
    check_opcode_sequence(q.resp.msg, kind, p.info.position).inspect_err(|_| sh.counters.opcode_errors += 1)?;
    check_qp_access(q, kind).inspect_err(|_| {
        if matches!(kind, OpKind::AtomicWrite | OpKind::Flush) {
            sh.counters.flush_atomic_write_naks += 1;
        }
    })?;
    match kind {
        OpKind::Send => execute_send(q, sh, p)?,
        OpKind::Write => execute_write(q, sh, p)?,
        // READ and atomic requests answer with their own responses and move ePSN themselves.
        OpKind::ReadRequest => return execute_read(q, sh, p),
        OpKind::CompareSwap | OpKind::FetchAdd => return execute_atomic(q, sh, p),
        OpKind::AtomicWrite => {
            let r = execute_atomic_write(q, sh, p);
            return counted(sh, r);
        }
        OpKind::Flush => {
            let r = execute_flush(q, sh, p);
            return counted(sh, r);
        }
        _ => return Err(RespError::InvalidRequest),
    }
    q.resp.epsn = psn.next();
    if q.ty.is_reliable() && p.headers.bth.ack_req {
        queue_ack(q, ACK_OK, psn);
    }
    Ok(())
}

/// One SEND packet: its payload goes to the receive WQE (taken at the first packet); the last
/// packet completes the WQE (with immediate data or an invalidated rkey).
fn execute_send<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) -> Result<(), RespError> {
    let pos = p.info.position;
    let ends = pos.is_some_and(|x| x.ends());
    check_payload_len(q.mtu, pos, p.payload.len()).inspect_err(|_| sh.counters.length_errors += 1)?;
    if pos.is_some_and(|x| x.starts()) && !take_wqe(q, sh) {
        return Err(RespError::RnrNoWqe);
    }
    let received = match q.resp.msg {
        InMsg::Send { received } => received,
        _ => 0,
    };
    check_wqe_room(&q.resp.wqe, received, p.payload.len())?;
    if !p.payload.is_empty() && !scatter(sh, q.pd, &q.resp.wqe.sges, received, p.payload) {
        return Err(RespError::RemoteOp);
    }
    let received = received + p.payload.len() as u64;
    q.resp.msg = InMsg::Send { received };
    if ends {
        let mut flags = WcFlags::EMPTY;
        let mut wc = WorkCompletion { opcode: WcOpcode::Recv, byte_len: received as u32, ..Default::default() };
        if let Some(imm) = p.headers.immdt {
            flags |= WcFlags::WITH_IMM;
            wc.imm_data = wire_to_imm(imm.value);
        }
        if let Some(ieth) = p.headers.ieth {
            // IBTA 9.9.3.1 class J, as rxe: a key that may not be invalidated (an MR, a type 1
            // window, a window of another QP, no object) fails the receive with REM_INV_REQ_ERR
            // and the QP; the object named stays as it was.
            sh.keys.invalidate(ieth.rkey, q.pd, Some(q.qpn)).map_err(|_| {
                sh.counters.invalidate_errors += 1;
                RespError::InvalidRequest
            })?;
            flags |= WcFlags::WITH_INV;
            wc.invalidated_rkey = ieth.rkey;
        }
        wc.wc_flags = flags;
        finish_recv(q, sh, wc, p.headers.bth.solicited);
        q.resp.msg = InMsg::None;
        q.resp.msn = q.resp.msn.next();
    }
    Ok(())
}

/// One RDMA WRITE packet: the RETH of the first packet is checked once, each payload goes to
/// the remote address; WRITE with immediate consumes a receive WQE at the end.
fn execute_write<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) -> Result<(), RespError> {
    let pos = p.info.position;
    let ends = pos.is_some_and(|x| x.ends());
    check_payload_len(q.mtu, pos, p.payload.len()).inspect_err(|_| sh.counters.length_errors += 1)?;
    let (va, rkey, dma_len, received) = match (q.resp.msg, p.headers.reth) {
        (InMsg::Write { va, rkey, dma_len, received }, _) => (va, rkey, dma_len, received),
        (InMsg::None, Some(r)) => {
            check_rkey(sh, q, r.rkey, r.va, r.dma_len as u64, AccessFlags::REMOTE_WRITE)?;
            (r.va, r.rkey, r.dma_len, 0)
        }
        _ => return Err(RespError::InvalidRequest),
    };
    let n = p.payload.len() as u32;
    let total = received.checked_add(n).ok_or(RespError::InvalidRequest)?;
    if total > dma_len || (ends && total != dma_len) {
        sh.counters.length_errors += 1;
        return Err(RespError::InvalidRequest);
    }
    if ends && p.headers.immdt.is_some() && !take_wqe(q, sh) {
        // Nothing of this packet is written, and the message state is left as the packet
        // found it, for its retry after the RNR NAK: a LAST's message still in progress, an
        // ONLY's none (its retry starts the message again).
        return Err(RespError::RnrNoWqe);
    }
    if n > 0 {
        let host = check_rkey(sh, q, rkey, va.wrapping_add(received as u64), n as u64, AccessFlags::REMOTE_WRITE)?;
        sh.mem.write(host, p.payload).map_err(|_| RespError::RemoteAccess)?;
    }
    q.resp.msg = InMsg::Write { va, rkey, dma_len, received: total };
    if ends {
        if let Some(imm) = p.headers.immdt {
            let wc = WorkCompletion {
                opcode: WcOpcode::RecvRdmaWithImm,
                byte_len: dma_len,
                imm_data: wire_to_imm(imm.value),
                wc_flags: WcFlags::WITH_IMM,
                ..Default::default()
            };
            finish_recv(q, sh, wc, p.headers.bth.solicited);
        }
        q.resp.msg = InMsg::None;
        q.resp.msn = q.resp.msn.next();
    }
    Ok(())
}

/// An RDMA READ request: checked, remembered as a responder resource, and queued as a READ
/// response job that `poll_out` sends packet by packet.
fn execute_read<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) -> Result<(), RespError> {
    let psn = p.headers.bth.psn;
    let r = p.headers.reth.ok_or(RespError::InvalidRequest)?;
    check_rkey(sh, q, r.rkey, r.va, r.dma_len as u64, AccessFlags::REMOTE_READ)?;
    if q.resp.out.len() + 1 >= q.resp.out_cap {
        return Err(RespError::Drop);
    }
    let n = r.dma_len.div_ceil(q.mtu).max(1);
    save_resource(q, RdRes::Read { first: psn, last: psn.add(n - 1) });
    q.resp.msn = q.resp.msn.next();
    let job = ReadJob::new(psn, r.va, r.rkey, r.dma_len, q.resp.msn);
    q.resp.out.push_back(RespOut::Read(job));
    q.resp.epsn = psn.add(n);
    Ok(())
}

/// An atomic request: executed once, its original value remembered (a duplicate replays it)
/// and queued as an atomic ACK.
fn execute_atomic<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) -> Result<(), RespError> {
    let psn = p.headers.bth.psn;
    let a = p.headers.atomic_eth.ok_or(RespError::InvalidRequest)?;
    if a.va % 8 != 0 {
        return Err(RespError::InvalidRequest);
    }
    let host = check_rkey(sh, q, a.rkey, a.va, 8, AccessFlags::REMOTE_ATOMIC)?;
    if q.resp.out.len() + 1 >= q.resp.out_cap {
        return Err(RespError::Drop);
    }
    let orig = if p.info.kind == OpKind::CompareSwap {
        sh.mem.atomic_cmp_swap(host, a.compare, a.swap_add)
    } else {
        sh.mem.atomic_fetch_add(host, a.swap_add)
    }
    .map_err(|_| RespError::RemoteAccess)?;
    save_resource(q, RdRes::Atomic { psn, orig });
    q.resp.msn = q.resp.msn.next();
    q.resp.out.push_back(RespOut::AtomicAck { psn, orig, msn: q.resp.msn });
    q.resp.epsn = psn.next();
    Ok(())
}

/// Counts a FLUSH or ATOMIC WRITE the responder refuses with a NAK.
fn counted<M>(sh: &mut EngineShared<M>, r: Result<(), RespError>) -> Result<(), RespError> {
    if matches!(r, Err(e) if e != RespError::Drop) {
        sh.counters.flush_atomic_write_naks += 1;
    }
    r
}

/// Queues the RDMA READ RESPONSE ONLY without payload that acknowledges an executed ATOMIC
/// WRITE or FLUSH, remembering it as a responder resource so a duplicate is answered again
/// and never executed twice.
fn answer_executed(q: &mut Qp, psn: Psn) {
    save_resource(q, RdRes::Executed { psn });
    q.resp.msn = q.resp.msn.next();
    q.resp.out.push_back(RespOut::EmptyRead { psn, msn: q.resp.msn });
    q.resp.epsn = psn.next();
}

/// An ATOMIC WRITE (IBTA 1.5 §9.4.7): 8 bytes of payload with a RETH of DMA length 8, to an
/// 8-byte aligned address the R_Key grants remote write on, stored as one unit. Misaligned or
/// wrong-length requests are invalid requests (as rxe); nothing is written before every
/// check passed.
fn execute_atomic_write<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) -> Result<(), RespError> {
    let psn = p.headers.bth.psn;
    let r = p.headers.reth.ok_or(RespError::InvalidRequest)?;
    let Ok(value) = <[u8; 8]>::try_from(p.payload) else {
        sh.counters.length_errors += 1;
        return Err(RespError::InvalidRequest);
    };
    if r.dma_len != 8 {
        sh.counters.length_errors += 1;
        return Err(RespError::InvalidRequest);
    }
    if r.va % 8 != 0 {
        return Err(RespError::InvalidRequest);
    }
    let host = check_rkey(sh, q, r.rkey, r.va, 8, AccessFlags::REMOTE_WRITE)?;
    // An MR whose IOVA and address differ modulo 8 maps an aligned VA to an unaligned host
    // address: that word cannot be stored atomically either.
    if host % 8 != 0 {
        return Err(RespError::InvalidRequest);
    }
    if q.resp.out.len() + 1 >= q.resp.out_cap {
        return Err(RespError::Drop);
    }
    sh.mem.atomic_store(host, u64::from_ne_bytes(value)).map_err(|_| RespError::RemoteAccess)?;
    answer_executed(q, psn);
    Ok(())
}

/// A FLUSH (IBTA 1.5 §9.4.6). The FETH must name a defined placement type and selectivity
/// level; the QP must allow the placement (`IBV_ACCESS_FLUSH_GLOBAL` / `_PERSISTENT` in its
/// access flags, else an invalid request, as rxe) and the R_Key must grant it over the RETH's
/// range, or over the whole region at the MR level (else a remote access error).
///
/// What a flush means here: requests execute in PSN order and every RDMA WRITE or ATOMIC
/// WRITE before the FLUSH has been copied into the process's memory by the time the FLUSH is
/// handled, so global visibility needs only a memory fence before the response. Persistence
/// is not offered: no memory region can be registered with `IBV_ACCESS_FLUSH_PERSISTENT`
/// (`reg_mr` refuses it), so a persistent FLUSH is refused by the R_Key check.
fn execute_flush<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) -> Result<(), RespError> {
    let psn = p.headers.bth.psn;
    let (Some(f), Some(r)) = (p.headers.feth, p.headers.reth) else {
        return Err(RespError::InvalidRequest);
    };
    if !f.is_valid() {
        return Err(RespError::InvalidRequest);
    }
    let mut need = AccessFlags::EMPTY;
    if f.placement & PLACEMENT_GLOBAL != 0 {
        need |= AccessFlags::FLUSH_GLOBAL;
    }
    if f.placement & PLACEMENT_PERSISTENT != 0 {
        need |= AccessFlags::FLUSH_PERSISTENT;
    }
    if !q.attr.qp_access_flags.contains(need) {
        return Err(RespError::InvalidRequest);
    }
    let checked = sh.keys.check_rkey(r.rkey, q.pd, q.qpn, r.va, u64::from(r.dma_len), need);
    match checked {
        Ok(_) => {}
        // The whole region is flushed: the RETH's range does not matter.
        Err(KeyError::Bounds) if f.level == LEVEL_MR => {}
        Err(_) => return Err(RespError::RemoteAccess),
    }
    if q.resp.out.len() + 1 >= q.resp.out_cap {
        return Err(RespError::Drop);
    }
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    answer_executed(q, psn);
    Ok(())
}

fn save_resource(q: &mut Qp, r: RdRes) {
    if q.resp.res.is_empty() {
        return;
    }
    let i = q.resp.res_next % q.resp.res.len();
    q.resp.res[i] = r;
    q.resp.res_next = i + 1;
}

pub(crate) fn finish_recv<M>(q: &mut Qp, sh: &mut EngineShared<M>, mut wc: WorkCompletion, solicited: bool) {
    wc.wr_id = q.resp.wqe.wr_id;
    wc.qp_num = q.qpn;
    if q.ty != QpType::Ud {
        wc.src_qp = q.attr.dest_qp_num;
    }
    q.resp.have_wqe = false;
    sh.push_wc(q.recv_cq, wc, solicited);
}

/// The PSN to ACK a duplicate SEND or WRITE at `dup` with. The IBA's duplicate-request rules
/// let it be the duplicate's own PSN or any later one the responder executed (kernel rxe's
/// responder takes the latest); we take the latest too, but stop short of the first RDMA
/// READ or atomic executed after the duplicate. Their responses may be what the requester
/// lost too, and an ACK past them tells it they arrived: kernel rxe's requester then completes
/// such a READ without its data (seen over a lossy link: rping's server echoed the previous
/// ping's text). Answered below them, the requester resends the READ or atomic, which
/// [`duplicate`] answers again.
fn duplicate_ack_psn(q: &Qp, dup: Psn) -> Psn {
    let latest = q.resp.epsn.sub(1);
    q.resp
        .res
        .iter()
        .filter_map(|x| match *x {
            RdRes::Read { first: s, .. } | RdRes::Atomic { psn: s, .. } | RdRes::Executed { psn: s } => Some(s),
            RdRes::Empty => None,
        })
        .filter(|s| s.after(dup) && !s.after(latest))
        .min_by_key(|s| s.distance(dup))
        .map_or(latest, |s| s.sub(1))
}

/// A request with a PSN we already executed (IBTA 9.9.2.2): SEND/WRITE are acknowledged
/// again, a READ is re-executed from its resource, an atomic replays its saved result.
fn duplicate<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) {
    let psn = p.headers.bth.psn;
    match p.info.kind {
        OpKind::Send | OpKind::Write => {
            queue_ack(q, ACK_OK, duplicate_ack_psn(q, psn));
        }
        OpKind::ReadRequest => {
            let Some(r) = p.headers.reth else { return };
            let Some((first, last)) = q.resp.res.iter().find_map(|x| match *x {
                RdRes::Read { first, last } if !psn.before(first) && !psn.after(last) => Some((first, last)),
                _ => None,
            }) else {
                return;
            };
            if check_rkey(sh, q, r.rkey, r.va, r.dma_len as u64, AccessFlags::REMOTE_READ).is_err() {
                return;
            }
            let job = ReadJob::new(psn, r.va, r.rkey, r.dma_len, q.resp.msn);
            // A reply for this READ still queued or in progress restarts from the requested
            // PSN instead of being joined by a second full copy: duplicated or repeated READ
            // requests must not multiply the response traffic (and starve what follows).
            let queued = q.resp.out.iter_mut().find_map(|o| match o {
                RespOut::Read(j) if !j.psn.before(first) && !j.psn.after(last.next()) => Some(j),
                _ => None,
            });
            if let Some(j) = queued {
                *j = ReadJob { msn: j.msn, ..job };
                return;
            }
            if q.resp.out.len() + 1 < q.resp.out_cap {
                q.resp.out.push_back(RespOut::Read(job));
            }
        }
        OpKind::AtomicWrite | OpKind::Flush => {
            // Answered again from the responder resource, never executed twice (an ATOMIC
            // WRITE replayed after a later write to the same word would undo that write).
            let done = q.resp.res.iter().any(|x| matches!(*x, RdRes::Executed { psn: s } if s == psn));
            if done && q.resp.out.len() < q.resp.out_cap {
                q.resp.out.push_back(RespOut::EmptyRead { psn, msn: q.resp.msn });
            }
        }
        OpKind::CompareSwap | OpKind::FetchAdd => {
            let saved = q.resp.res.iter().find_map(|x| match *x {
                RdRes::Atomic { psn: s, orig } if s == psn => Some(orig),
                _ => None,
            });
            if let Some(orig) = saved {
                if q.resp.out.len() < q.resp.out_cap {
                    q.resp.out.push_back(RespOut::AtomicAck { psn, orig, msn: q.resp.msn });
                }
            }
        }
        _ => {}
    }
}

/// UC: no ACKs; a PSN gap discards the message in progress until the next FIRST/ONLY.
fn uc_receive<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, p: &Parsed<'_>) {
    let psn = p.headers.bth.psn;
    let starts = p.info.position.is_some_and(|x| x.starts());
    if psn != q.resp.epsn || q.resp.uc_discard {
        if psn != q.resp.epsn {
            sh.counters.psn_seq_errs += 1;
        }
        if starts {
            q.resp.msg = InMsg::None;
            q.resp.uc_discard = false;
        } else {
            q.resp.msg = InMsg::None;
            q.resp.uc_discard = true;
            q.resp.epsn = psn.next();
            return;
        }
    }
    if starts && q.resp.msg != InMsg::None {
        // A new message while one was in progress (its LAST was lost in a gap-free way
        // cannot happen; be safe): drop the old one, keep the receive WQE.
        q.resp.msg = InMsg::None;
    }
    match execute(q, sh, p) {
        Ok(()) => {}
        Err(e) => {
            if e == RespError::RnrNoWqe {
                sh.counters.no_recv_wqe_drops += 1;
            }
            // UC errors drop the message silently; the receive WQE is reused.
            q.resp.msg = InMsg::None;
            q.resp.uc_discard = !p.info.position.is_some_and(|x| x.ends());
            q.resp.epsn = psn.next();
        }
    }
}

/// UD: DETH Q_Key check, one-packet messages, the 40-byte GRH area at the head of the
/// receive buffer (IPv4 header in bytes 20..40, or the IPv6 header), IBV_WC_GRH.
fn ud_receive<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, d: &Datagram<'_>, p: &Parsed<'_>) {
    let Some(deth) = p.headers.deth else {
        sh.counters.opcode_errors += 1;
        return;
    };
    if p.info.kind != OpKind::Send {
        sh.counters.opcode_errors += 1;
        return;
    }
    if deth.qkey != q.attr.qkey {
        sh.counters.qkey_violations += 1;
        return;
    }
    if p.payload.len() as u32 > q.mtu {
        sh.counters.length_errors += 1;
        return;
    }
    if !take_wqe(q, sh) {
        sh.counters.no_recv_wqe_drops += 1;
        return;
    }
    let grh = grh_bytes(d);
    let total = 40 + p.payload.len();
    let mut wc = WorkCompletion {
        opcode: WcOpcode::Recv,
        byte_len: total as u32,
        src_qp: deth.src_qp,
        wc_flags: WcFlags::GRH,
        sl: roce_l3_type(d),
        ..Default::default()
    };
    if let Some(imm) = p.headers.immdt {
        wc.imm_data = wire_to_imm(imm.value);
        wc.wc_flags |= WcFlags::WITH_IMM;
    }
    let fits = check_wqe_room(&q.resp.wqe, 0, total).is_ok();
    if !fits {
        wc.status = WcStatus::LocLenErr;
    } else if !scatter(sh, q.pd, &q.resp.wqe.sges, 0, &grh) || !scatter(sh, q.pd, &q.resp.wqe.sges, 40, p.payload) {
        wc.status = WcStatus::LocProtErr;
    }
    finish_recv(q, sh, wc, p.headers.bth.solicited);
}

/// `wc.sl` of a RoCEv2 UD receive: the L3 header type, as ConnectX (mlx5) reports it in that
/// field for RoCE: 2 = IPv4 (header in bytes 20..40 of the GRH area), 1 = IPv6. RoCE has no
/// SL on the wire (the IBTA RoCEv2 annex, A17.4.5.1, has the UD CQE carry the frame's L3 type
/// instead), so no reader loses information; UCX before 1.19 relies on it to find the
/// destination address of an IPv4 frame (otherwise it reads the GRH area as an IPv6 GID and
/// drops the datagram). The kernel's rxe reports 0, which readers that parse the GRH area
/// (rdma-core's own, UCX 1.19+) do not look at.
const ROCE_L3_IPV4: u8 = 2;
/// See [`ROCE_L3_IPV4`].
const ROCE_L3_IPV6: u8 = 1;

fn roce_l3_type(d: &Datagram<'_>) -> u8 {
    match (d.src, d.dst) {
        (IpAddr::V4(_), IpAddr::V4(_)) => ROCE_L3_IPV4,
        _ => ROCE_L3_IPV6,
    }
}

/// The 40 bytes rdma-core expects at the head of a UD receive buffer on RoCEv2.
fn grh_bytes(d: &Datagram<'_>) -> [u8; 40] {
    let mut g = [0u8; 40];
    let udp_len = 8 + d.payload.len();
    match (d.src, d.dst) {
        (IpAddr::V4(s), IpAddr::V4(t)) => {
            let (id, ff) = match d.icrc {
                IcrcCheck::Full(IpFields::V4 { id, flags_frag, .. }) => (id, flags_frag),
                _ => (0, crate::wire::icrc::IPV4_DF),
            };
            let h = &mut g[20..40];
            h[0] = 0x45;
            h[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
            h[4..6].copy_from_slice(&id.to_be_bytes());
            h[6..8].copy_from_slice(&ff.to_be_bytes());
            h[8] = 64;
            h[9] = 17;
            h[12..16].copy_from_slice(&s.octets());
            h[16..20].copy_from_slice(&t.octets());
            let mut sum = 0u32;
            for c in h.chunks(2) {
                sum += u16::from_be_bytes([c[0], c[1]]) as u32;
            }
            while sum >> 16 != 0 {
                sum = (sum & 0xFFFF) + (sum >> 16);
            }
            h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        }
        (s, t) => {
            let s6 = match s {
                IpAddr::V6(a) => a,
                IpAddr::V4(a) => a.to_ipv6_mapped(),
            };
            let t6 = match t {
                IpAddr::V6(a) => a,
                IpAddr::V4(a) => a.to_ipv6_mapped(),
            };
            g[0] = 0x60;
            g[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
            g[6] = 17;
            g[7] = 64;
            g[8..24].copy_from_slice(&s6.octets());
            g[24..40].copy_from_slice(&t6.octets());
        }
    }
    g
}

/// The responder's next outgoing packet (ACK, NAK, atomic ACK, READ response), if any.
#[must_use]
pub(crate) fn poll_out<M: HostMemory>(q: &mut Qp, sh: &mut EngineShared<M>, buf: &mut [u8]) -> Option<Transmit> {
    // Most calls find nothing to send (a busy QP is asked after each of its packets).
    if q.resp.out.is_empty() {
        return None;
    }
    let dst = q.dest?;
    let ip = sh.tx_ip(dst)?;
    // XRC responses use the XRC opcodes (and carry no XRCETH).
    let base = opcode_base(q.ty);
    loop {
        let item = *q.resp.out.front()?;
        let bth = BthRepr { dest_qp: q.attr.dest_qp_num, ..BthRepr::default() };
        let h = match item {
            RespOut::Ack { psn, syndrome, msn } => {
                // The common case, written without a whole `Headers` (see `emit_ack`).
                q.resp.out.pop_front();
                let bth = BthRepr { opcode: base | op::RC_ACKNOWLEDGE, psn, ..bth };
                let hl = emit_ack(&bth, &AethRepr { syndrome, msn }, buf).ok()?;
                return finish_out(q, sh, &ip, dst, buf, hl, 0);
            }
            RespOut::AtomicAck { psn, orig, msn } => {
                q.resp.out.pop_front();
                Headers {
                    bth: BthRepr { opcode: base | op::RC_ATOMIC_ACKNOWLEDGE, psn, ..bth },
                    aeth: Some(AethRepr { syndrome: ACK_OK, msn }),
                    atomic_ack_eth: Some(AtomicAckEthRepr { orig }),
                    ..Headers::default()
                }
            }
            RespOut::EmptyRead { psn, msn } => {
                q.resp.out.pop_front();
                Headers {
                    bth: BthRepr { opcode: base | op::RC_RDMA_READ_RESPONSE_ONLY, psn, ..bth },
                    aeth: Some(AethRepr { syndrome: ACK_OK, msn }),
                    ..Headers::default()
                }
            }
            RespOut::Read(mut job) => {
                // Headers in four or five word stores (`emit_read_response`), no `Headers`.
                let n = job.len.div_ceil(q.mtu).max(1);
                let i = job.psn.distance(job.first_psn).max(0) as u32;
                let (first, last) = (i == 0, i + 1 >= n);
                let opcode = base
                    | match (first, last) {
                        (true, true) => op::RC_RDMA_READ_RESPONSE_ONLY,
                        (true, false) => op::RC_RDMA_READ_RESPONSE_FIRST,
                        (false, true) => op::RC_RDMA_READ_RESPONSE_LAST,
                        (false, false) => op::RC_RDMA_READ_RESPONSE_MIDDLE,
                    };
                let aeth = (first || last).then_some((ACK_OK.encode(), job.msn.value()));
                let hl = emit_read_response(buf, opcode, bth.dest_qp, job.psn, aeth)?;
                let payload = job.left.min(q.mtu) as usize;
                let va = job.va.wrapping_add((job.len - job.left) as u64);
                // Re-checked per packet: the MR may have gone since the request.
                let host = check_rkey(sh, q, job.rkey, va, payload as u64, AccessFlags::REMOTE_READ);
                let ok = match host {
                    Ok(host) => payload == 0 || sh.mem.read(host, &mut buf[hl..hl + payload]).is_ok(),
                    Err(_) => false,
                };
                if !ok {
                    q.resp.out.pop_front();
                    report(q, sh, RespError::RemoteAccess, job.psn);
                    continue;
                }
                job.left -= payload as u32;
                job.psn = job.psn.next();
                if last {
                    q.resp.out.pop_front();
                } else if let Some(RespOut::Read(j)) = q.resp.out.front_mut() {
                    *j = job;
                }
                return finish_out(q, sh, &ip, dst, buf, hl, payload);
            }
        };
        let hl = h.emit(buf).ok()?;
        return finish_out(q, sh, &ip, dst, buf, hl, 0);
    }
}

/// Pads and hashes a response whose headers (`hl` bytes) and payload are in `buf`: the packet
/// `poll_out` returns.
#[inline]
fn finish_out<M>(
    q: &Qp,
    sh: &mut EngineShared<M>,
    ip: &IpFields,
    dst: IpAddr,
    buf: &mut [u8],
    hl: usize,
    payload: usize,
) -> Option<Transmit> {
    let flow = sh.icrc_tx.get(ip, q.sport, ROCEV2_PORT);
    let len = finish_flow(buf, hl, payload, &flow).ok()?;
    Some(Transmit { dst, src_port: q.sport, flow_label: q.flow_label, len, tos: 0 })
}
