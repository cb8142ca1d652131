//! urxe: a userspace soft-RoCE (RoCEv2) engine.
//!
//! Layers, each depending only on the ones before it (docs/DESIGN.md):
//! - [`wire`]: zero-copy RoCEv2 headers, the opcode table, PSN arithmetic, ICRC. No I/O.
//! - [`engine`]: the sans-IO transport engine (QPs, requester/responder/completer, MRs, CQs,
//!   SRQs). No sockets, no clock, no threads: time is an argument.
//! - [`transport`]: UDP 4791 sockets, the progress thread, batching, timers.
//! - [`cm`]: the InfiniBand communication manager, sans-IO like the engine (uses [`wire`]).
//! - [`check`]: the capture verifier behind `urxe check`.
//! - [`hostview`]: the /dev and /sys files UCX looks for, for `urxe run` and `urxe setup`.
//! - [`conform`]: scripted RoCEv2 scenarios against a remote peer (`urxe conform`).
//!
//! `unsafe` lives only in `transport` (sockets, the fault-safe memory routines, the group's
//! descriptor passing) and `hostview` (namespace and mount calls); wire, engine, cm, check and
//! conform forbid it. Everywhere: no unsafe operation without its own block, and every block
//! names its invariant in a `// SAFETY:` comment.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod check;
pub mod cm;
pub mod conform;
pub mod engine;
pub mod hostview;
pub mod transport;
pub mod wire;
