//! Protection domains: `ibv_alloc_pd`, `ibv_dealloc_pd`, and `ibv_import_pd` /
//! `ibv_unimport_pd` (a second shell over a PD of this process).

use super::{destroy_plain, dev_of, free_plain};
use crate::abi::*;
use crate::context::ctx_from;
use crate::export::non_null;
use crate::glue;
use crate::objects::*;
use libc::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

/// `ibv_alloc_pd(3)`.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: caller passes a context of ours.
    let dev = unsafe { dev_of(context) }?;
    let id = glue::alloc_pd(dev)?;
    let pd = Box::new(UrxePd::new(context, id));
    Ok(Box::into_raw(pd) as *mut ibv_pd)
}

/// `ibv_dealloc_pd(3)`: 0 or errno (EBUSY while objects or parent domains use it). A
/// parent domain is freed alone (EBUSY while QPs, CQs or SRQs use it); its protection
/// domain stays.
#[urxe_cabi::export(errno)]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: caller passes a PD of ours (from ibv_alloc_pd / ibv_import_pd /
    // ibv_alloc_parent_domain).
    let p: &UrxePd = unsafe { shell(pd) }?;
    if let Some(pdom) = &p.parent {
        if pdom.users.load(Ordering::Acquire) != 0 {
            return Err(libc::EBUSY);
        }
        // SAFETY: the protection domain outlives its parent domains (EBUSY above it).
        if let Ok(base) = unsafe { shell::<_, UrxePd>(pdom.pd) } {
            base.children.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: as for a PD: the thread domain outlives its parent domains.
        if let Ok(td) = unsafe { shell::<_, UrxeTd>(pdom.td) } {
            td.users.fetch_sub(1, Ordering::AcqRel);
        }
        // SAFETY: caller contract: made by Box::into_raw as a UrxePd, freed once, here.
        drop(unsafe { Box::from_raw(pd as *mut UrxePd) });
        return Ok(());
    }
    if p.children.load(Ordering::Acquire) != 0 {
        return Err(libc::EBUSY);
    }
    // SAFETY: caller passes a PD of ours (from ibv_alloc_pd / ibv_import_pd).
    unsafe { destroy_plain(pd, |s: &UrxePd| s.ibv.context, |dev, s| glue::dealloc_pd(dev, s.id)) }
}

/// `ibv_import_pd(3)`: a new shell over PD `pd_handle` of this process.
#[urxe_cabi::export(ptr)]
pub unsafe extern "C" fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd {
    // A context imported with ibv_import_device lives in this process and shares urxe0's
    // one engine, so the handle names the same engine PD: a new shell over it.
    // SAFETY: caller passes a context of ours.
    let dev = unsafe { dev_of(context) }?;
    glue::query_pd(dev, pd_handle).map_err(|_| libc::EINVAL)?;
    let pd = Box::new(UrxePd::new(context, pd_handle));
    Ok(Box::into_raw(pd) as *mut ibv_pd)
}

/// `ibv_unimport_pd(3)`: frees the shell; the PD itself stays (dealloc destroys it).
#[urxe_cabi::export(void)]
pub unsafe extern "C" fn ibv_unimport_pd(pd: *mut ibv_pd) {
    // SAFETY: caller passes a PD of ours (from ibv_import_pd / ibv_alloc_pd).
    unsafe { free_plain::<_, UrxePd>(pd) }
}

/// `verbs_context.alloc_td` (`ibv_alloc_td(3)`): EINVAL for unknown `comp_mask` bits.
/// urxe's verbs are thread-safe either way; a thread domain only groups objects.
#[urxe_cabi::c_fn(ptr)]
pub unsafe extern "C" fn alloc_td_op(context: *mut ibv_context, init_attr: *mut ibv_td_init_attr) -> *mut ibv_td {
    // SAFETY: caller passes a context of ours.
    unsafe { ctx_from(context) }?;
    let a = non_null(init_attr)?;
    // SAFETY: caller passes a readable attribute struct.
    if unsafe { (*a).comp_mask } != 0 {
        return Err(libc::EINVAL);
    }
    let td = Box::new(UrxeTd { ibv: ibv_td { context }, users: AtomicU32::new(0) });
    Ok(Box::into_raw(td) as *mut ibv_td)
}

/// `verbs_context.dealloc_td` (`ibv_dealloc_td(3)`): 0, or EBUSY while a parent domain
/// uses it.
#[urxe_cabi::c_fn(errno)]
pub unsafe extern "C" fn dealloc_td_op(td: *mut ibv_td) -> c_int {
    // SAFETY: caller passes a TD of ours.
    let t: &UrxeTd = unsafe { shell(td) }?;
    if t.users.load(Ordering::Acquire) != 0 {
        return Err(libc::EBUSY);
    }
    // SAFETY: made by Box::into_raw in alloc_td_op, freed once, here.
    drop(unsafe { Box::from_raw(td as *mut UrxeTd) });
    Ok(())
}

/// `verbs_context.alloc_parent_domain` (`ibv_alloc_parent_domain(3)`): a PD handle over
/// `attr.pd` (with `attr.td` if set) usable wherever a PD is. EINVAL for unknown
/// `comp_mask` bits, a missing PD, a PD that is itself a parent domain, objects of
/// another context, or IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS without both functions.
#[urxe_cabi::c_fn(ptr)]
pub unsafe extern "C" fn alloc_parent_domain_op(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    // SAFETY: caller passes a context of ours.
    unsafe { ctx_from(context) }?;
    let a = non_null(attr)?;
    // SAFETY: caller passes a readable attribute struct.
    let a = unsafe { *a };
    let known = (IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) as u32;
    if a.comp_mask & !known != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: caller passes NULL or a PD of ours.
    let base: &UrxePd = unsafe { shell(a.pd) }.map_err(|_| libc::EINVAL)?;
    if base.parent.is_some() || base.ibv.context != context {
        return Err(libc::EINVAL);
    }
    let td: Option<&UrxeTd> = if a.td.is_null() {
        None
    } else {
        // SAFETY: caller passes NULL or a TD of ours.
        let t: &UrxeTd = unsafe { shell(a.td) }?;
        if t.ibv.context != context {
            return Err(libc::EINVAL);
        }
        Some(t)
    };
    let with_alloc = a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS as u32 != 0;
    if with_alloc && (a.alloc.is_none() || a.free.is_none()) {
        return Err(libc::EINVAL);
    }
    let with_ctx = a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT as u32 != 0;
    let pdom = ParentDomain {
        pd: a.pd,
        td: a.td,
        alloc: if with_alloc { a.alloc } else { None },
        free: if with_alloc { a.free } else { None },
        pd_context: if with_ctx { a.pd_context } else { std::ptr::null_mut() },
        users: AtomicU32::new(0),
    };
    let mut p = UrxePd::new(context, base.id);
    p.parent = Some(Box::new(pdom));
    base.children.fetch_add(1, Ordering::AcqRel);
    if let Some(t) = td {
        t.users.fetch_add(1, Ordering::AcqRel);
    }
    Ok(Box::into_raw(Box::new(p)) as *mut ibv_pd)
}
