//! Engine layer (sans-IO). See docs/DESIGN.md.
#![forbid(unsafe_code)]
