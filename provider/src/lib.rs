//! provider: the libibverbs.so.1 drop-in (C ABI). See docs/DESIGN.md.
//!
//! Built as a staticlib and linked by `provider/build.sh` into `target/urxe/lib/libibverbs.so.1`
//! with a version script generated from [`entries::ENTRY_POINTS`].
//!
//! Modules (the C ABI layer; no protocol logic here):
//! - [`abi`]: `#[repr(C)]` mirrors of `<infiniband/verbs.h>`; [`layout`]: their layout report.
//! - [`export`]: the `export!` macro every C entry point goes through; [`entries`]: the table.
//! - [`config`]: address selection (URXE_ADDR / per-process loopback).
//! - [`device`]: device list, contexts, device/port/GID queries.
//! - [`events`]: completion channels and async events.
//! - [`objects`]: object shells; [`convert`]: C <-> engine conversions; [`verbs`]: the object
//!   verbs and data-path ops; [`glue`]: the one seam to the engine.
//! - [`misc`]: strings, rates, fork, sysfs helpers; [`private`]: IBVERBS_PRIVATE_34 stubs.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[macro_use]
pub mod export;

pub mod abi;
pub mod config;
pub mod convert;
pub mod device;
pub mod entries;
pub mod events;
pub mod glue;
pub mod layout;
pub mod misc;
pub mod objects;
pub mod private;
pub mod verbs;

pub use layout::layout_report;
