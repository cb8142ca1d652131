//! Protection domains: `ibv_alloc_pd`, `ibv_dealloc_pd`, and `ibv_import_pd` /
//! `ibv_unimport_pd` (a second shell over a PD of this process).

use super::{destroy_plain, dev_of, free_plain};
use crate::abi::*;
use crate::glue;
use crate::objects::*;

export! {
    /// `ibv_alloc_pd(3)`.
    fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd as ptr {
        // SAFETY: caller passes a context of ours.
        let dev = unsafe { dev_of(context) }?;
        let id = glue::alloc_pd(dev)?;
        let pd = Box::new(UrxePd { ibv: ibv_pd { context, handle: id }, id });
        Ok(Box::into_raw(pd) as *mut ibv_pd)
    }
}

export! {
    /// `ibv_dealloc_pd(3)`: 0 or errno (EBUSY while objects use it).
    fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int as errno {
        // SAFETY: caller passes a PD of ours (from ibv_alloc_pd / ibv_import_pd).
        unsafe { destroy_plain(pd, |s: &UrxePd| s.ibv.context, |dev, s| glue::dealloc_pd(dev, s.id)) }
    }
}

export! {
    /// `ibv_import_pd(3)`: a new shell over PD `pd_handle` of this process.
    fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd as ptr {
        // A context imported with ibv_import_device lives in this process and shares urxe0's
        // one engine, so the handle names the same engine PD: a new shell over it.
        // SAFETY: caller passes a context of ours.
        let dev = unsafe { dev_of(context) }?;
        glue::query_pd(dev, pd_handle).map_err(|_| libc::EINVAL)?;
        let pd = Box::new(UrxePd { ibv: ibv_pd { context, handle: pd_handle }, id: pd_handle });
        Ok(Box::into_raw(pd) as *mut ibv_pd)
    }
}

export! {
    /// `ibv_unimport_pd(3)`: frees the shell; the PD itself stays (dealloc destroys it).
    fn ibv_unimport_pd(pd: *mut ibv_pd) as void {
        // SAFETY: caller passes a PD of ours (from ibv_import_pd / ibv_alloc_pd).
        unsafe { free_plain::<_, UrxePd>(pd) }
    }
}
