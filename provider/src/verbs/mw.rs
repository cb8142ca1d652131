//! Memory windows: `ops.alloc_mw`, `ops.dealloc_mw`, `ops.bind_mw` (type 1 binds; type 2
//! windows are bound by a send WR, see [`super::post`] and [`super::qp_ex`]).

use super::{destroy_plain, dev_of, mr_id};
use crate::abi::*;
use crate::export::non_null;
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_uint};
use std::ptr;
use urxe::engine::{AccessFlags, MwBind, MwType};

/// `ops.alloc_mw`.
#[urxe_cabi::c_fn(ptr)]
pub unsafe extern "C" fn alloc_mw_op(pd: *mut ibv_pd, mw_type: c_uint) -> *mut ibv_mw {
    // SAFETY: caller passes a PD of ours.
    let p: &UrxePd = unsafe { shell(pd) }?;
    let ty = match mw_type as u64 {
        IBV_MW_TYPE_1 => MwType::Type1,
        IBV_MW_TYPE_2 => MwType::Type2,
        _ => return Err(libc::EINVAL),
    };
    // SAFETY: its context is live.
    let (id, rkey) = glue::alloc_mw(unsafe { dev_of(p.ibv.context) }?, p.id, ty)?;
    let mw = Box::new(UrxeMw { ibv: ibv_mw { context: p.ibv.context, pd, rkey, handle: id, type_: mw_type }, id });
    Ok(Box::into_raw(mw) as *mut ibv_mw)
}

/// `ops.dealloc_mw`.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn dealloc_mw_op(mw: *mut ibv_mw) -> c_int {
    // SAFETY: caller passes an MW of ours (from alloc_mw_op).
    unsafe { destroy_plain(mw, |s: &UrxeMw| s.ibv.context, |dev, s| glue::dealloc_mw(dev, s.id)) }
}

/// `ops.bind_mw` (`ibv_bind_mw(3)`, type 1 windows).
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn bind_mw_op(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int {
    // SAFETY: caller passes a QP of ours.
    let q: &UrxeQp = unsafe { shell(qp) }?;
    let b = non_null(mw_bind)?;
    // SAFETY: caller passes an MW of ours.
    let w: &UrxeMw = unsafe { shell(mw) }?;
    if w.ibv.type_ as u64 != IBV_MW_TYPE_1 {
        return Err(libc::EINVAL);
    }
    // SAFETY: readable caller struct.
    let b = unsafe { &*b };
    let access = AccessFlags(b.bind_info.mw_access_flags);
    if access.unknown_bits() != 0 {
        return Err(libc::EINVAL);
    }
    let mr = mr_id(b.bind_info.mr).ok_or(libc::EINVAL)?;
    let bind = MwBind { mw: w.id, rkey: w.ibv.rkey, mr, addr: b.bind_info.addr, length: b.bind_info.length, access };
    let signaled = b.send_flags & IBV_SEND_SIGNALED as u32 != 0;
    // SAFETY: its context is live.
    let rkey = glue::bind_mw(unsafe { dev_of(q.ibv.qp_base.context) }?, q.qpn, b.wr_id, signaled, &bind)?;
    // SAFETY: the caller's MW; `rkey` is the C-visible field it reads after the bind.
    unsafe { ptr::addr_of_mut!((*mw).rkey).write(rkey) };
    Ok(())
}
