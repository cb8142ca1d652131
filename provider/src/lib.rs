//! provider: the libibverbs.so.1 drop-in (C ABI). See docs/DESIGN.md.
//!
//! Built as a staticlib and linked by `provider/build.sh` into `target/urxe/lib/libibverbs.so.1`
//! with a version script generated from [`entries::ENTRY_POINTS`].
//!
//! Modules (the C ABI layer; no protocol logic here), from the ground floor up:
//! - [`abi`]: `#[repr(C)]` mirrors of `<infiniband/verbs.h>` (and [`abi::Zeroable`], the
//!   types whose all-zero value is valid), from the shared C-ABI toolkit (`urxe_cabi::verbs`,
//!   with their layout report `urxe_cabi::verbs_layout`).
//! - [`export`](mod@export): the `export!` macro every C entry point goes through; [`entries`]: the table.
//! - [`config`]: address selection (URXE_ADDR / per-process loopback).
//! - [`context`]: the device `urxe0`, its contexts, and `ctx_from` / `dev_of` (C handle ->
//!   context/device); everything above imports it, it imports no verb.
//! - [`objects`]: object shells; [`convert`]: C <-> engine conversions.
//! - [`events`]: completion channels and async events; [`glue`]: the one seam to the engine.
//! - [`verbs`]: the object verbs, one room per object (pd, mr, cq, cq_ex, qp, qp_ex, srq, ah,
//!   mw) and the post chains.
//! - [`device`]: the device verbs (list, open/close, queries) and the context ops table,
//!   filled with the entry points of [`verbs`].
//! - [`stateless`]: the libibverbs functions that touch no device or object (enum strings,
//!   rates, fork, sysfs and kernel-struct copy helpers); [`private`]: IBVERBS_PRIVATE_34 stubs;
//!   [`gsi`]: urxe's private GSI API for librdmacm.so.1 (URXE_PRIVATE_1).
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(clippy::missing_safety_doc)]

#[macro_use]
pub mod export;

pub use urxe_cabi::verbs as abi;
pub mod compat;
pub mod config;
pub mod context;
pub mod convert;
pub mod device;
pub mod entries;
#[cfg(test)]
mod event_tests;
pub mod events;
pub mod glue;
pub mod gsi;
pub mod objects;
pub mod private;
pub mod stateless;
pub mod verbs;

pub use urxe_cabi::verbs_layout::layout_report;
