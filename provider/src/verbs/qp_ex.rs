//! The `ibv_qp_ex` work-request builder (`wr_start`, `wr_<opcode>`, `wr_set_*`,
//! `wr_complete`, `wr_abort`).
//!
//! Design: `wr_start` opens a batch; each `wr_<opcode>` pushes a PendingWr with the `wr_id` and
//! `wr_flags` the application stored in the ibv_qp_ex; the `wr_set_*` calls fill the last one;
//! `wr_complete` converts and posts them all (stopping at the first error, which it returns);
//! `wr_abort` drops the batch. Setters return void, so a misuse (no open batch, opcode not in
//! send_ops_flags, too many SGEs) is remembered and reported by `wr_complete`.

use super::{ah_id, dev_of, mr_id, mw_id};
use crate::abi::*;
use crate::convert::MAX_SGE;
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_void};
use urxe::engine::{AccessFlags, MwBind, QpType, SendFlags, SendWr, Sge, UdDest, WrKind};
use urxe::runtime::PostSend;

/// Point the builder entries of a new QP's `ibv_qp_ex` at the functions below.
pub(super) fn fill_wr_table(q: &mut ibv_qp_ex) {
    q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    q.wr_bind_mw = Some(wr_bind_mw);
    q.wr_local_inv = Some(wr_local_inv);
    q.wr_rdma_read = Some(wr_rdma_read);
    q.wr_rdma_write = Some(wr_rdma_write);
    q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    q.wr_send = Some(wr_send);
    q.wr_send_imm = Some(wr_send_imm);
    q.wr_send_inv = Some(wr_send_inv);
    q.wr_send_tso = Some(wr_send_tso);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
    q.wr_atomic_write = Some(wr_atomic_write);
}

fn batch_fail(b: &mut WrBatch, e: i32) {
    if b.error == 0 {
        b.error = e;
    }
}

/// Run `f` on the QP's builder state.
///
/// # Safety
/// `qp` is NULL or a live QP of ours.
unsafe fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&UrxeQp, &mut WrBatch)) {
    // SAFETY: caller contract.
    let Ok(s) = (unsafe { shell::<_, UrxeQp>(qp) }) else {
        return;
    };
    let mut b = s.batch.lock().unwrap_or_else(|e| e.into_inner());
    f(s, &mut b);
}

fn push_wr(s: &UrxeQp, b: &mut WrBatch, op_flag: u64, kind: WrKind) {
    if !b.active {
        return batch_fail(b, libc::EINVAL);
    }
    if s.send_ops_flags & op_flag == 0 {
        return batch_fail(b, libc::EOPNOTSUPP);
    }
    let wr = PendingWr { wr_id: s.ibv.wr_id, flags: s.ibv.wr_flags, kind, sges: Vec::new(), ud: None, xrc_srqn: None };
    b.wrs.push(wr);
}

macro_rules! wr_op {
    ($name:ident($($a:ident: $t:ty),*) => $flag:expr, $kind:expr) => {
        #[urxe_cabi::c_fn(void)]
        pub unsafe extern "C" fn $name(qp: *mut ibv_qp_ex $(, $a: $t)*) {
            // SAFETY: caller passes a QP of ours.
            unsafe { with_batch(qp, |s, b| push_wr(s, b, $flag, $kind)) }
        }
    };
}

wr_op!(wr_send() => IBV_QP_EX_WITH_SEND, WrKind::Send);
wr_op!(wr_send_imm(imm_data: u32) => IBV_QP_EX_WITH_SEND_WITH_IMM, WrKind::SendWithImm { imm_data });
wr_op!(wr_send_inv(invalidate_rkey: u32) => IBV_QP_EX_WITH_SEND_WITH_INV, WrKind::SendWithInv { invalidate_rkey });
wr_op!(wr_rdma_write(rkey: u32, remote_addr: u64) => IBV_QP_EX_WITH_RDMA_WRITE, WrKind::RdmaWrite { remote_addr, rkey });
wr_op!(wr_rdma_write_imm(rkey: u32, remote_addr: u64, imm_data: u32) => IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, WrKind::RdmaWriteWithImm { remote_addr, rkey, imm_data });
wr_op!(wr_rdma_read(rkey: u32, remote_addr: u64) => IBV_QP_EX_WITH_RDMA_READ, WrKind::RdmaRead { remote_addr, rkey });
wr_op!(wr_atomic_cmp_swp(rkey: u32, remote_addr: u64, compare: u64, swap: u64) => IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, WrKind::AtomicCmpSwp { remote_addr, rkey, compare, swap });
wr_op!(wr_atomic_fetch_add(rkey: u32, remote_addr: u64, add: u64) => IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, WrKind::AtomicFetchAdd { remote_addr, rkey, add });
wr_op!(wr_local_inv(invalidate_rkey: u32) => IBV_QP_EX_WITH_LOCAL_INV, WrKind::LocalInv { invalidate_rkey });

#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    bind_info: *const ibv_mw_bind_info,
) {
    // SAFETY: `bind_info` NULL or readable.
    let bi = (!bind_info.is_null()).then(|| unsafe { *bind_info });
    // SAFETY: caller passes a QP of ours.
    unsafe {
        with_batch(qp, |s, b| {
            let Some(bi) = bi else { return batch_fail(b, libc::EINVAL) };
            let (Some(mw), Some(mr)) = (mw_id(mw), mr_id(bi.mr)) else {
                return batch_fail(b, libc::EINVAL);
            };
            let access = AccessFlags(bi.mw_access_flags);
            let bind = MwBind { mw, rkey, mr, addr: bi.addr, length: bi.length, access };
            push_wr(s, b, IBV_QP_EX_WITH_BIND_MW, WrKind::BindMw(bind));
        })
    }
}

macro_rules! wr_unsupported {
    ($name:ident($($a:ident: $t:ty),*)) => {
        #[urxe_cabi::c_fn(void)]
        pub unsafe extern "C" fn $name(qp: *mut ibv_qp_ex $(, $a: $t)*) {
            $(let _ = $a;)*
            // SAFETY: caller passes a QP of ours.
            unsafe { with_batch(qp, |_, b| batch_fail(b, libc::EOPNOTSUPP)) }
        }
    };
}
wr_unsupported!(wr_send_tso(hdr: *mut c_void, hdr_sz: u16, mss: u16));
/// `ibv_wr_atomic_write`: the 8 bytes at `atomic_wr` are copied now (the verb lets the
/// caller reuse them on return) and land at `remote_addr` as one unit.
#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn wr_atomic_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, atomic_wr: *const c_void) {
    let value = (!atomic_wr.is_null()).then(|| {
        let mut v = [0u8; 8];
        // SAFETY: the verb's contract: `atomic_wr` points to 8 readable bytes.
        unsafe { std::ptr::copy_nonoverlapping(atomic_wr as *const u8, v.as_mut_ptr(), 8) };
        v
    });
    // SAFETY: caller passes a QP of ours.
    unsafe {
        with_batch(qp, |s, b| match value {
            Some(value) => push_wr(s, b, IBV_QP_EX_WITH_ATOMIC_WRITE, WrKind::AtomicWrite { remote_addr, rkey, value }),
            None => batch_fail(b, libc::EINVAL),
        })
    }
}

/// `ibv_wr_flush` (rdma-core 45): `type` is `IBV_FLUSH_GLOBAL` (1) and/or
/// `IBV_FLUSH_PERSISTENT` (2), `level` `IBV_FLUSH_RANGE` (0) or `IBV_FLUSH_MR` (1); the
/// length must fit the RETH's 32 bits.
#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn wr_flush(
    qp: *mut ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    len: usize,
    placement: u8,
    level: u8,
) {
    let kind = u32::try_from(len).ok().map(|len| WrKind::Flush { remote_addr, rkey, len, placement, level });
    // SAFETY: caller passes a QP of ours.
    unsafe {
        with_batch(qp, |s, b| match kind {
            Some(kind) => push_wr(s, b, IBV_QP_EX_WITH_FLUSH, kind),
            None => batch_fail(b, libc::EINVAL),
        })
    }
}

fn set_last_sges(s: &UrxeQp, b: &mut WrBatch, sges: Result<Vec<Sge>, i32>, inline: bool) {
    let sges = match sges {
        Ok(v) => v,
        Err(e) => return batch_fail(b, e),
    };
    let max_sge = s.cap.max_send_sge as usize;
    let max_inline = s.cap.max_inline_data as u64;
    let Some(last) = b.wrs.last_mut() else {
        return batch_fail(b, libc::EINVAL);
    };
    if inline {
        let total: u64 = sges.iter().map(|g| g.length as u64).sum();
        if total > max_inline {
            return batch_fail(b, libc::EINVAL);
        }
        last.flags |= IBV_SEND_INLINE as u32;
    } else if sges.len() > max_sge {
        return batch_fail(b, libc::EINVAL);
    }
    last.sges = sges;
}

/// The caller's array of `n` entries for a `wr_set_*_list`: EINVAL for more than
/// `MAX_SGE` or a NULL array.
///
/// # Safety
/// `list` points to `n` readable `T` when non-NULL.
unsafe fn caller_list<'a, T>(list: *const T, n: usize) -> Result<&'a [T], i32> {
    if n > MAX_SGE || (n > 0 && list.is_null()) {
        return Err(libc::EINVAL);
    }
    if n == 0 {
        return Ok(&[]);
    }
    // SAFETY: caller contract; `list` is non-NULL here.
    Ok(unsafe { std::slice::from_raw_parts(list, n) })
}

#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: caller passes a QP of ours.
    unsafe { with_batch(qp, |s, b| set_last_sges(s, b, Ok(vec![Sge { addr, length, lkey }]), false)) }
}
#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    // SAFETY: caller passes num_sge readable SGEs.
    let v = unsafe { caller_list(sg_list, num_sge) }
        .map(|list| list.iter().map(|g| Sge { addr: g.addr, length: g.length, lkey: g.lkey }).collect());
    // SAFETY: caller passes a QP of ours.
    unsafe { with_batch(qp, |s, b| set_last_sges(s, b, v, false)) }
}
#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    let v = u32::try_from(length)
        .map(|len| vec![Sge { addr: addr as u64, length: len, lkey: 0 }])
        .map_err(|_| libc::EINVAL);
    // SAFETY: caller passes a QP of ours.
    unsafe { with_batch(qp, |s, b| set_last_sges(s, b, v, true)) }
}
#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn wr_set_inline_data_list(qp: *mut ibv_qp_ex, num_buf: usize, buf_list: *const ibv_data_buf) {
    // SAFETY: caller passes num_buf readable buffers.
    let v = unsafe { caller_list(buf_list, num_buf) }.and_then(|list| {
        list.iter()
            .map(|d| {
                u32::try_from(d.length)
                    .map(|len| Sge { addr: d.addr as u64, length: len, lkey: 0 })
                    .map_err(|_| libc::EINVAL)
            })
            .collect()
    });
    // SAFETY: caller passes a QP of ours.
    unsafe { with_batch(qp, |s, b| set_last_sges(s, b, v, true)) }
}
/// The remote XRC SRQ of the last WR (XRC initiators; ignored by other QPs' posts).
#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp_ex, remote_srqn: u32) {
    // SAFETY: caller passes a QP of ours.
    unsafe {
        with_batch(qp, |_, b| match b.wrs.last_mut() {
            Some(last) => last.xrc_srqn = Some(remote_srqn),
            None => batch_fail(b, libc::EINVAL),
        })
    }
}

#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) {
    // SAFETY: caller passes a QP of ours.
    unsafe {
        with_batch(qp, |_, b| match b.wrs.last_mut() {
            Some(last) => last.ud = Some((ah, remote_qpn, remote_qkey)),
            None => batch_fail(b, libc::EINVAL),
        })
    }
}
/// Empty the batch; `open` says whether WRs may be pushed (`wr_start`) or not (`wr_abort`).
fn reset_batch(b: &mut WrBatch, open: bool) {
    b.active = open;
    b.wrs.clear();
    b.error = 0;
}

#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    // SAFETY: caller passes a QP of ours.
    unsafe { with_batch(qp, |_, b| reset_batch(b, true)) }
}
#[urxe_cabi::c_fn(void)]
pub unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    // SAFETY: caller passes a QP of ours.
    unsafe { with_batch(qp, |_, b| reset_batch(b, false)) }
}

/// Engine view of one pending WR.
fn pending_to_send_wr<'a>(p: &'a PendingWr, qp_type: QpType) -> Result<SendWr<'a>, i32> {
    let flags = SendFlags(p.flags);
    if flags.unknown_bits() != 0 {
        return Err(libc::EINVAL);
    }
    let ud = match (qp_type, p.ud) {
        (QpType::Ud, Some((ah, remote_qpn, remote_qkey))) => {
            Some(UdDest { ah: ah_id(ah).ok_or(libc::EINVAL)?, remote_qpn: remote_qpn & 0x00ff_ffff, remote_qkey })
        }
        (QpType::Ud, None) => return Err(libc::EINVAL),
        _ => None,
    };
    Ok(SendWr { wr_id: p.wr_id, kind: p.kind, flags, sg_list: &p.sges, ud })
}

#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: caller passes a QP of ours.
    let s: &UrxeQp = unsafe { shell(qp) }?;
    let (wrs, err) = {
        let mut b = s.batch.lock().unwrap_or_else(|e| e.into_inner());
        if !b.active {
            return Err(libc::EINVAL);
        }
        b.active = false;
        (std::mem::take(&mut b.wrs), std::mem::take(&mut b.error))
    };
    if err != 0 {
        return Err(err);
    }
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(s.ibv.qp_base.context) }?;
    // Converted first, so a bad WR posts nothing; then posted under one lock.
    let xrc = s.qp_type == QpType::XrcSend;
    let converted: Result<Vec<PostSend<'_>>, i32> = wrs
        .iter()
        .map(|p| Ok(PostSend { srqn: p.xrc_srqn.filter(|_| xrc), wr: pending_to_send_wr(p, s.qp_type)? }))
        .collect();
    glue::post_sends(dev, s.qpn, &converted?).map_err(|(_, e)| e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    fn test_qp(send_ops: u64) -> Box<UrxeQp> {
        let mut b = Box::new(UrxeQp {
            ibv: Zeroable::zeroed(),
            wr_flush: Some(wr_flush),
            qpn: 0x11,
            qp_type: QpType::Rc,
            has_qp_ex: true,
            send_ops_flags: send_ops,
            cap: urxe::engine::QpCap { max_send_sge: 2, max_inline_data: 16, ..Default::default() },
            sq_sig_all: false,
            async_events_read: Default::default(),
            batch: Default::default(),
        });
        fill_wr_table(&mut b.ibv);
        b
    }

    #[test]
    fn qp_ex_builder_collects_wrs_and_reports_misuse_at_complete() {
        let mut q = test_qp(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE);
        let p = &mut q.ibv as *mut ibv_qp_ex;
        // SAFETY: `p` is a live test QP used by this thread only.
        unsafe {
            wr_start(p);
            (*p).wr_id = 1;
            (*p).wr_flags = IBV_SEND_SIGNALED as u32;
            wr_send(p);
            wr_set_sge(p, 7, 0x1000, 64);
            (*p).wr_id = 2;
            wr_rdma_write(p, 0x55, 0x2000);
            wr_set_inline_data(p, 0x3000 as *mut c_void, 8);
        }
        assert_eq!(q.batch.lock().unwrap().wrs.len(), 2);
        assert_eq!(q.batch.lock().unwrap().wrs[0].wr_id, 1);
        assert_eq!(q.batch.lock().unwrap().wrs[0].sges, vec![Sge { addr: 0x1000, length: 64, lkey: 7 }]);
        assert_eq!(q.batch.lock().unwrap().wrs[1].kind, WrKind::RdmaWrite { remote_addr: 0x2000, rkey: 0x55 });
        assert_ne!(q.batch.lock().unwrap().wrs[1].flags & IBV_SEND_INLINE as u32, 0);
        assert_eq!(q.batch.lock().unwrap().error, 0);
        let w0 = q.batch.lock().unwrap().wrs[0].clone();
        let w = pending_to_send_wr(&w0, QpType::Rc).unwrap();
        assert_eq!(w.flags, SendFlags::SIGNALED);
        // SAFETY: as above.
        unsafe {
            wr_abort(p);
            wr_start(p);
            wr_atomic_fetch_add(p, 1, 2, 3); // not in send_ops_flags
        }
        assert_eq!(q.batch.lock().unwrap().error, libc::EOPNOTSUPP);
        // SAFETY: as above.
        assert_eq!(unsafe { wr_complete(p) }, libc::EOPNOTSUPP);
        // SAFETY: as above.
        unsafe {
            wr_start(p);
            wr_send(p);
            wr_set_inline_data(p, 0x3000 as *mut c_void, 17); // > max_inline_data
        }
        assert_eq!(q.batch.lock().unwrap().error, libc::EINVAL);
        // SAFETY: as above.
        unsafe {
            wr_abort(p);
            wr_send(p); // no wr_start
        }
        assert_eq!(q.batch.lock().unwrap().error, libc::EINVAL);
        // SAFETY: as above.
        let rc = unsafe { wr_complete(p) };
        assert_eq!(rc, libc::EINVAL, "complete without start");
    }

    #[test]
    fn atomic_write_and_flush_are_built_from_their_arguments() {
        let mut q = test_qp(IBV_QP_EX_WITH_ATOMIC_WRITE | IBV_QP_EX_WITH_FLUSH);
        let p = &mut q.ibv as *mut ibv_qp_ex;
        let v = 0x0102_0304_0506_0708u64.to_ne_bytes();
        // SAFETY: `p` is a live test QP used by this thread only; `v` holds 8 bytes.
        unsafe {
            wr_start(p);
            wr_atomic_write(p, 5, 0x40, v.as_ptr() as *const c_void);
            wr_flush(p, 6, 0x80, 64, 1, 0);
        }
        {
            let b = q.batch.lock().unwrap();
            assert_eq!(b.error, 0);
            assert_eq!(b.wrs[0].kind, WrKind::AtomicWrite { remote_addr: 0x40, rkey: 5, value: v });
            assert_eq!(b.wrs[1].kind, WrKind::Flush { remote_addr: 0x80, rkey: 6, len: 64, placement: 1, level: 0 });
        }
        // SAFETY: as above; the NULL value is refused before any read.
        unsafe {
            wr_start(p);
            wr_atomic_write(p, 5, 0x40, ptr::null());
        }
        assert_eq!(q.batch.lock().unwrap().error, libc::EINVAL);
        // SAFETY: as above.
        unsafe {
            wr_start(p);
            wr_flush(p, 6, 0x80, 1 << 32, 1, 0); // longer than a RETH can say
        }
        assert_eq!(q.batch.lock().unwrap().error, libc::EINVAL);
        let mut q = test_qp(IBV_QP_EX_WITH_SEND);
        let p = &mut q.ibv as *mut ibv_qp_ex;
        // SAFETY: as above.
        unsafe {
            wr_start(p);
            wr_flush(p, 6, 0x80, 8, 1, 0);
        }
        assert_eq!(q.batch.lock().unwrap().error, libc::EOPNOTSUPP, "FLUSH not in send_ops_flags");
        // rdma-core 45's `ibv_wr_flush` reads the entry right after rdma-core 44's struct.
        // SAFETY: `UrxeQp` is repr(C) with `wr_flush` at that offset (asserted in objects.rs).
        let slot = unsafe { *((p as *const u8).add(std::mem::size_of::<ibv_qp_ex>()) as *const Option<WrFlushFn>) };
        assert_eq!(slot.map(|f| f as usize), Some(wr_flush as WrFlushFn as usize));
    }

    #[test]
    fn caller_lists_are_bounded_and_non_null() {
        let g = [ibv_sge { addr: 1, length: 2, lkey: 3 }; 2];
        // SAFETY: `g` holds 2 readable SGEs; the other calls never read (NULL or too many).
        unsafe {
            assert_eq!(caller_list(g.as_ptr(), 2).map(|l| l.len()), Ok(2));
            assert_eq!(caller_list::<ibv_sge>(ptr::null(), 0).map(|l| l.len()), Ok(0));
            assert_eq!(caller_list::<ibv_sge>(ptr::null(), 1).err(), Some(libc::EINVAL));
            assert_eq!(caller_list(g.as_ptr(), MAX_SGE + 1).err(), Some(libc::EINVAL));
        }
    }

    #[test]
    fn ud_pending_wr_needs_an_address() {
        let p = PendingWr { wr_id: 1, flags: 0, kind: WrKind::Send, sges: vec![], ud: None, xrc_srqn: None };
        assert_eq!(pending_to_send_wr(&p, QpType::Ud).unwrap_err(), libc::EINVAL);
        let p = PendingWr { ud: Some((ptr::null_mut(), 1, 2)), ..p };
        assert_eq!(pending_to_send_wr(&p, QpType::Ud).unwrap_err(), libc::EINVAL);
    }
}
