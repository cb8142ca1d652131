//! urxe's tools, kept out of the library that libibverbs.so.1 and librdmacm.so.1 link:
//! - [`check`]: the capture verifier behind `urxe check`.
//! - [`hostview`]: the /dev and /sys files UCX looks for, for `urxe run` and `urxe setup`.
//! - [`conform`]: scripted RoCEv2 scenarios against a remote peer (`urxe conform`).
//!
//! They use the `urxe` library's `wire` (headers, ICRC, checksums) and `transport` (the UDP
//! socket `conform` sends with). `unsafe` lives only in `hostview` (namespace and mount
//! calls); check and conform forbid it. No unsafe operation without its own block, and every
//! block names its invariant in a `// SAFETY:` comment.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod check;
pub mod conform;
pub mod hostview;
