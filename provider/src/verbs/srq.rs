//! Shared receive queues: `ibv_create_srq` / `create_srq_ex` (basic SRQs), `ibv_modify_srq`,
//! `ibv_query_srq`, `ibv_destroy_srq`; and the XRC pieces urxe declines (`get_srq_num`,
//! `open_xrcd` / `close_xrcd`). Posting to an SRQ is [`super::post`].

use super::dev_of;
use crate::abi::*;
use crate::context::ctx_from;
use crate::convert;
use crate::events::{self, AsyncKind};
use crate::export::non_null;
use crate::glue;
use crate::objects::*;
use libc::{c_int, c_void};
use std::ptr;
use std::sync::atomic::Ordering;
use urxe::engine::{SrqAttr, SrqAttrMask};

/// # Safety
/// `pd` NULL or ours; `attr` NULL or writable.
unsafe fn create_srq_common(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_attr,
    srq_context: *mut c_void,
) -> Result<*mut ibv_srq, i32> {
    // SAFETY: caller contract.
    let p: &UrxePd = unsafe { shell(pd) }?;
    let a = non_null(attr)?;
    // SAFETY: its context is live.
    let dev = unsafe { dev_of(p.ibv.context) }?;
    // SAFETY: readable caller struct.
    let ea = convert::srq_attr_from_c(unsafe { &*a }, &dev.info.limits)?;
    let (id, granted) = glue::create_srq(dev, p.id, ea)?;
    // SAFETY: writable caller struct.
    unsafe { a.write(ibv_srq_attr { max_wr: granted.max_wr, max_sge: granted.max_sge, srq_limit: granted.srq_limit }) };
    let mut b = Box::new(UrxeSrq {
        ibv: Zeroable::zeroed(),
        id,
        max_sge: granted.max_sge,
        async_events_read: Default::default(),
    });
    b.ibv.context = p.ibv.context;
    b.ibv.srq_context = srq_context;
    b.ibv.pd = pd;
    b.ibv.handle = id;
    // SAFETY: `pd` is a live PD of ours (checked above).
    unsafe { parent_domain_use(pd, 1) };
    let raw = Box::into_raw(b);
    // SAFETY: live boxed SRQ; in-place init.
    unsafe { init_sync(ptr::addr_of_mut!((*raw).ibv.mutex), ptr::addr_of_mut!((*raw).ibv.cond)) };
    events::register_async(AsyncKind::Srq, id, raw as usize);
    Ok(raw as *mut ibv_srq)
}

export! {
    /// `ibv_create_srq(3)`: writes the granted attributes back.
    fn ibv_create_srq(pd: *mut ibv_pd, srq_init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq as ptr {
        let ia = non_null(srq_init_attr)?;
        // SAFETY: caller passes a PD of ours and a writable init attr.
        unsafe { create_srq_common(pd, ptr::addr_of_mut!((*ia).attr), (*ia).srq_context) }
    }
}

crate::c_fn! {
    /// `verbs_context.create_srq_ex`: basic SRQs only (XRC / tag matching: EOPNOTSUPP).
    fn create_srq_ex_op(context: *mut ibv_context, attr: *mut ibv_srq_init_attr_ex) -> *mut ibv_srq as ptr {
        // SAFETY: caller passes a context of ours.
        unsafe { ctx_from(context) }?;
        let a = non_null(attr)?;
        // SAFETY: readable caller struct.
        let (mask, ty, pd) = unsafe { ((*a).comp_mask, (*a).srq_type, (*a).pd) };
        let known = (IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM) as u32;
        if mask & !known != 0 {
            return Err(libc::EINVAL);
        }
        if mask & IBV_SRQ_INIT_ATTR_TYPE as u32 != 0 && ty as u64 != IBV_SRQT_BASIC {
            return Err(libc::EOPNOTSUPP);
        }
        if mask & IBV_SRQ_INIT_ATTR_PD as u32 == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: as above.
        unsafe { create_srq_common(pd, ptr::addr_of_mut!((*a).attr), (*a).srq_context) }
    }
}

crate::c_fn! {
    /// `verbs_context.get_srq_num`: XRC only; EOPNOTSUPP.
    fn get_srq_num_op(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int as errno {
        non_null(srq)?;
        Err(libc::EOPNOTSUPP)
    }
}

export! {
    /// `ibv_modify_srq(3)`.
    fn ibv_modify_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr, srq_attr_mask: c_int) -> c_int as errno {
        // SAFETY: caller passes an SRQ of ours.
        let s: &UrxeSrq = unsafe { shell(srq) }?;
        let a = non_null(srq_attr)?;
        let m = SrqAttrMask(u32::try_from(srq_attr_mask).map_err(|_| libc::EINVAL)?);
        if m.unknown_bits() != 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: readable caller struct.
        let a = unsafe { *a };
        // SAFETY: its context is live.
        glue::modify_srq(unsafe { dev_of(s.ibv.context) }?, s.id, SrqAttr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit }, m)
    }
}

export! {
    /// `ibv_query_srq(3)`.
    fn ibv_query_srq(srq: *mut ibv_srq, srq_attr: *mut ibv_srq_attr) -> c_int as errno {
        // SAFETY: caller passes an SRQ of ours.
        let s: &UrxeSrq = unsafe { shell(srq) }?;
        let out = non_null(srq_attr)?;
        // SAFETY: its context is live.
        let a = glue::query_srq(unsafe { dev_of(s.ibv.context) }?, s.id)?;
        // SAFETY: writable caller struct.
        unsafe { out.write(ibv_srq_attr { max_wr: a.max_wr, max_sge: a.max_sge, srq_limit: a.srq_limit }) };
        Ok(())
    }
}

export! {
    /// `ibv_destroy_srq(3)`.
    fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int as errno {
        // SAFETY: caller passes an SRQ of ours.
        let s: &UrxeSrq = unsafe { shell(srq) }?;
        // SAFETY: its context is live.
        glue::destroy_srq(unsafe { dev_of(s.ibv.context) }?, s.id)?;
        let raw = s as *const UrxeSrq as *mut UrxeSrq;
        events::unregister_async(AsyncKind::Srq, s.id, raw as usize);
        // SAFETY: live until freed below.
        unsafe {
            let m = ptr::addr_of_mut!((*raw).ibv.mutex);
            let c = ptr::addr_of_mut!((*raw).ibv.cond);
            wait_acked(m, c, ptr::addr_of!((*raw).ibv.events_completed), || (*raw).async_events_read.load(Ordering::Acquire));
            destroy_sync(m, c);
            parent_domain_use((*raw).ibv.pd, -1);
            drop(Box::from_raw(raw));
        }
        Ok(())
    }
}

// XRCD (not supported: the inline wrappers turn NULL ops into EOPNOTSUPP; we say it ourselves
// so the failure is ours and visible under URXE_TRACE).

crate::c_fn! {
    fn open_xrcd_op(context: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd as ptr {
        // SAFETY: caller passes a context of ours.
        unsafe { ctx_from(context) }?;
        Err(libc::EOPNOTSUPP)
    }
}
crate::c_fn! {
    fn close_xrcd_op(xrcd: *mut ibv_xrcd) -> c_int as errno {
        Err(libc::EOPNOTSUPP)
    }
}
