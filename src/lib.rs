//! urxe: a userspace soft-RoCE (RoCEv2) engine.
//!
//! Layers, each depending only on the ones before it (docs/DESIGN.md):
//! - [`wire`]: zero-copy RoCEv2 headers, the opcode table, PSN arithmetic, ICRC. No I/O.
//! - [`engine`]: the sans-IO transport engine (QPs, requester/responder/completer, MRs, CQs,
//!   SRQs). No sockets, no clock, no threads: time is an argument.
//! - [`cm`]: the InfiniBand communication manager, sans-IO like the engine (uses [`wire`]).
//! - [`sys`], [`spawn`]: raw system calls and the library's thread start, utilities every layer
//!   above the sans-IO ones (and both C libraries) use.
//! - [`host`]: the application's memory as the engine reads and writes it (fault-safe copies,
//!   the `ibv_reg_mr` range check).
//! - [`observe`]: counters, the `urxe stat` socket, the `URXE_PCAP` capture tap.
//! - [`transport`]: UDP 4791 sockets, their batches, the address a user's processes share.
//! - [`runtime`]: the device the provider calls, the progress thread, pacing, timers; the only
//!   layer that reads the clock.
//!
//! The tools (`urxe check`, `urxe conform`, the /dev and /sys view, the `urxe` binary) are the
//! crate in cli/, so the two drop-in libraries link none of them.
//!
//! `unsafe` lives only in `sys` (raw system calls), `transport` (sockets, the group's descriptor
//! passing), `host` (the fault-safe memory routines), `observe` (the stats socket's
//! credentials) and `runtime` (timers, the device's system calls); wire, engine and cm forbid
//! it. Everywhere: no unsafe operation without its own block, and every block names its
//! invariant in a `// SAFETY:` comment.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cm;
pub mod engine;
pub mod host;
pub mod observe;
pub mod runtime;
pub mod spawn;
pub mod sys;
pub mod transport;
pub mod wire;
