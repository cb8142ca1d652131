//! Engine layer (sans-IO). See docs/DESIGN.md.
#![forbid(unsafe_code)]

pub mod types;
pub use types::*;
