//! Capture verifier behind `urxe check`.
#![forbid(unsafe_code)]
