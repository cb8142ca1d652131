//! Provider layer: C struct <-> engine type conversions, with the validation verbs documents
//! (bad masks, unknown opcodes, too many SGEs, NULL lists -> errno).
//!
//! Pure and safe: callers read C memory (the unsafe part, in `verbs.rs`) into plain references
//! and slices first; object pointers inside WRs (AH, MW, MR) are resolved through closures so
//! the rules here are unit-tested without live objects.

use crate::abi::*;
use libc::c_int;
use urxe::engine::{
    AccessFlags, AhAttr, AhId, CqId, GlobalRoute, Limits, MigState, MrId, Mtu, MwBind, MwId, PdId, QpAttr, QpAttrMask,
    QpCap, QpInitAttr, QpState, QpType, RecvWr, SendFlags, SendWr, Sge, SrqAttr, SrqId, UdDest, WcStatus,
    WorkCompletion, WrKind,
};

/// The most SGEs any WR may carry (the device limit); conversions use a stack buffer this big.
pub const MAX_SGE: usize = 32;
const _: () = assert!(MAX_SGE as u32 >= 32);

const EINVAL: i32 = libc::EINVAL;
const EOPNOTSUPP: i32 = libc::EOPNOTSUPP;

/// Validate a WR's `num_sge`/`sg_list` pair against the queue's `max_sge`; the count of SGEs
/// to read.
pub fn checked_sge_count(num_sge: c_int, sg_list_is_null: bool, max_sge: u32) -> Result<usize, i32> {
    let n = usize::try_from(num_sge).map_err(|_| EINVAL)?;
    if n > max_sge as usize || n > MAX_SGE {
        return Err(EINVAL);
    }
    if n > 0 && sg_list_is_null {
        return Err(EINVAL);
    }
    Ok(n)
}

/// SGEs that [`with_sge_buf`] keeps room for without clearing a `MAX_SGE` buffer.
const FEW_SGES: usize = 4;

/// Runs `f` with a conversion buffer with room for `n` SGEs (`n` ≤ [`MAX_SGE`], else it has
/// `MAX_SGE`): a small one for the usual few, so that a post does not clear the 512 bytes of
/// a `MAX_SGE` buffer for every WR (about 50 instructions per post, callgrind).
pub fn with_sge_buf<R>(n: usize, f: impl FnOnce(&mut [Sge]) -> R) -> R {
    if n <= FEW_SGES {
        f(&mut [Sge::default(); FEW_SGES])
    } else {
        f(&mut [Sge::default(); MAX_SGE])
    }
}

fn copy_sges<'a>(src: &[ibv_sge], buf: &'a mut [Sge]) -> Result<&'a [Sge], i32> {
    if src.len() > buf.len() {
        return Err(EINVAL);
    }
    for (d, s) in buf.iter_mut().zip(src) {
        *d = Sge { addr: s.addr, length: s.length, lkey: s.lkey };
    }
    Ok(&buf[..src.len()])
}

/// Object resolvers for pointers carried inside send WRs.
pub struct Resolve<'r> {
    pub ah: &'r dyn Fn(*mut ibv_ah) -> Option<AhId>,
    pub mw: &'r dyn Fn(*mut ibv_mw) -> Option<MwId>,
    pub mr: &'r dyn Fn(*mut ibv_mr) -> Option<MrId>,
}

/// Which opcodes each transport accepts (IBA 9.x / rxe's `rxe_wr_opcode_info`).
fn opcode_allowed(op: u32, qp_type: QpType) -> bool {
    let op = op as u64;
    match qp_type {
        QpType::Ud => matches!(op, IBV_WR_SEND | IBV_WR_SEND_WITH_IMM),
        QpType::Uc => matches!(
            op,
            IBV_WR_SEND
                | IBV_WR_SEND_WITH_IMM
                | IBV_WR_RDMA_WRITE
                | IBV_WR_RDMA_WRITE_WITH_IMM
                | IBV_WR_LOCAL_INV
                | IBV_WR_BIND_MW
                | IBV_WR_SEND_WITH_INV
        ),
        QpType::Rc | QpType::XrcSend => true,
        // A target has no send queue.
        QpType::XrcRecv => false,
    }
}

/// Decode the opcode-specific part of an `ibv_send_wr`.
pub fn wr_kind_from_c(wr: &ibv_send_wr, qp_type: QpType, r: &Resolve<'_>) -> Result<WrKind, i32> {
    // SAFETY of the union reads below: every member of these unions is plain integers/pointers,
    // so reading any member is defined; which one is meaningful follows `opcode`.
    let op = wr.opcode as u64;
    let known = matches!(op, IBV_WR_RDMA_WRITE..=IBV_WR_DRIVER1 | IBV_WR_ATOMIC_WRITE) || wr.opcode == IBV_WR_FLUSH;
    if !known {
        return Err(EINVAL);
    }
    if matches!(op, IBV_WR_TSO | IBV_WR_DRIVER1 | IBV_WR_ATOMIC_WRITE) || wr.opcode == IBV_WR_FLUSH {
        return Err(EOPNOTSUPP);
    }
    if !opcode_allowed(wr.opcode, qp_type) {
        return Err(EINVAL);
    }
    // SAFETY: union members are plain data (see above).
    let (imm, rdma, atomic, bind) = unsafe { (wr.imm.imm_data, wr.wr.rdma, wr.wr.atomic, wr.ext.bind_mw) };
    Ok(match op {
        IBV_WR_SEND => WrKind::Send,
        IBV_WR_SEND_WITH_IMM => WrKind::SendWithImm { imm_data: imm },
        IBV_WR_SEND_WITH_INV => WrKind::SendWithInv { invalidate_rkey: imm },
        IBV_WR_RDMA_WRITE => WrKind::RdmaWrite { remote_addr: rdma.remote_addr, rkey: rdma.rkey },
        IBV_WR_RDMA_WRITE_WITH_IMM => {
            WrKind::RdmaWriteWithImm { remote_addr: rdma.remote_addr, rkey: rdma.rkey, imm_data: imm }
        }
        IBV_WR_RDMA_READ => WrKind::RdmaRead { remote_addr: rdma.remote_addr, rkey: rdma.rkey },
        IBV_WR_ATOMIC_CMP_AND_SWP => WrKind::AtomicCmpSwp {
            remote_addr: atomic.remote_addr,
            rkey: atomic.rkey,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        IBV_WR_ATOMIC_FETCH_AND_ADD => {
            WrKind::AtomicFetchAdd { remote_addr: atomic.remote_addr, rkey: atomic.rkey, add: atomic.compare_add }
        }
        IBV_WR_LOCAL_INV => WrKind::LocalInv { invalidate_rkey: imm },
        IBV_WR_BIND_MW => {
            let access = AccessFlags(bind.bind_info.mw_access_flags);
            if access.unknown_bits() != 0 {
                return Err(EINVAL);
            }
            WrKind::BindMw(MwBind {
                mw: (r.mw)(bind.mw).ok_or(EINVAL)?,
                rkey: bind.rkey,
                mr: (r.mr)(bind.bind_info.mr).ok_or(EINVAL)?,
                addr: bind.bind_info.addr,
                length: bind.bind_info.length,
                access,
            })
        }
        _ => return Err(EINVAL),
    })
}

/// Convert one `ibv_send_wr` (not its `next`). `sges` is its `sg_list[..num_sge]`, read by the
/// caller after [`checked_sge_count`].
pub fn send_wr_from_c<'a>(
    wr: &ibv_send_wr,
    sges: &[ibv_sge],
    buf: &'a mut [Sge],
    qp_type: QpType,
    r: &Resolve<'_>,
) -> Result<SendWr<'a>, i32> {
    let kind = wr_kind_from_c(wr, qp_type, r)?;
    let flags = SendFlags(wr.send_flags);
    if flags.unknown_bits() != 0 {
        return Err(EINVAL);
    }
    let ud = if qp_type == QpType::Ud {
        // SAFETY: union member of plain data.
        let u = unsafe { wr.wr.ud };
        Some(UdDest {
            ah: (r.ah)(u.ah).ok_or(EINVAL)?,
            remote_qpn: u.remote_qpn & 0x00ff_ffff,
            remote_qkey: u.remote_qkey,
        })
    } else {
        None
    };
    Ok(SendWr { wr_id: wr.wr_id, kind, flags, sg_list: copy_sges(sges, buf)?, ud })
}

/// Convert one `ibv_recv_wr` (not its `next`).
pub fn recv_wr_from_c<'a>(wr: &ibv_recv_wr, sges: &[ibv_sge], buf: &'a mut [Sge]) -> Result<RecvWr<'a>, i32> {
    Ok(RecvWr { wr_id: wr.wr_id, sg_list: copy_sges(sges, buf)? })
}

/// `ibv_ah_attr` -> engine. RoCE needs the GRH (`is_global`), as rxe, and its source GID
/// index must name a populated entry of the port's GID table (EINVAL otherwise, as the kernel's
/// `rdma_check_ah_attr`/GID lookup). The AV's `port_num` is checked where the verb uses it
/// (`ibv_create_ah`; `ibv_modify_qp` takes the port from IBV_QP_PORT, as the kernel does).
pub fn ah_attr_from_c(a: &ibv_ah_attr) -> Result<AhAttr, i32> {
    if a.is_global == 0 || u32::from(a.grh.sgid_index) >= crate::context::GID_ENTRIES {
        return Err(EINVAL);
    }
    Ok(AhAttr {
        grh: GlobalRoute {
            // SAFETY: union of byte views.
            dgid: unsafe { a.grh.dgid.raw },
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        },
        is_global: true,
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
    })
}

pub fn ah_attr_to_c(a: &AhAttr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: a.grh.dgid },
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global as u8,
        port_num: a.port_num,
    }
}

fn cap_from_c(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

pub fn cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `ibv_modify_qp` input -> engine. Unknown mask bits, bad enum values and (when the mask
/// says the field matters) bad AVs are EINVAL; alternate paths are EOPNOTSUPP (no APM).
pub fn qp_attr_from_c(a: &ibv_qp_attr, mask: c_int) -> Result<(QpAttr, QpAttrMask), i32> {
    let m = QpAttrMask(u32::try_from(mask).map_err(|_| EINVAL)?);
    if m.unknown_bits() != 0 {
        return Err(EINVAL);
    }
    if m.contains(QpAttrMask::ALT_PATH) {
        return Err(EOPNOTSUPP);
    }
    let state = |v: u32| QpState::from_u32(v).ok_or(EINVAL);
    let mut out = QpAttr::default();
    if m.contains(QpAttrMask::STATE) {
        out.qp_state = state(a.qp_state)?;
    }
    if m.contains(QpAttrMask::CUR_STATE) {
        out.cur_qp_state = state(a.cur_qp_state)?;
    }
    if m.contains(QpAttrMask::PATH_MTU) {
        out.path_mtu = Some(Mtu::from_u32(a.path_mtu).ok_or(EINVAL)?);
    }
    if m.contains(QpAttrMask::PATH_MIG_STATE) {
        out.path_mig_state = match a.path_mig_state {
            0 => MigState::Migrated,
            1 => MigState::Rearm,
            2 => MigState::Armed,
            _ => return Err(EINVAL),
        };
    }
    if m.contains(QpAttrMask::ACCESS_FLAGS) {
        let f = AccessFlags(a.qp_access_flags);
        if f.unknown_bits() != 0 {
            return Err(EINVAL);
        }
        out.qp_access_flags = f;
    }
    if m.contains(QpAttrMask::AV) {
        out.ah_attr = ah_attr_from_c(&a.ah_attr)?;
    }
    if m.contains(QpAttrMask::CAP) {
        out.cap = cap_from_c(&a.cap);
    }
    out.qkey = a.qkey;
    out.rq_psn = a.rq_psn & 0x00ff_ffff;
    out.sq_psn = a.sq_psn & 0x00ff_ffff;
    out.dest_qp_num = a.dest_qp_num & 0x00ff_ffff;
    out.pkey_index = a.pkey_index;
    out.alt_pkey_index = a.alt_pkey_index;
    out.en_sqd_async_notify = a.en_sqd_async_notify != 0;
    out.max_rd_atomic = a.max_rd_atomic;
    out.max_dest_rd_atomic = a.max_dest_rd_atomic;
    out.min_rnr_timer = a.min_rnr_timer;
    out.port_num = a.port_num;
    out.timeout = a.timeout;
    out.retry_cnt = a.retry_cnt;
    out.rnr_retry = a.rnr_retry;
    out.alt_port_num = a.alt_port_num;
    out.alt_timeout = a.alt_timeout;
    out.rate_limit = a.rate_limit;
    Ok((out, m))
}

/// Engine QP attributes -> `ibv_qp_attr` (for `ibv_query_qp`).
pub fn qp_attr_to_c(a: &QpAttr) -> ibv_qp_attr {
    ibv_qp_attr {
        qp_state: a.qp_state as u32,
        cur_qp_state: a.cur_qp_state as u32,
        path_mtu: a.path_mtu.map_or(0, |m| m as u32),
        path_mig_state: a.path_mig_state as u32,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags.bits(),
        cap: cap_to_c(&a.cap),
        ah_attr: ah_attr_to_c(&a.ah_attr),
        alt_ah_attr: ah_attr_to_c(&a.alt_ah_attr),
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify as u8,
        sq_draining: a.sq_draining as u8,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
        rate_limit: a.rate_limit,
    }
}

const SUPPORTED_SEND_OPS: u64 = IBV_QP_EX_WITH_RDMA_WRITE
    | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | IBV_QP_EX_WITH_SEND
    | IBV_QP_EX_WITH_SEND_WITH_IMM
    | IBV_QP_EX_WITH_RDMA_READ
    | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | IBV_QP_EX_WITH_LOCAL_INV
    | IBV_QP_EX_WITH_BIND_MW
    | IBV_QP_EX_WITH_SEND_WITH_INV
    | IBV_QP_EX_WITH_ATOMIC_WRITE
    | crate::abi::IBV_QP_EX_WITH_FLUSH;
const KNOWN_SEND_OPS: u64 = SUPPORTED_SEND_OPS | IBV_QP_EX_WITH_TSO | (1 << 11);
const KNOWN_QP_INIT_MASK: u32 = (IBV_QP_INIT_ATTR_PD
    | IBV_QP_INIT_ATTR_XRCD
    | IBV_QP_INIT_ATTR_CREATE_FLAGS
    | IBV_QP_INIT_ATTR_MAX_TSO_HEADER
    | IBV_QP_INIT_ATTR_IND_TABLE
    | IBV_QP_INIT_ATTR_RX_HASH
    | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS
    | (1 << 7)) as u32; // IBV_QP_INIT_ATTR_QP_SOURCE_QPN (not in every header)

/// The handles a QP refers to, resolved by the caller from the C pointers.
#[derive(Clone, Copy, Debug)]
pub struct QpRefs {
    pub pd: Option<PdId>,
    pub send_cq: Option<CqId>,
    pub recv_cq: Option<CqId>,
    pub srq: Option<SrqId>,
}

/// `ibv_qp_init_attr_ex` -> engine, checked against the device limits. Returns the init attr
/// and the requested `send_ops_flags` (0 unless the mask has SEND_OPS_FLAGS).
pub fn qp_init_attr_from_c(a: &ibv_qp_init_attr_ex, refs: QpRefs, limits: &Limits) -> Result<(QpInitAttr, u64), i32> {
    if a.comp_mask & !KNOWN_QP_INIT_MASK != 0 {
        return Err(EINVAL);
    }
    let unsupported =
        (IBV_QP_INIT_ATTR_MAX_TSO_HEADER | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH | (1 << 7)) as u32;
    if a.comp_mask & unsupported != 0 {
        return Err(EOPNOTSUPP);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS as u32 != 0
        && a.create_flags & !crate::abi::IBV_QP_CREATE_BLOCK_SELF_MCAST_LB != 0
    {
        return Err(EOPNOTSUPP);
    }
    let qp_type = match QpType::from_u32(a.qp_type) {
        Some(t) => t,
        None if matches!(a.qp_type as u64, IBV_QPT_RAW_PACKET | IBV_QPT_DRIVER) => return Err(EOPNOTSUPP),
        None => return Err(EINVAL),
    };
    let send_ops = if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS as u32 != 0 {
        if a.send_ops_flags & !KNOWN_SEND_OPS != 0 {
            return Err(EINVAL);
        }
        if a.send_ops_flags & !SUPPORTED_SEND_OPS != 0 {
            return Err(EOPNOTSUPP);
        }
        a.send_ops_flags
    } else {
        0
    };
    if qp_type == QpType::XrcRecv {
        // A target has no PD, CQ or queue: it lives in the XRC domain the caller resolves
        // (IBV_QP_INIT_ATTR_XRCD); nothing else here applies to it.
        if a.comp_mask & IBV_QP_INIT_ATTR_XRCD as u32 == 0 {
            return Err(EINVAL);
        }
        return Ok((QpInitAttr::xrc_target(), send_ops));
    }
    // An initiator has no receive side: no receive CQ, SRQ or receive caps.
    let xrc_send = qp_type == QpType::XrcSend;
    let refs = if xrc_send { QpRefs { recv_cq: Some(0), srq: None, ..refs } } else { refs };
    let pd = refs.pd.ok_or(EINVAL)?;
    let send_cq = refs.send_cq.ok_or(EINVAL)?;
    let recv_cq = refs.recv_cq.ok_or(EINVAL)?;
    let mut cap = cap_from_c(&a.cap);
    if xrc_send {
        cap.max_recv_wr = 0;
        cap.max_recv_sge = 0;
    }
    if cap.max_send_wr > limits.max_qp_wr
        || (refs.srq.is_none() && cap.max_recv_wr > limits.max_qp_wr)
        || cap.max_send_sge > limits.max_sge
        || (refs.srq.is_none() && cap.max_recv_sge > limits.max_sge)
        || cap.max_inline_data > limits.max_inline_data
    {
        return Err(EINVAL);
    }
    Ok((QpInitAttr { pd, qp_type, send_cq, recv_cq, srq: refs.srq, cap, sq_sig_all: a.sq_sig_all != 0 }, send_ops))
}

/// `ibv_srq_attr` for create, checked against the limits.
pub fn srq_attr_from_c(a: &ibv_srq_attr, limits: &Limits) -> Result<SrqAttr, i32> {
    if a.max_wr == 0 || a.max_wr > limits.max_srq_wr || a.max_sge > limits.max_srq_sge {
        return Err(EINVAL);
    }
    Ok(SrqAttr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit })
}

/// Supported `wc_flags` of `ibv_create_cq_ex`.
pub const SUPPORTED_WC_FLAGS: u64 = IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
    | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;

/// Check `ibv_cq_init_attr_ex`: the number of entries to ask the engine for.
pub fn cq_init_attr_check(a: &ibv_cq_init_attr_ex, limits: &Limits, num_comp_vectors: u32) -> Result<u32, i32> {
    let known_mask = (IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) as u32;
    if a.comp_mask & !known_mask != 0 {
        return Err(EINVAL);
    }
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS as u32 != 0
        && a.flags & !(IBV_CREATE_CQ_ATTR_SINGLE_THREADED as u32) != 0
    {
        return Err(EOPNOTSUPP);
    }
    if a.wc_flags & !SUPPORTED_WC_FLAGS != 0 {
        return Err(EOPNOTSUPP);
    }
    if a.cqe == 0 || a.cqe > limits.max_cqe || a.comp_vector >= num_comp_vectors {
        return Err(EINVAL);
    }
    Ok(a.cqe)
}

/// Engine completion -> `ibv_wc`.
pub fn wc_to_c(w: &WorkCompletion) -> ibv_wc {
    let with_inv = w.wc_flags.contains(urxe::engine::WcFlags::WITH_INV);
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as u32,
        opcode: w.opcode as u32,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm: ibv_wc_imm { imm_data: if with_inv { w.invalidated_rkey } else { w.imm_data } },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.bits(),
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: w.dlid_path_bits,
    }
}

/// Is this a flushed/error completion (only `wr_id`, `status`, `qp_num` and `vendor_err` are
/// valid)?
pub fn wc_is_error(w: &WorkCompletion) -> bool {
    w.status != WcStatus::Success
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;
    use urxe::engine::{WcFlags, WcOpcode};

    fn zero<T: Zeroable>() -> T {
        T::zeroed()
    }
    fn no_obj<T>(_: *mut T) -> Option<u32> {
        None
    }
    fn any_obj<T>(p: *mut T) -> Option<u32> {
        (!p.is_null()).then_some(p as usize as u32)
    }
    const NONE: Resolve<'static> = Resolve { ah: &no_obj, mw: &no_obj, mr: &no_obj };
    const ANY: Resolve<'static> = Resolve { ah: &any_obj, mw: &any_obj, mr: &any_obj };

    fn wr(opcode: u64) -> ibv_send_wr {
        let mut w: ibv_send_wr = zero();
        w.wr_id = 99;
        w.opcode = opcode as u32;
        w
    }

    #[test]
    fn sge_count_rejects_negative_too_many_and_null_lists() {
        assert_eq!(checked_sge_count(2, false, 4), Ok(2));
        assert_eq!(checked_sge_count(0, true, 4), Ok(0), "0 SGEs may have a NULL list");
        assert_eq!(checked_sge_count(-1, false, 4), Err(EINVAL));
        assert_eq!(checked_sge_count(5, false, 4), Err(EINVAL));
        assert_eq!(checked_sge_count(1, true, 4), Err(EINVAL));
        assert_eq!(checked_sge_count(33, false, 64), Err(EINVAL));
    }

    #[test]
    fn send_wr_rdma_write_converts_every_field() {
        let mut w = wr(IBV_WR_RDMA_WRITE_WITH_IMM);
        w.send_flags = (IBV_SEND_SIGNALED | IBV_SEND_FENCE) as u32;
        w.imm.imm_data = 0x1234_5678u32.to_be();
        w.wr.rdma = ibv_send_wr_rdma { remote_addr: 0xdead_0000, rkey: 0x77 };
        let sges = [ibv_sge { addr: 0x1000, length: 64, lkey: 5 }, ibv_sge { addr: 0x2000, length: 8, lkey: 6 }];
        let mut buf = [Sge::default(); MAX_SGE];
        let s = send_wr_from_c(&w, &sges, &mut buf, QpType::Rc, &NONE).unwrap();
        assert_eq!(s.wr_id, 99);
        assert_eq!(
            s.kind,
            WrKind::RdmaWriteWithImm { remote_addr: 0xdead_0000, rkey: 0x77, imm_data: 0x1234_5678u32.to_be() }
        );
        assert_eq!(s.flags, SendFlags::SIGNALED | SendFlags::FENCE);
        assert_eq!(s.sg_list, &[Sge { addr: 0x1000, length: 64, lkey: 5 }, Sge { addr: 0x2000, length: 8, lkey: 6 }]);
        assert!(s.ud.is_none());
    }

    #[test]
    fn every_sge_count_up_to_the_limit_converts_through_with_sge_buf() {
        let sges: Vec<ibv_sge> =
            (0..MAX_SGE as u32).map(|i| ibv_sge { addr: 0x1000 * u64::from(i + 1), length: i + 1, lkey: i }).collect();
        for n in 0..=MAX_SGE {
            let w = wr(IBV_WR_SEND);
            let got = with_sge_buf(n, |buf| {
                send_wr_from_c(&w, &sges[..n], buf, QpType::Rc, &NONE).map(|s| s.sg_list.to_vec())
            });
            let want: Vec<Sge> =
                sges[..n].iter().map(|s| Sge { addr: s.addr, length: s.length, lkey: s.lkey }).collect();
            assert_eq!(got, Ok(want), "{n} SGEs");
            let r = ibv_recv_wr { wr_id: 1, next: std::ptr::null_mut(), sg_list: std::ptr::null_mut(), num_sge: 0 };
            let got = with_sge_buf(n, |buf| recv_wr_from_c(&r, &sges[..n], buf).map(|r| r.sg_list.len()));
            assert_eq!(got, Ok(n));
        }
        // A buffer too small for the list is refused, not overrun.
        let w = wr(IBV_WR_SEND);
        assert_eq!(send_wr_from_c(&w, &sges[..5], &mut [Sge::default(); 4], QpType::Rc, &NONE).err(), Some(EINVAL));
    }

    #[test]
    fn send_wr_atomics_use_the_atomic_union() {
        let mut w = wr(IBV_WR_ATOMIC_CMP_AND_SWP);
        w.wr.atomic = ibv_send_wr_atomic { remote_addr: 8, compare_add: 1, swap: 2, rkey: 3 };
        let mut buf = [Sge::default(); MAX_SGE];
        let s = send_wr_from_c(&w, &[], &mut buf, QpType::Rc, &NONE).unwrap();
        assert_eq!(s.kind, WrKind::AtomicCmpSwp { remote_addr: 8, rkey: 3, compare: 1, swap: 2 });
        let mut w = wr(IBV_WR_ATOMIC_FETCH_AND_ADD);
        w.wr.atomic = ibv_send_wr_atomic { remote_addr: 16, compare_add: 5, swap: 0, rkey: 4 };
        let s = send_wr_from_c(&w, &[], &mut buf, QpType::Rc, &NONE).unwrap();
        assert_eq!(s.kind, WrKind::AtomicFetchAdd { remote_addr: 16, rkey: 4, add: 5 });
    }

    #[test]
    fn send_wr_bad_input_maps_to_errno() {
        let mut buf = [Sge::default(); MAX_SGE];
        // unknown opcode
        assert_eq!(send_wr_from_c(&wr(12), &[], &mut buf, QpType::Rc, &NONE).unwrap_err(), EINVAL);
        assert_eq!(send_wr_from_c(&wr(200), &[], &mut buf, QpType::Rc, &NONE).unwrap_err(), EINVAL);
        // known but not implemented
        assert_eq!(send_wr_from_c(&wr(IBV_WR_TSO), &[], &mut buf, QpType::Rc, &NONE).unwrap_err(), EOPNOTSUPP);
        assert_eq!(send_wr_from_c(&wr(IBV_WR_ATOMIC_WRITE), &[], &mut buf, QpType::Rc, &NONE).unwrap_err(), EOPNOTSUPP);
        // not valid for the transport
        assert_eq!(send_wr_from_c(&wr(IBV_WR_RDMA_READ), &[], &mut buf, QpType::Uc, &NONE).unwrap_err(), EINVAL);
        assert_eq!(send_wr_from_c(&wr(IBV_WR_RDMA_WRITE), &[], &mut buf, QpType::Ud, &ANY).unwrap_err(), EINVAL);
        // unknown send flag
        let mut w = wr(IBV_WR_SEND);
        w.send_flags = 1 << 9;
        assert_eq!(send_wr_from_c(&w, &[], &mut buf, QpType::Rc, &NONE).unwrap_err(), EINVAL);
        // UD without (a valid) AH
        assert_eq!(send_wr_from_c(&wr(IBV_WR_SEND), &[], &mut buf, QpType::Ud, &ANY).unwrap_err(), EINVAL);
        // too many SGEs for the stack buffer
        let many = [ibv_sge::default(); MAX_SGE + 1];
        assert_eq!(send_wr_from_c(&wr(IBV_WR_SEND), &many, &mut buf, QpType::Rc, &NONE).unwrap_err(), EINVAL);
        // bind with an MW we do not know
        assert_eq!(send_wr_from_c(&wr(IBV_WR_BIND_MW), &[], &mut buf, QpType::Rc, &NONE).unwrap_err(), EINVAL);
    }

    #[test]
    fn ud_send_resolves_the_ah_and_masks_the_qpn() {
        let mut w = wr(IBV_WR_SEND_WITH_IMM);
        w.wr.ud = ibv_send_wr_ud { ah: 0x40 as *mut ibv_ah, remote_qpn: 0xff00_0011, remote_qkey: 0x1111_1111 };
        let mut buf = [Sge::default(); MAX_SGE];
        let s = send_wr_from_c(&w, &[], &mut buf, QpType::Ud, &ANY).unwrap();
        assert_eq!(s.ud, Some(UdDest { ah: 0x40, remote_qpn: 0x11, remote_qkey: 0x1111_1111 }));
    }

    #[test]
    fn bind_mw_wr_resolves_mw_and_mr() {
        let mut w = wr(IBV_WR_BIND_MW);
        w.ext.bind_mw = ibv_send_wr_bind_mw {
            mw: 0x10 as *mut ibv_mw,
            rkey: 0x4242,
            bind_info: ibv_mw_bind_info {
                mr: 0x20 as *mut ibv_mr,
                addr: 0x1000,
                length: 4096,
                mw_access_flags: IBV_ACCESS_REMOTE_READ as u32,
            },
        };
        let mut buf = [Sge::default(); MAX_SGE];
        let s = send_wr_from_c(&w, &[], &mut buf, QpType::Rc, &ANY).unwrap();
        assert_eq!(
            s.kind,
            WrKind::BindMw(MwBind {
                mw: 0x10,
                rkey: 0x4242,
                mr: 0x20,
                addr: 0x1000,
                length: 4096,
                access: AccessFlags::REMOTE_READ
            })
        );
        w.ext.bind_mw.bind_info.mw_access_flags = 1 << 30;
        assert_eq!(send_wr_from_c(&w, &[], &mut buf, QpType::Rc, &ANY).unwrap_err(), EINVAL);
    }

    #[test]
    fn recv_wr_copies_sges() {
        let mut w: ibv_recv_wr = zero();
        w.wr_id = 7;
        w.next = ptr::null_mut();
        let sges = [ibv_sge { addr: 1, length: 2, lkey: 3 }];
        let mut buf = [Sge::default(); MAX_SGE];
        let r = recv_wr_from_c(&w, &sges, &mut buf).unwrap();
        assert_eq!(r.wr_id, 7);
        assert_eq!(r.sg_list, &[Sge { addr: 1, length: 2, lkey: 3 }]);
    }

    fn rtr_attr() -> ibv_qp_attr {
        let mut a: ibv_qp_attr = zero();
        a.qp_state = 2;
        a.path_mtu = IBV_MTU_1024 as u32;
        a.dest_qp_num = 0x0100_0012;
        a.rq_psn = 0x0123_4567;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid.raw = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 77, 0, 1];
        a.ah_attr.grh.sgid_index = 1;
        a.ah_attr.grh.hop_limit = 1;
        a.ah_attr.port_num = 1;
        a
    }

    #[test]
    fn qp_attr_rtr_converts_and_masks_24_bit_fields() {
        let mask =
            (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN) as c_int | (1 << 12) | (1 << 17) | (1 << 15);
        let (a, m) = qp_attr_from_c(&rtr_attr(), mask).unwrap();
        assert_eq!(m.bits(), mask as u32);
        assert_eq!(a.qp_state, QpState::Rtr);
        assert_eq!(a.path_mtu, Some(Mtu::Mtu1024));
        assert_eq!(a.dest_qp_num, 0x12);
        assert_eq!(a.rq_psn, 0x23_4567);
        assert_eq!(a.ah_attr.grh.dgid[12..], [127, 77, 0, 1]);
        assert!(a.ah_attr.is_global);
        // and back
        let c = qp_attr_to_c(&a);
        assert_eq!(c.qp_state, 2);
        assert_eq!(c.path_mtu, IBV_MTU_1024 as u32);
        // SAFETY: byte view of a union.
        assert_eq!(unsafe { c.ah_attr.grh.dgid.raw }[12..], [127, 77, 0, 1]);
    }

    #[test]
    fn qp_attr_bad_input_maps_to_errno() {
        let a = rtr_attr();
        assert_eq!(qp_attr_from_c(&a, 1 << 29).unwrap_err(), EINVAL, "unknown mask bit");
        assert_eq!(qp_attr_from_c(&a, -1).unwrap_err(), EINVAL, "negative mask");
        assert_eq!(qp_attr_from_c(&a, IBV_QP_ALT_PATH as c_int).unwrap_err(), EOPNOTSUPP);
        let mut b = a;
        b.qp_state = 7;
        assert_eq!(qp_attr_from_c(&b, IBV_QP_STATE as c_int).unwrap_err(), EINVAL);
        let mut b = a;
        b.path_mtu = 6;
        assert_eq!(qp_attr_from_c(&b, IBV_QP_PATH_MTU as c_int).unwrap_err(), EINVAL);
        let mut b = a;
        b.ah_attr.is_global = 0;
        assert_eq!(qp_attr_from_c(&b, IBV_QP_AV as c_int).unwrap_err(), EINVAL, "RoCE needs a GRH");
        let mut c = rtr_attr();
        c.ah_attr.grh.sgid_index = crate::context::GID_TABLE_LEN as u8;
        assert_eq!(qp_attr_from_c(&c, IBV_QP_AV as c_int).unwrap_err(), EINVAL, "sgid_index past the GID table");
        c.ah_attr.grh.sgid_index = crate::context::GID_ENTRIES as u8;
        assert_eq!(qp_attr_from_c(&c, IBV_QP_AV as c_int).unwrap_err(), EINVAL, "an empty GID entry");
        c.ah_attr.grh.sgid_index = crate::context::GID_ENTRIES as u8 - 1;
        assert!(qp_attr_from_c(&c, IBV_QP_AV as c_int).is_ok(), "last populated GID entry");
        // fields outside the mask are not validated
        assert!(qp_attr_from_c(&b, IBV_QP_STATE as c_int).is_ok());
        let mut b = a;
        b.qp_access_flags = 1 << 15;
        assert_eq!(qp_attr_from_c(&b, 1 << 3).unwrap_err(), EINVAL);
    }

    fn init_ex(qp_type: u64) -> ibv_qp_init_attr_ex {
        let mut a: ibv_qp_init_attr_ex = zero();
        a.qp_type = qp_type as u32;
        a.comp_mask = IBV_QP_INIT_ATTR_PD as u32;
        a.cap = ibv_qp_cap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        a.sq_sig_all = 1;
        a
    }
    const REFS: QpRefs = QpRefs { pd: Some(1), send_cq: Some(2), recv_cq: Some(3), srq: None };

    #[test]
    fn qp_init_attr_converts() {
        let l = Limits::default();
        let (q, ops) = qp_init_attr_from_c(&init_ex(IBV_QPT_RC), REFS, &l).unwrap();
        assert_eq!((q.pd, q.send_cq, q.recv_cq, q.srq), (1, 2, 3, None));
        assert_eq!(q.qp_type, QpType::Rc);
        assert!(q.sq_sig_all);
        assert_eq!(q.cap.max_send_wr, 16);
        assert_eq!(ops, 0);
        let mut a = init_ex(IBV_QPT_UD);
        a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS as u32;
        a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
        let (q, ops) = qp_init_attr_from_c(&a, REFS, &l).unwrap();
        assert_eq!(q.qp_type, QpType::Ud);
        assert_eq!(ops, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
    }

    #[test]
    fn qp_init_attr_bad_input_maps_to_errno() {
        let l = Limits::default();
        let (x, _) = qp_init_attr_from_c(&init_ex(IBV_QPT_XRC_SEND), REFS, &l).unwrap();
        assert_eq!((x.qp_type, x.recv_cq, x.srq, x.cap.max_recv_wr), (QpType::XrcSend, 0, None, 0));
        assert_eq!(qp_init_attr_from_c(&init_ex(IBV_QPT_XRC_RECV), REFS, &l).unwrap_err(), EINVAL, "no XRCD");
        assert_eq!(qp_init_attr_from_c(&init_ex(IBV_QPT_RAW_PACKET), REFS, &l).unwrap_err(), EOPNOTSUPP);
        assert_eq!(qp_init_attr_from_c(&init_ex(77), REFS, &l).unwrap_err(), EINVAL);
        let mut a = init_ex(IBV_QPT_RC);
        a.comp_mask |= 1 << 20;
        assert_eq!(qp_init_attr_from_c(&a, REFS, &l).unwrap_err(), EINVAL, "unknown comp_mask bit");
        let mut a = init_ex(IBV_QPT_RC);
        a.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS as u32;
        a.create_flags = 1;
        assert_eq!(qp_init_attr_from_c(&a, REFS, &l).unwrap_err(), EOPNOTSUPP);
        let mut a = init_ex(IBV_QPT_RC);
        a.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS as u32;
        a.send_ops_flags = IBV_QP_EX_WITH_TSO;
        assert_eq!(qp_init_attr_from_c(&a, REFS, &l).unwrap_err(), EOPNOTSUPP);
        a.send_ops_flags = 1 << 40;
        assert_eq!(qp_init_attr_from_c(&a, REFS, &l).unwrap_err(), EINVAL);
        let no_cq = QpRefs { send_cq: None, ..REFS };
        assert_eq!(qp_init_attr_from_c(&init_ex(IBV_QPT_RC), no_cq, &l).unwrap_err(), EINVAL);
        let no_pd = QpRefs { pd: None, ..REFS };
        assert_eq!(qp_init_attr_from_c(&init_ex(IBV_QPT_RC), no_pd, &l).unwrap_err(), EINVAL);
        let mut a = init_ex(IBV_QPT_RC);
        a.cap.max_send_sge = l.max_sge + 1;
        assert_eq!(qp_init_attr_from_c(&a, REFS, &l).unwrap_err(), EINVAL);
        let mut a = init_ex(IBV_QPT_RC);
        a.cap.max_inline_data = l.max_inline_data + 1;
        assert_eq!(qp_init_attr_from_c(&a, REFS, &l).unwrap_err(), EINVAL);
        // with an SRQ the receive capacities are ignored
        let mut a = init_ex(IBV_QPT_RC);
        a.cap.max_recv_wr = u32::MAX;
        assert!(qp_init_attr_from_c(&a, QpRefs { srq: Some(9), ..REFS }, &l).is_ok());
    }

    #[test]
    fn cq_init_attr_checks() {
        let l = Limits::default();
        let mut a: ibv_cq_init_attr_ex = zero();
        a.cqe = 10;
        a.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
        assert_eq!(cq_init_attr_check(&a, &l, 1), Ok(10));
        a.wc_flags |= IBV_WC_EX_WITH_FLOW_TAG;
        assert_eq!(cq_init_attr_check(&a, &l, 1), Err(EOPNOTSUPP));
        a.wc_flags = 0;
        a.comp_vector = 1;
        assert_eq!(cq_init_attr_check(&a, &l, 1), Err(EINVAL));
        a.comp_vector = 0;
        a.cqe = l.max_cqe + 1;
        assert_eq!(cq_init_attr_check(&a, &l, 1), Err(EINVAL));
        a.cqe = 1;
        a.comp_mask = 1 << 5;
        assert_eq!(cq_init_attr_check(&a, &l, 1), Err(EINVAL));
    }

    #[test]
    fn cq_sized_as_ofi_rxm_asks_by_default_is_accepted() {
        // libfabric 1.17's ofi_rxm opens one verbs CQ of (rx + tx) * universe size entries
        // ((128 + 128) * 1024 by default) and does not consult max_cqe; rxe's 32767 refuses it.
        let l = Limits::default();
        let mut a: ibv_cq_init_attr_ex = zero();
        a.cqe = (128 + 128) * 1024;
        assert_eq!(cq_init_attr_check(&a, &l, 1), Ok(a.cqe));
    }

    #[test]
    fn srq_attr_checks() {
        let l = Limits::default();
        let ok = ibv_srq_attr { max_wr: 10, max_sge: 1, srq_limit: 0 };
        assert_eq!(srq_attr_from_c(&ok, &l), Ok(SrqAttr { max_wr: 10, max_sge: 1, srq_limit: 0 }));
        assert_eq!(srq_attr_from_c(&ibv_srq_attr { max_wr: 0, ..ok }, &l), Err(EINVAL));
        assert_eq!(srq_attr_from_c(&ibv_srq_attr { max_sge: l.max_srq_sge + 1, ..ok }, &l), Err(EINVAL));
    }

    #[test]
    fn wc_converts_and_puts_invalidated_rkey_in_the_shared_slot() {
        let w = WorkCompletion {
            wr_id: 5,
            status: WcStatus::Success,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 4096,
            imm_data: 0xaabb_ccdd,
            qp_num: 0x11,
            src_qp: 0x12,
            wc_flags: WcFlags::WITH_IMM | WcFlags::GRH,
            sl: 3,
            ..Default::default()
        };
        let c = wc_to_c(&w);
        assert_eq!((c.wr_id, c.status, c.opcode, c.byte_len), (5, 0, 129, 4096));
        // SAFETY: plain-data union.
        assert_eq!(unsafe { c.imm.imm_data }, 0xaabb_ccdd);
        assert_eq!((c.qp_num, c.src_qp, c.wc_flags, c.sl), (0x11, 0x12, 3, 3));
        let inv = WorkCompletion {
            wc_flags: WcFlags::WITH_INV,
            invalidated_rkey: 0x99,
            opcode: WcOpcode::Recv,
            ..Default::default()
        };
        // SAFETY: plain-data union.
        assert_eq!(unsafe { wc_to_c(&inv).imm.invalidated_rkey }, 0x99);
        assert!(wc_is_error(&WorkCompletion { status: WcStatus::WrFlushErr, ..Default::default() }));
    }
}
