//! Host layer: the application's memory as the engine reads and writes it. See docs/DESIGN.md.
//!
//! Uses [`crate::engine`] (the `HostMemory` trait it implements, access flags) and nothing
//! else of this crate. Must not own sockets, threads or a clock.
//!
//! Rooms:
//! - [`memory`]: the host memory the engine reads and writes, through [`fault`]'s routines
//!   that report a fault instead of taking the process down;
//! - [`registration`]: the range check of `ibv_reg_mr`.

pub mod fault;
pub mod memory;
pub mod registration;
