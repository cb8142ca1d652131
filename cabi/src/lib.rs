//! urxe's C-ABI toolkit, shared by the two C libraries (`provider`: libibverbs.so.1, `rdmacm`:
//! librdmacm.so.1) so that they follow one set of conventions:
//!
//! - [`export`](mod@export): the `#[export(CONV)]` / `#[c_fn(CONV)]` attributes every C entry
//!   point goes through (panics never cross into C, the body's `Result` becomes the C
//!   convention, `URXE_TRACE=1` prints failures), the errno helpers and the trace switch.
//!
//! Layer: the C ABI's floor. It knows C conventions, no verb and no protocol.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(clippy::missing_safety_doc)]

pub mod export;
pub mod verbs;
pub mod verbs_layout;

pub use urxe_cabi_macros::{c_fn, export};
