//! Transport layer: the engine's I/O. UDP 4791 sockets, the progress thread, batching and
//! timers; the only layer that reads the clock. See docs/DESIGN.md.
//!
//! Rooms, from the façade down:
//! - [`device`]: [`Device`], the typed façade the provider calls (post, poll, control), the
//!   engine behind its lock;
//! - `pacing`: when packets move and who is woken to move them (doorbell batching, arming
//!   of packet wakeups, the progress thread's doorbell);
//! - `progress`: the progress thread; `moderation`: how long it naps while a stream arrives;
//! - `hub`: the device's state (the engine and its I/O under one lock) and what application
//!   threads and the progress thread share;
//! - `io`: socket I/O and batching between the engine and the sockets (GSO trains,
//!   sendmmsg/recvmmsg);
//! - [`socket`]: one RoCEv2 UDP socket and its batches (the libc calls);
//! - [`neigh`]: the peer's ARP/NDP entry resolved at a QP's RTR, before its first burst;
//! - `stats`: counters and the `urxe stat` socket; [`cmstat`]: the CM's counters for it;
//! - [`tap`]: the `URXE_PCAP` capture of every packet sent and received;
//! - [`memory`]: the host memory the engine reads and writes, through [`fault`]'s routines
//!   that report a fault instead of taking the process down; [`registration`]: the range check
//!   of `ibv_reg_mr`;
//! - `faultplan`: `URXE_FAULTS`, the fault plan the engine carries out, and its trace;
//! - [`group`]: one address shared by every process of a user (slot sockets, registry,
//!   steering program).

mod away;
mod ccstat;
mod clock;
pub mod cmstat;
mod control;
pub mod device;
pub mod fault;
mod faultplan;
pub mod group;
mod hub;
mod io;
pub mod memory;
mod moderation;
pub mod neigh;
mod pacing;
mod progress;
pub mod registration;
pub mod socket;
pub mod spawn;
mod stats;
pub mod sys;
pub mod tap;

pub use device::{Device, EventSink, PostSend};
pub use stats::TransportCounters;
pub use sys::random_seed;
