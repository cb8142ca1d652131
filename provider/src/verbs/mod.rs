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
pub mod mr;
pub mod mw;
pub mod pd;
pub mod post;
pub mod qp;
pub mod qp_ex;
pub mod srq;

use crate::abi::{ibv_ah, ibv_mr, ibv_mw};
use crate::context::dev_of;
use crate::convert::Resolve;
use crate::objects::{UrxeAh, UrxeMr, UrxeMw};
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
