//! Provider layer: the object verbs, one room per object, as rdma-core's man pages group
//! them: [`pd`], [`mr`], [`cq`] (+ the [`cq_ex`] polling cursor), [`qp`] (+ the [`qp_ex`]
//! work-request builder), [`srq`], [`ah`], [`mw`], and [`post`] (the send/receive chains).
//!
//! Each verb: check pointers, convert C -> engine ([`crate::convert`]), call [`crate::glue`],
//! then create/update/free the shell ([`crate::objects`]). The rooms reach the device through
//! [`crate::context`] and never the other way: [`crate::device`] puts their entry points in
//! the context ops table.

pub mod ah;
pub mod cq;
pub mod cq_ex;
pub mod dm;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod post;
pub mod qp;
pub mod qp_ex;
pub mod srq;

use crate::abi::{ibv_ah, ibv_context, ibv_mr, ibv_mw};
use crate::context::{dev_of, UrxeDevice};
use crate::convert::Resolve;
use crate::objects::{shell, UrxeAh, UrxeMr, UrxeMw};
use urxe::engine::{AhId, MrId, MwId};

// SAFETY (for the resolvers): pointers inside WRs are objects of ours or NULL; NULL gives None.
fn ah_id(p: *mut ibv_ah) -> Option<AhId> {
    // SAFETY: see above.
    (!p.is_null()).then(|| unsafe { (*(p as *mut UrxeAh)).id })
}
fn mw_id(p: *mut ibv_mw) -> Option<MwId> {
    // SAFETY: see above.
    (!p.is_null()).then(|| unsafe { (*(p as *mut UrxeMw)).id })
}
fn mr_id(p: *mut ibv_mr) -> Option<MrId> {
    // SAFETY: see above.
    (!p.is_null()).then(|| unsafe { (*(p as *mut UrxeMr)).id })
}
/// How WR conversion turns AH/MW/MR pointers into engine ids.
const RESOLVE: Resolve<'static> = Resolve { ah: &ah_id, mw: &mw_id, mr: &mr_id };

/// Destroy a plain shell (PD, MR, AH, MW: no events, no pthread state): `destroy` asks the
/// engine, with the device of the shell's `context`; the shell is freed only if it agreed.
///
/// # Safety
/// `p` is NULL or a live handle this library made with `Box::into_raw` as an `S`; after `Ok`
/// nobody uses it again.
unsafe fn destroy_plain<C, S>(
    p: *mut C,
    context: fn(&S) -> *mut ibv_context,
    destroy: impl FnOnce(&'static UrxeDevice, &S) -> Result<(), i32>,
) -> Result<(), i32> {
    // SAFETY: caller contract.
    let s: &S = unsafe { shell(p) }?;
    // SAFETY: the context of a live shell is live.
    destroy(unsafe { dev_of(context(s)) }?, s)?;
    // SAFETY: caller contract: made by Box::into_raw as an `S`, freed once, here.
    drop(unsafe { Box::from_raw(s as *const S as *mut S) });
    Ok(())
}

/// Free a plain shell without asking the engine (the `ibv_unimport_*` verbs).
///
/// # Safety
/// As [`destroy_plain`].
unsafe fn free_plain<C, S>(p: *mut C) {
    // SAFETY: caller contract.
    if let Ok(s) = unsafe { shell::<C, S>(p) } {
        // SAFETY: caller contract: made by Box::into_raw as an `S`, freed once, here.
        drop(unsafe { Box::from_raw(s as *const S as *mut S) });
    }
}
